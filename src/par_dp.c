/* par_dp: buckets, gradient all-reduce and ZeRO-1; see par_dp.h. */
#include "par_dp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "util.h"

/* Stage 0 all-reduces a bucket; stage 1 reduce-scatters it in place, each rank keeping
 * the sum of its own chunk (all its optimizer will read). */
static int post(struct dp_state *s, struct dp_bucket *b)
{
	float *g = s->m->grads.data;
	size_t chunk = (b->hi - b->lo) / (size_t)s->dp;
	enum emu_stream old;
	int rc;

	b->posted = 1;
	if (s->dp == 1 || (s->drop_bucket && b == s->b))
		return 0;
	/* on a stream of their own, so that TP's blocking all-reduces never queue behind them */
	old = coll_use_stream(s->m->k.d, EMU_STREAM_COMM2);
	if (s->zero >= 1)
		rc = coll_ireduce_scatter(s->m->k.d, s->g, g ? g + b->lo : NULL,
					  g ? g + b->lo + (size_t)s->r * chunk : NULL, chunk,
					  COLL_SUM, &b->req);
	else
		rc = coll_iall_reduce(s->m->k.d, s->g, g ? g + b->lo : NULL, g ? g + b->lo : NULL,
				      b->hi - b->lo, COLL_SUM, &b->req);
	coll_use_stream(s->m->k.d, old);
	return rc;
}

/* Calls fn(ctx, lo, hi) for each flat range whose summed gradient this rank holds:
 * everything in stage 0, its chunk of every bucket in stage 1. */
static void owned_ranges(const struct dp_state *s, void (*fn)(void *, size_t, size_t), void *ctx)
{
	if (s->zero == 0) {
		fn(ctx, 0, s->m->nflat);
		return;
	}
	for (int k = 0; k < s->nb; k++) {
		const struct dp_bucket *b = &s->b[k];
		size_t chunk = (b->hi - b->lo) / (size_t)s->dp, lo = b->lo + (size_t)s->r * chunk;

		fn(ctx, lo, lo + chunk);
	}
}

/* The backward hook: post every bucket whose last parameter is now final. */
static int hook(void *ctx, int i)
{
	struct dp_state *s = ctx;
	int rc;

	if (!s->armed)
		return 0;
	for (int k = 0; k < s->nb; k++) {
		struct dp_bucket *b = &s->b[k];

		if (!b->posted && b->last <= s->pos[i] && (rc = post(s, b)))
			return rc;
	}
	return 0;
}

int dp_init(struct dp_state *s, struct tp_model *m, struct emu_group *g, int dp, int r, int zero,
	    uint64_t bucket_bytes, int wire_bytes)
{
	size_t lo = 0;

	memset(s, 0, sizeof *s);
	s->m = m;
	s->g = g;
	s->dp = dp;
	s->r = r;
	s->zero = zero;
	s->pos = emu_xcalloc((size_t)m->np, sizeof *s->pos);
	s->b = emu_xcalloc((size_t)m->np, sizeof *s->b);
	for (int k = 0; k < m->np; k++) {
		size_t hi = k + 1 < m->np ? m->p[m->order[k + 1]].off : m->nflat;

		s->pos[m->order[k]] = k;
		if ((hi - lo) * (uint64_t)wire_bytes >= bucket_bytes || k + 1 == m->np) {
			s->b[s->nb++] = (struct dp_bucket){lo, hi, k, NULL, 0};
			lo = hi;
		}
	}
	m->hook = hook;
	m->hook_ctx = s;
	s->owned = zero >= 1 ? m->nflat / (size_t)dp : m->nflat;
	return tensor_alloc_optim(&m->k, &s->opt, s->owned, "adam state");
}

void dp_free(struct dp_state *s)
{
	free(s->pos);
	free(s->b);
	s->pos = NULL;
	s->b = NULL;
}

int dp_sync_grads(struct dp_state *s)
{
	int rc = 0;

	for (int k = 0; k < s->nb && !rc; k++)
		if (!s->b[k].posted)
			rc = post(s, &s->b[k]);
	for (int k = 0; k < s->nb; k++) {
		struct dp_bucket *b = &s->b[k];

		if (b->req) {
			int rc2 = coll_wait(s->m->k.d, b->req);

			rc = rc ? rc : rc2;
		}
		b->req = NULL;
		b->posted = 0;
	}
	if (rc || !s->m->sp)
		return rc;
	/* Sequence parallelism left the LayerNorm and position gradients partial over tp:
	 * sum what this rank holds of them. */
	if (s->zero == 0 || s->dp == 1)
		return tp_sum_partials(s->m, 0, s->m->nflat);
	for (int k = 0; k < s->nb && !rc; k++) {
		const struct dp_bucket *b = &s->b[k];
		size_t chunk = (b->hi - b->lo) / (size_t)s->dp, lo = b->lo + (size_t)s->r * chunk;

		rc = tp_sum_partials(s->m, lo, lo + chunk);
	}
	return rc;
}

/* The global gradient norm: the squares this rank holds, summed over tp (and over dp,
 * where ZeRO split them). */
struct sq_ctx {
	struct tp_model *m;
	double sq;
};

/* Squares of the gradients in [lo, hi) of the parameters this tp rank owns. */
static void sq_range(void *ctx, size_t lo, size_t hi)
{
	struct sq_ctx *c = ctx;
	struct tp_model *m = c->m;

	for (int i = 0; i < m->np; i++) {
		const struct tp_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;

		if (a < b && p->owner)
			c->sq += optim_sq_norm(&m->k, p->g ? p->g + (a - p->off) : NULL, b - a);
	}
}

static int grad_norm(struct dp_state *s, double *norm)
{
	struct tp_model *m = s->m;
	struct sq_ctx c = {m, 0};
	float part;
	int rc;

	owned_ranges(s, sq_range, &c);
	if (m->tp == 1 && (s->zero == 0 || s->dp == 1)) {
		*norm = sqrt(c.sq); /* nothing to sum: exactly the serial model's norm */
		return 0;
	}
	part = (float)c.sq;
	if (m->tp > 1 && (rc = coll_all_reduce(m->k.d, m->g, &part, &part, 1, COLL_SUM)))
		return rc;
	if (s->zero >= 1 && s->dp > 1 &&
	    (rc = coll_all_reduce(m->k.d, s->g, &part, &part, 1, COLL_SUM)))
		return rc;
	*norm = sqrt((double)part);
	return 0;
}

struct grad_copy {
	struct tp_model *m;
	float **full;
};

static void copy_range(void *ctx, size_t lo, size_t hi)
{
	struct grad_copy *c = ctx;
	struct tp_model *m = c->m;

	for (int i = 0; i < m->np; i++) {
		const struct tp_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;

		if (a < b && p->owner && p->g)
			tp_shard_copy_range(m, i, c->full[i], p->g, a - p->off, b - p->off, 1);
	}
}

void dp_copy_grads(const struct dp_state *s, float **full)
{
	struct grad_copy c = {s->m, full};

	if (s->zero >= 1 || s->r == 0)
		owned_ranges(s, copy_range, &c);
}

/* AdamW on the flat range [lo, hi), parameter by parameter; its state starts at st. */
static void update_range(struct dp_state *s, const struct optim_cfg *o, size_t lo, size_t hi,
			 size_t st, float lr, float scale, int t)
{
	struct tp_model *m = s->m;
	float *mm = s->opt.data, *vv = mm ? mm + s->owned : NULL;

	for (int i = 0; i < m->np; i++) {
		const struct tp_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;

		if (a >= b || p->frozen)
			continue;
		optim_adamw(&m->k, o, p->w ? p->w + (a - p->off) : NULL,
			    p->g ? p->g + (a - p->off) : NULL, mm ? mm + st + (a - lo) : NULL,
			    vv ? vv + st + (a - lo) : NULL, b - a, lr, scale, p->decay, t);
	}
}

int dp_step(struct dp_state *s, const struct optim_cfg *o, int t, double *norm)
{
	struct tp_model *m = s->m;
	float lr = optim_lr(o, t - 1), scale = 1.0f;
	size_t st = 0;
	int rc;

	if ((rc = grad_norm(s, norm)))
		return rc;
	if (o->clip > 0 && *norm > o->clip)
		scale = (float)(o->clip / *norm);
	if (s->zero == 0) {
		update_range(s, o, 0, m->nflat, 0, lr, scale, t);
		return 0;
	}
	/* ZeRO-1: this rank's chunk of every bucket, then everyone's chunks gathered. */
	for (int k = 0; k < s->nb; k++) {
		struct dp_bucket *b = &s->b[k];
		size_t chunk = (b->hi - b->lo) / (size_t)s->dp, lo = b->lo + (size_t)s->r * chunk;

		update_range(s, o, lo, lo + chunk, st, lr, scale, t);
		st += chunk;
	}
	for (int k = 0; k < s->nb && s->dp > 1; k++) {
		struct dp_bucket *b = &s->b[k];
		size_t chunk = (b->hi - b->lo) / (size_t)s->dp;
		float *w = m->weights.data;

		enum emu_stream prev = coll_use_stream(m->k.d, EMU_STREAM_COMM2);

		rc = coll_iall_gather(m->k.d, s->g, w ? w + b->lo + (size_t)s->r * chunk : NULL,
				      w ? w + b->lo : NULL, chunk, &b->req);
		coll_use_stream(m->k.d, prev);
		if (rc)
			return rc;
	}
	for (int k = 0; k < s->nb; k++) {
		if (s->b[k].req && (rc = coll_wait(m->k.d, s->b[k].req)))
			return rc;
		s->b[k].req = NULL;
	}
	return 0;
}
