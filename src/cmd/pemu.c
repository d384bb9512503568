/* pemu: a GPU training cluster inside one process. This file only dispatches to the
 * subcommands (cmd.h). */
#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cli.h"
#include "cmd/cmd.h"
#include "topo.h"

#define PEMU_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pemu <command> [options]\n\n"
		"pemu emulates a GPU cluster inside one process: each virtual GPU is a line of\n"
		"execution with a memory cap, joined to the others by links with a bandwidth and\n"
		"a latency, and a deterministic virtual clock says how long each operation takes\n"
		"on real hardware.\n\n"
		"commands:\n"
		"  train     the serial reference: train a GPT on one virtual GPU\n"
		"  run       train on the emulated cluster: --dp, --tp, --pp, --schedule, "
		"--zero-stage, ...\n"
		"  verify    the same plus the serial reference, compared; exit 1 on a mismatch\n"
		"  coll      collective benchmark in the manner of nccl-tests\n"
		"  plan      which layout to run: every layout of a model on a cluster in "
		"dry-run,\n"
		"            ranked by step time (--oases: Oases's tensor-parallel degrees)\n"
		"'pemu COMMAND --help' lists a command's options.\n\n"
		"cluster presets (--cluster):");
	for (int i = 0; topo_preset_names[i]; i++) {
		struct topo t;

		topo_preset(topo_preset_names[i], &t);
		fprintf(f, "\n  %-16s %d x %s per node, %s in a node, %s between nodes",
			topo_preset_names[i], t.gpus_per_node, t.gpu.name,
			t.link[TOPO_LINK_INTRA].name, t.link[TOPO_LINK_INTER].name);
	}
	fputc('\n', f);
	cli_print_exit_codes(f, NULL);
}

int main(int argc, char **argv)
{
	cmd_blas_kernels(argv);
	/* OpenBLAS's own threads would fight with the device threads. */
	openblas_set_num_threads(1);
	if (argc < 2) {
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return cli_exit_code(0);
	}
	if (!strcmp(argv[1], "--version")) {
		printf("pemu %s\n", PEMU_VERSION);
		return cli_exit_code(0);
	}
	if (!strcmp(argv[1], "coll"))
		return cli_exit_code(cmd_coll(argc - 1, argv + 1));
	if (!strcmp(argv[1], "train"))
		return cli_exit_code(cmd_train(argc - 1, argv + 1));
	if (!strcmp(argv[1], "run"))
		return cli_exit_code(cmd_run(argc - 1, argv + 1));
	if (!strcmp(argv[1], "verify"))
		return cli_exit_code(cmd_verify(argc - 1, argv + 1));
	if (!strcmp(argv[1], "plan"))
		return cli_exit_code(cmd_plan(argc - 1, argv + 1));
	fprintf(stderr, "pemu: unknown command '%s' (try 'pemu --help')\n", argv[1]);
	return CLI_EXIT_USAGE;
}
