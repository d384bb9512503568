#include "ops.h"

#include <math.h>
#include <string.h>

#include "clock.h"
#include "team.h"
#include "vmath.h"

/* The kernels' pieces (models/team.h): an elementwise kernel's elements, a row kernel's
 * rows, at least about ELEMS_GRAIN elements a piece (a hand-over costs about a
 * microsecond). Each piece computes what the whole loop would for its range. */
#define ELEMS_GRAIN 16384

/* Rows of C elements a piece. */
static size_t row_grain(int C)
{
	return C >= ELEMS_GRAIN ? 1 : (size_t)(ELEMS_GRAIN / (C > 0 ? C : 1));
}

/* A kernel's operands, for its pieces. */
struct args {
	float *out, *out2, *out3;
	const float *in, *in2, *in3, *in4, *in5;
	const int *idx;
	int C, M;
	float x;
};

VM_CLONES static void layernorm_rows(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	float *out = a->out, *mean = a->out2, *rstd = a->out3;
	const float *inp = a->in, *w = a->in2, *b = a->in3;
	int C = a->C;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		const float *x = inp + (size_t)i * C;
		float *y = out + (size_t)i * C;
		float m = 0, v = 0, s;

		for (int j = 0; j < C; j++)
			m += x[j];
		m /= (float)C;
		for (int j = 0; j < C; j++)
			v += (x[j] - m) * (x[j] - m);
		v /= (float)C;
		s = 1.0f / sqrtf(v + LAYERNORM_EPS);
		for (int j = 0; j < C; j++)
			y[j] = (x[j] - m) * s * w[j] + b[j];
		mean[i] = m;
		rstd[i] = s;
	}
}

void layernorm_fwd(const struct kctx *k, float *out, float *mean, float *rstd, const float *inp,
		   const float *w, const float *b, int M, int C)
{
	double mc = (double)M * C;
	struct args a = {
		.out = out, .out2 = mean, .out3 = rstd, .in = inp, .in2 = w, .in3 = b, .C = C};

	emu_compute(k->d, "layernorm", 8 * mc, (2 * mc + 2.0 * C + 2.0 * M) * k->ab);
	if (kctx_math(k))
		team_for((size_t)M, row_grain(C), layernorm_rows, &a);
}

/* LayerNorm's backward over rows [lo, hi): dinp's rows, and with dw (a->out2) the weight's
 * and bias's gradients summed over those rows in order. */
VM_CLONES static void layernorm_bwd_rows(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	float *dinp = a->out, *dw = a->out2, *db = a->out3;
	const float *dout = a->in, *inp = a->in2, *w = a->in3, *mean = a->in4, *rstd = a->in5;
	int C = a->C;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
		float *dx = dinp + (size_t)i * C;
		float m = mean[i], s = rstd[i], dnorm_mean = 0, dnorm_norm_mean = 0;

		for (int j = 0; j < C; j++) {
			float norm = (x[j] - m) * s, dnorm = w[j] * dy[j];

			dnorm_mean += dnorm;
			dnorm_norm_mean += dnorm * norm;
		}
		dnorm_mean /= (float)C;
		dnorm_norm_mean /= (float)C;
		if (dw)
			for (int j = 0; j < C; j++) {
				float norm = (x[j] - m) * s, dnorm = w[j] * dy[j];

				db[j] += dy[j];
				dw[j] += norm * dy[j];
				dx[j] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
			}
		else
			for (int j = 0; j < C; j++) {
				float norm = (x[j] - m) * s, dnorm = w[j] * dy[j];

				dx[j] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
			}
	}
}

/* The weight's and bias's gradients for columns [lo, hi), summed over all rows in order. */
VM_CLONES static void layernorm_bwd_cols(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	float *dw = a->out2, *db = a->out3;
	const float *dout = a->in, *inp = a->in2, *mean = a->in4, *rstd = a->in5;
	int C = a->C, M = a->M;

	(void)wk;
	for (int i = 0; i < M; i++) {
		const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
		float m = mean[i], s = rstd[i];

		for (size_t j = lo; j < hi; j++) {
			db[j] += dy[j];
			dw[j] += (x[j] - m) * s * dy[j];
		}
	}
}

void layernorm_bwd(const struct kctx *k, float *dinp, float *dw, float *db, const float *dout,
		   const float *inp, const float *w, const float *mean, const float *rstd, int M,
		   int C)
{
	double mc = (double)M * C;
	struct args a = {.out = dinp,
			 .out2 = dw,
			 .out3 = db,
			 .in = dout,
			 .in2 = inp,
			 .in3 = w,
			 .in4 = mean,
			 .in5 = rstd,
			 .C = C,
			 .M = M};

	emu_compute(k->d, "layernorm.bwd", 14 * mc, (4 * mc + 4.0 * C + 2.0 * M) * k->ab);
	if (!kctx_math(k))
		return;
	if (team_pieces((size_t)M, row_grain(C)) == 1) {
		layernorm_bwd_rows(&a, 0, (size_t)M, 0);
		return;
	}
	/* in pieces: dinp by rows, the sums over rows by columns */
	team_for((size_t)C, 64, layernorm_bwd_cols, &a);
	a.out2 = a.out3 = NULL;
	team_for((size_t)M, row_grain(C), layernorm_bwd_rows, &a);
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */

/* tanh through one exponential (vm_expf: a loop of it vectorises), several times cheaper
 * than tanhf; saturates cleanly for large |u| (exactly 1 and -1). */
static inline float fast_tanh(float u)
{
	return 1.0f - 2.0f / (vm_expf(2.0f * u) + 1.0f);
}

VM_CLONES static void gelu_range(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	float *out = a->out;
	const float *inp = a->in;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		float x = inp[i];

		out[i] = 0.5f * x * (1.0f + fast_tanh(GELU_SCALE * (x + 0.044715f * x * x * x)));
	}
}

void gelu_fwd(const struct kctx *k, float *out, const float *inp, size_t n)
{
	struct args a = {.out = out, .in = inp};

	emu_compute(k->d, "gelu", 10.0 * (double)n, 2.0 * (double)n * k->ab);
	if (kctx_math(k))
		team_for(n, ELEMS_GRAIN, gelu_range, &a);
}

VM_CLONES static void gelu_bwd_range(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	float *dinp = a->out;
	const float *inp = a->in, *dout = a->in2;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		float x = inp[i], u = GELU_SCALE * (x + 0.044715f * x * x * x);
		float t = fast_tanh(u), sech2 = 1.0f - t * t;
		float g = 0.5f * (1.0f + t) +
			  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);

		dinp[i] += g * dout[i];
	}
}

void gelu_bwd(const struct kctx *k, float *dinp, const float *inp, const float *dout, size_t n)
{
	struct args a = {.out = dinp, .in = inp, .in2 = dout};

	emu_compute(k->d, "gelu.bwd", 20.0 * (double)n, 3.0 * (double)n * k->ab);
	if (kctx_math(k))
		team_for(n, ELEMS_GRAIN, gelu_bwd_range, &a);
}

/* out = in + in2 (in2 NULL: out += in) */
VM_CLONES static void add_range(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	float *out = a->out;
	const float *x = a->in, *y = a->in2;

	(void)wk;
	if (y)
		for (size_t i = lo; i < hi; i++)
			out[i] = x[i] + y[i];
	else
		for (size_t i = lo; i < hi; i++)
			out[i] += x[i];
}

void sum_charge(const struct kctx *k, const char *name, int blocks, double n)
{
	emu_compute(k->d, name, (double)(blocks - 1) * n, (double)(blocks + 1) * n * k->ab);
}

void residual_fwd(const struct kctx *k, float *out, const float *a, const float *b, size_t n)
{
	struct args x = {.out = out, .in = a, .in2 = b};

	sum_charge(k, "residual", 2, (double)n);
	if (kctx_math(k))
		team_for(n, 4 * ELEMS_GRAIN, add_range, &x);
}

void add_acc(const struct kctx *k, float *acc, const float *x, size_t n)
{
	struct args a = {.out = acc, .in = x};

	sum_charge(k, "add", 2, (double)n);
	if (kctx_math(k))
		team_for(n, 4 * ELEMS_GRAIN, add_range, &a);
}

void embedding_fwd(const struct kctx *k, float *out, const int *tokens, const float *wte,
		   const float *wpe, int B, int T, int C, int t0)
{
	double btc = (double)B * T * C;

	emu_compute(k->d, "embedding", btc, 3 * btc * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			float *o = out + ((size_t)b * T + t) * C;
			const float *e = wte + (size_t)tokens[b * T + t] * C,
				    *p = wpe + (size_t)(t0 + t) * C;

			for (int c = 0; c < C; c++)
				o[c] = e[c] + p[c];
		}
}

void embedding_bwd(const struct kctx *k, float *dwte, float *dwpe, const float *dout,
		   const int *tokens, int B, int T, int C, int t0)
{
	double btc = (double)B * T * C;

	emu_compute(k->d, "embedding.bwd", 2 * btc, 5 * btc * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			const float *g = dout + ((size_t)b * T + t) * C;
			float *e = dwte + (size_t)tokens[b * T + t] * C,
			      *p = dwpe + (size_t)(t0 + t) * C;

			for (int c = 0; c < C; c++) {
				e[c] += g[c];
				p[c] += g[c];
			}
		}
}

void embedding_range_fwd(const struct kctx *k, float *out, const int *tokens, const float *wte,
			 int v0, int v1, int B, int T, int C)
{
	double btc = (double)B * T * C;

	emu_compute(k->d, "embedding", 0, 2 * btc * k->ab);
	if (!kctx_math(k))
		return;
	for (int i = 0; i < B * T; i++) {
		float *o = out + (size_t)i * C;
		int tok = tokens[i];

		if (tok >= v0 && tok < v1)
			memcpy(o, wte + (size_t)(tok - v0) * C, (size_t)C * sizeof *o);
		else
			memset(o, 0, (size_t)C * sizeof *o);
	}
}

void embedding_range_bwd(const struct kctx *k, float *dwte, const float *dout, const int *tokens,
			 int v0, int v1, int B, int T, int C)
{
	double btc = (double)B * T * C;

	emu_compute(k->d, "embedding.bwd", btc, 3 * btc * k->ab);
	if (!kctx_math(k))
		return;
	for (int i = 0; i < B * T; i++) {
		const float *g = dout + (size_t)i * C;
		float *e;

		if (tokens[i] < v0 || tokens[i] >= v1)
			continue;
		e = dwte + (size_t)(tokens[i] - v0) * C;
		for (int c = 0; c < C; c++)
			e[c] += g[c];
	}
}

void position_fwd(const struct kctx *k, float *out, const float *wpe, int M, const int *pos, int C)
{
	double mc = (double)M * C;

	emu_compute(k->d, "position", mc, 3 * mc * k->ab);
	if (!kctx_math(k))
		return;
	for (int i = 0; i < M; i++)
		for (int c = 0; c < C; c++)
			out[(size_t)i * C + c] += wpe[(size_t)pos[i] * C + c];
}

void position_bwd(const struct kctx *k, float *dwpe, const float *dout, int M, const int *pos,
		  int C)
{
	double mc = (double)M * C;

	emu_compute(k->d, "position.bwd", mc, 3 * mc * k->ab);
	if (!kctx_math(k))
		return;
	for (int i = 0; i < M; i++)
		for (int c = 0; c < C; c++)
			dwpe[(size_t)pos[i] * C + c] += dout[(size_t)i * C + c];
}

/* y (n) = softmax(x), subtracting the max first; y may be x. */
VM_CLONES static void softmax_row(float *y, const float *x, int n)
{
	float mx = x[0], sum = 0;

	for (int j = 1; j < n; j++)
		mx = x[j] > mx ? x[j] : mx;
	for (int j = 0; j < n; j++) /* (apart from the sum, which keeps its order) */
		y[j] = vm_expf(x[j] - mx);
	for (int j = 0; j < n; j++)
		sum += y[j];
	for (int j = 0; j < n; j++)
		y[j] /= sum;
}

/* softmax's rows; with idx (the targets) cross-entropy's, the losses into out2 */
static void softmax_rows(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	float *out = a->out, *losses = a->out2;
	const float *inp = a->in;
	const int *targets = a->idx;
	size_t N = (size_t)a->C;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		softmax_row(out + i * N, inp + i * N, (int)N);
		if (targets)
			losses[i] = -logf(out[i * N + (size_t)targets[i]]);
	}
}

void softmax_fwd(const struct kctx *k, float *out, const float *inp, int M, int N)
{
	double mn = (double)M * N;
	struct args a = {.out = out, .in = inp, .C = N};

	emu_compute(k->d, "softmax", 5 * mn, 2 * mn * k->ab);
	if (kctx_math(k))
		team_for((size_t)M, row_grain(N), softmax_rows, &a);
}

VM_CLONES static void softmax_bwd_rows(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	int N = a->C;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		const float *y = a->in + i * (size_t)N, *dy = a->in2 + i * (size_t)N;
		float *dx = a->out + i * (size_t)N, dot = 0;

		for (int j = 0; j < N; j++)
			dot += y[j] * dy[j];
		for (int j = 0; j < N; j++)
			dx[j] += y[j] * (dy[j] - dot);
	}
}

void softmax_bwd(const struct kctx *k, float *dinp, const float *out, const float *dout, int M,
		 int N)
{
	double mn = (double)M * N;
	struct args a = {.out = dinp, .in = out, .in2 = dout, .C = N};

	emu_compute(k->d, "softmax.bwd", 4 * mn, 3 * mn * k->ab);
	if (kctx_math(k))
		team_for((size_t)M, row_grain(N), softmax_bwd_rows, &a);
}

/* A kernel over the M x V values, 1 FLOP each, moving bytes a value. */
static void ce_kernel(const struct kctx *k, const char *name, double mv, double bytes)
{
	emu_compute(k->d, name, mv, mv * bytes);
}

void crossentropy_charge(const struct kctx *k, enum ce_impl impl, enum ce_phase ph, int M, int V)
{
	double mv = (double)M * V, ab = k->ab;
	int cast = k->ab < 4; /* (fp32 logits: .float() and the cast back are no kernels) */

	switch (impl) {
	case CE_ONE:
		if (ph == CE_PH_PROBS)
			emu_compute(k->d, "crossentropy", 5 * mv, 2 * mv * ab);
		else if (ph == CE_PH_BWD)
			emu_compute(k->d, "crossentropy.bwd", 2 * mv, 3 * mv * ab);
		return;
	case CE_UNFUSED:
		if (ph == CE_PH_MAX) {
			if (cast)
				ce_kernel(k, "crossentropy.float", mv, ab + 4);
			ce_kernel(k, "crossentropy.max", mv, 4);
		} else if (ph == CE_PH_SUM) {
			ce_kernel(k, "crossentropy.sub", mv, 8);
			ce_kernel(k, "crossentropy.exp", mv, 8);
			ce_kernel(k, "crossentropy.sum", mv, 4);
		} else if (ph == CE_PH_PROBS) {
			ce_kernel(k, "crossentropy.div", mv, 8);
		} else {
			ce_kernel(k, "crossentropy.bwd.mul", mv, 8);
			if (cast)
				ce_kernel(k, "crossentropy.bwd.cast", mv, 4 + ab);
		}
		return;
	case CE_NATIVE:
		if (ph == CE_PH_MAX)
			ce_kernel(k, "crossentropy.float_max", mv, cast ? ab + 4 : 4);
		else if (ph == CE_PH_SUM)
			ce_kernel(k, "crossentropy.sub_exp_sum", mv, 8);
		else if (ph == CE_PH_PROBS)
			ce_kernel(k, "crossentropy.div", mv, 8);
		else {
			/* the saved probabilities changed in place (written back) and the
			 * gradient written in bf16, whatever the logits' precision (the
			 * function casts to torch.bfloat16); fp32 logits take autograd's
			 * cast back */
			ce_kernel(k, "crossentropy.bwd", mv, 4 + 4 + 2);
			if (!cast)
				ce_kernel(k, "crossentropy.bwd.cast", mv, 2 + 4);
		}
		return;
	case CE_TE:
		if (ph == CE_PH_MAX) {
			ce_kernel(k, "crossentropy.online_softmax", mv, ab);
		} else if (ph == CE_PH_PROBS) {
			ce_kernel(k, "crossentropy.grad", mv, ab + 4);
		} else if (ph == CE_PH_BWD) {
			ce_kernel(k, "crossentropy.bwd.mul", mv, 8);
			if (cast)
				ce_kernel(k, "crossentropy.bwd.cast", mv, 4 + ab);
		}
		return;
	}
}

void crossentropy_fwd(const struct kctx *k, enum ce_impl impl, float *losses, float *probs,
		      const float *logits, const int *targets, int M, int V)
{
	struct args a = {.out = probs, .out2 = losses, .in = logits, .idx = targets, .C = V};

	crossentropy_charge(k, impl, CE_PH_MAX, M, V);
	crossentropy_charge(k, impl, CE_PH_SUM, M, V);
	crossentropy_charge(k, impl, CE_PH_PROBS, M, V);
	if (kctx_math(k))
		team_for((size_t)M, row_grain(V), softmax_rows, &a);
}

VM_CLONES static void crossentropy_bwd_rows(void *arg, size_t lo, size_t hi, int wk)
{
	const struct args *a = arg;
	int V = a->C;
	float dloss = a->x;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		const float *p = a->in + i * (size_t)V;
		float *g = a->out + i * (size_t)V;
		int target = a->idx[i];

		for (int v = 0; v < V; v++)
			g[v] += (p[v] - (v == target ? 1.0f : 0.0f)) * dloss;
	}
}

void crossentropy_bwd(const struct kctx *k, enum ce_impl impl, float *dlogits, const float *probs,
		      const int *targets, float dloss, int M, int V)
{
	struct args a = {.out = dlogits, .in = probs, .idx = targets, .C = V, .x = dloss};

	crossentropy_charge(k, impl, CE_PH_BWD, M, V);
	if (kctx_math(k))
		team_for((size_t)M, row_grain(V), crossentropy_bwd_rows, &a);
}
