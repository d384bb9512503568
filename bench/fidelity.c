/* bench/fidelity: how accurate the calibrated cost model is (emu/clock.h, emu/topo.c). Every
 * microbenchmark it was calibrated against or checked with, the measured figure with its
 * source, pemu's figure under --cost-model calibrated and the error: GEMMs (the largest
 * measured, square sizes), memory-bound kernels, and all-reduces: two whole sweeps (8 A100,
 * nccl-tests; 8 H200 with NVLink SHARP, all_reduce_bench.py), 2 GPUs, an H200 ring and
 * between nodes. A row says whether the constants were fitted to it ("fit"), so that it
 * only shows the fit, or whether it checks the model ("check"). Writes DIR/fidelity.csv,
 * the table and a line a source (README, "How accurate is the clock"); never fails on
 * accuracy.
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
	int no_nvls; /* NCCL_NVLS_ENABLE=0 */
};

/* A measured sweep of all-reduces: sizes 2^lo, 2^(lo+1), ... bytes, the times in us. */
struct sweep {
	const char *what, *preset, *source;
	int gpus, lo, n;
	const double us[24];
	int fit_lo, fit_hi; /* the sizes 2^fit_lo..2^fit_hi the constants were fitted to */
};

#define MLE  "Bekman, Machine Learning Engineering"
#define MLI  "mli/transformers-benchmarks issue 4 (A800 PCIe, fp16, torch 2.0)"
#define SWP  MLE ", network, nccl-tests sweep on 8 A100"
#define A800 0.811, 1.935e12 /* an A800 80GB PCIe: A100 PCIe's ceiling (its MAMF) */

static const struct row rows[] = {
	{"GEMM 1024x10240x5120 bf16 (MAMF)", "dgx-a100", GEMM, 1024, 10240, 5120, 271.2,
	 MLE ", accelerator, MAMF table", 1, 0, 0, 0},
	{"GEMM 2048x2048x13312 bf16 (MAMF)", "dgx-h100", GEMM, 2048, 2048, 13312, 794.5,
	 MLE ", accelerator, MAMF table", 1, 0, 0, 0},
	{"GEMM 512^3 fp16", "dgx-a100", GEMM, 512, 512, 512, 31.5, MLI, 0, A800, 0},
	{"GEMM 2048^3 fp16", "dgx-a100", GEMM, 2048, 2048, 2048, 192.5, MLI, 0, A800, 0},
	{"GEMM 8192^3 fp16", "dgx-a100", GEMM, 8192, 8192, 8192, 215.3, MLI, 0, A800, 0},
	{"memcopy, A100 40GB (1555 GB/s)", "dgx-a100", MEM, 1e9, 0, 0, 1355,
	 "PTsolvers gpu-workshop-JuliaCon23 issue 7", 1, 0, 1.555e12, 0},
	{"elementwise, A800 80GB PCIe", "dgx-a100", MEM, 1e9, 0, 0, 1727, MLI, 1, A800, 0},
	{"all-reduce 8 B, 2 A100", "dgx-a100", ALLREDUCE, 8, 2, 1, 10,
	 "NVIDIA/nccl-tests issue 123", 0, 0, 0, 0},
	{"all-reduce 16 GiB, 8 H200 ring", "dgx-h200", ALLREDUCE, 17179869184.0, 8, 1,
	 /* 367.61 GB/s bus bandwidth: 2 x 7/8 x 16 GiB / it */ 81791,
	 MLE ", network, NCCL_NVLS_ENABLE=0", 1, 0, 0, 1},
	{"all-reduce 1 KiB, 2 nodes x 8 (NDR)", "dgx-h100", ALLREDUCE, 1024, 16, 2, 47,
	 "NVIDIA/nccl issue 1244 (H20, NVLSTree)", 1, 0, 0, 0},
};

static const struct sweep sweeps[] = {
	{"all-reduce, 8 A100",
	 "dgx-a100",
	 SWP,
	 8,
	 15,
	 20,
	 {43.83, 46.80, 51.76,  61.38,  80.40,  101.9,  101.4, 101.5, 133.5, 276.6,
	  424.0, 684.6, 1327.6, 2420.6, 4218.4, 8203.9, 16240, 32136, 64074, 127997},
	 15,
	 34},
	/* the times: size / the algorithm bandwidth published */
	{"all-reduce, 8 H200",
	 "dgx-h200",
	 MLE ", network/benchmarks/results/all-reduce-8xH200.md (NVLS on)",
	 8,
	 15,
	 20,
	 {39.96, 39.24, 40.08, 39.07, 38.33, 45.95, 56.88, 68.5,  94.39, 133.5,
	  212.9, 338.9, 584.4, 1077,  2086,  4053,  8010,  15890, 31480, 62340},
	 20,
	 34},
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
	if (r->no_nvls)
		cfg.topo.link[TOPO_LINK_INTRA].nvls_eff = 0;
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
	double gemm_err, worst_check, worst;
	int ngemm;
};

static void emit(FILE *csv, struct tally *t, const struct row *r)
{
	static const char *const unit[] = {"TFLOP/s", "GB/s", "us"};
	double got = predict(r), err = (got - r->measured) / r->measured;

	printf("| %s | %.4g %s | %.4g | %+.1f%% | %s | %s |\n", r->what, r->measured, unit[r->kind],
	       got, 100 * err, r->fit ? "fit" : "check", r->source);
	fprintf(csv, "\"%s\",%s,%s,%.6g,%.6g,%.4f,%s,\"%s\"\n", r->what, r->preset, unit[r->kind],
		r->measured, got, err, r->fit ? "fit" : "check", r->source);
	t->n++;
	t->within += fabs(err) <= 0.10;
	t->worst = fabs(err) > t->worst ? fabs(err) : t->worst;
	if (r->kind == GEMM) {
		t->gemm_err += fabs(err);
		t->ngemm++;
	}
	if (!r->fit) {
		t->checks++;
		t->worst_check = fabs(err) > t->worst_check ? fabs(err) : t->worst_check;
	}
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	struct tally all = {0}, per[sizeof sweeps / sizeof *sweeps] = {{0}};
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
	for (int i = 0; i < nsweeps; i++) {
		const struct sweep *w = &sweeps[i];

		for (int j = 0; j < w->n; j++) {
			char size[32], what[96];
			struct row r = {what,
					w->preset,
					ALLREDUCE,
					ldexp(1, w->lo + j),
					w->gpus,
					1,
					w->us[j],
					w->source,
					w->lo + j >= w->fit_lo && w->lo + j <= w->fit_hi,
					0,
					0,
					0};

			size_name(size, sizeof size, r.a);
			snprintf(what, sizeof what, "%s %s", w->what, size);
			emit(csv, &per[i], &r);
		}
	}
	fclose(csv);
	printf("\n");
	for (int i = 0; i < nsweeps; i++) {
		printf("%s, %d sizes: %d within 10%%, the largest error %.1f%%\n", sweeps[i].what,
		       per[i].n, per[i].within, 100 * per[i].worst);
		all.n += per[i].n;
		all.within += per[i].within;
		all.checks += per[i].checks;
		all.worst_check =
			per[i].worst_check > all.worst_check ? per[i].worst_check : all.worst_check;
	}
	printf("%d of %d microbenchmarks within 10%% (target: all); the GEMM law's mean error "
	       "%.1f%% over %d shapes (target <= 5%%); the worst of the %d checks %.0f%%\n",
	       all.within, all.n, 100 * all.gemm_err / all.ngemm, all.ngemm, all.checks,
	       100 * all.worst_check);
	printf("wrote %s\n", path);
	return 0;
}
