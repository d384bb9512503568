#include "attention.h"

#include <cblas.h>
#include <math.h>

#include "clock.h"

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
				float *row = s + (size_t)i * Tk, mx, sum = 0;
				int last = last_key(a, i);

				for (int j = last + 1; j < Tk; j++)
					row[j] = 0.0f;
				if (last < 0)
					continue;
				mx = row[0];
				for (int j = 1; j <= last; j++)
					mx = row[j] > mx ? row[j] : mx;
				for (int j = 0; j <= last; j++) {
					row[j] = expf(row[j] - mx);
					sum += row[j];
				}
				for (int j = 0; j <= last; j++)
					row[j] /= sum;
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
