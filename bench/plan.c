/* bench/plan: pemu plan's search speed, as issue 14 measures it: every layout of GPT-3
 * 175B on 1024 A100s (dgx-a100, 128 nodes of 8; global batch 1536 of 2048 tokens; the
 * CLI's default space: tp up to 8, micro-batches 1 to 8, cp 1 at this sequence length),
 * on as many worker processes as the host has cores. Prints the space's counts (refused
 * by the rules, pruned by the memory bound, out of memory in dry-run, fit), the wall
 * time, layouts and dry-runs a second, and the winner; the target is >= 1000 evaluated
 * (dry-run) layouts in <= 60 s, that is >= 16.7 dry-runs a second (Calculon, a closed-form
 * planner, evaluates about 22 a second on this machine). Writes DIR/plan.csv; never fails
 * on speed.
 * usage: bench/plan [DIR]   (default build/bench/out) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "presets.h"
#include "run/plan.h"

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = cores > 0 ? (int)cores : 1;
	struct plan_space s;
	struct emu_config ec;
	struct plan_result r;
	char err[512], path[512];
	double runs, rate;
	FILE *csv;

	memset(&s, 0, sizeof s);
	run_cfg_init(&s.base);
	s.base.preset = model_preset("gpt3-175b");
	s.base.model = s.base.preset->cfg;
	s.base.gbs = 1536;
	s.base.steps = 1;
	s.base.log_every = 0;
	s.gpus = 1024;
	s.max_tp = 8;
	if (emu_config_default(&ec, "dgx-a100"))
		return 1;
	ec.topo.nodes = 128;
	ec.ndev = 1024;
	ec.dry_run = 1;
	printf("# bench/plan: pemu plan's default space for gpt3-175b on 1024 A100s, global "
	       "batch 1536, %d worker process%s\n",
	       jobs, jobs == 1 ? "" : "es");
	fflush(stdout);
	if (plan_search(&s, &ec, jobs, NULL, NULL, &r, err, sizeof err)) {
		fprintf(stderr, "bench/plan: %s\n", err);
		return 1;
	}
	runs = r.n - r.by_rule - r.by_bound;
	rate = runs / r.wall_s;
	printf("# %d layouts: %d refused by the rules, %d pruned by the memory bound, %d where "
	       "Oases's degree search kept tp throughout, %d out of memory in dry-run, %d "
	       "failed, %d fit\n",
	       r.n, r.by_rule, r.by_bound, r.by_same, r.by_oom, r.failed, r.nok);
	printf("# %.0f dry-runs in %.1f s: %.1f a second (%.0f layouts a second through the "
	       "three sieves)\n",
	       runs, r.wall_s, rate, r.n / r.wall_s);
	printf("# target: >= 1000 dry-run layouts in <= 60 s (>= 16.7 a second): %s\n",
	       rate * 60 >= 1000 ? "met" : "NOT met");
	if (r.nok) {
		const struct plan_entry *x = &r.all[r.rank[0]];

		printf("# winner: dp %d tp %d pp %d, schedule %d, vpp %d, micro-batch %d, ZeRO %d, "
		       "recompute %d: %.3f s a step, %.1f%% MFU\n",
		       x->p.dp, x->p.v[PLAN_TP], x->p.v[PLAN_PP], x->p.v[PLAN_SCHEDULE],
		       x->p.v[PLAN_VPP], x->p.v[PLAN_MBS], x->p.v[PLAN_ZERO],
		       x->p.v[PLAN_RECOMPUTE], (double)x->e.step_ns / 1e9, 100 * x->e.mfu);
	}
	snprintf(path, sizeof path, "%s/plan.csv", dir);
	if ((csv = fopen(path, "w"))) {
		fprintf(csv, "layouts,by_rule,by_bound,by_oom,failed,fit,dry_runs,wall_s,dry_runs_"
			     "per_s,jobs\n");
		fprintf(csv, "%d,%d,%d,%d,%d,%d,%.0f,%.3f,%.3f,%d\n", r.n, r.by_rule, r.by_bound,
			r.by_oom, r.failed, r.nok, runs, r.wall_s, rate, jobs);
		fclose(csv);
	}
	plan_result_free(&r);
	return 0;
}
