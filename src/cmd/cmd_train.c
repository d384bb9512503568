/* pemu train: the serial reference, the whole model on one virtual GPU. Prints the loss
 * per step with the virtual step time and MFU, memory by category at the end, and with
 * --sample N the text the model writes after training. --dry-run does the same
 * accounting with no data, for any model size. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "clock.h"
#include "cmd/cmd.h"
#include "cmd/report.h"
#include "data.h"
#include "gpt.h"
#include "mem.h"
#include "presets.h"
#include "run/run.h"
#include "trace.h"
#include "units.h"

enum {
	O_MODEL = 1,
	O_LAYERS,
	O_HIDDEN,
	O_HEADS,
	O_SEQ,
	O_FFN,
	O_VOCAB,
	O_MBS,
	O_GBS,
	O_STEPS,
	O_LR,
	O_MIN_LR,
	O_WARMUP,
	O_DECAY_ITERS,
	O_WD,
	O_CLIP,
	O_SEED,
	O_DATA,
	O_SAMPLE,
	O_PRECISION,
	O_LOG,
	O_HELP,
	O_BETA1,
	O_BETA2,
	O_EXPERTS,
	O_TOPK,
	O_MOE_EVERY,
	O_CAPACITY,
	O_AUX,
	O_DP,
	O_TP,
	O_PP,
	O_CP,
	O_EP,
	O_ZERO,
	O_BUCKET,
	O_SP,
	O_VOCAB_DIV,
	O_SCHEDULE,
	O_VPP,
	O_VPP_LAYERS,
	O_RECOMPUTE,
	O_FLASH,
	O_MLP_CHUNKS,
};

static const struct cli_opt train_opts[] = {
	{"model", 0, 1, O_MODEL, "NAME",
	 "tiny, small (default), gpt2-124m, gpt2-1.5b, llama-7b-shape, gpt3-175b"},
	{"num-layers", 0, 1, O_LAYERS, "N", "transformer layers"},
	{"hidden-size", 0, 1, O_HIDDEN, "N", "hidden size h"},
	{"num-attention-heads", 0, 1, O_HEADS, "N", "attention heads (must divide h)"},
	{"seq-length", 0, 1, O_SEQ, "N", "sequence length"},
	{"ffn-hidden-size", 0, 1, O_FFN, "N", "MLP width (default 4h)"},
	{"vocab-size", 0, 1, O_VOCAB, "N", "vocabulary (the data is bytes: at least 256 to train)"},
	{"num-experts", 0, 1, O_EXPERTS, "N", "experts in each MoE layer (0: dense)"},
	{"moe-top-k", 0, 1, O_TOPK, "K", "experts a token is sent to, 1 or 2 (default 2)"},
	{"moe-router-topk", 0, 1, O_TOPK, "K", "the same as --moe-top-k (Megatron's name)"},
	{"moe-every", 0, 1, O_MOE_EVERY, "N", "every Nth layer is MoE (default 2)"},
	{"moe-expert-capacity-factor", 0, 1, O_CAPACITY, "X",
	 "slots per expert = X * tokens * k / experts (default 1.25)"},
	{"moe-aux-loss-coeff", 0, 1, O_AUX, "X",
	 "weight of the load-balancing loss (default 0.01)"},
	{"make-vocab-size-divisible-by", 0, 1, O_VOCAB_DIV, "N",
	 "pad the vocabulary to a multiple of N x tp, as Megatron does (default 128)"},
	{"micro-batch-size", 0, 1, O_MBS, "N", "sequences per forward pass"},
	{"global-batch-size", 0, 1, O_GBS, "N",
	 "sequences per step (a multiple of the micro-batch)"},
	{"train-iters", 0, 1, O_STEPS, "N",
	 "optimizer steps (default 300; 3 in verify and --dry-run); also --steps"},
	{"steps", 0, 1, O_STEPS, "N", "the same as --train-iters"},
	{"lr", 0, 1, O_LR, "X", "peak learning rate (default 1e-3)"},
	{"min-lr", 0, 1, O_MIN_LR, "X", "learning rate at the end of the cosine (default lr/10)"},
	{"lr-warmup-iters", 0, 1, O_WARMUP, "N", "linear warm-up steps (default 10)"},
	{"lr-decay-iters", 0, 1, O_DECAY_ITERS, "N", "steps of cosine decay (default: all)"},
	{"weight-decay", 0, 1, O_WD, "X", "AdamW weight decay on the matrices (default 0.1)"},
	{"adam-beta1", 0, 1, O_BETA1, "X", "default 0.9"},
	{"adam-beta2", 0, 1, O_BETA2, "X", "default 0.95"},
	{"clip-grad", 0, 1, O_CLIP, "X", "global gradient-norm cap, 0 for none (default 1.0)"},
	{"seed", 0, 1, O_SEED, "N", "initialisation and batch order (default 1234)"},
	{"data", 0, 1, O_DATA, "FILE",
	 "train on a text file as bytes (default: built-in arithmetic)"},
	{"sample", 0, 1, O_SAMPLE, "N", "after training, generate N bytes"},
	{"precision", 0, 1, O_PRECISION, "fp32|bf16",
	 "memory and traffic accounting (default fp32, bf16 in dry-run)"},
	{"log-interval", 0, 1, O_LOG, "N", "print every N steps (default: about 30 lines)"},
	{"help", 'h', 0, O_HELP, NULL, "this help"},
	{NULL, 0, 0, 0, NULL, NULL},
};

struct train {
	struct gpt_config cfg;
	const char *model_name;
	int mbs, gbs, steps, log_every, sample, json;
	int vocab_orig; /* the vocabulary before padding */
	uint64_t seed;
	enum prec prec;
	struct optim_cfg opt;
	struct data data;
	/* results, written by the device */
	float *loss;       /* [steps] */
	int64_t *step_ns;  /* [steps] virtual time of each step */
	int64_t *wall_ns;  /* [steps] */
	double flops_step; /* FLOPs charged by the last step */
	char *sample_text;
	size_t nparams;
};

static const struct cli_opt par_opts[] = {
	{"dp", 0, 1, O_DP, "N", "data-parallel size (default 1)"},
	{"data-parallel-size", 0, 1, O_DP, "N", "the same as --dp"},
	{"tp", 0, 1, O_TP, "N", "tensor-parallel size (default 1)"},
	{"tensor-model-parallel-size", 0, 1, O_TP, "N", "the same as --tp"},
	{"pp", 0, 1, O_PP, "N", "pipeline-parallel size: stages of consecutive layers"},
	{"pipeline-model-parallel-size", 0, 1, O_PP, "N", "the same as --pp"},
	{"schedule", 0, 1, O_SCHEDULE, "NAME",
	 "pipeline schedule: gpipe, 1f1b (default), interleaved, zb-h1, zb-h2, helix"},
	{"vpp", 0, 1, O_VPP, "V", "model chunks a stage, for --schedule interleaved (default 2)"},
	{"num-layers-per-virtual-pipeline-stage", 0, 1, O_VPP_LAYERS, "N",
	 "the same given as layers a chunk (Megatron's)"},
	{"recompute", 0, 1, O_RECOMPUTE, "MODE",
	 "activation recomputation: none (default), selective (attention scores), full"},
	{"recompute-granularity", 0, 1, O_RECOMPUTE, "MODE", "the same as --recompute"},
	{"use-flash-attn", 0, 0, O_FLASH, NULL,
	 "memory-efficient attention: no (s, s) scores kept, recomputed in backward"},
	{"mlp-chunks", 0, 1, O_MLP_CHUNKS, "N",
	 "run the MLP over N chunks of rows, keeping none of it for backward (HelixPipe's)"},
	{"cp", 0, 1, O_CP, "N", "context-parallel size (only 1 in this build)"},
	{"context-parallel-size", 0, 1, O_CP, "N", "the same as --cp"},
	{"ep", 0, 1, O_EP, "N", "expert-parallel size (only 1 in this build)"},
	{"expert-model-parallel-size", 0, 1, O_EP, "N", "the same as --ep"},
	{"zero-stage", 0, 1, O_ZERO, "0-3",
	 "ZeRO over dp: 1 shards Adam's state, 2 also gradients, 3 also weights (default 0)"},
	{"bucket-size", 0, 1, O_BUCKET, "SIZE",
	 "data-parallel gradient bucket (default 25MB; stage 3 goes by layer)"},
	{"sequence-parallel", 0, 0, O_SP, NULL,
	 "sequence parallelism: LayerNorm regions split by tokens over tp"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static void usage(FILE *f, int parallel)
{
	if (parallel)
		fprintf(f,
			"usage: pemu run|verify [options]\n\n"
			"run trains on the emulated cluster with a parallel configuration and "
			"reports\n"
			"loss, virtual step time (compute, communication, idle), memory per "
			"device and\n"
			"bytes per collective; verify also runs the serial reference on the "
			"same seed and\n"
			"data and compares losses, first-step gradients and final parameters "
			"(exit 1 on a\n"
			"mismatch).\n\n"
			"  pemu verify --model tiny --dp 2 --tp 2 --zero-stage 1 --steps 3\n"
			"  pemu run --model gpt3-175b --dry-run --tp 8 --dp 16 --zero-stage 1 "
			"--nodes 16\n"
			"  pemu verify --model tiny --num-layers 4 --pp 2 --schedule zb-h1 "
			"--timeline\n"
			"  pemu run --model llama-7b-shape --seq-length 32768 --cluster h20 "
			"--nodes 8 --tp 8 --pp 8\n"
			"      --sequence-parallel --use-flash-attn --schedule helix --recompute "
			"full --dry-run\n\n"
			"Parallel options:\n");
	else
		fprintf(f, "usage: pemu train [options]\n\n"
			   "Trains a GPT on one virtual GPU: the serial reference that every "
			   "parallel\n"
			   "strategy is checked against. Prints the loss per step, the virtual "
			   "step time\n"
			   "and MFU on the emulated GPU, and memory by category.\n\n"
			   "  pemu train --model small --steps 300 --sample 200\n"
			   "  pemu train --model gpt3-175b --dry-run --mem-cap 4TB\n\n");
	if (parallel)
		cli_print_opts(f, par_opts);
	fprintf(f, "%sModel and training options (Megatron-LM's names):\n", parallel ? "\n" : "");
	cli_print_opts(f, train_opts);
	fprintf(f, "\nCluster options%s:\n", parallel ? "" : " (one GPU of the preset is used)");
	cli_print_opts(f, cli_cluster_opts);
}

static int train_device(struct emu_dev *d, void *arg)
{
	struct train *t = arg;
	int accum = t->gbs / t->mbs, BT = t->mbs * t->cfg.seq_len, rc;
	int *tok = calloc((size_t)BT, sizeof *tok), *tgt = calloc((size_t)BT, sizeof *tgt);
	struct kctx k;
	struct gpt m;

	if (!tok || !tgt)
		return emu_dev_fail(d, "out of host memory for a batch");
	kctx_init(&k, d, t->prec);
	rc = gpt_init(&m, &k, &t->cfg, t->mbs, t->seed);
	for (int s = 0; !rc && s < t->steps; s++) {
		int64_t t0 = emu_now(d), w0 = emu_wall_ns();
		double f0 = emu_flops(d), loss = 0;

		gpt_zero_grad(&m);
		for (int a = 0; a < accum; a++) {
			if (!emu_dev_dry_run(d))
				data_batch(&t->data, t->seed, (uint64_t)s * accum + a, t->mbs,
					   t->cfg.seq_len, tok, tgt);
			loss += gpt_forward(&m, tok, tgt) / accum;
			gpt_backward(&m, 1.0f / accum);
		}
		if (!isfinite(loss)) {
			rc = emu_dev_fail(d,
					  "the loss is %g at step %d: training diverged (try a "
					  "lower --lr or --clip-grad)",
					  loss, s + 1);
			break;
		}
		gpt_update(&m, &t->opt, s + 1);
		t->loss[s] = (float)loss;
		t->step_ns[s] = emu_now(d) - t0;
		t->wall_ns[s] = emu_wall_ns() - w0;
		t->flops_step = emu_flops(d) - f0;
		if (!t->json && (s == 0 || s == t->steps - 1 || (s + 1) % t->log_every == 0)) {
			double peak = emu_dev_topo(d)->gpu.peak_flops;
			char lbuf[16];

			if (emu_dev_dry_run(d))
				snprintf(lbuf, sizeof lbuf, "    n/a");
			else
				snprintf(lbuf, sizeof lbuf, "%7.4f", loss);
			printf("step %5d/%d | loss %s | lr %.2e | %9.3f ms/step virtual | MFU "
			       "%5.1f%% | %8.1f ms wall\n",
			       s + 1, t->steps, lbuf, (double)optim_lr(&t->opt, s),
			       (double)t->step_ns[s] / 1e6,
			       100 * gpt_model_flops(&t->cfg, t->gbs) /
				       ((double)t->step_ns[s] / 1e9 * peak),
			       (double)t->wall_ns[s] / 1e6);
			fflush(stdout);
		}
	}
	if (!rc && t->sample > 0 && !emu_dev_dry_run(d)) {
		int prompt = '\n';

		t->sample_text = calloc((size_t)t->sample + 1, 1);
		gpt_sample(&m, &prompt, 1, t->sample, t->seed, t->sample_text);
	}
	free(tok);
	free(tgt);
	gpt_free(&m);
	return rc;
}

/* The sample as text, bytes that are not printable ASCII (control codes a terminal would
 * act on, halves of UTF-8) written as \xNN. */
static void print_sample(FILE *f, const char *text, int n)
{
	fprintf(f, "# sample (%d bytes after a newline; unprintable bytes as \\xNN):\n", n);
	for (int i = 0; i < n; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c == '\n' || (c >= 0x20 && c < 0x7f))
			fputc(c, f);
		else
			fprintf(f, "\\x%02x", c);
	}
	fputc('\n', f);
}

enum cmd_kind { K_TRAIN, K_RUN, K_VERIFY };

static int cmd_model(int argc, char **argv, enum cmd_kind kind)
{
	static const char *const progs[] = {"pemu train", "pemu run", "pemu verify"};
	struct cli c = {
		.prog = progs[kind],
		.argc = argc,
		.argv = argv,
		.i = 1,
		.opts = {train_opts, cli_cluster_opts, kind == K_TRAIN ? NULL : par_opts, NULL}};
	long dp = 1, tp = 1, pp = 1, cp = 1, ep = 1, zero = 0, sp = 0, vocab_div = 128;
	long vpp = 0, vpp_layers = 0, schedule = -1, recompute = 0, flash = 0, mlp_chunks = 1;
	uint64_t bucket = 25000000;
	const char *model = "small", *data_path = NULL, *prec = NULL, *v;
	const char *ov[O_AUX + 1] = {0};
	struct train t = {0};
	struct cli_cluster cc;
	struct emu_cluster *cl;
	const struct model_preset *mp;
	int id, rc, min_lr_set = 0, decay_set = 0;
	char err[512];

	t.steps = 0;
	t.seed = 1234;
	t.mbs = t.gbs = 0;
	optim_defaults(&t.opt);
	cli_cluster_init(&cc);
	while ((id = cli_next(&c, &v))) {
		if (cli_cluster_opt(&cc, id, v))
			continue;
		switch (id) {
		case O_MODEL:
			model = v;
			break;
		case O_LAYERS:
		case O_HIDDEN:
		case O_HEADS:
		case O_SEQ:
		case O_FFN:
		case O_EXPERTS:
		case O_TOPK:
		case O_MOE_EVERY:
		case O_CAPACITY:
		case O_AUX:
			ov[id] = v;
			break;
		case O_VOCAB:
			t.cfg.vocab = (int)cli_int(&c, "--vocab-size", v, 2, 1 << 24);
			break;
		case O_MBS:
			t.mbs = (int)cli_int(&c, "--micro-batch-size", v, 1, 1 << 20);
			break;
		case O_GBS:
			t.gbs = (int)cli_int(&c, "--global-batch-size", v, 1, 1 << 24);
			break;
		case O_STEPS:
			t.steps = (int)cli_int(&c, "--train-iters", v, 1, 100000000);
			break;
		case O_LR:
			t.opt.lr = (float)cli_double(&c, "--lr", v, 0, 10);
			break;
		case O_MIN_LR:
			t.opt.min_lr = (float)cli_double(&c, "--min-lr", v, 0, 10);
			min_lr_set = 1;
			break;
		case O_WARMUP:
			t.opt.warmup = (int)cli_int(&c, "--lr-warmup-iters", v, 0, 100000000);
			break;
		case O_DECAY_ITERS:
			t.opt.decay_steps = (int)cli_int(&c, "--lr-decay-iters", v, 1, 100000000);
			decay_set = 1;
			break;
		case O_WD:
			t.opt.weight_decay = (float)cli_double(&c, "--weight-decay", v, 0, 10);
			break;
		case O_BETA1:
			t.opt.beta1 = (float)cli_double(&c, "--adam-beta1", v, 0, 0.999999);
			break;
		case O_BETA2:
			t.opt.beta2 = (float)cli_double(&c, "--adam-beta2", v, 0, 0.999999);
			break;
		case O_CLIP:
			t.opt.clip = (float)cli_double(&c, "--clip-grad", v, 0, 1e9);
			break;
		case O_SEED:
			t.seed = (uint64_t)cli_int(&c, "--seed", v, 0, 0x7fffffff);
			break;
		case O_DATA:
			data_path = v;
			break;
		case O_SAMPLE:
			t.sample = (int)cli_int(&c, "--sample", v, 0, 1 << 20);
			break;
		case O_PRECISION:
			prec = v;
			break;
		case O_LOG:
			t.log_every = (int)cli_int(&c, "--log-interval", v, 1, 100000000);
			break;
		case O_DP:
			dp = cli_int(&c, "--dp", v, 1, 4096);
			break;
		case O_TP:
			tp = cli_int(&c, "--tp", v, 1, 4096);
			break;
		case O_PP:
			pp = cli_int(&c, "--pp", v, 1, 4096);
			break;
		case O_SCHEDULE:
			if ((schedule = sched_kind_of(v)) < 0)
				cli_fail(&c,
					 "--schedule: '%s' is not gpipe, 1f1b, interleaved, zb-h1, "
					 "zb-h2 or helix",
					 v);
			break;
		case O_FLASH:
			flash = 1;
			break;
		case O_MLP_CHUNKS:
			mlp_chunks = cli_int(&c, "--mlp-chunks", v, 1, 1 << 20);
			break;
		case O_RECOMPUTE:
			if (!strcmp(v, "none"))
				recompute = 0;
			else if (!strcmp(v, "selective"))
				recompute = 1;
			else if (!strcmp(v, "full"))
				recompute = 2;
			else
				cli_fail(&c, "--recompute: '%s' is not none, selective or full", v);
			break;
		case O_VPP:
			vpp = cli_int(&c, "--vpp", v, 1, 4096);
			break;
		case O_VPP_LAYERS:
			vpp_layers = cli_int(&c, "--num-layers-per-virtual-pipeline-stage", v, 1,
					     1 << 20);
			break;
		case O_CP:
			cp = cli_int(&c, "--cp", v, 1, 4096);
			break;
		case O_EP:
			ep = cli_int(&c, "--ep", v, 1, 4096);
			break;
		case O_ZERO:
			zero = cli_int(&c, "--zero-stage", v, 0, 3);
			break;
		case O_BUCKET:
			bucket = cli_size(&c, "--bucket-size", v);
			if (!bucket)
				cli_fail(&c, "--bucket-size must be more than 0 bytes");
			break;
		case O_SP:
			sp = 1;
			break;
		case O_VOCAB_DIV:
			vocab_div = cli_int(&c, "--make-vocab-size-divisible-by", v, 1, 1 << 20);
			break;
		case O_HELP:
			usage(stdout, kind != K_TRAIN);
			return 0;
		}
	}
	if (!(mp = model_preset(model))) {
		struct emu_str s = {0};

		for (const struct model_preset *p = model_presets; p->name; p++)
			emu_str_addf(&s, "%s%s", p == model_presets ? "" : ", ", p->name);
		cli_fail(&c, "--model: unknown preset '%s' (one of: %s)", model, s.s);
	}
	{
		int vocab = t.cfg.vocab;

		t.cfg = mp->cfg;
		if (vocab)
			t.cfg.vocab = vocab;
	}
	t.model_name = mp->name;
	if (ov[O_LAYERS])
		t.cfg.num_layers = (int)cli_int(&c, "--num-layers", ov[O_LAYERS], 1, 100000);
	if (ov[O_HIDDEN]) {
		t.cfg.hidden = (int)cli_int(&c, "--hidden-size", ov[O_HIDDEN], 1, 1 << 20);
		if (!ov[O_FFN])
			t.cfg.ffn = 4 * t.cfg.hidden;
	}
	if (ov[O_HEADS])
		t.cfg.heads = (int)cli_int(&c, "--num-attention-heads", ov[O_HEADS], 1, 1 << 16);
	if (ov[O_SEQ])
		t.cfg.seq_len = (int)cli_int(&c, "--seq-length", ov[O_SEQ], 1, 1 << 22);
	if (ov[O_FFN])
		t.cfg.ffn = (int)cli_int(&c, "--ffn-hidden-size", ov[O_FFN], 1, 1 << 24);
	if (ov[O_EXPERTS]) {
		t.cfg.num_experts = (int)cli_int(&c, "--num-experts", ov[O_EXPERTS], 0, 1 << 16);
		if (!t.cfg.moe_top_k) { /* a dense preset made MoE: the MoE presets' defaults */
			t.cfg.moe_top_k = 2;
			t.cfg.moe_every = 2;
			t.cfg.capacity_factor = 1.25f;
			t.cfg.aux_coeff = 0.01f;
		}
	}
	if (ov[O_TOPK])
		t.cfg.moe_top_k = (int)cli_int(&c, "--moe-top-k", ov[O_TOPK], 1, 1 << 16);
	if (ov[O_MOE_EVERY])
		t.cfg.moe_every = (int)cli_int(&c, "--moe-every", ov[O_MOE_EVERY], 1, 1 << 16);
	if (ov[O_CAPACITY])
		t.cfg.capacity_factor = (float)cli_double(&c, "--moe-expert-capacity-factor",
							  ov[O_CAPACITY], 1e-3, 1e6);
	if (ov[O_AUX])
		t.cfg.aux_coeff = (float)cli_double(&c, "--moe-aux-loss-coeff", ov[O_AUX], 0, 1e6);
	{
		/* Megatron's padded vocabulary: a multiple of divisible-by x tp, so that every
		 * tensor-parallel rank holds as many rows of the embedding. */
		long unit = vocab_div * tp;

		t.vocab_orig = t.cfg.vocab;
		t.cfg.vocab = (int)((t.cfg.vocab + unit - 1) / unit * unit);
	}
	if (gpt_config_check(&t.cfg, err, sizeof err))
		cli_fail(&c, "%s", err);
	if (!t.mbs)
		t.mbs = mp->micro_batch;
	if (!t.gbs) /* a micro-batch per data-parallel replica; a pipeline gets 2 pp */
		t.gbs = t.mbs * (int)dp * (pp > 1 ? 2 * (int)pp : 1);
	if (t.gbs % t.mbs)
		cli_fail(&c, "--global-batch-size %d is not a multiple of --micro-batch-size %d",
			 t.gbs, t.mbs);
	if (kind != K_TRAIN) {
		if (t.sample)
			cli_fail(&c, "--sample: only pemu train generates text");
		if (cp > 1 || ep > 1)
			cli_fail(&c,
				 "--%s %ld: %s parallelism is not in this build yet (dp, ZeRO, tp, "
				 "sp and pp are)",
				 cp > 1 ? "cp" : "ep", cp > 1 ? cp : ep,
				 cp > 1 ? "context" : "expert");
		if (dp * tp * pp > 65536)
			cli_fail(&c,
				 "--dp %ld x --tp %ld x --pp %ld is more devices than pemu runs",
				 dp, tp, pp);
		if (pp == 1 && (vpp > 1 || vpp_layers))
			cli_fail(&c, "--vpp: virtual pipeline stages need --pp > 1");
		if (schedule < 0)
			schedule = vpp > 1 || vpp_layers ? SCHED_INTERLEAVED : SCHED_1F1B;
		if (vpp_layers) {
			if (t.cfg.num_layers % (pp * vpp_layers))
				cli_fail(
					&c,
					"--num-layers-per-virtual-pipeline-stage %ld: pp %ld x %ld "
					"layers a chunk does not divide the %d layers",
					vpp_layers, pp, vpp_layers, t.cfg.num_layers);
			vpp = t.cfg.num_layers / (pp * vpp_layers);
		} else if (!vpp) {
			vpp = schedule == SCHED_INTERLEAVED ? 2 : 1;
		}
		if (vpp > 1 && schedule != SCHED_INTERLEAVED)
			cli_fail(&c, "--vpp %ld: virtual stages need --schedule interleaved", vpp);
		if (pp == 1 && (schedule != SCHED_1F1B || vpp > 1))
			cli_fail(&c, "--schedule %s: a pipeline schedule needs --pp > 1",
				 sched_name((enum sched_kind)schedule));
	}
	cli_cluster_finish(&cc, &c, kind == K_TRAIN ? 1 : (int)(dp * tp * pp));
	t.json = cc.json;
	if (!prec)
		t.prec = cc.cfg.dry_run ? PREC_BF16 : PREC_FP32;
	else if (!strcmp(prec, "fp32") || !strcmp(prec, "bf16"))
		t.prec = strcmp(prec, "fp32") ? PREC_BF16 : PREC_FP32;
	else
		cli_fail(&c, "--precision: '%s' is not fp32 or bf16", prec);
	if (!t.steps) /* verify compares a few steps (DESIGN.md §4); dry-run steps repeat */
		t.steps = kind == K_VERIFY || cc.cfg.dry_run ? 3 : 300;
	if (!min_lr_set)
		t.opt.min_lr = t.opt.lr / 10;
	if (!decay_set)
		t.opt.decay_steps = t.steps;
	if (!t.log_every)
		t.log_every = t.steps > 30 ? t.steps / 30 : 1;
	if (!cc.cfg.dry_run) {
		if (t.cfg.vocab < 256)
			cli_fail(&c,
				 "--vocab-size %d: the data is bytes, so training needs a "
				 "vocabulary of at least 256",
				 t.cfg.vocab);
		if (data_path) {
			if (data_load(&t.data, data_path, t.cfg.seq_len, err, sizeof err))
				cli_fail(&c, "%s", err);
		} else {
			data_builtin(&t.data, 1 << 20);
		}
	}
	if (kind != K_TRAIN) {
		struct run_cfg rc2 = {
			.model = t.cfg,
			.mbs = t.mbs,
			.gbs = t.gbs,
			.steps = t.steps,
			.seed = t.seed,
			.prec = t.prec,
			.opt = t.opt,
			.zero = (int)zero,
			.sp = (int)sp,
			.schedule = (enum sched_kind)(schedule < 0 ? SCHED_1F1B : schedule),
			.vpp = vpp ? (int)vpp : 1,
			.recompute = (int)recompute,
			.flash = (int)flash,
			.mlp_chunks = (int)mlp_chunks,
			.bucket_bytes = bucket,
			.data = cc.cfg.dry_run ? NULL : &t.data,
			.log_every = t.json ? 0 : t.log_every};

		mesh_init(&rc2.mesh, (int)tp, 1, 1, (int)dp, (int)pp);
		if (kind == K_VERIFY && cc.cfg.dry_run)
			cli_fail(&c,
				 "--dry-run: verify compares numbers, so it runs in execute mode");
		if (run_check(&rc2, cc.cfg.ndev, err, sizeof err))
			cli_fail(&c, "%s", err);
		if (!t.json && t.cfg.vocab != t.vocab_orig)
			printf("# vocabulary %d padded to %d, a multiple of %ld (Megatron's "
			       "--make-vocab-size-divisible-by)\n",
			       t.vocab_orig, t.cfg.vocab, vocab_div * tp);
		rc = run_exec(kind == K_VERIFY, &rc2, &cc.cfg, t.model_name, cc.trace_path,
			      cc.timeline, t.json);
		data_free(&t.data);
		return rc;
	}
	t.loss = calloc((size_t)t.steps, sizeof *t.loss);
	t.step_ns = calloc((size_t)t.steps, sizeof *t.step_ns);
	t.wall_ns = calloc((size_t)t.steps, sizeof *t.wall_ns);
	t.nparams = gpt_num_params(&t.cfg);
	if (!t.loss || !t.step_ns || !t.wall_ns)
		emu_die("out of host memory");

	if (!t.json) {
		char pb[32];

		printf("# pemu train: %s, %zu parameters (%.3g B), %d layers, hidden %d, %d heads, "
		       "seq %d, vocab %d\n",
		       t.model_name, t.nparams, (double)t.nparams / 1e9, t.cfg.num_layers,
		       t.cfg.hidden, t.cfg.heads, t.cfg.seq_len, t.cfg.vocab);
		if (t.cfg.vocab != t.vocab_orig)
			printf("# vocabulary %d padded to %d, a multiple of %ld (Megatron's "
			       "--make-vocab-size-divisible-by)\n",
			       t.vocab_orig, t.cfg.vocab, vocab_div * tp);
		if (t.cfg.num_experts)
			printf("# MoE: %d experts, top-%d, in every layer l with (l + 1) %% %d == "
			       "0, "
			       "capacity factor %g, aux loss coefficient %g\n",
			       t.cfg.num_experts, t.cfg.moe_top_k, t.cfg.moe_every,
			       (double)t.cfg.capacity_factor, (double)t.cfg.aux_coeff);
		units_fmt_bytes(pb, sizeof pb,
				cc.cfg.mem_cap ? cc.cfg.mem_cap : cc.cfg.topo.gpu.hbm_bytes);
		printf("# one %s (%.0f TFLOP/s, %s), %s, %s accounting; micro-batch %d, global "
		       "batch %d, %d steps, seed %" PRIu64 "\n",
		       cc.cfg.topo.gpu.name, cc.cfg.topo.gpu.peak_flops / 1e12, pb,
		       cc.cfg.dry_run ? "dry-run (no data)" : "execute",
		       t.prec == PREC_BF16 ? "bf16" : "fp32", t.mbs, t.gbs, t.steps, t.seed);
		if (!cc.cfg.dry_run)
			printf("# data: %s, %zu bytes, unigram entropy %.3f nats\n", t.data.name,
			       t.data.n, data_unigram_entropy(&t.data));
		fflush(stdout);
	}
	cl = emu_cluster_new(&cc.cfg);
	rc = emu_cluster_run(cl, train_device, &t);
	if (rc) {
		fflush(stdout);
		fprintf(stderr, "pemu train: the run failed (%s):\n%s\n", emu_err_name(rc),
			emu_cluster_report(cl));
		if (!t.json)
			report_memory_line(stderr, emu_cluster_dev(cl, 0));
	} else {
		struct emu_dev *d = emu_cluster_dev(cl, 0);
		int64_t step = t.step_ns[t.steps - 1];
		double peak = cc.cfg.topo.gpu.peak_flops,
		       mfu = gpt_model_flops(&t.cfg, t.gbs) / ((double)step / 1e9 * peak);

		if (t.json) {
			printf("{\"command\":\"train\",\"config\":{\"model\":\"%s\",\"num_layers\":"
			       "%d,\"hidden_size\":%d,\"num_attention_heads\":%d,\"seq_length\":%d,"
			       "\"ffn_hidden_size\":%d,\"vocab_size\":%d,\"parameters\":%zu,"
			       "\"micro_batch_size\":%d,\"global_batch_size\":%d,\"steps\":%d,"
			       "\"seed\":%" PRIu64 ",\"precision\":\"%s\",\"cluster\":",
			       t.model_name, t.cfg.num_layers, t.cfg.hidden, t.cfg.heads,
			       t.cfg.seq_len, t.cfg.ffn, t.cfg.vocab, t.nparams, t.mbs, t.gbs,
			       t.steps, t.seed, t.prec == PREC_BF16 ? "bf16" : "fp32");
			report_cluster_json(stdout, &cc.cfg);
			printf("},\"steps\":[");
			for (int s = 0; s < t.steps; s++)
				printf("%s{\"step\":%d,\"loss\":%.9g,\"step_time_s\":%.9g}",
				       s ? "," : "", s + 1, (double)t.loss[s],
				       (double)t.step_ns[s] / 1e9);
			printf("],\"time\":{\"step_time_s\":%.9g,\"compute_s\":%.9g,\"comm_s\":0,"
			       "\"exposed_comm_s\":0,\"bubble_fraction\":0,\"mfu\":%.6g,\"flops_"
			       "per_step\":%.6g,\"model_flops_per_step\":%.6g},",
			       (double)step / 1e9, (double)step / 1e9, mfu, t.flops_step,
			       gpt_model_flops(&t.cfg, t.gbs));
			report_memory_json(stdout, cl, 1);
			printf(",\"comm\":{},\"wall_s\":%.6g",
			       (double)emu_cluster_wall_ns(cl) / 1e9);
			if (t.sample_text) {
				printf(",\"sample\":\"");
				/* Every byte, NUL included; bytes outside printable ASCII as
				 * \u00NN (the byte as a code point), so the JSON stays UTF-8. */
				for (int i = 0; i < t.sample; i++) {
					unsigned char ch = (unsigned char)t.sample_text[i];

					if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
						printf("\\u%04x", ch);
					else
						putchar(ch);
				}
				printf("\"");
			}
			printf("}\n");
		} else {
			printf("# step time %.3f ms virtual (FLOPs charged %.4g, Megatron's count "
			       "%.4g), MFU %.1f%%; wall %.2f s in all\n",
			       (double)step / 1e6, t.flops_step, gpt_model_flops(&t.cfg, t.gbs),
			       100 * mfu, (double)emu_cluster_wall_ns(cl) / 1e9);
			report_memory_line(stdout, d);
			if (t.sample_text)
				print_sample(stdout, t.sample_text, t.sample);
		}
		if (cc.trace_path && trace_write_json(cl, cc.trace_path))
			fprintf(stderr, "pemu train: cannot write trace '%s'\n", cc.trace_path);
		if (cc.timeline)
			trace_timeline(cl, t.json ? stderr : stdout, 100, 1);
	}
	emu_cluster_free(cl);
	data_free(&t.data);
	free(t.loss);
	free(t.step_ns);
	free(t.wall_ns);
	free(t.sample_text);
	return rc ? 1 : 0;
}

int cmd_train(int argc, char **argv)
{
	return cmd_model(argc, argv, K_TRAIN);
}

int cmd_run(int argc, char **argv)
{
	return cmd_model(argc, argv, K_RUN);
}

int cmd_verify(int argc, char **argv)
{
	return cmd_model(argc, argv, K_VERIFY);
}
