/* bench/pipeline, two measurements by the emulator, in dry-run.
 *
 * 1. HelixPipe against 1F1B with full recomputation and ZB-H1 as sequences grow, the
 *    comparison of the HelixPipe paper (arXiv 2507.00394): llama-7b-shape on 64 H20
 *    (8 nodes of 8), tp 8 inside a node with sequence parallelism, pp 8, memory-efficient
 *    attention, 16 micro-batches of 1 sequence, at s = 8k, 16k, 32k, 64k and 128k. For
 *    each, the step time (or that it does not fit in 96 GB) and each stage's peak
 *    activation memory. HelixPipe runs with its recomputation without attention.
 *    Writes DIR/pipeline.csv and DIR/pipeline_memory.csv (plots/pipeline.gp).
 *
 * 2. The bubble of each pipeline schedule against the number of
 * micro-batches. llama-7b-shape (32 layers) at sequence 1024 on
 * 4 stages of a dgx-a100 in dry-run, micro-batches of 1 sequence, memory uncapped (the
 * bubble, not the fit, is measured here), for m = 4 to 64; for each schedule
 * and m, the step time and the largest stage bubble as a fraction of the step, next to
 * docs/formulas.md's fraction for equal forward, input-backward and weight-backward times:
 * (p-1)/(m+p-1) for GPipe and 1F1B, divided by v interleaved, and the ZB bubbles over a
 * step of m (F + B + W). A real model's stages are not equal (the first holds the
 * embeddings, the last the output layer and the loss), and its backward costs about
 * twice its forward, so the measured fractions sit near the formulas, not on them.
 * Writes DIR/bubbles.csv (plots/bubbles.gp draws it) and prints the table.
 * usage: bench/pipeline [DIR]   (default build/bench/out) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "mem.h"
#include "presets.h"
#include "run/run.h"
#include "util.h"

/* docs/formulas.md's bubble fraction with T_F = T_B = T_W (a step of m (T_F + T_B + T_W)
 * plus the bubble). */
static double formula(enum sched_kind k, int p, int m, int v)
{
	double bubble;

	switch (k) {
	case SCHED_GPIPE:
	case SCHED_1F1B:
		bubble = 3.0 * (p - 1);
		break;
	case SCHED_INTERLEAVED:
		bubble = 3.0 * (p - 1) / v;
		break;
	case SCHED_ZBH1:
		bubble = p - 1;
		break;
	default:
		bubble = m >= 2 * p ? 0 : p - 1;
		break;
	}
	return bubble / (3.0 * m + bubble);
}

/* Runs one configuration of the sequence sweep; 0 and *step_ms, or 1 if it does not fit
 * (the OOM report on stderr). act[pp] gets each stage's peak activation memory. */
static int long_run(enum sched_kind kind, int recompute, int seq, double *step_ms, double *act)
{
	const int pp = 8, tp = 8, nodes = 8;
	struct emu_config ec;
	struct emu_cluster *c;
	struct run_cfg cfg;
	struct run_out o;
	char err[256];
	int rc;

	memset(&cfg, 0, sizeof cfg);
	cfg.model = model_preset("llama-7b-shape")->cfg;
	cfg.model.seq_len = seq;
	cfg.mbs = 1;
	cfg.gbs = 16;
	cfg.steps = 1;
	cfg.seed = 1;
	cfg.prec = PREC_BF16;
	optim_defaults(&cfg.opt);
	cfg.bucket_bytes = 25000000;
	cfg.schedule = kind;
	cfg.vpp = 1;
	cfg.sp = 1;
	cfg.flash = 1;
	cfg.recompute = recompute;
	mesh_init(&cfg.mesh, tp, 1, 1, 1, pp);
	if (run_check(&cfg, tp * pp, err, sizeof err)) {
		fprintf(stderr, "bench/pipeline: %s\n", err);
		exit(1);
	}
	if (emu_config_default(&ec, "h20"))
		exit(1);
	ec.topo.nodes = nodes;
	ec.ndev = tp * pp;
	ec.dry_run = 1;
	c = emu_cluster_new(&ec);
	run_alloc(&o, &cfg, 0);
	rc = run_parallel(c, &cfg, &o);
	*step_ms = rc ? 0 : (double)o.step_ns[0] / 1e6;
	for (int s = 0; s < pp; s++)
		act[s] = (double)mem_peak_bytes(emu_cluster_dev(c, s * tp), MEM_ACT) / (1 << 30);
	run_free(&o);
	emu_cluster_free(c);
	return rc ? 1 : 0;
}

static int sequence_sweep(const char *dir)
{
	static const struct {
		const char *name;
		enum sched_kind kind;
		int recompute;
	} runs[] = {{"helix", SCHED_HELIX, 2},
		    {"1f1b-recompute", SCHED_1F1B, 2},
		    {"zb-h1", SCHED_ZBH1, 0}};
	char path[4096], mpath[4096];
	FILE *csv, *mem;

	snprintf(path, sizeof path, "%s/pipeline.csv", dir);
	snprintf(mpath, sizeof mpath, "%s/pipeline_memory.csv", dir);
	if (!(csv = fopen(path, "w")) || !(mem = fopen(mpath, "w"))) {
		fprintf(stderr, "bench/pipeline: cannot write %s\n", path);
		return 1;
	}
	fprintf(csv, "seq,helix_ms,1f1b_recompute_ms,zb_h1_ms\n");
	fprintf(mem, "schedule,seq,stage,peak_activations_gib\n");
	printf("# llama-7b-shape on 64 H20: tp 8 + sp, pp 8, flash attention, 16 micro-batches; "
	       "step time in virtual ms (OOM: does not fit in 96 GB)\n");
	printf("%8s %14s %16s %14s %10s\n", "seq", "helix", "1f1b+recompute", "zb-h1",
	       "helix gain");
	for (int seq = 8192; seq <= 131072; seq *= 2) {
		double ms[3], act[8];

		fprintf(csv, "%d", seq);
		printf("%8d", seq);
		for (int r = 0; r < 3; r++) {
			int oom = long_run(runs[r].kind, runs[r].recompute, seq, &ms[r], act);

			if (oom) {
				fprintf(csv, ",");
				printf(" %*s", r == 1 ? 16 : 14, "OOM");
				continue;
			}
			fprintf(csv, ",%.3f", ms[r]);
			printf(" %*.1f", r == 1 ? 16 : 14, ms[r]);
			for (int s = 0; s < 8; s++)
				fprintf(mem, "%s,%d,%d,%.3f\n", runs[r].name, seq, s, act[s]);
		}
		fprintf(csv, "\n");
		printf(" %9.2fx\n", ms[0] > 0 ? ms[1] / ms[0] : 0);
	}
	fclose(csv);
	fclose(mem);
	printf("# wrote %s and %s\n", path, mpath);
	return 0;
}

int main(int argc, char **argv)
{
	static const enum sched_kind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED,
						SCHED_ZBH1, SCHED_ZBH2};
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	const int p = 4;
	char path[4096];
	FILE *csv;

	if (sequence_sweep(dir))
		return 1;

	snprintf(path, sizeof path, "%s/bubbles.csv", dir);
	if (!(csv = fopen(path, "w"))) {
		fprintf(stderr, "bench/pipeline: cannot write %s\n", path);
		return 1;
	}
	fprintf(csv, "schedule,m,step_ms,bubble_fraction,formula\n");
	printf("# pipeline bubbles: llama-7b-shape at s = 1024, pp %d on dgx-a100, dry-run, "
	       "bf16\n",
	       p);
	printf("%-12s %4s %12s %10s %10s\n", "schedule", "m", "step ms", "bubble", "formula");
	for (int k = 0; k < 5; k++)
		for (int m = p; m <= 64; m *= 2) {
			struct emu_config ec;
			struct emu_cluster *c;
			struct run_cfg cfg;
			struct run_out o;
			int64_t worst = 0;
			char err[256];
			double frac;

			memset(&cfg, 0, sizeof cfg);
			cfg.model = model_preset("llama-7b-shape")->cfg;
			cfg.model.seq_len = 1024;
			cfg.mbs = 1;
			cfg.gbs = m;
			cfg.steps = 1;
			cfg.seed = 1;
			cfg.prec = PREC_BF16;
			optim_defaults(&cfg.opt);
			cfg.bucket_bytes = 25000000;
			cfg.schedule = kinds[k];
			cfg.vpp = kinds[k] == SCHED_INTERLEAVED ? 2 : 1;
			mesh_init(&cfg.mesh, 1, 1, 1, 1, p);
			if (run_check(&cfg, p, err, sizeof err)) {
				fprintf(stderr, "bench/pipeline: %s\n", err);
				return 1;
			}
			if (emu_config_default(&ec, "dgx-a100"))
				return 1;
			ec.ndev = p;
			ec.dry_run = 1;
			ec.mem_cap = (uint64_t)1 << 44;
			c = emu_cluster_new(&ec);
			run_alloc(&o, &cfg, 0);
			if (run_parallel(c, &cfg, &o)) {
				fprintf(stderr, "bench/pipeline: %s\n", emu_cluster_report(c));
				return 1;
			}
			for (int s = 0; s < p; s++)
				worst = o.bubble_ns[s] > worst ? o.bubble_ns[s] : worst;
			frac = (double)worst / (double)o.step_ns[0];
			printf("%-12s %4d %12.2f %10.3f %10.3f\n", sched_name(kinds[k]), m,
			       (double)o.step_ns[0] / 1e6, frac, formula(kinds[k], p, m, cfg.vpp));
			fprintf(csv, "%s,%d,%.6f,%.6f,%.6f\n", sched_name(kinds[k]), m,
				(double)o.step_ns[0] / 1e6, frac, formula(kinds[k], p, m, cfg.vpp));
			run_free(&o);
			emu_cluster_free(c);
		}
	fclose(csv);
	printf("# wrote %s\n", path);
	return 0;
}
