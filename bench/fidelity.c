/* bench/fidelity: how accurate the calibrated cost model is (emu/clock.h, emu/topo.c). Every
 * microbenchmark it was calibrated against or checked with, the measured figure with its
 * source, pemu's figure under --cost-model calibrated and the error: GEMMs (the largest
 * measured, square sizes), memory-bound kernels, and all-reduces across sizes on a DGX
 * A100 node, 2 GPUs, H100/H200 rings and between nodes. A row says whether the constants
 * were fitted to it ("fit"), so that it only shows the fit, or whether it checks the
 * model ("check"). Writes DIR/fidelity.csv and the table (docs/formulas.md, "How accurate
 * is the clock"); never fails on accuracy.
 * usage: bench/fidelity [DIR]   (default build/bench/out) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cluster.h"
#include "coll.h"

enum kind { GEMM, MEM, ALLREDUCE };

struct row {
	const char *what;   /* the microbenchmark */
	const char *preset; /* pemu's cluster */
	enum kind kind;
	double a, b, c;  /* GEMM m, n, k; MEM bytes moved; ALLREDUCE bytes, GPUs, nodes */
	double measured; /* TFLOP/s (GEMM), GB/s (MEM), us (ALLREDUCE) */
	const char *source;
	int fit; /* the constants were fitted to this row */
	/* the card measured, where it is not the preset's: its ceiling and HBM bandwidth */
	double ceiling, hbm;
};

#define MLE  "Bekman, Machine Learning Engineering"
#define MLI  "mli/transformers-benchmarks issue 4 (A800 PCIe, fp16, torch 2.0)"
#define SWP  MLE ", network, nccl-tests sweep on 8 A100"
#define A800 0.811, 1.935e12 /* an A800 80GB PCIe: A100 PCIe's ceiling (its MAMF) */

static const struct row rows[] = {
	{"GEMM 1024x10240x5120 bf16 (MAMF)", "dgx-a100", GEMM, 1024, 10240, 5120, 271.2,
	 MLE ", accelerator, MAMF table", 1, 0, 0},
	{"GEMM 2048x2048x13312 bf16 (MAMF)", "dgx-h100", GEMM, 2048, 2048, 13312, 794.5,
	 MLE ", accelerator, MAMF table", 1, 0, 0},
	{"GEMM 512^3 fp16", "dgx-a100", GEMM, 512, 512, 512, 31.5, MLI, 0, A800},
	{"GEMM 2048^3 fp16", "dgx-a100", GEMM, 2048, 2048, 2048, 192.5, MLI, 0, A800},
	{"GEMM 8192^3 fp16", "dgx-a100", GEMM, 8192, 8192, 8192, 215.3, MLI, 0, A800},
	{"memcopy, A100 40GB (1555 GB/s)", "dgx-a100", MEM, 1e9, 0, 0, 1355,
	 "PTsolvers gpu-workshop-JuliaCon23 issue 7", 1, 0, 1.555e12},
	{"elementwise, A800 80GB PCIe", "dgx-a100", MEM, 1e9, 0, 0, 1727, MLI, 1, A800},
	{"all-reduce 8 B, 2 A100", "dgx-a100", ALLREDUCE, 8, 2, 1, 10,
	 "NVIDIA/nccl-tests issue 123", 0, 0, 0},
	{"all-reduce 32 KiB, 8 A100", "dgx-a100", ALLREDUCE, 32768, 8, 1, 43.83, SWP, 1, 0, 0},
	{"all-reduce 128 KiB, 8 A100", "dgx-a100", ALLREDUCE, 131072, 8, 1, 51.76, SWP, 1, 0, 0},
	{"all-reduce 512 KiB, 8 A100", "dgx-a100", ALLREDUCE, 524288, 8, 1, 80.40, SWP, 1, 0, 0},
	{"all-reduce 1 MiB, 8 A100", "dgx-a100", ALLREDUCE, 1048576, 8, 1, 101.9, SWP, 1, 0, 0},
	{"all-reduce 4 MiB, 8 A100", "dgx-a100", ALLREDUCE, 4194304, 8, 1, 101.5, SWP, 0, 0, 0},
	{"all-reduce 16 MiB, 8 A100", "dgx-a100", ALLREDUCE, 16777216, 8, 1, 276.6, SWP, 0, 0, 0},
	{"all-reduce 64 MiB, 8 A100", "dgx-a100", ALLREDUCE, 67108864, 8, 1, 684.6, SWP, 0, 0, 0},
	{"all-reduce 256 MiB, 8 A100", "dgx-a100", ALLREDUCE, 268435456, 8, 1, 2420.6, SWP, 0, 0,
	 0},
	{"all-reduce 1 GiB, 8 A100", "dgx-a100", ALLREDUCE, 1073741824, 8, 1, 8203.9, SWP, 0, 0, 0},
	{"all-reduce 16 GiB, 8 A100", "dgx-a100", ALLREDUCE, 17179869184.0, 8, 1, 127997, SWP, 1, 0,
	 0},
	{"all-reduce 16 GiB, 8 H200 ring", "dgx-h200", ALLREDUCE, 17179869184.0, 8, 1,
	 /* 367.61 GB/s bus bandwidth: 2 x 7/8 x 16 GiB / it */ 81791,
	 MLE ", network, NCCL_NVLS_ENABLE=0", 1, 0, 0},
	{"all-reduce 4 MiB, 8 H200", "dgx-h200", ALLREDUCE, 4194304, 8, 1, 68.5,
	 MLE ", network, all_reduce_bench.py (NVLS on)", 1, 0, 0},
	{"all-reduce 1 MiB, 8 H200", "dgx-h200", ALLREDUCE, 1048576, 8, 1, 46.0,
	 MLE ", network, all_reduce_bench.py (NVLS on)", 0, 0, 0},
	{"all-reduce 1 KiB, 2 nodes x 8 (NDR)", "dgx-h100", ALLREDUCE, 1024, 16, 2, 47,
	 "NVIDIA/nccl issue 1244 (H20, NVLSTree)", 1, 0, 0},
};

struct probe {
	const struct row *r;
	int64_t ns;
};

static int device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	const struct row *r = p->r;
	int64_t t0;
	int rc;

	switch (r->kind) {
	case GEMM:
		if (emu_dev_id(d) == 0)
			p->ns = emu_gemm(d, "gemm", 1, r->a, r->b, r->c, 0,
					 (r->a * r->c + r->c * r->b + r->a * r->b) * 2);
		return 0;
	case MEM:
		if (emu_dev_id(d) == 0)
			p->ns = emu_compute(d, "copy", 0, 2 * r->a);
		return 0;
	default:
		t0 = emu_stream_time(d, EMU_STREAM_COMM);
		rc = coll_all_reduce(d, emu_world(d), NULL, NULL, (size_t)(r->a / 4), COLL_SUM);
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
	cfg.ndev = r->kind == ALLREDUCE ? (int)r->b : 1;
	cfg.topo.nodes = r->kind == ALLREDUCE ? (int)r->c : 1;
	if (r->kind == ALLREDUCE)
		cfg.topo.gpus_per_node = (int)(r->b / r->c);
	if (r->ceiling > 0)
		cfg.topo.gpu.gemm_ceiling = r->ceiling;
	if (r->hbm > 0)
		cfg.topo.gpu.hbm_bw = r->hbm;
	c = emu_cluster_new(&cfg);
	if (emu_cluster_run(c, device, &p)) {
		fprintf(stderr, "bench/fidelity: %s: %s\n", r->what, emu_cluster_report(c));
		exit(1);
	}
	emu_cluster_free(c);
	if (r->kind == GEMM)
		return 2 * r->a * r->b * r->c / (p.ns * 1e-9) / 1e12;
	if (r->kind == MEM)
		return 2 * r->a / (p.ns * 1e-9) / 1e9;
	return p.ns / 1e3;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	static const char *const unit[] = {"TFLOP/s", "GB/s", "us"};
	double gemm_err = 0, worst_check = 0;
	int ngemm = 0, within = 0, checks = 0, n = (int)(sizeof rows / sizeof *rows);
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
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		double got = predict(r), err = (got - r->measured) / r->measured;

		printf("| %s | %.4g %s | %.4g | %+.1f%% | %s | %s |\n", r->what, r->measured,
		       unit[r->kind], got, 100 * err, r->fit ? "fit" : "check", r->source);
		fprintf(csv, "\"%s\",%s,%s,%.6g,%.6g,%.4f,%s,\"%s\"\n", r->what, r->preset,
			unit[r->kind], r->measured, got, err, r->fit ? "fit" : "check", r->source);
		within += fabs(err) <= 0.10;
		if (r->kind == GEMM) {
			gemm_err += fabs(err);
			ngemm++;
		}
		if (!r->fit) {
			checks++;
			worst_check = fabs(err) > worst_check ? fabs(err) : worst_check;
		}
	}
	fclose(csv);
	printf("\n%d of %d microbenchmarks within 10%% (target: all); the GEMM law's mean error "
	       "%.1f%% over %d shapes (target <= 5%%); the worst of the %d checks %.0f%%\n",
	       within, n, 100 * gemm_err / ngemm, ngemm, checks, 100 * worst_check);
	printf("wrote %s\n", path);
	return 0;
}
