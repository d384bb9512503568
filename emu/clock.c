/* clock: stream cursors, events, the roofline and pacing; see clock.h. */
#include "clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "util.h"

/* launch + max(t_math, t_mem) (seconds), in ns rounded up, at most the horizon. */
static int64_t kernel_ns(int64_t launch, double t_math, double t_mem)
{
	double t = ceil((t_math > t_mem ? t_math : t_mem) * 1e9);

	if (!(t < (double)EMU_TIME_MAX)) /* (NaN too) */
		return EMU_TIME_MAX;
	return emu_time_add(launch, (int64_t)t);
}

int emu_cost_calibrated(const struct emu_dev *d)
{
	return d->c->cfg.cost == EMU_COST_CALIBRATED;
}

/* A memory-bound kernel's memory time under the calibrated model. */
static double mem_s(const struct topo_gpu *g, double bytes)
{
	return bytes / (g->hbm_bw * g->mem_eff);
}

int64_t emu_compute_cost(const struct emu_dev *d, double flops, double bytes)
{
	const struct topo_gpu *g = &d->c->cfg.topo.gpu;

	EMU_ASSERT(flops >= 0 && bytes >= 0);
	if (emu_cost_calibrated(d))
		return kernel_ns(g->kernel_ns, flops / (g->peak_flops * g->gemm_ceiling),
				 mem_s(g, bytes));
	return kernel_ns(g->launch_ns, flops / (g->peak_flops * g->efficiency), bytes / g->hbm_bw);
}

/* The tiles' time of batch GEMMs (m, n, k) under the calibrated model (clock.h): the faster
 * of two ways cuBLAS deals the tiles out, for each tile shape.
 *  - Data-parallel: a tile an SM, ceil(tiles / sms) waves; the last wave may leave SMs
 *    idle (wave quantization, NVIDIA's Matrix Multiplication Background guide).
 *  - Stream-K (Osama et al., PPoPP 2023, arXiv 2301.03598; in CUTLASS since 2.11 and in
 *    cuBLAS's kernels): every tile's k-iterations dealt out evenly over the SMs, so that
 *    no wave is part-empty; an SM pays the prologue and epilogue of every tile it works on
 *    (at most ceil(tiles / sms) + 1) and GEMM_FIXUP more of k for handing partial sums to
 *    the tiles' owners. With fewer tiles than SMs each tile is shared by several SMs
 *    (split-K's regime) and the fix-up is still charged once, though a tile's owner then
 *    takes ceil(sms / tiles) partial sums: no measurement here has that shape, so the
 *    fix-up's growth is left out rather than guessed. A batch's tiles are dealt as one
 *    set (OpenXLA's 250 batched H100 shapes, batches of 2 and 4, come within 5.7% on
 *    average so).
 * The two measured 2048^3 GEMMs (A100 SXM, cuBLASLt; A800 PCIe, PyTorch) run at 87-89% of
 * their card's 8192^3, where data-parallel tiles alone give 73% (3 waves for 2.4 of work)
 * and stream-K 78%. A tile costs the GPU's gemm_k0 more of k (topo.h): its prologue (the
 * shared-memory pipeline filling) and its epilogue (the output's store). The half tiles
 * 128 x 64 and 64 x 128 reach GEMM_HALF_TILE_EFF of an SM's rate: they load 3/2 as much of
 * A and B per FLOP as a 128 x 128 tile. e, the fix-up and the A100's k0 (250) are
 * fitted to bench/fidelity's GEMM rows (square to skinny shapes; docs/formulas.md), every
 * fitted row kept within 10%: a mean error of 4.95% over the 13 shapes. The rows do not
 * pin them down alone (k0 310, e 0.82 and no fix-up give 4.88%); with k0 and e as here
 * the fix-up matters (0: 7.1%, 200: 5.5%, 400: 4.9%, 500: 5.2%). The H100's k0 (120) and
 * its GEMM kernel's fixed time (gemm_ns, 5 us) are fitted to OpenXLA's table of 375 H100
 * GEMMs (topo.c). The ceiling stays mamf-finder's measured maximum.
 * The H100's law (and the H200's and H20's, gemm_tile64) deals 64 x 64 tiles too, at a
 * rate with no new fitted number: extrapolated from the half tiles' by an assumed law, an
 * SM's time a FLOP as a + b x the tile's loads of A and B a FLOP (1/Tm + 1/Tn), through
 * the 128 x 128 tile (1) and the half tiles (3/2 its loads, GEMM_HALF_TILE_EFF), gives the
 * 64 x 64 tile (twice its loads) 1 / (1 + 2 (1 / 0.78 - 1)) = 0.639 of the rate (a
 * two-point extrapolation: the same law would put the 256 x 128 tiles above 1). On
 * OpenXLA's table it wins 86 of the 375 shapes, all under 13 us, and takes the table from
 * 317 to 349 within 10% (mean error 6.3% to 5.3%; on those 86, pemu's mean error from
 * -6.7%, slow, to +3.0%); it overshoots some 256-wide shapes of long k (2 x 256 x 256 x
 * 4096 +38%, 30% without it). Which GPUs deal it was chosen on the data: the A100's one
 * GEMM that small, the A800's 512^3 (a row 0.78 was fitted on), would come out 38% fast. */
#define GEMM_HALF_TILE_EFF 0.78
#define GEMM_TILE64_EFF    (1 / (1 + 2 * (1 / GEMM_HALF_TILE_EFF - 1)))
#define GEMM_FIXUP         400.0

static double gemm_tiles_s(const struct topo_gpu *g, int sms, double batch, double m, double n,
			   double k)
{
	static const double tile[][3] = {{256, 128, 1},
					 {128, 256, 1},
					 {128, 128, 1},
					 {128, 64, GEMM_HALF_TILE_EFF},
					 {64, 128, GEMM_HALF_TILE_EFF},
					 {64, 64, GEMM_TILE64_EFF}};
	double per_sm = g->peak_flops * g->gemm_ceiling / g->sms, best = INFINITY;

	for (size_t i = 0; i < sizeof tile / sizeof *tile; i++) {
		double tm = tile[i][0], tn = tile[i][1], rate = per_sm * tile[i][2];
		double tiles, waves, dp, sk, t;

		if (tm == 64 && tn == 64 && !g->gemm_tile64)
			continue;
		tiles = ceil(m / tm) * ceil(n / tn) * batch;
		waves = ceil(tiles / sms);
		dp = waves * (k + g->gemm_k0);
		sk = tiles * k / sms + (waves + 1) * g->gemm_k0 + GEMM_FIXUP;
		t = 2 * tm * tn * (dp < sk ? dp : sk) / rate;
		best = t < best ? t : best;
	}
	return best;
}

/* A device's memo of gemm_tiles_s (a layer's GEMMs recur every micro-batch, and the
 * tiles' law is a tenth of a planner's dry-run): direct-mapped on the shape, an entry
 * holding the exact shape and the time its law gave, so a hit returns the same bits. */
#define GEMM_MEMO_BITS 8
#define GEMM_MEMO      (1 << GEMM_MEMO_BITS)

struct gemm_memo {
	double batch, m, n, k, s; /* s 0: empty */
	int sms;                  /* the SMs it ran on (the device's less its margin) */
};

static uint64_t bits_of(double x)
{
	uint64_t u;

	memcpy(&u, &x, sizeof u);
	return u;
}

static double gemm_tiles_memo(struct emu_dev *d, double batch, double m, double n, double k)
{
	uint64_t h = bits_of(batch) * 0x9e3779b97f4a7c15ull;
	struct gemm_memo *e;
	int sms = d->c->cfg.topo.gpu.sms - d->sm_margin;

	h = (h ^ bits_of(m)) * 0x9e3779b97f4a7c15ull;
	h = (h ^ bits_of(n)) * 0x9e3779b97f4a7c15ull;
	h = (h ^ bits_of(k)) * 0x9e3779b97f4a7c15ull;
	h = (h ^ (uint64_t)sms) * 0x9e3779b97f4a7c15ull;
	if (!d->gemm_memo)
		d->gemm_memo = emu_xcalloc(GEMM_MEMO, sizeof *d->gemm_memo);
	e = &d->gemm_memo[h >> (64 - GEMM_MEMO_BITS)];
	if (e->s == 0 || e->batch != batch || e->m != m || e->n != n || e->k != k || e->sms != sms)
		*e = (struct gemm_memo){
			batch, m, n, k, gemm_tiles_s(&d->c->cfg.topo.gpu, sms, batch, m, n, k),
			sms};
	return e->s;
}

/* A kernel's bytes as the trace gives them: rounded, at most UINT64_MAX (a dry-run of
 * absurd shapes can charge more). */
static uint64_t trace_bytes(double bytes)
{
	return bytes < 0x1p64 ? (uint64_t)(bytes + 0.5) : UINT64_MAX;
}

/* Charges dur ns, flops and bytes to d's compute stream (the bytes only to its trace). */
static int64_t advance(struct emu_dev *d, const char *name, double flops, double bytes, int64_t dur)
{
	struct emu_stream_state *st = &d->stream[EMU_STREAM_COMPUTE];

	if (d->c->cfg.trace) {
		struct trace_ev ev = {.t0 = st->t,
				      .t1 = st->t + dur,
				      .bytes = trace_bytes(bytes),
				      .flops = flops,
				      .stream = EMU_STREAM_COMPUTE,
				      .lane = (uint8_t)d->lane,
				      .sym = '#'};

		emu_strcpy_cut(ev.name, name, sizeof ev.name);
		trace_add_op(d, &ev);
	}
	st->t = emu_time_add(st->t, dur);
	d->flops += flops;
	d->compute_ns = emu_time_add(d->compute_ns, dur);
	emu_time_check(d, st->t, name);
	emu_pace(d);
	return dur;
}

/* Charges a kernel of dur ns (times the device's injected slowdown), flops and bytes to
 * d's compute stream. */
static int64_t charge(struct emu_dev *d, const char *name, double flops, double bytes, int64_t dur)
{
	return advance(d, name, flops, bytes, d->slow != 1 ? emu_time_scale(dur, d->slow) : dur);
}

void clock_stretch(struct emu_dev *d, const char *name, int64_t dur)
{
	advance(d, name, 0, 0, dur);
}

int64_t emu_gemm(struct emu_dev *d, const char *name, double batch, double m, double n, double k,
		 double extra_flops, double bytes)
{
	const struct topo_gpu *g = &d->c->cfg.topo.gpu;
	double flops = 2 * m * n * k * batch + extra_flops;

	EMU_ASSERT(flops >= 0 && bytes >= 0);
	if (!emu_cost_calibrated(d) || flops == 0)
		return charge(d, name, flops, bytes, emu_compute_cost(d, flops, bytes));
	return charge(d, name, flops, bytes,
		      kernel_ns(g->gemm_ns, gemm_tiles_memo(d, batch, m, n, k), mem_s(g, bytes)));
}

int64_t emu_fused(struct emu_dev *d, const char *name, double flops, double key_flops, double bytes)
{
	const struct topo_gpu *g = &d->c->cfg.topo.gpu;
	double work = flops + g->fused_keys * key_flops;

	EMU_ASSERT(flops >= 0 && key_flops >= 0 && bytes >= 0);
	if (!emu_cost_calibrated(d))
		return charge(d, name, flops, bytes, emu_compute_cost(d, flops, bytes));
	return charge(
		d, name, flops, bytes,
		kernel_ns(g->kernel_ns, work / (g->peak_flops * g->fused_eff), mem_s(g, bytes)));
}

int emu_set_sm_margin(struct emu_dev *d, int sms)
{
	int was = d->sm_margin;

	EMU_ASSERT(sms >= 0);
	d->sm_margin = sms < d->c->cfg.topo.gpu.sms ? sms : d->c->cfg.topo.gpu.sms - 1;
	return was;
}

int emu_time_check(struct emu_dev *d, int64_t t, const char *what)
{
	if (t < EMU_TIME_MAX || d->clock_failed)
		return 0;
	d->clock_failed = 1;
	return dev_fail_as(
		d, EMU_EINVAL, "clock horizon",
		"the virtual clock passed its horizon (2^62 ns, 146 years) in '%s': the "
		"hardware's figures (bandwidth, latency, FLOP/s) make it last longer than "
		"pemu counts",
		what);
}

int64_t emu_compute(struct emu_dev *d, const char *name, double flops, double bytes)
{
	return charge(d, name, flops, bytes, emu_compute_cost(d, flops, bytes));
}

double emu_flops(const struct emu_dev *d)
{
	return d->flops;
}

int64_t emu_compute_ns(const struct emu_dev *d)
{
	return d->compute_ns;
}

int64_t emu_now(const struct emu_dev *d)
{
	return d->stream[EMU_STREAM_COMPUTE].t;
}

int64_t emu_stream_time(struct emu_dev *d, enum emu_stream s)
{
	int rc;

	EMU_ASSERT((unsigned)s < EMU_NSTREAMS);
	if ((rc = coll_stream_settle(d, s, d->p2p_group))) /* (an open group's: at its end) */
		return rc;
	return d->stream[s].t;
}

int emu_event_record(struct emu_dev *d, enum emu_stream s, struct emu_event *ev)
{
	int64_t t = emu_stream_time(d, s);

	if (t < 0)
		return (int)t;
	ev->t = t;
	return 0;
}

void emu_stream_advance(struct emu_dev *d, enum emu_stream s, int64_t t)
{
	EMU_ASSERT((unsigned)s < EMU_NSTREAMS);
	if (d->stream[s].t < t)
		d->stream[s].t = t;
}

void emu_stream_wait_event(struct emu_dev *d, enum emu_stream s, const struct emu_event *ev)
{
	emu_stream_advance(d, s, ev->t);
}

void emu_pace(struct emu_dev *d)
{
	double pace = d->c->cfg.pace;
	struct timespec ts;
	int64_t target;

	if (pace <= 0)
		return;
	target = d->wall_t0 + (int64_t)((double)emu_now(d) * pace);
	ts.tv_sec = target / 1000000000;
	ts.tv_nsec = target % 1000000000;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}
