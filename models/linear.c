#include "linear.h"

#include <cblas.h>

#include "clock.h"
#include "team.h"

/* A GEMM's pieces (team.h): C (rows x cols) = alpha op(A) op(B) + beta C cut by rows of C,
 * each piece packing all of op(B) again, or by columns, each packing all of op(A): the
 * larger of the two, so that the smaller operand is the one packed again. The cut is the
 * shape's alone, whatever the threads (team.h says why): a piece of at least GEMM_MIN
 * multiply-adds (a hand-over costs about a microsecond), at most GEMM_PIECES of them,
 * bounds at multiples of GEMM_GRAIN (a multiple of the kernels' tiles). */
#define GEMM_GRAIN  32
#define GEMM_MIN    (1 << 18)
#define GEMM_PIECES 4
/* The bias gradient's columns a piece */
#define BIAS_GRAIN 64

struct gemm {
	enum CBLAS_TRANSPOSE ta, tb;
	int rows, cols, inner, lda, ldb, ldc, by_rows;
	float alpha, beta;
	const float *a, *b;
	float *c;
	const float *bias; /* forward: filled into C's piece first (beta 1) */
};

static void gemm_piece(void *arg, size_t lo, size_t hi, int w)
{
	const struct gemm *g = arg;
	int r0 = 0, r1 = g->rows, c0 = 0, c1 = g->cols;
	const float *a = g->a, *b = g->b;

	(void)w;
	if (g->by_rows) {
		r0 = (int)lo;
		r1 = (int)hi;
		/* op(A)'s row r: A's row r, or its column r */
		a += (size_t)r0 * (g->ta == CblasNoTrans ? (size_t)g->lda : 1);
	} else {
		c0 = (int)lo;
		c1 = (int)hi;
		/* op(B)'s column c: B's column c, or its row c */
		b += (size_t)c0 * (g->tb == CblasNoTrans ? 1 : (size_t)g->ldb);
	}
	if (g->bias)
		for (int i = r0; i < r1; i++)
			for (int j = c0; j < c1; j++)
				g->c[(size_t)i * g->ldc + j] = g->bias[j];
	cblas_sgemm(CblasRowMajor, g->ta, g->tb, r1 - r0, c1 - c0, g->inner, g->alpha, a, g->lda, b,
		    g->ldb, g->beta, g->c + (size_t)r0 * g->ldc + c0, g->ldc);
}

static void gemm(struct gemm *g)
{
	double macs = (double)g->rows * g->cols * g->inner;
	int pieces = macs >= GEMM_PIECES * (double)GEMM_MIN ? GEMM_PIECES : (int)(macs / GEMM_MIN);

	g->by_rows = g->rows >= g->cols;
	team_for_pieces((size_t)(g->by_rows ? g->rows : g->cols), GEMM_GRAIN, pieces, gemm_piece,
			g);
}

void linear_fwd(const struct kctx *k, float *out, const float *inp, const float *w,
		const float *bias, int has_bias, int M, int K, int N)
{
	double m = M, n = N, kk = K;
	struct gemm g = {CblasNoTrans,
			 CblasTrans,
			 M,
			 N,
			 K,
			 K,
			 K,
			 N,
			 0,
			 1.0f,
			 has_bias ? 1.0f : 0.0f,
			 inp,
			 w,
			 out,
			 has_bias ? bias : NULL};

	emu_gemm(k->d, "linear", 1, m, n, kk, has_bias ? m * n : 0,
		 (m * kk + n * kk + m * n) * k->ab);
	if (kctx_math(k))
		gemm(&g);
}

void linear_bwd_input(const struct kctx *k, float *dinp, const float *dout, const float *w, int M,
		      int K, int N)
{
	double m = M, n = N, kk = K;
	struct gemm g = {CblasNoTrans, CblasNoTrans, M,    K, N,    N,   K, K, 0,
			 1.0f,         1.0f,         dout, w, dinp, NULL};

	emu_gemm(k->d, "linear.bwd_input", 1, m, kk, n, 0, (m * n + n * kk + 2 * m * kk) * k->ab);
	if (kctx_math(k))
		gemm(&g);
}

struct bias_grad {
	float *dbias;
	const float *dout;
	int M, N;
};

/* dbias[j] += the column's sum over the rows, in their order, for columns [lo, hi). */
static void bias_piece(void *arg, size_t lo, size_t hi, int w)
{
	const struct bias_grad *b = arg;

	(void)w;
	for (int i = 0; i < b->M; i++)
		for (size_t j = lo; j < hi; j++)
			b->dbias[j] += b->dout[(size_t)i * b->N + j];
}

void linear_bwd_weight(const struct kctx *k, float *dw, float *dbias, int has_bias,
		       const float *dout, const float *inp, int M, int K, int N)
{
	double m = M, n = N, kk = K;
	struct gemm g = {CblasTrans, CblasNoTrans, N,    K,    M,   N,  K,   K,
			 0,          1.0f,         1.0f, dout, inp, dw, NULL};
	struct bias_grad b = {dbias, dout, M, N};

	emu_gemm(k->d, "linear.bwd_weight", 1, n, kk, m, has_bias ? m * n : 0,
		 (m * n + m * kk + 2 * n * kk) * k->ab);
	if (!kctx_math(k))
		return;
	gemm(&g);
	if (has_bias)
		team_for((size_t)N, BIAS_GRAIN, bias_piece, &b);
}
