/* cmd: the subcommands of the pemu program, each taking its own argv (argv[0] is the
 * subcommand's name) and returning the process exit code: 0 success, 1 a run that failed
 * or found wrong results, 2 bad input. */
#ifndef PEMU_CMD_H
#define PEMU_CMD_H

int cmd_coll(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_verify(int argc, char **argv);

struct run_cfg;
struct emu_config;
/* cmd_run.c: runs cfg on the cluster ecfg (and with verify, the reference) and prints the
 * report; the exit code. */
int run_exec(int verify, const struct run_cfg *cfg, const struct emu_config *ecfg,
	     const char *model_name, const char *trace_path, int timeline, int json);

#endif
