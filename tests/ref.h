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

/* A whole GPT in double: the parameters as arrays, in models/gpt.h's order (wte, wpe,
 * then per layer ln1 w b, qkv w b, proj w b, ln2 w b, fc w b, fc2 w b, then lnf w b). */
struct ref_gpt {
	int L, C, NH, V, T, F, B;
	double **p;         /* [2 + 12 L + 2] */
	const int *tokens;  /* (B, T) */
	const int *targets; /* (B, T) */
	double *enc_add;    /* (B, T, C) added to the embeddings, or NULL */
};

static inline double ref_gpt_loss(const struct ref_gpt *r)
{
	int BT = r->B * r->T, C = r->C, F = r->F;
	double *x = malloc((size_t)BT * C * sizeof *x), *ln = malloc((size_t)BT * C * sizeof *ln);
	double *qkv = malloc((size_t)BT * 3 * C * sizeof *qkv),
	       *y = malloc((size_t)BT * C * sizeof *y);
	double *h = malloc((size_t)BT * F * sizeof *h), *o = malloc((size_t)BT * C * sizeof *o);
	double *logits = malloc((size_t)BT * r->V * sizeof *logits), loss;

	for (int b = 0; b < r->B; b++)
		for (int t = 0; t < r->T; t++)
			for (int c = 0; c < C; c++) {
				size_t i = ((size_t)b * r->T + t) * C + c;

				x[i] = r->p[0][(size_t)r->tokens[b * r->T + t] * C + c] +
				       r->p[1][(size_t)t * C + c] +
				       (r->enc_add ? r->enc_add[i] : 0);
			}
	for (int l = 0; l < r->L; l++) {
		double **w = r->p + 2 + 12 * l;

		ref_layernorm(ln, x, w[0], w[1], BT, C);
		ref_linear(qkv, ln, w[2], w[3], BT, C, 3 * C);
		ref_attention(y, qkv, r->B, r->T, r->NH, C / r->NH);
		ref_linear(o, y, w[4], w[5], BT, C, C);
		for (size_t i = 0; i < (size_t)BT * C; i++)
			x[i] += o[i];
		ref_layernorm(ln, x, w[6], w[7], BT, C);
		ref_linear(h, ln, w[8], w[9], BT, C, F);
		for (size_t i = 0; i < (size_t)BT * F; i++)
			h[i] = ref_gelu1(h[i]);
		ref_linear(o, h, w[10], w[11], BT, F, C);
		for (size_t i = 0; i < (size_t)BT * C; i++)
			x[i] += o[i];
	}
	ref_layernorm(ln, x, r->p[2 + 12 * r->L], r->p[3 + 12 * r->L], BT, C);
	ref_linear(logits, ln, r->p[0], NULL, BT, C, r->V);
	loss = ref_crossentropy(logits, r->targets, BT, r->V);
	free(x), free(ln), free(qkv), free(y), free(h), free(o), free(logits);
	return loss;
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
