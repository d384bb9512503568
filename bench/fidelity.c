/* bench/fidelity: how accurate the calibrated cost model is (emu/clock.h, emu/topo.c). Every
 * microbenchmark it was calibrated against or checked with, the measured figure with its
 * source, pemu's figure under --cost-model calibrated and the error: GEMMs (the largest
 * measured, square sizes, transformer shapes), attention's batched GEMMs (the scores' and
 * the context's; OpenXLA's table of 375 H100 GEMMs and batched GEMMs, fidelity_xla.h),
 * memory-bound kernels, fused (flash) attention, and collectives: thirty-five
 * sweeps (8 A100 all-reduce and the 8-H100 ring all-reduce, all-gather and reduce-scatter under
 * nccl-tests -g 8; the 8-H100 NVLS all-reduce, all-gather, reduce-scatter and all-to-all
 * under MPI; 8 H200 timed by PyTorch; all-reduce, all-gather, reduce-scatter and
 * all-to-all on 10 nodes of 1, 2, 4 and 8 H100s, all-to-all on 2 nodes of them, and
 * all-reduce on 2, 4 and 8 nodes of 8 under NCCL's defaults, one split where NVLSTree
 * takes over, all under MPI), 2 GPUs, an
 * H200 ring and between nodes. Sweeps timed by nccl-tests -g 8 are
 * compared with the longer of the launching thread's floor (G8_FLOOR_US) and NCCL's time
 * plus the sweep's offset (fitted); the PyTorch-timed sweep with NCCL's time plus its host
 * path a call (25 us, not fitted); neither ever changes the model. A row says whether the
 * constants were fitted to it ("fit"), so that it only shows the fit, or whether it checks
 * the model ("check"). Writes DIR/fidelity.csv, the table and a line a source (README, "How
 * accurate is the clock"); never fails on accuracy.
 * usage: bench/fidelity [DIR]   (default build/bench/out) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "clock.h"
#include "cluster.h"
#include "coll.h"
#include "fidelity_xla.h"

enum kind { GEMM, MEM, ATTN, ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, SENDRECV };

static const char *const kind_name[] = {"GEMM",       "memcopy",        "attention",  "all-reduce",
					"all-gather", "reduce-scatter", "all-to-all", "send-recv"};

#include "fidelity_xla_coll.h"

struct row {
	const char *what;   /* the microbenchmark */
	const char *preset; /* pemu's cluster */
	enum kind kind;
	/* GEMM m, n, k; MEM bytes moved; ATTN sequence, head dim, 1 forward or 2 forward and
	 * backward (causal; the heads batch, or flash-attention's 16k tokens of hidden 2048); a
	 * collective's bytes (nccl-tests' size: the whole buffer), GPUs, nodes */
	double a, b, c;
	double measured; /* TFLOP/s (GEMM), GB/s (MEM), us (collectives) */
	const char *source;
	int fit; /* the constants were fitted to this row */
	/* the card measured, where it is not the preset's: its ceiling and HBM bandwidth */
	double ceiling, hbm;
	int no_nvls;      /* NCCL_NVLS_ENABLE=0 */
	double offset_us; /* the source's own cost a call beside NCCL's (its launcher) */
	double batch;     /* GEMM: a batched GEMM's count of (m, n, k) products (0: one); ATTN:
			   * sequences x heads (0: flash-attention's benchmark) */
	int g8;           /* timed by nccl-tests -g 8: the launcher's floor (G8_FLOOR_US) */
};

/* A measured sweep: sizes 2^lo, 2^(lo+1), ... bytes, the times in us. */
struct sweep {
	const char *what, *preset, *source;
	enum kind kind;
	int gpus, lo, n, fit, no_nvls;
	double offset_us;
	const double us[32];
	int g8;
	int nodes; /* the nodes the GPUs are spread over evenly (0: one) */
};

/* nccl-tests -g 8 (one thread launches the 8 GPUs' kernels, iterations back to back): a
 * call takes the longer of the thread's launching and the GPUs' work, NCCL's time plus
 * the sweep's offset. The thread's part grows with the channels NCCL launches (a work
 * item and a proxy op each, enqueue.cc), which NCCL picks by the message's size: the
 * 8-H100 sweeps read 34.5-36 us on one or two channels (8 B to 64 KiB), 36.6-38 on 4 to
 * 8 (128-256 KiB), 39-40 on 16 (512 KiB), 40.6-41.7 on 24 (1-4 MiB, all-gather and
 * reduce-scatter, flat while the bytes quadruple). 35.3 us + 0.34 us a channel, fitted
 * with the H100 ring constants (emu/topo.c); the A100 sweep, from 32 KiB, stays above it. */
#define G8_FLOOR_US         35.3
#define G8_FLOOR_CHANNEL_US 0.34

#define MLE  "Bekman, Machine Learning Engineering"
#define MLI  "mli/transformers-benchmarks issue 4 (A800 PCIe, fp16, torch 2.0)"
#define AZ   "Azure/AI-benchmarking-guide ND_A100_v4_results.md (cuBLASLt fp16)"
#define MSC  "microsoft/mscclpp docs/performance-ndmv4.md (NCCL 2.17, MPI, CUDA graph)"
#define TOG  "togethercomputer/together-nccl-tests H100 20260305_220043 (-g 8, Ring)"
#define XXR  "xxrjun/nccl-tests-cluster nccl_N1_G8_cnode3-002.log (MPI, NCCL 2.29)"
#define XXRN "xxrjun/nccl-tests-cluster multi-node 20260129-180219 (MPI, NCCL 2.29)"
/* among 4 GPUs of the same node, in the same single-node run (20260128-145017) as XXR */
#define XXR4 "xxrjun/nccl-tests-cluster nccl_N1_G4_cnode3-002.log (MPI, NCCL 2.29)"
#define WAYNE                                                                                      \
	"waynehacking8/nccl-collectives-bench 38c093e scaling_attributed (-g, NCCL 2.29, "         \
	"NCCL_ALGO=Ring)"
/* NVIDIA/nccl-tests issue 309: nccl-tests under MPI, default NCCL settings, which on
 * several nodes of H100s run NVLSTree, NVIDIA's maintainer says there; its in-place
 * times, the out-of-place column having isolated outliers 3-4x their neighbours (8 B and
 * 256 B, the first sizes after warm-up; 8 MiB on 8 nodes) */
#define I309Q "NVIDIA/nccl-tests issue 309, qoofyk's XE9680s (NCCL 2.26.2, MPI, in-place)"
#define I309V "NVIDIA/nccl-tests issue 309, qoofyk's 4 VMs (NCCL 2.26.2, MPI, in-place)"
#define I309G "NVIDIA/nccl-tests issue 309, gj-aion's 8-node cluster (MPI, in-place)"
#define XXRP                                                                                       \
	"xxrjun/nccl-tests-cluster pairwise 20260128-010702, cnode3-002 and -003 (MPI, NCCL "      \
	"2.29)"
#define A800 0.811, 1.935e12 /* an A800 80GB PCIe: A100 PCIe's ceiling (its MAMF) */
/* Attention kernels (causal, head dim 128), the one Transformer Engine runs on each GPU:
 * on A100 FlashAttention-2, on H100 cuDNN's fused attention, which it picks over
 * FlashAttention on Hopper ("Disabling FlashAttention to give FusedAttention preference
 * on Hopper+", its attention backend selection) and so Megatron-Core runs. The series the
 * constants were fitted to are flash-attention's benchmark (16k tokens of hidden 2048,
 * 512 to 16k a sequence); FlashAttention-2 reaches 0.27-0.33 of peak on H100 (forward and
 * backward, assets/flash2_h100_fwd_bwd_benchmark.png) and FlashAttention-3 0.53-0.62
 * (forward). Checked with Transformer Engine's own benchmark on H100 (its
 * benchmark_attention.py's test_3, 2 sequences of 32 query heads on 4 key-value heads,
 * fwd+bwd 7.4875 ms) and cuDNN 9.19 on H200 (cudnn-frontend's sdpa training benchmark:
 * llama3.1, 64 query heads on 8, one sequence; forward and backward ms). pemu models one
 * kernel, the same law both ways, and no grouped-query saving (FLOPs do not change). */
#define FA2A100                                                                                    \
	"Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png (FlashAttention-2)"
#define CUDNNH100 "Dao-AILab/flash-attention assets/flash3_fp16_fwd.png (cuDNN, fp16, H100 SXM5)"
#define TEH100                                                                                     \
	"NVIDIA/TransformerEngine docs/examples/attention/attention.ipynb "                        \
	"(cuDNN, bf16, H100 80GB HBM3)"
#define CUDNNH200                                                                                  \
	"NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/"     \
	"llama3.1_20260227_034703.csv (cuDNN 9.19, bf16)"
/* TFLOP/s of a forward and backward by the convention above (a forward 4 b h s^2 d / 2,
 * the backward 2.5 of it) from the milliseconds measured: Transformer Engine's test_3 (2
 * x 32 heads, s 8192), and cudnn-frontend's llama3.1 (64 heads) at s of its forward's and
 * backward's */
#define TE_TFLOPS(ms)        (3.5 * 4 * 64 * 128.0 * 8192 * 8192 / 2 / ((ms) / 1e3) / 1e12)
#define H200_TFLOPS(s, f, b) (3.5 * 4 * 64 * 128.0 * (s) * (s) / 2 / (((f) + (b)) / 1e3) / 1e12)
/* Attention's batched GEMMs, torch.bmm in fp16 on a GPU neither source names: A100-class
 * by its date (2022) or by its dense GEMMs in the same file (235-255 TFLOP/s). Issue
 * 83272's reads 1.34 GB a call and is memory-bound: its error is the unnamed card's HBM
 * (+38% against an 80 GB A100's 2.04 TB/s, about +5% against a 40 GB one's 1.555) */
#define PT83272 "pytorch/pytorch issue 83272 (torch.bmm, CUDA 11.6; GPU not named)"
#define XLAH100 "openxla/xla matmul_interpolator_data.h, sm_90, bf16 (median kernel time)"
#define XLACOLL                                                                                    \
	"openxla/xla collective_interpolator_data.h 040b3849, sm_90, F32 (NCCL under XLA, one "    \
	"host of 8)"
#define ELEUTHER                                                                                   \
	"EleutherAI/cookbook benchmarks/sizing/sample_results/transformer.out @0f810f8 "           \
	"(torch.bmm, the slowest of its iterations; GPU not named)"
/* us of a collective of S bytes among n at bus bandwidth B GB/s (nccl-tests' factors) */
#define AR_US(n, S, B) (2.0 * ((n)-1) / (n) * (S) / ((B)*1e3))
#define AG_US(n, S, B) (((double)(n)-1) / (n) * (S) / ((B)*1e3))
#define GIB            1073741824.0

static const struct row rows[] = {
	{"GEMM 1024x10240x5120 bf16 (MAMF)", "dgx-a100", GEMM, 1024, 10240, 5120, 271.2,
	 MLE ", accelerator, MAMF table", 1, 0, 0, 0, 0, 0, 0},
	{"GEMM 2048x2048x13312 bf16 (MAMF)", "dgx-h100", GEMM, 2048, 2048, 13312, 794.5,
	 MLE ", accelerator, MAMF table", 1, 0, 0, 0, 0, 0, 0},
	{"GEMM 512^3 fp16", "dgx-a100", GEMM, 512, 512, 512, 31.5, MLI, 1, A800, 0, 0, 0, 0},
	{"GEMM 2048^3 fp16", "dgx-a100", GEMM, 2048, 2048, 2048, 192.5, MLI, 0, A800, 0, 0, 0, 0},
	{"GEMM 8192^3 fp16", "dgx-a100", GEMM, 8192, 8192, 8192, 215.3, MLI, 0, A800, 0, 0, 0, 0},
	{"GEMM 1024^3, A100 SXM", "dgx-a100", GEMM, 1024, 1024, 1024, 119.4, AZ, 1, 0, 0, 0, 0, 0,
	 0},
	{"GEMM 2048^3, A100 SXM", "dgx-a100", GEMM, 2048, 2048, 2048, 221.8, AZ, 1, 0, 0, 0, 0, 0,
	 0},
	{"GEMM 4096^3, A100 SXM", "dgx-a100", GEMM, 4096, 4096, 4096, 228.0, AZ, 1, 0, 0, 0, 0, 0,
	 0},
	{"GEMM 8192^3, A100 SXM", "dgx-a100", GEMM, 8192, 8192, 8192, 253.7, AZ, 1, 0, 0, 0, 0, 0,
	 0},
	{"GEMM 16384^3, A100 SXM", "dgx-a100", GEMM, 16384, 16384, 16384, 256.5, AZ, 1, 0, 0, 0, 0,
	 0, 0},
	{"GEMM 1024x2145x1024, A100 SXM", "dgx-a100", GEMM, 1024, 2145, 1024, 132.8, AZ, 1, 0, 0, 0,
	 0, 0, 0},
	{"GEMM 6144x12288x12288, A100 SXM", "dgx-a100", GEMM, 6144, 12288, 12288, 250.8, AZ, 1, 0,
	 0, 0, 0, 0, 0},
	{"GEMM 802816x192x768, A100 SXM", "dgx-a100", GEMM, 802816, 192, 768, 157.8, AZ, 1, 0, 0, 0,
	 0, 0, 0},
	{"BMM scores Q K^T 64 x 2048x2048x256", "dgx-a100", GEMM, 2048, 2048, 256, 130.2, ELEUTHER,
	 0, 0, 0, 0, 0, 64, 0},
	{"BMM context P V 64 x 2048x256x2048", "dgx-a100", GEMM, 2048, 256, 2048, 219.0, ELEUTHER,
	 0, 0, 0, 0, 0, 64, 0},
	{"BMM context P V 512 x 1024x128x1024", "dgx-a100", GEMM, 1024, 128, 1024, 132.5, PT83272,
	 0, 0, 0, 0, 0, 512, 0},
	{"memcopy, A100 40GB (1555 GB/s)", "dgx-a100", MEM, 1e9, 0, 0, 1355,
	 "PTsolvers gpu-workshop-JuliaCon23 issue 7", 1, 0, 1.555e12, 0, 0, 0, 0},
	{"elementwise, A800 80GB PCIe", "dgx-a100", MEM, 1e9, 0, 0, 1727, MLI, 1, A800, 0, 0, 0, 0},
	{"flash attention fwd+bwd, causal, d 128, s 512, A100", "dgx-a100", ATTN, 512, 128, 2, 99,
	 FA2A100, 1, 0, 0, 0, 0, 0, 0},
	{"flash attention fwd+bwd, causal, d 128, s 1k, A100", "dgx-a100", ATTN, 1024, 128, 2, 133,
	 FA2A100, 1, 0, 0, 0, 0, 0, 0},
	{"flash attention fwd+bwd, causal, d 128, s 2k, A100", "dgx-a100", ATTN, 2048, 128, 2, 155,
	 FA2A100, 1, 0, 0, 0, 0, 0, 0},
	{"flash attention fwd+bwd, causal, d 128, s 4k, A100", "dgx-a100", ATTN, 4096, 128, 2, 173,
	 FA2A100, 1, 0, 0, 0, 0, 0, 0},
	{"flash attention fwd+bwd, causal, d 128, s 8k, A100", "dgx-a100", ATTN, 8192, 128, 2, 182,
	 FA2A100, 1, 0, 0, 0, 0, 0, 0},
	{"flash attention fwd+bwd, causal, d 128, s 16k, A100", "dgx-a100", ATTN, 16384, 128, 2,
	 189, FA2A100, 1, 0, 0, 0, 0, 0, 0},
	{"fused attention fwd, causal, d 128, s 512, H100", "dgx-h100", ATTN, 512, 128, 1, 315,
	 CUDNNH100, 1, 0, 0, 0, 0, 0, 0},
	{"fused attention fwd, causal, d 128, s 1k, H100", "dgx-h100", ATTN, 1024, 128, 1, 410,
	 CUDNNH100, 1, 0, 0, 0, 0, 0, 0},
	{"fused attention fwd, causal, d 128, s 2k, H100", "dgx-h100", ATTN, 2048, 128, 1, 484,
	 CUDNNH100, 1, 0, 0, 0, 0, 0, 0},
	{"fused attention fwd, causal, d 128, s 4k, H100", "dgx-h100", ATTN, 4096, 128, 1, 518,
	 CUDNNH100, 1, 0, 0, 0, 0, 0, 0},
	{"fused attention fwd, causal, d 128, s 8k, H100", "dgx-h100", ATTN, 8192, 128, 1, 529,
	 CUDNNH100, 1, 0, 0, 0, 0, 0, 0},
	{"fused attention fwd, causal, d 128, s 16k, H100", "dgx-h100", ATTN, 16384, 128, 1, 539,
	 CUDNNH100, 1, 0, 0, 0, 0, 0, 0},
	{"fused attention fwd+bwd, causal, 2 x 32 heads, d 128, s 8k, H100", "dgx-h100", ATTN, 8192,
	 128, 2, TE_TFLOPS(7.4875), TEH100, 0, 0, 0, 0, 0, 64, 0},
	{"fused attention fwd+bwd, causal, 64 heads, d 128, s 2k, H200", "dgx-h200", ATTN, 2048,
	 128, 2, H200_TFLOPS(2048, 0.142, 0.464), CUDNNH200, 0, 0, 0, 0, 0, 64, 0},
	{"fused attention fwd+bwd, causal, 64 heads, d 128, s 4k, H200", "dgx-h200", ATTN, 4096,
	 128, 2, H200_TFLOPS(4096, 0.465, 1.45), CUDNNH200, 0, 0, 0, 0, 0, 64, 0},
	{"fused attention fwd+bwd, causal, 64 heads, d 128, s 8k, H200", "dgx-h200", ATTN, 8192,
	 128, 2, H200_TFLOPS(8192, 1.708, 5.083), CUDNNH200, 0, 0, 0, 0, 0, 64, 0},
	{"fused attention fwd+bwd, causal, 64 heads, d 128, s 16k, H200", "dgx-h200", ATTN, 16384,
	 128, 2, H200_TFLOPS(16384, 6.531, 19.002), CUDNNH200, 0, 0, 0, 0, 0, 64, 0},
	{"fused attention fwd+bwd, causal, 64 heads, d 128, s 32k, H200", "dgx-h200", ATTN, 32768,
	 128, 2, H200_TFLOPS(32768, 25.566, 75.688), CUDNNH200, 0, 0, 0, 0, 0, 64, 0},
	{"all-reduce 8 B, 2 A100", "dgx-a100", ALLREDUCE, 8, 2, 1, 10,
	 "NVIDIA/nccl-tests issue 123", 0, 0, 0, 0, 0, 0, 0},
	{"all-reduce 1 KiB, 8 A100", "dgx-a100", ALLREDUCE, 1024, 8, 1, 16.96, MSC, 1, 0, 0, 0, 0,
	 0, 0},
	{"all-gather 1 KiB, 8 A100", "dgx-a100", ALLGATHER, 1024, 8, 1, 12.53, MSC, 1, 0, 0, 0, 0,
	 0, 0},
	{"all-reduce 1 GiB, 8 A100", "dgx-a100", ALLREDUCE, GIB, 8, 1, AR_US(8, GIB, 231.45), MSC,
	 1, 0, 0, 0, 0, 0, 0},
	{"all-gather 1 GiB, 8 A100", "dgx-a100", ALLGATHER, GIB, 8, 1, AG_US(8, GIB, 253.59), MSC,
	 1, 0, 0, 0, 0, 0, 0},
	{"all-reduce 16 GiB, 8 H200 ring", "dgx-h200", ALLREDUCE, 16 * GIB, 8, 1,
	 /* 367.61 GB/s bus bandwidth */ AR_US(8, 16 * GIB, 367.61),
	 MLE ", network, NCCL_NVLS_ENABLE=0", 1, 0, 0, 1, 0, 0, 0},
	{"all-reduce 1 KiB, 2 nodes x 8 A100 (HDR)", "dgx-a100", ALLREDUCE, 1024, 16, 2, 35.85, MSC,
	 1, 0, 0, 0, 0, 0, 0},
	{"all-gather 1 KiB, 2 nodes x 8 A100", "dgx-a100", ALLGATHER, 1024, 16, 2, 33.74, MSC, 1, 0,
	 0, 0, 0, 0, 0},
	{"all-reduce 1 GiB, 2 nodes x 8 A100", "dgx-a100", ALLREDUCE, GIB, 16, 2,
	 AR_US(16, GIB, 183.82), MSC, 1, 0, 0, 0, 0, 0, 0},
	{"all-reduce 4 GiB, 2 nodes x 8 A100", "dgx-a100", ALLREDUCE, 4 * GIB, 16, 2,
	 AR_US(16, 4 * GIB, 188.18), MSC, 1, 0, 0, 0, 0, 0, 0},
	{"all-gather 1 GiB, 2 nodes x 8 A100", "dgx-a100", ALLGATHER, GIB, 16, 2,
	 AG_US(16, GIB, 177.05), MSC, 1, 0, 0, 0, 0, 0, 0},
	{"all-gather 4 GiB, 2 nodes x 8 A100", "dgx-a100", ALLGATHER, 4 * GIB, 16, 2,
	 AG_US(16, 4 * GIB, 186.01), MSC, 1, 0, 0, 0, 0, 0, 0},
	{"all-reduce 1 KiB, 2 nodes x 1 A100", "dgx-a100", ALLREDUCE, 1024, 2, 2, 21.27, MSC, 1, 0,
	 0, 0, 0, 0, 0},
	{"all-gather 1 KiB, 2 nodes x 1 A100", "dgx-a100", ALLGATHER, 1024, 2, 2, 16.08, MSC, 1, 0,
	 0, 0, 0, 0, 0},
	{"all-reduce 1 GiB, 2 nodes x 1 A100", "dgx-a100", ALLREDUCE, GIB, 2, 2,
	 AR_US(2, GIB, 18.65), MSC, 0, 0, 0, 0, 0, 0, 0},
	{"all-gather 1 GiB, 2 nodes x 1 A100", "dgx-a100", ALLGATHER, GIB, 2, 2,
	 AG_US(2, GIB, 15.84), MSC, 0, 0, 0, 0, 0, 0, 0},
	{"all-reduce 1 KiB, 2 nodes x 8 H20 (NDR)", "h20", ALLREDUCE, 1024, 16, 2, 47,
	 "NVIDIA/nccl issue 1244 (NVLSTree)", 0, 0, 0, 0, 0, 0, 0},
};

static const struct sweep sweeps[] = {
	/* nccl-tests -g 8: one thread launches the 8 GPUs' kernels, 20 us a call (fitted); the
	 * launcher's floor (G8_FLOOR_US) stays below this sweep's times */
	{"all-reduce, 8 A100",
	 "dgx-a100",
	 MLE ", network, nccl-tests sweep on 8 A100 (-g 8)",
	 ALLREDUCE,
	 8,
	 15,
	 20,
	 1,
	 0,
	 20,
	 {43.83, 46.80, 51.76,  61.38,  80.40,  101.9,  101.4, 101.5, 133.5, 276.6,
	  424.0, 684.6, 1327.6, 2420.6, 4218.4, 8203.9, 16240, 32136, 64074, 127997},
	 1,
	 1},
	/* -g 8 again: 6 us a call (fitted) and the launcher's floor (G8_FLOOR_US); below 1 MiB
	 * the sweep is that floor alone, 34.5-40 us from 8 B to 512 KiB, and says nothing of
	 * NCCL */
	{"all-reduce ring, 8 H100",
	 "dgx-h100",
	 TOG,
	 ALLREDUCE,
	 8,
	 20,
	 14,
	 1,
	 1,
	 6,
	 {46.52, 42.06, 53.09, 80.49, 126.62, 213.96, 368.67, 702.55, 1351.28, 2641.67, 5218.59,
	  10329.0, 20495.8, 40838.9},
	 1,
	 1},
	{"all-gather, 8 H100",
	 "dgx-h100",
	 TOG,
	 ALLGATHER,
	 8,
	 20,
	 14,
	 1,
	 1,
	 6,
	 {41.67, 41.48, 41.34, 47.01, 70.80, 125.45, 210.89, 393.52, 732.87, 1399.34, 2726.97,
	  5363.19, 10579.3, 21001.0},
	 1,
	 1},
	{"reduce-scatter, 8 H100",
	 "dgx-h100",
	 TOG,
	 REDUCESCATTER,
	 8,
	 20,
	 14,
	 1,
	 1,
	 6,
	 {40.60, 41.66, 41.70, 50.44, 71.97, 118.78, 206.45, 381.43, 718.20, 1393.15, 2711.56,
	  5353.24, 10450.3, 20695.6},
	 1,
	 1},
	{"all-reduce NVLS, 8 H100",
	 "dgx-h100",
	 XXR,
	 ALLREDUCE,
	 8,
	 25,
	 10,
	 1,
	 0,
	 0,
	 {182.87, 313.66, 564.78, 1081.14, 2115.28, 4000.82, 7891.00, 15668.1, 31226.8, 62340.7},
	 0,
	 1},
	{"all-gather, 8 H100 (MPI)",
	 "dgx-h100",
	 XXR,
	 ALLGATHER,
	 8,
	 25,
	 10,
	 1,
	 0,
	 0,
	 {123.44, 205.21, 382.20, 721.26, 1389.46, 2719.60, 5355.86, 10562.9, 20928.4, 41542.0},
	 0,
	 1},
	{"reduce-scatter, 8 H100 (MPI)",
	 "dgx-h100",
	 XXR,
	 REDUCESCATTER,
	 8,
	 25,
	 10,
	 1,
	 0,
	 0,
	 {111.83, 197.37, 380.31, 719.67, 1399.96, 2741.51, 5380.08, 10561.5, 20799.7, 41211.4},
	 0,
	 1},
	/* nccl-tests' sendrecv among 8 and among 4 H100s of XXR's node (each GPU sends its
	 * buffer to the next and receives the previous one's), fitted: a send's channel's
	 * bandwidth (emu/topo.c, p2p_ch_bw) with NCCL's split of a send over channels by its
	 * communicator's size (emu/coll_p2p.c); the other 9 nodes' runs within 1.6% of these */
	{"send-recv, 8 H100 (MPI)",
	 "dgx-h100",
	 XXR,
	 SENDRECV,
	 8,
	 25,
	 10,
	 1,
	 0,
	 0,
	 {422.19, 820.17, 825.74, 896.40, 1509.11, 2974.51, 5904.41, 11746.6, 23403.1, 46779.2},
	 0,
	 1},
	{"send-recv, 4 H100 (MPI)",
	 "dgx-h100",
	 XXR4,
	 SENDRECV,
	 4,
	 25,
	 10,
	 1,
	 0,
	 0,
	 {225.03, 426.49, 824.26, 896.55, 1512.24, 2974.26, 5896.11, 11729.4, 23415.8, 46755.7},
	 0,
	 1},
	/* nccl-tests' sendrecv among 8 A100s, -g 8 (NVLink3, "600GB/s bi-directional"; NCCL's
	 * version not given), checks: NVLink3 models no p2p channels (emu/topo.c), so pemu
	 * sends at the ring's 234 GB/s, where these run at 110 GB/s at 128 MiB (on 8 channels
	 * by the H100's law) and 189-195 from 256 MiB */
	{"send-recv, 8 A100",
	 "dgx-a100",
	 "li-plus/playground cuda/nccl.md (nccl-tests sendrecv_perf -g 8, out-of-place)",
	 SENDRECV,
	 8,
	 27,
	 4,
	 0,
	 0,
	 20,
	 {1211.2, 1423.3, 2785.4, 5503.4},
	 1,
	 1},
	/* Among 4 H100s of XXR's node: all-gather and reduce-scatter fit the ring's loop
	 * (emu/topo.c: from 128 MiB, with the other 9 nodes' runs; their 32 and 64 MiB rows
	 * come with the sweep), all-reduce under NCCL's defaults (which among 4 run the ring:
	 * its model, coll_time.c) and all-to-all checks (NCCL's sends to every member at once:
	 * the send's law, emu/coll_time.c, p2p_peers_ns) */
	{"all-gather, 4 H100 (MPI)",
	 "dgx-h100",
	 XXR4,
	 ALLGATHER,
	 4,
	 25,
	 10,
	 1,
	 0,
	 0,
	 {109.62, 191.09, 348.19, 657.73, 1269.28, 2474.09, 4849.65, 9536.49, 18515.0, 37051.9},
	 0,
	 1},
	{"reduce-scatter, 4 H100 (MPI)",
	 "dgx-h100",
	 XXR4,
	 REDUCESCATTER,
	 4,
	 25,
	 10,
	 1,
	 0,
	 0,
	 {104.79, 192.24, 354.10, 674.96, 1305.59, 2497.20, 4835.50, 9434.79, 18519.2, 36407.4},
	 0,
	 1},
	{"all-reduce, 4 H100 (MPI)",
	 "dgx-h100",
	 XXR4,
	 ALLREDUCE,
	 4,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {171.88, 325.00, 614.21, 1178.37, 2308.64, 4508.42, 8966.22, 17673.1, 35151.6, 70128.7},
	 0,
	 1},
	{"all-to-all, 4 H100 (MPI)",
	 "dgx-h100",
	 XXR4,
	 ALLTOALL,
	 4,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {109.93, 189.00, 344.64, 632.94, 1270.12, 2386.68, 4590.38, 9083.76, 18102.1, 36103.7},
	 0,
	 1},
	/* The ring all-reduce among 2, 4 and 6 H100s of one HGX (GPUs 2-7, the first busy),
	 * 256 MiB to 8 GiB: checks of the ring's loop; -g, taken as TOG's launcher */
	{"all-reduce ring, 2 H100",
	 "dgx-h100",
	 WAYNE,
	 ALLREDUCE,
	 2,
	 28,
	 6,
	 0,
	 1,
	 6,
	 {892.85, 1710.09, 3291.93, 6352.70, 12451.8, 24713.4},
	 1,
	 1},
	{"all-reduce ring, 4 H100",
	 "dgx-h100",
	 WAYNE,
	 ALLREDUCE,
	 4,
	 28,
	 6,
	 0,
	 1,
	 6,
	 {1186.34, 2320.28, 4557.01, 8937.88, 17737.0, 35308.1},
	 1,
	 1},
	{"all-reduce ring, 6 H100",
	 "dgx-h100",
	 WAYNE,
	 ALLREDUCE,
	 6,
	 28,
	 6,
	 0,
	 1,
	 6,
	 {1303.96, 2539.22, 4987.58, 9887.62, 19594.2, 39015.0},
	 1,
	 1},
	/* the times: size / the algorithm bandwidth published (NCCL 2.27.7, torch 2.9.1; by
	 * the page, NCCL ran the ring with LL up to 1 MiB and NVLS from 2 MiB). The script as
	 * it was then (stas00/ml-engineering c53741b, timed_allreduce) timed one call on an
	 * idle GPU: barrier, start event, dist.all_reduce, end event. The start event fires
	 * at once, so the interval holds PyTorch's host path to the kernel's launch, which a
	 * later revision of the script puts at "some 20-30us" a call (and hides by queueing
	 * calls behind a busy wait): 25 us, the middle of that, not fitted. The sweep's own
	 * floor agrees: 38-40 us flat from 32 KiB to 512 KiB, messages NCCL's own model
	 * (tuning.cc, ring LL) gives 15-22 us. */
	{"all-reduce, 8 H200",
	 "dgx-h200",
	 MLE ", network/benchmarks/results/all-reduce-8xH200.md (torch)",
	 ALLREDUCE,
	 8,
	 20,
	 15,
	 0,
	 0,
	 25,
	 {45.95, 56.88, 68.5, 94.39, 133.5, 212.9, 338.9, 584.4, 1077, 2086, 4053, 8010, 15890,
	  31480, 62340},
	 0,
	 1},
	/* 10 nodes of 8 H100s (NVLink4, a 400 Gb/s NDR NIC a GPU), 1, 2, 4 or 8 GPUs of each
	 * node, one process a GPU (MPI), NCCL 2.29's default algorithms (not logged);
	 * out-of-place times, which differ from the in-place ones by up to 27% (8 GPUs a
	 * node, reduce-scatter at 64 MiB). No constant was fitted to them. The 8-GPU sweeps
	 * are not monotonic (all-gather 841 us at 128 MiB, 1766 at 256 MiB, 2426 at 512 MiB) */
	{"all-reduce, 10 nodes x 1 H100",
	 "dgx-h100",
	 XXRN,
	 ALLREDUCE,
	 10,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {1405.25, 2542.43, 5031.02, 10061.7, 19936.5, 39744.4, 79277.6, 158724, 316930, 632480},
	 0,
	 10},
	{"all-gather, 10 nodes x 1 H100",
	 "dgx-h100",
	 XXRN,
	 ALLGATHER,
	 10,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {721.94, 1329.46, 2607.15, 5217.67, 10310.5, 20609.1, 40966.8, 81539.4, 161737, 321112},
	 0,
	 10},
	{"reduce-scatter, 10 nodes x 1 H100",
	 "dgx-h100",
	 XXRN,
	 REDUCESCATTER,
	 10,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {710.67, 1319.48, 2585.19, 5150.68, 10178.9, 20189.8, 39997.6, 80154.9, 160634, 316586},
	 0,
	 10},
	{"all-reduce, 10 nodes x 2 H100",
	 "dgx-h100",
	 XXRN,
	 ALLREDUCE,
	 20,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {787.43, 1451.19, 2832.27, 5270.4, 10454.1, 20875.4, 41602.8, 83034, 166421, 333590},
	 0,
	 10},
	{"all-gather, 10 nodes x 2 H100",
	 "dgx-h100",
	 XXRN,
	 ALLGATHER,
	 20,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {417.29, 752.33, 1378.8, 2693.54, 5292.75, 10500.9, 20852.2, 41567.3, 83441.8, 167723},
	 0,
	 10},
	{"reduce-scatter, 10 nodes x 2 H100",
	 "dgx-h100",
	 XXRN,
	 REDUCESCATTER,
	 20,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {422.38, 753.21, 1384.45, 2877.23, 5274.26, 10549.7, 20830.2, 41676.9, 83055.8, 166835},
	 0,
	 10},
	{"all-reduce, 10 nodes x 4 H100",
	 "dgx-h100",
	 XXRN,
	 ALLREDUCE,
	 40,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {780.92, 1064.17, 1752.1, 3194.58, 5937.92, 10728.4, 21397.3, 43171.7, 85285.4, 170665},
	 0,
	 10},
	{"all-gather, 10 nodes x 4 H100",
	 "dgx-h100",
	 XXRN,
	 ALLGATHER,
	 40,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {362.42, 494.83, 794.22, 1551.54, 2753.67, 5421.99, 10746.7, 21422.6, 43085, 86184.2},
	 0,
	 10},
	{"reduce-scatter, 10 nodes x 4 H100",
	 "dgx-h100",
	 XXRN,
	 REDUCESCATTER,
	 40,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {397.39, 491.84, 795.96, 1479, 2750.23, 5416.79, 10740.6, 21438.8, 42704, 85733.1},
	 0,
	 10},
	{"all-reduce, 10 nodes x 8 H100",
	 "dgx-h100",
	 XXRN,
	 ALLREDUCE,
	 80,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {798.52, 939.84, 1250.59, 1888.93, 3327.27, 6149.19, 12586.1, 27023.1, 53632.3, 105854},
	 0,
	 10},
	{"all-gather, 10 nodes x 8 H100",
	 "dgx-h100",
	 XXRN,
	 ALLGATHER,
	 80,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {682.2, 736.65, 840.85, 1765.69, 2426.01, 4001.42, 6976.78, 13541.4, 26724.4, 52314.1},
	 0,
	 10},
	{"reduce-scatter, 10 nodes x 8 H100",
	 "dgx-h100",
	 XXRN,
	 REDUCESCATTER,
	 80,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {689.11, 885.81, 1058.78, 1820.73, 2472.99, 3786.91, 6787.9, 13502, 26865, 52458.7},
	 0,
	 10},
	{"all-to-all, 8 H100 (MPI)",
	 "dgx-h100",
	 XXR,
	 ALLTOALL,
	 8,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {124.79, 215.51, 393.32, 777.88, 1511.21, 2830, 5474.24, 10920.9, 21708.4, 43193.3},
	 0,
	 1},
	{"all-to-all, 2 nodes x 1 H100",
	 "dgx-h100",
	 XXRP,
	 ALLTOALL,
	 2,
	 32,
	 3,
	 0,
	 0,
	 0,
	 {55165.9, 110523, 221176},
	 0,
	 2},
	/* the same pair's sendrecv, a check: a send across nodes at the NIC's bus bandwidth
	 * (43.8 GB/s measured; pemu 47.0) */
	{"send-recv, 2 nodes x 1 H100",
	 "dgx-h100",
	 XXRP,
	 SENDRECV,
	 2,
	 32,
	 3,
	 0,
	 0,
	 0,
	 {98169.3, 196355, 392397},
	 0,
	 2},
	{"all-to-all, 2 nodes x 2 H100",
	 "dgx-h100",
	 XXRP,
	 ALLTOALL,
	 4,
	 32,
	 3,
	 0,
	 0,
	 0,
	 {44765.4, 89464.2, 178619},
	 0,
	 2},
	{"all-to-all, 2 nodes x 4 H100",
	 "dgx-h100",
	 XXRP,
	 ALLTOALL,
	 8,
	 32,
	 3,
	 0,
	 0,
	 0,
	 {45401.4, 89995.2, 181499},
	 0,
	 2},
	{"all-to-all, 2 nodes x 8 H100",
	 "dgx-h100",
	 XXRP,
	 ALLTOALL,
	 16,
	 32,
	 3,
	 0,
	 0,
	 0,
	 {43852.6, 87635.7, 174994},
	 0,
	 2},
	{"all-to-all, 10 nodes x 1 H100",
	 "dgx-h100",
	 XXRN,
	 ALLTOALL,
	 10,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {792.6, 1441.35, 2795.45, 5482.62, 10863.4, 21624.7, 43176.9, 86308.9, 172538, 346210},
	 0,
	 10},
	{"all-to-all, 10 nodes x 2 H100",
	 "dgx-h100",
	 XXRN,
	 ALLTOALL,
	 20,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {811.34, 1434.53, 2798.17, 5485.89, 10836.4, 21499.9, 42962, 86026.4, 171558, 341262},
	 0,
	 10},
	{"all-to-all, 10 nodes x 4 H100",
	 "dgx-h100",
	 XXRN,
	 ALLTOALL,
	 40,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {975.05, 1728.72, 2964.53, 5622.04, 10753.6, 21521, 42158.2, 84912.8, 168877, 338186},
	 0,
	 10},
	{"all-to-all, 10 nodes x 8 H100",
	 "dgx-h100",
	 XXRN,
	 ALLTOALL,
	 80,
	 25,
	 10,
	 0,
	 0,
	 0,
	 {970.33, 1662.12, 2944.85, 5334.88, 10656, 21159.9, 42267.6, 84157.5, 167847, 336737},
	 0,
	 10},
	{"all-reduce, 2 nodes x 8 H100 (IB NDR)",
	 "dgx-h100",
	 I309Q,
	 ALLREDUCE,
	 16,
	 3,
	 23,
	 0,
	 0,
	 0,
	 {24.70, 24.93, 25.02, 25.21, 25.62, 25.90, 26.31, 26.65, 28.22, 29.72, 31.67, 32.24,
	  33.47, 33.08, 38.12, 46.79, 70.33, 71.47, 76.62, 94.22, 131.4, 183.8, 267.7},
	 0,
	 2},
	/* the same sweep from 64 MiB, where NCCL's NVLSTree runs: its ramp (emu/topo.c) fitted
	 * here, and checked on gj-aion's 2 nodes below */
	{"all-reduce, 2 nodes x 8 H100 (IB NDR), NVLSTree",
	 "dgx-h100",
	 I309Q,
	 ALLREDUCE,
	 16,
	 26,
	 9,
	 1,
	 0,
	 0,
	 {466.3, 749.2, 1276.0, 2355.1, 4470.2, 8717.2, 17284, 34365, 68668},
	 0,
	 2},
	{"all-reduce, 4 nodes x 8 H100 (VMs)",
	 "dgx-h100",
	 I309V,
	 ALLREDUCE,
	 32,
	 3,
	 32,
	 0,
	 0,
	 0,
	 {34.75, 34.45, 35.55,  34.92,  35.04,  35.82,  36.72, 37.10, 40.03, 41.42, 45.55,
	  46.39, 46.79, 47.60,  55.06,  66.86,  72.78,  82.21, 132.2, 154.0, 202.4, 258.3,
	  370.3, 574.4, 1013.1, 1772.4, 3111.7, 5802.8, 11501, 22874, 45573, 91081},
	 0,
	 4},
	{"all-reduce, 2 nodes x 8 H100",
	 "dgx-h100",
	 I309G,
	 ALLREDUCE,
	 16,
	 20,
	 14,
	 0,
	 0,
	 0,
	 {82.98, 93.52, 111.9, 150.5, 202.7, 269.7, 469.6, 751.2, 1290.4, 2371.3, 4503.5, 8777.6,
	  17341, 34514},
	 0,
	 2},
	{"all-reduce, 4 nodes x 8 H100",
	 "dgx-h100",
	 I309G,
	 ALLREDUCE,
	 32,
	 20,
	 14,
	 0,
	 0,
	 0,
	 {93.26, 156.4, 174.2, 256.7, 286.3, 455.5, 615.5, 1043.6, 2204.7, 3617.5, 6532.2, 12840,
	  25537, 51350},
	 0,
	 4},
	{"all-reduce, 8 nodes x 8 H100",
	 "dgx-h100",
	 I309G,
	 ALLREDUCE,
	 64,
	 20,
	 14,
	 0,
	 0,
	 0,
	 {115.7, 143.3, 203.8, 321.4, 373.5, 508.2, 709.2, 1149.5, 2028.1, 3509.4, 7414.5, 13300,
	  26340, 52754},
	 0,
	 8},
};

struct probe {
	const struct row *r;
	int64_t ns;
};

/* An attention row's sequences x heads */
static double attn_heads(const struct row *r)
{
	return r->batch > 0 ? r->batch : 16384 / r->a * (2048 / r->b);
}

static int device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	const struct row *r = p->r;
	int64_t t0;
	int rc;

	switch (r->kind) {
	case GEMM:
		if (emu_dev_id(d) == 0)
			p->ns = emu_gemm(d, "gemm", r->batch > 0 ? r->batch : 1, r->a, r->b, r->c,
					 0,
					 (r->batch > 0 ? r->batch : 1) *
						 (r->a * r->c + r->c * r->b + r->a * r->b) * 2);
		return 0;
	case MEM:
		if (emu_dev_id(d) == 0)
			p->ns = emu_compute(d, "copy", 0, 2 * r->a);
		return 0;
	case ATTN: { /* the model's own charge (attention_flash_charge), bf16 */
		double s = r->a, hd = r->b, heads = attn_heads(r);
		double qk = s * (s + FLASH_ROWS) / 2; /* (s a multiple of FLASH_ROWS) */

		p->ns = attention_flash_charge(d, 0, heads, s, s, qk, (int)hd, 2);
		if (r->c > 1)
			p->ns += attention_flash_charge(d, 1, heads, s, s, qk, (int)hd, 2);
		return 0;
	}
	case SENDRECV: { /* to the next, from the previous, on the communicator of all */
		int n = (int)r->b, i = emu_dev_id(d);
		struct coll_req *rq, *sq;

		coll_set_p2p_comm(d, coll_comm_of_group(d, emu_world(d)));
		t0 = emu_stream_time(d, EMU_STREAM_COMPUTE);
		if (!(rc = coll_irecv(d, (i + n - 1) % n, NULL, (size_t)(r->a / 4), &rq)) &&
		    !(rc = coll_isend(d, (i + 1) % n, NULL, (size_t)(r->a / 4), &sq)) &&
		    !(rc = coll_wait(d, rq)))
			rc = coll_wait(d, sq);
		if (!rc && i == 0)
			p->ns = emu_stream_time(d, EMU_STREAM_COMPUTE) - t0;
		return rc;
	}
	default:
		t0 = emu_stream_time(d, EMU_STREAM_COMM);
		if (r->kind == ALLREDUCE)
			rc = coll_all_reduce(d, emu_world(d), NULL, NULL, (size_t)(r->a / 4),
					     COLL_SUM);
		else if (r->kind == ALLGATHER)
			rc = coll_all_gather(d, emu_world(d), NULL, NULL,
					     (size_t)(r->a / 4 / r->b));
		else if (r->kind == REDUCESCATTER)
			rc = coll_reduce_scatter(d, emu_world(d), NULL, NULL,
						 (size_t)(r->a / 4 / r->b), COLL_SUM);
		else
			rc = coll_all_to_all(d, emu_world(d), NULL, NULL,
					     (size_t)(r->a / 4 / r->b));
		if (!rc && emu_dev_id(d) == 0)
			p->ns = emu_stream_time(d, EMU_STREAM_COMM) - t0;
		return rc;
	}
}

/* pemu's figure for r, in r's unit. */
static double predict(const struct row *r)
{
	struct emu_config cfg;
	struct emu_cluster *c;
	struct probe p = {r, 0};

	if (emu_config_default(&cfg, r->preset))
		abort();
	cfg.cost = EMU_COST_CALIBRATED;
	cfg.dry_run = 1;
	cfg.ndev = r->kind >= ALLREDUCE ? (int)r->b : 1;
	cfg.topo.nodes = r->kind >= ALLREDUCE ? (int)r->c : 1;
	if (r->kind >= ALLREDUCE)
		cfg.topo.gpus_per_node = (int)(r->b / r->c);
	if (r->ceiling > 0)
		cfg.topo.gpu.gemm_ceiling = r->ceiling;
	if (r->hbm > 0)
		cfg.topo.gpu.hbm_bw = r->hbm;
	if (r->no_nvls)
		cfg.topo.link[TOPO_LINK_INTRA].nvls_eff = 0;
	c = emu_cluster_new(&cfg);
	if (emu_cluster_run(c, device, &p)) {
		fprintf(stderr, "bench/fidelity: %s: %s\n", r->what, emu_cluster_report(c));
		exit(1);
	}
	emu_cluster_free(c);
	if (r->kind == GEMM)
		return 2 * r->a * r->b * r->c * (r->batch > 0 ? r->batch : 1) / (p.ns * 1e-9) /
		       1e12;
	if (r->kind == MEM)
		return 2 * r->a / (p.ns * 1e-9) / 1e9;
	if (r->kind == ATTN) /* flash-attention's count: 4 heads s^2 d / 2 a forward */
		return (r->c > 1 ? 3.5 : 1) * 2 * attn_heads(r) * r->a * r->a * r->b /
		       (p.ns * 1e-9) / 1e12;
	if (r->g8) {
		double floor = G8_FLOOR_US +
			       G8_FLOOR_CHANNEL_US * coll_channels(&cfg.topo.link[TOPO_LINK_INTRA],
								   (uint64_t)r->a);

		return fmax(floor, p.ns / 1e3 + r->offset_us);
	}
	return p.ns / 1e3 + r->offset_us;
}

/* A size in bytes as the sweeps print it: 32 KiB, 1 MiB, 16 GiB. */
static void size_name(char *buf, size_t len, double bytes)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB"};
	int u = 0;

	while (bytes >= 1024 && u < 3) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, "%.0f %s", bytes, unit[u]);
}

struct tally {
	int n, within, checks;
	double gemm_err, bmm_lo, bmm_hi, worst_check, worst;
	int ngemm, nbmm;
};

/* Prints and tallies r; its error. */
static double emit(FILE *csv, struct tally *t, const struct row *r)
{
	static const char *const unit[] = {"TFLOP/s", "GB/s", "TFLOP/s", "us",
					   "us",      "us",   "us",      "us"};
	double got = predict(r), err = (got - r->measured) / r->measured;

	printf("| %s | %.4g %s | %.4g | %+.1f%% | %s | %s |\n", r->what, r->measured, unit[r->kind],
	       got, 100 * err, r->fit ? "fit" : "check", r->source);
	fprintf(csv, "\"%s\",%s,%s,%.6g,%.6g,%.4f,%s,\"%s\"\n", r->what, r->preset, unit[r->kind],
		r->measured, got, err, r->fit ? "fit" : "check", r->source);
	t->n++;
	t->within += fabs(err) <= 0.10;
	t->worst = fabs(err) > t->worst ? fabs(err) : t->worst;
	if (r->kind == GEMM && r->batch > 0) {
		t->bmm_lo = t->nbmm++ && t->bmm_lo < err ? t->bmm_lo : err;
		t->bmm_hi = t->nbmm > 1 && t->bmm_hi > err ? t->bmm_hi : err;
	} else if (r->kind == GEMM) {
		t->gemm_err += fabs(err);
		t->ngemm++;
	}
	if (!r->fit) {
		t->checks++;
		t->worst_check = fabs(err) > t->worst_check ? fabs(err) : t->worst_check;
	}
	return err;
}

/* How far apart sources are that measured the same collective on the same shape of
 * cluster (kind, preset, GPUs and nodes, NVLS on or off, both under MPI or XLA with no
 * launcher's cost): at each size both give, the larger time over the smaller. No figure
 * is within 10% of two measurements more than 1.1 / 0.9 apart. The sweeps, and OpenXLA's
 * table as sweeps of its own. */
static void agreement(void)
{
	enum { NSW = sizeof sweeps / sizeof *sweeps, NXC = sizeof xla_coll / sizeof *xla_coll };
	/* a sweep as compared: timed with no launcher's cost (clean) or not */
	struct series {
		const char *what, *preset, *source;
		enum kind kind;
		int gpus, nodes, no_nvls, clean, lo, n;
		const double *us;
	} all[NSW + NXC];
	char names[NXC][64];
	int sizes = 0, apart = 0, tenth = 0;
	double worst = 1;

	for (int i = 0; i < NSW; i++) {
		const struct sweep *w = &sweeps[i];

		all[i] = (struct series){w->what, w->preset, w->source,  w->kind,
					 w->gpus, w->nodes,  w->no_nvls, !w->g8 && !w->offset_us,
					 w->lo,   w->n,      w->us};
	}
	for (int i = 0; i < NXC; i++) { /* (one host, as the single-node sweeps say it) */
		snprintf(names[i], sizeof names[i], "%s, %d H100 (OpenXLA)",
			 kind_name[xla_coll[i].kind], xla_coll[i].gpus);
		all[NSW + i] = (struct series){
			names[i], "dgx-h100", XLACOLL,     xla_coll[i].kind, xla_coll[i].gpus, 1,
			0,        1,          XLA_COLL_LO, XLA_COLL_N,       xla_coll[i].us};
	}
	for (int i = 0; i < NSW + NXC; i++)
		for (int j = i + 1; j < NSW + NXC; j++) {
			const struct series *a = &all[i], *b = &all[j];
			double lo = 0, hi = 0;
			int n = 0, far = 0, over = 0;

			if (a->kind != b->kind || strcmp(a->preset, b->preset) ||
			    a->gpus != b->gpus || a->nodes != b->nodes ||
			    a->no_nvls != b->no_nvls || !a->clean || !b->clean ||
			    !strcmp(a->source, b->source))
				continue;
			for (int k = 0; k < a->n; k++) {
				int kb = a->lo + k - b->lo;
				double r;

				if (kb < 0 || kb >= b->n)
					continue;
				r = a->us[k] > b->us[kb] ? a->us[k] / b->us[kb]
							 : b->us[kb] / a->us[k];
				lo = n && lo < r ? lo : r;
				hi = n && hi > r ? hi : r;
				far += r > 1.1 / 0.9;
				over += r > 1.1;
				n++;
			}
			if (!n)
				continue;
			printf("%s and %s: %d sizes in both, %.0f%% to %.0f%% apart (%d more than "
			       "10%%, %d too far apart for one figure within 10%% of both)\n",
			       a->what, b->what, n, 100 * (lo - 1), 100 * (hi - 1), over, far);
			sizes += n;
			apart += far;
			tenth += over;
			worst = hi > worst ? hi : worst;
		}
	printf("sources measuring the same collective on the same cluster shape: %d sizes in "
	       "two, up to %.0f%% apart, %d more than 10%%, %d too far apart for one figure "
	       "within 10%% of both\n",
	       sizes, 100 * (worst - 1), tenth, apart);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	struct tally all = {0}, xla = {0}, per[sizeof sweeps / sizeof *sweeps] = {{0}},
		     xc[sizeof xla_coll / sizeof *xla_coll] = {{0}};
	double xla_err = 0, xla_lo = 0, xla_hi = 0;
	int nrows = (int)(sizeof rows / sizeof *rows),
	    nsweeps = (int)(sizeof sweeps / sizeof *sweeps);
	char path[4096];
	FILE *csv;

	snprintf(path, sizeof path, "%s/fidelity.csv", dir);
	if (!(csv = fopen(path, "w"))) {
		perror(path);
		return 1;
	}
	fprintf(csv, "what,preset,unit,measured,pemu,error,used,source\n");
	printf("| microbenchmark | measured | pemu | error | | source "
	       "|\n|---|---|---|---|---|---|\n");
	for (int i = 0; i < nrows; i++)
		emit(csv, &all, &rows[i]);
	for (size_t i = 0; i < sizeof xla_h100 / sizeof *xla_h100; i++) {
		char what[96];
		struct row r = {what,
				"dgx-h100",
				GEMM,
				xla_h100[i].m,
				xla_h100[i].n,
				xla_h100[i].k,
				xla_h100[i].tflops,
				XLAH100,
				1,
				0,
				0,
				0,
				0,
				xla_h100[i].b,
				0};
		double err;

		snprintf(what, sizeof what, "GEMM %d x %dx%dx%d, H100", xla_h100[i].b,
			 xla_h100[i].m, xla_h100[i].n, xla_h100[i].k);
		err = emit(csv, &xla, &r);
		xla_err += fabs(err);
		xla_lo = i && xla_lo < err ? xla_lo : err;
		xla_hi = i && xla_hi > err ? xla_hi : err;
	}
	for (int i = 0; i < nsweeps; i++) {
		const struct sweep *w = &sweeps[i];

		for (int j = 0; j < w->n; j++) {
			char size[32], what[96];
			struct row r = {what,
					w->preset,
					w->kind,
					ldexp(1, w->lo + j),
					w->gpus,
					w->nodes > 1 ? w->nodes : 1,
					w->us[j],
					w->source,
					w->fit,
					0,
					0,
					w->no_nvls,
					w->offset_us,
					0,
					w->g8};

			size_name(size, sizeof size, r.a);
			snprintf(what, sizeof what, "%s %s", w->what, size);
			emit(csv, &per[i], &r);
		}
	}
	for (size_t i = 0; i < sizeof xla_coll / sizeof *xla_coll; i++)
		for (int j = 0; j < XLA_COLL_N; j++) {
			char size[32], what[96];
			struct row r = {what,
					"dgx-h100",
					xla_coll[i].kind,
					ldexp(1, XLA_COLL_LO + j),
					xla_coll[i].gpus,
					1,
					xla_coll[i].us[j],
					XLACOLL,
					0,
					0,
					0,
					0,
					0,
					0,
					0};

			size_name(size, sizeof size, r.a);
			snprintf(what, sizeof what, "%s, %d H100 (OpenXLA) %s",
				 kind_name[xla_coll[i].kind], xla_coll[i].gpus, size);
			emit(csv, &xc[i], &r);
		}
	fclose(csv);
	printf("\n");
	printf("GEMM, H100 (OpenXLA's table), %d shapes: %d within 10%%, the mean error %.1f%%, "
	       "from %+.0f%% to %+.0f%%\n",
	       xla.n, xla.within, 100 * xla_err / xla.n, 100 * xla_lo, 100 * xla_hi);
	all.n += xla.n;
	all.within += xla.within;
	for (int i = 0; i < nsweeps; i++) {
		printf("%s, %d sizes: %d within 10%%, the largest error %.1f%%\n", sweeps[i].what,
		       per[i].n, per[i].within, 100 * per[i].worst);
		all.n += per[i].n;
		all.within += per[i].within;
		all.checks += per[i].checks;
		all.worst_check =
			per[i].worst_check > all.worst_check ? per[i].worst_check : all.worst_check;
	}
	for (size_t i = 0; i < sizeof xla_coll / sizeof *xla_coll; i++) {
		printf("%s, %d H100 (OpenXLA's table), %d sizes: %d within 10%%, the largest error "
		       "%.1f%%\n",
		       kind_name[xla_coll[i].kind], xla_coll[i].gpus, xc[i].n, xc[i].within,
		       100 * xc[i].worst);
		all.n += xc[i].n;
		all.within += xc[i].within;
		all.checks += xc[i].checks;
		all.worst_check =
			xc[i].worst_check > all.worst_check ? xc[i].worst_check : all.worst_check;
	}
	printf("%d of %d microbenchmarks within 10%% (target: all); the GEMM law's mean error "
	       "%.2f%% over %d shapes (target <= 5%%), its %d attention BMMs %+.0f%% to %+.0f%%; "
	       "the worst of the %d checks %.0f%%\n",
	       all.within, all.n, 100 * all.gemm_err / all.ngemm, all.ngemm, all.nbmm,
	       100 * all.bmm_lo, 100 * all.bmm_hi, all.checks, 100 * all.worst_check);
	agreement();
	printf("wrote %s\n", path);
	return 0;
}
