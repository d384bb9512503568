/* cmd: the subcommands of the pemu program, each taking its own argv (argv[0] is the
 * subcommand's name) and returning the process exit code: 0 success, 1 a run that failed
 * or found wrong results, 2 bad input. */
#ifndef PEMU_CMD_H
#define PEMU_CMD_H

#include <stdio.h>

struct emu_config;
struct run_cfg;

int cmd_coll(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_plan(int argc, char **argv);

/* pemu run's (verify 0) or verify's command line, read and checked as cmd_run and
 * cmd_verify read it, without running anything: 0, or 1 when --help printed the usage.
 * Bad input goes to cli_fail (a fuzzer's cli_exit_hook; the program exits with 2). What
 * it reads is freed before it returns. */
int cmd_run_parse(int argc, char **argv, int verify);
/* The same, the configuration it read into *out (finished: run_cfg_finish called; its
 * data pointer is not to be used). */
int cmd_run_parse_cfg(int argc, char **argv, int verify, struct run_cfg *out);

/* pemu plan's command lines for a layout, finished cfg: cmd_plan_pemu_run prints the
 * pemu run line (pemu plan's argv but its own options and the space's, then the
 * layout's, and --steps 1: the step the plan ranked; escaped for a JSON string with
 * json); cmd_plan_megatron_gap says why Megatron-LM cannot run cfg as pemu does on ec's
 * nodes (NULL if it can), and cmd_plan_megatron prints
 * its line then: torchrun over ec's nodes, pretrain_gpt.py with the model, batch and
 * layout (the data, tokenizer and optimizer arguments are the user's to add). Megatron
 * takes the data-parallel size from the world size; pemu run takes --dp. No newline. */
void cmd_plan_pemu_run(FILE *f, int argc, char **argv, const struct run_cfg *cfg, int json);
const char *cmd_plan_megatron_gap(const struct run_cfg *cfg, const struct emu_config *ec);
void cmd_plan_megatron(FILE *f, const struct run_cfg *cfg, const struct emu_config *ec);

/* pemu plan --oases, after pemu plan has read its options into cfg (not finished), mo
 * and cc (not finished): Oases's search for tensor-parallel degrees. */
struct cli;
struct cli_cluster;
int cmd_plan_oases(int argc, char **argv, const struct cli *c, struct run_cfg *cfg,
		   struct cli_cluster *cc);

/* OpenBLAS picks its GEMM kernels from the CPU's model, and on a model it does not know
 * (a recent Xeon, or a virtual machine that hides the model) falls back to its baseline
 * x86-64 ones, Prescott's SSE3: on this project's machines (AVX-512) a gpt2-124m train
 * step is then 2.3x slower. When that has happened on a CPU with AVX-512 or AVX2, this
 * runs the program again (argv, from /proc/self/exe) with OPENBLAS_CORETYPE naming the
 * kernels the CPU can run, which OpenBLAS reads when it is loaded; else it returns. A
 * user's OPENBLAS_CORETYPE always stands (tests/golden.sh sets it). Call it first. */
void cmd_blas_kernels(char **argv);

/* The host threads a command's kernels may use (models/team.h), ec's devices taking one
 * each: --host-threads N (ec->workers), else OPENBLAS_NUM_THREADS if set, else the
 * host's online cores, at most 256. team_start(cmd_team_threads(ec, n)) gives the
 * threads n devices leave to the kernels of one of them at a time (1: none); dry-run's
 * kernels compute nothing, so 1 there. The numbers are the same on any count. */
int cmd_host_threads(const struct emu_config *ec);
int cmd_team_threads(const struct emu_config *ec, int devices);

#endif
