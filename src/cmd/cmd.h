/* cmd: the subcommands of the pemu program, each taking its own argv (argv[0] is the
 * subcommand's name) and returning the process exit code: 0 success, 1 a run that failed
 * or found wrong results, 2 bad input. */
#ifndef PEMU_CMD_H
#define PEMU_CMD_H

int cmd_coll(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_verify(int argc, char **argv);

#endif
