/* par/dp: data parallelism (Li et al. 2020, arXiv 2006.15704) and ZeRO 1-3 (Rajbhandari et
 * al. 2019, arXiv 1910.02054): buckets, their reduction, sharded state; see par/dp.h. */
#include "par/dp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "par/sp.h"
#include "par/tp.h"
#include "util.h"

/* Fills what bucket b's range of buf holds outside this rank's chunk with v. */
static void fill_others(const struct par_dp_bucket *b, float *buf, float v)
{
	size_t lo, chunk = par_dp_chunk(b, &lo);

	if (!buf)
		return;
	for (size_t e = b->lo; e < lo; e++)
		buf[e] = v;
	for (size_t e = lo + chunk; e < b->hi; e++)
		buf[e] = v;
}

/* Stage 0 all-reduces a bucket; stages 1-3 reduce-scatter it in place, each rank keeping
 * the sum of its own chunk (all its optimizer will read). */
static int post(struct par_dp_state *s, struct par_dp_bucket *b)
{
	float *g = s->m->grads.data;
	size_t lo, chunk = par_dp_chunk(b, &lo);
	enum emu_stream old;
	int rc, wire;

	b->posted = 1;
	if (b->n == 1)
		return 0;
	/* on a stream of their own, so that TP's blocking all-reduces never queue behind them */
	old = coll_use_stream(s->m->k.d, EMU_STREAM_COMM2);
	wire = par_grad_wire(s->m);
	if (s->zero >= 1)
		rc = coll_ireduce_scatter(s->m->k.d, b->g, g ? g + b->lo : NULL, g ? g + lo : NULL,
					  chunk, COLL_SUM, &b->req);
	else
		rc = coll_iall_reduce(s->m->k.d, b->g, g ? g + b->lo : NULL, g ? g + b->lo : NULL,
				      b->hi - b->lo, COLL_SUM, &b->req);
	coll_set_wire_bytes(s->m->k.d, wire);
	coll_use_stream(s->m->k.d, old);
	return rc;
}

void par_dp_owned_ranges(const struct par_dp_state *s, void (*fn)(void *, size_t, size_t, size_t),
			 void *ctx)
{
	size_t st = 0;

	if (s->zero == 0) {
		fn(ctx, 0, s->m->nflat, 0);
		return;
	}
	for (int k = 0; k < s->nb; k++) {
		size_t lo, chunk = par_dp_chunk(&s->b[k], &lo);

		fn(ctx, lo, lo + chunk, st);
		st += chunk;
	}
}

/* Stages 2-3: bucket b's gradients become a live buffer as backward starts writing it. */
static int open_bucket(struct par_dp_state *s, struct par_dp_bucket *b)
{
	uint64_t bytes = (b->hi - b->lo) * (uint64_t)s->m->k.gb;

	if (b->gbuf)
		return 0;
	b->gbuf = mem_alloc_host(s->m->k.d, MEM_COMM, bytes, 0, "zero gradient bucket");
	return b->gbuf ? 0 : EMU_EOOM;
}

/* Stages 2-3: once bucket b's reduce-scatter is done, this rank's chunk holds the sum so
 * far; the rest is zeroed for the next micro-batch and the buffer goes. */
static int close_bucket(struct par_dp_state *s, struct par_dp_bucket *b)
{
	int rc = b->req ? coll_wait(s->m->k.d, b->req) : 0;

	b->req = NULL;
	fill_others(b, s->m->grads.data, 0.0f);
	if (b->gbuf)
		mem_free(s->m->k.d, b->gbuf);
	b->gbuf = NULL;
	return rc;
}

/* Whether bucket b holds the tied embedding's gradient, which the hook leaves to
 * par_dp_sync_grads on a pipeline's end stages (par_dp_state.tied_after). */
static int held(const struct par_dp_state *s, const struct par_dp_bucket *b)
{
	const struct par_param *wte = &s->m->p[0];

	return s->tied_after && b->lo < wte->off + wte->n && wte->off < b->hi;
}

/* The parameters of bucket k (positions b[k - 1].last + 1 .. b[k].last of m->order)
 * that this rank holds elements of. */
static int bucket_params(const struct par_dp_state *s, int k)
{
	int n = 0;

	for (int q = k ? s->b[k - 1].last + 1 : 0; q <= s->b[k].last; q++)
		n += s->m->p[s->m->order[q]].n > 0;
	return n;
}

/* The backward hook: post every bucket whose last parameter is now final. Stages 2-3
 * post in every micro-batch and keep the live buckets few (par/dp.h). */
static int hook(void *ctx, int i)
{
	struct par_dp_state *s = ctx;
	int rc;

	if (!s->armed && s->zero < 2)
		return 0;
	if (i < 0 && s->zero < 2)
		return 0;
	if (i < 0) { /* backward begins: the tied output layer writes wte's gradient first */
		if ((rc = open_bucket(s, &s->b[0])))
			return rc;
		return open_bucket(s, &s->b[s->nb - 1]);
	}
	if (s->pipelined) { /* (ZeRO 0-1: nothing more to do than post) */
		struct par_dp_bucket *b = &s->b[s->bucket_of[i]];

		if (!s->m->p[i].n) /* (not held here, and not counted) */
			return 0;
		return --b->left || b->posted || held(s, b) ? 0 : post(s, b);
	}
	for (int k = 0; k < s->nb; k++) {
		struct par_dp_bucket *b = &s->b[k];

		if (b->posted || b->last > s->pos[i])
			continue;
		if ((rc = post(s, b)))
			return rc;
		if (s->zero < 2)
			continue;
		if ((k + 1 < s->nb && (rc = open_bucket(s, &s->b[k + 1]))) ||
		    (k > 0 && (rc = close_bucket(s, &s->b[k - 1]))))
			return rc;
	}
	return 0;
}

/* ZeRO-3: posts the all-gather of bucket b's weights into a live buffer, unless they
 * are gathered or on their way. */
static int gather(struct par_dp_state *s, struct par_dp_bucket *b)
{
	struct emu_dev *d = s->m->k.d;
	float *w = s->m->weights.data;
	size_t lo, chunk = par_dp_chunk(b, &lo);
	uint64_t bytes = (b->hi - b->lo) * (uint64_t)tensor_elem_bytes(s->m->k.prec, MEM_PARAM);
	enum emu_stream old;
	int rc;

	if (b->wbuf)
		return 0;
	if (!(b->wbuf = mem_alloc_host(d, MEM_COMM, bytes, 0, "zero-3 gathered weights")))
		return EMU_EOOM;
	old = coll_use_stream(d, EMU_STREAM_COMM2);
	rc = coll_iall_gather(d, b->g, w ? w + lo : NULL, w ? w + b->lo : NULL, chunk, &b->gather);
	coll_use_stream(d, old);
	return rc;
}

/* ZeRO-3: frees bucket b's gathered weights, leaving NaN where they were. */
static int release(struct par_dp_state *s, struct par_dp_bucket *b)
{
	int rc = b->gather ? coll_wait(s->m->k.d, b->gather) : 0;

	b->gather = NULL;
	if (!b->wbuf)
		return rc;
	fill_others(b, s->m->weights.data, NAN);
	mem_free(s->m->k.d, b->wbuf);
	b->wbuf = NULL;
	return rc;
}

/* ZeRO-3: gather (post), wait for or release every bucket of unit u. */
enum unit_op { UNIT_GATHER, UNIT_WAIT, UNIT_RELEASE };

static int unit_do(struct par_dp_state *s, int u, enum unit_op op)
{
	int rc = 0;

	for (int k = s->unit_bucket[u]; k < s->unit_bucket[u] + s->unit_nb[u] && !rc; k++) {
		struct par_dp_bucket *b = &s->b[k];

		if (op == UNIT_GATHER)
			rc = gather(s, b);
		else if (op == UNIT_RELEASE)
			rc = release(s, b);
		else if (b->gather) {
			rc = coll_wait(s->m->k.d, b->gather);
			b->gather = NULL;
		}
	}
	return rc;
}

/* The read hook (ZeRO-3): unit u is about to be read. Frees the unit read before it,
 * waits for u's gather, and posts the next one's. */
static int use(void *ctx, int u)
{
	struct par_dp_state *s = ctx;
	int i = s->cur++, rc;

	EMU_ASSERT(i < s->nseq && s->seq[i] == u);
	if (i > 0 && s->seq[i - 1] != u && (rc = unit_do(s, s->seq[i - 1], UNIT_RELEASE)))
		return rc;
	if ((rc = unit_do(s, u, UNIT_GATHER)) || (rc = unit_do(s, u, UNIT_WAIT)))
		return rc;
	if (i + 1 < s->nseq && s->seq[i + 1] != u)
		return unit_do(s, s->seq[i + 1], UNIT_GATHER);
	return 0;
}

/* The group a bucket of expert parameters (or not) is reduced, sharded and gathered
 * over: under expert parallelism the experts' own (par/dp.h). */
static void bucket_group(const struct par_dp_state *s, const struct par_groups *g, int expert,
			 struct par_dp_bucket *b)
{
	b->g = expert ? g->edp : g->dp;
	b->n = expert ? s->m->pc.edp : s->dp;
	b->r = expert ? g->edp_rank : g->dp_rank;
}

/* ZeRO-3: a bucket per unit, two or more where a MoE layer's experts have a group of
 * their own (expert parallelism over dp ranks: the unit's parameters by group, in flat
 * order), and the order a micro-batch reads the units in. */
static void unit_buckets(struct par_dp_state *s, const struct par_groups *g)
{
	struct par_model *m = s->m;
	int L = m->cfg.num_layers;

	s->nb = 0;
	s->unit_bucket = emu_xcalloc(2 * ((size_t)L + 2), sizeof *s->unit_bucket);
	s->unit_nb = s->unit_bucket + L + 2;
	for (int k = 0; k < m->np; k++) {
		int u = par_unit_of(m, m->order[k]), expert = m->p[m->order[k]].expert;

		if (k + 1 < m->np && par_unit_of(m, m->order[k + 1]) == u &&
		    m->p[m->order[k + 1]].expert == expert)
			continue;
		/* a unit's parameters are contiguous in flat order, so are its buckets */
		EMU_ASSERT(!s->unit_nb[u] || s->unit_bucket[u] + s->unit_nb[u] == s->nb);
		if (!s->unit_nb[u]++)
			s->unit_bucket[u] = s->nb;
		bucket_group(s, g, expert, &s->b[s->nb]);
		s->b[s->nb].lo = s->nb ? s->b[s->nb - 1].hi : 0;
		s->b[s->nb].hi = k + 1 < m->np ? m->p[m->order[k + 1]].off : m->nflat;
		s->b[s->nb++].last = k;
	}
	s->seq = emu_xcalloc(2 * (size_t)L + 5, sizeof *s->seq);
	s->seq[s->nseq++] = PAR_UNIT_EMB(m);
	for (int l = 0; l < L; l++)
		s->seq[s->nseq++] = l;
	s->seq[s->nseq++] = PAR_UNIT_LNF(m);
	s->seq[s->nseq++] = PAR_UNIT_EMB(m);
	s->seq[s->nseq++] = PAR_UNIT_EMB(m);
	s->seq[s->nseq++] = PAR_UNIT_LNF(m);
	for (int l = L - 1; l >= 0; l--)
		s->seq[s->nseq++] = l;
	/* between uses, only this rank's chunks are there */
	for (int k = 0; k < s->nb; k++)
		fill_others(&s->b[k], m->weights.data, NAN);
	m->use = use;
}

/* The model chunk (Megatron's virtual stage; interleaved's chunks a rank) parameter i is
 * in, for its buckets: layer l in chunk l chunks / L, the final LayerNorm in the last and
 * the embeddings in the first (backward finishes them first and last: par/model.c). */
static int chunk_of(const struct par_model *m, int i)
{
	int u = par_unit_of(m, i), L = m->cfg.num_layers, c = m->pc.chunks > 1 ? m->pc.chunks : 1;

	if (u == PAR_UNIT_EMB(m))
		return 0;
	return u == PAR_UNIT_LNF(m) ? c - 1 : (int)((int64_t)u * c / L);
}

uint64_t par_dp_bucket_params(int zero, int overlap, uint64_t params, uint64_t bytes, int dp,
			      unsigned wb)
{
	uint64_t d = dp > 1 ? (uint64_t)dp : 1;

	if (zero >= 3 || (zero < 2 && !overlap))
		return 0;
	if (params)
		return params;
	/* a size in bytes counts elements at the weights' width, fp32 gradients or not (as
	 * Megatron's counts elements): the same buckets, so the same sums, either way */
	if (bytes || zero == 2)
		return ((bytes ? bytes : PAR_DP_BUCKET_BYTES) + wb - 1) / wb;
	return PAR_DP_BUCKET_PARAMS > PAR_DP_BUCKET_PER_DP * d ? PAR_DP_BUCKET_PARAMS
							       : PAR_DP_BUCKET_PER_DP * d;
}

/* Whether parameter i is the tied embedding a pipeline's end stage shares with the
 * other end (held, and the stage not both ends: HelixPipe's first holds both). */
static int tied_apart(const struct par_model *m, int i)
{
	return i == 0 && m->p[0].n && m->part.first != m->part.last;
}

/* The most elements a bucket of chunk c holds, 0 for no limit: ZeRO-2's in every chunk,
 * ZeRO 0-1's in the first chunk of the first stage only (par/dp.h). */
static uint64_t bucket_limit(const struct par_model *m, int c)
{
	const struct par_cfg *pc = &m->pc;

	if (pc->zero < 2 && !(m->part.first && c == 0))
		return 0;
	return par_dp_bucket_params(pc->zero, pc->buckets, pc->bucket_params, pc->bucket_bytes,
				    pc->pad, m->k.ab);
}

int par_dp_init(struct par_dp_state *s, struct par_model *m, const struct par_groups *g)
{
	int dp = m->pc.pad ? m->pc.pad : 1, zero = m->pc.zero;
	size_t lo = 0;

	memset(s, 0, sizeof *s);
	s->m = m;
	s->g = g->dp;
	s->pg = g->pp;
	s->dp = dp;
	s->r = g->dp_rank;
	/* (one rank: nothing to shard, but experts spread over tp ranks keep their group) */
	s->zero = dp == 1 && m->pc.edp <= 1 && zero > 1 ? 1 : zero;
	s->pos = emu_xcalloc((size_t)m->np, sizeof *s->pos);
	s->b = emu_xcalloc((size_t)m->np, sizeof *s->b);
	for (int k = 0; k < m->np; k++) {
		size_t hi = k + 1 < m->np ? m->p[m->order[k + 1]].off : m->nflat;
		int expert = m->p[m->order[k]].expert, c = chunk_of(m, m->order[k]);
		uint64_t limit = bucket_limit(m, c);

		s->pos[m->order[k]] = k;
		/* a bucket ends at its size, where the parameters' group or chunk changes, and
		 * around the tied embedding of a pipeline's end stage (its sum over the two
		 * ends comes first; Megatron's distributed optimizer also gives it a bucket of
		 * its own); one this rank holds nothing of is no bucket (its parameters go to
		 * the next) */
		if ((limit && hi - lo >= limit) || k + 1 == m->np ||
		    m->p[m->order[k + 1]].expert != expert || chunk_of(m, m->order[k + 1]) != c ||
		    tied_apart(m, m->order[k]) || tied_apart(m, m->order[k + 1])) {
			if (hi == lo && k + 1 < m->np)
				continue;
			if (hi == lo && s->nb) { /* (the last bucket takes the trailing ones) */
				s->b[s->nb - 1].last = k;
				continue;
			}
			s->b[s->nb] = (struct par_dp_bucket){.lo = lo, .hi = hi, .last = k};
			bucket_group(s, g, expert, &s->b[s->nb++]);
			lo = hi;
		}
	}
	s->bucket_of = emu_xcalloc((size_t)m->np, sizeof *s->bucket_of);
	for (int k = 0; k < s->nb; k++) {
		s->b[k].left = bucket_params(s, k);
		for (int q = k ? s->b[k - 1].last + 1 : 0; q <= s->b[k].last; q++)
			s->bucket_of[m->order[q]] = k;
	}
	if (s->zero == 3)
		unit_buckets(s, g);
	else if (s->zero >= 1 && m->pc.overlap_param_gather)
		par_dp_unit_ranges(s);
	m->hook = hook;
	m->hook_ctx = s;
	s->owned = 0;
	for (int k = 0; k < s->nb; k++) {
		size_t lo2, chunk = par_dp_chunk(&s->b[k], &lo2);

		s->owned += zero >= 1 ? chunk : s->b[k].hi - s->b[k].lo;
	}
	return tensor_alloc_optim(&m->k, &s->opt, s->owned, "adam state");
}

void par_dp_free(struct par_dp_state *s)
{
	free(s->pos);
	free(s->bucket_of);
	s->bucket_of = NULL;
	free(s->b);
	free(s->unit_bucket); /* (and unit_nb) */
	free(s->seq);
	free(s->unit_lo); /* (and unit_hi) */
	s->unit_lo = s->unit_hi = NULL;
	s->pos = NULL;
	s->b = NULL;
	s->unit_bucket = NULL;
	s->seq = NULL;
}

int par_dp_after_backward(struct par_dp_state *s)
{
	int rc = 0;

	if (s->zero < 2)
		return 0;
	for (int k = 0; k < s->nb && !rc; k++)
		if (!s->b[k].posted)
			rc = post(s, &s->b[k]);
	for (int k = 0; k < s->nb; k++) {
		int rc2 = close_bucket(s, &s->b[k]);

		if (s->zero == 3 && !rc2)
			rc2 = release(s, &s->b[k]);
		rc = rc ? rc : rc2;
		s->b[k].posted = 0;
	}
	s->cur = 0;
	return rc;
}

int par_dp_sync_grads(struct par_dp_state *s)
{
	int rc = 0;

	if (s->zero >= 2) /* par_dp_after_backward has reduced every micro-batch */
		goto partials;
	for (int k = 0; k < s->nb && !rc; k++)
		if (!s->b[k].posted)
			rc = post(s, &s->b[k]);
	for (int k = 0; k < s->nb; k++) {
		struct par_dp_bucket *b = &s->b[k];

		if (b->req) {
			int rc2 = coll_wait(s->m->k.d, b->req);

			rc = rc ? rc : rc2;
		}
		b->req = NULL;
		b->posted = 0;
		b->left = bucket_params(s, k);
	}
partials:
	if (rc || !s->m->partials)
		return rc;
	/* Sequence parallelism left the LayerNorm and position gradients partial over tp,
	 * mixed degrees the first layers' over their parts: sum what this rank holds. */
	if (s->zero == 0 || s->dp == 1)
		return par_tp_sum_partials(s->m, 0, s->m->nflat);
	for (int k = 0; k < s->nb && !rc; k++) {
		struct par_dp_bucket *b = &s->b[k];
		size_t lo, chunk = par_dp_chunk(b, &lo);

		rc = par_tp_sum_chunk_partials(s->m, b->lo, chunk, b->n, b->r, b->partial_max,
					       &b->partial_counted);
	}
	return rc;
}

/* The global gradient norm: the squares this rank holds, summed over tp (and over dp,
 * where ZeRO split them). */
struct sq_ctx {
	struct par_model *m;
	int shard;            /* ZeRO: [lo, hi) is a shard, charged as one kernel */
	double sq, sq_expert; /* the experts' apart under expert parallelism */
};

/* Squares of the gradients in [lo, hi) of the parameters this tp rank owns: a kernel a
 * parameter, or one over a ZeRO shard (models/optim.h). */
static void sq_range(void *ctx, size_t lo, size_t hi, size_t st)
{
	struct sq_ctx *c = ctx;
	struct par_model *m = c->m;

	(void)st;
	if (c->shard)
		optim_sq_norm_charge(&m->k, hi - lo);
	for (int i = 0; i < m->np; i++) {
		const struct par_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;
		const float *g = p->g ? p->g + (a - p->off) : NULL;

		if (a < b && p->owner)
			*(p->expert ? &c->sq_expert : &c->sq) +=
				c->shard ? optim_sq_norm_math(&m->k, g, b - a)
					 : optim_sq_norm(&m->k, g, b - a);
	}
}

static int grad_norm(struct par_dp_state *s, double *norm)
{
	struct par_model *m = s->m;
	struct sq_ctx c = {m, s->zero >= 1, 0, 0};
	float part, ex;
	int rc;

	par_dp_owned_ranges(s, sq_range, &c);
	if (m->tp == 1 && (s->zero == 0 || s->dp == 1) && !s->pg && m->ep == 1) {
		*norm = sqrt(c.sq); /* nothing to sum: exactly the serial model's norm */
		return 0;
	}
	/* each rank of the expert-parallel group holds other experts: without ZeRO (which
	 * sums everything over dp below), their squares are summed over it, and when the
	 * group spans the tp group (whole experts), not again over tp */
	ex = (float)c.sq_expert;
	if (m->ep > 1 && s->zero == 0 &&
	    (rc = coll_all_reduce(m->k.d, m->epg, &ex, &ex, 1, COLL_SUM)))
		return rc;
	part = (float)c.sq + (m->ep_rows && s->zero == 0 ? 0.0f : ex);
	if (m->tp > 1 && (rc = coll_all_reduce(m->k.d, m->g, &part, &part, 1, COLL_SUM)))
		return rc;
	if (m->ep_rows && s->zero == 0)
		part += ex;
	if (s->zero >= 1 && s->dp > 1 &&
	    (rc = coll_all_reduce(m->k.d, s->g, &part, &part, 1, COLL_SUM)))
		return rc;
	if (s->pg && (rc = coll_all_reduce(m->k.d, s->pg, &part, &part, 1, COLL_SUM)))
		return rc;
	*norm = sqrt((double)part);
	return 0;
}

/* AdamW on the flat range [lo, hi), parameter by parameter; its state starts at st.
 * Charged a kernel a parameter, or with ZeRO one over the shard (models/optim.h). */
static void update_range(struct par_dp_state *s, const struct optim_cfg *o, size_t lo, size_t hi,
			 size_t st, float lr, float scale, int t)
{
	struct par_model *m = s->m;
	float *mm = s->opt.data, *vv = mm ? mm + s->owned : NULL;

	if (s->zero >= 1)
		optim_adamw_charge(&m->k, hi - lo);
	for (int i = 0; i < m->np; i++) {
		const struct par_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;
		float *w = p->w ? p->w + (a - p->off) : NULL, *mw = mm ? mm + st + (a - lo) : NULL;
		float *vw = vv ? vv + st + (a - lo) : NULL;
		const float *g = p->g ? p->g + (a - p->off) : NULL;

		if (a >= b || p->frozen)
			continue;
		if (s->zero >= 1)
			optim_adamw_math(&m->k, o, w, g, mw, vw, b - a, lr, scale, p->decay, t);
		else
			optim_adamw(&m->k, o, w, g, mw, vw, b - a, lr, scale, p->decay, t);
	}
}

int par_dp_step(struct par_dp_state *s, const struct optim_cfg *o, int t, double *norm)
{
	struct par_model *m = s->m;
	float lr = optim_lr(o, t - 1), scale = 1.0f;
	size_t st = 0;
	int rc;

	/* (the updates below write what an owed all-gather would still send) */
	if ((rc = par_dp_gather_owed(s)) || (rc = grad_norm(s, norm)))
		return rc;
	if (o->clip > 0 && *norm > o->clip)
		scale = (float)(o->clip / *norm);
	if (s->zero == 0) {
		update_range(s, o, 0, m->nflat, 0, lr, scale, t);
		return 0;
	}
	/* ZeRO 1-3: this rank's chunk of every bucket; then, but in stage 3 (which gathers
	 * before each use), everyone's chunks gathered. */
	for (int k = 0; k < s->nb; k++) {
		size_t lo, chunk = par_dp_chunk(&s->b[k], &lo);

		update_range(s, o, lo, lo + chunk, st, lr, scale, t);
		st += chunk;
	}
	for (int k = 0; k < s->nb && s->zero < 3 && !rc; k++) {
		struct par_dp_bucket *b = &s->b[k];

		if (b->n == 1) /* a group of one has nothing to gather */
			continue;
		if (m->pc.overlap_param_gather)
			b->owed = 1; /* the next forward gathers it (use_owed) */
		else
			rc = par_dp_post_gather(s, b, &b->req);
	}
	for (int k = 0; k < s->nb; k++) { /* every posted one, even after an error */
		int rc2 = s->b[k].req ? coll_wait(m->k.d, s->b[k].req) : 0;

		rc = rc ? rc : rc2;
		s->b[k].req = NULL;
	}
	return rc;
}
