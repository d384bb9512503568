/* libFuzzer target: pemu run's and verify's command line (cmd/cmd.h's cmd_run_parse) on
 * argument lists made from the input, one argument a line, the first byte choosing run or
 * verify. Every refusal goes through cli_fail, which the hook turns into a jump back here:
 * the parser must refuse or accept, never crash, overflow or hang. Lists naming --trace
 * or --save are skipped (they create files when the command line is read), and --load
 * and --tp-comm-overlap-cfg (they read one). */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cmd/cli.h"
#include "cmd/cmd.h"

enum { MAX_ARGS = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static jmp_buf back;

static void refused(int code)
{
	longjmp(back, code);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const skip[] = {"trace", "save", "load", "tp-comm-overlap-cfg", NULL};
	char *buf, *argv[MAX_ARGS + 1];
	int argc;

	if (size < 1 || size > 4096)
		return 0;
	argv[0] = data[0] & 1 ? "verify" : "run";
	if (!(buf = fuzz_args(data, size, argv, MAX_ARGS, &argc, skip)))
		return 0;
	cli_exit_hook = refused;
	/* accepted (0, or 1 for --help), or refused with the usage code: nothing else */
	switch (setjmp(back)) {
	case 0: {
		int rc = cmd_run_parse(argc, argv, data[0] & 1);

		FUZZ_CHECK(rc == 0 || rc == 1, "the parser returned neither 0 nor 1");
		FUZZ_CHECK(rc == 0 || fuzz_may_ask_help(argc, argv),
			   "the parser answered --help to a line without it");
		break;
	}
	case CLI_EXIT_USAGE:
		break;
	default:
		FUZZ_CHECK(0, "a refusal with a code other than the usage code");
	}
	cli_exit_hook = NULL;
	free(buf);
	return 0;
}
