/* The attention kernels against ref.h's double-precision attention: all heads and a
 * tensor-parallel rank's range of heads, standard and memory-efficient, forward and
 * (by central differences) backward; the memory-efficient kernel over several query
 * blocks and over a context-parallel ring's key blocks; a sequence in chunks. The harness
 * and the thresholds are kernel_check.h's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attention.h"
#include "common.h"
#include "kernel_check.h"
#include "ref.h"

/* ------------------------------------------------------------------------------------ */
/* attention, all heads and a range of heads                                            */

enum { AB = 2, AT = 5, ANH = 3, AHS = 4, AC = ANH * AHS };

struct att {
	int h0, h1, flash;
	float *qkv, *r, out[AB * AT * AC], att[AB * ANH * AT * AT], dqkv[AB * AT * 3 * AC],
		scratch[2 * FLASH_ROWS * AT];
	double *qkvd;
};

static void att_dev(const struct kctx *k, void *ctx)
{
	struct att *a = ctx;

	if (a->flash) {
		attention_flash_fwd(k, a->out, a->att, a->qkv, AB, AT, ANH, a->h0, a->h1, AHS,
				    a->scratch);
		attention_flash_bwd(k, a->dqkv, a->scratch, a->r, a->out, a->att, a->qkv, AB, AT,
				    ANH, a->h0, a->h1, AHS);
		return;
	}
	attention_fwd(k, a->out, a->att, a->qkv, AB, AT, ANH, a->h0, a->h1, AHS);
	attention_bwd(k, a->dqkv, a->scratch, a->r, a->att, a->qkv, AB, AT, ANH, a->h0, a->h1, AHS);
}

/* Sum of out * R over heads [h0, h1) only. */
static double att_loss(void *ctx)
{
	struct att *a = ctx;
	double out[AB * AT * AC], s = 0;

	ref_attention(out, a->qkvd, AB, AT, ANH, AHS);
	for (int i = 0; i < AB * AT; i++)
		for (int j = a->h0 * AHS; j < a->h1 * AHS; j++)
			s += out[i * AC + j] * a->r[i * AC + j];
	return s;
}

static void check_attention(int h0, int h1, int flash)
{
	struct att a = {.h0 = h0, .h1 = h1, .flash = flash};
	double out[AB * AT * AC];
	char what[64];

	a.qkv = rnd(AB * AT * 3 * AC, 16, 2);
	a.r = rnd(AB * AT * AC, 17, 1);
	run_on_device(att_dev, &a);
	a.qkvd = to_double(a.qkv, AB * AT * 3 * AC);
	ref_attention(out, a.qkvd, AB, AT, ANH, AHS);
	for (int i = 0; i < AB * AT; i++) {
		snprintf(what, sizeof what, "%sattention heads [%d,%d) row %d",
			 flash ? "flash " : "", h0, h1, i);
		fwd_check(what, a.out + i * AC + h0 * AHS, out + i * AC + h0 * AHS,
			  (size_t)(h1 - h0) * AHS, TOL_FWD);
	}
	snprintf(what, sizeof what, "%sattention heads [%d,%d) dqkv", flash ? "flash " : "", h0,
		 h1);
	fd_check(what, att_loss, &a, a.qkvd, AB * AT * 3 * AC, a.dqkv, TOL_GRAD);
	free(a.qkv), free(a.r), free(a.qkvd);
}

static void test_attention(void **state)
{
	(void)state;
	for (int flash = 0; flash <= 1; flash++) {
		check_attention(0, ANH, flash);
		check_attention(1, 3, flash); /* a tensor-parallel rank holding heads 1 and 2 */
	}
}

/* Memory-efficient attention over several blocks of queries (T = 2.5 FLASH_ROWS) gives
 * the standard kernel's output and gradients (that one is checked against finite
 * differences above) to rounding. */
enum { FT = 5 * FLASH_ROWS / 2, FH = 2, FS = 8, FC = FH * FS };

struct flash_pair {
	float *qkv, *r, *out[2], *att, *lse, *dqkv[2], *scratch;
};

static void flash_dev(const struct kctx *k, void *ctx)
{
	struct flash_pair *f = ctx;

	attention_fwd(k, f->out[0], f->att, f->qkv, 1, FT, FH, 0, FH, FS);
	attention_bwd(k, f->dqkv[0], f->scratch, f->r, f->att, f->qkv, 1, FT, FH, 0, FH, FS);
	attention_flash_fwd(k, f->out[1], f->lse, f->qkv, 1, FT, FH, 0, FH, FS, f->scratch);
	attention_flash_bwd(k, f->dqkv[1], f->scratch, f->r, f->out[1], f->lse, f->qkv, 1, FT, FH,
			    0, FH, FS);
}

static void test_flash_attention_blocks(void **state)
{
	struct flash_pair f;
	double out0[FT * FC], dq0[FT * 3 * FC];

	(void)state;
	f.qkv = rnd(FT * 3 * FC, 41, 2);
	f.r = rnd(FT * FC, 42, 1);
	for (int i = 0; i < 2; i++) {
		f.out[i] = calloc(FT * FC, sizeof(float));
		f.dqkv[i] = calloc(FT * 3 * FC, sizeof(float));
	}
	f.att = calloc((size_t)FH * FT * FT, sizeof(float));
	f.lse = calloc((size_t)FH * FT, sizeof(float));
	f.scratch = calloc((size_t)FT * FT, sizeof(float));
	run_on_device(flash_dev, &f);
	for (int i = 0; i < FT * FC; i++)
		out0[i] = f.out[0][i];
	for (int i = 0; i < FT * 3 * FC; i++)
		dq0[i] = f.dqkv[0][i];
	fwd_check("flash attention out", f.out[1], out0, FT * FC, 1e-5);
	fwd_check("flash attention dqkv", f.dqkv[1], dq0, FT * 3 * FC, 1e-5);
	free(f.qkv), free(f.r), free(f.att), free(f.lse), free(f.scratch);
	for (int i = 0; i < 2; i++)
		free(f.out[i]), free(f.dqkv[i]);
}

/* The blockwise form a context-parallel ring computes: two sequences of RT tokens whose
 * keys come in two halves; queries [0, RH) against the first half (the causal diagonal),
 * queries [RH, RT) against the first half (all visible) and the second (the diagonal),
 * the two merged by log-sum-exp, each view a chunk of every sequence (batch strides).
 * Forward and the three blocks' backward (from the merged lse and out) give the whole
 * sequence's memory-efficient attention within 1e-5. */
enum { RT = 3 * FLASH_ROWS, RH = RT / 2, RB = 2 };

struct ring_blocks {
	float *qkv, *r, *out[2], *lse[2], *bout, *blse, *dqkv[2], *scratch;
};

static void ring_dev(const struct kctx *k, void *ctx)
{
	struct ring_blocks *f = ctx;
	size_t C3 = 3 * FC, seq = (size_t)RT * C3;
	struct attn_view a = {.B = RB,
			      .Tq = RH,
			      .Tk = RH,
			      .h1 = FH,
			      .hs = FS,
			      .bsq = seq,
			      .bsk = seq,
			      .bso = (size_t)RT * FC};
	struct attn_view lo, hi;
	float *dq = f->dqkv[1];

	attention_flash_fwd(k, f->out[0], f->lse[0], f->qkv, RB, RT, FH, 0, FH, FS, f->scratch);
	attention_flash_bwd(k, f->dqkv[0], f->scratch, f->r, f->out[0], f->lse[0], f->qkv, RB, RT,
			    FH, 0, FH, FS);
	a.ldq = a.ldk = a.ldv = (int)C3;
	a.ldo = FC;
	a.q = f->qkv;
	a.k = f->qkv + FC;
	a.v = f->qkv + 2 * FC;
	a.out = f->out[1];
	lo = hi = a;
	hi.q = f->qkv + RH * C3; /* queries [RH, RT) */
	hi.out = f->out[1] + RH * FC;
	hi.q0 = RH; /* the first half all visible */
	attention_flash_fwd_view(k, &lo, f->lse[1], RT, f->scratch);
	attention_flash_fwd_view(k, &hi, f->lse[1] + RH, RT, f->scratch);
	hi.k += RH * C3; /* the second half: the diagonal */
	hi.v += RH * C3;
	hi.q0 = 0;
	hi.out = f->bout + RH * FC;
	attention_flash_fwd_view(k, &hi, f->blse + RH, RT, f->scratch);
	hi.out = f->out[1] + RH * FC;
	attention_lse_merge(k, &hi, f->lse[1] + RH, RT, f->bout + RH * FC, f->blse + RH);
	attention_flash_bwd_view(k, &hi, f->lse[1] + RH, RT, dq + RH * C3, dq + RH * C3 + FC,
				 dq + RH * C3 + 2 * FC, f->scratch, f->r + RH * FC);
	hi.k -= RH * C3;
	hi.v -= RH * C3;
	hi.q0 = RH;
	attention_flash_bwd_view(k, &hi, f->lse[1] + RH, RT, dq + RH * C3, dq + FC, dq + 2 * FC,
				 f->scratch, f->r + RH * FC);
	attention_flash_bwd_view(k, &lo, f->lse[1], RT, dq, dq + FC, dq + 2 * FC, f->scratch, f->r);
}

static void test_flash_ring_blocks(void **state)
{
	struct ring_blocks f;
	size_t no = (size_t)RB * RT * FC, nq = 3 * no, nl = (size_t)RB * FH * RT;
	double *ref = calloc(nq, sizeof *ref);

	(void)state;
	f.qkv = rnd(nq, 43, 2);
	f.r = rnd(no, 44, 1);
	for (int i = 0; i < 2; i++) {
		f.out[i] = calloc(no, sizeof(float));
		f.lse[i] = calloc(nl, sizeof(float));
		f.dqkv[i] = calloc(nq, sizeof(float));
	}
	f.bout = calloc(no, sizeof(float));
	f.blse = calloc(nl, sizeof(float));
	f.scratch = calloc(2 * (size_t)FLASH_ROWS * RT, sizeof(float));
	run_on_device(ring_dev, &f);
	for (size_t i = 0; i < no; i++)
		ref[i] = f.out[0][i];
	fwd_check("ring blocks out", f.out[1], ref, no, 1e-5);
	for (size_t i = 0; i < nl; i++)
		ref[i] = f.lse[0][i];
	fwd_check("ring blocks lse", f.lse[1], ref, nl, 1e-5);
	for (size_t i = 0; i < nq; i++)
		ref[i] = f.dqkv[0][i];
	fwd_check("ring blocks dqkv", f.dqkv[1], ref, nq, 1e-5);
	free(f.qkv), free(f.r), free(f.bout), free(f.blse), free(f.scratch), free(ref);
	for (int i = 0; i < 2; i++)
		free(f.out[i]), free(f.lse[i]), free(f.dqkv[i]);
}

/* A sequence in two chunks: queries [0, 3) against keys [0, 3), then queries [3, 6)
 * against keys [0, 6), give the full attention's rows, and their backward adds up to the
 * full backward (dK and dV summed over the chunks). Tolerance 1e-6: the same sums, only
 * the GEMMs' blocking differs. */
enum { QT = 6, QH = 2, QS = 4, QC = QH * QS };

struct chunks {
	float *qkv, *r, full[QT * QC], part[QT * QC], att[QH * QT * QT], att1[QH * 3 * 3],
		att2[QH * 3 * QT];
	float dfull[QT * 3 * QC], dpart[QT * 3 * QC], scratch[QT * QT];
};

static void chunks_dev(const struct kctx *k, void *ctx)
{
	struct chunks *c = ctx;
	struct attn_view a1 = {.B = 1, .Tq = 3, .Tk = 3, .h1 = QH, .hs = QS};
	struct attn_view a2;

	a1.q = c->qkv;
	a1.k = c->qkv + QC;
	a1.v = c->qkv + 2 * QC;
	a1.ldq = a1.ldk = a1.ldv = 3 * QC;
	a1.out = c->part;
	a1.ldo = QC;
	a1.att = c->att1;
	a2 = a1;

	attention_fwd(k, c->full, c->att, c->qkv, 1, QT, QH, 0, QH, QS);
	attention_bwd(k, c->dfull, c->scratch, c->r, c->att, c->qkv, 1, QT, QH, 0, QH, QS);
	a2.Tq = 3;
	a2.Tk = QT;
	a2.q0 = 3;
	a2.q = c->qkv + 3 * 3 * QC; /* queries of tokens 3.. */
	a2.out = c->part + 3 * QC;
	a2.att = c->att2;
	attention_fwd_view(k, &a1);
	attention_fwd_view(k, &a2);
	attention_bwd_view(k, &a1, c->dpart, c->dpart + QC, c->dpart + 2 * QC, c->scratch, c->r);
	attention_bwd_view(k, &a2, c->dpart + 3 * 3 * QC, c->dpart + QC, c->dpart + 2 * QC,
			   c->scratch, c->r + 3 * QC);
}

static void test_attention_chunks(void **state)
{
	struct chunks c = {0};
	double full[QT * 3 * QC];

	(void)state;
	c.qkv = rnd(QT * 3 * QC, 21, 2);
	c.r = rnd(QT * QC, 22, 1);
	run_on_device(chunks_dev, &c);
	for (int i = 0; i < QT * QC; i++)
		full[i] = c.full[i];
	fwd_check("attention in chunks", c.part, full, QT * QC, 1e-6);
	for (int i = 0; i < QT * 3 * QC; i++)
		full[i] = c.dfull[i];
	fwd_check("attention backward in chunks", c.dpart, full, QT * 3 * QC, 1e-6);
	free(c.qkv), free(c.r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_flash_attention_blocks),
		cmocka_unit_test(test_flash_ring_blocks),
		cmocka_unit_test(test_attention_chunks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
