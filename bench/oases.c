/* bench/oases: the Oases paper's experiment (Li et al. 2023, arXiv 2305.16121; its
 * repository's figures/performance_{nvlink,no_nvlink}.png), in dry-run: 32 RTX 3090s, 4
 * a node (8 nodes), on rtx3090-nvlink and rtx3090-pcie; tp 4 x dp 8; sequence 1024, heads
 * h / 64, micro-batch 4, 20 micro-batches a replica a step; (hidden, layers) from
 * (1024, 24) to (12288, 4). For each, the paper's ablation:
 *
 *   megatron   Megatron's order, full recomputation (the paper's baseline)
 *   rc-oases   Megatron's order, Oases's recomputation (checkpoints after the collectives)
 *   ovl-full   Oases's overlapped tp (two sub-batches), full recomputation
 *   oases      both: Oases
 *
 * Megatron's order as the paper's harness runs it (lucasleesw/oases, benchmark/overlap_tp.py,
 * schedule default_checkpoint): its column-parallel layers' input-gradient all-reduce in
 * the backward of copy_to_model_parallel_region (oases/mpu/mappings.py), which autograd
 * runs after the layer's weight gradient, exposed, as Megatron-LM did before 2022
 * (--no-async-tensor-model-parallel-allreduce), not posted before it as Megatron-LM does now.
 *
 * and the throughput of each against megatron's, beside the paper's Oases figure, and of
 * the plan Oases's search picks (pemu plan --oases: the first K layers at a smaller
 * degree T under the overlap and its recomputation, run/oases_plan.h). The
 * benchmark model has no vocabulary to speak of (1024 entries: the paper's has 100
 * classes), and runs at bf16 with ZeRO-1 over dp (Adam's state of 12288 x 4 does not fit
 * a 24 GB GPU unsharded). Writes DIR/oases.csv (plots/oases.gp draws it) and prints the
 * table.
 * usage: bench/oases [DIR]   (default build/bench/out) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include "cluster.h"
#include "mem.h"
#include "presets.h"
#include "run/oases_plan.h"
#include "run/run.h"

static const struct shape {
	int hidden, layers;
	double paper[2]; /* Oases / Megatron: NVLink, PCIe */
} shapes[] = {
	{1024, 24, {1.06, 1.53}}, {2048, 24, {1.62, 1.95}}, {3072, 24, {1.45, 1.78}},
	{4096, 16, {1.39, 1.73}}, {6144, 16, {1.59, 1.67}}, {8192, 8, {1.63, 1.71}},
	{12288, 4, {1.58, 1.81}},
};

static const struct variant {
	const char *name;
	enum par_overlap overlap;
	enum par_recompute recompute;
} variants[] = {
	{"megatron", PAR_OVERLAP_NONE, PAR_RECOMPUTE_FULL},
	{"rc-oases", PAR_OVERLAP_NONE, PAR_RECOMPUTE_OASES},
	{"ovl-full", PAR_OVERLAP_OASES, PAR_RECOMPUTE_FULL},
	{"oases", PAR_OVERLAP_OASES, PAR_RECOMPUTE_OASES},
};
#define NV ((int)(sizeof variants / sizeof *variants))

static const char *const clusters[] = {"rtx3090-nvlink", "rtx3090-pcie"};

/* The experiment's configuration of shape sh under variant v on cluster, into out and
 * eout. */
static void setup(const char *cluster, const struct shape *sh, const struct variant *v,
		  struct run_cfg *out, struct emu_config *eout)
{
	const int tp = 4, dp = 8, mbs = 4, accum = 20;
	struct emu_config ec;
	struct run_cfg cfg;
	char err[256];

	memset(&cfg, 0, sizeof cfg);
	cfg.model = model_preset("small")->cfg;
	cfg.model.hidden = sh->hidden;
	cfg.model.num_layers = sh->layers;
	cfg.model.heads = sh->hidden / 64;
	cfg.model.ffn = 4 * sh->hidden;
	cfg.model.seq_len = 1024;
	cfg.model.vocab = 1024;
	cfg.mbs = mbs;
	cfg.gbs = mbs * accum * dp;
	cfg.steps = 1;
	cfg.seed = 1;
	cfg.prec = PREC_BF16;
	optim_defaults(&cfg.opt);
	cfg.bucket_bytes = 25000000;
	cfg.zero = 1;
	cfg.tp_overlap = v->overlap;
	cfg.tp_sync_dgrad = 1; /* the harness's layers: every all-reduce where it is issued */
	cfg.recompute = v->recompute;
	cfg.vpp = 1;
	cfg.fold = 1;
	mesh_init(&cfg.mesh, tp, 1, 1, dp, 1);
	if (run_check(&cfg, tp * dp, err, sizeof err)) {
		fprintf(stderr, "bench/oases: %s\n", err);
		exit(1);
	}
	if (emu_config_default(&ec, cluster))
		exit(1);
	ec.topo.gpus_per_node = 4;
	ec.topo.nodes = 8;
	ec.ndev = tp * dp;
	ec.dry_run = 1;
	*out = cfg;
	*eout = ec;
}

/* One dry-run step; 0 with its step time, exposed communication and peak memory of
 * device 0, or 1 if it does not run (the report on stderr). */
static int one(const char *cluster, const struct shape *sh, const struct variant *v, double *step_s,
	       double *exposed_s, double *peak_gib)
{
	struct emu_config ec;
	struct emu_cluster *c;
	struct run_cfg cfg;
	struct run_out o;
	int rc;

	setup(cluster, sh, v, &cfg, &ec);
	c = emu_cluster_new(&ec);
	run_alloc(&o, &cfg, 0);
	rc = run_parallel(c, &cfg, &o);
	if (rc)
		fprintf(stderr, "bench/oases: %s h %d: %s\n", cluster, sh->hidden,
			emu_cluster_report(c));
	*step_s = rc ? 0 : (double)o.step_ns[0] / 1e9;
	*exposed_s = rc ? 0 : (double)(o.step_ns[0] - o.compute_ns[0]) / 1e9;
	*peak_gib = (double)mem_peak_total(emu_cluster_dev(c, 0)) / (1 << 30);
	run_free(&o);
	emu_cluster_free(c);
	return rc ? 1 : 0;
}

/* The plan Oases's search picks for the row (pemu plan --oases), dry-run: its throughput
 * against megatron's step (s), printed and as a CSV row of variant "plan K:T". */
static void searched(FILE *csv, const char *cluster, const struct shape *sh, double megatron)
{
	struct oases_result *r = emu_xcalloc(1, sizeof *r);
	struct emu_config ec;
	struct run_cfg cfg;
	char err[512];

	setup(cluster, sh, &variants[NV - 1], &cfg, &ec);
	if (oases_plan(&ec, &cfg, r, err, sizeof err)) {
		printf(" %14s\n", "none fits");
		fprintf(stderr, "bench/oases: %s\n", err);
	} else {
		double s = r->checked_ns / 1e9;

		printf(" %6.2fx (%d:%d)\n", megatron / s, r->K, r->T);
		fprintf(csv, "%s,%d,%d,plan %d:%d,%.6f,,%.2f,%.4f,%.2f\n", cluster, sh->hidden,
			sh->layers, r->K, r->T, s, r->checked_peak / (1 << 30), megatron / s,
			sh->paper[strstr(cluster, "nvlink") ? 0 : 1]);
	}
	free(r);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	char path[4096];
	FILE *csv;

	snprintf(path, sizeof path, "%s/oases.csv", dir);
	if (!(csv = fopen(path, "w"))) {
		fprintf(stderr, "bench/oases: cannot write %s\n", path);
		return 1;
	}
	fprintf(csv, "cluster,hidden,layers,variant,step_s,exposed_comm_s,peak_gib,"
		     "throughput_vs_megatron,paper_oases\n");
	printf("# Oases's experiment in dry-run: 32 RTX 3090 (8 nodes of 4), tp 4 x dp 8, seq "
	       "1024, micro-batch 4, 20 a step, bf16, ZeRO-1\n"
	       "# megatron: step time in s (full recomputation), the share of it the compute "
	       "stream waits (exposed communication);\n# the others: throughput against "
	       "megatron; oases's exposed share; paper: Oases / Megatron from its figures\n");
	for (int k = 0; k < 2; k++) {
		printf("%-15s %6s %3s %9s %8s %9s %9s %9s %9s %7s %8s %14s\n", clusters[k],
		       "hidden", "L", "megatron", "exposed", "rc-oases", "ovl-full", "oases",
		       "exposed", "paper", "peak GiB", "searched plan");
		for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
			const struct shape *sh = &shapes[s];
			double step[NV], exposed[NV], peak[NV];
			int bad = 0;

			for (int v = 0; v < NV; v++)
				bad |= one(clusters[k], sh, &variants[v], &step[v], &exposed[v],
					   &peak[v]);
			if (bad) {
				printf("%-15s %6d %3d   does not run (see above)\n", "", sh->hidden,
				       sh->layers);
				continue;
			}
			printf("%-15s %6d %3d %9.3f %7.0f%%", "", sh->hidden, sh->layers, step[0],
			       100 * exposed[0] / step[0]);
			for (int v = 1; v < NV; v++)
				printf(" %8.2fx", step[0] / step[v]);
			printf(" %8.0f%% %6.2fx %8.1f", 100 * exposed[NV - 1] / step[NV - 1],
			       sh->paper[k], peak[NV - 1]);
			for (int v = 0; v < NV; v++)
				fprintf(csv, "%s,%d,%d,%s,%.6f,%.6f,%.2f,%.4f,%.2f\n", clusters[k],
					sh->hidden, sh->layers, variants[v].name, step[v],
					exposed[v], peak[v], step[0] / step[v], sh->paper[k]);
			searched(csv, clusters[k], sh, step[0]);
		}
	}
	fclose(csv);
	printf("wrote %s\n", path);
	return 0;
}
