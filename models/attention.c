#include "attention.h"

#include <cblas.h>
#include <math.h>

#include "clock.h"

void attention_fwd(const struct kctx *k, float *out, float *att, const float *qkv, int B, int T,
		   int NH, int h0, int h1, int hs)
{
	double heads = (double)B * (h1 - h0), tt = (double)T * T;
	int C = NH * hs, C3 = 3 * C;
	float scale = 1.0f / sqrtf((float)hs);

	emu_compute(k->d, "attention", heads * (4 * tt * hs + 5 * tt),
		    heads * (3.0 * T * hs + 2 * tt + (double)T * hs) * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < B; b++) {
		for (int h = h0; h < h1; h++) {
			const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
			const float *kk = q + C, *v = q + 2 * C;
			float *a = att + ((size_t)b * (h1 - h0) + (h - h0)) * T * T;

			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3,
				    kk, C3, 0.0f, a, T);
			for (int i = 0; i < T; i++) {
				float *row = a + (size_t)i * T, mx = row[0], sum = 0;

				for (int j = 1; j <= i; j++)
					mx = row[j] > mx ? row[j] : mx;
				for (int j = 0; j <= i; j++) {
					row[j] = expf(row[j] - mx);
					sum += row[j];
				}
				for (int j = 0; j <= i; j++)
					row[j] /= sum;
				for (int j = i + 1; j < T; j++)
					row[j] = 0.0f;
			}
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T,
				    v, C3, 0.0f, out + (size_t)b * T * C + (size_t)h * hs, C);
		}
	}
}

void attention_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
		   const float *att, const float *qkv, int B, int T, int NH, int h0, int h1, int hs)
{
	double heads = (double)B * (h1 - h0), tt = (double)T * T;
	int C = NH * hs, C3 = 3 * C;
	float scale = 1.0f / sqrtf((float)hs);

	emu_compute(k->d, "attention.bwd", heads * (8 * tt * hs + 4 * tt),
		    heads * (6.0 * T * hs + 3 * tt + (double)T * hs) * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < B; b++) {
		for (int h = h0; h < h1; h++) {
			size_t base = (size_t)b * T * C3 + (size_t)h * hs;
			const float *q = qkv + base, *kk = q + C, *v = q + 2 * C;
			float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
			const float *a = att + ((size_t)b * (h1 - h0) + (h - h0)) * T * T;
			const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
			float *da = scratch;

			/* datt = dout V^T; dV += att^T dout */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C,
				    v, C3, 0.0f, da, T);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T,
				    dy, C, 1.0f, dv, C3);
			/* softmax backward, row by row, over the unmasked part */
			for (int i = 0; i < T; i++) {
				const float *ar = a + (size_t)i * T;
				float *dr = da + (size_t)i * T, dot = 0;

				for (int j = 0; j <= i; j++)
					dot += ar[j] * dr[j];
				for (int j = 0; j <= i; j++)
					dr[j] = ar[j] * (dr[j] - dot);
				for (int j = i + 1; j < T; j++)
					dr[j] = 0.0f;
			}
			/* dQ += scale dpre K; dK += scale dpre^T Q */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, da,
				    T, kk, C3, 1.0f, dq, C3);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, da, T,
				    q, C3, 1.0f, dk, C3);
		}
	}
}
