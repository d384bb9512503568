/* par/tpo: Megatron-LM's --tp-comm-overlap, Transformer Engine's overlap of the
 * sequence-parallel collectives with the GEMMs beside them (its userbuffers; the methods
 * and their defaults of transformer_engine/pytorch/module/base.py, initialize_ub, and the
 * loops of common/comm_gemm_overlap/comm_gemm_overlap.cpp). Megatron allows it only with
 * sequence parallelism: every all-gather and reduce-scatter of a layer is fused into a
 * GEMM, by one of three methods:
 *
 *   ring exchange (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; TE's split_overlap_ag)
 *     the all-gather before a GEMM on the gathered rows, as t steps round the tp ring:
 *     step i multiplies the chunk of Ml rows in hand (this rank's first, then the one
 *     from i ranks before) while the copy engines send it to the next rank and receive
 *     the following one from the previous; the next step waits for that receive. No SMs
 *     are taken: the sends are copies. par_tpo_ag.
 *   pipeline (proj_fprop, fc2_fprop; TE's split_overlap_rs)
 *     a row-parallel GEMM and the reduce-scatter of its output, the output's columns in
 *     num_splits chunks: each chunk's GEMM on the SMs less num_sm (set_sm_margin), then
 *     the chunk's reduce-scatter posted on the num_sm left, under the next chunk's GEMM;
 *     the last one's exposed. Or, as a ring exchange (CommOverlapP2P's), each rank's rows
 *     computed in turn and sent to their owner, who sums them. par_tpo_rs.
 *   bulk (qkv_dgrad, fc1_dgrad, qkv_wgrad, fc1_wgrad)
 *     a whole collective beside one GEMM: the LayerNorm output's rows gathered again
 *     under the input gradient's GEMM, and that gradient's reduce-scatter under the
 *     weight gradient's, which pemu's sequence parallelism already does (par/sp.h);
 *     here the GEMMs on the SMs less num_sm and the collectives on those (set_sm_margin,
 *     TE's default for bulk), or the collectives taking num_sm of the GEMMs' SMs,
 *     par_tpo_bulk.
 * The collectives on the num_sm SMs are timed as NCCL's (the SMs taken as enough for
 * their bandwidth), the rings' sends on the copy engines' streams (coll_use_copy_engines),
 * beside a pipeline's sends. Each GEMM's method and SMs are m->pc.tpo_cfg's (par/model.h:
 * TE's defaults, or --tp-comm-overlap-cfg's file, cmd/cli_tpo.c).
 *
 * The data are those of sequence parallelism (the same GEMMs on row or column blocks, the
 * same sums in the same order), so losses and weights match a run without the flag to
 * rounding (BLAS may round a block's GEMM otherwise than the whole's); the clock differs.
 * The dense MLP overlaps its fc and fc2; the chunked and MoE MLPs keep sequence
 * parallelism's collectives, as Megatron's MoE experts do. */
#ifndef PEMU_PAR_TPO_H
#define PEMU_PAR_TPO_H

#include <stddef.h>

#include "par/internal.h"

/* TE's defaults (get_default_config): a ring exchange on num_sm 1 without a margin, the
 * rest on 16 SMs with one, a pipeline in 4 chunks. */
#define TPO_SPLITS 4
#define TPO_SMS    16

/* The ring exchange of a column-parallel GEMM's input, fused with it (g's settings). rows
 * (Ml, C) are this rank's rows of whole (B T, C), which the ring fills. Forward (dgrad 0):
 * out (B T, N) = whole W^T + b, W (N, C) (linear_fwd). Input gradient (dgrad 1): out
 * (B T, N) += whole W, W (C, N) (linear_bwd_input). 0 or a negative enum emu_err. */
int par_tpo_ag(struct par_model *m, const struct par_tp *c, enum par_tpo_gemm g, int dgrad,
	       const float *rows, float *whole, size_t C, float *out, const float *W,
	       const float *b, int N);

/* A row-parallel GEMM and its reduce-scatter, by g's method: in (B T, K) W^T + b, W (C, K),
 * partial sums (B T, C) summed and scattered into this rank's rows local (Ml, C); *out =
 * local. The pipeline cuts the output's columns into num_splits chunks (kept in partial,
 * chunk after chunk), each chunk's reduce-scatter posted under the next chunk's GEMM; the
 * ring exchange (TE's CommOverlapP2P split_overlap_rs) computes each rank's rows in turn,
 * the others' first, sends each to its owner under the next GEMM, and sums what it
 * receives with its own in the order the reduce-scatter would. */
int par_tpo_rs(struct par_model *m, const struct par_tp *c, struct par_work *w, enum par_tpo_gemm g,
	       const float *in, const float *W, const float *b, int K, size_t C, float *partial,
	       float *local, const float **out);

/* Backward's rows before a ring: w->g names the gathered gradient, which the input
 * gradient's ring (par_tpo_ag on w->gsrc) fills. */
void par_tpo_rows(struct par_work *w);

/* The bulk method's SMs for g's GEMM and the collective beside it (TE's num_sm, and the
 * GEMM's margin if set_sm_margin), or, g < 0 or m without the overlap, none. */
void par_tpo_bulk(struct par_model *m, int g);

/* The work a ring-exchange reduce-scatter needs beyond the pipeline's (Ml, h): t - 1
 * rows of partial sums received, (B T - Ml, h); whether m has one. */
int par_tpo_rs_ring(const struct par_model *m);

#endif
