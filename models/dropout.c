#include "dropout.h"

#include "clock.h"
#include "rng.h"
#include "util.h"

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

/* ------------------------------------------------------------------------------------ */
/* Attention dropout                                                                    */

/* The probabilities' streams: tag, then the site (layer, DROP_PROBS) and the global head
 * in the low 32 bits, 10 of them the head's (heads < 2^10), 22 the site's (layers < 2^20).
 * No counter holds the sequence, which would overflow: with S up to 2^20 positions,
 * (n S + q) S + k passes 2^64 at n = 2^24 sequences. So two rounds: the first hashes
 * (stream, n) into a key, a whole 64 bits of sequence index; the second draws
 * position pair q S + k (< S^2 <= 2^40, no overflow) under that key as its seed. Two
 * (sequence, head) keys collide with probability about 2^-64 a pair. */
#define PROBS_STREAM (0x61747470ULL << 32) /* "attp" */

uint64_t attn_drop_key(const struct attn_drop *d, int b, int h)
{
	uint64_t site = dropout_site(d->layer, DROP_PROBS);

	EMU_ASSERT(d->head0 + h < 1024 && site < (1ULL << 22));
	return rng_u64(d->seed, PROBS_STREAM | site << 10 | (uint64_t)(d->head0 + h),
		       d->seq0 + (uint64_t)b);
}

static uint64_t pair(const struct attn_drop *d, int i, int j)
{
	uint64_t q = (uint64_t)(d->qpos ? d->qpos[i] : i), k = (uint64_t)(d->kpos ? d->kpos[j] : j);

	return q * (uint64_t)d->S + k;
}

int attn_drop_keep(const struct attn_drop *d, uint64_t key, int i, int j)
{
	return (rng_u64(key, PROBS_STREAM, pair(d, i, j)) >> 40) >= threshold(d->p);
}

void attn_drop_row(const struct attn_drop *d, uint64_t key, int i, float *row, unsigned char *mask,
		   int n)
{
	uint64_t thr = threshold(d->p);
	float scale = 1.0f / (1.0f - d->p);

	for (int j = 0; j < n; j++) {
		int kept = (rng_u64(key, PROBS_STREAM, pair(d, i, j)) >> 40) >= thr;

		row[j] = kept ? row[j] * scale : 0.0f;
		if (mask)
			mask[j] = (unsigned char)kept;
	}
}
