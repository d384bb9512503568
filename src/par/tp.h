/* par_tp: the GPT of models/gpt.h on one rank of a tensor-parallel group, partitioned as
 * Megatron-LM does (Shoeybi et al. 2019, arXiv 1909.08053, section 3):
 *
 *   QKV and fc         column-parallel: rank r holds rows for its heads / its ffn/tp units
 *   proj and fc2       row-parallel: rank r holds the matching columns; the partial outputs
 *                      are summed by an all-reduce (2 forward, 2 backward per layer)
 *   wte                vocabulary-parallel: rank r holds rows [r V/tp, (r+1) V/tp); the
 *                      embedding is an all-reduce of masked lookups, the cross-entropy is
 *                      computed from per-shard max and sum of exponentials (Megatron's
 *                      vocab-parallel cross-entropy)
 *   MoE experts        each expert's MLP cut like the dense one; the router replicated
 *   LayerNorms, wpe    replicated
 *
 * A row-parallel bias is added once: rank 0 holds it, the others hold zeros they never
 * update, so the all-reduce sums the bias in with the partial products.
 *
 * Sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198): the residual stream,
 * LayerNorms and residual adds run on this rank's share of the token rows; each
 * all-reduce becomes a reduce-scatter into those rows after a row-parallel layer and an
 * all-gather of them before a column-parallel one: the same volume. The rows are a chunk
 * of the flattened (B, T) tokens, which for B = 1 is a chunk of the sequence.
 *
 * With tp = 1 this is the serial model, kernel for kernel (bitwise). Gradients live in one
 * flat buffer, in the order backward finishes them, and a hook is told when each
 * parameter's gradient is final, so data parallelism can all-reduce buckets while
 * backward goes on. */
#ifndef PEMU_PAR_TP_H
#define PEMU_PAR_TP_H

#include <stddef.h>

#include "gpt.h"

enum tp_split { TP_REPLICATED, TP_ROWS, TP_COLS };

struct tp_param {
	int full; /* its index among the serial model's tensors */
	char name[40];
	size_t n;            /* local elements */
	enum tp_split split; /* how it is cut */
	int blocks;          /* row blocks cut separately (3 for qkv: q, k, v) */
	int experts;         /* leading expert dimension, 1 if none */
	size_t rows, cols;   /* one expert's full shape */
	int owner;           /* this rank's copy is part of the model (norm, verify) */
	int partial;         /* sequence parallelism: each rank holds part of the gradient
			      * (LayerNorms, positions), summed over tp by tp_sum_partials */
	int frozen;          /* a row-parallel bias on a rank other than 0: stays zero */
	int decay;           /* weight decay applies */
	float *w;            /* the local shard: a view into the flat weights */
	float *g;            /* its gradient: a view into the flat gradients */
	size_t off;          /* where in both flat buffers */
};

/* Activation recomputation (par_tp.c, drop and regrow). */
enum tp_recompute { TP_RECOMPUTE_NONE, TP_RECOMPUTE_SELECTIVE, TP_RECOMPUTE_FULL };

/* Which part of the model a rank holds: the first pipeline stage holds the embeddings,
 * the last the final LayerNorm and the output layer (the tied wte too), each stage the
 * layers of its blocks (schedule.h). NULL in tp_init: the whole model. */
struct tp_part {
	int first, last;
	const unsigned char *layers; /* [L]: the parts of each layer held (TP_PART_*) */
};
/* A layer's parameters before its attention (ln1, qkv) and after it (the rest). */
enum { TP_PART_PRE = 1, TP_PART_POST = 2 };

/* The weight backward's inputs that backward for the inputs leaves behind (zero-bubble
 * schedules): one layer's output gradients of its four linear layers. */
struct tp_stash {
	struct tensor gproj, dqkv, gfc2, dfc; /* (B T, h), (B T, 3h/t), (B T, h), (B T, f/t) */
};

/* One micro-batch's activations: what forward keeps for backward, for the layers
 * [l0, l1) (la[l] exists for those only). */
struct tp_acts {
	int l0, l1;
	struct tensor enc;         /* (Ml, h): the embeddings, or the input received */
	struct gpt_layer_acts *la; /* [L] */
	struct tensor lnf, lnf_mean, lnf_rstd, probs, losses; /* with the output layer */
	struct tensor dout;           /* (Ml, h): pipeline: the gradient of the output, received */
	struct tensor din2;           /* helix: the other part of the gradient received */
	struct tensor gout_a, gout_x; /* helix: the gradient of the block's input, to send */
	struct tp_stash *stash;       /* [L]: zero-bubble: between B and W */
	int *tokens, *targets, *ltargets; /* (B, T); targets local to the vocab shard, -1 if not */
	float aux_loss;
};

/* Told when parameter i's gradient is final for this micro-batch; i = -1 when backward
 * begins, before any gradient is written. */
typedef int (*tp_grad_hook)(void *ctx, int i);

/* The parameters come in units whose weights are read together: layer l (0 <= l < L),
 * the final LayerNorm (unit L) and the embeddings wte and wpe (unit L + 1). Each unit is
 * one contiguous range of the flat buffers. */
#define TP_UNIT_LNF(m) ((m)->cfg.num_layers)
#define TP_UNIT_EMB(m) ((m)->cfg.num_layers + 1)

/* Told before the weights of unit u are read. A micro-batch reads, in this order:
 * forward EMB, 0, ..., L-1, LNF, EMB (the tied output layer); backward EMB, LNF, L-1,
 * ..., 0 (the embeddings' backward reads no weights). ZeRO-3 gathers units here. */
typedef int (*tp_use_hook)(void *ctx, int u);

struct tp_model {
	struct gpt_config cfg;
	struct kctx k;
	int tp, r;           /* group size and this rank */
	struct emu_group *g; /* the tensor-parallel group */
	int B, T;            /* micro-batch, sequence */
	int NHl, Fl, Vl, v0; /* local heads, ffn units, vocabulary rows, first row */
	int sp;              /* sequence parallelism: the residual stream split by token rows */
	int Ml, row0;        /* this rank's token rows: [row0, row0 + Ml) of B T (all without sp) */
	struct tp_part part; /* what this rank holds (the layers copied) */
	unsigned char *layers; /* [L] part.layers' storage */
	int np;
	struct tp_param *p;    /* [np], in the serial model's order; n = 0 if not held */
	int *order;            /* [np]: parameters in the order backward finishes them */
	size_t nflat;          /* elements in the flat buffers: the local sizes, padded */
	struct tensor weights; /* (nflat): every local weight, in that order */
	struct tensor grads;   /* (nflat): every gradient, in the same order */
	struct tp_acts own;    /* the activations of tp_forward and tp_backward */
	struct tensor dres, dln, tmp, dqkv, datty, dfch, dfch_gelu, dlogits, att_scratch;
	struct tensor ce_max, ce_sums; /* (BT), (BT, 2): vocab-parallel cross-entropy */
	struct tensor drouter;         /* (E, h): one micro-batch's router gradient */
	struct tensor tmpl, dlocal; /* (Ml, h): a branch's rows, a LayerNorm input gradient (sp) */
	struct tensor gfull;        /* (B T, h): the residual gradient gathered (sp) */
	struct moe_shape moe;
	struct moe_scratch moe_scratch;
	tp_grad_hook hook;  /* or NULL */
	tp_use_hook use;    /* or NULL */
	void *hook_ctx;     /* for both */
	int drop_allreduce; /* tests: skip layer 0's forward MLP all-reduce (a broken TP) */
	enum tp_recompute recompute; /* set before tp_init */
	int flash;                   /* memory-efficient attention; set before tp_init */
	int mlp_chunks;              /* chunked MLP (> 1); set before tp_init */
	struct tensor fch_c, fchg_c; /* chunked MLP: one chunk's fc and fc.gelu */
};

/* The unit parameter i belongs to. */
int tp_unit_of(const struct tp_model *m, int i);

/* Why the model cannot be cut tp ways (heads, ffn, vocabulary), one line, or 0. */
int tp_check(const struct gpt_config *cfg, int tp, char *err, size_t n);

/* Builds rank r's shard of the model of seed for micro-batch B on g (tp members). The
 * weights are cut from the serial model's (gpt_tensor_init). Every parameter starts at a
 * multiple of pad elements in the flat buffers (for sharding them evenly pad ways). With
 * zero >= 2 the device is charged for 1/pad of the gradient buffer, with zero = 3 for
 * 1/pad of the weights too: the ZeRO shards (par_dp.h charges the rest while in use).
 * 0 or EMU_EOOM. */
int tp_init(struct tp_model *m, const struct kctx *k, const struct gpt_config *cfg, int B,
	    uint64_t seed, struct emu_group *g, int tp, int r, size_t pad, int sp, int zero,
	    const struct tp_part *part);

/* Sums over the group the gradients this rank holds only part of (sequence parallelism:
 * LayerNorms and positions), within the flat range [lo, hi). Called once the data-parallel
 * sync has summed them over replicas; the order of the two sums does not matter. */
int tp_sum_partials(struct tp_model *m, size_t lo, size_t hi);
void tp_free(struct tp_model *m);

/* Forward of the whole model (tp_init with part NULL), on m->own: the mean loss over
 * the micro-batch (cross-entropy plus MoE aux) into *loss. 0 or a negative enum
 * emu_err. */
int tp_forward(struct tp_model *m, const int *tokens, const int *targets, float *loss);
void tp_zero_grad(struct tp_model *m);
/* Backward with d loss = scale, calling the hook as gradients become final. */
int tp_backward(struct tp_model *m, float scale);

/* A pipeline stage's share: activations for the layers [l0, l1) of one micro-batch
 * (with the output layer's if l1 = L), charged as act memory; tp_acts_free returns
 * them. 0 or EMU_EOOM. */
int tp_acts_alloc(struct tp_model *m, struct tp_acts *a, int l0, int l1);
void tp_acts_free(struct tp_model *m, struct tp_acts *a);
/* Forward of layers [a->l0, a->l1): from the embeddings of tokens if l0 = 0, else from
 * a->enc (the previous stage's output); through the loss if l1 = L. *loss gets this
 * part's share of the loss: the cross-entropy (l1 = L) plus its layers' MoE aux. */
int tp_forward_part(struct tp_model *m, struct tp_acts *a, const int *tokens, const int *targets,
		    float *loss);
/* Backward of layers [a->l0, a->l1) with d loss = scale: from the loss if l1 = L, else
 * from a->dout. input: the backward for the inputs, leaving the input's gradient in
 * m->dres (l0 > 0); weight: the weight gradients of the linear layers. Both at once is
 * the plain backward; input alone keeps the output gradients the weight pass needs in
 * a->stash, and a later call with weight alone uses and frees them (zero-bubble). */
int tp_backward_part(struct tp_model *m, struct tp_acts *a, float scale, int input, int weight);

/* HelixPipe's blocks (schedule.h): block 2c is parameter unit c, block 2l + 1 the
 * attention of layer l. tp_helix_alloc allocates block j's activations in a;
 * tp_helix_fwd runs its forward (*loss: its share, as tp_forward_part's);
 * tp_helix_bwd its backward (weights included) with d loss = scale, leaving the
 * gradient of its input in a->gout_a, a->gout_x. What a block sends and receives, in
 * order, is tp_helix_msg's: its output (ACT, out) or its input (ACT, in), the gradient
 * of its output (GRAD, in) or of its input (GRAD, out); parts[] gets up to 2 tensors,
 * allocated (for what is received) if need be. Returns the number of parts, or a
 * negative enum emu_err. */
int tp_helix_alloc(struct tp_model *m, struct tp_acts *a, int j);
int tp_helix_fwd(struct tp_model *m, struct tp_acts *a, int j, const int *tokens,
		 const int *targets, float *loss);
int tp_helix_bwd(struct tp_model *m, struct tp_acts *a, int j, float scale);
int tp_helix_msg(struct tp_model *m, struct tp_acts *a, int j, int grad, int out,
		 struct tensor **parts);
/* With --recompute full, once block j's output has left: HelixPipe's recomputation
 * without attention. A parameter unit keeps only its inputs (the residual and the
 * attention output) and runs its forward again in backward; an attention block keeps
 * its activations but lets the residual it passed on go. */
void tp_helix_drop(struct tp_model *m, struct tp_acts *a, int j);

/* Copies between parameter i's local shard (local, m->p[i].n) and the full tensor (full,
 * gpt_tensor_numel): to_full 1 writes this rank's part of full, 0 reads it into local. */
void tp_shard_copy(const struct tp_model *m, int i, float *full, float *local, int to_full);
/* The same for the local elements [lo, hi) of the shard only. */
void tp_shard_copy_range(const struct tp_model *m, int i, float *full, float *local, size_t lo,
			 size_t hi, int to_full);

#endif
