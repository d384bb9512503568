/* A plain double-precision reference of the model's forward math, written independently
 * of models/ (loops, no BLAS), for finite-difference gradient checks. Everything here is
 * the textbook definition: no caching, no fusion, no cleverness. */
#ifndef TESTS_REF_H
#define TESTS_REF_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

/* out (M, N) = x (M, K) w (N, K)^T + b (N) */
static inline void ref_linear(double *out, const double *x, const double *w, const double *b, int M,
			      int K, int N)
{
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double s = b ? b[j] : 0;

			for (int k = 0; k < K; k++)
				s += x[(size_t)i * K + k] * w[(size_t)j * K + k];
			out[(size_t)i * N + j] = s;
		}
}

static inline void ref_layernorm(double *out, const double *x, const double *w, const double *b,
				 int M, int C)
{
	for (int i = 0; i < M; i++) {
		double m = 0, v = 0;

		for (int j = 0; j < C; j++)
			m += x[(size_t)i * C + j];
		m /= C;
		for (int j = 0; j < C; j++)
			v += (x[(size_t)i * C + j] - m) * (x[(size_t)i * C + j] - m);
		v /= C;
		for (int j = 0; j < C; j++)
			out[(size_t)i * C + j] =
				(x[(size_t)i * C + j] - m) / sqrt(v + 1e-5) * w[j] + b[j];
	}
}

static inline double ref_gelu1(double x)
{
	return 0.5 * x *
	       (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* Causal attention of all NH heads: qkv (B, T, 3, NH, hs) -> out (B, T, NH, hs). */
static inline void ref_attention(double *out, const double *qkv, int B, int T, int NH, int hs)
{
	int C = NH * hs;
	double *p = malloc((size_t)T * sizeof *p);

	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int i = 0; i < T; i++) {
				const double *q =
					qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hs;
				double mx = -INFINITY, sum = 0;

				for (int j = 0; j <= i; j++) {
					const double *k = qkv + ((size_t)b * T + j) * 3 * C + C +
							  (size_t)h * hs;
					double s = 0;

					for (int e = 0; e < hs; e++)
						s += q[e] * k[e];
					p[j] = s / sqrt((double)hs);
					mx = p[j] > mx ? p[j] : mx;
				}
				for (int j = 0; j <= i; j++) {
					p[j] = exp(p[j] - mx);
					sum += p[j];
				}
				for (int e = 0; e < hs; e++) {
					double o = 0;

					for (int j = 0; j <= i; j++)
						o += p[j] / sum *
						     qkv[((size_t)b * T + j) * 3 * C + 2 * C +
							 (size_t)h * hs + e];
					out[((size_t)b * T + i) * C + (size_t)h * hs + e] = o;
				}
			}
	free(p);
}

/* Mean over M rows of -log softmax(logits)[target]. */
static inline double ref_crossentropy(const double *logits, const int *targets, int M, int V)
{
	double total = 0;

	for (int i = 0; i < M; i++) {
		const double *x = logits + (size_t)i * V;
		double mx = x[0], sum = 0;

		for (int v = 1; v < V; v++)
			mx = x[v] > mx ? x[v] : mx;
		for (int v = 0; v < V; v++)
			sum += exp(x[v] - mx);
		total += -(x[targets[i]] - mx - log(sum));
	}
	return total / M;
}

/* Norm-wise relative error of DESIGN.md §4: max |a - b| / max |b|. */
static inline double ref_rel_err(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]);

		num = e > num ? e : num;
		den = fabs(b[i]) > den ? fabs(b[i]) : den;
	}
	return den > 0 ? num / den : num;
}

#endif
