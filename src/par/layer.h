/* par/layer: a rank's transformer layer as pieces, cut where a collective starts, and the
 * plain executor that walks them. What varies by strategy is not a branch in the pieces
 * but a small table in each layer's plan (par/model.h): the attention (heads, flash;
 * par/attn.c), the MLP (dense, chunked, MoE; par/mlp.c) and the region, Megatron's f and
 * g conjugate pair around the tensor-parallel parts (all-reduce, par/tp.c; all-gather
 * and reduce-scatter, par/sp.c). Not here: which micro-batch runs a piece when (the
 * executors: par_forward_part below, pipe/stage.c, pipe/helix.c).
 *
 *   piece  forward                                    backward
 *   pre    ln1, enter (f)               x -> ln1      ln1's backward into dres
 *   qkv    qkv                          ln1 -> qkv    qkv's input grad, exit (f's bwd)
 *   attn   attention of this rank's heads qkv -> atty attention bwd
 *   proj   proj, exit (g)               atty -> sum   proj bwd into d atty
 *   mid    residual, ln2, enter (f)     -> ln2        ln2's backward, the residual's rows
 *   mlp    the MLP (fc, gelu, fc2), exit (g) -> sum   the MLP's bwd into d ln2, exit
 *   out    residual                     -> res3       the residual's rows for the MLP
 *
 * Each piece ends with at most one collective of the region, so that an executor may
 * post it and run another sub-batch's pieces while it is on the wire (Oases,
 * par/overlap.h): the work's next piece waits for it first (par_work_wait).
 *
 * Shapes (per rank, par/model.h): x, res2, res3 (Ml, h); ln1, ln2 (Ml, h) kept, (B T, h)
 * gathered (par_ln_rows, par_ln_whole);
 * qkv (B T, 3h/t) column shard of q, k, v (this rank's heads); atty (B T, h/t); the
 * branch outputs (B T, h) partial sums until exit. The backward pieces run in the
 * reverse order, out first, passing gradients through the micro-batch's par_work:
 * dres the residual stream's, w->g the rows a row-parallel layer's backward reads,
 * datty, dqkv, dln and w->dl its sum. With weight 0 a backward piece leaves its linear
 * layers' output gradients in the layer's stash, and par_layer_bwd_weight uses them
 * (zero-bubble's W). */
#ifndef PEMU_PAR_LAYER_H
#define PEMU_PAR_LAYER_H

#include "dropout.h"
#include "par/model.h"

enum par_piece { PAR_PRE, PAR_QKV, PAR_ATTN, PAR_PROJ, PAR_MID, PAR_MLP, PAR_OUT, PAR_NPIECES };

/* An attention, on the layer's cut c: forward qkv -> atty (and what backward keeps),
 * backward datty -> dqkv, and what selective recomputation runs again (NULL: nothing to
 * run); d: the layer's attention dropout keyed for this rank's heads and sequences
 * (par_attn_drop; p 0: none), which the attention places at its queries' and keys'
 * global positions. Each returns 0 or a negative enum emu_err (context parallelism's
 * communicate). */
struct par_attn {
	const char *name;
	int (*fwd)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, const struct attn_drop *d);
	int (*bwd)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, const struct attn_drop *d);
	int (*refwd)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, const struct attn_drop *d);
};

/* An MLP of layer l, on its cut c: forward la->ln2 -> w->tmp (partial sums before the region's
 * exit), adding a MoE layer's load-balancing loss to *aux; backward from w->g (the output's
 * gradient rows) into w->dln, with d loss = scale; weight 0 stashes what bwd_weight (NULL
 * if the MLP computes its weight gradients with its input's) needs. */
struct par_mlp {
	const char *name;
	int (*fwd)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, int l, float *aux);
	int (*bwd)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, int l, float scale, int weight, struct par_stash *st);
	void (*bwd_weight)(struct par_model *m, const struct par_tp *c, struct gpt_layer_acts *la,
			   int l, struct par_stash *st);
	/* What backward reads, again from la->ln2 (Oases's recomputation, whose checkpoint
	 * is the MLP's summed output): fc and GeLU, not fc2. NULL: nothing is kept. */
	int (*refwd)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, int l);
};

/* Megatron's f and g (Shoeybi et al. 2019, section 3): enter makes buf (B T, C) whole
 * before a column-parallel layer from this rank's rows (Ml, C), which are buf's own at
 * row0 or elsewhere (par_ln_rows); exit sums the partial
 * (B T, C) of a row-parallel layer into the rows this rank keeps (*out: in partial, or in
 * local (Ml, C)); rows sets w->g to the rows a row-parallel layer's backward reads, from
 * this rank's rows of the residual gradient in w->gsrc (through the branch's dropout, if
 * any); all over the layer's cut c (its group, rows and shapes). Each runs its
 * collective now, or posts it if w posts (par_post_slot). Each returns 0 or a negative
 * enum emu_err. */
struct par_region {
	const char *name;
	int (*enter)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     const float *rows, float *buf, size_t C);
	int (*exit)(struct par_model *m, const struct par_tp *c, struct par_work *w, float *partial,
		    float *local, size_t C, const float **out);
	int (*rows)(struct par_model *m, const struct par_tp *c, struct par_work *w);
};

/* A LayerNorm output of layer cut c (la->ln1 or la->ln2): where this rank's rows (Ml, h)
 * are, and where the whole (B T, h) is once the region's enter has gathered it. Under
 * m->ln_rows the layer keeps its rows alone and the whole is the work's lnw, gathered
 * again in backward (par_ln_gather); else the whole is kept, its rows at row0. */
float *par_ln_rows(const struct par_model *m, const struct par_tp *c, struct tensor *ln);
float *par_ln_whole(const struct par_model *m, struct par_work *w, struct tensor *ln);
/* Backward under m->ln_rows: gathers ln's rows again into w->lnw, over the region rg;
 * posted if post (par_ln_wait waits for it), else now. Nothing otherwise. */
int par_ln_gather(struct par_model *m, const struct par_region *rg, const struct par_tp *c,
		  struct par_work *w, struct tensor *ln, int post);
int par_ln_wait(struct par_model *m, struct par_work *w);

/* Where a region's collective for w goes: *req NULL, run it now; or, if w posts, the
 * request slot of w, once the collective in flight (another work's) has been waited
 * for: one tensor-parallel collective in flight at a time, as Oases orders them. */
int par_post_slot(struct par_model *m, struct par_work *w, struct coll_req ***req);
/* Waits for w's posted collective, if any. 0 or a negative enum emu_err. */
int par_work_wait(struct par_model *m, struct par_work *w);

/* About to read unit u's weights outside par_forward_part (HelixPipe's pieces): tells
 * the use hook, as par_forward_part does before each of its layers. 0 or the hook's
 * error. */
int par_layer_use(struct par_model *m, int u);
/* Layer l's parameters i0 .. i1 - 1 (enum gpt_lp) have their gradients final for this
 * micro-batch outside par_backward_part (HelixPipe's pieces): tells the grad hook, as
 * par_backward_part does after each of its layers. 0 or the hook's error. */
int par_layer_ready(struct par_model *m, int l, int i0, int i1);

/* Forward of piece p of layer l for the micro-batch of a, whose layer input is a->enc
 * (l = a->l0) or the previous layer's output. 0 or a negative enum emu_err. */
int par_layer_fwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l,
		  enum par_piece p);
/* Backward of piece p of layer l with d loss = scale; weight 0: the input pass alone. */
int par_layer_bwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l,
		  enum par_piece p, float scale, int weight);
/* The whole layer's forward, every piece in order. */
int par_layer_fwd_all(struct par_model *m, struct par_work *w, struct par_acts *a, int l);
/* The weight pass of layer l: its linear layers' weight gradients from the stash, which
 * it frees (par_stash_free frees one that will not be used). */
void par_layer_bwd_weight(struct par_model *m, struct par_acts *a, int l);
void par_stash_free(struct par_model *m, struct par_stash *st);

/* The ends of the model. embed: a->tokens to a->enc (this rank's rows); its backward
 * from w->dres into wte and wpe. head: the final LayerNorm of x, the output layer and
 * the loss into a->losses; its backward with d loss = scale into w->dres. */
int par_embed_fwd(struct par_model *m, struct par_work *w, struct par_acts *a);
int par_embed_bwd(struct par_model *m, struct par_work *w, struct par_acts *a);
int par_head_fwd(struct par_model *m, struct par_work *w, struct par_acts *a, const float *x);
int par_head_bwd(struct par_model *m, struct par_work *w, struct par_acts *a, const float *x,
		 float scale);

/* Keeps the micro-batch's tokens and targets (B, T) in a, the targets also local to this
 * rank's vocabulary shard. */
void par_set_batch(struct par_model *m, struct par_acts *a, const int *tokens, const int *targets);
/* The part's loss: the mean cross-entropy if it ran the output layer (head), plus its
 * layers' MoE aux; 0 in dry-run. */
float par_part_loss(const struct par_model *m, const struct par_acts *a, int head);

/* The plain executor. Forward of the layers [a->l0, a->l1): from the embeddings of tokens
 * if l0 = 0, else from a->enc (the previous stage's output); through the loss if l1 = L.
 * *loss gets this part's share of the loss. */
int par_forward_part(struct par_model *m, struct par_acts *a, const int *tokens, const int *targets,
		     float *loss);
/* Backward of layers [a->l0, a->l1) with d loss = scale: from the loss if l1 = L, else
 * from a->dout. input: the backward for the inputs, leaving the input's gradient in
 * m->work[s].dres for sub-batch s (l0 > 0); weight: the weight gradients of the linear layers. Both
 * is the plain backward; input alone stashes what a later call with weight alone uses. */
int par_backward_part(struct par_model *m, struct par_acts *a, float scale, int input, int weight);
/* The whole model (par_model_init with part NULL), on m->own. */
int par_forward(struct par_model *m, const int *tokens, const int *targets, float *loss);
int par_backward(struct par_model *m, float scale);

/* Layer l's input in a: a->enc for its first layer (this rank's part of it under mixed
 * degrees), the parts gathered at the cut after the first layers, else the previous
 * layer's output. */
const float *par_layer_input(const struct par_acts *a, int l);

#endif
