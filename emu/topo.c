/* Hardware presets. Peak FLOP/s, HBM and link figures are the data sheets' (listed in
 * docs/formulas.md). Latencies are round assumptions inside the ranges usually quoted
 * (NVLink 2-5 us, PCIe 5-10 us, InfiniBand ~5 us, Ethernet 20-50 us), for the roofline
 * model only.
 *
 * Efficiency (the roofline cost model): the data sheet's dense peak is not what a GEMM
 * reaches. Megatron-LM reports 44-52% of peak for whole GPT-3-sized models on A100
 * (Narayanan et al. 2021, Table 1), and that includes communication and the memory-bound
 * kernels, which pemu charges on their own; large GEMMs alone run at roughly 70-80% of
 * peak in vendor GEMM benchmarks. The roofline charges 0.7 of peak for every GPU: a round
 * figure inside that range, not a measurement, and overridable with --gpu-efficiency.
 *
 * The calibrated cost model (clock.h, docs/formulas.md "How accurate is the clock") has
 * these, each measured where a measurement was found:
 *   sms           the SMs a GEMM's tiles go over: A100 108, H100 and H200 132 (Bekman,
 *                 Machine Learning Engineering, "Tile and wave quantization", from
 *                 torch.cuda.get_device_properties); H20 78 (its Geekbench 6 listing);
 *                 RTX 3090 82 (NVIDIA Ampere GA102 whitepaper), RTX 4090 128 (NVIDIA Ada
 *                 whitepaper)
 *   gemm_ceiling  the maximum achievable matmul FLOP/s over peak (mamf-finder, bf16,
 *                 Bekman's table): A100 SXM 271.2 / 312 = 0.869, H100 SXM 794.5 / 989 =
 *                 0.803 ("H200 is the same"); unmeasured elsewhere: H20 takes H100's,
 *                 the RTX cards A100 PCIe's 252.9 / 312 = 0.811 (assumptions)
 *   fused_eff, fused_keys  a fused attention kernel's fraction of peak on long
 *                 sequences and a row's own cost (its block's load of its queries, or keys
 *                 in the backward, and store of its output) in keys, so that a causal
 *                 sequence of s reaches s / (s + 64 + 2 fused_keys) of fused_eff (64: the
 *                 blocks of queries pemu counts, the diagonal's whole). Fitted per GPU to
 *                 the kernel Transformer Engine runs there (its backend selection: flash-
 *                 attention on Ampere, cuDNN's fused attention on Hopper), causal, head
 *                 dim 128, 16k tokens of hidden 2048, 512 to 16k a sequence (bench/
 *                 fidelity): A100 0.624 and 208 keys, FlashAttention-2's forward and
 *                 backward (flash-attention assets/flash2_a100_fwd_bwd_benchmark.png; all
 *                 six within 1.2%); H100 0.573 and 154, cuDNN's forward (flash-attention
 *                 assets/flash3_fp16_fwd.png, the FlashAttention-3 paper's; within 2.5%),
 *                 the only H100 series by sequence found, its backward taking the same
 *                 law. Checked: cuDNN's forward and backward on H100 at 8k (Transformer
 *                 Engine's attention notebook, +4.8%) and on H200 with cuDNN 9.19
 *                 (cudnn-frontend's sdpa benchmark, 2k to 32k: +19% at 2k, where its
 *                 backward runs at 0.76 of its forward's rate, -8.7% to +2.6% from 4k).
 *                 H20 takes H100's, the RTX cards A100's (assumptions)
 *   mem_eff       a memory-bound kernel's fraction of HBM bandwidth: A100 0.88 (a 40 GB
 *                 A100's memcopy at 1355 of 1555 GB/s, PTsolvers gpu-workshop-JuliaCon23
 *                 issue 7; an A800 80GB's PyTorch elementwise at 1727 of 1935 GB/s,
 *                 mli/transformers-benchmarks issue 4: 0.87 and 0.89); H100 0.92
 *                 (pytorch/ao's roofline model, torchao/testing/training/roofline_utils.py,
 *                 pct_achievable_mem_bw); the others take their generation's
 *   kernel_ns     the fixed cost of a kernel, 2 us: pytorch/ao's roofline model's floor
 *                 for a kernel (the roofline's launch_ns is 3 us)
 *   gemm_k0, gemm_ns  a GEMM tile's prologue and epilogue as more of k, and a GEMM
 *                 kernel's fixed time (clock.c): A100 250 and kernel_ns's 2 us, fitted to
 *                 bench/fidelity's GEMM rows with the tiles' other constants; H100 120 and
 *                 5 us, fitted to OpenXLA's table of 375 H100 GEMMs in bf16, batches of 1
 *                 to 4 of m, n, k from 256 to 4096 (xla/service/gpu/model/
 *                 matmul_interpolator_data.h, sm_90: the median kernel time of traced runs;
 *                 bench/fidelity_xla.h): before the 64 x 64 tile (below) mean error 6.3%,
 *                 317 within 10%, from -25% to +30%
 *                 (the A100's 250 and 2 us gave 24.8%, 127 within, pemu fast by up to 44% on
 *                 the 5 us kernels and slow by up to 25% where k is 256-1024), and 116 of
 *                 the 118 above 20 us within 10%. H200 and H20 take H100's, the RTX cards
 *                 A100's (assumptions)
 *   gemm_tile64   whether the GEMM law deals 64 x 64 tiles too, at a rate extrapolated from
 *                 the half tiles' (clock.c): chosen on the data. The H100's, on OpenXLA's
 *                 table a mean error of 5.3%, 349 within 10%, from -21% to +38% (k0 and
 *                 gemm_ns kept); not the A100's, whose one GEMM that small (the A800's
 *                 512^3, a row the half tiles' 0.78 was fitted on) it would make 38% fast.
 *                 H200 and H20 take H100's, the RTX cards A100's
 * and per link, for NCCL's collectives (coll_time.c: a collective costs base plus the faster
 * of its protocols, steps x hop + bus bytes / bandwidth each: LL for small messages; LL128,
 * where measured, up to ll128_max, or with ll128_max 0 as far as NCCL's own cost model
 * (tuning.cc) prefers it to Simple; the bulk protocol (Simple) beyond; on NVLink4's
 * NVSwitch an all-reduce inside a node by NVLink SHARP where that costs less; across
 * nodes NCCL's rings, one a NIC, and its tree where faster, and on 2 nodes of NVLink
 * SHARP GPUs its NVLSTree where faster still; an all-to-all through each member's NIC
 * beside NVLink). The latency of small
 * messages is taken from runs of one process a GPU under CUDA graphs, where NCCL's own
 * time shows; sweeps run as nccl-tests -g 8 (one thread launching every GPU's kernels) or
 * timed from PyTorch carry their launcher's cost a call too, which bench/fidelity takes as
 * one offset a sweep (-g 8: 20 us and 6 us, fitted, with a floor of the launching thread's,
 * G8_FLOOR_US; PyTorch timing one call: 25 us, its host path, from the benchmark's
 * author) and adds to pemu's figure, never to the model:
 *   base, LL      8.1 us and 0.633 us a step: all-reduce 16.96 us and all-gather 12.53 us
 *                 at 1 KiB on 8 A100 (microsoft/mscclpp docs/performance-ndmv4.md, NCCL
 *                 2.17, MPI, CUDA graphs; NCCL's own tuning.cc has 6.6 and 0.6); 2 GPUs
 *                 then take 9.4 us at 8 B, against 10 (NVIDIA/nccl-tests issue 123).
 *                 NVLink4 assumed the same (no such H100 run found)
 *   NVLink3       fitted to the 8-A100 nccl-tests sweep, 32 KiB to 16 GiB (Bekman, Machine
 *                 Learning Engineering, network chapter, "Real network throughput"; -g 8),
 *                 the largest error minimised (10.9%, its 128 MiB out of line with its
 *                 neighbours): LL at 20 GB/s; LL128 4.1 us a step at 0.9375 of beta (15
 *                 data words of every 16 of a line, NCCL_LL128_DATAELEMS in NCCL's device.h)
 *                 up to 8 MiB; Simple 10.8 us a step at 0.78 of beta (231 GB/s at 1 GiB under
 *                 MPI, mscclpp's)
 *   NVLink4       ring: three protocols, as NCCL runs them on Hopper (its tuning.cc enables
 *                 LL128 on NVLink from sm90). Simple 3.4 us a step (NCCL's own figure,
 *                 tuning.cc hwLat, NVLink Ring Simple) at 0.79 of beta; LL128 1.3 us a
 *                 step at 0.69 of beta, sent up to the size NCCL's cost model stops
 *                 preferring it (coll_time.c: on 8 GPUs 34 MiB for all-reduce, 22 MiB for
 *                 all-gather and reduce-scatter), so that the bus bandwidth ramps with the
 *                 message from LL128's to Simple's. 0.79, 1.3 us and 0.69 fitted to the
 *                 8-H100 Ring sweeps of all-reduce, all-gather and reduce-scatter, 1 MiB
 *                 to 8 GiB (togethercomputer/together-nccl-tests, H100 20260305_220043;
 *                 NCCL 2.26, -g 8; bench/fidelity models that launcher), with the 8-H100
 *                 all-gather and reduce-scatter of xxrjun/nccl-tests-cluster (NCCL 2.29,
 *                 MPI), 32 MiB to 16 GiB: all 62 within 7.3%; 367.6 GB/s at 16 GiB on 8
 *                 H200 with NVLS off (Bekman, ibid.) then +3.5%. LL at 44 GB/s (assumed,
 *                 twice NVLink3's); NVLS 55 us beyond base at 0.598 of beta (269 GB/s of
 *                 algorithm bandwidth), fitted to the 8-H100 NVLS all-reduce, 32 MiB to 16
 *                 GiB, of xxrjun's (2.7% at most), and charged where it costs less than the
 *                 ring (coll_time.c: from 18.3 MiB on 8 GPUs). NCCL runs NVLS from 2 MiB on
 *                 8 H200 (Bekman's sweep, NCCL 2.27), where this line, not a latency but
 *                 NVLS's ramp amortised (NCCL's NVLS chunks grow from 16 to 128 KiB with the
 *                 message, enqueue.cc), overstates it; the ring's time stands in there.
 *                 Among 6 GPUs or more: among 2 and 4 NCCL's model runs the ring
 *                 (coll_time.c)
 *   ring_loop     NVLink4 0.32: a ring among fewer GPUs than 8 runs at a lower bus
 *                 bandwidth, as if each loop of its steps took 0.32 of a step more than the
 *                 chunks it moves (n - 1 of them for reduce-scatter and all-gather, 2 (n - 1)
 *                 for all-reduce; coll_time.c). Fitted to all-gather and reduce-scatter
 *                 among 4 and among 8 H100s of the same 10 nodes, 128 MiB to 16 GiB
 *                 (xxrjun/nccl-tests-cluster, single-node runs 20260128-145017, NCCL 2.29,
 *                 MPI; the nodes' median: among 4 3-9% under 8, the law within 3.6%);
 *                 checked on the ring all-reduce among 2, 4 and 6 H100s
 *                 (waynehacking8/nccl-collectives-bench, NCCL 2.29, -g, NCCL_ALGO=Ring:
 *                 among 2 a bus bandwidth 5-11% under 4's, the law 9%; pemu 8-11% slow
 *                 there from 2 GiB) and on OpenXLA's all-gather among 2 (275 GB/s at 2 GiB,
 *                 pemu 281). An all-to-all has no ring (NCCL's sends, p2p_ch_bw).
 *                 NVLink3 unmeasured: 0
 *   p2p_ch_bw     NVLink4 21 GB/s: a send of NCCL's runs on the channels it splits it
 *                 over (coll_p2p.c: 32 p2p channels shared by the communicator's ranks,
 *                 more as the message grows; on a communicator over nodes 4 at most, those
 *                 of a 400 Gb/s NIC's peer), each at this bandwidth at most, and a chunk
 *                 more than its part (coll_time.c, p2p_peers_ns). Fitted to nccl-tests'
 *                 sendrecv among 8 and among 4 H100s of the same 10 nodes, 32 MiB to 16
 *                 GiB (xxrjun/nccl-tests-cluster, single-node runs 20260128-145017, NCCL
 *                 2.29, MPI; each GPU sends to the next): among 8 a send of 32 or 64 MiB
 *                 runs on 4 channels at 80-82 GB/s, 128 MiB on 8 at 163 (as among 4 up to
 *                 128 MiB), 256 MiB on 16 at 300, and from 512 MiB at the link's 356-367;
 *                 all 20 within 6.8% (mean error 3.5%; 2.7% for the law without the chunk,
 *                 at 20 GB/s). No constant fitted to nccl-tests' alltoall inside a node,
 *                 the same sends to every member at once, though the chunk's form was
 *                 chosen on it: among 4 and 8 H100s (xxrjun's, 32 MiB to 16 GiB) all 20
 *                 within 9.1% (without the chunk 12 of 20, -25.1% at worst). Below 32 MiB
 *                 unmeasured, where the chunk weighs most. NVLink3 and the networks 0
 *                 (the link's rate; across nodes a send of xxrjun's between 2 nodes x 1
 *                 H100 runs at 43.8 GB/s, pemu 47.0, a check; among 8 A100s li-plus's
 *                 nccl-tests sendrecv at 110 GB/s at 128 MiB and 189-195 from 256 MiB,
 *                 pemu 234: checks from one unversioned source, not fitted)
 *   InfiniBand    6.8 us a step, a node's collectives 7.5 us more when the node holds
 *                 several members (NCCL's PXN path), bus_eff HDR 0.89: fitted to 2 nodes x 8
 *                 and 2 x 1 A100 with HDR (mscclpp's: 1 KiB, 1 and 4 GiB, all-reduce and
 *                 all-gather; 2 x 1's 1 GiB, at 18.7 and 15.8 GB/s of a 25 GB/s NIC, left
 *                 out); NDR 0.94 (46-48 GB/s a NIC, nccl-tests issue 290), its bulk steps
 *                 HDR's; LL at half the bulk bandwidth (NCCL's factor, tuning.cc). These were
 *                 fitted when an all-reduce across nodes took the tree's steps at the
 *                 ring's bandwidth; now that it takes the faster of NCCL's ring and tree
 *                 (coll_time.c), mscclpp's 2 x 8 all-reduce at 1 and 4 GiB (on the ring)
 *                 comes out at +6.3% and +6.5%, not +4.9% and +6.1%. Checked, not fitted,
 *                 on 10 nodes of 1, 2, 4 and 8 H100s with NDR, 32 MiB to 16 GiB
 *                 (xxrjun/nccl-tests-cluster, multi-node, NCCL 2.29, MPI): 46.9-49.1 GB/s
 *                 a NIC from 1 GiB up (0.94-0.98 of it), and all-to-all on the same
 *                 cluster, 2 nodes (pairwise runs) and 10; all-reduce on 2, 4 and 8
 *                 nodes of 8 H100s under NCCL's defaults (NVIDIA/nccl-tests issue 309);
 *                 errors in bench/fidelity. NDR's small messages by NCCL's own model
 *                 (tuning.cc): LL 5.0 us a step (hwLat, NET, Tree LL, which the
 *                 all-reduce's small messages take; its ring's, 2.7 us, would serve
 *                 all-gather and reduce-scatter, unmeasured here, which take 5.0 too) and
 *                 no PXN cost (its model has none); the 8 B all-reduce on 2 and 4 nodes of
 *                 8 H100s takes 24.7 and 34.75 us (issue 309), pemu 27.0 and 37.0 (the HDR
 *                 fit's 6.8 us steps and 7.5 us of PXN gave 38.1 and 51.7)
 *   NVLSTree      an all-reduce over 2 nodes of NVLink SHARP GPUs (coll_time.c): 57.7 GB/s
 *                 a NIC, NCCL's ceiling a channel for it on 2 nodes of Hoppers
 *                 (tuning.cc, perChMaxNVLSTreeBws; its model gives the NIC twice its
 *                 bandwidth there, the two nodes sending both ways at once, and takes the
 *                 lesser; NCCL's figure, whatever --inter-bw says); a ramp of 170 us
 *                 beyond base and 2 steps, fitted to qoofyk's 2 x 8 H100 sweep from 64 MiB
 *                 to 16 GiB (issue 309: 250 GB/s of algorithm bandwidth at 16 GiB, the
 *                 model within 2.3%) and checked on gj-aion's 2 nodes (within 1.9% from
 *                 64 MiB). Not on more nodes: there NCCL's ceiling, 45.5 GB/s a channel,
 *                 is under its ring's 48 (the NIC's speed, search.cc), so its model runs
 *                 the ring where bandwidth decides, and pemu's ring is within 10% of 4 and
 *                 8 nodes from 2 GiB up
 *   PCIe, Ethernet unmeasured: PCIe's steps NVLink3's times NCCL's PCI/NVLink ratios
 *                 (tuning.cc's hwLat: 1.0/0.6 LL, 5.7/3.4 Simple), bus_eff 0.8; Ethernet as
 *                 InfiniBand at 0.9 (assumptions).
 * The SMs a collective takes from the compute beside it (coll.h, "the SM share"): NCCL
 * runs a CTA a channel, and its CTAs never share an SM with compute kernels (S. Jeaugey,
 * NVIDIA/nccl issue 689, who also gives 2 SMs on a PCIe system with one NIC and 16 on a
 * DGX with 8 NICs); ctas a link:
 *   NVLink3       24: an 8-A100 HGX's NCCL log, "Channel 23/24" (NVIDIA/nccl-tests issue
 *                 100)
 *   NVLink4       24, and NVLink SHARP 16: an 8-H100 node's NCCL log, "24 coll channels,
 *                 16 nvls channels" (aws-samples/aws-do-eks, nccl-test README), NCCL's
 *                 NVLS_NCHANNELS_SM90 16 (src/transport/nvls.cc)
 *   InfiniBand    16: the same log on 2 nodes of 8 H100, "16 coll channels"; A100's
 *                 taken the same (nccl issue 689's 16 on a DGX)
 *   PCIe, Ethernet, the RTX cards' NVLink bridge  2 (nccl issue 689's PCIe system;
 *                 assumed for the others)
 * and fewer for a small message: NCCL drops channels while the message is under
 * channels x 512 threads x 64 bytes (src/enqueue.cc, the Simple protocol): one a 32 KiB.
 * A check, not fitted: overlap slows the compute of GPT and LLaMA training on 4 A100s or
 * 4 H100s by 18.9% on average, 40% at most (Lee et al. 2025, arXiv 2507.03114); 24 of
 * 108 SMs slow what they overlap by 29%, 24 of 132 by 22%. */
#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define GiB (1024ULL * 1024 * 1024)

struct preset {
	const char *name;
	struct topo_gpu gpu;
	int gpus_per_node;
	struct topo_link intra, inter;
};

/* The calibrated fields of the GPUs (sms, gemm_ceiling, fused_eff, mem_eff, kernel_ns, fused_keys,
 * gemm_k0, gemm_ns, gemm_tile64)
 * and of the links (base_ns, ll_hop_ns, ll_bw, hop_ns, bus_eff; ll128_hop_ns, ll128_eff, ll128_max;
 * nvls_ns, nvls_eff, ring_loop, p2p_ch_bw; pxn_ns; after ctas, nvls_tree_ns, nvls_tree_bw) below,
 * from the sources above. */
#define A100_SMS 108, 0.869, 0.624, 0.88, 2000, 208, 250, 2000, 0
#define H100_SMS 132, 0.803, 0.573, 0.92, 2000, 154, 120, 5000, 1
#define MiB      (1024ULL * 1024)
#define NVLINK3  8100, 633, 20000000000ULL, 10800, 0.78, 4100, 0.9375, 8 * MiB, 0, 0, 0, 0, 0
#define NVLINK4                                                                                    \
	8100, 633, 44000000000ULL, 3400, 0.79, 1300, 0.69, 0, 55000, 0.598, 0.32, 21000000000ULL, 0
#define IB_HDR        8100, 6800, 11100000000ULL, 6800, 0.89, 0, 0, 0, 0, 0, 0, 0, 7500
#define IB_NDR        8100, 5000, 23500000000ULL, 6800, 0.94, 0, 0, 0, 0, 0, 0, 0, 0
#define PCIE4         8100, 1055, 10000000000ULL, 18100, 0.8, 0, 0, 0, 0, 0, 0, 0, 0
#define ETH100        8100, 6800, 5600000000ULL, 6800, 0.9, 0, 0, 0, 0, 0, 0, 0, 7500
#define NDR_NVLS_TREE 170000, 57700000000ULL /* nvls_tree_ns, nvls_tree_bw */
#define NO_NVLS_TREE  0, 0

static const struct preset presets[] = {
	{"dgx-a100",
	 {"A100-SXM-80GB", 312e12, 0.7, 80 * GiB, 2.04e12, 3000, A100_SMS},
	 8,
	 {"NVLink3", 3000, 300000000000ULL, NVLINK3, 24, NO_NVLS_TREE},
	 {"IB HDR 200Gb/s", 5000, 25000000000ULL, IB_HDR, 16, NO_NVLS_TREE}},
	{"dgx-h100",
	 {"H100-SXM-80GB", 989e12, 0.7, 80 * GiB, 3.35e12, 3000, H100_SMS},
	 8,
	 {"NVLink4", 3000, 450000000000ULL, NVLINK4, 24, NO_NVLS_TREE},
	 {"IB NDR 400Gb/s", 5000, 50000000000ULL, IB_NDR, 16, NDR_NVLS_TREE}},
	{"dgx-h200",
	 {"H200-SXM-141GB", 989e12, 0.7, 141 * GiB, 4.8e12, 3000, H100_SMS},
	 8,
	 {"NVLink4", 3000, 450000000000ULL, NVLINK4, 24, NO_NVLS_TREE},
	 {"IB NDR 400Gb/s", 5000, 50000000000ULL, IB_NDR, 16, NDR_NVLS_TREE}},
	{"h20",
	 {"H20-96GB", 148e12, 0.7, 96 * GiB, 4.0e12, 3000, 78, 0.803, 0.573, 0.92, 2000, 154, 120,
	  5000, 1},
	 8,
	 {"NVLink", 3000, 450000000000ULL, NVLINK4, 24, NO_NVLS_TREE},
	 {"400Gb/s", 5000, 50000000000ULL, IB_NDR, 16, NDR_NVLS_TREE}},
	{"rtx3090-pcie",
	 {"RTX3090-24GB", 71e12, 0.7, 24 * GiB, 0.94e12, 3000, 82, 0.811, 0.624, 0.88, 2000, 208,
	  250, 2000, 0},
	 8,
	 {"PCIe4 x16", 8000, 25000000000ULL, PCIE4, 2, NO_NVLS_TREE},
	 {"Ethernet 100Gb/s", 30000, 12500000000ULL, ETH100, 2, NO_NVLS_TREE}},
	{"rtx3090-nvlink",
	 {"RTX3090-24GB", 71e12, 0.7, 24 * GiB, 0.94e12, 3000, 82, 0.811, 0.624, 0.88, 2000, 208,
	  250, 2000, 0},
	 8,
	 {"NVLink bridge", 3000, 56000000000ULL, NVLINK3, 2, NO_NVLS_TREE},
	 {"Ethernet 100Gb/s", 30000, 12500000000ULL, ETH100, 2, NO_NVLS_TREE}},
	{"rtx4090-pcie",
	 {"RTX4090-24GB", 165e12, 0.7, 24 * GiB, 1.0e12, 3000, 128, 0.811, 0.624, 0.88, 2000, 208,
	  250, 2000, 0},
	 8,
	 {"PCIe4 x16", 8000, 25000000000ULL, PCIE4, 2, NO_NVLS_TREE},
	 {"Ethernet 100Gb/s", 30000, 12500000000ULL, ETH100, 2, NO_NVLS_TREE}},
};

const char *const topo_preset_names[] = {"dgx-a100",     "dgx-h100",       "dgx-h200",     "h20",
					 "rtx3090-pcie", "rtx3090-nvlink", "rtx4090-pcie", NULL};

int topo_preset(const char *name, struct topo *t)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
		const struct preset *p = &presets[i];

		if (strcmp(p->name, name))
			continue;
		memset(t, 0, sizeof *t);
		snprintf(t->name, sizeof t->name, "%s", p->name);
		t->gpu = p->gpu;
		t->nodes = 1;
		t->gpus_per_node = p->gpus_per_node;
		t->nodes_per_dc = 0;
		t->link[TOPO_LINK_SELF] = (struct topo_link){
			.name = "self", .bw_bytes = UINT64_MAX, .ll_bw = UINT64_MAX, .bus_eff = 1};
		t->link[TOPO_LINK_INTRA] = p->intra;
		t->link[TOPO_LINK_INTER] = p->inter;
		/* A long-haul link between datacenters: 10 ms, 100 Gb/s. Used only when
		 * nodes_per_dc is set (calibrated: Ethernet's 0.9 of it, assumed). */
		t->link[TOPO_LINK_DC] = (struct topo_link){.name = "inter-DC",
							   .lat_ns = 10000000,
							   .bw_bytes = 12500000000ULL,
							   .base_ns = 8100,
							   .ll_hop_ns = 10000000,
							   .ll_bw = 5600000000ULL,
							   .hop_ns = 10000000,
							   .bus_eff = 0.9,
							   .ctas = 2};
		return 0;
	}
	return -1;
}

int topo_ndev(const struct topo *t)
{
	return t->nodes * t->gpus_per_node;
}

int topo_node(const struct topo *t, int d)
{
	return d / t->gpus_per_node;
}

enum topo_link_class topo_link_class(const struct topo *t, int a, int b)
{
	int na = topo_node(t, a), nb = topo_node(t, b);

	if (a == b)
		return TOPO_LINK_SELF;
	if (na == nb)
		return TOPO_LINK_INTRA;
	if (t->nodes_per_dc > 0 && na / t->nodes_per_dc != nb / t->nodes_per_dc)
		return TOPO_LINK_DC;
	return TOPO_LINK_INTER;
}

enum topo_link_class topo_group_link_class(const struct topo *t, const int *devs, int n)
{
	enum topo_link_class worst = n > 1 ? TOPO_LINK_INTRA : TOPO_LINK_SELF;

	/* Two members on different nodes (datacenters) exist iff some member is on a
	 * different node (datacenter) from the first one. */
	for (int i = 1; i < n; i++) {
		enum topo_link_class k = topo_link_class(t, devs[0], devs[i]);

		if (k > worst)
			worst = k;
	}
	return worst;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

int topo_group_nodes(const struct topo *t, const int *devs, int n, int *per_node)
{
	int *node = emu_xmalloc((size_t)n * sizeof *node);
	int k = 0, run = 0, even = 1, first = 0;

	for (int i = 0; i < n; i++)
		node[i] = topo_node(t, devs[i]);
	qsort(node, (size_t)n, sizeof *node, cmp_int);
	for (int i = 0; i < n; i++) {
		run++;
		if (i + 1 < n && node[i + 1] == node[i])
			continue;
		if (k++ == 0)
			first = run;
		even &= run == first;
		run = 0;
	}
	*per_node = even ? first : 0;
	free(node);
	return k;
}

const char *topo_link_class_name(enum topo_link_class c)
{
	static const char *const names[] = {"self", "intra", "inter", "dc"};

	return (unsigned)c < TOPO_LINK_NCLASS ? names[c] : "?";
}
