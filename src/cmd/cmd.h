/* cmd: the subcommands of the pemu program, each taking its own argv (argv[0] is the
 * subcommand's name) and returning the process exit code: 0 success, 1 a run that failed
 * or found wrong results, 2 bad input. */
#ifndef PEMU_CMD_H
#define PEMU_CMD_H

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

/* OpenBLAS picks its GEMM kernels from the CPU's model, and on a model it does not know
 * (a recent Xeon, or a virtual machine that hides the model) falls back to its baseline
 * x86-64 ones, Prescott's SSE3: on this project's machines (AVX-512) a gpt2-124m train
 * step is then 2.3x slower. When that has happened on a CPU with AVX-512 or AVX2, this
 * runs the program again (argv, from /proc/self/exe) with OPENBLAS_CORETYPE naming the
 * kernels the CPU can run, which OpenBLAS reads when it is loaded; else it returns. A
 * user's OPENBLAS_CORETYPE always stands (tests/golden.sh sets it). Call it first. */
void cmd_blas_kernels(char **argv);

#endif
