/* bench/scale: the emulator's wall time against the device count, for one dry-run step of
 * GPT-3 175B with tp 8, pp 8 and dp N (1F1B, micro-batch 1, global batch 8N, full
 * recomputation, sequence parallelism, bf16, 8 GPUs a node, a 1 TB cap so that nothing is
 * refused for memory): 64 devices for N = 1 up to 1024 for N = 16 (PEMU_BENCH_SCALE_MAX
 * raises the top, e.g. 4096). The largest is then measured again beside two busy loops
 * (child processes spinning on the host), since one OS thread a device makes every
 * collective wait for every member's thread to be scheduled. Issue 10's targets: 1024
 * devices in <= 1 s, and no more than 2x slower beside the busy loops. Writes
 * DIR/scale.csv and a summary; never fails on speed.
 * usage: bench/scale [DIR]   (default build/bench/out) */
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "presets.h"
#include "run/run.h"
#include "util.h"

#define ROUNDS 3

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One dry-run step on dp x 64 devices: the median wall time of ROUNDS, and the virtual
 * step time into *step_s. */
static double measure(int dp, double *step_s)
{
	struct emu_config ec;
	struct emu_cluster *c;
	struct run_cfg cfg;
	double wall[ROUNDS];
	char err[512];

	run_cfg_init(&cfg);
	cfg.preset = model_preset("gpt3-175b");
	cfg.model = cfg.preset->cfg;
	mesh_init(&cfg.mesh, 8, 1, 1, dp, 8);
	cfg.mbs = 1;
	cfg.gbs = 8 * dp;
	cfg.steps = 1;
	cfg.schedule = SCHED_1F1B;
	cfg.schedule_set = 1;
	cfg.prec = PREC_BF16;
	cfg.prec_set = 1;
	cfg.recompute = PAR_RECOMPUTE_FULL;
	cfg.sp = 1;
	cfg.log_every = 0;
	if (emu_config_default(&ec, "dgx-a100"))
		emu_die("no preset dgx-a100");
	ec.topo.nodes = 8 * dp;
	ec.ndev = 64 * dp;
	ec.dry_run = 1;
	ec.mem_cap = (uint64_t)1 << 40;
	if (run_cfg_finish(&cfg, ec.ndev, err, sizeof err))
		emu_die("bench/scale: %s", err);
	c = emu_cluster_new(&ec);
	for (int r = 0; r < ROUNDS; r++) {
		struct run_out o;

		run_alloc(&o, &cfg, 0);
		if (run_parallel(c, &cfg, &o))
			emu_die("bench/scale: the run failed: %s", emu_cluster_report(c));
		wall[r] = (double)emu_cluster_wall_ns(c) / 1e9;
		*step_s = (double)o.step_ns[0] / 1e9;
		run_free(&o);
	}
	emu_cluster_free(c);
	qsort(wall, ROUNDS, sizeof *wall, cmp_d);
	return wall[ROUNDS / 2];
}

/* Two child processes that spin until killed: other work on the host. */
static void busy_start(pid_t *pid)
{
	for (int i = 0; i < 2; i++) {
		if ((pid[i] = fork()) < 0)
			emu_die("fork failed");
		if (pid[i] == 0) {
			volatile unsigned long x = 0;

			for (;;)
				x++;
		}
	}
}

static void busy_stop(const pid_t *pid)
{
	for (int i = 0; i < 2; i++) {
		kill(pid[i], SIGKILL);
		waitpid(pid[i], NULL, 0);
	}
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out", *env;
	int max = 1024, top = 0;
	double top_quiet = 0, top_busy, step;
	char path[4096];
	pid_t pid[2];
	FILE *csv;

	if ((env = getenv("PEMU_BENCH_SCALE_MAX")) && atoi(env) >= 64)
		max = atoi(env);
	openblas_set_num_threads(1);
	snprintf(path, sizeof path, "%s/scale.csv", dir);
	if (!(csv = fopen(path, "w")))
		emu_die("cannot write %s", path);
	fprintf(csv, "devices,dp,global_batch,host_load,wall_s,step_time_s\n");
	printf("gpt3-175b, tp 8 pp 8 dp N, 1F1B, global batch 8N, one dry-run step (median of "
	       "%d):\n",
	       ROUNDS);
	for (int dp = 1; 64 * dp <= max; dp *= 2) {
		double wall = measure(dp, &step);

		fprintf(csv, "%d,%d,%d,quiet,%.4f,%.6f\n", 64 * dp, dp, 8 * dp, wall, step);
		printf("  %5d devices: %8.3f s wall (step %.3f s virtual)\n", 64 * dp, wall, step);
		fflush(stdout);
		top = dp;
		top_quiet = wall;
	}
	busy_start(pid);
	top_busy = measure(top, &step);
	busy_stop(pid);
	fprintf(csv, "%d,%d,%d,2 busy loops,%.4f,%.6f\n", 64 * top, top, 8 * top, top_busy, step);
	fclose(csv);
	printf("  %5d devices beside 2 busy loops: %.3f s wall, %.1fx the quiet run (target <= "
	       "2x); target at 1024 devices: <= 1 s quiet\n",
	       64 * top, top_busy, top_busy / top_quiet);
	printf("wrote %s\n", path);
	return 0;
}
