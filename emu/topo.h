/* topo: what the emulated cluster is made of. A GPU model (peak FLOP/s, HBM size and
 * bandwidth), nodes x GPUs per node, and the links between two GPUs: intra-node
 * (NVLink, PCIe), inter-node (InfiniBand, Ethernet) and, optionally, between datacenters.
 * Presets come from vendor data sheets (docs/formulas.md); every figure can be
 * overridden. This module only describes hardware: timing lives in clock.c and coll_time.c. */
#ifndef EMU_TOPO_H
#define EMU_TOPO_H

#include <stddef.h>
#include <stdint.h>

enum topo_link_class {
	TOPO_LINK_SELF,  /* a device to itself: free */
	TOPO_LINK_INTRA, /* two GPUs of one node */
	TOPO_LINK_INTER, /* two nodes of one datacenter */
	TOPO_LINK_DC,    /* two datacenters */
	TOPO_LINK_NCLASS
};

struct topo_link {
	char name[24];     /* "NVLink3", "IB HDR", ... */
	int64_t lat_ns;    /* alpha: latency of one message step */
	uint64_t bw_bytes; /* beta: bytes per second, each way, per GPU */
	/* The calibrated cost model's NCCL-like protocols (coll.h; sources in topo.c): a
	 * collective's fixed cost; the low-latency protocol's step latency and bus bandwidth
	 * (small messages); the bulk protocol's step latency and the fraction of beta its bus
	 * bandwidth reaches (large messages) */
	int64_t base_ns, ll_hop_ns;
	uint64_t ll_bw;
	int64_t hop_ns;
	double bus_eff;
	/* LL128, where measured (ll128_eff 0: none): its step latency, its bus bandwidth over
	 * beta, and the largest message NCCL sends with it (the bulk protocol above; 0: as
	 * far as NCCL's own cost model prefers it to Simple, coll_time.c); NVLink
	 * SHARP (nvls_eff 0: none), the all-reduce inside a node: its latency beyond base
	 * and the fraction of beta its algorithm bandwidth reaches (charged where it costs
	 * less than the ring, coll_time.c) */
	int64_t ll128_hop_ns;
	double ll128_eff;
	uint64_t ll128_max;
	int64_t nvls_ns;
	double nvls_eff;
	/* A ring's loop inside a node (reduce-scatter, all-gather, all-reduce; 0: not
	 * modelled): each loop of its steps costs this fraction of a step more than the
	 * chunks it moves, which weighs more among fewer GPUs (coll_time.c); bus_eff is
	 * the bandwidth measured among 8 */
	double ring_loop;
	/* NCCL's send and receive on this link (0: not modelled), and so an all-to-all inside
	 * a node, NCCL's sends to every member: the bandwidth of one of the channels NCCL
	 * splits a send over, bytes a second; how many it splits one over, its communicator's
	 * size and the message's decide (coll_p2p.c, coll_p2p_channels; coll_time.c) */
	uint64_t p2p_ch_bw;
	/* Between nodes: the fixed cost a collective adds when its nodes hold several of its
	 * members each (NCCL's PXN path, a GPU reaching the NIC through an NVLink peer) */
	int64_t pxn_ns;
	/* The CTAs (thread blocks, one an SM, each holding its SM alone) a collective of NCCL's
	 * runs on this link at full size; compute beside it gets the other SMs (the
	 * calibrated model, coll.h; 0: not modelled) */
	int ctas;
	/* Between 2 nodes with NVLink SHARP (the intra link's nvls_eff), NCCL's NVLSTree, an
	 * all-reduce reduced in each node by the switch and between the nodes a NIC at a time:
	 * its fixed cost beyond base (a ramp), and NCCL's ceiling on its bus bandwidth a NIC,
	 * bytes a second (0: none) */
	int64_t nvls_tree_ns;
	uint64_t nvls_tree_bw;
};

struct topo_gpu {
	char name[24];      /* "A100-SXM-80GB" */
	double peak_flops;  /* dense 16-bit tensor peak, FLOP/s */
	double efficiency;  /* fraction of peak a large GEMM achieves (see topo.c) */
	uint64_t hbm_bytes; /* memory per GPU: the default cap */
	double hbm_bw;      /* bytes per second */
	int64_t launch_ns;  /* fixed cost of every kernel */
	/* The calibrated cost model's (clock.h; sources in topo.c): the SMs a GEMM's tiles
	 * are spread over, the fraction of peak the best GEMM reaches (its maximum
	 * achievable matmul FLOP/s), that of a fused attention kernel, and the fraction of
	 * hbm_bw a memory-bound kernel reaches */
	int sms;
	double gemm_ceiling, fused_eff, mem_eff;
	int64_t kernel_ns; /* and its fixed cost of a kernel, in place of launch_ns */
	/* a fused attention kernel's cost of a row (its block's load and store) in keys:
	 * fused_eff is the rate on long sequences, and a causal one of s tokens in blocks of
	 * B queries reaches s / (s + B + 2 fused_keys) of it */
	double fused_keys;
	/* a GEMM's: a tile's prologue and epilogue as more of k, the kernel's fixed time
	 * (in place of kernel_ns), and whether its law deals 64 x 64 tiles too */
	double gemm_k0;
	int64_t gemm_ns;
	int gemm_tile64;
};

struct topo {
	char name[24];                           /* preset name, "dgx-a100" */
	struct topo_gpu gpu;                     /* every GPU of the cluster is this one */
	int nodes;                               /* number of nodes */
	int gpus_per_node;                       /* GPUs in each node */
	int nodes_per_dc;                        /* nodes in each datacenter; 0: one datacenter */
	struct topo_link link[TOPO_LINK_NCLASS]; /* indexed by enum topo_link_class */
};

/* Fills *t with preset name (1 node unless the preset says otherwise). -1 if unknown. */
int topo_preset(const char *name, struct topo *t);

/* The preset names, NULL-terminated, for --help and error messages. */
extern const char *const topo_preset_names[];

/* Total number of GPUs: nodes * gpus_per_node. */
int topo_ndev(const struct topo *t);

/* The class of the link between devices a and b (global device ids). */
enum topo_link_class topo_link_class(const struct topo *t, int a, int b);

/* The slowest link class among all pairs of the n devices in devs. */
enum topo_link_class topo_group_link_class(const struct topo *t, const int *devs, int n);

/* How the n devices devs spread over nodes: the number of nodes they touch, with in
 * *per_node the members on each when every one of those nodes holds as many (else 0). */
int topo_group_nodes(const struct topo *t, const int *devs, int n, int *per_node);

/* Node of device d. */
int topo_node(const struct topo *t, int d);

const char *topo_link_class_name(enum topo_link_class c);

#endif
