/* par/dp_copy: between what a data-parallel rank holds (its parameters, or with ZeRO its
 * chunks of the gradients, the weights and Adam's state) and the serial model's full
 * tensors, for verify and checkpoints: see par/dp.h. */
#include "par/dp.h"
#include "par/tp.h"

enum copy_what { COPY_GRADS, COPY_WEIGHTS, COPY_STATE };

/* Between the full tensors and what this rank holds. */
struct full_copy {
	const struct par_dp_state *s;
	float **full, **full_v; /* COPY_STATE: Adam's m into full, v into full_v */
	enum copy_what what;
	int to_full; /* 1: from the rank into the full tensors (its owned parameters'); 0:
		      * from them into the rank (every parameter it holds) */
};

/* Parameter pieces of the flat range [lo, hi), whose state starts at st. */
static void copy_range(void *ctx, size_t lo, size_t hi, size_t st)
{
	struct full_copy *c = ctx;
	struct par_model *m = c->s->m;
	float *mm = c->s->opt.data, *vv = mm ? mm + c->s->owned : NULL;

	for (int i = 0; i < m->np; i++) {
		const struct par_param *p = &m->p[i];
		size_t a = p->off > lo ? p->off : lo, b = p->off + p->n < hi ? p->off + p->n : hi;
		float *local = c->what == COPY_WEIGHTS ? p->w : p->g;

		if (a >= b || (c->to_full && !p->owner))
			continue;
		if (c->what != COPY_STATE) {
			if (local)
				par_tp_shard_copy_range(m, i, c->full[i], local, a - p->off,
							b - p->off, c->to_full);
		} else if (mm) {
			par_tp_shard_copy_window(m, i, c->full[i], mm + st + (a - lo), a - p->off,
						 b - p->off, c->to_full);
			par_tp_shard_copy_window(m, i, c->full_v[i], vv + st + (a - lo), a - p->off,
						 b - p->off, c->to_full);
		}
	}
}

/* Without ZeRO's chunks (stage 0, or the weights below stage 3), each bucket from the
 * first rank of its group (stage 0 keeps the state of the whole flat buffer: st = lo). */
static void copy_first(const struct par_dp_state *s, struct full_copy *c)
{
	for (int k = 0; k < s->nb; k++)
		if (s->b[k].r == 0)
			copy_range(c, s->b[k].lo, s->b[k].hi, s->b[k].lo);
}

void par_dp_copy_grads(const struct par_dp_state *s, float **full)
{
	struct full_copy c = {s, full, NULL, COPY_GRADS, 1};

	if (s->zero >= 1)
		par_dp_owned_ranges(s, copy_range, &c);
	else
		copy_first(s, &c);
}

void par_dp_copy_weights(const struct par_dp_state *s, float **full)
{
	struct full_copy c = {s, full, NULL, COPY_WEIGHTS, 1};

	if (s->zero == 3)
		par_dp_owned_ranges(s, copy_range, &c);
	else
		copy_first(s, &c);
}

void par_dp_copy_state(const struct par_dp_state *s, float **m, float **v)
{
	struct full_copy c = {s, m, v, COPY_STATE, 1};

	if (s->zero >= 1)
		par_dp_owned_ranges(s, copy_range, &c);
	else
		copy_first(s, &c);
}

void par_dp_load_state(struct par_dp_state *s, float **m, float **v)
{
	struct full_copy c = {s, m, v, COPY_STATE, 0};

	par_dp_owned_ranges(s, copy_range, &c);
}
