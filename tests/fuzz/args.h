/* The fuzz targets' argument lists: the input after its first byte, one argument a line,
 * into argv[1 .. argc) (argv[0] the caller's; at most max arguments); NULL-terminated.
 * Returns the buffer that holds them (free it), or NULL when an argument contains one of
 * the NULL-terminated words of skip (options that open files as they are read). */
#ifndef PEMU_FUZZ_ARGS_H
#define PEMU_FUZZ_ARGS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A broken contract: says which and aborts, so that the fuzzer keeps the input. */
#define FUZZ_CHECK(cond, what)                                                                     \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz: %s\n", (what));                                     \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* Whether argv[1 .. argc) may ask for the help (--help, or -h alone or among short
 * options): the one case a command returns before its line is checked. */
static int fuzz_may_ask_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strncmp(argv[i], "--help", 6) ||
		    (argv[i][0] == '-' && argv[i][1] != '-' && strchr(argv[i], 'h')))
			return 1;
	return 0;
}

static char *fuzz_args(const uint8_t *data, size_t size, char **argv, int max, int *argc,
		       const char *const *skip)
{
	char *buf = malloc(size);

	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = 0;
	*argc = 1;
	for (char *p = buf; *argc < max && p < buf + size - 1;) {
		char *nl = memchr(p, '\n', (size_t)(buf + size - 1 - p));

		if (nl)
			*nl = 0;
		argv[(*argc)++] = p;
		for (int k = 0; skip[k]; k++)
			if (strstr(p, skip[k])) {
				free(buf);
				return NULL;
			}
		if (!nl)
			break;
		p = nl + 1;
	}
	argv[*argc] = NULL;
	return buf;
}

#endif
