/* cli: the option parsing every pemu subcommand shares: a table of options, Megatron-style
 * long names with short forms, "--name value" and "--name=value", and the cluster options
 * (--cluster, --nodes, link and GPU overrides, --mem-cap, --pace, --dry-run, --trace,
 * --timeline, --json). Bad input is one line on stderr and exit code 2 (docs/architecture.md
 * (Errors)). */
#ifndef PEMU_CLI_H
#define PEMU_CLI_H

#include <stdio.h>

#include "cluster.h"
#include "util.h"

struct run_cfg;

#define CLI_EXIT_USAGE  2
#define CLI_EXIT_OUTPUT 74 /* sysexits.h's EX_IOERR: the report or the trace not written */

struct cli_opt {
	const char *name; /* long name without "--" */
	char shortname;   /* 0 if none */
	int has_arg;      /* 1: takes a value */
	int id;           /* returned by cli_next */
	const char *arg;  /* the value's name in --help, "N", "SIZE", ... */
	const char *help; /* one line */
};

struct cli {
	const char *prog; /* "pemu coll", for messages */
	int argc;
	char **argv;
	int i;                         /* next argument */
	const struct cli_opt *opts[5]; /* option tables, NULL-terminated list */
};

/* The next option: its id, with *val its value (or NULL); 0 at the end. An unknown
 * option, a missing value or a stray argument exits with code 2. */
int cli_next(struct cli *c, const char **val);

/* Called by cli_fail in place of exit when set (a fuzzer's: it must not return). */
extern void (*cli_exit_hook)(int code);
/* Called by cli_parsed when set (a fuzzer's: it must not return); cli_parsed is where a
 * command has read and checked its whole command line, before it runs anything. */
extern void (*cli_parsed_hook)(void);
void cli_parsed(void);

/* Prints a one-line error "prog: message" and exits with code 2. */
EMU_NORETURN void cli_fail(const struct cli *c, const char *fmt, ...) EMU_PRINTF(2, 3);

/* Value parsers that exit with code 2 and a clear line on bad input. */
long cli_int(const struct cli *c, const char *opt, const char *val, long min, long max);
uint64_t cli_size(const struct cli *c, const char *opt, const char *val);
double cli_double(const struct cli *c, const char *opt, const char *val, double min, double max);

/* One argument as a shell reads it back, after a space: as is if it is plain, else in
 * single quotes; with json, escaped for a JSON string too. */
void cli_put_arg(FILE *f, const char *a, int json);

/* Prints the options of a table for --help; cli_print_opts_but leaves out those skip
 * says 1 for. */
void cli_print_opts(FILE *f, const struct cli_opt *opts);
void cli_print_opts_but(FILE *f, const struct cli_opt *opts, int (*skip)(int id));
/* The long name of option id in opts ("?" if none). */
const char *cli_opt_name(const struct cli_opt *opts, int id);

/* The cluster options; those of the links, CLI_NODES to CLI_DC_LAT, kept together
 * (cli_link_opt). */
enum {
	CLI_CLUSTER = 1000,
	CLI_NODES,
	CLI_GPUS_PER_NODE,
	CLI_INTRA_BW,
	CLI_INTRA_LAT,
	CLI_INTER_BW,
	CLI_INTER_LAT,
	CLI_NODES_PER_DC,
	CLI_DC_BW,
	CLI_DC_LAT,
	CLI_GPU_FLOPS,
	CLI_GPU_EFF,
	CLI_COST_MODEL,
	CLI_NO_NVLS,
	CLI_INJECT_FAULT,
	CLI_HBM_BW,
	CLI_MEM_CAP,
	CLI_PACE,
	CLI_HOST_THREADS,
	CLI_DRY_RUN,
	CLI_TRACE,
	CLI_TRACE_DEVICES,
	CLI_TIMELINE,
	CLI_JSON,
};
extern const struct cli_opt cli_cluster_opts[];
/* Whether cluster option id describes the links between GPUs (nodes, their bandwidths and
 * latencies, NVLink SHARP), which a run on one GPU (pemu train) has none of. */
int cli_link_opt(int id);

/* A trace keeps devices 0 to 15 unless told: gpt3-175b's step at tp 8 pp 8 is 27 MB of
 * JSON a device (1.75 GB for 64 of them), and Perfetto opens about 1-2 GB. */
#define CLI_TRACE_DEVICES_DEFAULT 16

struct cli_cluster {
	struct emu_config cfg;  /* the cluster, after the options */
	int nodes_given;        /* --nodes was on the command line */
	const char *trace_path; /* --trace FILE, or NULL (it keeps --trace-devices devices,
				 * CLI_TRACE_DEVICES_DEFAULT if not given) */
	int timeline;           /* --timeline */
	int json;               /* --json */
	int no_nvls;            /* --no-nvls */
	/* Overrides, applied after --cluster whatever the order on the command line. */
	const char *preset;
	const char *ov[CLI_JSON - CLI_CLUSTER + 1];
	/* --inject-fault, repeatable: the slowdowns go into cfg, the failures here */
	const char *faults[EMU_MAX_SLOW];
	int nfaults, nfail;
	struct {
		int dev, step;
	} fail[EMU_MAX_SLOW];
};

void cli_cluster_init(struct cli_cluster *cc);
/* Takes option id with value val if it is a cluster option (returns 1), else 0. */
int cli_cluster_opt(struct cli_cluster *cc, int id, const char *val);
/* Builds cc->cfg from the preset and overrides; with devices > 0 and no --nodes, uses
 * as many nodes as devices needs. Exits with code 2 on a bad value. */
void cli_cluster_finish(struct cli_cluster *cc, const struct cli *c, int devices);
/* The --inject-fault failures into cfg (pemu run and verify): each device below the
 * mesh's world and each step from 1 to cfg->steps, else exits with code 2. */
void cli_cluster_faults(const struct cli_cluster *cc, const struct cli *c, struct run_cfg *cfg);

/* Execute mode holds the emulated devices' memory as host memory: refuses (exit 2) a run
 * that needs more than 90% of what the host has available, naming the need (need in
 * all, largest on one device) and what is there, and suggesting --dry-run. need is
 * what the run holds before it fails where its sizing dry-run failed (fails: that
 * failure's first line, which the message names; "" if none). Nothing if the host's
 * figure is unknown or PEMU_HOST_CHECK=off. */
void cli_host_check(const struct cli *c, uint64_t need, uint64_t largest, const char *fails);

/* Writes cl's trace to cc's --trace path, if any, saying on stderr (prog: the command)
 * which devices it keeps when not all; 0, or -1 (said) if it cannot write. */
int cli_write_trace(const struct cli_cluster *cc, const struct emu_cluster *cl, const char *prog);

/* The exit codes, for a command's --help (pemu --help with one NULL): what 1 means for
 * it, then the rest as every command has them. */
void cli_print_exit_codes(FILE *f, const char *one);

/* A command's exit code rc, once its output is out: CLI_EXIT_OUTPUT (said) where rc is 0
 * but the standard output or a --trace file could not be written, so a script that
 * checks the code does not take a lost report for a success. */
int cli_exit_code(int rc);

#endif
