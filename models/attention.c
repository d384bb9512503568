#include "attention.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "clock.h"
#include "team.h"
#include "util.h"
#include "vmath.h"

/* Softmax in place over the keys [0, last] of a row of n scores, zero beyond (the causal
 * mask); returns the log of the sum of exponentials, log-sum-exp of the row. */
VM_CLONES static float causal_softmax_row(float *row, int last, int n)
{
	float mx = row[0], sum = 0;

	for (int j = last + 1; j < n; j++)
		row[j] = 0.0f;
	for (int j = 1; j <= last; j++)
		mx = row[j] > mx ? row[j] : mx;
	for (int j = 0; j <= last; j++) /* (apart from the sum, which keeps its order) */
		row[j] = vm_expf(row[j] - mx);
	for (int j = 0; j <= last; j++)
		sum += row[j];
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

/* The standard attention's kernels: one charge under the roofline; under the calibrated
 * cost model Megatron's unfused path, the scores' batched GEMM (b a, Tq, Tk, hs), the fused
 * scale-mask-softmax over the scores, and the context's batched GEMM (b a, Tq, hs, Tk);
 * backward the gradients' four batched GEMMs around the softmax's backward. */
/* Dropout on the view's probabilities. */
static int dropping(const struct attn_view *a)
{
	return a->drop && a->drop->p > 0;
}

/* The dropout's kernel over the (b a, Tq, Tk) probabilities, memory-bound as the hidden
 * dropout's: forward reads P, writes P' and the mask's byte (a multiply and a compare a
 * score); backward reads dP' and the mask, writes dP. Under either cost model. */
static void charge_dropout(const struct kctx *k, const struct attn_view *a, int bwd)
{
	double n = (double)a->B * (a->h1 - a->h0) * a->Tq * a->Tk;

	if (!dropping(a))
		return;
	if (bwd)
		emu_compute(k->d, "attention.dropout.bwd", n, (2.0 * k->ab + 1) * n);
	else
		emu_compute(k->d, "attention.dropout", 2 * n, (2.0 * k->ab + 1) * n);
}

static void charge_fwd(const struct kctx *k, const struct attn_view *a)
{
	double heads = (double)a->B * (a->h1 - a->h0), qk = (double)a->Tq * a->Tk;
	double hs = a->hs, Tq = a->Tq, Tk = a->Tk, ab = k->ab;

	if (!emu_cost_calibrated(k->d)) {
		emu_compute(k->d, "attention", heads * (4 * qk * hs + 5 * qk),
			    heads * ((2 * Tq + 2 * Tk) * hs + 2 * qk) * ab);
		charge_dropout(k, a, 0);
		return;
	}
	emu_gemm(k->d, "attention.scores", heads, Tq, Tk, hs, 0,
		 heads * ((Tq + Tk) * hs + qk) * ab);
	emu_compute(k->d, "attention.softmax", heads * 5 * qk, heads * 2 * qk * ab);
	charge_dropout(k, a, 0);
	emu_gemm(k->d, "attention.context", heads, Tq, hs, Tk, 0,
		 heads * (qk + (Tq + Tk) * hs) * ab);
}

static void charge_bwd(const struct kctx *k, const struct attn_view *a)
{
	double heads = (double)a->B * (a->h1 - a->h0), qk = (double)a->Tq * a->Tk;
	double hs = a->hs, Tq = a->Tq, Tk = a->Tk, ab = k->ab,
	       io = heads * (qk + (Tq + Tk) * hs) * ab;

	if (!emu_cost_calibrated(k->d)) {
		emu_compute(k->d, "attention.bwd", heads * (8 * qk * hs + 4 * qk),
			    heads * ((4 * Tq + 4 * Tk) * hs + 3 * qk) * ab);
		charge_dropout(k, a, 1);
		return;
	}
	emu_gemm(k->d, "attention.bwd.dscores", heads, Tq, Tk, hs, 0, io); /* dO V^T */
	emu_gemm(k->d, "attention.bwd.dv", heads, Tk, hs, Tq, 0, io);      /* P'^T dO */
	charge_dropout(k, a, 1);
	emu_compute(k->d, "attention.bwd.softmax", heads * 4 * qk, heads * 3 * qk * ab);
	emu_gemm(k->d, "attention.bwd.dq", heads, Tq, hs, Tk, 0, io); /* dS K */
	emu_gemm(k->d, "attention.bwd.dk", heads, Tk, hs, Tq, 0, io); /* dS^T Q */
}

/* The kernels' work, a piece of (sequence, head) pairs a host thread (models/team.h): each
 * pair writes its own scores, output columns and gradient columns. */
struct attn_job {
	const struct attn_view *a;
	float *lse, *dq, *dk, *dv, *scratch;
	const float *dout;
	int ldl;
	size_t nscratch; /* floats a worker's scratch */
};

static void run_pairs(const struct attn_view *a, struct attn_job *job, team_fn fn)
{
	team_for((size_t)a->B * (size_t)(a->h1 - a->h0), 1, fn, job);
}

static void fwd_pairs(void *arg, size_t lo, size_t hi, int w)
{
	const struct attn_job *job = arg;
	const struct attn_view *a = job->a;
	int Tq = a->Tq, Tk = a->Tk, hs = a->hs, nh = a->h1 - a->h0;
	float scale = 1.0f / sqrtf((float)hs);

	(void)w;
	for (size_t pair = lo; pair < hi; pair++) {
		int b = (int)(pair / (size_t)nh), h = a->h0 + (int)(pair % (size_t)nh);
		{
			const float *q = a->q + (size_t)b * Tq * a->ldq + (size_t)h * hs;
			const float *kk = a->k + (size_t)b * Tk * a->ldk + (size_t)h * hs;
			const float *v = a->v + (size_t)b * Tk * a->ldv + (size_t)h * hs;
			size_t o = ((size_t)b * nh + (h - a->h0)) * Tq * Tk;
			float *s = a->att + o, *pd = dropping(a) ? a->attd + o : s;
			uint64_t key = dropping(a) ? attn_drop_key(a->drop, b, h) : 0;

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
			if (pd != s) /* P' = mask (x) P / (1 - p), the mask kept */
				for (int i = 0; i < Tq; i++) {
					size_t r = (size_t)i * Tk;

					memcpy(pd + r, s + r, (size_t)Tk * sizeof *pd);
					attn_drop_row(a->drop, key, i, pd + r, a->mask + o + r, Tk);
				}
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, 1.0f, pd,
				    Tk, v, a->ldv, 0.0f,
				    a->out + (size_t)b * Tq * a->ldo + (size_t)h * hs, a->ldo);
		}
	}
}

void attention_fwd_view(const struct kctx *k, const struct attn_view *a)
{
	struct attn_job job = {.a = a};

	charge_fwd(k, a);
	if (kctx_math(k))
		run_pairs(a, &job, fwd_pairs);
}

static void bwd_pairs(void *arg, size_t lo, size_t hi, int w)
{
	const struct attn_job *job = arg;
	const struct attn_view *a = job->a;
	int Tq = a->Tq, Tk = a->Tk, hs = a->hs, nh = a->h1 - a->h0;
	float scale = 1.0f / sqrtf((float)hs), *dq = job->dq, *dk = job->dk, *dv = job->dv;
	float *scratch = team_scratch(w, job->scratch, job->nscratch);
	const float *dout = job->dout;

	for (size_t pair = lo; pair < hi; pair++) {
		int b = (int)(pair / (size_t)nh), h = a->h0 + (int)(pair % (size_t)nh);
		{
			size_t oq = (size_t)b * Tq * a->ldq + (size_t)h * hs;
			size_t ok = (size_t)b * Tk * a->ldk + (size_t)h * hs;
			size_t ov = (size_t)b * Tk * a->ldv + (size_t)h * hs;
			size_t o = ((size_t)b * nh + (h - a->h0)) * Tq * Tk;
			const float *s = a->att + o, *pd = dropping(a) ? a->attd + o : s;
			const float *dy = dout + (size_t)b * Tq * a->ldo + (size_t)h * hs;
			float *ds = scratch;

			/* d att' = dout V^T; dV += att'^T dout */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, 1.0f, dy,
				    a->ldo, a->v + ov, a->ldv, 0.0f, ds, Tk);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, 1.0f, pd,
				    Tk, dy, a->ldo, 1.0f, dv + ov, a->ldv);
			if (pd != s) { /* d att = mask (x) d att' / (1 - p) */
				float sc = 1.0f / (1.0f - a->drop->p);
				const unsigned char *mk = a->mask + o;

				for (size_t e = 0; e < (size_t)Tq * Tk; e++)
					ds[e] = mk[e] ? ds[e] * sc : 0.0f;
			}
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

void attention_bwd_view(const struct kctx *k, const struct attn_view *a, float *dq, float *dk,
			float *dv, float *scratch, const float *dout)
{
	struct attn_job job = {.a = a,
			       .dq = dq,
			       .dk = dk,
			       .dv = dv,
			       .scratch = scratch,
			       .dout = dout,
			       .nscratch = (size_t)a->Tq * (size_t)a->Tk};

	charge_bwd(k, a);
	if (kctx_math(k))
		run_pairs(a, &job, bwd_pairs);
}

/* The whole-sequence view of a qkv buffer. */
struct attn_view attention_qkv_view(float *out, float *att, const float *qkv, int B, int T, int NH,
				    int h0, int h1, int hs)
{
	int C = NH * hs;
	struct attn_view a = {.B = B, .Tq = T, .Tk = T, .h0 = h0, .h1 = h1, .hs = hs};

	a.q = qkv;
	a.k = qkv ? qkv + C : NULL;
	a.v = qkv ? qkv + 2 * C : NULL;
	a.ldq = a.ldk = a.ldv = 3 * C;
	a.out = out;
	a.ldo = C;
	a.att = att;

	return a;
}

void attention_fwd(const struct kctx *k, float *out, float *att, const float *qkv, int B, int T,
		   int NH, int h0, int h1, int hs)
{
	struct attn_view a = attention_qkv_view(out, att, qkv, B, T, NH, h0, h1, hs);

	attention_fwd_view(k, &a);
}

void attention_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
		   const float *att, const float *qkv, int B, int T, int NH, int h0, int h1, int hs)
{
	struct attn_view a = attention_qkv_view(NULL, (float *)att, qkv, B, T, NH, h0, h1, hs);
	int C = NH * hs;

	attention_bwd_view(k, &a, dqkv, dqkv ? dqkv + C : NULL, dqkv ? dqkv + 2 * C : NULL, scratch,
			   dout);
}

/* ------------------------------------------------------------------------------------ */
/* Memory-efficient attention                                                           */

/* The batch strides of a view, in floats. */
static size_t stride_q(const struct attn_view *a)
{
	return a->bsq ? a->bsq : (size_t)a->Tq * a->ldq;
}

static size_t stride_k(const struct attn_view *a, int ld)
{
	return a->bsk ? a->bsk : (size_t)a->Tk * ld;
}

static size_t stride_o(const struct attn_view *a)
{
	return a->bso ? a->bso : (size_t)a->Tq * a->ldo;
}

/* The keys a block of queries [r0, r0 + nr) sees: [0, nk). */
static int block_keys(const struct attn_view *a, int r0, int nr)
{
	int nk = a->q0 + r0 + nr;

	return nk < a->Tk ? nk : a->Tk;
}

/* The (query, key) pairs the blocks of queries compute, a head: the visible keys of each
 * block, as FlashAttention skips the blocks the causal mask hides. */
static double flash_pairs(const struct attn_view *a)
{
	double n = 0;

	for (int r0 = 0; r0 < a->Tq; r0 += FLASH_ROWS) {
		int nr = a->Tq - r0 < FLASH_ROWS ? a->Tq - r0 : FLASH_ROWS;

		n += (double)nr * block_keys(a, r0, nr);
	}
	return n;
}

int64_t attention_flash_charge(struct emu_dev *d, int backward, double heads, double Tq, double Tk,
			       double P, int hs, int ab)
{
	if (!backward)
		return emu_fused(d, "attention.flash", heads * (4 * P * hs + 5 * P),
				 heads * Tq * (4.0 * hs + 5),
				 heads * ((2 * Tq + 2 * Tk) * hs + Tq) * ab);
	/* (the backward's blocks go by keys: its rows are Tk) */
	return emu_fused(d, "attention.flash.bwd", heads * (10 * P * hs + 6 * P),
			 heads * Tk * (10.0 * hs + 6), heads * ((4 * Tq + 4 * Tk) * hs + Tq) * ab);
}

static void flash_fwd_pairs(void *arg, size_t lo, size_t hi, int w)
{
	const struct attn_job *job = arg;
	const struct attn_view *a = job->a;
	int Tq = a->Tq, hs = a->hs, nh = a->h1 - a->h0, ldl = job->ldl;
	float scale = 1.0f / sqrtf((float)hs), *lse = job->lse;
	float *scratch = team_scratch(w, job->scratch, job->nscratch);

	for (size_t pair = lo; pair < hi; pair++) {
		int b = (int)(pair / (size_t)nh), h = a->h0 + (int)(pair % (size_t)nh);
		{
			const float *q = a->q + b * stride_q(a) + (size_t)h * hs;
			const float *kk = a->k + b * stride_k(a, a->ldk) + (size_t)h * hs;
			const float *v = a->v + b * stride_k(a, a->ldv) + (size_t)h * hs;
			float *o = a->out + b * stride_o(a) + (size_t)h * hs;
			float *l = lse + ((size_t)b * nh + (h - a->h0)) * ldl;
			uint64_t key = dropping(a) ? attn_drop_key(a->drop, b, h) : 0;

			for (int r0 = 0; r0 < Tq; r0 += FLASH_ROWS) {
				int nr = Tq - r0 < FLASH_ROWS ? Tq - r0 : FLASH_ROWS;
				int nk = block_keys(a, r0, nr);

				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
					    scale, q + (size_t)r0 * a->ldq, a->ldq, kk, a->ldk,
					    0.0f, scratch, nk);
				for (int i = 0; i < nr; i++) {
					float *row = scratch + (size_t)i * nk;

					l[r0 + i] =
						causal_softmax_row(row, last_key(a, r0 + i), nk);
					if (dropping(a)) /* the mask drawn, not kept */
						attn_drop_row(a->drop, key, r0 + i, row, NULL, nk);
				}
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk,
					    1.0f, scratch, nk, v, a->ldv, 0.0f,
					    o + (size_t)r0 * a->ldo, a->ldo);
			}
		}
	}
}

void attention_flash_fwd_view(const struct kctx *k, const struct attn_view *a, float *lse, int ldl,
			      float *scratch)
{
	double heads = (double)a->B * (a->h1 - a->h0), qk = flash_pairs(a);
	int Tq = a->Tq, hs = a->hs;
	struct attn_job job = {.a = a,
			       .lse = lse,
			       .ldl = ldl ? ldl : Tq,
			       .scratch = scratch,
			       .nscratch = (size_t)FLASH_ROWS * (size_t)a->Tk};

	EMU_ASSERT(a->q0 >= 0); /* every query sees a key */
	attention_flash_charge(k->d, 0, heads, Tq, a->Tk, qk, hs, k->ab);
	if (kctx_math(k))
		run_pairs(a, &job, flash_fwd_pairs);
}

static void flash_bwd_pairs(void *arg, size_t lo, size_t hi, int w)
{
	const struct attn_job *job = arg;
	const struct attn_view *a = job->a;
	int Tq = a->Tq, Tk = a->Tk, hs = a->hs, nh = a->h1 - a->h0, ldl = job->ldl;
	float scale = 1.0f / sqrtf((float)hs), *dq = job->dq, *dk = job->dk, *dv = job->dv;
	float *scratch = team_scratch(w, job->scratch, job->nscratch);
	const float *lse = job->lse, *dout = job->dout;

	for (size_t pair = lo; pair < hi; pair++) {
		int b = (int)(pair / (size_t)nh), h = a->h0 + (int)(pair % (size_t)nh);
		{
			size_t oq = b * stride_q(a) + (size_t)h * hs;
			size_t ok = b * stride_k(a, a->ldk) + (size_t)h * hs;
			size_t ov = b * stride_k(a, a->ldv) + (size_t)h * hs;
			size_t oo = b * stride_o(a) + (size_t)h * hs;
			const float *q = a->q + oq, *kk = a->k + ok, *v = a->v + ov;
			const float *dy = dout + oo, *o = a->out + oo;
			const float *l = lse + ((size_t)b * nh + (h - a->h0)) * ldl;
			uint64_t key = dropping(a) ? attn_drop_key(a->drop, b, h) : 0;
			float dsc = dropping(a) ? 1.0f / (1.0f - a->drop->p) : 1.0f;

			for (int r0 = 0; r0 < Tq; r0 += FLASH_ROWS) {
				int nr = Tq - r0 < FLASH_ROWS ? Tq - r0 : FLASH_ROWS;
				int nk = block_keys(a, r0, nr);
				float *p = scratch, *dp = scratch + (size_t)FLASH_ROWS * Tk;

				/* P = exp(S - lse), recomputed; dP = dout V^T */
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
					    scale, q + (size_t)r0 * a->ldq, a->ldq, kk, a->ldk,
					    0.0f, p, nk);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, hs,
					    1.0f, dy + (size_t)r0 * a->ldo, a->ldo, v, a->ldv, 0.0f,
					    dp, nk);
				for (int i = 0; i < nr; i++) {
					float *pr = p + (size_t)i * nk, *dr = dp + (size_t)i * nk,
					      dot = 0;
					const float *yi = dy + (size_t)(r0 + i) * a->ldo;
					const float *oi = o + (size_t)(r0 + i) * a->ldo;
					int last = last_key(a, r0 + i);

					for (int e = 0; e < hs; e++) /* D = rowsum(dout * out) */
						dot += yi[e] * oi[e];
					for (int j = 0; j <= last && !dropping(a); j++) {
						pr[j] = vm_expf(pr[j] - l[r0 + i]);
						dr[j] = pr[j] * (dr[j] - dot);
					}
					/* with dropout the mask drawn again: dP = mask dP' / (1 -
					 * p) into dS, and P' in place of P for dV */
					for (int j = 0; j <= last && dropping(a); j++) {
						int kept = attn_drop_keep(a->drop, key, r0 + i, j);
						float pj = vm_expf(pr[j] - l[r0 + i]);

						dr[j] = pj * ((kept ? dr[j] * dsc : 0.0f) - dot);
						pr[j] = kept ? pj * dsc : 0.0f;
					}
					for (int j = last + 1; j < nk; j++)
						pr[j] = dr[j] = 0.0f;
				}
				/* dV += P^T dout; dQ += scale dS K; dK += scale dS^T Q */
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nr,
					    1.0f, p, nk, dy + (size_t)r0 * a->ldo, a->ldo, 1.0f,
					    dv + ov, a->ldv);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nk,
					    scale, dp, nk, kk, a->ldk, 1.0f,
					    dq + oq + (size_t)r0 * a->ldq, a->ldq);
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nr,
					    scale, dp, nk, q + (size_t)r0 * a->ldq, a->ldq, 1.0f,
					    dk + ok, a->ldk);
			}
		}
	}
}

void attention_flash_bwd_view(const struct kctx *k, const struct attn_view *a, const float *lse,
			      int ldl, float *dq, float *dk, float *dv, float *scratch,
			      const float *dout)
{
	double heads = (double)a->B * (a->h1 - a->h0), qk = flash_pairs(a);
	int Tq = a->Tq, Tk = a->Tk, hs = a->hs;
	struct attn_job job = {.a = a,
			       .lse = (float *)lse,
			       .dq = dq,
			       .dk = dk,
			       .dv = dv,
			       .scratch = scratch,
			       .dout = dout,
			       .ldl = ldl ? ldl : Tq,
			       .nscratch = 2 * (size_t)FLASH_ROWS * (size_t)Tk};

	EMU_ASSERT(a->q0 >= 0);
	attention_flash_charge(k->d, 1, heads, Tq, Tk, qk, hs, k->ab);
	if (kctx_math(k))
		run_pairs(a, &job, flash_bwd_pairs);
}

void attention_lse_merge(const struct kctx *k, const struct attn_view *a, float *lse, int ldl,
			 const float *bout, const float *blse)
{
	int Tq = a->Tq, hs = a->hs, nh = a->h1 - a->h0;
	double n = (double)a->B * nh * Tq;

	ldl = ldl ? ldl : Tq;
	emu_compute(k->d, "attention.merge", n * (4.0 * hs + 6), n * (3.0 * hs + 3) * k->ab);
	if (!kctx_math(k))
		return;
	for (int b = 0; b < a->B; b++)
		for (int h = a->h0; h < a->h1; h++) {
			size_t oo = b * stride_o(a) + (size_t)h * hs;
			size_t ol = ((size_t)b * nh + (h - a->h0)) * ldl;

			for (int i = 0; i < Tq; i++) {
				float *o = a->out + oo + (size_t)i * a->ldo;
				const float *x = bout + oo + (size_t)i * a->ldo;
				float l0 = lse[ol + i], l1 = blse[ol + i];
				float mx = l0 > l1 ? l0 : l1;
				float e0 = vm_expf(l0 - mx), e1 = vm_expf(l1 - mx), s = e0 + e1;

				for (int e = 0; e < hs; e++)
					o[e] = (o[e] * e0 + x[e] * e1) / s;
				lse[ol + i] = mx + logf(s);
			}
		}
}

/* The whole-sequence view of a qkv buffer, for the flash kernels. */
void attention_flash_fwd(const struct kctx *k, float *out, float *lse, const float *qkv, int B,
			 int T, int NH, int h0, int h1, int hs, float *scratch)
{
	struct attn_view a = attention_qkv_view(out, NULL, qkv, B, T, NH, h0, h1, hs);

	attention_flash_fwd_view(k, &a, lse, 0, scratch);
}

void attention_flash_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
			 const float *out, const float *lse, const float *qkv, int B, int T, int NH,
			 int h0, int h1, int hs)
{
	struct attn_view a = attention_qkv_view((float *)out, NULL, qkv, B, T, NH, h0, h1, hs);
	int C = NH * hs;

	attention_flash_bwd_view(k, &a, lse, 0, dqkv, dqkv ? dqkv + C : NULL,
				 dqkv ? dqkv + 2 * C : NULL, scratch, dout);
}
