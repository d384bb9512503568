/* gpt: a GPT-2-style decoder on one virtual device: learned token and position
 * embeddings, L pre-LayerNorm blocks (attention, then an MLP of ffn = 4h GeLU units, each
 * around a residual connection), a final LayerNorm, and the output projection tied to the
 * token embedding (Radford et al. 2019). This is the serial reference every parallel
 * strategy is judged against; models/ knows nothing about parallelism, but each piece is
 * a kernel call a strategy can slice (linear.h, attention.h, ops.h).
 *
 * Parameters, gradients, Adam state and activations are tensors on the device, so memory
 * is accounted by category (param, grad, optim, act; backward scratch as work) and an
 * over-large model ends in the device's OOM report. In dry-run the same calls charge the
 * same time and memory with no data.
 *
 * Ownership: gpt_init allocates everything on the kctx's device; gpt_free returns it. */
#ifndef MODELS_GPT_H
#define MODELS_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"
#include "optim.h"
#include "tensor.h"

struct gpt_config {
	int num_layers;        /* L */
	int hidden;            /* h (C) */
	int heads;             /* a; h % a == 0 */
	int vocab;             /* V */
	int seq_len;           /* s: the sequence trained on, and the rows of the position table */
	int ffn;               /* MLP width, 4h by default (each expert's, in MoE layers) */
	int num_experts;       /* E; 0: a dense model */
	int moe_top_k;         /* choices per token, 1 or 2 */
	int moe_every;         /* layers l with (l + 1) % moe_every == 0 are MoE */
	float capacity_factor; /* slots per expert = floor(cf * tokens * k / E); 0: dropless */
	float aux_coeff;       /* weight of the load-balancing loss */
	float hidden_dropout;  /* Megatron's --hidden-dropout (models/dropout.h); 0: none */
	float attention_dropout; /* --attention-dropout: on the attention probabilities */
};

/* A layer's parameters, in this order; gpt_param(m, l, i) finds one. */
enum gpt_lp {
	LP_LN1W,   /* (h) */
	LP_LN1B,   /* (h) */
	LP_QKVW,   /* (3h, h): rows q of every head, then k, then v */
	LP_QKVB,   /* (3h) */
	LP_PROJW,  /* (h, h) */
	LP_PROJB,  /* (h) */
	LP_LN2W,   /* (h) */
	LP_LN2B,   /* (h) */
	LP_FCW,    /* (ffn, h) */
	LP_FCB,    /* (ffn) */
	LP_FC2W,   /* (h, ffn) */
	LP_FC2B,   /* (h) */
	LP_ROUTER, /* (E, h) in a MoE layer, empty in a dense one */
	LP_N
};
/* In a MoE layer the MLP's four tensors hold every expert: fc.weight (E, ffn, h), fc.bias
 * (E, ffn), fc2.weight (E, h, ffn), fc2.bias (E, h). */

struct gpt_param {
	char name[40];     /* "layers.3.qkv.weight" */
	size_t n;          /* elements */
	int decay;         /* weight decay applies: the matrices */
	struct tensor w;   /* the weight */
	struct tensor g;   /* its gradient, accumulated by backward */
	struct tensor opt; /* Adam's m and v */
};

/* What a block keeps from forward for backward. Shapes for micro-batch B, sequence T. */
struct gpt_layer_acts {
	struct tensor ln1, ln1_mean, ln1_rstd; /* (B, T, h), (B, T), (B, T) */
	struct tensor qkv;                     /* (B, T, 3h) */
	struct tensor att;                     /* (B, a, T, T): softmax scores */
	struct tensor atty;                    /* (B, T, h): attention output */
	struct tensor res2;                    /* (B, T, h): x + attention branch */
	struct tensor ln2, ln2_mean, ln2_rstd; /* (B, T, h), (B, T), (B, T) */
	struct tensor fch, fch_gelu;           /* (B, T, ffn) before and after GeLU (dense) */
	struct moe_acts moe;                   /* the MoE block's (MoE layers) */
	struct tensor res3;                    /* (B, T, h): the block's output */
	struct tensor mask2, mask3; /* (B, T, h) bytes: hidden dropout's masks of the branches */
	struct tensor amask;        /* (B, a, T, T) bytes: attention dropout's mask (standard) */
	struct tensor attd;         /* (B, a, T, T): the probabilities dropped, P' (standard) */
};

struct gpt {
	struct gpt_config cfg;
	struct kctx k;
	int B, T;                  /* micro-batch and sequence length */
	int np;                    /* parameter tensors: 2 + L * LP_N + 2 */
	struct gpt_param *p;       /* [np]: wte (V, h), wpe (s, h), layers, lnf.weight, lnf.bias */
	struct tensor enc;         /* (B, T, h): embeddings */
	struct gpt_layer_acts *la; /* [L] */
	struct tensor lnf, lnf_mean, lnf_rstd; /* (B, T, h), (B, T), (B, T) */
	struct tensor probs;                   /* (B, T, V): logits, then softmax in place */
	struct tensor losses;                  /* (B, T) */
	/* Backward scratch (work): gradients of activations, reused layer by layer. */
	struct tensor dres, dln, tmp, dqkv, datty, dfch, dfch_gelu, dlogits, att_scratch;
	struct moe_scratch moe_scratch; /* if any layer is MoE */
	struct moe_shape moe;           /* the MoE blocks' shape */
	float aux_loss;                 /* the load-balancing losses of the last forward */
	int *tokens, *targets;          /* (B, T) host copies of the last batch */
	/* Hidden dropout: the masks of the embeddings (B, T, h bytes), a branch's gradient
	 * through its mask, the run's seed, the micro-batch's first sequence in the run's
	 * stream of sequences (gpt_forward's caller sets it; models/dropout.h), and 0 while
	 * sampling (no dropout then). */
	struct tensor mask_enc, ddrop;
	uint64_t seed, seq0;
	int train;
};

/* The model's parameter tensors by index: wte, wpe, then LP_N per layer, then lnf weight
 * and bias. Their count, elements, name, whether weight decay applies, and the initial
 * values a seed gives (n floats into out): the one definition the serial model and every
 * parallel strategy build from, so that a shard is cut from the reference's weights. */
int gpt_num_tensors(const struct gpt_config *cfg);
size_t gpt_tensor_numel(const struct gpt_config *cfg, int i);
void gpt_tensor_name(const struct gpt_config *cfg, int i, char *buf, size_t n);
int gpt_tensor_decays(const struct gpt_config *cfg, int i);
void gpt_tensor_init(const struct gpt_config *cfg, uint64_t seed, int i, float *out);

/* Megatron's model FLOPs of one training step on batch sequences, without recomputation
 * (Narayanan et al. 2021; docs/formulas.md): 72 B s L h^2 (1 + s/(6h) + V/(12 L h)). For MFU. */
double gpt_model_flops(const struct gpt_config *cfg, int batch);

/* 1 if layer l of cfg is a MoE layer. */
int gpt_layer_is_moe(const struct gpt_config *cfg, int l);

/* The parameter count of cfg: for a dense model 12 L h^2 + 13 L h + (V + s) h + 2 h (the
 * last is the final LayerNorm, which Megatron's formula leaves out; see
 * tests/test_gpt.c); a MoE layer has E experts' MLPs and a router instead of one MLP. */
size_t gpt_num_params(const struct gpt_config *cfg);

/* Why cfg is not a model, as one line, or 0. */
int gpt_config_check(const struct gpt_config *cfg, char *err, size_t n);

/* Builds the model for micro-batch B on k's device and initialises it from seed (GPT-2's
 * scheme: N(0, 0.02), residual projections scaled by 1/sqrt(2L), LayerNorm 1 and 0,
 * biases 0). 0, or EMU_EOOM with the device's report. */
int gpt_init(struct gpt *m, const struct kctx *k, const struct gpt_config *cfg, int B,
	     uint64_t seed);
void gpt_free(struct gpt *m);

struct gpt_param *gpt_param(struct gpt *m, int layer, enum gpt_lp which);

/* Allocates a block's activations for micro-batch B, sequence T, the parts of it that
 * parts names (GPT_ACTS_*; with GPT_ACTS_FLASH att holds the memory-efficient
 * attention's log-sum-exp, B heads T, instead of the scores): the residual stream is
 * rows x h (rows = B T, or a device's share of the token rows under sequence
 * parallelism; the LayerNorm outputs stay B T rows, gathered, unless GPT_ACTS_LN_ROWS
 * keeps only the device's rows of them), attention hl wide (heads x
 * head size, the heads this device computes), the MLP ffn wide, or a MoE block of shape
 * moe. For a strategy that holds a slice of the layer. 0 or EMU_EOOM. */
enum {
	GPT_ACTS_PRE = 1,           /* ln1 and its statistics, qkv: LayerNorm and QKV projection */
	GPT_ACTS_ATTN = 2,          /* qkv, the scores (or lse), the attention output */
	GPT_ACTS_POST = 4,          /* the attention output, the rest of the layer to its output */
	GPT_ACTS_ALL = 7,           /* the whole layer */
	GPT_ACTS_FLASH = 8,         /* with memory-efficient attention */
	GPT_ACTS_NO_MLP = 16,       /* without the dense MLP's intermediates (chunked MLP) */
	GPT_ACTS_DROPOUT = 32,      /* with the hidden dropout's masks (rows, h bytes) */
	GPT_ACTS_ATTN_DROPOUT = 64, /* with attention dropout's mask and P' (not with FLASH) */
	GPT_ACTS_LN_ROWS = 128,     /* ln1 and ln2: rows x h, not B T x h */
};
int gpt_layer_acts_alloc(const struct kctx *k, struct gpt_layer_acts *a, int B, int T, int rows,
			 int h, int hl, int heads, int ffn, const struct moe_shape *moe,
			 unsigned parts);
/* gpt_layer_acts_alloc allocates what a (zeroed at first) is missing, so that it also
 * brings back tensors given back for recomputation. gpt_layer_acts_free gives back what
 * it took (as much of it as it got). */
void gpt_layer_acts_free(const struct kctx *k, struct gpt_layer_acts *a);

/* Forward on tokens and targets (B, T); returns the mean cross-entropy plus the MoE
 * layers' load-balancing losses (0 in dry-run). */
float gpt_forward(struct gpt *m, const int *tokens, const int *targets);
void gpt_zero_grad(struct gpt *m);
/* Backward of the last forward, adding scale * d(mean loss) to the gradients. */
void gpt_backward(struct gpt *m, float scale);
/* Clips the gradients to o->clip by global norm and takes an AdamW step (1-based step
 * t). Returns the norm before clipping (0 in dry-run). */
double gpt_update(struct gpt *m, const struct optim_cfg *o, int t);

/* Generates n bytes after prompt (execute mode), greedy-free sampling at temperature 1 from
 * (seed); writes them to out. The context is cut to the last T tokens. */
void gpt_sample(struct gpt *m, const int *prompt, int nprompt, int n, uint64_t seed, char *out);

#endif
