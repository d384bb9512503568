/* par/tp: Megatron-LM's tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053): shard
 * rules, the all-reduce region, the vocabulary-parallel ends; see par/tp.h. */
#include "par/tp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "par/internal.h"
#include "par/sp.h"
#include "linear.h"
#include "ops.h"
#include "vmath.h"

int par_tp_check(const struct gpt_config *c, int tp, char *err, size_t n)
{
	if (c->heads % tp) {
		snprintf(err, n, "--tp %d does not divide the %d attention heads", tp, c->heads);
		return -1;
	}
	if (c->ffn % tp) {
		snprintf(err, n, "--tp %d does not divide the MLP width %d", tp, c->ffn);
		return -1;
	}
	if (c->vocab % tp) {
		snprintf(err, n,
			 "--tp %d does not divide the vocabulary %d (vocab-parallel embedding)", tp,
			 c->vocab);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Parameters and their shards                                                          */

void par_tp_describe(const struct par_model *m, int i, struct par_param *p)
{
	const struct gpt_config *c = &m->cfg;
	int np = gpt_num_tensors(c), w = (i - 2) % LP_N, l = (i - 2) / LP_N;
	int layer = i >= 2 && i < np - 2, moe = layer && gpt_layer_is_moe(c, l);
	const struct par_tp *v = layer ? m->plan[l].tp : &m->tpv[PAR_TPV_MODEL];
	size_t h = (size_t)c->hidden, f = (size_t)c->ffn;

	p->full = i;
	p->t = 1;
	p->q = 0;
	p->decay = gpt_tensor_decays(c, i);
	p->split = PAR_REPLICATED;
	p->blocks = 1;
	p->experts = moe ? c->num_experts : 1;
	p->rows = gpt_tensor_numel(c, i);
	p->cols = 1;
	p->owner = m->r == 0;
	if (i == 0) {
		p->split = PAR_ROWS;
		p->experts = 1;
		p->rows = (size_t)c->vocab;
		p->cols = h;
	} else if (layer) {
		switch (w) {
		case LP_QKVW:
		case LP_QKVB:
			p->split = PAR_ROWS;
			p->blocks = 3;
			p->rows = 3 * h;
			p->cols = w == LP_QKVW ? h : 1;
			break;
		case LP_PROJW:
			p->split = PAR_COLS;
			p->rows = h;
			p->cols = h;
			break;
		case LP_FCW:
		case LP_FCB:
			p->split = PAR_ROWS;
			p->rows = f;
			p->cols = w == LP_FCW ? h : 1;
			break;
		case LP_FC2W:
			p->split = PAR_COLS;
			p->rows = h;
			p->cols = f;
			break;
		case LP_PROJB:
		case LP_FC2B:
			p->frozen = v->r != 0; /* a row-parallel bias: rank 0 adds it */
			break;
		default:
			break;
		}
		if (w != LP_FCW && w != LP_FCB && w != LP_FC2W)
			p->experts = 1; /* only the experts' MLP has an expert dimension */
	}
	if (moe && m->ep > 1 && w >= LP_FCW && w <= LP_FC2B && w != LP_ROUTER) {
		/* expert parallelism: this rank's experts of the layer's (par/ep.h) */
		p->expert = 1;
		p->e0 = m->epr * (c->num_experts / m->ep);
		if (p->experts > 1)
			p->experts /= m->ep;
		else
			p->rows /= (size_t)m->ep; /* fc2's bias, (E, h) replicated: its rows */
	}
	int whole = moe && (m->ep_tp || m->ep_rows) && w >= LP_FCW && w <= LP_FC2B;

	if (whole) { /* the experts whole (par/ep.h): E / t over the tp group, or E / ep */
		p->experts = c->num_experts / (m->ep_rows ? m->ep : m->tp);
		p->e0 = (m->ep_rows ? m->epr : v->r) * p->experts;
		p->split = PAR_ROWS;
		p->rows = w == LP_FCW || w == LP_FCB ? f : h;
		p->cols = w == LP_FCW ? h : w == LP_FC2W ? f : 1;
		p->frozen = 0;
	}
	if (p->split != PAR_REPLICATED) { /* one copy of each shard is the model's */
		p->owner = v->part == 0;
		p->t = whole ? 1 : v->t;
		p->q = whole ? 0 : v->r;
	}
	p->n = p->split == PAR_REPLICATED ? (p->expert ? p->rows : gpt_tensor_numel(c, i))
					  : (size_t)p->experts * p->rows * p->cols / (size_t)p->t;
	/* sequence parallelism's rows sum over the whole tp group (which also sums the
	 * parts of a first layer); the parts alone over the merge group */
	p->partial = par_sp_partial(m, i)    ? PAR_PARTIAL_TP
		     : layer && v->parts > 1 ? PAR_PARTIAL_MERGE
					     : PAR_PARTIAL_NONE;
	/* A pipeline stage holds its part only. The last stage's copy of the tied wte is
	 * kept equal to the first stage's, which is the model's (norm, verify). */
	if (!(i == 0   ? m->part.first || m->part.last
	      : i == 1 ? m->part.first
	      : layer  ? m->part.layers[l] & (w <= LP_QKVB ? PAR_PART_PRE : PAR_PART_POST)
		       : m->part.last)) {
		p->n = 0;
		p->owner = 0;
		p->partial = 0;
	}
	if (i == 0 && !m->part.first)
		p->owner = 0;
}

/* Copies one run of n elements, local[l..l+n) <-> full[f..f+n), clipped to the local
 * range [lo, hi). */
static void copy_run(float *full, size_t f, float *win, size_t l, size_t n, size_t lo, size_t hi,
		     int to_full)
{
	size_t a = l > lo ? l : lo, b = l + n < hi ? l + n : hi;

	if (a >= b)
		return;
	if (to_full)
		memcpy(full + f + (a - l), win + (a - lo), (b - a) * sizeof *full);
	else
		memcpy(win + (a - lo), full + f + (a - l), (b - a) * sizeof *full);
}

void par_tp_shard_copy_window(const struct par_model *m, int i, float *full, float *win, size_t lo,
			      size_t hi, int to_full)
{
	const struct par_param *p = &m->p[i];
	size_t t = (size_t)p->t, r = (size_t)p->q;

	size_t e0 = (size_t)p->e0; /* expert parallelism: the first expert held */

	if (p->split == PAR_REPLICATED) {
		if (!to_full && p->frozen)
			memset(win, 0, (hi - lo) * sizeof *win);
		else
			copy_run(full, p->expert ? (size_t)m->epr * p->n : 0, win, 0, p->n, lo, hi,
				 to_full); /* fc2's bias: this rank's experts' rows */
		return;
	}
	for (size_t e = 0; e < (size_t)p->experts; e++) {
		size_t fe = e0 + e;

		if (p->split == PAR_ROWS) { /* (blocks x rows/blocks/t, cols) of each block */
			size_t rb = p->rows / (size_t)p->blocks, lb = rb / t;

			for (size_t b = 0; b < (size_t)p->blocks; b++)
				copy_run(full, (fe * p->rows + b * rb + r * lb) * p->cols, win,
					 (e * p->rows / t + b * lb) * p->cols, lb * p->cols, lo, hi,
					 to_full);
		} else { /* (rows, cols/t): this rank's columns of every row */
			size_t lc = p->cols / t;

			for (size_t row = 0; row < p->rows; row++)
				copy_run(full, (fe * p->rows + row) * p->cols + r * lc, win,
					 (e * p->rows + row) * lc, lc, lo, hi, to_full);
		}
	}
}

void par_tp_shard_copy_range(const struct par_model *m, int i, float *full, float *local, size_t lo,
			     size_t hi, int to_full)
{
	par_tp_shard_copy_window(m, i, full, local + lo, lo, hi, to_full);
}

void par_tp_shard_copy(const struct par_model *m, int i, float *full, float *local, int to_full)
{
	par_tp_shard_copy_range(m, i, full, local, 0, m->p[i].n, to_full);
}

/* ------------------------------------------------------------------------------------ */
/* The region: f the identity, g an all-reduce                                          */

int par_tp_sum(struct par_model *m, float *buf, size_t n)
{
	return m->tp == 1 ? 0 : coll_all_reduce(m->k.d, m->g, buf, buf, n, COLL_SUM);
}

int par_tp_sum_partials(struct par_model *m, size_t lo, size_t hi)
{
	int rc = 0, wire = par_grad_wire(m);

	for (int i = 0; i < m->np && !rc; i++) {
		const struct par_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;
		float *g = p->g ? p->g + (a - p->off) : NULL;

		if (!p->partial || a >= b)
			continue;
		rc = p->partial == PAR_PARTIAL_TP
			     ? par_tp_sum(m, g, b - a)
			     : coll_all_reduce(m->k.d, m->merge, g, g, b - a, COLL_SUM);
	}
	coll_set_wire_bytes(m->k.d, wire);
	return rc;
}

/* Elements of flat [lo, hi) whose gradient is partial of kind (PAR_PARTIAL_TP or _MERGE),
 * and with buf, copied between there and buf (to buf when out, else back). */
static size_t partials_of(const struct par_model *m, int kind, size_t lo, size_t hi, float *buf,
			  int out)
{
	size_t at = 0;

	for (int i = 0; i < m->np; i++) {
		const struct par_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;

		if (p->partial != kind || a >= b)
			continue;
		if (buf && p->g)
			memcpy(out ? buf + at : p->g + (a - p->off),
			       out ? p->g + (a - p->off) : buf + at, (b - a) * sizeof *buf);
		at += b - a;
	}
	return at;
}

/* Into max (by kind, as par_tp_sum_chunk_partials's), the most partial gradient elements
 * any of the n chunks of a bucket at blo holds: one pass over the parameters, each cut at
 * the chunks' edges (a pass a chunk was n x np steps a bucket, most of a planner's
 * dry-run of a wide data-parallel layout). */
static void partials_max(const struct par_model *m, size_t blo, size_t chunk, int n, size_t max[2])
{
	size_t *held = emu_xcalloc(2 * (size_t)n, sizeof *held), hi = blo + (size_t)n * chunk;

	for (int i = 0; chunk && i < m->np; i++) {
		const struct par_param *p = &m->p[i];
		size_t a = p->off > blo ? p->off : blo, b = p->off + p->n < hi ? p->off + p->n : hi;
		size_t *c = held + (p->partial == PAR_PARTIAL_TP ? 0 : (size_t)n);

		for (size_t q = (a - blo) / chunk; p->partial && a < b; q++) {
			size_t e = blo + (q + 1) * chunk < b ? blo + (q + 1) * chunk : b;

			c[q] += e - a;
			a = e;
		}
	}
	for (int k = 0; k < 2; k++)
		for (int q = 0; q < n; q++)
			max[k] =
				held[(size_t)k * n + q] > max[k] ? held[(size_t)k * n + q] : max[k];
	free(held);
}

int par_tp_sum_chunk_partials(struct par_model *m, size_t blo, size_t chunk, int n, int r,
			      size_t max[2], int *counted)
{
	static const int kinds[2] = {PAR_PARTIAL_TP, PAR_PARTIAL_MERGE};
	size_t lo = blo + (size_t)r * chunk;
	int rc = 0, wire;

	if (!*counted)
		partials_max(m, blo, chunk, n, max);
	*counted = 1;
	wire = par_grad_wire(m);
	for (int k = 0; k < 2 && !rc; k++) {
		struct tensor buf = {0};

		if (!max[k])
			continue;
		if ((rc = tensor_alloc(&m->k, &buf, MEM_WORK, max[k], "partial gradients")))
			break;
		partials_of(m, kinds[k], lo, lo + chunk, buf.data, 1);
		rc = kinds[k] == PAR_PARTIAL_TP ? par_tp_sum(m, buf.data, max[k])
						: coll_all_reduce(m->k.d, m->merge, buf.data,
								  buf.data, max[k], COLL_SUM);
		if (!rc)
			partials_of(m, kinds[k], lo, lo + chunk, buf.data, 0);
		tensor_free(&m->k, &buf);
	}
	coll_set_wire_bytes(m->k.d, wire);
	return rc;
}

static int tp_enter(struct par_model *m, const struct par_tp *c, struct par_work *w,
		    const float *rows, float *buf, size_t C)
{
	(void)m;
	(void)c;
	(void)w;
	(void)rows;
	(void)buf;
	(void)C;
	return 0;
}

/* partial (B T, C) all-reduced in place. */
static int tp_exit(struct par_model *m, const struct par_tp *c, struct par_work *w, float *partial,
		   float *local, size_t C, const float **out)
{
	size_t n = (size_t)c->B * m->T * C;
	struct coll_req **req;
	int rc;

	(void)local;
	*out = partial;
	if (c->t == 1)
		return 0;
	if ((rc = par_post_slot(m, w, &req)))
		return rc;
	return req ? coll_iall_reduce(m->k.d, c->g, partial, partial, n, COLL_SUM, req)
		   : coll_all_reduce(m->k.d, c->g, partial, partial, n, COLL_SUM);
}

static int tp_rows(struct par_model *m, const struct par_tp *c, struct par_work *w)
{
	(void)m;
	(void)c;
	w->g = w->gsrc;
	return 0;
}

const struct par_region par_region_tp = {"tensor-parallel all-reduce", tp_enter, tp_exit, tp_rows};

/* ------------------------------------------------------------------------------------ */
/* Vocabulary-parallel embedding and cross-entropy                                      */

static int embed_lookup(struct par_model *m, struct par_work *w, struct par_acts *a)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, C = m->cfg.hidden, rc;
	const struct par_region *rg = m->ends;
	const float *branch;
	float *part;

	if (m->tp == 1 && m->cp == 1) {
		embedding_fwd(k, D(a->enc), a->tokens, m->p[0].w, m->p[1].w, B, T, C, 0);
		return 0;
	}
	if (m->tp == 1) { /* context parallelism: this rank's positions */
		embedding_range_fwd(k, D(a->enc), a->tokens, m->p[0].w, 0, m->Vl, B, T, C);
		position_fwd(k, D(a->enc), m->p[1].w, m->Ml, m->pos_rows, C);
		return 0;
	}
	/* (B T, h): the rows of this rank's vocabulary, zero elsewhere, summed by g */
	part = m->sp ? D(w->tmp) : D(a->enc);
	embedding_range_fwd(k, part, a->tokens, m->p[0].w, m->v0, m->v0 + m->Vl, B, T, C);
	if ((rc = rg->exit(m, &m->tpv[PAR_TPV_MODEL], w, part, D(a->enc), (size_t)C, &branch)))
		return rc;
	position_fwd(k, D(a->enc), m->p[1].w, m->Ml, m->pos_rows, C);
	return 0;
}

/* The embeddings, then their dropout on this rank's rows (the model's cut), in place. */
int par_tp_embed_fwd(struct par_model *m, struct par_work *w, struct par_acts *a)
{
	struct dropout d = par_dropout(m, -1, DROP_EMBED);
	struct drop_rows r = par_drop_rows(m, a, &m->tpv[PAR_TPV_MODEL]);
	int rc = embed_lookup(m, w, a);

	if (!rc && d.p > 0)
		dropout_fwd(&m->k, D(a->enc), (unsigned char *)D(a->mask_enc), &d, &r, m->Ml,
			    m->cfg.hidden);
	return rc;
}

int par_tp_embed_bwd(struct par_model *m, struct par_work *w, struct par_acts *a)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, C = m->cfg.hidden, rc;

	if (m->cfg.hidden_dropout > 0) /* through the embeddings' dropout, in place */
		dropout_bwd(k, D(w->dres), D(w->dres), (const unsigned char *)D(a->mask_enc),
			    m->cfg.hidden_dropout, (size_t)m->Ml * C);
	w->gsrc = D(w->dres);

	if (m->tp == 1 && m->cp == 1) {
		embedding_bwd(k, m->p[0].g, m->p[1].g, D(w->dres), a->tokens, B, T, C, 0);
		return 0;
	}
	if (m->tp == 1) {
		embedding_range_bwd(k, m->p[0].g, D(w->dres), a->tokens, 0, m->Vl, B, T, C);
		position_bwd(k, m->p[1].g, D(w->dres), m->Ml, m->pos_rows, C);
		return 0;
	}
	/* every token's gradient reaches the rank that holds its vocabulary row */
	if ((rc = m->ends->rows(m, &m->tpv[PAR_TPV_MODEL], w)))
		return rc;
	embedding_range_bwd(k, m->p[0].g, w->g, a->tokens, m->v0, m->v0 + m->Vl, B, T, C);
	position_bwd(k, m->p[1].g, D(w->dres), m->Ml, m->pos_rows, C);
	return 0;
}

/* The cross-entropy's collectives over the tp group (an all-reduce of n, or with gather an
 * all-gather of n a rank into out), at 4 bytes a value: Megatron's and TE's tensors are
 * fp32 whatever the run's precision. */
static int ce_coll(struct par_model *m, float *buf, float *out, size_t n, enum coll_redop op,
		   int gather)
{
	int wire = coll_set_wire_bytes(m->k.d, 4), rc;

	rc = gather ? coll_all_gather(m->k.d, m->g, buf, out, n)
		    : coll_all_reduce(m->k.d, m->g, buf, buf, n, op);
	coll_set_wire_bytes(m->k.d, wire);
	return rc;
}

/* A row of n logits: its largest (from the first, in order), its sum of exp(r - mx) (in
 * order), and its probabilities exp(r - mx) / d in place; both cross-entropies' steps. */
static float row_max(const float *r, int n)
{
	float mx = r[0];

	for (int v = 1; v < n; v++)
		mx = r[v] > mx ? r[v] : mx;
	return mx;
}

static float row_exp_sum(const float *r, int n, float mx)
{
	float s = 0;

	for (int v = 0; v < n; v++)
		s += vm_expf(r[v] - mx);
	return s;
}

static void row_probs(float *r, int n, float mx, float d)
{
	for (int v = 0; v < n; v++)
		r[v] = vm_expf(r[v] - mx) / d;
}

/* Megatron's vocab-parallel cross-entropy: the row max and the sum of exponentials
 * (with the target's logit) over the whole vocabulary, from each rank's shard. The
 * target's logits and the sums are reduced in two all-reduces (vocab_parallel_cross_entropy)
 * or, concatenated, in one (--cross-entropy-loss-fusion); sums holds the M target logits,
 * then the M sums. Its kernels are charged as pc.ce runs them (models/ops.h). */
static int vocab_parallel_ce(struct par_model *m, struct par_work *w, struct par_acts *a, int M)
{
	const struct kctx *k = &m->k;
	enum ce_impl ce = m->pc.ce;
	int V = m->Vl, rc;
	float *x = D(a->probs), *mx = D(w->ce_max), *sums = D(w->ce_sums);

	crossentropy_charge(k, ce, CE_PH_MAX, M, V);
	if (kctx_math(k))
		for (int i = 0; i < M; i++)
			mx[i] = row_max(x + (size_t)i * V, V);
	if ((rc = ce_coll(m, mx, NULL, (size_t)M, COLL_MAX, 0)))
		return rc;
	crossentropy_charge(k, ce, CE_PH_SUM, M, V);
	if (kctx_math(k))
		for (int i = 0; i < M; i++) {
			sums[i] = a->ltargets[i] >= 0 ? x[(size_t)i * V + a->ltargets[i]] - mx[i]
						      : 0.0f;
			sums[M + i] = row_exp_sum(x + (size_t)i * V, V, mx[i]);
		}
	if ((rc = ce_coll(m, sums, NULL, ce == CE_UNFUSED ? (size_t)M : 2 * (size_t)M, COLL_SUM,
			  0)) ||
	    (ce == CE_UNFUSED && (rc = ce_coll(m, sums + M, NULL, (size_t)M, COLL_SUM, 0))))
		return rc;
	crossentropy_charge(k, ce, CE_PH_PROBS, M, V);
	if (kctx_math(k))
		for (int i = 0; i < M; i++) {
			row_probs(x + (size_t)i * V, V, mx[i], sums[M + i]);
			a->losses.data[i] = logf(sums[M + i]) - sums[i];
		}
	return 0;
}

/* Transformer Engine's (--cross-entropy-fusion-impl te): each rank's row max m, sum of
 * exponentials d below it and target logit (-inf off its shard), all-gathered over the
 * tensor-parallel group and merged rank by rank from the first as TE's kernel does (d
 * rescaled to the larger max); sums holds this rank's M triples, then the t ranks'. */
static int te_ce(struct par_model *m, struct par_work *w, struct par_acts *a, int M)
{
	const struct kctx *k = &m->k;
	int V = m->Vl, t = m->tp, rc;
	float *x = D(a->probs), *mine = D(w->ce_sums), *all = mine + 3 * (size_t)M;

	crossentropy_charge(k, CE_TE, CE_PH_MAX, M, V);
	if (kctx_math(k))
		for (int i = 0; i < M; i++) {
			const float *r = x + (size_t)i * V;
			float mx = row_max(r, V);

			mine[3 * i] = mx;
			mine[3 * i + 1] = row_exp_sum(r, V, mx);
			mine[3 * i + 2] = a->ltargets[i] >= 0 ? r[a->ltargets[i]] : -INFINITY;
		}
	if ((rc = ce_coll(m, mine, all, 3 * (size_t)M, COLL_SUM, 1)))
		return rc;
	crossentropy_charge(k, CE_TE, CE_PH_PROBS, M, V);
	if (kctx_math(k))
		for (int i = 0; i < M; i++) {
			float mx = all[3 * i], d = all[3 * i + 1], xy = all[3 * i + 2];
			float *r = x + (size_t)i * V;

			for (int q = 1; q < t; q++) {
				const float *o = all + 3 * ((size_t)q * M + i);
				float hi = o[0] > mx ? o[0] : mx;

				d = d * vm_expf(mx - hi) + o[1] * vm_expf(o[0] - hi);
				mx = hi;
				xy = o[2] > xy ? o[2] : xy;
			}
			row_probs(r, V, mx, d);
			a->losses.data[i] = logf(d) + mx - xy;
		}
	return 0;
}

int par_tp_logits_loss(struct par_model *m, struct par_work *w, struct par_acts *a, const float *in)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, rc = 0;
	struct mem_block *logits = NULL;

	/* the output layer's logits at the activations' precision, live while Megatron's
	 * cross-entropy takes its fp32 copy (a->probs, kept for backward), until forward
	 * ends */
	if (m->pc.ce != CE_ONE && k->ab < 4 &&
	    !(logits = mem_alloc_host(k->d, MEM_ACT, (uint64_t)BT * (uint64_t)m->Vl * k->ab, 0,
				      "logits (activations' precision)")))
		return EMU_EOOM;
	linear_fwd(k, D(a->probs), in, m->p[0].w, NULL, 0, BT, m->cfg.hidden, m->Vl);
	if (m->tp == 1)
		crossentropy_fwd(k, m->pc.ce, D(a->losses), D(a->probs), D(a->probs), a->targets,
				 BT, m->Vl);
	else
		rc = m->pc.ce == CE_TE ? te_ce(m, w, a, BT) : vocab_parallel_ce(m, w, a, BT);
	mem_free(k->d, logits);
	return rc;
}
