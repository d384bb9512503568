/* cli_model: the model and training options; see cli_model.h. */
#include "cmd/cli_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "presets.h"

const struct cli_opt cli_model_opts[] = {
	{"model", 0, 1, CLI_MODEL_MODEL, "NAME",
	 "tiny, small (default), moe-tiny, moe-small, gpt2-124m, gpt2-1.5b, llama-7b-shape, "
	 "gpt3-175b"},
	{"num-layers", 0, 1, CLI_MODEL_LAYERS, "N", "transformer layers"},
	{"hidden-size", 0, 1, CLI_MODEL_HIDDEN, "N", "hidden size h"},
	{"num-attention-heads", 0, 1, CLI_MODEL_HEADS, "N", "attention heads (must divide h)"},
	{"seq-length", 0, 1, CLI_MODEL_SEQ, "N", "sequence length"},
	{"ffn-hidden-size", 0, 1, CLI_MODEL_FFN, "N", "MLP width (default 4h)"},
	{"vocab-size", 0, 1, CLI_MODEL_VOCAB, "N",
	 "vocabulary (the data is bytes: at least 256 to train)"},
	{"num-experts", 0, 1, CLI_MODEL_EXPERTS, "N", "experts in each MoE layer (0: dense)"},
	{"moe-top-k", 0, 1, CLI_MODEL_TOPK, "K", "experts a token is sent to, 1 or 2 (default 2)"},
	{"moe-router-topk", 0, 1, CLI_MODEL_TOPK, "K", "the same as --moe-top-k (Megatron's name)"},
	{"moe-layer-freq", 0, 1, CLI_MODEL_MOE_FREQ, "1",
	 "Megatron's: 1 is every layer MoE (--moe-every 1); its others count from layer 0"},
	{"moe-every", 0, 1, CLI_MODEL_MOE_EVERY, "N", "every Nth layer is MoE (default 2)"},
	{"moe-expert-capacity-factor", 0, 1, CLI_MODEL_CAPACITY, "X",
	 "slots per expert = X * tokens * k / experts; 0 or none: dropless (the MoE presets "
	 "give 1.25; a model made MoE by --num-experts is dropless unless given one)"},
	{"moe-aux-loss-coeff", 0, 1, CLI_MODEL_AUX, "X",
	 "weight of the load-balancing loss (default 0.01)"},
	{"hidden-dropout", 0, 1, CLI_MODEL_HIDDEN_DROPOUT, "P",
	 "dropout on the embeddings and on each branch before its residual add (default 0.1 "
	 "for the GPT-2 and GPT-3 presets, Megatron's; 0 for the others); every layout draws "
	 "the serial model's masks"},
	{"attention-dropout", 0, 1, CLI_MODEL_ATTN_DROPOUT, "P",
	 "dropout on the attention probabilities after the softmax (default as "
	 "--hidden-dropout); every layout draws the serial model's masks, the memory-efficient "
	 "path drawing them again in backward"},
	{"make-vocab-size-divisible-by", 0, 1, CLI_MODEL_VOCAB_DIV, "N",
	 "pad the vocabulary to a multiple of N x tp, as Megatron does (default 128)"},
	{"micro-batch-size", 0, 1, CLI_MODEL_MBS, "N", "sequences per forward pass"},
	{"global-batch-size", 0, 1, CLI_MODEL_GBS, "N",
	 "sequences per step (a multiple of the micro-batch)"},
	{"train-iters", 0, 1, CLI_MODEL_STEPS, "N",
	 "optimizer steps (default 300; 3 in verify and --dry-run); also --steps"},
	{"steps", 0, 1, CLI_MODEL_STEPS, "N", "the same as --train-iters"},
	{"lr", 0, 1, CLI_MODEL_LR, "X", "peak learning rate (default 1e-3)"},
	{"min-lr", 0, 1, CLI_MODEL_MIN_LR, "X",
	 "learning rate at the end of the cosine (default lr/10)"},
	{"lr-warmup-iters", 0, 1, CLI_MODEL_WARMUP, "N", "linear warm-up steps (default 10)"},
	{"lr-decay-iters", 0, 1, CLI_MODEL_DECAY_ITERS, "N",
	 "steps of cosine decay (default: all)"},
	{"weight-decay", 0, 1, CLI_MODEL_WD, "X",
	 "AdamW weight decay on the matrices (default 0.1)"},
	{"adam-beta1", 0, 1, CLI_MODEL_BETA1, "X", "default 0.9"},
	{"adam-beta2", 0, 1, CLI_MODEL_BETA2, "X", "default 0.95"},
	{"clip-grad", 0, 1, CLI_MODEL_CLIP, "X",
	 "global gradient-norm cap, 0 for none (default 1.0)"},
	{"seed", 0, 1, CLI_MODEL_SEED, "N", "initialisation and batch order (default 1234)"},
	{"data", 0, 1, CLI_MODEL_DATA, "FILE",
	 "train on a text file as bytes (default: built-in arithmetic)"},
	{"sample", 0, 1, CLI_MODEL_SAMPLE, "N", "after training, generate N bytes"},
	{"precision", 0, 1, CLI_MODEL_PRECISION, "fp32|bf16",
	 "memory and traffic accounting (default fp32, bf16 in dry-run)"},
	{"bf16", 0, 0, CLI_MODEL_BF16, NULL, "the same as --precision bf16 (Megatron's)"},
	{"accumulate-allreduce-grads-in-fp32", 0, 0, CLI_MODEL_FP32_GRADS, NULL,
	 "bf16: keep and reduce the gradients in fp32, 4 bytes an element in memory and on the "
	 "wire (Megatron-LM's default for bf16; pemu's default is 16-bit gradients, Megatron's "
	 "--grad-reduce-in-bf16)"},
	{"grad-reduce-in-bf16", 0, 0, CLI_MODEL_BF16_GRADS, NULL,
	 "bf16: 16-bit gradients, in memory and on the wire (pemu's default; Megatron-LM's flag, "
	 "which wins over --accumulate-allreduce-grads-in-fp32 as there)"},
	{"max-position-embeddings", 0, 1, CLI_MODEL_MAX_POS, "N",
	 "Megatron's position table rows: at least --seq-length (pemu's table has seq-length)"},
	{"log-interval", 0, 1, CLI_MODEL_LOG, "N", "print every N steps (default: about 30 lines)"},
	{"save", 0, 1, CLI_MODEL_SAVE, "DIR",
	 "save checkpoints into DIR (at the end, and every --save-interval)"},
	{"save-interval", 0, 1, CLI_MODEL_SAVE_INTERVAL, "N", "save every N iterations too"},
	{"load", 0, 1, CLI_MODEL_LOAD, "DIR",
	 "start from DIR's latest checkpoint, saved under any layout; --train-iters is then "
	 "the iteration to reach"},
	{"help", 'h', 0, CLI_MODEL_HELP, NULL, "this help"},
	{NULL, 0, 0, 0, NULL, NULL},
};

void cli_model_init(struct cli_model *m)
{
	memset(m, 0, sizeof *m);
}

int cli_model_opt(struct cli_model *m, struct run_cfg *cfg, const struct cli *c, int id,
		  const char *v)
{
	struct optim_cfg *o = &cfg->opt;

	switch (id) {
	case CLI_MODEL_MODEL:
		m->preset = v;
		break;
	case CLI_MODEL_LAYERS:
	case CLI_MODEL_HIDDEN:
	case CLI_MODEL_HEADS:
	case CLI_MODEL_SEQ:
	case CLI_MODEL_FFN:
	case CLI_MODEL_EXPERTS:
	case CLI_MODEL_TOPK:
	case CLI_MODEL_MOE_EVERY:
	case CLI_MODEL_CAPACITY:
	case CLI_MODEL_AUX:
	case CLI_MODEL_HIDDEN_DROPOUT:
	case CLI_MODEL_ATTN_DROPOUT:
		m->ov[id] = v;
		break;
	case CLI_MODEL_VOCAB:
		m->vocab = (int)cli_int(c, "--vocab-size", v, 2, 1 << 24);
		break;
	case CLI_MODEL_VOCAB_DIV:
		cfg->vocab_div = (int)cli_int(c, "--make-vocab-size-divisible-by", v, 1, 1 << 20);
		break;
	case CLI_MODEL_MBS:
		cfg->mbs = (int)cli_int(c, "--micro-batch-size", v, 1, 1 << 20);
		break;
	case CLI_MODEL_GBS:
		cfg->gbs = (int)cli_int(c, "--global-batch-size", v, 1, 1 << 24);
		break;
	case CLI_MODEL_STEPS:
		cfg->steps = (int)cli_int(c, "--train-iters", v, 1, 100000000);
		break;
	case CLI_MODEL_LR:
		o->lr = (float)cli_double(c, "--lr", v, 0, 10);
		break;
	case CLI_MODEL_MIN_LR:
		o->min_lr = (float)cli_double(c, "--min-lr", v, 0, 10);
		break;
	case CLI_MODEL_WARMUP:
		o->warmup = (int)cli_int(c, "--lr-warmup-iters", v, 0, 100000000);
		break;
	case CLI_MODEL_DECAY_ITERS:
		o->decay_steps = (int)cli_int(c, "--lr-decay-iters", v, 1, 100000000);
		break;
	case CLI_MODEL_WD:
		o->weight_decay = (float)cli_double(c, "--weight-decay", v, 0, 10);
		break;
	case CLI_MODEL_BETA1:
		o->beta1 = (float)cli_double(c, "--adam-beta1", v, 0, 0.999999);
		break;
	case CLI_MODEL_BETA2:
		o->beta2 = (float)cli_double(c, "--adam-beta2", v, 0, 0.999999);
		break;
	case CLI_MODEL_CLIP:
		o->clip = (float)cli_double(c, "--clip-grad", v, 0, 1e9);
		break;
	case CLI_MODEL_SEED:
		cfg->seed = (uint64_t)cli_int(c, "--seed", v, 0, 0x7fffffff);
		break;
	case CLI_MODEL_DATA:
		m->data_path = v;
		break;
	case CLI_MODEL_SAMPLE:
		m->sample = (int)cli_int(c, "--sample", v, 0, 1 << 20);
		break;
	case CLI_MODEL_PRECISION:
		m->prec = v;
		break;
	case CLI_MODEL_MOE_FREQ:
		if (strcmp(v, "1"))
			cli_fail(c,
				 "--moe-layer-freq: '%s' is not 1; Megatron's other frequencies "
				 "count from layer 0 and pemu's --moe-every N makes layers N-1, "
				 "2N-1, "
				 "... MoE",
				 v);
		m->ov[CLI_MODEL_MOE_EVERY] = v;
		break;
	case CLI_MODEL_BF16:
		m->prec = "bf16";
		break;
	case CLI_MODEL_FP32_GRADS:
		cfg->fp32_grads = 1;
		break;
	case CLI_MODEL_BF16_GRADS:
		m->grad_bf16 = 1;
		break;
	case CLI_MODEL_MAX_POS:
		m->max_pos = (int)cli_int(c, "--max-position-embeddings", v, 1, 1 << 22);
		break;
	case CLI_MODEL_LOG:
		cfg->log_every = (int)cli_int(c, "--log-interval", v, 1, 100000000);
		break;
	case CLI_MODEL_SAVE:
		if (!*v)
			cli_fail(c, "--save: the directory name is empty");
		cfg->save = v;
		break;
	case CLI_MODEL_SAVE_INTERVAL:
		cfg->save_interval = (int)cli_int(c, "--save-interval", v, 1, 100000000);
		break;
	case CLI_MODEL_LOAD:
		if (!*v)
			cli_fail(c, "--load: the directory name is empty");
		m->load = v;
		break;
	default:
		return 0;
	}
	return 1;
}

/* The preset named by --model, or exit 2 naming them all. */
static const struct model_preset *find_preset(const struct cli *c, const char *name)
{
	const struct model_preset *mp = model_preset(name);
	struct emu_str s = {0};

	if (mp)
		return mp;
	for (const struct model_preset *p = model_presets; p->name; p++)
		emu_str_addf(&s, "%s%s", p == model_presets ? "" : ", ", p->name);
	cli_fail(c, "--model: unknown preset '%s' (one of: %s)", name, s.s);
}

/* The sizes given, over the preset's. */
static void apply_sizes(const struct cli_model *m, struct gpt_config *g, const struct cli *c)
{
	const char *const *ov = m->ov;

	if (ov[CLI_MODEL_LAYERS])
		g->num_layers = (int)cli_int(c, "--num-layers", ov[CLI_MODEL_LAYERS], 1, 100000);
	if (ov[CLI_MODEL_HIDDEN]) {
		g->hidden = (int)cli_int(c, "--hidden-size", ov[CLI_MODEL_HIDDEN], 1, 1 << 20);
		if (!ov[CLI_MODEL_FFN])
			g->ffn = 4 * g->hidden;
	}
	if (ov[CLI_MODEL_HEADS])
		g->heads =
			(int)cli_int(c, "--num-attention-heads", ov[CLI_MODEL_HEADS], 1, 1 << 16);
	if (ov[CLI_MODEL_SEQ])
		g->seq_len = (int)cli_int(c, "--seq-length", ov[CLI_MODEL_SEQ], 1, 1 << 22);
	if (ov[CLI_MODEL_FFN])
		g->ffn = (int)cli_int(c, "--ffn-hidden-size", ov[CLI_MODEL_FFN], 1, 1 << 24);
	if (ov[CLI_MODEL_EXPERTS]) {
		g->num_experts =
			(int)cli_int(c, "--num-experts", ov[CLI_MODEL_EXPERTS], 0, 1 << 16);
		if (!g->moe_top_k) { /* a dense preset made MoE: the MoE presets' defaults */
			g->moe_top_k = 2;
			g->moe_every = 2;
			g->capacity_factor = 0; /* none given: dropless, as Megatron */
			g->aux_coeff = 0.01f;
		}
	}
	if (ov[CLI_MODEL_TOPK])
		g->moe_top_k = (int)cli_int(c, "--moe-top-k", ov[CLI_MODEL_TOPK], 1, 1 << 16);
	if (ov[CLI_MODEL_MOE_EVERY])
		g->moe_every = (int)cli_int(c, "--moe-every", ov[CLI_MODEL_MOE_EVERY], 1, 1 << 16);
	if (ov[CLI_MODEL_CAPACITY])
		g->capacity_factor = !strcmp(ov[CLI_MODEL_CAPACITY], "none")
					     ? 0.0f /* dropless */
					     : (float)cli_double(c, "--moe-expert-capacity-factor",
								 ov[CLI_MODEL_CAPACITY], 0, 1e6);
	if (ov[CLI_MODEL_AUX])
		g->aux_coeff =
			(float)cli_double(c, "--moe-aux-loss-coeff", ov[CLI_MODEL_AUX], 0, 1e6);
	if (ov[CLI_MODEL_HIDDEN_DROPOUT]) {
		double p = cli_double(c, "--hidden-dropout", ov[CLI_MODEL_HIDDEN_DROPOUT], 0, 1);

		if (p >= 1)
			cli_fail(c,
				 "--hidden-dropout %g: a probability under 1 (1 drops everything)",
				 p);
		g->hidden_dropout = (float)p;
	}
	if (ov[CLI_MODEL_ATTN_DROPOUT]) {
		double p = cli_double(c, "--attention-dropout", ov[CLI_MODEL_ATTN_DROPOUT], 0, 1);

		if (p >= 1)
			cli_fail(c,
				 "--attention-dropout %g: a probability under 1 (1 drops "
				 "everything)",
				 p);
		g->attention_dropout = (float)p;
	}
}

void cli_model_finish(struct cli_model *m, struct run_cfg *cfg, const struct cli *c, int dry_run)
{
	if (m->grad_bf16) /* (over --accumulate-allreduce-grads-in-fp32, as in Megatron-LM) */
		cfg->fp32_grads = 0;
	if (m->preset) {
		cfg->preset = find_preset(c, m->preset);
		cfg->model = cfg->preset->cfg;
	}
	if (m->vocab)
		cfg->model.vocab = m->vocab;
	apply_sizes(m, &cfg->model, c);
	if (m->max_pos && m->max_pos < cfg->model.seq_len)
		cli_fail(
			c,
			"--max-position-embeddings %d is under --seq-length %d: the position table "
			"needs a row for every position",
			m->max_pos, cfg->model.seq_len);
	if (m->prec) {
		if (strcmp(m->prec, "fp32") && strcmp(m->prec, "bf16"))
			cli_fail(c, "--precision: '%s' is not fp32 or bf16", m->prec);
		cfg->prec = strcmp(m->prec, "fp32") ? PREC_BF16 : PREC_FP32;
		cfg->prec_set = 1;
	}
	cfg->data = dry_run ? NULL : &m->data;
}

/* Whether two directory names are the same directory (or name it alike). */
static int same_dir(const char *a, const char *b)
{
	struct stat sa, sb;

	if (!stat(a, &sa) && !stat(b, &sb))
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	return !strcmp(a, b);
}

void cli_model_checkpoint(struct cli_model *m, struct run_cfg *cfg, const struct cli *c, int resume)
{
	char err[4608];
	int iter, got;

	if (!m->load)
		return;
	if (!cfg->data)
		cli_fail(c, "--load: a dry-run holds shapes, not weights (drop --dry-run)");
	if ((got = ckpt_latest(m->load, &iter, err, sizeof err)) < 0)
		cli_fail(c, "%s", err);
	/* (--save's directory made first, so that two spellings of it compare as one) */
	if (!got && cfg->save && ckpt_check_dir(cfg->save, err, sizeof err))
		cli_fail(c, "%s", err);
	if (!got && cfg->save && same_dir(m->load, cfg->save)) {
		fprintf(stderr, "%s: no checkpoint in %s yet: starting from iteration 0\n", c->prog,
			m->load);
		return;
	}
	if (ckpt_load(m->load, &m->ck, err, sizeof err))
		cli_fail(c, "%s", err);
	cfg->step0 = m->ck.iter;
	if (cfg->steps && cfg->steps == cfg->step0) { /* a relaunch of a finished job */
		fprintf(stderr,
			"%s: the checkpoint in %s is at iteration %d, the --train-iters asked: "
			"nothing to train\n",
			c->prog, m->load, cfg->step0);
		if (cli_exit_hook)
			cli_exit_hook(0);
		exit(0);
	}
	if (cfg->steps && cfg->steps < cfg->step0)
		cli_fail(c,
			 "--train-iters %d: the checkpoint in %s is at iteration %d already (with "
			 "--load, --train-iters is the iteration to reach)",
			 cfg->steps, m->load, cfg->step0);
	if (cfg->steps)
		cfg->steps -= cfg->step0;
	else if (resume && m->ck.train_iters > cfg->step0)
		cfg->steps = m->ck.train_iters - cfg->step0;
}

void cli_model_checkpoint_finish(struct cli_model *m, struct run_cfg *cfg, const struct cli *c)
{
	char err[4608], diff[4608];

	if (cfg->save && ckpt_check_dir(cfg->save, err, sizeof err))
		cli_fail(c, "%s", err);
	if (!m->ck.w)
		return;
	if (ckpt_fit(&m->ck, cfg, err, sizeof err))
		cli_fail(c, "%s", err);
	cfg->resume = &m->ck;
	ckpt_differences(&m->ck, cfg, diff, sizeof diff);
	if (diff[0])
		fprintf(stderr,
			"%s: note: the run differs from the one that saved iteration %d (%s): %s\n",
			c->prog, m->ck.iter, m->ck.layout, diff);
}

void cli_model_load(struct cli_model *m, const struct run_cfg *cfg, const struct cli *c)
{
	char err[512];

	if (cfg->data != &m->data)
		return;
	if (!m->data_path)
		data_builtin(&m->data, 1 << 20);
	else if (data_load(&m->data, m->data_path, cfg->model.seq_len, err, sizeof err))
		cli_fail(c, "%s", err);
}

void cli_model_free(struct cli_model *m)
{
	data_free(&m->data);
	if (m->ck.w)
		ckpt_free(&m->ck);
}
