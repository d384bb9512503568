#include "dropout.h"

#include "clock.h"
#include "rng.h"

/* The generator's streams for dropout, apart from the initialisation's (small integers). */
#define DROP_STREAM (0x64726f70ULL << 24)

static uint64_t token_index(const struct drop_rows *r, int i)
{
	int row = r->row0 + i, t = row % r->T;

	return (r->seq0 + (uint64_t)(row / r->T)) * (uint64_t)r->S +
	       (uint64_t)(r->pos ? r->pos[t] : t);
}

/* Dropped when the top 24 bits of the element's number fall under p 2^24. */
static uint64_t threshold(float p)
{
	return (uint64_t)((double)p * 16777216.0);
}

static int keep(const struct dropout *d, uint64_t thr, uint64_t e)
{
	return (rng_u64(d->seed, DROP_STREAM | d->site, e) >> 40) >= thr;
}

int dropout_keep(const struct dropout *d, const struct drop_rows *r, int i, int C, int j)
{
	return keep(d, threshold(d->p), token_index(r, i) * (uint64_t)C + (uint64_t)j);
}

/* The mask of rows [0, M) into mask, and out = res + mask (x) (res NULL: out = mask (x)). */
static void apply(float *out, unsigned char *mask, const float *res, const float *x,
		  const struct dropout *d, const struct drop_rows *r, int M, int C)
{
	uint64_t thr = threshold(d->p);
	float scale = 1.0f / (1.0f - d->p);

	for (int i = 0; i < M; i++) {
		uint64_t e0 = token_index(r, i) * (uint64_t)C;
		size_t o = (size_t)i * (size_t)C;

		for (int j = 0; j < C; j++) {
			int kept = keep(d, thr, e0 + (uint64_t)j);
			float v = kept ? x[o + j] * scale : 0.0f;

			mask[o + j] = (unsigned char)kept;
			out[o + j] = res ? res[o + j] + v : v;
		}
	}
}

void dropout_add_fwd(const struct kctx *k, float *out, unsigned char *mask, const float *res,
		     const float *branch, const struct dropout *d, const struct drop_rows *r, int M,
		     int C)
{
	double n = (double)M * C;

	/* reads the residual and the branch, writes the sum and the mask's byte */
	emu_compute(k->d, "bias-dropout-add", 3 * n, (3 * k->ab + 1) * n);
	if (kctx_math(k))
		apply(out, mask, res, branch, d, r, M, C);
}

void dropout_fwd(const struct kctx *k, float *x, unsigned char *mask, const struct dropout *d,
		 const struct drop_rows *r, int M, int C)
{
	double n = (double)M * C;

	emu_compute(k->d, "dropout", 2 * n, (2 * k->ab + 1) * n);
	if (kctx_math(k))
		apply(x, mask, NULL, x, d, r, M, C);
}

void dropout_bwd(const struct kctx *k, float *dx, const float *dy, const unsigned char *mask,
		 float p, size_t n)
{
	float scale = 1.0f / (1.0f - p);

	emu_compute(k->d, "dropout.bwd", (double)n, (2.0 * k->ab + 1) * (double)n);
	if (!kctx_math(k))
		return;
	for (size_t i = 0; i < n; i++)
		dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}
