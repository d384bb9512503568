/* Virtual time: the roofline of docs/formulas.md to the nanosecond, events ordering one stream
 * after another, ops on one stream running back to back, the posted forms of every
 * collective keeping the same data and time as the blocking ones, and the calibrated
 * cost model's GEMM law (tile and wave quantization, stream-K), memory-bound and fused
 * kernels and NCCL-like protocols to the nanosecond. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"

struct probe {
	int64_t t[16][8]; /* [device][call] */
	float data[8][16];
};

/* launch + max(flops / (peak * eff), bytes / hbm_bw), rounded up. */
static int64_t roofline(const struct topo_gpu *g, double flops, double bytes)
{
	double a = flops / (g->peak_flops * g->efficiency) * 1e9, b = bytes / g->hbm_bw * 1e9;

	return g->launch_ns + (int64_t)ceil(a > b ? a : b);
}

static int compute_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;

	if (emu_dev_id(d))
		return 0;
	p->t[0][0] = emu_compute(d, "gemm", 1e12, 1e6);     /* math-bound */
	p->t[0][1] = emu_compute(d, "layernorm", 1e6, 1e9); /* memory-bound */
	p->t[0][2] = emu_compute(d, "empty", 0, 0);         /* the launch alone */
	p->t[0][3] = emu_now(d);
	return 0;
}

static void test_roofline(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 1, 0, 0);
	const struct topo_gpu *g = &emu_cluster_config(c)->topo.gpu;
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, compute_device, &p), 0);
	assert_int_equal(p.t[0][0], roofline(g, 1e12, 1e6));
	assert_int_equal(p.t[0][0], 3000 + 4578755); /* 1e12 / 218.4e12 s, rounded up */
	assert_int_equal(p.t[0][1], roofline(g, 1e6, 1e9));
	assert_int_equal(p.t[0][1], 3000 + 490197); /* 1e9 B / 2.04 TB/s, rounded up */
	assert_int_equal(p.t[0][2], 3000);
	assert_int_equal(p.t[0][3], p.t[0][0] + p.t[0][1] + p.t[0][2]);
	emu_cluster_free(c);
}

/* ------------------------------------------------------------------------------------ */
/* The calibrated cost model (clock.h, docs/formulas.md "How accurate is the clock")     */

static struct emu_cluster *calibrated_on(const char *preset, int nodes, int ndev)
{
	struct emu_config cfg;

	if (emu_config_default(&cfg, preset))
		abort();
	cfg.topo.nodes = nodes;
	cfg.ndev = ndev;
	cfg.dry_run = 1;
	cfg.cost = EMU_COST_CALIBRATED;
	return emu_cluster_new(&cfg);
}

/* nodes x per_node GPUs of preset, every one a member */
static struct emu_cluster *calibrated_grid(const char *preset, int nodes, int per_node)
{
	struct emu_config cfg;

	if (emu_config_default(&cfg, preset))
		abort();
	cfg.topo.nodes = nodes;
	cfg.topo.gpus_per_node = per_node;
	cfg.ndev = nodes * per_node;
	cfg.dry_run = 1;
	cfg.cost = EMU_COST_CALIBRATED;
	return emu_cluster_new(&cfg);
}

/* ndev GPUs of a DGX H100 with NVLink SHARP off (--no-nvls): all-reduces on the ring */
static struct emu_cluster *h100_no_nvls(int ndev)
{
	struct emu_config cfg;

	if (emu_config_default(&cfg, "dgx-h100"))
		abort();
	cfg.ndev = ndev;
	cfg.dry_run = 1;
	cfg.cost = EMU_COST_CALIBRATED;
	cfg.topo.link[TOPO_LINK_INTRA].nvls_eff = 0;
	return emu_cluster_new(&cfg);
}

static struct emu_cluster *calibrated(int nodes, int ndev)
{
	return calibrated_on("dgx-a100", nodes, ndev);
}

/* The 64 x 64 tile's fraction of an SM's rate: 1 / eff linear in the loads a FLOP, through the
 * 128 x 128 tile's 1 and the half tiles' 0.78 at 3/2 of its loads, at twice its loads */
#define TILE64_EFF (1 / (1 + 2 * (1 / 0.78 - 1)))

/* The GEMM law by hand: for each tile, 256 x 128, 128 x 256 and 128 x 128 at an SM's rate,
 * 128 x 64 and 64 x 128 at 0.78 of it and, on an H100, 64 x 64 at TILE64_EFF, the fewer of
 * data-parallel waves (a tile of k + k0 each: 250 on an A100) and stream-K's even share
 * (tiles x k / SMs, plus k0 for each of waves + 1 tiles and 400 for the fix-up), at the
 * ceiling over the SMs; the least over the tiles; and the GEMM kernel's fixed time (2 us on
 * an A100). */
static int64_t gemm_on(const struct topo_gpu *g, int sms, double batch, double m, double n,
		       double k)
{
	static const double tiles[6][3] = {{256, 128, 1},   {128, 256, 1},   {128, 128, 1},
					   {128, 64, 0.78}, {64, 128, 0.78}, {64, 64, TILE64_EFF}};
	double best = 1e300;

	for (int i = 0; i < 5 + !!g->gemm_tile64; i++) {
		double c = ceil(m / tiles[i][0]) * ceil(n / tiles[i][1]) * batch;
		double waves = ceil(c / sms);
		double dp = waves * (k + g->gemm_k0),
		       sk = c * k / sms + (waves + 1) * g->gemm_k0 + 400;
		double t = 2 * tiles[i][0] * tiles[i][1] * (dp < sk ? dp : sk) /
			   (g->peak_flops * g->gemm_ceiling / g->sms * tiles[i][2]);

		best = t < best ? t : best;
	}
	return g->gemm_ns + (int64_t)ceil(best * 1e9);
}

/* The law on all the GPU's SMs */
static int64_t gemm_by_hand(const struct topo_gpu *g, double batch, double m, double n, double k)
{
	return gemm_on(g, g->sms, batch, m, n, k);
}

static int gemm_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;

	if (emu_dev_id(d))
		return 0;
	p->t[0][0] = emu_gemm(d, "square", 1, 8192, 8192, 8192, 0, 0);
	p->t[0][1] = emu_gemm(d, "one wave", 1, 108 * 128, 128, 4096, 0, 0);
	p->t[0][2] = emu_gemm(d, "two waves", 1, 109 * 128, 128, 4096, 0, 0);
	p->t[0][3] = emu_gemm(d, "ragged", 1, 1000, 1000, 1024, 0, 0);
	p->t[0][4] = emu_gemm(d, "batched", 96, 2048, 2048, 128, 0, 0);
	p->t[0][5] = emu_gemm(d, "skinny", 1, 4096, 128, 4096, 0, 1e12); /* memory-bound */
	p->t[0][6] = emu_compute(d, "elementwise", 1e6, 1e9);
	p->t[0][7] = emu_fused(d, "fused", 1e12, 1e9, 1e6);
	p->t[1][0] = emu_gemm(d, "small", 1, 512, 512, 512, 0, 0);
	p->t[1][1] = emu_gemm(d, "split", 1, 512, 512, 65536, 0, 0);
	p->t[1][2] = emu_gemm(d, "batched stream-K", 2, 1024, 1024, 8192, 0, 0);
	return 0;
}

static void test_calibrated_compute(void **state)
{
	struct emu_cluster *c = calibrated(1, 1);
	const struct topo_gpu *g = &emu_cluster_config(c)->topo.gpu;
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, gemm_device, &p), 0);
	assert_int_equal(p.t[0][0], gemm_by_hand(g, 1, 8192, 8192, 8192));
	/* 2048 tiles of 256 x 128 on 108 SMs: 19 waves of 2 x 256 x 128 x (8192 + 250) FLOPs
	 * at 271.1 / 108 TFLOP/s each (stream-K's share would be 2048 x 8192 / 108 + 20 x 250 +
	 * 400, longer) */
	assert_int_equal(p.t[0][0], 2000 + (int64_t)ceil(19 * 2.0 * 256 * 128 * (8192 + 250) /
							 (312e12 * 0.869 / 108) * 1e9));
	/* one wave of 128 x 128 tiles, one a SM; one tile more would take a second wave, twice
	 * the time, where stream-K deals the 109 tiles' k out over the 108 SMs instead: 1.22x */
	assert_int_equal(p.t[0][1], gemm_by_hand(g, 1, 108 * 128, 128, 4096));
	assert_int_equal(p.t[0][1], 2000 + (int64_t)ceil(2.0 * 128 * 128 * (4096 + 250) /
							 (312e12 * 0.869 / 108) * 1e9));
	assert_int_equal(p.t[0][2], 2000 + (int64_t)ceil(2.0 * 128 * 128 *
							 (109 * 4096 / 108.0 + 3 * 250 + 400) /
							 (312e12 * 0.869 / 108) * 1e9));
	/* tile quantization: a 1000 x 1000 output runs the tiles of a 1024 x 1024 one */
	assert_int_equal(p.t[0][3], gemm_by_hand(g, 1, 1000, 1000, 1024));
	assert_int_equal(p.t[0][3], gemm_by_hand(g, 1, 1024, 1024, 1024));
	assert_int_equal(p.t[0][4], gemm_by_hand(g, 96, 2048, 2048, 128));
	/* a small GEMM takes the half tiles: 512^3 is 16 tiles of 128 x 128 or 32 of 128 x 64,
	 * one wave either way, the half one at 0.78 of the rate on half the work */
	assert_int_equal(p.t[1][0], 2000 + (int64_t)ceil(2.0 * 128 * 64 * (512 + 250) /
							 (312e12 * 0.869 / 108 * 0.78) * 1e9));
	/* fewer tiles than SMs and a long k: stream-K shares each of the 16 tiles of 128 x 128
	 * among the 108 SMs (split-K's regime), the fix-up charged once (clock.c), where one
	 * wave of tiles would leave 92 SMs idle */
	assert_int_equal(p.t[1][1], gemm_by_hand(g, 1, 512, 512, 65536));
	assert_int_equal(p.t[1][1], 2000 + (int64_t)ceil(2.0 * 128 * 128 *
							 (16 * 65536 / 108.0 + 2 * 250 + 400) /
							 (312e12 * 0.869 / 108) * 1e9));
	/* a batch of two 1024 x 1024 x 8192: 128 tiles of 128 x 128 dealt as one set, stream-K's
	 * share against two waves */
	assert_int_equal(p.t[1][2], gemm_by_hand(g, 2, 1024, 1024, 8192));
	assert_int_equal(p.t[1][2], 2000 + (int64_t)ceil(2.0 * 128 * 128 *
							 (128 * 8192 / 108.0 + 3 * 250 + 400) /
							 (312e12 * 0.869 / 108) * 1e9));
	/* a memory-bound GEMM and kernel at 0.88 of 2.04 TB/s, the fused one at 0.624 of peak
	 * with its rows' 208 keys; each kernel 2 us more */
	assert_int_equal(p.t[0][5], 2000 + (int64_t)ceil(1e12 / (2.04e12 * 0.88) * 1e9));
	assert_int_equal(p.t[0][6], 2000 + (int64_t)ceil(1e9 / (2.04e12 * 0.88) * 1e9));
	assert_int_equal(p.t[0][7],
			 2000 + (int64_t)ceil((1e12 + 208 * 1e9) / (312e12 * 0.624) * 1e9));
	emu_cluster_free(c);
	/* an H100 has its own: a tile's 120 more of k and a GEMM kernel's fixed 5 us (fitted
	 * to OpenXLA's table of 375 H100 GEMMs, topo.c); a memory kernel keeps 2 us */
	c = calibrated_on("dgx-h100", 1, 1);
	g = &emu_cluster_config(c)->topo.gpu;
	assert_int_equal(emu_cluster_run(c, gemm_device, &p), 0);
	assert_int_equal(p.t[0][0], gemm_by_hand(g, 1, 8192, 8192, 8192));
	assert_int_equal(p.t[0][4], gemm_by_hand(g, 96, 2048, 2048, 128));
	assert_int_equal(p.t[1][2], gemm_by_hand(g, 2, 1024, 1024, 8192));
	/* and deals 64 x 64 tiles too, at 0.639 of the rate: 512^3 is 64 of them, one wave,
	 * 0.61 of the half tiles' time (the A100's law above deals none) */
	assert_true(TILE64_EFF > 0.6393 && TILE64_EFF < 0.6394);
	assert_int_equal(p.t[1][0],
			 5000 + (int64_t)ceil(2.0 * 64 * 64 * (512 + 120) /
					      (989e12 * 0.803 / 132 * TILE64_EFF) * 1e9));
	assert_int_equal(p.t[0][6], 2000 + (int64_t)ceil(1e9 / (3.35e12 * 0.92) * 1e9));
	emu_cluster_free(c);
}

/* A device remembers the GEMM shapes it has timed (clock.c's memo): 20000 shapes, far more
 * than its 256 entries, timed once in order and once in reverse, each time the law's,
 * whatever was evicted or collided in between. */
#define MEMO_SHAPES 20000

struct memo_probe {
	int64_t t[2][MEMO_SHAPES];
};

/* Shape i < 10000: one of 2000 bases of more tiles than SMs, as it is (i % 5 == 0) or with
 * one of its four dimensions moved enough to change its time, so that shapes alike but in
 * one dimension meet in the memo's entries (a memo that forgot to compare one would then
 * return the other's time); from 10000, one shape at 10000 values of k, which the hash
 * spreads least. */
static void memo_shape(int i, double *b, double *m, double *n, double *k)
{
	int base = i / 5, moved = i % 5;

	if (i >= MEMO_SHAPES / 2) {
		*b = 1;
		*m = *n = 4096;
		*k = 64.0 * (i - MEMO_SHAPES / 2 + 1);
		return;
	}
	*b = (1 + base % 3) * (moved == 1 ? 3 : 1);
	*m = 2048 + 128 * (base % 40) + 512 * (moved == 2);
	*n = 2048 + 128 * (base / 40) + 512 * (moved == 3);
	*k = 1024 + 64 * (base % 7) + 512 * (moved == 4);
}

static int memo_device(struct emu_dev *d, void *arg)
{
	struct memo_probe *p = arg;

	if (emu_dev_id(d))
		return 0;
	for (int pass = 0; pass < 2; pass++)
		for (int j = 0; j < MEMO_SHAPES; j++) {
			int i = pass ? MEMO_SHAPES - 1 - j : j;
			double b, m, n, k;

			memo_shape(i, &b, &m, &n, &k);
			p->t[pass][i] = emu_gemm(d, "shape", b, m, n, k, 0, 0);
		}
	return 0;
}

static void test_gemm_memo(void **state)
{
	struct emu_cluster *c = calibrated(1, 1);
	const struct topo_gpu *g = &emu_cluster_config(c)->topo.gpu;
	struct memo_probe *p = calloc(1, sizeof *p);

	(void)state;
	assert_non_null(p);
	assert_int_equal(emu_cluster_run(c, memo_device, p), 0);
	for (int i = 0; i < MEMO_SHAPES; i++) {
		double b, m, n, k;

		memo_shape(i, &b, &m, &n, &k);
		assert_int_equal(p->t[0][i], gemm_by_hand(g, b, m, n, k));
		assert_int_equal(p->t[1][i], p->t[0][i]);
	}
	free(p);
	emu_cluster_free(c);
}

/* Under the roofline a GEMM and a fused kernel are emu_compute's roofline. */
static int roofline_kinds(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;

	if (emu_dev_id(d))
		return 0;
	p->t[0][0] = emu_gemm(d, "gemm", 4, 1000, 3000, 500, 7e6, 3e8);
	p->t[0][1] =
		emu_fused(d, "fused", 1e12, 1e9, 1e6); /* (its rows' cost is not the roofline's) */
	return 0;
}

/* flash-attention's causal benchmark (16k tokens of hidden 2048, head dim 128) as pemu
 * counts it (blocks of 64 queries, the diagonal's whole: s (s + 64) / 2 pairs a head), its
 * forward (passes 1) or forward and backward (2) */
struct attn_probe {
	double s;
	int passes;
	int64_t t;
};

static int attn_device(struct emu_dev *d, void *arg)
{
	struct attn_probe *p = arg;
	double s = p->s, heads = 16384 / s * 16, qk = s * (s + 64) / 2;

	if (emu_dev_id(d))
		return 0;
	p->t = emu_fused(d, "attn", heads * qk * (4 * 128 + 5), heads * s * (4 * 128 + 5), 0);
	if (p->passes == 2)
		p->t += emu_fused(d, "attn.bwd", heads * qk * (10 * 128 + 6),
				  heads * s * (10 * 128 + 6), 0);
	return 0;
}

/* A fused attention kernel costs (flops + fused_keys key_flops) / (peak fused_eff), and so
 * reaches fused_eff s / (s + 64 + 2 fused_keys) of peak on a causal sequence of s
 * (topo.c): the constants give back the series they were fitted to, FlashAttention-2's
 * forward and backward on A100 and cuDNN's forward on H100, 512 to 16k tokens, within
 * 2.6% (flash-attention's assets; bench/fidelity). */
static void test_fused_attention(void **state)
{
	static const struct {
		const char *preset;
		int passes;
		double eff, keys, tflops[6];
	} cases[] = {{"dgx-a100", 2, 0.624, 208, {99, 133, 155, 173, 182, 189}},
		     {"dgx-h100", 1, 0.573, 154, {315, 410, 484, 518, 529, 539}}};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct emu_cluster *c = calibrated_on(cases[i].preset, 1, 1);
		double peak = emu_cluster_config(c)->topo.gpu.peak_flops;

		for (int j = 0; j < 6; j++) {
			struct attn_probe p = {512 << j, cases[i].passes, 0};
			double s = p.s, heads = 16384 / s * 16, qk = s * (s + 64) / 2;
			double rate, fwd = heads * (qk + cases[i].keys * s) * (4 * 128 + 5);
			double bwd = heads * (qk + cases[i].keys * s) * (10 * 128 + 6);
			int64_t want = 2000 + (int64_t)ceil(fwd / (peak * cases[i].eff) * 1e9);

			if (p.passes == 2)
				want += 2000 + (int64_t)ceil(bwd / (peak * cases[i].eff) * 1e9);
			assert_int_equal(emu_cluster_run(c, attn_device, &p), 0);
			assert_int_equal(p.t, want);
			rate = (p.passes == 2 ? 3.5 : 1) * 4 * heads * s * s * 128 / 2 /
			       (p.t * 1e-9);
			if (fabs(rate / (cases[i].tflops[j] * 1e12) - 1) > 0.026)
				fail_msg("%s at %g: %.1f TFLOP/s, measured %g", cases[i].preset, s,
					 rate / 1e12, cases[i].tflops[j]);
		}
		emu_cluster_free(c);
	}
}

static void test_roofline_kinds(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 1, 1, 0);
	const struct topo_gpu *g = &emu_cluster_config(c)->topo.gpu;
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, roofline_kinds, &p), 0);
	assert_int_equal(p.t[0][0], roofline(g, 2.0 * 1000 * 3000 * 500 * 4 + 7e6, 3e8));
	assert_int_equal(p.t[0][1], roofline(g, 1e12, 1e6));
	emu_cluster_free(c);
}

/* Collectives under the calibrated model (emu/topo.c): base 8.1 us + the faster of LL (0.633
 * us a step, 20 GB/s) and, up to 8 MiB, LL128 (4.1 us, 0.9375 of 300 GB/s) or beyond it
 * Simple (10.8 us, 0.78 of 300 GB/s), on the bus bytes 2 (n - 1) / n S of an all-reduce
 * among 8 GPUs of a DGX A100; on a DGX H100 the ring (LL128 or Simple, as NCCL's model
 * picks it: test_nvlink4_ramp; among fewer than 8 times its loop, test_ring_loop) or, among
 * 6 or more, NVLink SHARP, 55 us and S / (0.598 of 450 GB/s) whatever n, whichever costs
 * less (test_nvls_where_cheaper); across nodes NCCL's rings, and for
 * all-reduce its tree where that costs less (test_across_nodes). */
/* 8 B, 1 MiB, 8 MiB, 8 MiB + 4 B, 1 GiB of floats */
static const size_t ar_count[5] = {2, 262144, 2097152, 2097153, 268435456};

static int allreduce_sizes(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	int rc;

	for (int i = 0; i < 5; i++) {
		int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);

		if ((rc = coll_all_reduce(d, emu_world(d), NULL, NULL, ar_count[i], COLL_SUM)))
			return rc;
		p->t[emu_dev_id(d)][i] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	}
	return 0;
}

/* NVLink4's ring loop (emu/topo.c: a loop of a ring's steps costs 0.32 of a step more
 * than the chunks it moves): among fewer than 8 GPUs the bulk protocol's bus bytes are
 * scaled by (T + 0.32) / T over (T8 + 0.32) / T8, T the steps, T8 among 8 (ref) */
static double ring_loop_h100(int steps, int ref)
{
	return steps >= ref ? 1 : (steps + 0.32) / steps / ((ref + 0.32) / ref);
}

static int64_t protocols_by_hand(double S)
{
	double bus = 14 / 8.0 * S;
	double ll = 14 * 633 + ceil(bus / 20e9 * 1e9);
	double bulk = S <= 8 << 20 ? 14 * 4100 + ceil(bus / 281.25e9 * 1e9)
				   : 14 * 10800 + ceil(bus / 234e9 * 1e9);

	return 8100 + (int64_t)(ll < bulk ? ll : bulk);
}

/* Three all-reduces among 8 posted, a memory-bound kernel beside each, then the wait:
 * 64 MiB beside a longer kernel, 64 KiB (2 CTAs) beside one, 64 MiB beside a shorter one.
 * t[0][i] the cursor before, t[1][i] the kernel, t[2][i] the cursor after. */
static int share_device(struct emu_dev *d, void *arg)
{
	static const size_t count[3] = {16u << 20, 16u << 10, 16u << 20};
	static const double bytes[3] = {2e10, 2e10, 1e7};
	struct probe *p = arg;

	for (int i = 0; i < 3; i++) {
		struct coll_req *r;
		int64_t t0 = emu_now(d), x;
		int rc = coll_iall_reduce(d, emu_world(d), NULL, NULL, count[i], COLL_SUM, &r);

		if (rc)
			return rc;
		x = emu_compute(d, "beside", 0, bytes[i]);
		if ((rc = coll_wait(d, r)))
			return rc;
		if (emu_dev_id(d) == 0) {
			p->t[0][i] = t0;
			p->t[1][i] = x;
			p->t[2][i] = emu_now(d);
		}
	}
	return 0;
}

/* The SM share (coll.h, emu/topo.c): compute beside a collective of the calibrated model
 * runs on the SMs its CTAs leave, 108 - 24 of an A100 for NVLink3's ring, 108 - 2 for a
 * 64 KiB message (2 channels of 32 KiB): the overlapped part takes 108 / 84 (108 / 106)
 * as long, charged at the wait; a wait the collective outlasts absorbs it. Under the
 * roofline, nothing. */
static void test_sm_share(void **state)
{
	struct emu_cluster *c = calibrated(1, 8);
	int64_t ar64m = protocols_by_hand(64 << 20), ar64k = protocols_by_hand(64 << 10);
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, share_device, &p), 0);
	assert_true(p.t[1][0] > ar64m && p.t[1][1] > ar64k && p.t[1][2] < ar64m / 2);
	assert_int_equal(p.t[2][0] - p.t[0][0],
			 p.t[1][0] + (int64_t)ceil(ar64m * 24.0 / (108 - 24)));
	assert_int_equal(p.t[2][1] - p.t[0][1], p.t[1][1] + (int64_t)ceil(ar64k * 2.0 / (108 - 2)));
	assert_int_equal(p.t[2][2] - p.t[0][2], ar64m);
	/* the stretch is compute: the device was busy through it */
	assert_int_equal(emu_compute_ns(emu_cluster_dev(c, 0)),
			 p.t[1][0] + p.t[1][1] + p.t[1][2] +
				 (int64_t)ceil(ar64m * 24.0 / (108 - 24)) +
				 (int64_t)ceil(ar64k * 2.0 / (108 - 2)) +
				 (int64_t)ceil(p.t[1][2] * 24.0 / (108 - 24)));
	emu_cluster_free(c);

	c = test_cluster("dgx-a100", 1, 8, 1, 0);
	assert_int_equal(emu_cluster_run(c, share_device, &p), 0);
	assert_int_equal(p.t[2][0] - p.t[0][0], p.t[1][0]);
	assert_int_equal(emu_compute_ns(emu_cluster_dev(c, 0)), p.t[1][0] + p.t[1][1] + p.t[1][2]);
	emu_cluster_free(c);
}

/* Under an SM margin of 16 (Transformer Engine's pipelined GEMMs): a GEMM's tiles go to
 * the 92 SMs of an A100 left, each at its usual rate; a collective posted under it runs
 * on the 16 and stretches nothing beside it; the margin given back, the full law and the
 * share again. [1] under the margin, [0] not, [2] not but the collective on 4 SMs
 * (coll_set_ctas): t[0] the GEMM; t[1] the cursor's move over an all-reduce of 64 MiB
 * beside a longer kernel t[2]; t[3] the margin set before. */
static int margin_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;

	for (int on = 2; on >= 0; on--) {
		struct coll_req *r;
		int64_t t0, x, g;
		int rc, was = emu_set_sm_margin(d, on == 1 ? 16 : 0);

		coll_set_ctas(d, on == 2 ? 4 : 0); /* (2: no margin, the collective on 4 SMs) */
		t0 = emu_now(d);
		if ((rc = coll_iall_reduce(d, emu_world(d), NULL, NULL, 16u << 20, COLL_SUM, &r)))
			return rc;
		x = emu_compute(d, "beside", 0, 2e10);
		if ((rc = coll_wait(d, r)))
			return rc;
		t0 = emu_now(d) - t0;
		g = emu_gemm(d, "gemm", 1, 8192, 8192, 8192, 0, 0);
		if (emu_dev_id(d) == 0) {
			p->t[0][on] = g;
			p->t[1][on] = t0;
			p->t[2][on] = x;
			p->t[3][on] = was;
		}
	}
	return 0;
}

static void test_sm_margin(void **state)
{
	struct emu_cluster *c = calibrated(1, 8);
	const struct topo_gpu *g = &emu_cluster_config(c)->topo.gpu;
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, margin_device, &p), 0);
	assert_int_equal(p.t[3][1], 0); /* each call returns the margin before it */
	assert_int_equal(p.t[3][0], 16);
	/* a collective on 4 SMs (coll_set_ctas) stretches what it overlaps by 4 / 104 */
	assert_int_equal(p.t[1][2],
			 p.t[2][2] + (int64_t)ceil(protocols_by_hand(64 << 20) * 4.0 / (108 - 4)));
	assert_int_equal(p.t[0][1], gemm_on(g, 108 - 16, 1, 8192, 8192, 8192));
	assert_int_equal(p.t[0][0], gemm_by_hand(g, 1, 8192, 8192, 8192));
	assert_true(p.t[0][1] > p.t[0][0]);
	assert_int_equal(p.t[1][1], p.t[2][1]);
	assert_int_equal(p.t[1][0], p.t[2][0] + (int64_t)ceil(protocols_by_hand(64 << 20) * 24.0 /
							      (108 - 24)));
	emu_cluster_free(c);
}

static void test_calibrated_collectives(void **state)
{
	struct emu_cluster *c = calibrated(1, 8);
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, allreduce_sizes, &p), 0);
	assert_int_equal(p.t[3][0], protocols_by_hand(8));
	assert_int_equal(p.t[3][0], 16962 + 1); /* 17 us: NCCL's 8-GPU latency under MPI */
	assert_int_equal(p.t[3][1], protocols_by_hand(1048576));
	assert_int_equal(p.t[3][2], protocols_by_hand(8 << 20));
	assert_int_equal(p.t[3][3], protocols_by_hand((8 << 20) + 4));
	assert_true(p.t[3][3] > p.t[3][2] + 100000); /* NCCL's switch to Simple: 118 -> 223 us */
	assert_int_equal(p.t[3][4], protocols_by_hand(1073741824.0));
	emu_cluster_free(c);

	/* A DGX H100, for 8 GPUs as for 4: the ring at 1 and 8 MiB; at 1 GiB NVLink SHARP
	 * among 8, the ring among 4 (test_nvls_where_cheaper). The ring's 1 MiB goes by
	 * LL128, 1.3 us a step at 0.69 x 450 = 310.5 GB/s: NCCL's model (14 + 1.9 s us + X /
	 * (0.92 x 355.5 GB/s) against Simple's 8.4 + 3.4 s + X / 355.5, s steps, X bus bytes)
	 * picks it, 46.2 against 61.2 us for 8 GPUs (s = 14), 30.2 against 33.2 for 4 (s = 6);
	 * and it beats LL (0.633 us a step, 44 GB/s: 50.6 and 39.5 us). Among 4 the ring's
	 * loop (emu/topo.c) scales the bytes by ring_loop_h100(6, 14) = 1.029795. 8: 8100 +
	 * 14 x 1300 + 7/4 MiB / 310.5 GB/s = 8100 + 18200 + 5910 = 32210 ns; 4: 8100 + 6 x
	 * 1300 + 1.029795 x 3/2 MiB / 310.5 GB/s = 8100 + 7800 + 5217 = 21117 ns. 8 MiB by
	 * LL128 too (NCCL's model: 63.9 against 64.2 us for 4), 73579 and 57633 ns, under
	 * NVLS's 8100 + 55000 + 31173 = 94273. 1 GiB among 4 by Simple: 8100 + 6 x 3400 +
	 * 1.029795 x 3/2 GiB / 355.5 GB/s = 4694045 ns, 16% over NVLS's 4053222. */
	for (int n = 4; n <= 8; n += 4) {
		double loop = ring_loop_h100(2 * (n - 1), 14);

		c = calibrated_on("dgx-h100", 1, n);
		assert_int_equal(emu_cluster_run(c, allreduce_sizes, &p), 0);
		assert_int_equal(p.t[1][1], 8100 + 2 * (n - 1) * 1300 +
						    (int64_t)ceil(2.0 * (n - 1) / n * 1048576 *
								  loop / 310.5e9 * 1e9));
		assert_int_equal(p.t[1][1], n == 8 ? 32210 : 21117);
		assert_int_equal(p.t[1][2], 8100 + 2 * (n - 1) * 1300 +
						    (int64_t)ceil(2.0 * (n - 1) / n * 8388608 *
								  loop / 310.5e9 * 1e9));
		assert_int_equal(p.t[1][2], n == 8 ? 73579 : 57633);
		if (n == 8)
			assert_int_equal(p.t[1][4],
					 8100 + 55000 +
						 (int64_t)ceil(1073741824.0 / 269.1e9 * 1e9));
		else
			assert_int_equal(p.t[1][4], 8100 + 6 * 3400 +
							    (int64_t)ceil(1.5 * 1073741824.0 *
									  loop / 355.5e9 * 1e9));
		assert_int_equal(p.t[1][4], n == 8 ? 4053222 : 4694045);
		emu_cluster_free(c);
	}

	/* 2 nodes of 8: 1 GiB by Simple on the ring (its tree's 2 S at 0.92 of the bus
	 * bandwidth costs 1.65 ms more), 2 x 14 NVLink steps and 2 InfiniBand ones, 7.5 us of
	 * PXN, and the bus bytes 2 x 15/16 S at the node's 8 NICs (8 x 0.89 x 25 GB/s, slower
	 * than NVLink's 234); 8 B by LL, the tree's 2 x 7 NVLink steps and 2 ceil(log2 2)
	 * InfiniBand ones, at NVLink3's LL 20 GB/s */
	c = calibrated(2, 16);
	assert_int_equal(emu_cluster_run(c, allreduce_sizes, &p), 0);
	assert_int_equal(p.t[9][4], 8100 + 28 * 10800 + 2 * 6800 + 7500 +
					    (int64_t)ceil(30 / 16.0 * 1073741824.0 / 178e9 * 1e9));
	assert_int_equal(p.t[9][0], 8100 + 14 * 633 + 2 * 6800 + 7500 +
					    (int64_t)ceil(30 / 16.0 * 8 / 20e9 * 1e9));
	/* and each member is one of the 8 rings' way out of its node: 1/8 of its bus bytes
	 * go over InfiniBand, the rest over NVLink */
	{
		uint64_t inter = 0, intra = 0;

		for (int i = 0; i < 5; i++) {
			uint64_t bus = 2 * 15 * (uint64_t)ar_count[i] * 4 / 16;

			inter += bus / 8;
			intra += bus - bus / 8;
		}
		assert_int_equal(coll_link_bytes(emu_cluster_dev(c, 9), TOPO_LINK_INTER), inter);
		assert_int_equal(coll_link_bytes(emu_cluster_dev(c, 9), TOPO_LINK_INTRA), intra);
	}
	emu_cluster_free(c);
}

/* NVLink4's bus bandwidth ramps with the message (emu/topo.c, coll_time.c): among 8 H100
 * with NVLink SHARP off, LL128 (1.3 us a step, 0.69 x 450 = 310.5 GB/s) while NCCL's own
 * model prefers it to Simple (3.4 us a step, 0.79 x 450 = 355.5 GB/s), Simple beyond. NCCL's
 * model, s steps and X bus bytes: LL128 14 + 1.9 s us + X / (0.92 x 355.5 GB/s), Simple
 * 8.4 + 3.4 s + X / 355.5 GB/s; it switches at 34 MiB for all-reduce (s = 14), at 22 MiB
 * for all-gather (s = 7):
 *   all-reduce 32 MiB, X = 7/4 S = 58720256: NCCL 220.14 against 221.18 us, LL128:
 *     8100 + 14 x 1300 + 58720256 / 310.5 GB/s = 8100 + 18200 + 189116 = 215416 ns
 *   all-reduce 64 MiB, X = 117440512: NCCL 399.68 against 386.35 us, Simple:
 *     8100 + 14 x 3400 + 117440512 / 355.5 GB/s = 8100 + 47600 + 330354 = 386054 ns
 *   all-gather 16 MiB in all, X = 7/8 S = 14680064: NCCL 72.19 against 73.50, LL128:
 *     8100 + 7 x 1300 + 14680064 / 310.5 GB/s = 8100 + 9100 + 47279 = 64479 ns
 *   all-gather 32 MiB, X = 29360128: NCCL 117.07 against 114.79, Simple:
 *     8100 + 7 x 3400 + 29360128 / 355.5 GB/s = 8100 + 23800 + 82589 = 114489 ns
 * and the bus bandwidth X / t rises, 57 GB/s at 1 MiB (32210 ns above), 273 at 32 MiB,
 * 304 at 64 MiB, toward Simple's 355.5. */
static int ramp_device(struct emu_dev *d, void *arg)
{
	static const size_t ar[3] = {262144, 8u << 20, 16u << 20}; /* 1, 32, 64 MiB */
	static const size_t ag[2] = {512u << 10, 1u << 20};        /* 16, 32 MiB in all */
	struct probe *p = arg;
	int rc;

	for (int i = 0; i < 5; i++) {
		int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);

		rc = i < 3 ? coll_all_reduce(d, emu_world(d), NULL, NULL, ar[i], COLL_SUM)
			   : coll_all_gather(d, emu_world(d), NULL, NULL, ag[i - 3]);
		if (rc)
			return rc;
		p->t[emu_dev_id(d)][i] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	}
	return 0;
}

static void test_nvlink4_ramp(void **state)
{
	struct emu_cluster *c = h100_no_nvls(8);
	struct probe p;
	double bus[3];

	(void)state;
	assert_int_equal(emu_cluster_run(c, ramp_device, &p), 0);
	assert_int_equal(p.t[0][0], 32210);
	assert_int_equal(p.t[0][1], 215416);
	assert_int_equal(p.t[0][2], 386054);
	assert_int_equal(p.t[0][3], 64479);
	assert_int_equal(p.t[0][4], 114489);
	for (int i = 0; i < 3; i++) /* 7/4 of 1, 32, 64 MiB over the time: GB/s */
		bus[i] = 1.75 * (double)(i == 0 ? 1 : 32 * i) * 1048576 / (double)p.t[0][i];
	assert_true(bus[0] < bus[1] && bus[1] < bus[2] && bus[2] < 355.5);
	/* the switch is NCCL's: at 32 MiB all-reduce goes by LL128, all-gather by Simple */
	assert_int_equal(p.t[0][1], 8100 + 14 * 1300 + (int64_t)ceil(58720256 / 310.5));
	assert_int_equal(p.t[0][4], 8100 + 7 * 3400 + (int64_t)ceil(29360128 / 355.5));
	emu_cluster_free(c);
}

/* NVLink SHARP only where it costs less than the ring (coll_time.c): NCCL picks its
 * algorithm, as its protocol, by the least predicted time. Among 8 H100 the ring goes by
 * LL128 up to 34 MiB (test_nvlink4_ramp), 8100 + 14 x 1300 + 7/4 S / 310.5 GB/s, and
 * NVLS costs 8100 + 55000 + S / 269.1 GB/s: equal at 4791724 floats (134326 ns either
 * way), NVLS the cheaper from 4791725 floats (18.28 MiB) up:
 *   2 MiB   ring 38120 ns,  NVLS 70894 (the size rule NVLS from 2 MiB charged this)
 *   16 MiB  ring 120858,    NVLS 125446
 *   32 MiB  ring 215416,    NVLS 187792
 * Each size by hand, both ways: a rule that charged NVLS by size, or never, fails; and
 * among fewer than 6 GPUs not at all (below). */
static const size_t nvls_count[5] = {524288, 4194304, 4791724, 4791725, 8388608};

static int nvls_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	int rc;

	for (int i = 0; i < 5; i++) {
		int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);

		if ((rc = coll_all_reduce(d, emu_world(d), NULL, NULL, nvls_count[i], COLL_SUM)))
			return rc;
		p->t[emu_dev_id(d)][i] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	}
	return 0;
}

static int nvls4_device(struct emu_dev *d, void *arg)
{
	static const size_t count[2] = {16u << 20, 32u << 20}; /* 64, 128 MiB */
	struct probe *p = arg;
	int rc;

	for (int i = 0; i < 2; i++) {
		int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);

		if ((rc = coll_all_reduce(d, emu_world(d), NULL, NULL, count[i], COLL_SUM)))
			return rc;
		p->t[emu_dev_id(d)][i] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	}
	return 0;
}

static int64_t nvls_by_hand(double S)
{
	return 8100 + 55000 + (int64_t)ceil(S / 269.1e9 * 1e9);
}

static void test_nvls_where_cheaper(void **state)
{
	struct emu_cluster *c = calibrated_on("dgx-h100", 1, 8);
	struct probe p;
	int64_t ring[5], nvls[5];

	(void)state;
	assert_int_equal(emu_cluster_run(c, nvls_device, &p), 0);
	for (int i = 0; i < 5; i++) {
		double S = 4.0 * (double)nvls_count[i];

		ring[i] = 8100 + 14 * 1300 + (int64_t)ceil(1.75 * S / 310.5e9 * 1e9);
		nvls[i] = nvls_by_hand(S);
		assert_int_equal(p.t[0][i], ring[i] < nvls[i] + 1 ? ring[i] : nvls[i]);
	}
	/* the times of the comment, each the cheaper of the two */
	assert_int_equal(p.t[0][0], 38120); /* 2 MiB: the ring, not NVLS's 70894 */
	assert_int_equal(nvls[0], 70894);
	assert_int_equal(p.t[0][1], 120858); /* 16 MiB: the ring, not 125446 */
	assert_int_equal(nvls[1], 125446);
	assert_int_equal(p.t[0][2], 134326); /* the crossing */
	assert_int_equal(ring[2], nvls[2]);
	assert_int_equal(p.t[0][3], 134326); /* one float more: NVLS, the ring 134327 */
	assert_int_equal(ring[3], 134327);
	assert_int_equal(p.t[0][4], 187792); /* 32 MiB: NVLS, not the ring's 215416 */
	assert_int_equal(ring[4], 215416);
	emu_cluster_free(c);

	/* Among 4 and 5 GPUs the ring whatever its time (NCCL's model does not pick NVLS for
	 * such messages there: coll_time.c, NCCL_NVLS_MIN_GPUS), among 6 NVLS where cheaper.
	 * 128 MiB by Simple: among 4, 6 steps and 3/2 S scaled by the ring's loop, 1.029795:
	 * 8100 + 20400 + 583194 = 611694 ns, though NVLS's law gives 561866; among 5, 8 steps
	 * and 8/5 S, 1.016760: 8100 + 27200 + 614199 = 649499; among 6 NVLS's 561866, the
	 * ring (--no-nvls) 8100 + 34000 + 634869 = 676969 (10 steps, 5/3 S, 1.008939). */
	for (int n = 4; n <= 6; n++) {
		int s = 2 * (n - 1);
		int64_t ring128 = 8100 + s * 3400 +
				  (int64_t)ceil((double)s / n * 134217728 * ring_loop_h100(s, 14) /
						355.5e9 * 1e9);

		c = calibrated_on("dgx-h100", 1, n);
		assert_int_equal(emu_cluster_run(c, nvls4_device, &p), 0);
		assert_int_equal(p.t[0][1], n == 4 ? 611694 : n == 5 ? 649499 : 561866);
		assert_int_equal(p.t[0][1], n < 6 ? ring128 : nvls_by_hand(134217728));
		emu_cluster_free(c);
		c = h100_no_nvls(n);
		assert_int_equal(emu_cluster_run(c, nvls4_device, &p), 0);
		assert_int_equal(p.t[0][1], ring128);
		assert_true(p.t[0][1] > 561866); /* NVLS's law the cheaper: among 4 and 5 not run */
		emu_cluster_free(c);
	}
}

/* A ring's loop inside a node (emu/topo.c, coll_time.c): among fewer than 8 H100s an
 * all-gather's and a reduce-scatter's bus bytes take (T + 0.32) / T over (7.32 / 7) of
 * the link's time, T = n - 1; NVLink3 has none (unmeasured). 1 GiB in all, by Simple:
 * among 2, 8100 + 3400 + 1.262295 x 1/2 GiB / 355.5 GB/s = 1917800 ns; among 4, 8100 +
 * 10200 + 1.058288 x 3/4 GiB / 355.5 = 2415617; among 8 2674725. t[.][2]: an all-to-all
 * of 1 GiB in all (NCCL's sends, no ring: test_a2a_in_node). */
static int loop_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	size_t count =
		(256u << 20) / (size_t)emu_group_size(emu_world(d)); /* 1 GiB of floats in all */

	for (int i = 0; i < 3; i++) {
		int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);
		int rc = i == 0 ? coll_all_gather(d, emu_world(d), NULL, NULL, count)
			 : i == 1
				 ? coll_reduce_scatter(d, emu_world(d), NULL, NULL, count, COLL_SUM)
				 : coll_all_to_all(d, emu_world(d), NULL, NULL, count);

		if (rc)
			return rc;
		p->t[emu_dev_id(d)][i] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	}
	return 0;
}

static int small_gather_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);
	int rc = coll_all_gather(d, emu_world(d), NULL, NULL, 8192); /* 32 KiB a member */

	p->t[emu_dev_id(d)][0] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	return rc;
}

static void test_ring_loop(void **state)
{
	static const int64_t ring[3] = {1917800, 2415617, 2674725};
	struct emu_cluster *c;
	struct probe p;

	(void)state;
	for (int i = 0, n = 2; n <= 8; i++, n *= 2) {
		double bus = (n - 1.0) / n * 1073741824.0;

		c = calibrated_on("dgx-h100", 1, n);
		assert_int_equal(emu_cluster_run(c, loop_device, &p), 0);
		assert_int_equal(p.t[0][0], 8100 + (n - 1) * 3400 +
						    (int64_t)ceil(bus * ring_loop_h100(n - 1, 7) /
								  355.5e9 * 1e9));
		assert_int_equal(p.t[0][0], ring[i]);
		assert_int_equal(p.t[0][1], p.t[0][0]);
		emu_cluster_free(c);
	}
	/* 16 GPUs in a node (--gpus-per-node 16): no fewer than 8, unscaled */
	c = calibrated_grid("dgx-h100", 1, 16);
	assert_int_equal(emu_cluster_run(c, loop_device, &p), 0);
	assert_int_equal(p.t[0][0],
			 8100 + 15 * 3400 +
				 (int64_t)ceil(15 / 16.0 * 1073741824.0 / 355.5e9 * 1e9));
	emu_cluster_free(c);
	/* LL unscaled: an all-gather of 64 KiB in all among 2 goes by LL, 8100 + 633 + 32 KiB
	 * / 44 GB/s = 9478 ns (scaled, 9673; Simple 11617) */
	c = calibrated_on("dgx-h100", 1, 2);
	assert_int_equal(emu_cluster_run(c, small_gather_device, &p), 0);
	assert_int_equal(p.t[0][0], 8100 + 633 + (int64_t)ceil(32768 / 44e9 * 1e9));
	assert_int_equal(p.t[0][0], 9478);
	emu_cluster_free(c);
	c = calibrated(1, 4); /* a DGX A100's NVLink3: 3 steps of 10.8 us at 234 GB/s */
	assert_int_equal(emu_cluster_run(c, loop_device, &p), 0);
	assert_int_equal(p.t[0][0],
			 8100 + 3 * 10800 + (int64_t)ceil(0.75 * 1073741824.0 / 234e9 * 1e9));
	assert_int_equal(p.t[0][2], p.t[0][0]); /* its all-to-all as its ring: unmeasured */
	emu_cluster_free(c);
}

/* Each device sends S bytes to the next and receives from the previous on the
 * communicator of every device (nccl-tests' sendrecv), for S of 64 MiB, 256 MiB and 1
 * GiB, or the probe's data[0][1] bytes alone (then t[.][0]); on a communicator of the
 * probe's data[0][0] ranks, 0: none, the link's rate. t[.][k] when its receive is in,
 * t[.][3 + k] when its (eager) send is out. */
static const double sr_bytes[3] = {67108864.0, 268435456.0, 1073741824.0};

static int sendrecv_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	int n = emu_group_size(emu_world(d)), i = emu_dev_id(d), devs[16];

	for (int j = 0; j < n; j++)
		devs[j] = j;
	if (p->data[0][0] > 0)
		coll_set_p2p_comm(d, coll_comm_of(d, devs, (int)p->data[0][0]));
	for (int k = 0; k < (p->data[0][1] > 0 ? 1 : 3); k++) {
		int64_t t0 = emu_stream_time(d, EMU_STREAM_COMPUTE);
		struct coll_req *rq, *sq;
		size_t count = (size_t)((p->data[0][1] > 0 ? p->data[0][1] : sr_bytes[k]) / 4);
		int rc;

		if ((rc = coll_irecv(d, (i + n - 1) % n, NULL, count, &rq)) ||
		    (rc = coll_isend(d, (i + 1) % n, NULL, count, &sq)) || (rc = coll_wait(d, sq)))
			return rc;
		p->t[i][3 + k] = emu_stream_time(d, EMU_STREAM_COMPUTE) - t0; /* its send's */
		if ((rc = coll_wait(d, rq)))
			return rc;
		p->t[i][k] = emu_stream_time(d, EMU_STREAM_COMPUTE) - t0;
	}
	return 0;
}

/* On the communicator of 8, 64 MiB a message, each send waiting for its receiver
 * (coll_set_rendezvous): device 0 sends to devices 2 and 3 as one group
 * (coll_set_group), device 1 to 2, and device 2 receives from 0 and from 1 as one group;
 * t[d][0] when device d's sends are out and its receives in. */
static int grouped_sends_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	int id = emu_dev_id(d), devs[8] = {0, 1, 2, 3, 4, 5, 6, 7}, rc = 0;
	struct coll_req *r[2] = {NULL, NULL};

	coll_set_p2p_comm(d, coll_comm_of(d, devs, 8));
	coll_set_rendezvous(d, 1);
	coll_set_group(d, id == 0 || id == 2);
	if (id == 0 && !(rc = coll_isend(d, 2, NULL, 16 << 20, &r[0])))
		rc = coll_isend(d, 3, NULL, 16 << 20, &r[1]);
	if (id == 1)
		rc = coll_isend(d, 2, NULL, 16 << 20, &r[0]);
	if (id == 2 && !(rc = coll_irecv(d, 0, NULL, 16 << 20, &r[0])))
		rc = coll_irecv(d, 1, NULL, 16 << 20, &r[1]);
	if (id == 3)
		rc = coll_irecv(d, 0, NULL, 16 << 20, &r[0]);
	coll_set_group(d, 0);
	for (int k = 0; k < 2 && !rc; k++)
		rc = r[k] ? coll_wait(d, r[k]) : 0;
	p->t[id][0] = emu_stream_time(d, EMU_STREAM_COMPUTE);
	return rc;
}

/* NCCL's sends at once on an H100 node's NVLink, by Simple (coll_time.c, p2p_peers_ns): a
 * message of b bytes a peer on ch channels of 21 GB/s each, out bytes in all through the
 * link at 355.5 GB/s, every channel at its share of the slower; a channel's part takes a
 * chunk more (or the part, where smaller) at the channel's rate; 8100 + 3400 ns fixed. */
static int64_t nvl_sends_ns(uint64_t b, int ch, uint64_t out, uint64_t chunk)
{
	uint64_t part = b / (uint64_t)ch + (b % (uint64_t)ch != 0);
	int64_t by_ch = (int64_t)ceil((double)b / (ch * 21e9) * 1e9);
	int64_t by_link = (int64_t)ceil((double)out / 355.5e9 * 1e9);
	int64_t body = by_ch > by_link ? by_ch : by_link;

	return 11500 + body + (int64_t)((uint64_t)body * (chunk < part ? chunk : part) / part);
}

/* NCCL's split of a send over its channels (coll_p2p_channels, enqueue.cc's
 * addP2pToPlan): in a node 32 p2p channels shared by the communicator's ranks, one a 64
 * KiB part at most, doubled while a part passes 16 MiB (32 NVLink chunks of 512 KiB); over
 * nodes parts of 64 to 128 KiB (the network's chunk) and a peer's channels ceil(the NIC's
 * GB/s / 14), to a power of 2: 4 for 400 Gb/s, 2 for 200, 1 for 100, halved while that
 * many for every 8 ranks exceeds 32 (2 from 65 ranks with 400 Gb/s). */
static void test_p2p_channels(void **state)
{
	static const struct {
		int ranks, nodes;
		uint64_t S;
		double nic;
		int channels;
	} law[] = {
		{8, 1, 32 << 20, 50e9, 4},
		{8, 1, 64 << 20, 50e9, 4},
		{8, 1, 128 << 20, 50e9, 8},
		{8, 1, 256 << 20, 50e9, 16},
		{8, 1, 512ULL << 20, 50e9, 32},
		{8, 1, 1ULL << 34, 50e9, 32},
		{4, 1, 32 << 20, 50e9, 8},
		{4, 1, 128 << 20, 50e9, 8},
		{4, 1, 256 << 20, 50e9, 16},
		{6, 1, 64 << 20, 50e9, 4},
		{2, 1, 256 << 20, 50e9, 16},
		{2, 1, 512ULL << 20, 50e9, 32},
		{8, 1, 100 << 10, 50e9, 2},
		{8, 1, 1, 50e9, 1},
		{8, 1, 0, 50e9, 1},
		{64, 1, 1 << 20, 50e9, 1},
		{64, 1, 64 << 20, 50e9, 4},
		{16, 2, 100 << 10, 50e9, 2},
		{16, 2, 1 << 20, 50e9, 4},
		{16, 2, 64 << 20, 50e9, 4},
		{128, 16, 64 << 20, 50e9, 2},
		{2, 2, 64 << 20, 25e9, 2},
		{2, 2, 64 << 20, 12.5e9, 1},
		{2, 2, 64 << 20, 40e9, 4},
		{2, 2, 64 << 20, 1e12, 32},
		{72, 9, 64 << 20, 50e9, 2},
	};
	struct emu_cluster *c;
	struct probe p;
	int64_t sent;

	(void)state;
	for (size_t i = 0; i < sizeof law / sizeof *law; i++) {
		struct coll_p2p_comm comm = {law[i].ranks, law[i].nodes};

		assert_int_equal(coll_p2p_channels(&comm, law[i].S, (uint64_t)law[i].nic),
				 law[i].channels);
	}
	/* 8 H100s of a node, on the communicator of the 8: 64 MiB on 4 channels of 21 GB/s,
	 * 256 MiB on 16, 1 GiB on 32, more than the link's 355.5 GB/s; parts of 16 MiB, a
	 * chunk of 512 KiB more; the fixed cost 8100 + 3400 ns (a step of Simple's):
	 * 11500 + 798916 + 798916 / 32 = 835382 ns */
	c = calibrated_on("dgx-h100", 1, 8);
	memset(&p, 0, sizeof p);
	p.data[0][0] = 8;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], nvl_sends_ns(64 << 20, 4, 64 << 20, 512 << 10));
	assert_int_equal(p.t[0][0], 835382);
	assert_int_equal(p.t[0][3], 835382); /* the sender's own end, eager */
	assert_int_equal(p.t[0][1], nvl_sends_ns(256 << 20, 16, 256 << 20, 512 << 10));
	assert_int_equal(p.t[0][2], nvl_sends_ns(1 << 30, 32, 1 << 30, 512 << 10));
	assert_int_equal(p.t[0][2], 11500 + 3020371 + 3020371 / 64); /* at the link's rate */
	assert_int_equal(p.t[7][2], p.t[0][2]);
	/* a pair's communicator: 16 channels up to 256 MiB */
	p.data[0][0] = 2;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], nvl_sends_ns(64 << 20, 16, 64 << 20, 512 << 10));
	assert_int_equal(p.t[0][1], nvl_sends_ns(256 << 20, 16, 256 << 20, 512 << 10));
	/* a part under a chunk (1 MiB on a pair's 16 channels, 64 KiB each): twice its time */
	p.data[0][1] = 1 << 20;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], 11500 + 2 * (int64_t)ceil(1048576 / 336e9 * 1e9));
	assert_int_equal(p.t[0][0], 17742);
	/* NCCL's LL up to 16 KiB a channel (16 KiB on one: 8100 + 633 + 16 KiB / 21 GB/s),
	 * Simple from 32 KiB (one channel: 11500 + 2 x 32 KiB / 21 GB/s) */
	p.data[0][0] = 8;
	p.data[0][1] = 16384;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], 8733 + (int64_t)ceil(16384 / 21e9 * 1e9));
	p.data[0][1] = 32768;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], nvl_sends_ns(32768, 1, 32768, 512 << 10));
	assert_int_equal(p.t[0][0], 11500 + 2 * 1561);
	p.data[0][1] = 0;
	/* none (as Transformer Engine's userbuffers copy): the link's rate */
	p.data[0][0] = 0;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], 11500 + (int64_t)ceil(67108864 / 355.5e9 * 1e9));
	assert_int_equal(p.t[0][3], p.t[0][0]);
	/* a group's second send, and a group's second receive (its sender ready at once),
	 * start where the first would end on its channels, and end at 2 x 835382 (at the
	 * link's rate 200274 + 835382) */
	assert_int_equal(emu_cluster_run(c, grouped_sends_device, &p), 0);
	for (int d = 0; d < 4; d++)
		assert_int_equal(p.t[d][0], 2 * 835382);
	emu_cluster_free(c);
	/* NVLink3 and the network model no channels: the link's rate on any communicator */
	c = calibrated(1, 8);
	p.data[0][0] = 8;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], 8100 + 10800 + (int64_t)ceil(67108864 / 234e9 * 1e9));
	emu_cluster_free(c);
	/* 2 nodes x 8 on the communicator of the 16: a send inside a node on 4 channels (a
	 * network peer's), 84 GB/s, whatever its size (one node's 16 would take 16 for 256
	 * MiB), in the network's chunks of 128 KiB; device 1 sends to 2 and receives from 0 */
	c = calibrated_grid("dgx-h100", 2, 8);
	p.data[0][0] = 16;
	p.data[0][1] = 268435456;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[1][0], nvl_sends_ns(256 << 20, 4, 256 << 20, 128 << 10));
	p.data[0][1] = 0;
	emu_cluster_free(c);
	c = calibrated_grid("dgx-h100", 2, 1); /* 2 nodes x 1: IB NDR, 47 GB/s */
	p.data[0][0] = 2;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], 8100 + 6800 + (int64_t)ceil(67108864 / 47e9 * 1e9));
	/* 64 KiB, one channel (21 GB/s, were the network to model channels): as on none */
	p.data[0][1] = 65536;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	sent = p.t[0][0];
	p.data[0][0] = 0;
	assert_int_equal(emu_cluster_run(c, sendrecv_device, &p), 0);
	assert_int_equal(p.t[0][0], sent);
	p.data[0][1] = 0;
	emu_cluster_free(c);
}

/* Two posted all-reduces run back to back on the comm stream; an event recorded after
 * the first orders a compute-stream wait on it, without waiting for the second. */
static int stream_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	struct coll_req *a, *b;
	struct emu_event ev;
	float x[256] = {0}, y[256] = {0};
	int id = emu_dev_id(d), rc;

	if ((rc = coll_iall_reduce(d, emu_world(d), x, x, 256, COLL_SUM, &a)))
		return rc;
	if ((rc = emu_event_record(d, EMU_STREAM_COMM, &ev)))
		return rc;
	if ((rc = coll_iall_reduce(d, emu_world(d), y, y, 256, COLL_SUM, &b)))
		return rc;
	p->t[id][0] = ev.t;
	p->t[id][1] = emu_now(d); /* nothing waited yet: still 0 */
	emu_stream_wait_event(d, EMU_STREAM_COMPUTE, &ev);
	p->t[id][2] = emu_now(d);
	p->t[id][3] = emu_stream_time(d, EMU_STREAM_COMM);
	if ((rc = coll_wait(d, a)) || (rc = coll_wait(d, b)))
		return rc;
	p->t[id][4] = emu_now(d);
	return 0;
}

/* Across 10 nodes of 4 H100s (emu/coll_time.c, multi_node_ns), an all-reduce by Simple as
 * NCCL picks it, by the least time: the ring, 2 (n - k) = 60 NVLink4 steps of 3.4 us and
 * 2 (k - 1) = 18 InfiniBand ones of 6.8, with the bus bytes 2 x 39/40 S at the node's 4
 * NICs (B = 4 x 0.94 x 50 GB/s = 188, slower than NVLink4's 355.5), or the tree, 2 (L - 1)
 * = 6 and 2 ceil(log2 k) = 8 steps, with 2 S at 0.92 B times NCCL's correction for the
 * size (0.7 at 32 MiB, 0.9 at 128 MiB); plus 8.1 us (NDR has no PXN cost, NCCL's model
 * none). At 32 MiB the tree (637.2 us; the ring 682.5), at 128 MiB the ring (1726.7 us;
 * the tree 1807.4). An all-gather of 32 MiB in all: the ring, 30 + 9 steps, 39/40 S. A 1
 * KiB all-reduce by LL: the tree's steps (0.633 us and NDR's LL 5.0) with the ring's bus
 * bytes at NVLink4's LL 44 GB/s. 10 nodes: no NVLSTree, which pemu runs on 2. */
static int across_device(struct emu_dev *d, void *arg)
{
	static const size_t count[4] = {8u << 20, (8u << 20) / 40, 256, 32u << 20};
	struct probe *p = arg;
	int64_t t[4];
	int rc;

	for (int i = 0; i < 4; i++) {
		t[i] = emu_stream_time(d, EMU_STREAM_COMM);
		rc = i == 1 ? coll_all_gather(d, emu_world(d), NULL, NULL, count[i])
			    : coll_all_reduce(d, emu_world(d), NULL, NULL, count[i], COLL_SUM);
		if (rc)
			return rc;
		t[i] = emu_stream_time(d, EMU_STREAM_COMM) - t[i];
	}
	if (emu_dev_id(d) == 0)
		memcpy(p->t[0], t, sizeof t);
	return 0;
}

static void test_across_nodes(void **state)
{
	struct emu_cluster *c = calibrated_grid("dgx-h100", 10, 4);
	struct probe p;
	const double S = 33554432, ag = (8u << 20) / 40 * 40 * 4.0;

	(void)state;
	assert_int_equal(emu_cluster_run(c, across_device, &p), 0);
	/* 32 MiB by the tree: cheaper than the ring's 8100 + 60 x 3400 + 18 x 6800 + 78/40 S /
	 * 188 GB/s = 682538 */
	assert_int_equal(p.t[0][0], 8100 + 6 * 3400 + 8 * 6800 +
					    (int64_t)ceil(2 * S / (0.92 * 0.7 * 188e9) * 1e9));
	assert_int_equal(p.t[0][0], 637189);
	assert_int_equal(p.t[0][1],
			 8100 + 30 * 3400 + 9 * 6800 + (int64_t)ceil(39 / 40.0 * ag / 188e9 * 1e9));
	assert_int_equal(p.t[0][2],
			 8100 + 6 * 633 + 8 * 5000 + (int64_t)ceil(78 / 40.0 * 1024 / 44e9 * 1e9));
	/* 128 MiB by the ring: cheaper than the tree's 8100 + 6 x 3400 + 8 x 6800 + 2 x 4 S /
	 * (0.92 x 0.9 x 188 GB/s) = 1807355 */
	assert_int_equal(p.t[0][3], 8100 + 60 * 3400 + 18 * 6800 +
					    (int64_t)ceil(78 / 40.0 * 4 * S / 188e9 * 1e9));
	assert_int_equal(p.t[0][3], 1726652);
	emu_cluster_free(c);
}

/* NCCL's NVLSTree on 2 nodes of 8 H100s (emu/coll_time.c, nvls_tree_time): each node's
 * switch reduces, and the nodes exchange their sums a NIC at a time, both ways at once, at
 * NCCL's ceiling of 57.7 GB/s a NIC; the algorithm bandwidth 8 x 57.7 x 16/30 GB/s. A 1
 * GiB all-reduce: 8.1 us, 2 InfiniBand steps of 6.8 and the 170 us ramp, 4553.2 us (the
 * ring 5780.1). At 32 MiB the ring is cheaper, 28 NVLink4 steps of 3.4 us, 2 of 6.8 and
 * 30/16 S at NVLink4's 355.5 GB/s: 293.9 us (NVLSTree 328.0). Not on 4 nodes, where
 * NCCL's ceiling (45.5 GB/s a channel) is under its ring's: the ring, 6091.3 us; nor with
 * one GPU a node (no switch to reduce in): the ring over the 2 NICs' 47 GB/s; nor without
 * NVLink SHARP (--no-nvls): the ring. The ceiling is NCCL's whatever the NIC (100 GB/s:
 * the same 57.7), unless twice the NIC's bulk bandwidth is less (25 GB/s: 2 x 23.5). A
 * member's NIC carries its 1/8 of the node's sum; NVLink the node's all-reduce, counted
 * as a ring's. */
static int all_reduce_device(struct emu_dev *d, void *arg)
{
	static const size_t count[2] = {256u << 20, 8u << 20};
	struct probe *p = arg;

	for (int i = 0; i < 2; i++) {
		int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);
		int rc = coll_all_reduce(d, emu_world(d), NULL, NULL, count[i], COLL_SUM);

		if (rc)
			return rc;
		if (emu_dev_id(d) >= 16) /* (the probe's devices) */
			continue;
		p->t[emu_dev_id(d)][i] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
		if (i == 0) { /* the bytes the first put on each link */
			p->t[emu_dev_id(d)][2] = (int64_t)coll_link_bytes(d, TOPO_LINK_INTER);
			p->t[emu_dev_id(d)][3] = (int64_t)coll_link_bytes(d, TOPO_LINK_INTRA);
		}
	}
	return 0;
}

/* 1 GiB all-reduced over 2 nodes of 8 H100s with NICs of inter_bw bytes a second, and
 * NVLink SHARP or not */
static int64_t pair_all_reduce(double inter_bw, int nvls)
{
	struct emu_config cfg;
	struct emu_cluster *c;
	struct probe p;

	if (emu_config_default(&cfg, "dgx-h100"))
		abort();
	cfg.topo.nodes = 2;
	cfg.ndev = 16;
	cfg.dry_run = 1;
	cfg.cost = EMU_COST_CALIBRATED;
	cfg.topo.link[TOPO_LINK_INTER].bw_bytes = (uint64_t)inter_bw;
	if (!nvls)
		cfg.topo.link[TOPO_LINK_INTRA].nvls_eff = 0;
	c = emu_cluster_new(&cfg);
	assert_int_equal(emu_cluster_run(c, all_reduce_device, &p), 0);
	emu_cluster_free(c);
	return p.t[0][0];
}

static void test_nvls_tree(void **state)
{
	const double G = 1073741824, M32 = 33554432;
	const int64_t ring =
		8100 + 28 * 3400 + 2 * 6800 + (int64_t)ceil(30 * G / (16 * 355.5e9) * 1e9);
	struct emu_cluster *c = calibrated_on("dgx-h100", 2, 16);
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, all_reduce_device, &p), 0);
	assert_int_equal(p.t[0][0], 8100 + 2 * 6800 + 170000 +
					    (int64_t)ceil(30 * G / (16 * 8 * 57.7e9) * 1e9));
	assert_int_equal(p.t[0][0], 4553195);
	assert_int_equal(ring, 5780096);
	assert_int_equal(pair_all_reduce(50e9, 0), ring);
	assert_int_equal(pair_all_reduce(100e9, 1), p.t[0][0]);
	assert_int_equal(pair_all_reduce(25e9, 1),
			 8100 + 2 * 6800 + 170000 + (int64_t)ceil(30 * G / (16 * 8 * 47e9) * 1e9));
	assert_int_equal(p.t[0][2], (int64_t)(G / 8)); /* its 1/8 of the node's sum, once */
	assert_int_equal(p.t[0][3], (int64_t)(2 * 7 * G / 8));
	assert_int_equal(p.t[0][1], 8100 + 28 * 3400 + 2 * 6800 +
					    (int64_t)ceil(30 * M32 / (16 * 355.5e9) * 1e9));
	emu_cluster_free(c);

	c = calibrated_on("dgx-h100", 4, 32);
	assert_int_equal(emu_cluster_run(c, all_reduce_device, &p), 0);
	assert_int_equal(p.t[0][0], 8100 + 56 * 3400 + 6 * 6800 +
					    (int64_t)ceil(62 * G / (32 * 355.5e9) * 1e9));
	emu_cluster_free(c);

	c = calibrated_grid("dgx-h100", 2, 1);
	assert_int_equal(emu_cluster_run(c, all_reduce_device, &p), 0);
	assert_int_equal(p.t[0][0], 8100 + 2 * 6800 + (int64_t)ceil(G / 47e9 * 1e9));
	emu_cluster_free(c);
}

/* An all-to-all over nodes (emu/coll_time.c, a2a_across), as NCCL runs one, every pair
 * at once: a member's bytes for its own node's members on NVLink, those for the other
 * node through its NIC, side by side; the slower of the two for the member that moves
 * the most, sending or receiving, with n - 1 = 15 steps. On 2 nodes of 8 H100s, 4 GiB a
 * member: 2 GiB through the NIC at 0.94 x 50 GB/s and 15 InfiniBand steps of 6.8 us, 8.1
 * us besides (the whole 15/16 of 4 GiB at the NIC would take 85.8 ms). The all-to-all-v,
 * 64 Ki floats x (1 + m + 2 j) from member m to member j, by its busiest member's
 * traffic with the other node. */
static size_t a2av_count(int from, int to)
{
	return (size_t)(1 + from + 2 * to) << 16;
}

static int a2a_nodes_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	size_t send[16], recv[16];
	int id = emu_dev_id(d), rc;
	int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);

	if ((rc = coll_all_to_all(d, emu_world(d), NULL, NULL, 64u << 20)))
		return rc;
	p->t[id][0] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	p->t[id][1] = (int64_t)coll_link_bytes(d, TOPO_LINK_INTRA);
	p->t[id][2] = (int64_t)coll_link_bytes(d, TOPO_LINK_INTER);
	for (int j = 0; j < 16; j++) {
		send[j] = a2av_count(id, j);
		recv[j] = a2av_count(j, id);
	}
	t0 = emu_stream_time(d, EMU_STREAM_COMM);
	if ((rc = coll_all_to_all_v(d, emu_world(d), NULL, send, NULL, recv)))
		return rc;
	p->t[id][3] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	return 0;
}

static void test_all_to_all_across_nodes(void **state)
{
	struct emu_cluster *c = calibrated_on("dgx-h100", 2, 16);
	const double nic = 0.94 * 50e9, chunk = (64u << 20) * 4.0;
	double worst = 0;
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, a2a_nodes_device, &p), 0);
	for (int m = 0; m < 16; m++) { /* the most a member sends to or gets from the other node */
		double out = 0, in = 0;

		for (int j = 0; j < 16; j++)
			if (j / 8 != m / 8) {
				out += 4.0 * (double)a2av_count(m, j);
				in += 4.0 * (double)a2av_count(j, m);
			}
		worst = fmax(worst, fmax(out, in));
	}
	for (int m = 0; m < 16; m++) {
		assert_int_equal(p.t[m][0],
				 8100 + 15 * 6800 + (int64_t)ceil(8 * chunk / nic * 1e9));
		assert_int_equal(p.t[m][0], 45801242);
		assert_int_equal(p.t[m][1], (int64_t)(7 * chunk)); /* to its own node: NVLink */
		assert_int_equal(p.t[m][2], (int64_t)(8 * chunk)); /* to the other: the NIC */
		assert_int_equal(p.t[m][3], 8100 + 15 * 6800 + (int64_t)ceil(worst / nic * 1e9));
	}
	/* member 15's receipts from node 0: 64 Ki floats x (1 + j + 30), j = 0..7 */
	assert_int_equal(worst, 4.0 * 65536 * (8 * 31 + 28));
	emu_cluster_free(c);
}

/* An all-to-all(-v) inside an H100 node: NCCL's sends to every member at once, on a
 * communicator of the members (coll_time.c, p2p_peers_ns; nccl-tests' alltoall, measured
 * in bench/fidelity). 1 GiB in all: among 2 a peer's 512 MiB on 32 channels, among 4 256
 * MiB on 16, among 8 128 MiB on 8, parts of 16 MiB, each member's (n - 1) messages out
 * through the link at 355.5 GB/s; 32 MiB in all among 8: 4 MiB a peer on 4 channels,
 * parts of 1 MiB, a chunk (half the part) more; 32 MiB among 4: 8 MiB a peer on 8; 256
 * MiB a peer among 8 (a2a_nodes_device on one node); its all-to-all-v: the largest
 * message, 21 x 256 KiB (member 6 to 7), on 4 channels, and the most a member moves,
 * member 7's receipts, 126 x 256 KiB, through the link; 8 KiB a peer by LL; nothing. */
static int a2a_sized_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	size_t zero[8] = {0};
	int64_t t0 = emu_stream_time(d, EMU_STREAM_COMM);
	int rc = coll_all_to_all(d, emu_world(d), NULL, NULL, (size_t)p->data[0][1]);

	p->t[emu_dev_id(d)][0] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	t0 = emu_stream_time(d, EMU_STREAM_COMM);
	if (!rc) /* an all-to-all-v of nothing */
		rc = coll_all_to_all_v(d, emu_world(d), NULL, zero, NULL, zero);
	p->t[emu_dev_id(d)][1] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	return rc;
}

static void test_a2a_in_node(void **state)
{
	static const int64_t gib[3] = {1568879, 2347568, 2736913};
	struct emu_cluster *c;
	struct probe p;

	(void)state;
	for (int i = 0, n = 2; n <= 8; i++, n *= 2) {
		uint64_t b = (1ULL << 30) / (uint64_t)n;

		c = calibrated_on("dgx-h100", 1, n);
		assert_int_equal(emu_cluster_run(c, loop_device, &p), 0);
		assert_int_equal(p.t[0][2],
				 nvl_sends_ns(b, (int)(b >> 24), b * (uint64_t)(n - 1), 512 << 10));
		assert_int_equal(p.t[0][2], gib[i]);
		assert_int_equal(p.t[n - 1][2], gib[i]);
		emu_cluster_free(c);
	}
	/* the communicator's size sets the channels: 32 MiB among 4, 8 a peer (among 8, 4) */
	c = calibrated_on("dgx-h100", 1, 4);
	memset(&p, 0, sizeof p);
	p.data[0][1] = 2 << 20; /* floats a peer */
	assert_int_equal(emu_cluster_run(c, a2a_sized_device, &p), 0);
	assert_int_equal(p.t[0][0], nvl_sends_ns(8 << 20, 8, 24 << 20, 512 << 10));
	assert_int_equal(p.t[0][0], 11500 + 70790 + 70790 / 2);
	emu_cluster_free(c);
	c = calibrated_on("dgx-h100", 1, 8);
	p.data[0][1] = 1 << 20;
	assert_int_equal(emu_cluster_run(c, a2a_sized_device, &p), 0);
	assert_int_equal(p.t[0][0], nvl_sends_ns(4 << 20, 4, 28 << 20, 512 << 10));
	assert_int_equal(p.t[0][0], 11500 + 82589 + 82589 / 2);
	/* 8 KiB a peer, one channel's, by LL: 8100 + 633 + 7 x 8 KiB / 44 GB/s; nothing sent:
	 * 8100 + 633 */
	p.data[0][1] = 2048;
	assert_int_equal(emu_cluster_run(c, a2a_sized_device, &p), 0);
	assert_int_equal(p.t[0][0], 8733 + (int64_t)ceil(7 * 8192 / 44e9 * 1e9));
	assert_int_equal(p.t[0][1], 8733);
	assert_int_equal(emu_cluster_run(c, a2a_nodes_device, &p), 0);
	assert_int_equal(p.t[0][0], nvl_sends_ns(256 << 20, 16, 7ULL * (256 << 20), 512 << 10));
	assert_int_equal(p.t[0][0], 5462325);
	assert_int_equal(p.t[0][3], nvl_sends_ns(21 << 18, 4, 126 << 18, 512 << 10));
	assert_int_equal(p.t[0][3], 139807);
	emu_cluster_free(c);
}

static void test_streams_and_events(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);
	const struct topo_link *l = &emu_cluster_config(c)->topo.link[TOPO_LINK_INTRA];
	/* 6 alpha + 6/4 * 1 KiB / 300 GB/s = 18000 + 5.12 -> 18006 ns */
	int64_t one = 6 * l->lat_ns + (int64_t)ceil(6.0 * 1024 * 1e9 / (4.0 * (double)l->bw_bytes));
	struct probe p;

	(void)state;
	assert_int_equal(one, 18006);
	assert_int_equal(emu_cluster_run(c, stream_device, &p), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(p.t[i][0], one);
		assert_int_equal(p.t[i][1], 0);
		assert_int_equal(p.t[i][2], one);
		assert_int_equal(p.t[i][3], 2 * one);
		assert_int_equal(p.t[i][4], 2 * one);
	}
	emu_cluster_free(c);
}

/* The posted broadcast, reduce and all-to-all-v: same data and time as blocking. */
static int posted_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	struct emu_group *g = emu_world(d);
	int id = emu_dev_id(d), rc;
	float b[4], r[4] = {0}, s[4] = {0}, v[4] = {0};
	size_t sc[4] = {1, 1, 1, 1}, rcnt[4] = {1, 1, 1, 1};
	struct coll_req *q1, *q2, *q3;

	for (int i = 0; i < 4; i++) {
		b[i] = id == 2 ? (float)(10 + i) : 0.0f;
		s[i] = (float)(id * 4 + i);
	}
	if ((rc = coll_ibroadcast(d, g, b, 4, 2, &q1)) || (rc = coll_wait(d, q1)))
		return rc;
	p->t[id][0] = emu_now(d);
	if ((rc = coll_ireduce(d, g, s, r, 4, COLL_MAX, 1, &q2)) || (rc = coll_wait(d, q2)))
		return rc;
	p->t[id][1] = emu_now(d);
	if ((rc = coll_iall_to_all_v(d, g, s, sc, v, rcnt, &q3)) || (rc = coll_wait(d, q3)))
		return rc;
	memcpy(p->data[id], b, sizeof b);
	memcpy(p->data[id] + 4, r, sizeof r);
	memcpy(p->data[id] + 8, v, sizeof v);
	return 0;
}

static void test_posted_forms(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);
	const struct topo_link *l = &emu_cluster_config(c)->topo.link[TOPO_LINK_INTRA];
	/* broadcast and reduce of 16 bytes: 3 alpha + 16 B / 300 GB/s, rounded up */
	int64_t one = 3 * l->lat_ns + 1;
	struct probe p;

	(void)state;
	assert_int_equal(emu_cluster_run(c, posted_device, &p), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(p.t[i][0], one);
		assert_int_equal(p.t[i][1], 2 * one);
		for (int j = 0; j < 4; j++) {
			assert_true(p.data[i][j] == (float)(10 + j));        /* broadcast from 2 */
			assert_true(p.data[i][8 + j] == (float)(j * 4 + i)); /* element i of j */
		}
	}
	for (int j = 0; j < 4; j++)
		assert_true(p.data[1][4 + j] == (float)(12 + j)); /* max over devices, at root 1 */
	emu_cluster_free(c);
}

/* A send of 16 floats from device 0 to device 1, one of them first busy with a kernel:
 * posted eagerly (the default) or as a rendezvous (coll_set_rendezvous). arg's t[2][0]
 * says which device computes first (0 or 1) and t[2][1] whether the send waits. */
static int rendezvous_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	int id = emu_dev_id(d), rc;
	struct coll_req *r = NULL;

	if (id == p->t[2][0])
		emu_compute(d, "work", 1e9, 0);
	if (id == 1) {
		rc = coll_recv(d, 0, p->data[1], 16);
		p->t[1][0] = emu_now(d);
		return rc;
	}
	for (int j = 0; j < 16; j++)
		p->data[0][j] = (float)(j + 1);
	coll_set_rendezvous(d, (int)p->t[2][1]);
	if ((rc = coll_isend(d, 1, p->data[0], 16, &r)))
		return rc;
	p->t[0][1] = emu_now(d); /* posting returns at once either way */
	rc = coll_wait(d, r);
	p->t[0][0] = emu_now(d);
	return rc;
}

/* An eager send is over for its sender once its data has left, whenever the receiver
 * comes; a rendezvous starts when the later of the two gets there and both see its end.
 * Exact to the nanosecond on the roofline: alpha + S / beta, S = 64 bytes. */
static void test_rendezvous(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 2, 0, 0);
	const struct emu_config *cfg = emu_cluster_config(c);
	const struct topo_link *l = &cfg->topo.link[TOPO_LINK_INTRA];
	int64_t one = l->lat_ns + (int64_t)ceil(64e9 / (double)l->bw_bytes);
	int64_t work = roofline(&cfg->topo.gpu, 1e9, 0);

	(void)state;
	assert_true(work > one);
	for (int first = 0; first < 2; first++)
		for (int rdv = 0; rdv < 2; rdv++) {
			struct probe p = {0};

			p.t[2][0] = first;
			p.t[2][1] = rdv;
			assert_int_equal(emu_cluster_run(c, rendezvous_device, &p), 0);
			assert_int_equal(p.t[0][1], first == 0 ? work : 0);
			if (first == 0) { /* the receiver waits for the sender either way */
				assert_int_equal(p.t[0][0], work + one);
				assert_int_equal(p.t[1][0], work + one);
			} else if (!rdv) { /* eager: gone at once, there when the peer asks */
				assert_int_equal(p.t[0][0], one);
				assert_int_equal(p.t[1][0], work);
			} else { /* rendezvous: both wait for the busy receiver */
				assert_int_equal(p.t[0][0], work + one);
				assert_int_equal(p.t[1][0], work + one);
			}
			for (int j = 0; j < 16; j++)
				assert_true(p.data[1][j] == (float)(j + 1));
		}
	emu_cluster_free(c);
}

/* A group (coll_set_group, as batch_isend_irecv): device 0 posts rendezvous sends of 16
 * floats to device 1, busy with a kernel first, and then to device 2, and waits for both
 * (t[0]: after the posts, after the waits; t[0][2] and t[0][3] the send stream's time read
 * in the group and after it); devices 1 and 2 receive (t[1], t[2]). t[3][0] 1: the send to
 * device 1 is not in the group; 2: device 0 waits for its send to device 2 in the group
 * and sends it a second message, still in the group (t[2][1] its end). */
static int group_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	int id = emu_dev_id(d), mode = (int)p->t[3][0], rc = 0;
	struct coll_req *r[3] = {NULL, NULL, NULL};

	if (id > 0) {
		if (id == 1)
			emu_compute(d, "work", 4e9, 0);
		for (int k = 0; k < (id == 2 && mode == 2 ? 2 : 1) && !rc; k++) {
			rc = coll_recv(d, 0, p->data[id], 16);
			p->t[id][k] = emu_now(d);
		}
		return rc;
	}
	coll_set_rendezvous(d, 1);
	for (int k = 0; k < 2; k++) {
		coll_set_group(d, k == 1 || mode != 1);
		if ((rc = coll_isend(d, k + 1, p->data[0], 16, &r[k])))
			return rc;
	}
	p->t[0][0] = emu_now(d);
	p->t[0][2] = emu_stream_time(d, EMU_STREAM_SEND);
	if (mode == 2) {
		if ((rc = coll_wait(d, r[1])) || (rc = coll_isend(d, 2, p->data[0], 16, &r[1])))
			return rc;
	}
	coll_set_group(d, 0);
	p->t[0][3] = emu_stream_time(d, EMU_STREAM_SEND);
	rc = coll_wait(d, r[0]);
	rc = rc ? rc : coll_wait(d, r[1]);
	p->t[0][1] = emu_now(d);
	return rc;
}

/* The second send of a group waits neither for the first's late receiver (its post
 * returns at once, where outside a group it waits for the first send's end) nor starts
 * before the first would have ended from its own post: device 2 has its message at
 * 2 (alpha + S / beta), device 1 at work + alpha + S / beta, exact to the nanosecond; the
 * send stream's time read in the group is before the group's sends (NCCL launches a group
 * at its end), read after it past both. A send before the group, not in it, keeps stream
 * order: the group's send starts at its end. A send of the group after the wait for
 * another does not wait for the group's first, still held by its receiver: the third
 * send ends at 3 (alpha + S / beta). */
static void test_group(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 3, 0, 0);
	const struct emu_config *cfg = emu_cluster_config(c);
	const struct topo_link *l = &cfg->topo.link[TOPO_LINK_INTRA];
	int64_t one = l->lat_ns + (int64_t)ceil(64e9 / (double)l->bw_bytes);
	int64_t work = roofline(&cfg->topo.gpu, 4e9, 0);
	struct probe p = {0};

	(void)state;
	assert_true(work > 3 * one);
	assert_int_equal(emu_cluster_run(c, group_device, &p), 0);
	assert_int_equal(p.t[0][0], 0);
	assert_int_equal(p.t[1][0], work + one);
	assert_int_equal(p.t[2][0], 2 * one);
	assert_int_equal(p.t[0][1], work + one);
	assert_int_equal(p.t[0][2], 0);
	assert_int_equal(p.t[0][3], work + one);
	memset(&p, 0, sizeof p);
	p.t[3][0] = 1;
	assert_int_equal(emu_cluster_run(c, group_device, &p), 0);
	assert_int_equal(p.t[1][0], work + one);
	assert_int_equal(p.t[2][0], work + 2 * one);
	assert_int_equal(p.t[0][1], work + 2 * one);
	memset(&p, 0, sizeof p);
	p.t[3][0] = 2;
	assert_int_equal(emu_cluster_run(c, group_device, &p), 0);
	assert_int_equal(p.t[2][0], 2 * one);
	assert_int_equal(p.t[2][1], 3 * one);
	assert_int_equal(p.t[1][0], work + one);
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roofline),
		cmocka_unit_test(test_streams_and_events),
		cmocka_unit_test(test_posted_forms),
		cmocka_unit_test(test_rendezvous),
		cmocka_unit_test(test_group),
		cmocka_unit_test(test_calibrated_compute),
		cmocka_unit_test(test_gemm_memo),
		cmocka_unit_test(test_roofline_kinds),
		cmocka_unit_test(test_fused_attention),
		cmocka_unit_test(test_calibrated_collectives),
		cmocka_unit_test(test_nvlink4_ramp),
		cmocka_unit_test(test_nvls_where_cheaper),
		cmocka_unit_test(test_ring_loop),
		cmocka_unit_test(test_p2p_channels),
		cmocka_unit_test(test_across_nodes),
		cmocka_unit_test(test_nvls_tree),
		cmocka_unit_test(test_all_to_all_across_nodes),
		cmocka_unit_test(test_a2a_in_node),
		cmocka_unit_test(test_sm_share),
		cmocka_unit_test(test_sm_margin),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
