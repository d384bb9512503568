/* cli_par: the parallel options of pemu run and verify (Megatron-LM's names with short
 * forms): the mesh's degrees, ZeRO, sequence parallelism, the pipeline schedule and
 * virtual stages, recomputation, Oases's overlap, flash attention, MLP chunks, gradient
 * buckets. It turns
 * them into the parallel fields of a struct run_cfg; it applies no default and checks no
 * rule (run/cfg.h does both): it only reads values, exiting with code 2 on a bad one. */
#ifndef PEMU_CLI_PAR_H
#define PEMU_CLI_PAR_H

#include "cmd/cli.h"
#include "run/cfg.h"

/* Option ids: 100 to 199 (cli_model's are 1 to 99, the cluster's from 1000). */
enum {
	CLI_PAR_DP = 100,
	CLI_PAR_TP,
	CLI_PAR_PP,
	CLI_PAR_CP,
	CLI_PAR_CP_COMM,
	CLI_PAR_CP_LAYOUT,
	CLI_PAR_EP,
	CLI_PAR_DISPATCHER,
	CLI_PAR_ETP,
	CLI_PAR_SCHEDULE,
	CLI_PAR_VPP,
	CLI_PAR_VPP_LAYERS,
	CLI_PAR_RECOMPUTE,
	CLI_PAR_FLASH,
	CLI_PAR_CE_FUSION,
	CLI_PAR_CE_IMPL,
	CLI_PAR_MLP_CHUNKS,
	CLI_PAR_ZERO,
	CLI_PAR_BUCKET,
	CLI_PAR_DDP_BUCKET,
	CLI_PAR_OVERLAP_GRAD,
	CLI_PAR_NO_OVERLAP_GRAD,
	CLI_PAR_OVERLAP_PARAM,
	CLI_PAR_SP,
	CLI_PAR_FOLD,
	CLI_PAR_TP_OVERLAP,
	CLI_PAR_NO_ASYNC_TP,
	CLI_PAR_P2P_SYNC,
	CLI_PAR_PP_SCATTER,
	CLI_PAR_TP_COMM_OVERLAP,
	CLI_PAR_TP_COMM_OVERLAP_CFG,
	CLI_PAR_TP_FIRST,
	CLI_PAR_DIST_OPT,
	CLI_PAR_RECOMPUTE_METHOD,
	CLI_PAR_RECOMPUTE_LAYERS,
};
extern const struct cli_opt cli_par_opts[];

/* The mesh's degrees as given (1 when not). */
struct cli_par {
	int dp, tp, pp, cp, ep;
	int dist_opt;         /* --use-distributed-optimizer */
	int ce_fusion;        /* --cross-entropy-loss-fusion */
	enum ce_impl ce_impl; /* --cross-entropy-fusion-impl (CE_NATIVE unless te) */
};

void cli_par_init(struct cli_par *p);

/* Takes option id with value val if it is one of cli_par_opts (returns 1), else 0: the
 * degrees into p, the rest into cfg. */
int cli_par_opt(struct cli_par *p, struct run_cfg *cfg, const struct cli *c, int id,
		const char *val);

/* After the options: the mesh of p's degrees into cfg->mesh. */
void cli_par_finish(const struct cli_par *p, struct run_cfg *cfg);

/* --tp-comm-overlap-cfg FILE into cfg (cmd/cli_tpo.c): Transformer Engine's defaults,
 * then the file's settings; exits with code 2, naming the file and line, on a bad one. */
void cli_tpo_read(const struct cli *c, const char *path, struct par_tpo_cfg *cfg);

#endif
