/* bench/pipeline: the bubble of each pipeline schedule against the number of
 * micro-batches, measured by the emulator. llama-7b-shape (32 layers) at sequence 1024 on
 * 4 stages of a dgx-a100 in dry-run, micro-batches of 1 sequence, memory uncapped (the
 * bubble, not the fit, is measured here), for m = 4 to 64; for each schedule
 * and m, the step time and the largest stage bubble as a fraction of the step, next to
 * REFERENCES.md's fraction for equal forward, input-backward and weight-backward times:
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
#include "presets.h"
#include "run.h"
#include "util.h"

/* REFERENCES.md's bubble fraction with T_F = T_B = T_W (a step of m (T_F + T_B + T_W)
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

int main(int argc, char **argv)
{
	static const enum sched_kind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED,
						SCHED_ZBH1, SCHED_ZBH2};
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	const int p = 4;
	char path[4096];
	FILE *csv;

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
