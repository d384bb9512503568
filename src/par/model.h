/* par/model: what one rank computes. The GPT of models/gpt.h cut for this rank (by the
 * strategies of par/tp.h, par/sp.h), its parameters in flat buffers that data
 * parallelism and ZeRO (par/dp.h) reduce and shard, and the activations one micro-batch
 * keeps for its backward. Not here: which micro-batch runs when (the executors: the plain
 * one in par/layer.h, pipelines in pipe/), or which rank is which (run/mesh.h).
 *
 * The configuration is given once, to par_model_init: a par_cfg that every rank shares,
 * the groups this rank talks to, the part of the model it holds, and where its weights
 * come from. Nothing is set before it or changed after it but the hooks, which the
 * strategy that owns the flat buffers (par/dp.c) installs.
 *
 * Per-rank shapes below: B the micro-batch, T this rank's part of each sequence (s, or
 * s / cp under context parallelism, par/cp.h), h the hidden size, f the MLP width, V the
 * vocabulary, a the heads, E the experts, t the tensor-parallel degree; Ml the token rows
 * this rank's residual stream holds (B T, or B T / t under sequence parallelism). */
#ifndef PEMU_PAR_MODEL_H
#define PEMU_PAR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "ops.h"
#include "util.h"

/* Activation recomputation (par/recompute.c). */
enum par_recompute {
	PAR_RECOMPUTE_NONE,
	PAR_RECOMPUTE_SELECTIVE,
	PAR_RECOMPUTE_FULL,
	PAR_RECOMPUTE_OASES
};

/* How a layer's tensor-parallel collectives meet its compute: none, Megatron's order
 * (each waited for where it is issued); oases, two sub-batches interleaved so that one's
 * collective hides behind the other's compute (par/overlap.c). */
enum par_overlap { PAR_OVERLAP_NONE, PAR_OVERLAP_OASES };

/* How context parallelism's attention meets the other ranks' keys and values
 * (par/cp.h; Megatron-Core's --cp-comm-type): the ring, all-gather, Ulysses all-to-all. */
enum par_cp_comm { PAR_CP_P2P, PAR_CP_ALL_GATHER, PAR_CP_A2A };

/* How expert parallelism sends the routed tokens to the experts' ranks (par/ep.h;
 * Megatron-Core's --moe-token-dispatcher-type). */
enum par_ep_dispatch { PAR_EP_ALLTOALL, PAR_EP_ALLGATHER };

/* Whose traffic a collective is, for the statistics (coll_set_tag): the strategies that
 * communicate inside a layer's pieces tag their calls; the rest is untagged. */
enum par_traffic { PAR_TRAFFIC_OTHER, PAR_TRAFFIC_CP, PAR_TRAFFIC_EP, PAR_NTRAFFIC };

/* A deliberate bug, for the tests that show verify catches one (as emu's fault plan
 * drops a collective): context parallelism's chunks in the wrong order on every rank
 * (rows placed at the other chunk's positions), expert parallelism's dispatch split off
 * by one (a row of each rank's first expert sent as its second's), a MoE router whose
 * micro-batch is spread over ranks counting its own rank's choices alone
 * (par/moe_route.c), hidden dropout keyed by a rank's local rows (par/layer.c),
 * attention dropout by a rank's local heads and key positions. */
enum par_bug {
	PAR_BUG_NONE,
	PAR_BUG_CP_CHUNKS,
	PAR_BUG_EP_SPLIT,
	PAR_BUG_MOE_ROUTE,
	PAR_BUG_DROPOUT_LOCAL,     /* dropout keyed by a rank's local rows, not the global tokens */
	PAR_BUG_ATTN_DROPOUT_LOCAL /* attention dropout keyed by a rank's local heads and key
				    * positions (par/layer.c, par/cp.c) */
};

/* The sub-batches a micro-batch is cut into under Oases's overlap. */
#define PAR_NSUB 2

/* Transformer Engine's overlap (--tp-comm-overlap, par/tpo.h): the GEMMs it overlaps, by
 * TE's names, and how each one is (its userbuffers configuration's method, num_sm,
 * num_splits and set_sm_margin). */
enum par_tpo_gemm {
	PAR_TPO_QKV_FPROP,
	PAR_TPO_FC1_FPROP,
	PAR_TPO_PROJ_DGRAD,
	PAR_TPO_FC2_DGRAD, /* the all-gathers before a GEMM: ring exchanges */
	PAR_TPO_PROJ_FPROP,
	PAR_TPO_FC2_FPROP, /* the reduce-scatters after one: pipelines or ring exchanges */
	PAR_TPO_QKV_DGRAD,
	PAR_TPO_FC1_DGRAD,
	PAR_TPO_QKV_WGRAD,
	PAR_TPO_FC1_WGRAD, /* a whole collective beside a GEMM: bulk */
	PAR_TPO_NGEMMS
};

enum par_tpo_method { PAR_TPO_RING, PAR_TPO_PIPELINE, PAR_TPO_BULK };

struct par_tpo_cfg {
	struct par_tpo_ub {
		enum par_tpo_method method;
		int num_sm;        /* the SMs its communication kernels take */
		int num_splits;    /* a pipeline's chunks */
		int set_sm_margin; /* the GEMMs leave num_sm SMs to them (else they contend) */
	} g[PAR_TPO_NGEMMS];
};

/* c with Transformer Engine's defaults for every GEMM (get_default_config: a ring exchange
 * on 1 SM without a margin, a pipeline in 4 chunks and bulk on 16 SMs with one;
 * par/tpo.c). */
void par_tpo_defaults(struct par_tpo_cfg *c);
/* TE's names of the GEMMs ("qkv_fprop", ...) and of the methods ("ring_exchange",
 * "pipeline", "bulk"). */
extern const char *const par_tpo_names[PAR_TPO_NGEMMS];
extern const char *const par_tpo_methods[3];

/* What every rank of a run shares. */
struct par_cfg {
	struct gpt_config model;
	int mbs;                          /* B: sequences a micro-batch */
	enum prec prec;                   /* memory and traffic accounting */
	int tp;                           /* t: the tensor-parallel degree */
	int sp;                           /* sequence parallelism (only with t > 1) */
	int cp;                           /* the context-parallel degree (par/cp.h) */
	enum par_cp_comm cp_comm;         /* and how its attention communicates */
	int cp_contiguous;                /* each rank one contiguous chunk (p2p only): the
					   * unbalanced ring, for comparison */
	int ep;                           /* the expert-parallel degree (par/ep.h) */
	int ep_tp;                        /* the experts whole over the tp group (ep = tp); else
					   * over ep of the dp x cp ranks, cut over tp */
	int ep_rows;                      /* the experts whole over ep of the tp x cp x dp
					   * ranks, each rank routing its own rows (sp) */
	enum par_ep_dispatch ep_dispatch; /* and how tokens reach the experts */
	int zero;                         /* ZeRO stage (>= 2: gradients sharded, 3: weights) */
	int pad;                          /* the data-parallel degree (dp x cp): shards of the flat
					   * buffers */
	int edp;                          /* expert parallelism's expert-data-parallel degree,
					   * the experts' shards (0 without it) */
	enum par_recompute recompute;     /* what a layer keeps between forward and backward */
	int flash;                        /* memory-efficient attention */
	enum ce_impl ce;                  /* the cross-entropy's kernels (models/ops.h) */
	int mlp_chunks;                   /* the dense MLP over this many chunks of rows (> 1) */
	enum par_overlap overlap;         /* the tensor-parallel collectives' order */
	int split_bwd;                    /* the schedule splits backward (zero-bubble's W
					   * passes), which keeps ln1, ln2 and lnf whole
					   * (ln_rows) */
	int tpo;                          /* Transformer Engine's overlap of the sequence-parallel
					   * collectives with the GEMMs (par/tpo.h) */
	struct par_tpo_cfg tpo_cfg;       /* and its methods, each GEMM's */
	int sync_dgrad;                   /* a column-parallel layer's input-gradient collective
					   * after its weight gradient, exposed (Megatron-LM's
					   * before 2022), not posted before it (par/layer.c) */
	int tpf_layers, tpf;              /* Oases's mixed degrees: the first tpf_layers layers
					   * cut tpf ways (tpf divides tp), 0 if none */
	uint64_t bucket_bytes;            /* data-parallel gradient buckets (par/dp.h): at
					   * most this many bytes at the weights' width, */
	uint64_t bucket_params;           /* or parameters; both 0: the default */
	int buckets;                      /* ZeRO 0-1: the first chunk in buckets (an overlap
					   * needs them); else one bucket a chunk */
	int chunks;                       /* model chunks a rank (interleaved's), each its own
					   * buckets */
	int fp32_grads;                   /* gradients kept and reduced in fp32 under bf16
					   * (Megatron-LM's --accumulate-allreduce-grads-in-fp32):
					   * the clock and memory only (kctx.gb) */
	int overlap_param_gather;         /* ZeRO 1-2: the updated weights' all-gathers
					   * overlap the next step's forward (par/dp.h) */
	enum par_bug bug;                 /* for tests: a bug verify must catch, or none */
	/* Hidden dropout's keys (models/dropout.h): the run's seed, and the data's index of
	 * the first micro-batch of this run (a resumed run's iteration times its micro-batches
	 * a step), to which an executor's micro-batch index adds (par_acts_begin). */
	uint64_t seed, batch0;
};

/* Where this rank runs and whom it talks to. */
struct par_groups {
	struct emu_dev *dev;
	struct emu_group *tp; /* the tensor-parallel group (t members) */
	int tp_rank;          /* this rank's place in it */
	struct emu_group *dp; /* the group gradients are reduced over (pad members; par/dp.h):
			       * data parallelism's, times context parallelism's */
	int dp_rank;          /* this rank's place in it */
	struct emu_group *cp; /* the context-parallel group (cp members), or NULL if cp 1 */
	int cp_rank;          /* this rank's place in it */
	/* Expert parallelism (ep > 1): the ranks that hold the other experts of a layer, and
	 * the ranks that hold the same ones (the expert-data-parallel group, over which the
	 * experts' gradients are reduced) */
	struct emu_group *ep, *edp;
	int ep_rank, edp_rank;
	/* MoE layers whose micro-batch is routed by several ranks (par/moe_route.c): the cp
	 * group, or the tp x cp group when each rank routes its own rows, or NULL */
	struct emu_group *route;
	int route_rank;
	struct emu_group *pp; /* the pipeline group, or NULL (the norm sums over it) */
	/* With mixed degrees (tpf_layers > 0): the tpf ranks of the tp group this rank
	 * shares the first layers with, and the tp / tpf ranks that hold the same shard of
	 * them (each on its part of the batch), ordered by part */
	struct emu_group *tpf, *merge;
};

/* Which part of the model a rank holds: the first pipeline stage holds the embeddings,
 * the last the final LayerNorm and the output layer (the tied wte too), each stage the
 * parts of the layers its blocks run. */
struct par_part {
	int first, last;
	const unsigned char *layers; /* [L]: the parts of each layer held (PAR_PART_*) */
};
/* A layer's parameters before its attention (ln1, qkv) and after it (the rest). */
enum { PAR_PART_PRE = 1, PAR_PART_POST = 2 };

/* Where the weights come from: cut from the serial model of this seed (gpt_tensor_init),
 * so that every shard is the reference's; or, with full, from the serial model's full
 * tensors full[np] (a checkpoint's, run/ckpt.h), cut the same way. */
struct par_source {
	uint64_t seed;
	float *const *full; /* or NULL */
};

enum par_split { PAR_REPLICATED, PAR_ROWS, PAR_COLS };

/* Whose part of a gradient a rank holds: none; sequence parallelism's rows (LayerNorms,
 * positions), summed over the tp group; a first layer's under mixed degrees, whose parts
 * of the batch are summed over the merge group. */
enum { PAR_PARTIAL_NONE, PAR_PARTIAL_TP, PAR_PARTIAL_MERGE };

struct par_param {
	int full;             /* its index among the serial model's tensors */
	size_t n;             /* local elements */
	enum par_split split; /* how it is cut */
	int blocks;           /* row blocks cut separately (3 for qkv: q, k, v) */
	int experts;          /* leading expert dimension, 1 if none */
	size_t rows, cols;    /* one expert's full shape */
	int owner;            /* this rank's copy is part of the model (norm, verify) */
	int partial;          /* PAR_PARTIAL_*: each rank holds part of the gradient, summed by
			       * par_tp_sum_partials once a step */
	int t, q;             /* cut t ways (1: replicated), this rank's shard q */
	int frozen;           /* a row-parallel bias on a rank other than 0: stays zero */
	int expert;           /* expert parallelism: experts [e0, e0 + experts) of the layer's,
			       * reduced over the expert-data-parallel group */
	int e0;
	int decay;  /* weight decay applies */
	float *w;   /* the local shard: a view into the flat weights */
	float *g;   /* its gradient: a view into the flat gradients */
	size_t off; /* where in both flat buffers */
};

/* The weight pass's inputs that the input pass of a split backward (zero-bubble) leaves
 * behind: one layer's output gradients of its four linear layers. */
struct par_stash {
	struct tensor gproj; /* (B T, h): d proj out */
	struct tensor dqkv;  /* (B T, 3h/t): d qkv, this rank's heads */
	struct tensor gfc2;  /* (B T, h): d fc2 out */
	struct tensor dfc;   /* (B T, f/t): d fc out, this rank's columns */
};

/* One micro-batch's activations: what forward keeps for backward, for the layers
 * [l0, l1) (par_la(a, l) for those only), and what crosses a pipeline cut. Under Oases's
 * overlap a micro-batch is nsub sub-batches of B sequences each, one par_acts each in sub
 * (par_sub), and holds nothing itself. */
struct par_acts {
	int l0, l1;
	int nsub;             /* 0, or the sub-batches in sub */
	struct par_acts *sub; /* [nsub] */
	/* Mixed degrees: layer l0's input is enc from enc_off (this rank's part of the
	 * batch), and layer cut's (l0 < cut <= l1, else -1) is cutbuf (Ml, h), the parts
	 * gathered */
	size_t enc_off;
	int cut;
	struct tensor cutbuf;
	struct tensor enc;                /* (Ml, h): the embeddings, or the input received */
	struct gpt_layer_acts *la;        /* [l1 - l0]: layers l0 .. l1 - 1 (par_la) */
	struct tensor lnf;                /* the final LayerNorm: (Ml, h) this rank's rows
					   * under m->ln_rows, else (B T, h) all rows */
	struct tensor lnf_mean, lnf_rstd; /* (Ml), (Ml) */
	struct tensor probs;              /* (B T, V/t): logits, then probabilities */
	struct tensor losses;             /* (B T) */
	struct tensor dout;               /* (Ml, h): pipeline: the output's gradient, received */
	struct tensor din2;               /* helix: the other part of the gradient received */
	struct tensor gout_a, gout_x;     /* helix: the gradient of the block's input, to send */
	struct par_stash *stash;          /* [l1 - l0]: zero-bubble: between B and W */
	int *tokens, *targets;            /* (B, T) */
	int *ltargets;                    /* (B, T): targets local to the vocab shard, -1 if not */
	float aux_loss;                   /* the MoE layers' load-balancing losses */
	uint64_t seq0;                    /* its first sequence in the run's stream of them
					   * (hidden dropout's keys; par_acts_begin) */
	struct tensor mask_enc;           /* (Ml, h) bytes: the embeddings' dropout mask */
};

/* Layer l's activations and stash in a (l0 <= l < l1). */
static inline struct gpt_layer_acts *par_la(const struct par_acts *a, int l)
{
	EMU_ASSERT(l >= a->l0 && l < a->l1);
	return &a->la[l - a->l0];
}

static inline struct par_stash *par_stash_at(const struct par_acts *a, int l)
{
	EMU_ASSERT(l >= a->l0 && l < a->l1);
	return &a->stash[l - a->l0];
}

/* Sub-batch s of a (a itself when it is not cut), and how many there are (1 if not). */
static inline struct par_acts *par_sub(struct par_acts *a, int s)
{
	EMU_ASSERT(s < (a->nsub ? a->nsub : 1));
	return a->nsub ? &a->sub[s] : a;
}

static inline int par_nsub(const struct par_acts *a)
{
	return a->nsub ? a->nsub : 1;
}

/* Whether a holds activations (par_acts_alloc ran and par_acts_free did not). */
static inline int par_acts_held(const struct par_acts *a)
{
	return a->la || a->sub;
}

struct coll_req;

/* The scratch that travels with one (sub-)batch in flight: gradients of activations,
 * reused layer by layer, and the buffers collectives fill. One per (sub-)batch that can be
 * in a layer at once: 1, or Oases's PAR_NSUB interleaved sub-batches. */
struct par_work {
	struct tensor dres;          /* (Ml, h): the residual stream's gradient */
	struct tensor tmpl, dlocal;  /* (Ml, h), sp: a branch's rows, a LayerNorm's input grad */
	struct tensor gfull;         /* (B T, h), sp: the residual gradient gathered */
	struct tensor lnw;           /* (B T, h), ln_rows: a LayerNorm output gathered */
	struct tensor tpo_rs;        /* (Ml, h), --tp-comm-overlap: the reduce-scatter's chunks
				      * (par/tpo.h) */
	struct tensor dln;           /* (B T, h): a LayerNorm output's gradient */
	struct tensor tmp;           /* (B T, h): a branch's output, partial sums before g */
	struct tensor dqkv;          /* (B T, 3h/t): column shard of d q, k, v */
	struct tensor datty;         /* (B T, h/t): column shard of d attention out */
	struct tensor fch_c, fchg_c; /* (B T / chunks, f/t): chunked MLP: one chunk's fc */
	struct tensor dfch;          /* (B T, f/t), or a chunk's: column shard of d fc */
	struct tensor dfch_gelu;     /* the same for d fc.gelu */
	struct tensor dlogits;       /* (B T, V/t): vocabulary shard of d logits */
	struct tensor att_scratch;   /* (T, T), or flash's 2 blocks of rows */
	struct tensor ce_max;        /* (B T), t > 1: vocab-parallel cross-entropy's max */
	struct tensor ce_sums;       /* its target logits (B T), then its sums of exponentials
				      * (B T); Transformer Engine's: the rows' (max, sum,
				      * target logit), this rank's then every rank's (B T, 3,
				      * t + 1). fp32, as Megatron's and TE's are */
	struct tensor drouter;       /* (E, h): one micro-batch's router gradient */
	struct tensor kv[2], dkv[3]; /* context parallelism's KV buffers, by comm type (par/cp.c) */
	struct tensor bout, blse;    /* (B T, h/t), (B, a/t, T), the ring: a block's out, lse */
	struct tensor ep[5];         /* expert parallelism's row buffers (par/ep.c) */
	struct tensor ep_dh, ep_dpre; /* (ep cap, f): an expert's backward scratch */
	struct tensor ep_meta;        /* routing and counts sent between ranks */
	struct tensor route_cnt;      /* the routing counts of every rank routing the
				       * micro-batch (cp, tp x cp; par/moe_route.c) */
	struct moe_scratch moe_scratch;
	struct tensor ddrop;  /* (Ml, h), hidden dropout: a branch's gradient through its mask */
	const float *gsrc;    /* backward: the residual gradient's rows a region's rows reads
			       * (dres, or ddrop under hidden dropout) */
	const float *sum;     /* forward: the rows the region's exit summed */
	const float *g;       /* backward: the rows a row-parallel layer reads */
	const float *dl;      /* backward: a LayerNorm output's gradient, summed by the exit */
	int post;             /* the region's collectives are posted (par/overlap.c) */
	struct coll_req *req; /* the one posted, until par_work_wait */
	struct par_late {     /* a weight gradient's GEMM left to run under the input
			       * gradient's collective (par_weight_grad_late), if on */
		int on;
		float *dw, *db;
		const float *dy, *x;
		int bias, M, K, N;
	} late;
};

/* How a layer is cut by tensor parallelism (par/tp.h), and the shapes this rank computes.
 * Every layer has the model's (m->tpv[PAR_TPV_MODEL]: its tp group, the whole (sub-)batch),
 * but under Oases's mixed degrees the first layers have their own (PAR_TPV_FIRST): a
 * group of t of the model's ranks, working on part `part` of parts of the batch, which
 * the cut after them gathers over the merge group (par/tp.h). */
struct par_tp {
	int t, r;             /* the degree, this rank's place in g */
	struct emu_group *g;  /* the group */
	int parts, part;      /* the batch in parts along its sequences, this rank's */
	int B;                /* the sequences of this rank's part */
	int sp;               /* sequence parallelism: the residual stream cut by rows */
	int Ml, row0;         /* this rank's token rows: [row0, row0 + Ml) of B T */
	int NHl, Fl;          /* local heads, ffn units */
	struct moe_shape moe; /* the MoE layers' shape */
};
enum { PAR_TPV_MODEL, PAR_TPV_FIRST, PAR_NTPV };

/* How one layer runs (par/layer.h): its attention, its MLP, the region around its
 * tensor-parallel parts, and its tensor-parallel cut. One per layer, so that layers may
 * differ. */
struct par_plan {
	const struct par_attn *attn;
	const struct par_mlp *mlp;
	const struct par_region *region;
	const struct par_tp *tp;
	const struct par_region *mlp_region; /* the MLP's, if not region's (each rank's own rows
					      * to experts over tp and dp ranks, par/ep.h) */
	int tpo, tpo_mlp; /* --tp-comm-overlap (par/tpo.h) on the attention's GEMMs, and on
			   * the MLP's (a dense one) */
};

/* Told when parameter i's gradient is final for this micro-batch; i = -1 when backward
 * begins, before any gradient is written. */
typedef int (*par_grad_hook)(void *ctx, int i);
/* Told before the weights of unit u are read. A micro-batch reads, in this order:
 * forward EMB, 0, ..., L-1, LNF, EMB (the tied output layer); backward EMB, LNF, L-1,
 * ..., 0 (the embeddings' backward reads no weights). ZeRO-3 gathers units here. */
typedef int (*par_use_hook)(void *ctx, int u);

/* The hooks a (sub-)batch leaves untold: the use hook, the grad hook. */
enum { PAR_QUIET_USE = 1, PAR_QUIET_READY = 2 };

/* The parameters come in units whose weights are read together: layer l (0 <= l < L),
 * the final LayerNorm (unit L) and the embeddings wte and wpe (unit L + 1). Each unit is
 * one contiguous range of the flat buffers. */
#define PAR_UNIT_LNF(m) ((m)->cfg.num_layers)
#define PAR_UNIT_EMB(m) ((m)->cfg.num_layers + 1)

struct par_model {
	struct gpt_config cfg;
	struct par_cfg pc;   /* as given */
	struct kctx k;       /* this rank's device, at pc.prec */
	int tp, r;           /* t, and this rank's place in the group */
	struct emu_group *g; /* the tensor-parallel group */
	int B, T;            /* micro-batch (a sub-batch's under overlap), this rank's rows of
			      * each sequence */
	int cp, cpr;         /* the context-parallel degree, this rank's place in cpg */
	int ep, epr;         /* the expert-parallel degree, this rank's place in epg */
	int ep_tp;   /* the experts over the tensor-parallel group instead (ep = t): E / t whole
		      * ones a rank, reduced over dp as the rest */
	int ep_rows; /* the experts over ep ranks spanning tp (par/ep.h): each rank routes its
		      * own rows */
	struct emu_group *routeg;     /* the ranks sharing a micro-batch's routing, or NULL */
	int route_n, route_r;         /* their number (1: no one else), this rank's place */
	struct emu_group *epg, *edpg; /* expert parallelism's groups (par_groups), or NULL */
	struct emu_group *cpg;        /* the context-parallel group, or NULL */
	int *pos;            /* [T]: the position of each of this rank's rows in its sequence */
	int *pos_all;        /* [cp T]: every cp rank's pos, rank by rank (ring attention's
			      * keys' positions, attention dropout's keys) */
	int *pos_rows;       /* [Ml]: the positions of the residual stream's rows */
	int NHl, Fl, Vl, v0; /* local heads, ffn units, vocabulary rows, first row */
	int sp;              /* sequence parallelism: the residual stream split by token rows */
	int ln_rows;         /* sp: a layer keeps only its rows of ln1 and ln2 (the output
			      * layer of lnf) and gathers them again in backward, into the
			      * work's lnw (par_ln_whole) */
	int Ml, row0;        /* this rank's token rows: [row0, row0 + Ml) of B T */
	struct par_tp tpv[PAR_NTPV]; /* the layers' cuts: the model's (the fields above), and
				      * the first layers' under mixed degrees */
	struct emu_group *merge;     /* mixed degrees: the ranks that hold my first layers' shard */
	int partials;                /* some gradient is partial (par_tp_sum_partials has work) */
	struct par_part part;        /* what this rank holds (the layers copied) */
	unsigned char *layers;       /* [L] part.layers' storage */
	struct par_plan *plan;       /* [L] */
	const struct par_region *ends; /* the region of the embedding and the output layer */
	int np;
	struct par_param *p;            /* [np], in the serial model's order; n = 0 if not held */
	int *order;                     /* [np]: parameters in the order backward finishes them */
	size_t nflat;                   /* elements in the flat buffers: the local sizes, padded */
	struct tensor weights;          /* (nflat): every local weight, in that order */
	struct tensor grads;            /* (nflat): every gradient, in the same order */
	struct par_acts own;            /* the whole model's activations (part NULL) */
	int nsub;                       /* sub-batches a micro-batch: 1, or PAR_NSUB (Oases) */
	struct par_work work[PAR_NSUB]; /* the (sub-)batches in flight's scratch ([0] if 1) */
	struct par_work *inflight;      /* whose posted collective is in flight, or NULL */
	unsigned quiet;       /* PAR_QUIET_*: hooks not told (par/overlap.c's sub-batches) */
	int rerun;            /* a full recomputation runs the forward pieces again: what
			       * forward kept across them (the cut's gathered parts) stays */
	struct moe_shape moe; /* the MoE layers' shape */
	par_grad_hook hook;   /* or NULL */
	par_use_hook use;     /* or NULL */
	void *hook_ctx;       /* for both */
};

/* Builds this rank's model: its shard of the serial model's weights (source), cut as
 * cfg says for its place in groups, holding part (NULL: the whole model, with m->own for
 * its activations). Every parameter starts at a multiple of cfg->pad elements in the
 * flat buffers, so that ZeRO's shards are even; with zero >= 2 the device is charged for
 * 1/pad of the gradient buffer, with zero = 3 for 1/pad of the weights too (par/dp.c
 * charges the rest while in use). cfg must have passed run_check. 0 or EMU_EOOM; on
 * either, par_model_free releases what was taken. */
int par_model_init(struct par_model *m, const struct par_cfg *cfg, const struct par_groups *g,
		   const struct par_part *part, const struct par_source *src);
void par_model_free(struct par_model *m);

/* The unit parameter i belongs to. */
int par_unit_of(const struct par_model *m, int i);

void par_zero_grad(struct par_model *m);
/* Sets m's device to put gradients on the wire at their own width (k.gb: 4 bytes an
 * element with fp32 main gradients) for its later collectives; returns the width to
 * restore (coll_set_wire_bytes). */
int par_grad_wire(struct par_model *m);

/* One micro-batch's activations for the layers [l0, l1) (with the output layer's if
 * l1 = L), charged as act memory, cut into m->nsub sub-batches if more than 1;
 * par_acts_free returns them. 0 or EMU_EOOM. */
int par_acts_alloc(struct par_model *m, struct par_acts *a, int l0, int l1);
void par_acts_free(struct par_model *m, struct par_acts *a);
/* The same with nothing on the device yet (the host bookkeeping only), and the parts
 * (GPT_ACTS_*) of layer l's, and the output layer's: for executors that allocate by
 * piece (HelixPipe). */
int par_acts_alloc_empty(struct par_model *m, struct par_acts *a, int l0, int l1);
int par_acts_layer(struct par_model *m, struct par_acts *a, int l, unsigned parts);
int par_acts_head(struct par_model *m, struct par_acts *a);
/* The embeddings' dropout mask, if the model has hidden dropout (the first layers' acts). */
int par_acts_embed_mask(struct par_model *m, struct par_acts *a);
/* Gives back part of layer l's activations in a, for an executor that recomputes by
 * piece (HelixPipe): PAR_DROP_POST what follows the attention output (res2, ln2 and its
 * statistics, the MLP's, res3), keeping the attention output, that part's input;
 * PAR_DROP_PRE the part before the attention (ln1 and its statistics, qkv). */
enum { PAR_DROP_PRE = 1, PAR_DROP_POST = 2 };
void par_acts_drop(struct par_model *m, struct par_acts *a, int l, unsigned what);
/* The GPT_ACTS_* flags of how this model's attention and MLP keep their activations. */
unsigned par_acts_flags(const struct par_model *m);
/* Before a's forward: it holds the executor's micro-batch g of the step (the index the
 * data and routes use), so its sequences are the run's (batch0 + g) B nsub onwards, its
 * sub-batches' in order (hidden dropout's keys). */
void par_acts_begin(struct par_model *m, struct par_acts *a, uint64_t g);

/* Sums the tied embedding's gradient over emb (the first and last pipeline stages). */
int par_sum_tied_embedding(struct par_model *m, struct emu_group *emb);

#endif
