/* clock: virtual time. Every device has streams (compute, comm, send, recv), each a
 * cursor in integer nanoseconds, and events to order one stream after another, as CUDA
 * streams and events do. An op starts at its stream's cursor (and after the events it
 * waits for) and lasts its modelled duration, so overlap of compute and communication is
 * exact and deterministic whatever the host threads do.
 *
 * Compute is charged by the roofline of the device preset (docs/architecture.md):
 *     launch + max(flops / (peak * efficiency), bytes / hbm_bw), rounded up to 1 ns,
 * or under the calibrated cost model (emu_config.cost; docs/formulas.md, "How accurate
 * is the clock") by the kind of kernel:
 *   memory-bound  kernel + max(flops / (peak * gemm_ceiling), bytes / (hbm_bw mem_eff))
 *   GEMM          gemm_ns + max(the tiles' time, bytes / (hbm_bw mem_eff)): each of the
 *                 batch output matrices (m, n) cut into tiles Tm x Tn of cuBLAS's usual
 *                 sizes, 256 x 128, 128 x 256 or 128 x 128, or the half tiles
 *                 128 x 64 and 64 x 128 at 0.78 of an SM's rate (and where the GPU's
 *                 gemm_tile64 says so, H100, H200 and H20, 64 x 64 at 0.639), and the tiles dealt
 *                 out to the SMs the faster of two ways: data-parallel, ceil(tiles / sms)
 *                 waves of one tile of k + gemm_k0 (its prologue and epilogue: 250 on an
 *                 A100, 120 on an H100) an SM (tile and wave quantization, NVIDIA's Matrix
 *                 Multiplication Background guide), or stream-K, every tile's k dealt out
 *                 evenly, tiles k / sms + gemm_k0 (waves + 1) + 400 (the partial sums'
 *                 fix-up) an SM; an SM's rate is peak gemm_ceiling / sms; the least over
 *                 the tiles; gemm_ns the GEMM kernel's fixed time (2 us on an A100, 5 on
 *                 an H100)
 *   fused         a fused attention kernel: kernel + max((flops + fused_keys key_flops)
 *                 / (peak fused_eff), bytes / (hbm_bw mem_eff)): each row (a block's
 *                 load of its queries, or keys, and store of its output) costs as much
 *                 as fused_keys more keys
 * kernel being the preset's kernel_ns (topo.h).
 * Under the roofline every kind is charged as emu_compute's roofline.
 *
 * Time has a horizon, EMU_TIME_MAX (2^62 ns, 146 years): a duration or a cursor that
 * would pass it stops there and fails the device ("the virtual clock passed its
 * horizon"), so that absurd hardware figures give an error, never a wrapped time. */
#ifndef EMU_CLOCK_H
#define EMU_CLOCK_H

#include <math.h>
#include <stdint.h>

#include "cluster.h"

#define EMU_TIME_MAX (INT64_C(1) << 62)

/* a + b (both >= 0), at most EMU_TIME_MAX. */
static inline int64_t emu_time_add(int64_t a, int64_t b)
{
	return b > EMU_TIME_MAX - a ? EMU_TIME_MAX : a + b;
}

/* t x x (x >= 1), rounded up, at most EMU_TIME_MAX. */
static inline int64_t emu_time_scale(int64_t t, double x)
{
	double v = ceil((double)t * x);

	return v < (double)EMU_TIME_MAX ? (int64_t)v : EMU_TIME_MAX;
}

struct emu_event {
	int64_t t; /* virtual time the event completes */
};

/* Charges a kernel of flops and bytes to d's compute stream; returns its duration. name
 * labels it in the trace (copied, truncated to 31 characters). */
int64_t emu_compute(struct emu_dev *d, const char *name, double flops, double bytes);

/* The roofline duration of such a kernel on d, without charging it. */
int64_t emu_compute_cost(const struct emu_dev *d, double flops, double bytes);

/* Charges batch GEMMs C (m, n) = A (m, k) B (k, n) moving bytes, with extra_flops of an
 * epilogue (a bias): 2 m n k batch + extra_flops FLOPs. */
int64_t emu_gemm(struct emu_dev *d, const char *name, double batch, double m, double n, double k,
		 double extra_flops, double bytes);
/* Charges a fused attention kernel of flops and bytes; key_flops is what one more key
 * would add to every row it computes (its rows x a (query, key) pair's FLOPs), which the
 * calibrated model charges fused_keys times over for the rows' own work (topo.h). */
int64_t emu_fused(struct emu_dev *d, const char *name, double flops, double key_flops,
		  double bytes);

/* The SMs d's later GEMMs leave to communication kernels beside them, as Transformer
 * Engine's overlapped GEMMs with set_sm_margin (cuBLAS given sms - margin SMs): the
 * calibrated model's tiles are dealt to the rest; collectives posted meanwhile take no SM
 * share at their wait (coll.h). The roofline has no SMs and ignores it. 0 at each run's
 * start; at most the preset's SMs less one. Returns the previous margin. */
int emu_set_sm_margin(struct emu_dev *d, int sms);

/* Whether d's cost model is the calibrated one (the kernels a model launches may be
 * charged apart under it). */
int emu_cost_calibrated(const struct emu_dev *d);

/* FLOPs and virtual time charged on d by emu_compute since the run began. */
double emu_flops(const struct emu_dev *d);
int64_t emu_compute_ns(const struct emu_dev *d);

/* The compute stream's cursor: the device's "now". */
int64_t emu_now(const struct emu_dev *d);

/* The cursor of stream s. If an op on s still waits for other devices to arrive, waits
 * for them first (returns a negative enum emu_err if that fails). */
int64_t emu_stream_time(struct emu_dev *d, enum emu_stream s);

/* Records an event at the current end of stream s. 0 or a negative enum emu_err. */
int emu_event_record(struct emu_dev *d, enum emu_stream s, struct emu_event *ev);
/* Makes stream s wait for ev: nothing later on s starts before ev.t. */
void emu_stream_wait_event(struct emu_dev *d, enum emu_stream s, const struct emu_event *ev);

/* Moves stream s forward to t if it is behind (an idle wait, shown as nothing). */
void emu_stream_advance(struct emu_dev *d, enum emu_stream s, int64_t t);

/* With pacing on, sleeps until the wall clock has caught up with d's virtual clock. */
void emu_pace(struct emu_dev *d);

#endif
