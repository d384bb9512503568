/* Hardware presets. Peak FLOP/s, HBM and link figures are the data sheets' as collected
 * in docs/formulas.md. Latencies are the middle of the ranges given there
 * (NVLink 2-5 us, PCIe 5-10 us, InfiniBand ~5 us, Ethernet 20-50 us).
 *
 * Efficiency: the data sheet's dense peak is not what a GEMM reaches. Megatron-LM reports
 * 44-52% of peak for whole GPT-3-sized models on A100 (Narayanan et al. 2021, Table 1),
 * and that includes communication and the memory-bound kernels, which pemu charges on
 * their own; large GEMMs alone run at roughly 70-80% of peak in vendor GEMM benchmarks.
 * pemu charges 0.7 of peak for every GPU: a round figure inside that range, not a
 * measurement, and overridable with --gpu-efficiency. */
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

static const struct preset presets[] = {
	{"dgx-a100",
	 {"A100-SXM-80GB", 312e12, 0.7, 80 * GiB, 2.04e12, 3000},
	 8,
	 {"NVLink3", 3000, 300000000000ULL},
	 {"IB HDR 200Gb/s", 5000, 25000000000ULL}},
	{"dgx-h100",
	 {"H100-SXM-80GB", 989e12, 0.7, 80 * GiB, 3.35e12, 3000},
	 8,
	 {"NVLink4", 3000, 450000000000ULL},
	 {"IB NDR 400Gb/s", 5000, 50000000000ULL}},
	{"dgx-h200",
	 {"H200-SXM-141GB", 989e12, 0.7, 141 * GiB, 4.8e12, 3000},
	 8,
	 {"NVLink4", 3000, 450000000000ULL},
	 {"IB NDR 400Gb/s", 5000, 50000000000ULL}},
	{"h20",
	 {"H20-96GB", 148e12, 0.7, 96 * GiB, 4.0e12, 3000},
	 8,
	 {"NVLink", 3000, 450000000000ULL},
	 {"400Gb/s", 5000, 50000000000ULL}},
	{"rtx3090-pcie",
	 {"RTX3090-24GB", 71e12, 0.7, 24 * GiB, 0.94e12, 3000},
	 8,
	 {"PCIe4 x16", 8000, 25000000000ULL},
	 {"Ethernet 100Gb/s", 30000, 12500000000ULL}},
	{"rtx3090-nvlink",
	 {"RTX3090-24GB", 71e12, 0.7, 24 * GiB, 0.94e12, 3000},
	 8,
	 {"NVLink bridge", 3000, 56000000000ULL},
	 {"Ethernet 100Gb/s", 30000, 12500000000ULL}},
	{"rtx4090-pcie",
	 {"RTX4090-24GB", 165e12, 0.7, 24 * GiB, 1.0e12, 3000},
	 8,
	 {"PCIe4 x16", 8000, 25000000000ULL},
	 {"Ethernet 100Gb/s", 30000, 12500000000ULL}},
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
		t->link[TOPO_LINK_SELF] = (struct topo_link){"self", 0, UINT64_MAX};
		t->link[TOPO_LINK_INTRA] = p->intra;
		t->link[TOPO_LINK_INTER] = p->inter;
		/* A long-haul link between datacenters: 10 ms, 100 Gb/s. Used only when
		 * nodes_per_dc is set. */
		t->link[TOPO_LINK_DC] = (struct topo_link){"inter-DC", 10000000, 12500000000ULL};
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
