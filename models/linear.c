#include "linear.h"

#include <cblas.h>

#include "clock.h"

void linear_fwd(const struct kctx *k, float *out, const float *inp, const float *w,
		const float *bias, int has_bias, int M, int K, int N)
{
	double m = M, n = N, kk = K;

	emu_gemm(k->d, "linear", 1, m, n, kk, has_bias ? m * n : 0,
		 (m * kk + n * kk + m * n) * k->ab);
	if (!kctx_math(k))
		return;
	if (has_bias) {
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				out[(size_t)i * N + j] = bias[j];
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, inp, K, w, K,
		    has_bias ? 1.0f : 0.0f, out, N);
}

void linear_bwd_input(const struct kctx *k, float *dinp, const float *dout, const float *w, int M,
		      int K, int N)
{
	double m = M, n = N, kk = K;

	emu_gemm(k->d, "linear.bwd_input", 1, m, kk, n, 0, (m * n + n * kk + 2 * m * kk) * k->ab);
	if (!kctx_math(k))
		return;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dout, N, w, K, 1.0f,
		    dinp, K);
}

void linear_bwd_weight(const struct kctx *k, float *dw, float *dbias, int has_bias,
		       const float *dout, const float *inp, int M, int K, int N)
{
	double m = M, n = N, kk = K;

	emu_gemm(k->d, "linear.bwd_weight", 1, n, kk, m, has_bias ? m * n : 0,
		 (m * n + m * kk + 2 * n * kk) * k->ab);
	if (!kctx_math(k))
		return;
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dout, N, inp, K, 1.0f,
		    dw, K);
	if (has_bias) {
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				dbias[j] += dout[(size_t)i * N + j];
	}
}
