#include "attention.h"

#include <cblas.h>
#include <math.h>

#include "clock.h"

/* Softmax in place over the keys [0, last] of a row of n scores, zero beyond (the causal
 * mask); returns the log of the sum of exponentials, log-sum-exp of the row. */
static float causal_softmax_row(float *row, int last, int n)
{
	float mx = row[0], sum = 0;

	for (int j = last + 1; j < n; j++)
		row[j] = 0.0f;
	for (int j = 1; j <= last; j++)
		mx = row[j] > mx ? row[j] : mx;
	for (int j = 0; j <= last; j++) {
		row[j] = expf(row[j] - mx);
		sum += row[j];
	}
	for (int j = 0; j <= last; j++)
		row[j] /= sum;
	return mx + logf(sum);
}

/* The last key query i may see, or -1 if none. */
static int last_key(const struct attn_view *a, int i)
{
	int j = a->q0 + i;

	return j < a->Tk - 1 ? j : a->Tk - 1;
}

void attention_fwd_view(const struct kctx *k, const struct attn_view *a)
{
	double heads = (double)a->B * (a->h1 - a->h0), qk = (double)a->Tq * a->Tk;
	int Tq = a->Tq, Tk = a->Tk, hs = a->hs, nh = a->h1 - a->h0;
	float scale = 1.0f / sqrtf((float)hs);

	emu_compute(k->d, "attention", heads * (4 * qk * hs + 5 * qk),
		    heads * ((double)(2 * Tq + 2 * Tk) * hs + 2 * qk) * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < a->B; b++) {
		for (int h = a->h0; h < a->h1; h++) {
			const float *q = a->q + (size_t)b * Tq * a->ldq + (size_t)h * hs;
			const float *kk = a->k + (size_t)b * Tk * a->ldk + (size_t)h * hs;
			const float *v = a->v + (size_t)b * Tk * a->ldv + (size_t)h * hs;
			float *s = a->att + ((size_t)b * nh + (h - a->h0)) * Tq * Tk;

			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, scale, q,
				    a->ldq, kk, a->ldk, 0.0f, s, Tk);
			for (int i = 0; i < Tq; i++) {
				float *row = s + (size_t)i * Tk;
				int last = last_key(a, i);

				if (last < 0) {
					for (int j = 0; j < Tk; j++)
						row[j] = 0.0f;
					continue;
				}
				causal_softmax_row(row, last, Tk);
			}
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, 1.0f, s,
				    Tk, v, a->ldv, 0.0f,
				    a->out + (size_t)b * Tq * a->ldo + (size_t)h * hs, a->ldo);
		}
	}
}

void attention_bwd_view(const struct kctx *k, const struct attn_view *a, float *dq, float *dk,
			float *dv, float *scratch, const float *dout)
{
	double heads = (double)a->B * (a->h1 - a->h0), qk = (double)a->Tq * a->Tk;
	int Tq = a->Tq, Tk = a->Tk, hs = a->hs, nh = a->h1 - a->h0;
	float scale = 1.0f / sqrtf((float)hs);

	emu_compute(k->d, "attention.bwd", heads * (8 * qk * hs + 4 * qk),
		    heads * ((double)(4 * Tq + 4 * Tk) * hs + 3 * qk) * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < a->B; b++) {
		for (int h = a->h0; h < a->h1; h++) {
			size_t oq = (size_t)b * Tq * a->ldq + (size_t)h * hs;
			size_t ok = (size_t)b * Tk * a->ldk + (size_t)h * hs;
			size_t ov = (size_t)b * Tk * a->ldv + (size_t)h * hs;
			const float *s = a->att + ((size_t)b * nh + (h - a->h0)) * Tq * Tk;
			const float *dy = dout + (size_t)b * Tq * a->ldo + (size_t)h * hs;
			float *ds = scratch;

			/* d att = dout V^T; dV += att^T dout */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, 1.0f, dy,
				    a->ldo, a->v + ov, a->ldv, 0.0f, ds, Tk);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, 1.0f, s,
				    Tk, dy, a->ldo, 1.0f, dv + ov, a->ldv);
			/* softmax backward over each row's visible keys */
			for (int i = 0; i < Tq; i++) {
				const float *sr = s + (size_t)i * Tk;
				float *dr = ds + (size_t)i * Tk, dot = 0;
				int last = last_key(a, i);

				for (int j = 0; j <= last; j++)
					dot += sr[j] * dr[j];
				for (int j = 0; j <= last; j++)
					dr[j] = sr[j] * (dr[j] - dot);
				for (int j = last + 1; j < Tk; j++)
					dr[j] = 0.0f;
			}
			/* dQ += scale dS K; dK += scale dS^T Q */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, scale,
				    ds, Tk, a->k + ok, a->ldk, 1.0f, dq + oq, a->ldq);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, scale, ds,
				    Tk, a->q + oq, a->ldq, 1.0f, dk + ok, a->ldk);
		}
	}
}

/* The whole-sequence view of a qkv buffer. */
static struct attn_view qkv_view(float *out, float *att, const float *qkv, int B, int T, int NH,
				 int h0, int h1, int hs)
{
	int C = NH * hs;
	struct attn_view a = {B,
			      T,
			      T,
			      0,
			      h0,
			      h1,
			      hs,
			      qkv,
			      qkv ? qkv + C : NULL,
			      qkv ? qkv + 2 * C : NULL,
			      3 * C,
			      3 * C,
			      3 * C,
			      out,
			      C,
			      att};

	return a;
}

void attention_fwd(const struct kctx *k, float *out, float *att, const float *qkv, int B, int T,
		   int NH, int h0, int h1, int hs)
{
	struct attn_view a = qkv_view(out, att, qkv, B, T, NH, h0, h1, hs);

	attention_fwd_view(k, &a);
}

void attention_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
		   const float *att, const float *qkv, int B, int T, int NH, int h0, int h1, int hs)
{
	struct attn_view a = qkv_view(NULL, (float *)att, qkv, B, T, NH, h0, h1, hs);
	int C = NH * hs;

	attention_bwd_view(k, &a, dqkv, dqkv ? dqkv + C : NULL, dqkv ? dqkv + 2 * C : NULL, scratch,
			   dout);
}

/* ------------------------------------------------------------------------------------ */
/* Memory-efficient attention                                                           */

void attention_flash_fwd(const struct kctx *k, float *out, float *lse, const float *qkv, int B,
			 int T, int NH, int h0, int h1, int hs, float *scratch)
{
	double heads = (double)B * (h1 - h0), qk = (double)T * T;
	int C = NH * hs, nh = h1 - h0;
	float scale = 1.0f / sqrtf((float)hs);

	emu_compute(k->d, "attention.flash", heads * (4 * qk * hs + 5 * qk),
		    heads * ((double)4 * T * hs + T) * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < B; b++)
		for (int h = h0; h < h1; h++) {
			const float *q = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
			float *o = out + (size_t)b * T * C + (size_t)h * hs;
			float *l = lse + ((size_t)b * nh + (h - h0)) * T;

			for (int r0 = 0; r0 < T; r0 += FLASH_ROWS) {
				int nr = T - r0 < FLASH_ROWS ? T - r0 : FLASH_ROWS, nk = r0 + nr;

				/* the keys this block can see: [0, r0 + nr) */
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
					    scale, q + (size_t)r0 * 3 * C, 3 * C, q + C, 3 * C,
					    0.0f, scratch, nk);
				for (int i = 0; i < nr; i++)
					l[r0 + i] = causal_softmax_row(scratch + (size_t)i * nk,
								       r0 + i, nk);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk,
					    1.0f, scratch, nk, q + 2 * C, 3 * C, 0.0f,
					    o + (size_t)r0 * C, C);
			}
		}
}

void attention_flash_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
			 const float *out, const float *lse, const float *qkv, int B, int T, int NH,
			 int h0, int h1, int hs)
{
	double heads = (double)B * (h1 - h0), qk = (double)T * T;
	int C = NH * hs, nh = h1 - h0;
	float scale = 1.0f / sqrtf((float)hs);

	emu_compute(k->d, "attention.flash.bwd", heads * (10 * qk * hs + 6 * qk),
		    heads * ((double)8 * T * hs + T) * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < B; b++)
		for (int h = h0; h < h1; h++) {
			size_t base = (size_t)b * T * 3 * C + (size_t)h * hs;
			const float *q = qkv + base, *kk = q + C, *v = q + 2 * C;
			float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
			const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
			const float *o = out + (size_t)b * T * C + (size_t)h * hs;
			const float *l = lse + ((size_t)b * nh + (h - h0)) * T;

			for (int r0 = 0; r0 < T; r0 += FLASH_ROWS) {
				int nr = T - r0 < FLASH_ROWS ? T - r0 : FLASH_ROWS, nk = r0 + nr;
				float *p = scratch, *dp = scratch + (size_t)FLASH_ROWS * T;

				/* P = exp(S - lse), recomputed; dP = dout V^T */
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
					    scale, q + (size_t)r0 * 3 * C, 3 * C, kk, 3 * C, 0.0f,
					    p, nk);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
					    1.0f, dy + (size_t)r0 * C, C, v, 3 * C, 0.0f, dp, nk);
				for (int i = 0; i < nr; i++) {
					float *pr = p + (size_t)i * nk, *dr = dp + (size_t)i * nk,
					      dot = 0;
					const float *yi = dy + (size_t)(r0 + i) * C;
					const float *oi = o + (size_t)(r0 + i) * C;
					int last = r0 + i;

					for (int e = 0; e < hs; e++) /* D = rowsum(dout * out) */
						dot += yi[e] * oi[e];
					for (int j = 0; j <= last; j++) {
						pr[j] = expf(pr[j] - l[r0 + i]);
						dr[j] = pr[j] * (dr[j] - dot);
					}
					for (int j = last + 1; j < nk; j++)
						pr[j] = dr[j] = 0.0f;
				}
				/* dV += P^T dout; dQ += scale dS K; dK += scale dS^T Q */
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nr,
					    1.0f, p, nk, dy + (size_t)r0 * C, C, 1.0f, dv, 3 * C);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk,
					    scale, dp, nk, kk, 3 * C, 1.0f, dq + (size_t)r0 * 3 * C,
					    3 * C);
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nr,
					    scale, dp, nk, q + (size_t)r0 * 3 * C, 3 * C, 1.0f, dk,
					    3 * C);
			}
		}
}
