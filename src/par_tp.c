/* par_tp: Megatron-LM's tensor parallelism for the GPT of models/; see par_tp.h. */
#include "par_tp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "clock.h"
#include "coll.h"
#include "linear.h"
#include "ops.h"
#include "util.h"

int tp_check(const struct gpt_config *c, int tp, char *err, size_t n)
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

/* How the serial model's tensor i is cut. */
static void describe(struct tp_model *m, int i, struct tp_param *p)
{
	const struct gpt_config *c = &m->cfg;
	int np = gpt_num_tensors(c), w = (i - 2) % LP_N, l = (i - 2) / LP_N;
	int layer = i >= 2 && i < np - 2, moe = layer && gpt_layer_is_moe(c, l);
	size_t h = (size_t)c->hidden, f = (size_t)c->ffn;

	p->full = i;
	gpt_tensor_name(c, i, p->name, sizeof p->name);
	p->decay = gpt_tensor_decays(c, i);
	p->split = TP_REPLICATED;
	p->blocks = 1;
	p->experts = moe ? c->num_experts : 1;
	p->rows = gpt_tensor_numel(c, i);
	p->cols = 1;
	p->owner = m->r == 0;
	if (i == 0) {
		p->split = TP_ROWS;
		p->experts = 1;
		p->rows = (size_t)c->vocab;
		p->cols = h;
	} else if (layer) {
		switch (w) {
		case LP_QKVW:
		case LP_QKVB:
			p->split = TP_ROWS;
			p->blocks = 3;
			p->rows = 3 * h;
			p->cols = w == LP_QKVW ? h : 1;
			break;
		case LP_PROJW:
			p->split = TP_COLS;
			p->rows = h;
			p->cols = h;
			break;
		case LP_FCW:
		case LP_FCB:
			p->split = TP_ROWS;
			p->rows = f;
			p->cols = w == LP_FCW ? h : 1;
			break;
		case LP_FC2W:
			p->split = TP_COLS;
			p->rows = h;
			p->cols = f;
			break;
		case LP_PROJB:
		case LP_FC2B:
			p->frozen = m->r != 0; /* a row-parallel bias: rank 0 adds it */
			break;
		default:
			break;
		}
		if (w != LP_FCW && w != LP_FCB && w != LP_FC2W)
			p->experts = 1; /* only the experts' MLP has an expert dimension */
	}
	if (p->split != TP_REPLICATED)
		p->owner = 1;
	p->n = p->split == TP_REPLICATED ? gpt_tensor_numel(c, i)
					 : (size_t)p->experts * p->rows * p->cols / (size_t)m->tp;
	/* Under sequence parallelism the LayerNorms and the positions see this rank's rows
	 * only: their gradients are partial sums. */
	p->partial = m->sp &&
		     (i == 1 || i >= np - 2 ||
		      (layer && (w == LP_LN1W || w == LP_LN1B || w == LP_LN2W || w == LP_LN2B)));
}

/* Copies one run of n elements, local[l..l+n) <-> full[f..f+n), clipped to the local
 * range [lo, hi). */
static void copy_run(float *full, size_t f, float *local, size_t l, size_t n, size_t lo, size_t hi,
		     int to_full)
{
	size_t a = l > lo ? l : lo, b = l + n < hi ? l + n : hi;

	if (a >= b)
		return;
	if (to_full)
		memcpy(full + f + (a - l), local + a, (b - a) * sizeof *full);
	else
		memcpy(local + a, full + f + (a - l), (b - a) * sizeof *full);
}

void tp_shard_copy_range(const struct tp_model *m, int i, float *full, float *local, size_t lo,
			 size_t hi, int to_full)
{
	const struct tp_param *p = &m->p[i];
	size_t t = (size_t)m->tp, r = (size_t)m->r;

	if (p->split == TP_REPLICATED) {
		if (!to_full && p->frozen)
			memset(local + lo, 0, (hi - lo) * sizeof *local);
		else
			copy_run(full, 0, local, 0, p->n, lo, hi, to_full);
		return;
	}
	for (size_t e = 0; e < (size_t)p->experts; e++) {
		if (p->split == TP_ROWS) {
			size_t rb = p->rows / (size_t)p->blocks, lb = rb / t;

			for (size_t b = 0; b < (size_t)p->blocks; b++)
				copy_run(full, (e * p->rows + b * rb + r * lb) * p->cols, local,
					 (e * p->rows / t + b * lb) * p->cols, lb * p->cols, lo, hi,
					 to_full);
		} else {
			size_t lc = p->cols / t;

			for (size_t row = 0; row < p->rows; row++)
				copy_run(full, (e * p->rows + row) * p->cols + r * lc, local,
					 (e * p->rows + row) * lc, lc, lo, hi, to_full);
		}
	}
}

void tp_shard_copy(const struct tp_model *m, int i, float *full, float *local, int to_full)
{
	tp_shard_copy_range(m, i, full, local, 0, m->p[i].n, to_full);
}

int tp_unit_of(const struct tp_model *m, int i)
{
	if (i < 2)
		return TP_UNIT_EMB(m);
	if (i >= m->np - 2)
		return TP_UNIT_LNF(m);
	return (i - 2) / LP_N;
}

static int alloc_params(struct tp_model *m, uint64_t seed, size_t pad, int zero)
{
	const struct gpt_config *c = &m->cfg;
	size_t total = 0;
	int k = 0, rc;

	m->np = gpt_num_tensors(c);
	m->p = emu_xcalloc((size_t)m->np, sizeof *m->p);
	m->order = emu_xcalloc((size_t)m->np, sizeof *m->order);
	/* backward finishes lnf, then the layers last to first, then wpe and wte */
	m->order[k++] = m->np - 2;
	m->order[k++] = m->np - 1;
	for (int l = c->num_layers - 1; l >= 0; l--)
		for (int w = 0; w < LP_N; w++)
			m->order[k++] = 2 + l * LP_N + w;
	m->order[k++] = 1;
	m->order[k++] = 0;
	for (int i = 0; i < m->np; i++)
		describe(m, i, &m->p[i]);
	/* Every parameter starts at a multiple of pad, so that buckets made of whole
	 * parameters split evenly into pad shards. */
	for (int k2 = 0; k2 < m->np; k2++) {
		m->p[m->order[k2]].off = total;
		total = (total + m->p[m->order[k2]].n + pad - 1) / pad * pad;
	}
	m->nflat = total;
	if ((rc = tensor_alloc_shard(&m->k, &m->weights, MEM_PARAM, m->nflat,
				     zero >= 3 ? m->nflat / pad : m->nflat, "weights")) ||
	    (rc = tensor_alloc_shard(&m->k, &m->grads, MEM_GRAD, m->nflat,
				     zero >= 2 ? m->nflat / pad : m->nflat, "gradients")))
		return rc;
	for (int i = 0; i < m->np; i++) {
		struct tp_param *p = &m->p[i];

		if (!m->weights.data)
			continue;
		p->w = m->weights.data + p->off;
		p->g = m->grads.data + p->off;
		if (p->n) {
			float *full = emu_xmalloc(gpt_tensor_numel(c, i) * sizeof *full);

			gpt_tensor_init(c, seed, i, full);
			tp_shard_copy(m, i, full, p->w, 0);
			free(full);
		}
	}
	return 0;
}

static int alloc_acts(struct tp_model *m)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, h = (size_t)m->cfg.hidden, f = (size_t)m->Fl;
	size_t v = (size_t)m->Vl, ml = (size_t)m->Ml;
	int rc = 0;

	m->la = emu_xcalloc((size_t)m->cfg.num_layers, sizeof *m->la);
#define A(t, cat, n, name)                                                                         \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc(k, (t), (cat), (n), (name));                             \
	} while (0)
	A(&m->enc, MEM_ACT, ml * h, "embeddings");
	for (int l = 0; l < m->cfg.num_layers && !rc; l++)
		rc = gpt_layer_acts_alloc(k, &m->la[l], m->B, m->T, m->Ml, m->cfg.hidden,
					  m->cfg.hidden / m->tp, m->NHl, m->Fl,
					  gpt_layer_is_moe(&m->cfg, l) ? &m->moe : NULL);
	A(&m->lnf, MEM_ACT, bt * h, "lnf");
	A(&m->lnf_mean, MEM_ACT, ml, "lnf.mean");
	A(&m->lnf_rstd, MEM_ACT, ml, "lnf.rstd");
	A(&m->probs, MEM_ACT, bt * v, "logits");
	A(&m->losses, MEM_ACT, bt, "losses");
	A(&m->dres, MEM_WORK, ml * h, "d residual");
	if (m->sp) {
		A(&m->tmpl, MEM_WORK, ml * h, "branch out rows");
		A(&m->dlocal, MEM_WORK, ml * h, "d layernorm rows");
		A(&m->gfull, MEM_WORK, bt * h, "d residual gathered");
	}
	A(&m->dln, MEM_WORK, bt * h, "d layernorm");
	A(&m->tmp, MEM_WORK, bt * h, "branch out");
	A(&m->dqkv, MEM_WORK, 3 * bt * h / (size_t)m->tp, "d qkv");
	A(&m->datty, MEM_WORK, bt * h / (size_t)m->tp, "d attention out");
	A(&m->dfch, MEM_WORK, bt * f, "d fc");
	A(&m->dfch_gelu, MEM_WORK, bt * f, "d fc.gelu");
	A(&m->dlogits, MEM_WORK, bt * v, "d logits");
	A(&m->att_scratch, MEM_WORK, (size_t)m->T * m->T, "attention scratch");
	if (m->tp > 1) {
		A(&m->ce_max, MEM_WORK, bt, "cross-entropy max");
		A(&m->ce_sums, MEM_WORK, 2 * bt, "cross-entropy sums");
	}
	if (m->cfg.num_experts > 0)
		A(&m->drouter, MEM_WORK, (size_t)m->cfg.num_experts * h, "d router");
#undef A
	if (!rc && m->cfg.num_experts > 0)
		rc = moe_scratch_alloc(k, &m->moe_scratch, &m->moe);
	return rc;
}

int tp_init(struct tp_model *m, const struct kctx *k, const struct gpt_config *cfg, int B,
	    uint64_t seed, struct emu_group *g, int tp, int r, size_t pad, int sp, int zero)
{
	int rc;

	memset(m, 0, sizeof *m);
	m->cfg = *cfg;
	m->k = *k;
	m->tp = tp;
	m->r = r;
	m->g = g;
	m->B = B;
	m->T = cfg->seq_len;
	m->NHl = cfg->heads / tp;
	m->Fl = cfg->ffn / tp;
	m->Vl = cfg->vocab / tp;
	m->v0 = r * m->Vl;
	m->sp = sp && tp > 1;
	m->Ml = m->sp ? B * m->T / tp : B * m->T;
	m->row0 = m->sp ? r * m->Ml : 0;
	m->tokens = emu_xcalloc((size_t)B * m->T, sizeof *m->tokens);
	m->targets = emu_xcalloc((size_t)B * m->T, sizeof *m->targets);
	m->ltargets = emu_xcalloc((size_t)B * m->T, sizeof *m->ltargets);
	if (cfg->num_experts > 0)
		m->moe = (struct moe_shape){
			B * m->T,
			cfg->hidden,
			m->Fl,
			cfg->num_experts,
			cfg->moe_top_k,
			moe_capacity(cfg->capacity_factor, B * m->T, cfg->moe_top_k, cfg->num_experts),
			cfg->aux_coeff};
	if ((rc = alloc_params(m, seed, pad ? pad : 1, zero)))
		return rc;
	return alloc_acts(m);
}

void tp_free(struct tp_model *m)
{
	for (int l = 0; m->la && l < m->cfg.num_layers; l++)
		moe_acts_free(&m->la[l].moe);
	free(m->la);
	free(m->p);
	free(m->order);
	free(m->tokens);
	free(m->targets);
	free(m->ltargets);
	memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------------------------ */
/* Forward                                                                              */

#define D(t)        ((t).data)
#define PW(m, l, i) ((m)->p[2 + (l)*LP_N + (i)].w)
#define PG(m, l, i) ((m)->p[2 + (l)*LP_N + (i)].g)

static void zero(struct tensor *t)
{
	if (t->data)
		memset(t->data, 0, t->n * sizeof *t->data);
}

/* Sums buf over the tensor-parallel group (nothing to do alone). */
/* About to read unit u's weights. */
static int use(struct tp_model *m, int u)
{
	return m->use ? m->use(m->hook_ctx, u) : 0;
}

static int tp_sum(struct tp_model *m, float *buf, size_t n)
{
	return m->tp == 1 ? 0 : coll_all_reduce(m->k.d, m->g, buf, buf, n, COLL_SUM);
}

int tp_sum_partials(struct tp_model *m, size_t lo, size_t hi)
{
	int rc;

	for (int i = 0; i < m->np; i++) {
		const struct tp_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;

		if (p->partial && a < b &&
		    (rc = tp_sum(m, p->g ? p->g + (a - p->off) : NULL, b - a)))
			return rc;
	}
	return 0;
}

/* After a row-parallel layer, partial (B T, C) holds this rank's partial sums: all-reduced
 * in place, or under sp reduce-scattered into local (this rank's rows). Sets *out to the
 * summed rows. */
static int sum_rows(struct tp_model *m, float *partial, float *local, size_t C, const float **out)
{
	const struct kctx *k = &m->k;

	*out = m->sp ? local : partial;
	if (m->tp == 1)
		return 0;
	if (!m->sp)
		return coll_all_reduce(k->d, m->g, partial, partial, (size_t)m->B * m->T * C,
				       COLL_SUM);
	return coll_reduce_scatter(k->d, m->g, partial, local, (size_t)m->Ml * C, COLL_SUM);
}

/* Under sp, before a column-parallel layer: every rank's rows of buf (B T, C), this rank's
 * at row0, gathered into buf. */
static int gather_rows(struct tp_model *m, float *buf, size_t C)
{
	if (!m->sp)
		return 0;
	return coll_all_gather(m->k.d, m->g, buf ? buf + (size_t)m->row0 * C : NULL, buf,
			       (size_t)m->Ml * C);
}

/* Megatron's vocab-parallel cross-entropy: the row max and the sum of exponentials
 * (with the target's logit) over the whole vocabulary, from each rank's shard. */
static int vocab_parallel_ce(struct tp_model *m, int M)
{
	const struct kctx *k = &m->k;
	int V = m->Vl, rc;
	float *x = D(m->probs), *mx = D(m->ce_max), *sums = D(m->ce_sums);

	emu_compute(k->d, "crossentropy.max", (double)M * V, (double)M * V * k->ab);
	if (kctx_math(k))
		for (int i = 0; i < M; i++) {
			mx[i] = x[(size_t)i * V];
			for (int v = 1; v < V; v++)
				mx[i] = x[(size_t)i * V + v] > mx[i] ? x[(size_t)i * V + v] : mx[i];
		}
	if ((rc = coll_all_reduce(k->d, m->g, mx, mx, (size_t)M, COLL_MAX)))
		return rc;
	emu_compute(k->d, "crossentropy.sum", 2.0 * M * V, (double)M * V * k->ab);
	if (kctx_math(k))
		for (int i = 0; i < M; i++) {
			float s = 0;

			for (int v = 0; v < V; v++)
				s += expf(x[(size_t)i * V + v] - mx[i]);
			sums[2 * i] = s;
			sums[2 * i + 1] = m->ltargets[i] >= 0
						  ? x[(size_t)i * V + m->ltargets[i]] - mx[i]
						  : 0.0f;
		}
	if ((rc = coll_all_reduce(k->d, m->g, sums, sums, 2 * (size_t)M, COLL_SUM)))
		return rc;
	emu_compute(k->d, "crossentropy.probs", 3.0 * M * V, 2.0 * M * V * k->ab);
	if (kctx_math(k))
		for (int i = 0; i < M; i++) {
			for (int v = 0; v < V; v++)
				x[(size_t)i * V + v] =
					expf(x[(size_t)i * V + v] - mx[i]) / sums[2 * i];
			m->losses.data[i] = logf(sums[2 * i]) - sums[2 * i + 1];
		}
	return 0;
}

int tp_forward(struct tp_model *m, const int *tokens, const int *targets, float *loss)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, BT = B * T, C = m->cfg.hidden, L = m->cfg.num_layers, Ml = m->Ml;
	int C3 = 3 * C / m->tp, Cl = C / m->tp, F = m->Fl, hs = C / m->cfg.heads, rc;
	size_t r0 = (size_t)m->row0 * (size_t)C, mc = (size_t)Ml * C;
	const float *x, *branch;

	*loss = 0;
	m->aux_loss = 0;
	if (kctx_math(k)) {
		memcpy(m->tokens, tokens, (size_t)BT * sizeof *tokens);
		memcpy(m->targets, targets, (size_t)BT * sizeof *targets);
		for (int i = 0; i < BT; i++)
			m->ltargets[i] = targets[i] >= m->v0 && targets[i] < m->v0 + m->Vl
						 ? targets[i] - m->v0
						 : -1;
	}
	/* embeddings: this rank's rows of them (all rows without sp) */
	if ((rc = use(m, TP_UNIT_EMB(m))))
		return rc;
	if (m->tp == 1) {
		embedding_fwd(k, D(m->enc), m->tokens, m->p[0].w, m->p[1].w, B, T, C, 0);
	} else {
		float *part = m->sp ? D(m->tmp) : D(m->enc);

		embedding_range_fwd(k, part, m->tokens, m->p[0].w, m->v0, m->v0 + m->Vl, B, T, C);
		if ((rc = sum_rows(m, part, D(m->enc), (size_t)C, &branch)))
			return rc;
		position_fwd(k, D(m->enc), m->p[1].w, Ml, m->row0, T, C);
	}
	x = D(m->enc);
	for (int l = 0; l < L; l++) {
		struct gpt_layer_acts *a = &m->la[l];
		float *ln1 = D(a->ln1) ? D(a->ln1) + r0 : NULL,
		      *ln2 = D(a->ln2) ? D(a->ln2) + r0 : NULL;

		if ((rc = use(m, l)))
			return rc;
		layernorm_fwd(k, ln1, D(a->ln1_mean), D(a->ln1_rstd), x, PW(m, l, LP_LN1W),
			      PW(m, l, LP_LN1B), Ml, C);
		if ((rc = gather_rows(m, D(a->ln1), (size_t)C)))
			return rc;
		linear_fwd(k, D(a->qkv), D(a->ln1), PW(m, l, LP_QKVW), PW(m, l, LP_QKVB), 1, BT, C,
			   C3);
		attention_fwd(k, D(a->atty), D(a->att), D(a->qkv), B, T, m->NHl, 0, m->NHl, hs);
		linear_fwd(k, D(m->tmp), D(a->atty), PW(m, l, LP_PROJW), PW(m, l, LP_PROJB), 1, BT,
			   Cl, C);
		if ((rc = sum_rows(m, D(m->tmp), D(m->tmpl), (size_t)C, &branch)))
			return rc;
		residual_fwd(k, D(a->res2), x, branch, mc);
		layernorm_fwd(k, ln2, D(a->ln2_mean), D(a->ln2_rstd), D(a->res2), PW(m, l, LP_LN2W),
			      PW(m, l, LP_LN2B), Ml, C);
		if ((rc = gather_rows(m, D(a->ln2), (size_t)C)))
			return rc;
		if (gpt_layer_is_moe(&m->cfg, l)) {
			m->aux_loss +=
				moe_fwd(k, &m->moe, &a->moe, D(m->tmp), D(a->ln2),
					PW(m, l, LP_ROUTER), PW(m, l, LP_FCW), PW(m, l, LP_FCB),
					PW(m, l, LP_FC2W), PW(m, l, LP_FC2B));
		} else {
			linear_fwd(k, D(a->fch), D(a->ln2), PW(m, l, LP_FCW), PW(m, l, LP_FCB), 1,
				   BT, C, F);
			gelu_fwd(k, D(a->fch_gelu), D(a->fch), (size_t)BT * F);
			linear_fwd(k, D(m->tmp), D(a->fch_gelu), PW(m, l, LP_FC2W),
				   PW(m, l, LP_FC2B), 1, BT, F, C);
		}
		if (m->drop_allreduce && l == 0) /* tests: a broken strategy */
			branch = D(m->tmp) ? D(m->tmp) + r0 : NULL;
		else if ((rc = sum_rows(m, D(m->tmp), D(m->tmpl), (size_t)C, &branch)))
			return rc;
		residual_fwd(k, D(a->res3), D(a->res2), branch, mc);
		x = D(a->res3);
	}
	if ((rc = use(m, TP_UNIT_LNF(m))))
		return rc;
	layernorm_fwd(k, D(m->lnf) ? D(m->lnf) + r0 : NULL, D(m->lnf_mean), D(m->lnf_rstd), x,
		      m->p[m->np - 2].w, m->p[m->np - 1].w, Ml, C);
	if ((rc = gather_rows(m, D(m->lnf), (size_t)C)) || (rc = use(m, TP_UNIT_EMB(m))))
		return rc;
	linear_fwd(k, D(m->probs), D(m->lnf), m->p[0].w, NULL, 0, BT, C, m->Vl);
	if (m->tp == 1)
		crossentropy_fwd(k, D(m->losses), D(m->probs), D(m->probs), m->targets, BT, m->Vl);
	else if ((rc = vocab_parallel_ce(m, BT)))
		return rc;
	if (kctx_math(k)) {
		double s = 0;

		for (int i = 0; i < BT; i++)
			s += m->losses.data[i];
		*loss = (float)(s / BT) + m->aux_loss;
	}
	return 0;
}
/* ------------------------------------------------------------------------------------ */
/* Backward                                                                             */

void tp_zero_grad(struct tp_model *m)
{
	zero(&m->grads);
}

static int ready(struct tp_model *m, int i)
{
	return m->hook ? m->hook(m->hook_ctx, i) : 0;
}

/* The residual gradient's full rows for a row-parallel layer's backward: dres itself, or
 * under sp every rank's rows gathered. */
static int full_rows(struct tp_model *m, const float **g)
{
	size_t C = (size_t)m->cfg.hidden;
	int rc;

	if (!m->sp) {
		*g = D(m->dres);
		return 0;
	}
	*g = D(m->gfull);
	rc = coll_all_gather(m->k.d, m->g, D(m->dres), D(m->gfull), (size_t)m->Ml * C);
	return rc;
}

int tp_backward(struct tp_model *m, float scale)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, BT = B * T, C = m->cfg.hidden, L = m->cfg.num_layers, F = m->Fl;
	int C3 = 3 * C / m->tp, Cl = C / m->tp, hs = C / m->cfg.heads, V = m->Vl, Ml = m->Ml, rc;
	const float *x_last = L ? D(m->la[L - 1].res3) : D(m->enc), *dl, *g;

	if ((rc = ready(m, -1)) || (rc = use(m, TP_UNIT_EMB(m))))
		return rc;
	zero(&m->dlogits);
	crossentropy_bwd(k, D(m->dlogits), D(m->probs), m->tp == 1 ? m->targets : m->ltargets,
			 scale / (float)BT, BT, V);
	zero(&m->dln);
	linear_bwd_input(k, D(m->dln), D(m->dlogits), m->p[0].w, BT, C, V);
	linear_bwd_weight(k, m->p[0].g, NULL, 0, D(m->dlogits), D(m->lnf), BT, C, V);
	if ((rc = sum_rows(m, D(m->dln), D(m->dlocal), (size_t)C, &dl)))
		return rc;
	if ((rc = use(m, TP_UNIT_LNF(m))))
		return rc;
	zero(&m->dres);
	layernorm_bwd(k, D(m->dres), m->p[m->np - 2].g, m->p[m->np - 1].g, dl, x_last,
		      m->p[m->np - 2].w, D(m->lnf_mean), D(m->lnf_rstd), Ml, C);
	if ((rc = ready(m, m->np - 2)) || (rc = ready(m, m->np - 1)))
		return rc;
	for (int l = L - 1; l >= 0; l--) {
		struct gpt_layer_acts *a = &m->la[l];
		const float *x = l ? D(m->la[l - 1].res3) : D(m->enc);

		if ((rc = use(m, l)) || (rc = full_rows(m, &g)))
			return rc;
		zero(&m->dln);
		if (gpt_layer_is_moe(&m->cfg, l)) {
			float *dr = m->tp == 1 ? PG(m, l, LP_ROUTER) : D(m->drouter);
			size_t nr = m->p[2 + l * LP_N + LP_ROUTER].n;

			/* The router is replicated and sees partial expert outputs: rank 0 alone
			 * adds the aux loss, and this micro-batch's router gradient is summed
			 * over the group before it joins the accumulated one. */
			zero(&m->drouter);
			moe_bwd(k, &m->moe, &a->moe, &m->moe_scratch, D(m->dln), g,
				m->r == 0 ? scale : 0.0f, D(a->ln2), PW(m, l, LP_ROUTER),
				PW(m, l, LP_FCW), PW(m, l, LP_FC2W), dr, PG(m, l, LP_FCW),
				PG(m, l, LP_FCB), PG(m, l, LP_FC2W), PG(m, l, LP_FC2B));
			if (m->tp > 1) {
				if ((rc = tp_sum(m, dr, nr)))
					return rc;
				add_acc(k, PG(m, l, LP_ROUTER), dr, nr);
			}
		} else {
			zero(&m->dfch_gelu);
			linear_bwd_input(k, D(m->dfch_gelu), g, PW(m, l, LP_FC2W), BT, F, C);
			linear_bwd_weight(k, PG(m, l, LP_FC2W), PG(m, l, LP_FC2B), 1, g,
					  D(a->fch_gelu), BT, F, C);
			zero(&m->dfch);
			gelu_bwd(k, D(m->dfch), D(a->fch), D(m->dfch_gelu), (size_t)BT * F);
			linear_bwd_input(k, D(m->dln), D(m->dfch), PW(m, l, LP_FCW), BT, C, F);
			linear_bwd_weight(k, PG(m, l, LP_FCW), PG(m, l, LP_FCB), 1, D(m->dfch),
					  D(a->ln2), BT, C, F);
		}
		if ((rc = sum_rows(m, D(m->dln), D(m->dlocal), (size_t)C, &dl)))
			return rc;
		layernorm_bwd(k, D(m->dres), PG(m, l, LP_LN2W), PG(m, l, LP_LN2B), dl, D(a->res2),
			      PW(m, l, LP_LN2W), D(a->ln2_mean), D(a->ln2_rstd), Ml, C);
		if ((rc = full_rows(m, &g)))
			return rc;
		zero(&m->datty);
		linear_bwd_input(k, D(m->datty), g, PW(m, l, LP_PROJW), BT, Cl, C);
		linear_bwd_weight(k, PG(m, l, LP_PROJW), PG(m, l, LP_PROJB), 1, g, D(a->atty), BT,
				  Cl, C);
		zero(&m->dqkv);
		attention_bwd(k, D(m->dqkv), D(m->att_scratch), D(m->datty), D(a->att), D(a->qkv),
			      B, T, m->NHl, 0, m->NHl, hs);
		zero(&m->dln);
		linear_bwd_input(k, D(m->dln), D(m->dqkv), PW(m, l, LP_QKVW), BT, C, C3);
		linear_bwd_weight(k, PG(m, l, LP_QKVW), PG(m, l, LP_QKVB), 1, D(m->dqkv), D(a->ln1),
				  BT, C, C3);
		if ((rc = sum_rows(m, D(m->dln), D(m->dlocal), (size_t)C, &dl)))
			return rc;
		layernorm_bwd(k, D(m->dres), PG(m, l, LP_LN1W), PG(m, l, LP_LN1B), dl, x,
			      PW(m, l, LP_LN1W), D(a->ln1_mean), D(a->ln1_rstd), Ml, C);
		for (int w = 0; w < LP_N; w++)
			if ((rc = ready(m, 2 + l * LP_N + w)))
				return rc;
	}
	if (m->tp == 1) {
		embedding_bwd(k, m->p[0].g, m->p[1].g, D(m->dres), m->tokens, B, T, C, 0);
	} else {
		/* every token's gradient reaches the rank that holds its vocabulary row */
		if ((rc = full_rows(m, &g)))
			return rc;
		embedding_range_bwd(k, m->p[0].g, g, m->tokens, m->v0, m->v0 + m->Vl, B, T, C);
		position_bwd(k, m->p[1].g, D(m->dres), Ml, m->row0, T, C);
	}
	if ((rc = ready(m, 1)) || (rc = ready(m, 0)))
		return rc;
	return 0;
}