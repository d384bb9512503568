/* par_tp: Megatron-LM's tensor parallelism for the GPT of models/; see par_tp.h. */
#include "par/tp.h"

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
	/* A pipeline stage holds its part only. The last stage's copy of the tied wte is
	 * kept equal to the first stage's, which is the model's (norm, verify). */
	if (!(i == 0   ? m->part.first || m->part.last
	      : i == 1 ? m->part.first
	      : layer  ? m->part.layers[l] & (w <= LP_QKVB ? TP_PART_PRE : TP_PART_POST)
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

/* The backward's scratch, shared by the micro-batches. */
static int alloc_work(struct tp_model *m)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, h = (size_t)m->cfg.hidden, f = (size_t)m->Fl;
	size_t v = (size_t)m->Vl, ml = (size_t)m->Ml;
	int rc = 0;

#define A(t, cat, n, name)                                                                         \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc(k, (t), (cat), (n), (name));                             \
	} while (0)
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
	if (m->mlp_chunks > 1) { /* the MLP runs chunk by chunk of rows */
		size_t rows = (bt + (size_t)m->mlp_chunks - 1) / (size_t)m->mlp_chunks;

		A(&m->fch_c, MEM_WORK, rows * f, "fc chunk");
		A(&m->fchg_c, MEM_WORK, rows * f, "fc.gelu chunk");
		A(&m->dfch, MEM_WORK, rows * f, "d fc chunk");
		A(&m->dfch_gelu, MEM_WORK, rows * f, "d fc.gelu chunk");
	} else {
		A(&m->dfch, MEM_WORK, bt * f, "d fc");
		A(&m->dfch_gelu, MEM_WORK, bt * f, "d fc.gelu");
	}
	if (m->part.last)
		A(&m->dlogits, MEM_WORK, bt * v, "d logits");
	A(&m->att_scratch, MEM_WORK,
	  m->flash ? 2 * (size_t)FLASH_ROWS * (size_t)m->T : (size_t)m->T * m->T,
	  "attention scratch");
	if (m->tp > 1 && m->part.last) {
		A(&m->ce_max, MEM_WORK, bt, "cross-entropy max");
		A(&m->ce_sums, MEM_WORK, 2 * bt, "cross-entropy sums");
	}
	if (m->cfg.num_experts > 0)
		A(&m->drouter, MEM_WORK, (size_t)m->cfg.num_experts * h, "d router");
	if (!rc && m->cfg.num_experts > 0)
		rc = moe_scratch_alloc(k, &m->moe_scratch, &m->moe);
#undef A
	return rc;
}

static void drop(struct tp_model *m, struct gpt_layer_acts *la);

/* The whole layer's activations, and how attention keeps them. */
static unsigned acts_flags(const struct tp_model *m)
{
	return GPT_ACTS_ALL | (m->flash ? GPT_ACTS_FLASH : 0u) |
	       (m->mlp_chunks > 1 ? GPT_ACTS_NO_MLP : 0u);
}

/* An acts for layers [l0, l1) with nothing allocated on the device yet. */
static int tp_acts_alloc_empty(struct tp_model *m, struct tp_acts *a, int l0, int l1)
{
	size_t bt = (size_t)m->B * m->T;
	int L = m->cfg.num_layers;

	memset(a, 0, sizeof *a);
	a->l0 = l0;
	a->l1 = l1;
	a->la = emu_xcalloc((size_t)L + 1, sizeof *a->la);
	a->stash = emu_xcalloc((size_t)L + 1, sizeof *a->stash);
	a->tokens = emu_xcalloc(bt, sizeof *a->tokens);
	a->targets = emu_xcalloc(bt, sizeof *a->targets);
	a->ltargets = emu_xcalloc(bt, sizeof *a->ltargets);
	return 0;
}

/* The parts (GPT_ACTS_*) of layer l's activations. */
static int layer_acts(struct tp_model *m, struct gpt_layer_acts *la, int l, unsigned parts)
{
	return gpt_layer_acts_alloc(&m->k, la, m->B, m->T, m->Ml, m->cfg.hidden,
				    m->cfg.hidden / m->tp, m->NHl, m->Fl,
				    gpt_layer_is_moe(&m->cfg, l) ? &m->moe : NULL, parts);
}

/* The final LayerNorm's, the logits' and the losses' activations. */
static int head_acts(struct tp_model *m, struct tp_acts *a)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, h = (size_t)m->cfg.hidden, ml = (size_t)m->Ml;
	int rc;

	if ((rc = tensor_alloc(k, &a->lnf, MEM_ACT, bt * h, "lnf")) ||
	    (rc = tensor_alloc(k, &a->lnf_mean, MEM_ACT, ml, "lnf.mean")) ||
	    (rc = tensor_alloc(k, &a->lnf_rstd, MEM_ACT, ml, "lnf.rstd")) ||
	    (rc = tensor_alloc(k, &a->probs, MEM_ACT, bt * (size_t)m->Vl, "logits")))
		return rc;
	return tensor_alloc(k, &a->losses, MEM_ACT, bt, "losses");
}

int tp_acts_alloc(struct tp_model *m, struct tp_acts *a, int l0, int l1)
{
	int rc = tp_acts_alloc_empty(m, a, l0, l1);

	if (!rc)
		rc = tensor_alloc(&m->k, &a->enc, MEM_ACT, (size_t)m->Ml * m->cfg.hidden,
				  l0 ? "stage input" : "embeddings");
	for (int l = l0; l < l1 && !rc; l++) {
		rc = layer_acts(m, &a->la[l], l, acts_flags(m));
		drop(m, &a->la[l]); /* one layer's worth at a time */
	}
	if (!rc && l1 == m->cfg.num_layers)
		rc = head_acts(m, a);
	return rc;
}

static void stash_free(const struct kctx *k, struct tp_stash *st)
{
	tensor_free(k, &st->gproj);
	tensor_free(k, &st->dqkv);
	tensor_free(k, &st->gfc2);
	tensor_free(k, &st->dfc);
}

void tp_acts_free(struct tp_model *m, struct tp_acts *a)
{
	const struct kctx *k = &m->k;
	struct tensor *t[] = {&a->enc,    &a->lnf,  &a->lnf_mean, &a->lnf_rstd, &a->probs,
			      &a->losses, &a->dout, &a->din2,     &a->gout_a,   &a->gout_x};

	for (size_t i = 0; i < sizeof t / sizeof *t; i++)
		tensor_free(k, t[i]);
	for (int l = a->l0; a->la && l < a->l1; l++) {
		gpt_layer_acts_free(k, &a->la[l]);
		stash_free(k, &a->stash[l]);
	}
	free(a->la);
	free(a->stash);
	free(a->tokens);
	free(a->targets);
	free(a->ltargets);
	memset(a, 0, sizeof *a);
}

int tp_init(struct tp_model *m, const struct kctx *k, const struct gpt_config *cfg, int B,
	    uint64_t seed, struct emu_group *g, int tp, int r, size_t pad, int sp, int zero,
	    const struct tp_part *part)
{
	int rc;

	enum tp_recompute rcm = m->recompute;
	int flash = m->flash, chunks = m->mlp_chunks;

	memset(m, 0, sizeof *m);
	m->recompute = rcm;
	m->flash = flash;
	m->mlp_chunks = chunks;
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
	m->layers = emu_xcalloc((size_t)cfg->num_layers + 1, 1);
	for (int l = 0; l < cfg->num_layers; l++)
		m->layers[l] = part ? part->layers[l] : TP_PART_PRE | TP_PART_POST;
	m->part = (struct tp_part){part ? part->first : 1, part ? part->last : 1, m->layers};
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
	if (!part && (rc = tp_acts_alloc(m, &m->own, 0, cfg->num_layers)))
		return rc;
	return alloc_work(m);
}

void tp_free(struct tp_model *m)
{
	if (m->own.la)
		tp_acts_free(m, &m->own);
	free(m->layers);
	free(m->p);
	free(m->order);
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
static int vocab_parallel_ce(struct tp_model *m, struct tp_acts *a, int M)
{
	const struct kctx *k = &m->k;
	int V = m->Vl, rc;
	float *x = D(a->probs), *mx = D(m->ce_max), *sums = D(m->ce_sums);

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
			sums[2 * i + 1] = a->ltargets[i] >= 0
						  ? x[(size_t)i * V + a->ltargets[i]] - mx[i]
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
			a->losses.data[i] = logf(sums[2 * i]) - sums[2 * i + 1];
		}
	return 0;
}

/* Layer l's part before the attention, from x: the first LayerNorm (gathered under sp)
 * and the QKV projection into la->qkv. */
static int pre_fwd(struct tp_model *m, struct gpt_layer_acts *la, int l, const float *x)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, C3 = 3 * C / m->tp, rc;
	float *ln1 = D(la->ln1) ? D(la->ln1) + (size_t)m->row0 * (size_t)C : NULL;

	layernorm_fwd(k, ln1, D(la->ln1_mean), D(la->ln1_rstd), x, PW(m, l, LP_LN1W),
		      PW(m, l, LP_LN1B), m->Ml, C);
	if ((rc = gather_rows(m, D(la->ln1), (size_t)C)))
		return rc;
	linear_fwd(k, D(la->qkv), D(la->ln1), PW(m, l, LP_QKVW), PW(m, l, LP_QKVB), 1, BT, C, C3);
	return 0;
}

/* The attention of this rank's heads: la->qkv to la->atty. */
static void attn_fwd(struct tp_model *m, struct gpt_layer_acts *la)
{
	int B = m->B, T = m->T, hs = m->cfg.hidden / m->cfg.heads;

	if (m->flash)
		attention_flash_fwd(&m->k, D(la->atty), D(la->att), D(la->qkv), B, T, m->NHl, 0,
				    m->NHl, hs, D(m->att_scratch));
	else
		attention_fwd(&m->k, D(la->atty), D(la->att), D(la->qkv), B, T, m->NHl, 0, m->NHl,
			      hs);
}

/* Offset rows into a (rows, n) buffer, NULL in dry-run. */
static float *rows_at(float *p, size_t row, size_t n)
{
	return p ? p + row * n : NULL;
}

/* HelixPipe's chunked MLP: the dense MLP of layer l over chunks of rows, so that only one
 * chunk's fc and fc.gelu exist (work memory), from la->ln2 into m->tmp. Nothing of the
 * MLP is kept for backward, which computes each chunk's fc again. */
static void mlp_chunks_fwd(struct tp_model *m, struct gpt_layer_acts *la, int l)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, F = m->Fl;
	int rows = (BT + m->mlp_chunks - 1) / m->mlp_chunks;

	for (int r = 0; r < BT; r += rows) {
		int n = BT - r < rows ? BT - r : rows;

		linear_fwd(k, D(m->fch_c), rows_at(D(la->ln2), (size_t)r, (size_t)C),
			   PW(m, l, LP_FCW), PW(m, l, LP_FCB), 1, n, C, F);
		gelu_fwd(k, D(m->fchg_c), D(m->fch_c), (size_t)n * F);
		linear_fwd(k, rows_at(D(m->tmp), (size_t)r, (size_t)C), D(m->fchg_c),
			   PW(m, l, LP_FC2W), PW(m, l, LP_FC2B), 1, n, F, C);
	}
}

/* The chunked MLP's backward from g (B T, h), the output's gradient: per chunk, fc and
 * GeLU again, then the fc2 and fc backward, into m->dln and the weight gradients. */
static void mlp_chunks_bwd(struct tp_model *m, struct gpt_layer_acts *la, int l, const float *g)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, F = m->Fl;
	int rows = (BT + m->mlp_chunks - 1) / m->mlp_chunks;

	for (int r = 0; r < BT; r += rows) {
		int n = BT - r < rows ? BT - r : rows;
		const float *ln2 = rows_at(D(la->ln2), (size_t)r, (size_t)C);
		const float *gr = g ? g + (size_t)r * C : NULL;

		linear_fwd(k, D(m->fch_c), ln2, PW(m, l, LP_FCW), PW(m, l, LP_FCB), 1, n, C, F);
		gelu_fwd(k, D(m->fchg_c), D(m->fch_c), (size_t)n * F);
		zero(&m->dfch_gelu);
		linear_bwd_input(k, D(m->dfch_gelu), gr, PW(m, l, LP_FC2W), n, F, C);
		linear_bwd_weight(k, PG(m, l, LP_FC2W), PG(m, l, LP_FC2B), 1, gr, D(m->fchg_c), n,
				  F, C);
		zero(&m->dfch);
		gelu_bwd(k, D(m->dfch), D(m->fch_c), D(m->dfch_gelu), (size_t)n * F);
		linear_bwd_input(k, rows_at(D(m->dln), (size_t)r, (size_t)C), D(m->dfch),
				 PW(m, l, LP_FCW), n, C, F);
		linear_bwd_weight(k, PG(m, l, LP_FCW), PG(m, l, LP_FCB), 1, D(m->dfch), ln2, n, C,
				  F);
	}
}

/* Layer l's part after the attention, from la->atty and the layer's input x: the
 * output projection and residual, the second LayerNorm, the MLP (or MoE block, adding
 * its aux loss to *aux) and residual, into la->res3. */
static int post_fwd(struct tp_model *m, struct gpt_layer_acts *la, int l, const float *x,
		    float *aux)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, Ml = m->Ml;
	int Cl = C / m->tp, F = m->Fl, rc;
	size_t r0 = (size_t)m->row0 * (size_t)C, mc = (size_t)Ml * C;
	float *ln2 = D(la->ln2) ? D(la->ln2) + r0 : NULL;
	const float *branch;

	linear_fwd(k, D(m->tmp), D(la->atty), PW(m, l, LP_PROJW), PW(m, l, LP_PROJB), 1, BT, Cl, C);
	if ((rc = sum_rows(m, D(m->tmp), D(m->tmpl), (size_t)C, &branch)))
		return rc;
	residual_fwd(k, D(la->res2), x, branch, mc);
	layernorm_fwd(k, ln2, D(la->ln2_mean), D(la->ln2_rstd), D(la->res2), PW(m, l, LP_LN2W),
		      PW(m, l, LP_LN2B), Ml, C);
	if ((rc = gather_rows(m, D(la->ln2), (size_t)C)))
		return rc;
	if (gpt_layer_is_moe(&m->cfg, l)) {
		*aux += moe_fwd(k, &m->moe, &la->moe, D(m->tmp), D(la->ln2), PW(m, l, LP_ROUTER),
				PW(m, l, LP_FCW), PW(m, l, LP_FCB), PW(m, l, LP_FC2W),
				PW(m, l, LP_FC2B));
	} else if (m->mlp_chunks > 1) {
		mlp_chunks_fwd(m, la, l);
	} else {
		linear_fwd(k, D(la->fch), D(la->ln2), PW(m, l, LP_FCW), PW(m, l, LP_FCB), 1, BT, C,
			   F);
		gelu_fwd(k, D(la->fch_gelu), D(la->fch), (size_t)BT * F);
		linear_fwd(k, D(m->tmp), D(la->fch_gelu), PW(m, l, LP_FC2W), PW(m, l, LP_FC2B), 1,
			   BT, F, C);
	}
	if (m->drop_allreduce && l == 0) /* tests: a broken strategy */
		branch = D(m->tmp) ? D(m->tmp) + r0 : NULL;
	else if ((rc = sum_rows(m, D(m->tmp), D(m->tmpl), (size_t)C, &branch)))
		return rc;
	residual_fwd(k, D(la->res3), D(la->res2), branch, mc);
	return 0;
}

/* Layer l's forward from x into la; adds its MoE aux loss to *aux. */
static int layer_fwd(struct tp_model *m, struct gpt_layer_acts *la, int l, const float *x,
		     float *aux)
{
	int rc;

	if ((rc = pre_fwd(m, la, l, x)))
		return rc;
	attn_fwd(m, la);
	return post_fwd(m, la, l, x, aux);
}

/* Recomputation (Korthikanti et al. 2022, arXiv 2205.05198): between a layer's forward
 * and its backward, selective keeps all but the attention scores (B a T T, recomputed by
 * the attention's forward in backward), full keeps only the layer's output, the next
 * layer's input (the whole layer's forward is run again in backward, its tensor-parallel
 * collectives included). drop gives back what the mode does not keep; regrow (a no-op
 * without recomputation) allocates it again. The routing bookkeeping of MoE layers,
 * host-side, stays. */
static void drop(struct tp_model *m, struct gpt_layer_acts *la)
{
	struct tensor keep;

	if (m->recompute == TP_RECOMPUTE_SELECTIVE) {
		if (!m->flash) /* with flash there are no scores to drop */
			tensor_free(&m->k, &la->att);
	} else if (m->recompute == TP_RECOMPUTE_FULL) {
		struct moe_acts host = la->moe;

		keep = la->res3;
		la->res3 = (struct tensor){0};
		la->moe.slot_token = la->moe.choice = la->moe.slot = NULL;
		la->moe.frac = NULL;
		gpt_layer_acts_free(&m->k, la);
		la->res3 = keep;
		la->moe.slot_token = host.slot_token;
		la->moe.choice = host.choice;
		la->moe.slot = host.slot;
		la->moe.frac = host.frac;
	}
}

static int regrow(struct tp_model *m, struct gpt_layer_acts *la, int l)
{
	if (m->recompute == TP_RECOMPUTE_NONE)
		return 0;
	return gpt_layer_acts_alloc(&m->k, la, m->B, m->T, m->Ml, m->cfg.hidden,
				    m->cfg.hidden / m->tp, m->NHl, m->Fl,
				    gpt_layer_is_moe(&m->cfg, l) ? &m->moe : NULL, acts_flags(m));
}

int tp_forward(struct tp_model *m, const int *tokens, const int *targets, float *loss)
{
	return tp_forward_part(m, &m->own, tokens, targets, loss);
}

/* Keeps the micro-batch's tokens and targets (local to the vocabulary shard). */
static void set_batch(struct tp_model *m, struct tp_acts *a, const int *tokens, const int *targets)
{
	int BT = m->B * m->T;

	if (!kctx_math(&m->k))
		return;
	memcpy(a->tokens, tokens, (size_t)BT * sizeof *tokens);
	memcpy(a->targets, targets, (size_t)BT * sizeof *targets);
	for (int i = 0; i < BT; i++)
		a->ltargets[i] =
			targets[i] >= m->v0 && targets[i] < m->v0 + m->Vl ? targets[i] - m->v0 : -1;
}

/* The embeddings of a->tokens into a->enc: this rank's rows of them (all without sp). */
static int embed_fwd(struct tp_model *m, struct tp_acts *a)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, C = m->cfg.hidden, rc;
	const float *branch;

	if ((rc = use(m, TP_UNIT_EMB(m))))
		return rc;
	if (m->tp == 1) {
		embedding_fwd(k, D(a->enc), a->tokens, m->p[0].w, m->p[1].w, B, T, C, 0);
		return 0;
	}
	{
		float *part = m->sp ? D(m->tmp) : D(a->enc);

		embedding_range_fwd(k, part, a->tokens, m->p[0].w, m->v0, m->v0 + m->Vl, B, T, C);
		if ((rc = sum_rows(m, part, D(a->enc), (size_t)C, &branch)))
			return rc;
		position_fwd(k, D(a->enc), m->p[1].w, m->Ml, m->row0, T, C);
	}
	return 0;
}

/* The final LayerNorm of x, the output layer and the loss into a->losses. */
static int head_fwd(struct tp_model *m, struct tp_acts *a, const float *x)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, rc;
	size_t r0 = (size_t)m->row0 * (size_t)C;

	if ((rc = use(m, TP_UNIT_LNF(m))))
		return rc;
	layernorm_fwd(k, D(a->lnf) ? D(a->lnf) + r0 : NULL, D(a->lnf_mean), D(a->lnf_rstd), x,
		      m->p[m->np - 2].w, m->p[m->np - 1].w, m->Ml, C);
	if ((rc = gather_rows(m, D(a->lnf), (size_t)C)) || (rc = use(m, TP_UNIT_EMB(m))))
		return rc;
	linear_fwd(k, D(a->probs), D(a->lnf), m->p[0].w, NULL, 0, BT, C, m->Vl);
	if (m->tp == 1)
		crossentropy_fwd(k, D(a->losses), D(a->probs), D(a->probs), a->targets, BT, m->Vl);
	else if ((rc = vocab_parallel_ce(m, a, BT)))
		return rc;
	return 0;
}

/* The part's loss: the mean cross-entropy if it ran the output layer, plus its aux. */
static float part_loss(const struct tp_model *m, const struct tp_acts *a, int head)
{
	int BT = m->B * m->T;
	double s = 0;

	if (!kctx_math(&m->k))
		return 0;
	for (int i = 0; head && i < BT; i++)
		s += a->losses.data[i];
	return (float)(s / BT) + a->aux_loss;
}

int tp_forward_part(struct tp_model *m, struct tp_acts *a, const int *tokens, const int *targets,
		    float *loss)
{
	int L = m->cfg.num_layers, head = a->l1 == L, rc;
	const float *x;

	*loss = 0;
	a->aux_loss = 0;
	if (a->l0 == 0 || head)
		set_batch(m, a, tokens, targets);
	if (a->l0 == 0 && (rc = embed_fwd(m, a)))
		return rc;
	x = D(a->enc);
	for (int l = a->l0; l < a->l1; l++) {
		struct gpt_layer_acts *la = &a->la[l];

		if ((rc = use(m, l)) || (rc = regrow(m, la, l)) ||
		    (rc = layer_fwd(m, la, l, x, &a->aux_loss)))
			return rc;
		drop(m, la);
		x = D(la->res3);
	}
	if (head && (rc = head_fwd(m, a, x)))
		return rc;
	*loss = part_loss(m, a, head);
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

/* A linear layer's weight gradient from its output gradient dy (M, N) and input x (M, K):
 * now, or (the input pass of a split backward) dy kept in st for the weight pass. */
static int weight_grad(struct tp_model *m, int now, struct tensor *st, const char *name, float *dw,
		       float *db, const float *dy, const float *x, int M, int K, int N)
{
	int rc;

	if (now) {
		linear_bwd_weight(&m->k, dw, db, 1, dy, x, M, K, N);
		return 0;
	}
	if ((rc = tensor_alloc(&m->k, st, MEM_ACT, (size_t)M * N, name)))
		return rc;
	if (st->data && dy)
		memcpy(st->data, dy, (size_t)M * N * sizeof *dy);
	return 0;
}

/* The weight pass of a split backward: every stashed output gradient of the layers. */
static int weight_pass(struct tp_model *m, struct tp_acts *a)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, C3 = 3 * C / m->tp, Cl = C / m->tp, F = m->Fl;
	int rc;

	for (int l = a->l1 - 1; l >= a->l0; l--) {
		struct gpt_layer_acts *la = &a->la[l];
		struct tp_stash *st = &a->stash[l];

		if (!gpt_layer_is_moe(&m->cfg, l)) {
			linear_bwd_weight(k, PG(m, l, LP_FC2W), PG(m, l, LP_FC2B), 1, D(st->gfc2),
					  D(la->fch_gelu), BT, F, C);
			linear_bwd_weight(k, PG(m, l, LP_FCW), PG(m, l, LP_FCB), 1, D(st->dfc),
					  D(la->ln2), BT, C, F);
		}
		linear_bwd_weight(k, PG(m, l, LP_PROJW), PG(m, l, LP_PROJB), 1, D(st->gproj),
				  D(la->atty), BT, Cl, C);
		linear_bwd_weight(k, PG(m, l, LP_QKVW), PG(m, l, LP_QKVB), 1, D(st->dqkv),
				  D(la->ln1), BT, C, C3);
		stash_free(k, st);
		drop(m, la);
		for (int w = 0; w < LP_N; w++)
			if ((rc = ready(m, 2 + l * LP_N + w)))
				return rc;
	}
	return 0;
}

/* Backward of layer l's part after the attention, from m->dres (the gradient of its
 * output): the MLP and the second LayerNorm, adding into m->dres, then the output
 * projection, leaving the attention output's gradient in m->datty. */
static int post_bwd(struct tp_model *m, struct gpt_layer_acts *la, int l, float scale, int weight,
		    struct tp_stash *st)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, Cl = C / m->tp, F = m->Fl, Ml = m->Ml, rc;
	const float *dl, *g;

	if ((rc = full_rows(m, &g)))
		return rc;
	zero(&m->dln);
	if (gpt_layer_is_moe(&m->cfg, l)) {
		float *dr = m->tp == 1 ? PG(m, l, LP_ROUTER) : D(m->drouter);
		size_t nr = m->p[2 + l * LP_N + LP_ROUTER].n;

		/* The router is replicated and sees partial expert outputs: rank 0 alone
		 * adds the aux loss, and this micro-batch's router gradient is summed
		 * over the group before it joins the accumulated one. The experts'
		 * weight gradients come with their input backward, split or not. */
		zero(&m->drouter);
		moe_bwd(k, &m->moe, &la->moe, &m->moe_scratch, D(m->dln), g,
			m->r == 0 ? scale : 0.0f, D(la->ln2), PW(m, l, LP_ROUTER), PW(m, l, LP_FCW),
			PW(m, l, LP_FC2W), dr, PG(m, l, LP_FCW), PG(m, l, LP_FCB),
			PG(m, l, LP_FC2W), PG(m, l, LP_FC2B));
		if (m->tp > 1) {
			if ((rc = tp_sum(m, dr, nr)))
				return rc;
			add_acc(k, PG(m, l, LP_ROUTER), dr, nr);
		}
	} else if (m->mlp_chunks > 1) {
		mlp_chunks_bwd(m, la, l, g);
	} else {
		zero(&m->dfch_gelu);
		linear_bwd_input(k, D(m->dfch_gelu), g, PW(m, l, LP_FC2W), BT, F, C);
		if ((rc = weight_grad(m, weight, &st->gfc2, "stash d fc2", PG(m, l, LP_FC2W),
				      PG(m, l, LP_FC2B), g, D(la->fch_gelu), BT, F, C)))
			return rc;
		zero(&m->dfch);
		gelu_bwd(k, D(m->dfch), D(la->fch), D(m->dfch_gelu), (size_t)BT * F);
		linear_bwd_input(k, D(m->dln), D(m->dfch), PW(m, l, LP_FCW), BT, C, F);
		if ((rc = weight_grad(m, weight, &st->dfc, "stash d fc", PG(m, l, LP_FCW),
				      PG(m, l, LP_FCB), D(m->dfch), D(la->ln2), BT, C, F)))
			return rc;
	}
	if ((rc = sum_rows(m, D(m->dln), D(m->dlocal), (size_t)C, &dl)))
		return rc;
	layernorm_bwd(k, D(m->dres), PG(m, l, LP_LN2W), PG(m, l, LP_LN2B), dl, D(la->res2),
		      PW(m, l, LP_LN2W), D(la->ln2_mean), D(la->ln2_rstd), Ml, C);
	if ((rc = full_rows(m, &g)))
		return rc;
	zero(&m->datty);
	linear_bwd_input(k, D(m->datty), g, PW(m, l, LP_PROJW), BT, Cl, C);
	if ((rc = weight_grad(m, weight, &st->gproj, "stash d proj", PG(m, l, LP_PROJW),
			      PG(m, l, LP_PROJB), g, D(la->atty), BT, Cl, C)))
		return rc;
	return 0;
}

/* The attention's backward: m->datty to m->dqkv. */
static void attn_bwd(struct tp_model *m, struct gpt_layer_acts *la)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, hs = m->cfg.hidden / m->cfg.heads;

	zero(&m->dqkv);
	if (m->flash)
		attention_flash_bwd(k, D(m->dqkv), D(m->att_scratch), D(m->datty), D(la->atty),
				    D(la->att), D(la->qkv), B, T, m->NHl, 0, m->NHl, hs);
	else
		attention_bwd(k, D(m->dqkv), D(m->att_scratch), D(m->datty), D(la->att), D(la->qkv),
			      B, T, m->NHl, 0, m->NHl, hs);
}

/* Backward of layer l's part before the attention, from m->dqkv: the QKV projection and
 * the first LayerNorm (whose input was x), adding into m->dres. */
static int pre_bwd(struct tp_model *m, struct gpt_layer_acts *la, int l, const float *x, int weight,
		   struct tp_stash *st)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, C3 = 3 * C / m->tp, Ml = m->Ml, rc;
	const float *dl;

	zero(&m->dln);
	linear_bwd_input(k, D(m->dln), D(m->dqkv), PW(m, l, LP_QKVW), BT, C, C3);
	if ((rc = weight_grad(m, weight, &st->dqkv, "stash d qkv", PG(m, l, LP_QKVW),
			      PG(m, l, LP_QKVB), D(m->dqkv), D(la->ln1), BT, C, C3)))
		return rc;
	if ((rc = sum_rows(m, D(m->dln), D(m->dlocal), (size_t)C, &dl)))
		return rc;
	layernorm_bwd(k, D(m->dres), PG(m, l, LP_LN1W), PG(m, l, LP_LN1B), dl, x, PW(m, l, LP_LN1W),
		      D(la->ln1_mean), D(la->ln1_rstd), Ml, C);
	return 0;
}

int tp_backward(struct tp_model *m, float scale)
{
	return tp_backward_part(m, &m->own, scale, 1, 1);
}

/* Backward of the loss, the output layer and the final LayerNorm (whose input was x),
 * with d loss = scale: the gradient of x into m->dres. */
static int head_bwd(struct tp_model *m, struct tp_acts *a, const float *x, float scale)
{
	const struct kctx *k = &m->k;
	int BT = m->B * m->T, C = m->cfg.hidden, V = m->Vl, rc;
	const float *dl;

	if ((rc = use(m, TP_UNIT_EMB(m))))
		return rc;
	zero(&m->dlogits);
	crossentropy_bwd(k, D(m->dlogits), D(a->probs), m->tp == 1 ? a->targets : a->ltargets,
			 scale / (float)BT, BT, V);
	zero(&m->dln);
	linear_bwd_input(k, D(m->dln), D(m->dlogits), m->p[0].w, BT, C, V);
	linear_bwd_weight(k, m->p[0].g, NULL, 0, D(m->dlogits), D(a->lnf), BT, C, V);
	if ((rc = sum_rows(m, D(m->dln), D(m->dlocal), (size_t)C, &dl)) ||
	    (rc = use(m, TP_UNIT_LNF(m))))
		return rc;
	zero(&m->dres);
	layernorm_bwd(k, D(m->dres), m->p[m->np - 2].g, m->p[m->np - 1].g, dl, x, m->p[m->np - 2].w,
		      D(a->lnf_mean), D(a->lnf_rstd), m->Ml, C);
	if ((rc = ready(m, m->np - 2)) || (rc = ready(m, m->np - 1)))
		return rc;
	return 0;
}

/* Backward of the embeddings from m->dres. */
static int embed_bwd(struct tp_model *m, struct tp_acts *a)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, C = m->cfg.hidden, rc;
	const float *g;

	if (m->tp == 1) {
		embedding_bwd(k, m->p[0].g, m->p[1].g, D(m->dres), a->tokens, B, T, C, 0);
	} else {
		/* every token's gradient reaches the rank that holds its vocabulary row */
		if ((rc = full_rows(m, &g)))
			return rc;
		embedding_range_bwd(k, m->p[0].g, g, a->tokens, m->v0, m->v0 + m->Vl, B, T, C);
		position_bwd(k, m->p[1].g, D(m->dres), m->Ml, m->row0, T, C);
	}
	if ((rc = ready(m, 1)) || (rc = ready(m, 0)))
		return rc;
	return 0;
}

int tp_backward_part(struct tp_model *m, struct tp_acts *a, float scale, int input, int weight)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, C = m->cfg.hidden, L = m->cfg.num_layers;
	int hs = C / m->cfg.heads, Ml = m->Ml, rc;

	if (!input)
		return weight_pass(m, a);
	if (a->l1 == L) {
		if ((rc = ready(m, -1)) ||
		    (rc = head_bwd(m, a, a->l1 > a->l0 ? D(a->la[a->l1 - 1].res3) : D(a->enc),
				   scale)))
			return rc;
	} else if (D(m->dres)) {
		memcpy(D(m->dres), D(a->dout), (size_t)Ml * C * sizeof(float));
	}
	for (int l = a->l1 - 1; l >= a->l0; l--) {
		struct gpt_layer_acts *la = &a->la[l];
		struct tp_stash *st = &a->stash[l];
		const float *x = l > a->l0 ? D(a->la[l - 1].res3) : D(a->enc);

		if ((rc = use(m, l)) || (rc = regrow(m, la, l)))
			return rc;
		if (m->recompute == TP_RECOMPUTE_FULL) {
			float aux = 0;

			if ((rc = layer_fwd(m, la, l, x, &aux)))
				return rc;
		} else if (m->recompute == TP_RECOMPUTE_SELECTIVE && !m->flash) {
			attention_fwd(k, D(la->atty), D(la->att), D(la->qkv), B, T, m->NHl, 0,
				      m->NHl, hs);
		}
		if ((rc = post_bwd(m, la, l, scale, weight, st)))
			return rc;
		attn_bwd(m, la);
		if ((rc = pre_bwd(m, la, l, x, weight, st)))
			return rc;
		for (int w = 0; weight && w < LP_N; w++)
			if ((rc = ready(m, 2 + l * LP_N + w)))
				return rc;
		if (weight)
			drop(m, la);
	}
	if (a->l0 > 0)
		return 0; /* m->dres: the gradient of the input, for the previous stage */
	return embed_bwd(m, a);
}

/* ------------------------------------------------------------------------------------ */
/* HelixPipe's blocks                                                                   */

int tp_helix_alloc(struct tp_model *m, struct tp_acts *a, int j)
{
	const struct kctx *k = &m->k;
	int L = m->cfg.num_layers, c = j / 2, rc;
	unsigned flash =
		(m->flash ? GPT_ACTS_FLASH : 0u) | (m->mlp_chunks > 1 ? GPT_ACTS_NO_MLP : 0u);

	if (j % 2) { /* the attention of layer l = c */
		if ((rc = tp_acts_alloc_empty(m, a, c, c + 1)) ||
		    (rc = tensor_alloc(k, &a->enc, MEM_ACT, (size_t)m->Ml * m->cfg.hidden,
				       "residual passed")))
			return rc;
		return layer_acts(m, &a->la[c], c, GPT_ACTS_ATTN | flash);
	}
	if ((rc = tp_acts_alloc_empty(m, a, c ? c - 1 : 0, c < L ? c + 1 : L)) ||
	    (rc = tensor_alloc(k, &a->enc, MEM_ACT, (size_t)m->Ml * m->cfg.hidden,
			       c ? "stage input" : "embeddings")))
		return rc;
	if (c > 0 && (rc = layer_acts(m, &a->la[c - 1], c - 1, GPT_ACTS_POST | flash)))
		return rc;
	if (c < L)
		return layer_acts(m, &a->la[c], c, GPT_ACTS_PRE | flash);
	return head_acts(m, a);
}

int tp_helix_fwd(struct tp_model *m, struct tp_acts *a, int j, const int *tokens,
		 const int *targets, float *loss)
{
	int L = m->cfg.num_layers, c = j / 2, rc;
	const float *x = D(a->enc);

	*loss = 0;
	a->aux_loss = 0;
	if (j % 2) {
		attn_fwd(m, &a->la[c]);
		return 0;
	}
	if (c == 0 || c == L)
		set_batch(m, a, tokens, targets);
	if (c == 0 && (rc = embed_fwd(m, a)))
		return rc;
	if (c > 0) {
		if ((rc = post_fwd(m, &a->la[c - 1], c - 1, x, &a->aux_loss)))
			return rc;
		x = D(a->la[c - 1].res3);
	}
	if ((rc = c < L ? pre_fwd(m, &a->la[c], c, x) : head_fwd(m, a, x)))
		return rc;
	*loss = part_loss(m, a, c == L);
	return 0;
}

/* Copies n floats (either side NULL in dry-run: nothing). */
static void copy_in(float *to, const float *from, size_t n)
{
	if (to && from)
		memcpy(to, from, n * sizeof *to);
}

int tp_helix_bwd(struct tp_model *m, struct tp_acts *a, int j, float scale)
{
	const struct kctx *k = &m->k;
	int L = m->cfg.num_layers, c = j / 2, rc;
	size_t BT = (size_t)m->B * m->T, C = (size_t)m->cfg.hidden, nx = (size_t)m->Ml * C;
	size_t nq = 3 * BT * C / (size_t)m->tp, no = BT * C / (size_t)m->tp;
	const float *x;

	if (j % 2) { /* attention: d atty in, d qkv out; the residual's gradient passes */
		copy_in(D(m->datty), D(a->din2), no);
		attn_bwd(m, &a->la[c]);
		if ((rc = tensor_alloc(k, &a->gout_a, MEM_ACT, nq, "d qkv out")) ||
		    (rc = tensor_alloc(k, &a->gout_x, MEM_ACT, nx, "d residual out")))
			return rc;
		copy_in(D(a->gout_a), D(m->dqkv), nq);
		copy_in(D(a->gout_x), D(a->dout), nx);
		return 0;
	}
	if (m->recompute == TP_RECOMPUTE_FULL && c < L) { /* what tp_helix_drop let go */
		unsigned flash = (m->flash ? GPT_ACTS_FLASH : 0u) |
				 (m->mlp_chunks > 1 ? GPT_ACTS_NO_MLP : 0u);
		float aux = 0;

		if ((c > 0 && ((rc = layer_acts(m, &a->la[c - 1], c - 1, GPT_ACTS_POST | flash)) ||
			       (rc = post_fwd(m, &a->la[c - 1], c - 1, D(a->enc), &aux)))) ||
		    (rc = layer_acts(m, &a->la[c], c, GPT_ACTS_PRE | flash)) ||
		    (rc = pre_fwd(m, &a->la[c], c, c > 0 ? D(a->la[c - 1].res3) : D(a->enc))))
			return rc;
	}
	x = c > 0 ? D(a->la[c - 1].res3) : D(a->enc);
	if (c == L) {
		if ((rc = head_bwd(m, a, x, scale)))
			return rc;
	} else {
		copy_in(D(m->dres), D(a->dout), nx);
		copy_in(D(m->dqkv), D(a->din2), nq);
		if ((rc = pre_bwd(m, &a->la[c], c, x, 1, &a->stash[c])))
			return rc;
	}
	if (c == 0)
		return embed_bwd(m, a);
	if ((rc = post_bwd(m, &a->la[c - 1], c - 1, scale, 1, &a->stash[c - 1])) ||
	    (rc = tensor_alloc(k, &a->gout_a, MEM_ACT, no, "d attention out")) ||
	    (rc = tensor_alloc(k, &a->gout_x, MEM_ACT, nx, "d residual out")))
		return rc;
	copy_in(D(a->gout_a), D(m->datty), no);
	copy_in(D(a->gout_x), D(m->dres), nx);
	return 0;
}

int tp_helix_msg(struct tp_model *m, struct tp_acts *a, int j, int grad, int out,
		 struct tensor **parts)
{
	const struct kctx *k = &m->k;
	int L = m->cfg.num_layers, c = j / 2, attn = j % 2, rc;
	size_t BT = (size_t)m->B * m->T, C = (size_t)m->cfg.hidden, nx = (size_t)m->Ml * C;
	size_t nq = 3 * BT * C / (size_t)m->tp, no = BT * C / (size_t)m->tp;

	if (!grad && out) { /* unit c: qkv and its output x_c; attention: atty and x */
		parts[0] = attn ? &a->la[c].atty : &a->la[c].qkv;
		parts[1] = attn || c == 0 ? &a->enc : &a->la[c - 1].res3;
		return 2;
	}
	if (!grad) { /* unit c > 0: the attention output and x_{c-1}; attention: qkv and x */
		parts[0] = attn ? &a->la[c].qkv : &a->la[c - 1].atty;
		parts[1] = &a->enc;
		return 2;
	}
	if (out) {
		parts[0] = &a->gout_a;
		parts[1] = &a->gout_x;
		return 2;
	}
	/* the gradient of the output: d qkv (unit c < L) or d atty (attention), and of x */
	EMU_ASSERT(attn || c < L);
	if ((rc = tensor_ensure(k, &a->din2, MEM_ACT, attn ? no : nq, "d output in")) ||
	    (rc = tensor_ensure(k, &a->dout, MEM_ACT, nx, "d residual in")))
		return rc;
	parts[0] = &a->din2;
	parts[1] = &a->dout;
	return 2;
}

void tp_helix_drop(struct tp_model *m, struct tp_acts *a, int j)
{
	const struct kctx *k = &m->k;
	int c = j / 2;

	if (m->recompute != TP_RECOMPUTE_FULL)
		return;
	if (j % 2) {
		tensor_free(k, &a->enc);
		return;
	}
	if (c == m->cfg.num_layers)
		return; /* the output layer's backward needs its activations */
	if (c > 0) {    /* the rest of layer c - 1, but its input, the attention output */
		struct gpt_layer_acts *la = &a->la[c - 1];
		struct tensor *t[] = {&la->res2,  &la->ln2,      &la->ln2_mean, &la->ln2_rstd,
				      &la->fch,   &la->fch_gelu, &la->res3,     &la->moe.probs,
				      &la->moe.x, &la->moe.pre,  &la->moe.h,    &la->moe.y};

		for (size_t i = 0; i < sizeof t / sizeof *t; i++)
			tensor_free(k, t[i]);
	}
	tensor_free(k, &a->la[c].ln1);
	tensor_free(k, &a->la[c].ln1_mean);
	tensor_free(k, &a->la[c].ln1_rstd);
	tensor_free(k, &a->la[c].qkv);
}
