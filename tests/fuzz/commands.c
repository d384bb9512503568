/* libFuzzer target: the command lines of pemu coll, train and plan (cmd/cmd.h), on
 * argument lists made from the input, one argument a line, the first byte choosing the
 * command. Every refusal goes through cli_fail and every accepted line reaches
 * cli_parsed before the command runs anything; the hooks turn both into a jump back here:
 * each parser must refuse or accept, never crash, overflow or hang. Lists naming --trace
 * or --save (which create files as the line is read) or reading a file (--data-path,
 * --vocab-file, --merge-file, --load, --tp-comm-overlap-cfg) are skipped. */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cmd/cli.h"
#include "cmd/cmd.h"

enum { MAX_ARGS = 64, ACCEPTED = 1000 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static jmp_buf back;

static void refused(int code)
{
	longjmp(back, code);
}

static void parsed(void)
{
	longjmp(back, ACCEPTED);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const cmd[] = {"coll", "train", "plan"};
	static const char *const skip[] = {
		"trace", "data-path", "vocab-file",          "merge-file",
		"save",  "load",      "tp-comm-overlap-cfg", NULL};
	char *buf, *argv[MAX_ARGS + 1];
	int argc, which, rc;

	if (size < 1 || size > 4096)
		return 0;
	which = data[0] % 3;
	argv[0] = (char *)cmd[which];
	if (!(buf = fuzz_args(data, size, argv, MAX_ARGS, &argc, skip)))
		return 0;
	cli_exit_hook = refused;
	cli_parsed_hook = parsed;
	/* refused with the usage code, accepted, or --help (0): nothing else */
	switch (setjmp(back)) {
	case 0:
		rc = which == 0   ? cmd_coll(argc, argv)
		     : which == 1 ? cmd_train(argc, argv)
				  : cmd_plan(argc, argv);
		/* only --help returns before cli_parsed, with 0 */
		FUZZ_CHECK(rc == 0, "a command returned an error without cli_fail");
		FUZZ_CHECK(fuzz_may_ask_help(argc, argv),
			   "a command returned before cli_parsed without --help");
		break;
	case CLI_EXIT_USAGE:
	case ACCEPTED:
		break;
	default:
		FUZZ_CHECK(0, "a refusal with a code other than the usage code");
	}
	cli_exit_hook = NULL;
	cli_parsed_hook = NULL;
	free(buf);
	return 0;
}
