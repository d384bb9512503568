/* cli_test: pemu's binary as the command-line tests run it (test_cli.c,
 * test_cli_input.c): a command's output and exit code, and its lines counted. */
#ifndef TESTS_CLI_TEST_H
#define TESTS_CLI_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "common.h"

/* Runs "pemu args", capturing stdout (or stderr with err set) into out; returns the exit
 * code (tests/common.h). */
static inline int run(const char *args, int err, char *out, size_t n)
{
	int rc = test_pemu(args, err, out, n);

	assert_true(rc >= 0);
	return rc;
}

static inline int lines(const char *s)
{
	int k = 0;

	for (; *s; s++)
		k += *s == '\n';
	return k;
}

#endif
