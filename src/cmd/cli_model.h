/* cli_model: the model and training options of pemu train, run and verify (Megatron-LM's
 * names): the preset and its sizes, batches, optimizer, seed, precision, the corpus.
 * It turns them into the fields of a struct run_cfg, exiting with code 2 on a value it
 * cannot read. Not the configuration's defaults or rules (run/cfg.h has both); only how
 * sizes given combine with the preset's. */
#ifndef PEMU_CLI_MODEL_H
#define PEMU_CLI_MODEL_H

#include "cmd/cli.h"
#include "data.h"
#include "run/cfg.h"
#include "run/ckpt.h"

/* Option ids: 1 to 99 (cli_par's are 100 to 199, the cluster's from 1000). */
enum {
	CLI_MODEL_MODEL = 1,
	CLI_MODEL_LAYERS,
	CLI_MODEL_HIDDEN,
	CLI_MODEL_HEADS,
	CLI_MODEL_SEQ,
	CLI_MODEL_FFN,
	CLI_MODEL_EXPERTS,
	CLI_MODEL_TOPK,
	CLI_MODEL_MOE_EVERY,
	CLI_MODEL_CAPACITY,
	CLI_MODEL_AUX,
	CLI_MODEL_HIDDEN_DROPOUT,
	CLI_MODEL_ATTN_DROPOUT,
	CLI_MODEL_VOCAB,
	CLI_MODEL_VOCAB_DIV,
	CLI_MODEL_MBS,
	CLI_MODEL_GBS,
	CLI_MODEL_STEPS,
	CLI_MODEL_LR,
	CLI_MODEL_MIN_LR,
	CLI_MODEL_WARMUP,
	CLI_MODEL_DECAY_ITERS,
	CLI_MODEL_WD,
	CLI_MODEL_BETA1,
	CLI_MODEL_BETA2,
	CLI_MODEL_CLIP,
	CLI_MODEL_SEED,
	CLI_MODEL_DATA,
	CLI_MODEL_SAMPLE,
	CLI_MODEL_PRECISION,
	CLI_MODEL_LOG,
	CLI_MODEL_BF16,
	CLI_MODEL_FP32_GRADS,
	CLI_MODEL_BF16_GRADS,
	CLI_MODEL_MAX_POS,
	CLI_MODEL_MOE_FREQ,
	CLI_MODEL_SAVE,
	CLI_MODEL_LOAD,
	CLI_MODEL_SAVE_INTERVAL,
	CLI_MODEL_HELP, /* --help, -h: cli_model_opt leaves it to the command */
};
extern const struct cli_opt cli_model_opts[];

struct cli_model {
	const char *preset;                         /* --model */
	const char *ov[CLI_MODEL_ATTN_DROPOUT + 1]; /* the model's sizes as given, by id */
	int vocab;                                  /* --vocab-size; 0: the preset's */
	const char *prec;      /* --precision; NULL: run_cfg_finish's default */
	const char *data_path; /* --data; NULL: the built-in corpus */
	int sample;            /* --sample N: bytes to generate (pemu train) */
	int max_pos;           /* --max-position-embeddings; 0: not given */
	int grad_bf16;         /* --grad-reduce-in-bf16: 16-bit gradients, whatever else says */
	struct data data;      /* the corpus cfg->data points at, once loaded */
	const char *load;      /* --load DIR */
	struct ckpt ck;        /* its checkpoint, if it held one (ck.w set) */
};

void cli_model_init(struct cli_model *m);

/* Takes option id with value val if it is one of cli_model_opts but --help (returns 1),
 * else 0. Values that need no preset go into cfg at once; the model's sizes wait in m
 * for cli_model_finish, which applies them over the preset whatever their order. */
int cli_model_opt(struct cli_model *m, struct run_cfg *cfg, const struct cli *c, int id,
		  const char *val);

/* After the options: the preset with the sizes given over it into cfg->model (a dense
 * preset given experts takes the MoE presets' router settings; a hidden size given alone
 * brings an MLP of 4h), --precision into cfg->prec, and cfg->data pointed at m->data
 * unless dry_run (the corpus is loaded later, by cli_model_load). */
void cli_model_finish(struct cli_model *m, struct run_cfg *cfg, const struct cli *c, int dry_run);

/* --load and --save, before run_cfg_finish: reads --load's checkpoint (exit 2 if it is
 * not one) and starts cfg from its iteration. --train-iters N is then the iteration to
 * reach, as Megatron's; not given, a run with resume set continues to the saving run's
 * end, and otherwise (or if the saving run had ended) takes the command's default count
 * of steps more. A --load directory with no checkpoint yet is refused, unless it is also
 * --save's (Megatron's relaunch: the first launch starts from iteration 0). */
void cli_model_checkpoint(struct cli_model *m, struct run_cfg *cfg, const struct cli *c,
			  int resume);
/* After run_cfg_finish: fits the checkpoint to cfg's model (exit 2 naming the shape that
 * differs) and points cfg->resume at it; notes on stderr the settings that differ from
 * the saving run's; checks that --save's directory takes files (exit 2). */
void cli_model_checkpoint_finish(struct cli_model *m, struct run_cfg *cfg, const struct cli *c);

/* Loads the corpus into m->data when cfg->data points there (execute mode): --data's
 * file as bytes, or the built-in arithmetic. Exits with code 2 on a file it cannot use. */
void cli_model_load(struct cli_model *m, const struct run_cfg *cfg, const struct cli *c);

/* Frees the corpus. */
void cli_model_free(struct cli_model *m);

#endif
