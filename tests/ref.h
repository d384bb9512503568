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

/* The MoE block of models/moe.h in double, written from its description: router softmax,
 * top-k (ties to the lower index), capacity floor(cf * M * k / E) (at least 1) given out
 * to first choices in token order then second choices, experts on their tokens, output
 * the sum of probability * expert output over kept choices. w holds the layer's tensors
 * (8: fc.weight (E, F, C), 9: fc.bias, 10: fc2.weight (E, C, F), 11: fc2.bias, 12: router
 * (E, C)). Returns the aux loss coeff * E * sum_e f_e P_e. */
static inline double ref_moe(double *out, const double *x, double *const *w, int M, int C, int F,
			     int E, int K, double cf, double coeff)
{
	double *p = malloc((size_t)M * E * sizeof *p), *hid = malloc((size_t)F * sizeof *hid);
	int *choice = malloc((size_t)M * K * sizeof *choice),
	    *fill = calloc((size_t)E, sizeof *fill);
	int cap = (int)floor(cf * M * K / E);
	double aux = 0;

	cap = cap < 1 ? 1 : cap;
	for (int t = 0; t < M; t++) {
		double mx = -INFINITY, sum = 0;

		for (int e = 0; e < E; e++) {
			double s = 0;

			for (int c = 0; c < C; c++)
				s += x[(size_t)t * C + c] * w[12][(size_t)e * C + c];
			p[t * E + e] = s;
			mx = s > mx ? s : mx;
		}
		for (int e = 0; e < E; e++)
			sum += exp(p[t * E + e] - mx);
		for (int e = 0; e < E; e++)
			p[t * E + e] = exp(p[t * E + e] - mx) / sum;
		for (int j = 0; j < K; j++) {
			int best = -1;

			for (int e = 0; e < E; e++)
				if (!(j == 1 && choice[t * K] == e) &&
				    (best < 0 || p[t * E + e] > p[t * E + best]))
					best = e;
			choice[t * K + j] = best;
		}
	}
	for (size_t i = 0; i < (size_t)M * C; i++)
		out[i] = 0;
	for (int j = 0; j < K; j++)
		for (int t = 0; t < M; t++) {
			int e = choice[t * K + j];

			if (fill[e] == cap)
				continue;
			fill[e]++;
			for (int f = 0; f < F; f++) {
				double s = w[9][(size_t)e * F + f];

				for (int c = 0; c < C; c++)
					s += x[(size_t)t * C + c] *
					     w[8][((size_t)e * F + f) * C + c];
				hid[f] = ref_gelu1(s);
			}
			for (int c = 0; c < C; c++) {
				double s = w[11][(size_t)e * C + c];

				for (int f = 0; f < F; f++)
					s += hid[f] * w[10][((size_t)e * C + c) * F + f];
				out[(size_t)t * C + c] += p[t * E + e] * s;
			}
		}
	for (int e = 0; e < E; e++) {
		double f = 0, pe = 0;

		for (int i = 0; i < M * K; i++)
			f += choice[i] == e;
		for (int t = 0; t < M; t++)
			pe += p[t * E + e];
		aux += f / ((double)M * K) * pe / M;
	}
	free(p), free(hid), free(choice), free(fill);
	return coeff * E * aux;
}

/* A whole GPT in double: the parameters as arrays, in models/gpt.h's order (wte, wpe,
 * then per layer ln1 w b, qkv w b, proj w b, ln2 w b, fc w b, fc2 w b, router, then lnf
 * w b). A layer is MoE when E > 0 and (l + 1) % every == 0. */
struct ref_gpt {
	int L, C, NH, V, T, F, B;
	int E, K, every;    /* experts (0: dense), top-k, MoE every Nth layer */
	double cf, aux;     /* capacity factor, aux loss coefficient */
	double **p;         /* [2 + 13 L + 2] */
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
	double *logits = malloc((size_t)BT * r->V * sizeof *logits), loss, aux = 0;

	for (int b = 0; b < r->B; b++)
		for (int t = 0; t < r->T; t++)
			for (int c = 0; c < C; c++) {
				size_t i = ((size_t)b * r->T + t) * C + c;

				x[i] = r->p[0][(size_t)r->tokens[b * r->T + t] * C + c] +
				       r->p[1][(size_t)t * C + c] +
				       (r->enc_add ? r->enc_add[i] : 0);
			}
	for (int l = 0; l < r->L; l++) {
		double **w = r->p + 2 + 13 * l;

		ref_layernorm(ln, x, w[0], w[1], BT, C);
		ref_linear(qkv, ln, w[2], w[3], BT, C, 3 * C);
		ref_attention(y, qkv, r->B, r->T, r->NH, C / r->NH);
		ref_linear(o, y, w[4], w[5], BT, C, C);
		for (size_t i = 0; i < (size_t)BT * C; i++)
			x[i] += o[i];
		ref_layernorm(ln, x, w[6], w[7], BT, C);
		if (r->E > 0 && (l + 1) % r->every == 0) {
			aux += ref_moe(o, ln, w, BT, C, F, r->E, r->K, r->cf, r->aux);
		} else {
			ref_linear(h, ln, w[8], w[9], BT, C, F);
			for (size_t i = 0; i < (size_t)BT * F; i++)
				h[i] = ref_gelu1(h[i]);
			ref_linear(o, h, w[10], w[11], BT, F, C);
		}
		for (size_t i = 0; i < (size_t)BT * C; i++)
			x[i] += o[i];
	}
	ref_layernorm(ln, x, r->p[2 + 13 * r->L], r->p[3 + 13 * r->L], BT, C);
	ref_linear(logits, ln, r->p[0], NULL, BT, C, r->V);
	loss = ref_crossentropy(logits, r->targets, BT, r->V) + aux;
	free(x), free(ln), free(qkv), free(y), free(h), free(o), free(logits);
	return loss;
}

/* Norm-wise relative error of docs/formulas.md, Verification: max |a - b| / max |b|. */
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
