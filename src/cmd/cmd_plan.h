/* cmd/cmd_plan: the pieces of pemu plan's command: the command itself (options, the
 * search, --validate, the winner's trace: cmd_plan.c), its report (the ranked table, the
 * front, JSON: cmd_plan_report.c), a layout in words and as pemu run and Megatron-LM
 * command lines (cmd_plan_lines.c, whose printers cmd.h exports). */
#ifndef PEMU_CMD_CMD_PLAN_H
#define PEMU_CMD_CMD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cmd/cli.h"
#include "run/plan.h"
#include "run/run.h"

enum {
	CLI_PLAN_OASES = 2000,
	CLI_PLAN_GPUS,
	CLI_PLAN_MAX_TP,
	CLI_PLAN_MAX_PP,
	CLI_PLAN_MAX_CP,
	CLI_PLAN_MAX_EP,
	CLI_PLAN_MAX_MBS,
	CLI_PLAN_TOP,
	CLI_PLAN_COMMANDS,
	CLI_PLAN_VALIDATE,
	CLI_PLAN_JOBS,
	CLI_PLAN_SP_OFF,
	CLI_PLAN_LAST
};

/* The options pemu plan adds to pemu run's, and the dimension of the space an option
 * of cli_par or cli_model fixes (-1 if none). */
extern const struct cli_opt cmd_plan_opts[];
int cmd_plan_dim(int id);
/* pemu plan's reader of argv, with every option table it takes. */
struct cli cmd_plan_cli(int argc, char **argv);

/* Names of the enum values a layout prints. */
extern const char *const cmd_plan_recompute_name[];
extern const char *const cmd_plan_cp_comm_name[];
/* The expert tensor-parallel size cfg runs (Megatron's meaning: given explicitly). */
int cmd_plan_etp(const struct run_cfg *cfg);
/* A layout in words: "dp16 tp8 pp8 1f1b mbs1 zero1 rc:full sp". */
void cmd_plan_layout(const struct run_cfg *cfg, char *b, size_t n);

/* A search and what the report needs of it. */
struct plan_cmd {
	int argc;
	char **argv;
	const struct plan_space *s;
	const struct cli_cluster *cc;
	int top, commands, validate, jobs;
	const struct plan_result *r;
	int *passed;               /* [validate] 1 passed, 0 failed, -1 did not run */
	struct verify_result *ver; /* [validate] */
	char (*tiny)[128];         /* [validate] the tiny model in words */
	double t0;                 /* the progress bar's start */
	double last;               /* its last redraw */
};

/* The finished configuration of ranked entry x. */
void cmd_plan_cfg_of(const struct plan_cmd *p, const struct plan_entry *x, struct run_cfg *cfg);
/* The report on stdout, as text or as one JSON object. */
void cmd_plan_print_text(const struct plan_cmd *p);
void cmd_plan_print_json(const struct plan_cmd *p);

#endif
