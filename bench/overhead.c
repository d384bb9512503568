/* bench/overhead: what a parallel configuration costs the emulator in wall time. `pemu run
 * --model small --dp 2 --tp 2` against `pemu train --model small` (the serial reference)
 * with the same global batch, measured alternately in the same run (issue target: at most
 * 1.5x). Both do the same math; the parallel run adds the collectives, the sharding and
 * four devices on this host's cores: as contexts on a thread a core (the default) and as
 * an OS thread each (as pemu ran before), alternately too. Writes DIR/overhead.csv and a
 * summary; never fails on speed.
 * usage: bench/overhead [DIR]   (default build/bench/out) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cmd/cmd.h"
#include "presets.h"
#include "run/run.h"
#include "util.h"

#define ROUNDS 5

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	double serial[ROUNDS], par[ROUNDS], thr[ROUNDS];
	struct emu_config e1, e4, et;
	struct emu_cluster *c1, *c4, *ct;
	struct run_cfg cfg;
	struct data data;
	char path[4096];
	FILE *csv;

	cmd_blas_kernels(argv); /* the GEMM kernels pemu runs (cmd/cmd.h) */

	openblas_set_num_threads(1);
	data_builtin(&data, 1 << 20);
	memset(&cfg, 0, sizeof cfg);
	cfg.model = model_preset("small")->cfg;
	cfg.mbs = 16;
	cfg.gbs = 32;
	cfg.steps = 10;
	cfg.seed = 1;
	cfg.prec = PREC_FP32;
	optim_defaults(&cfg.opt);
	cfg.bucket_bytes = 25000000;
	cfg.data = &data;
	mesh_init(&cfg.mesh, 2, 1, 1, 2, 1);
	emu_config_default(&e1, "dgx-a100");
	e1.ndev = 1;
	e4 = e1;
	e4.ndev = 4;
	et = e4;
	et.workers = -1;
	c1 = emu_cluster_new(&e1);
	c4 = emu_cluster_new(&e4);
	ct = emu_cluster_new(&et);
	for (int r = 0; r < ROUNDS; r++) {
		struct run_out o;

		run_alloc(&o, &cfg, 0);
		if (run_reference(c1, &cfg, &o))
			emu_die("train failed: %s", emu_cluster_report(c1));
		serial[r] = (double)emu_cluster_wall_ns(c1) / 1e9;
		run_free(&o);
		run_alloc(&o, &cfg, 0);
		if (run_parallel(c4, &cfg, &o))
			emu_die("run failed: %s", emu_cluster_report(c4));
		par[r] = (double)emu_cluster_wall_ns(c4) / 1e9;
		run_free(&o);
		run_alloc(&o, &cfg, 0);
		if (run_parallel(ct, &cfg, &o))
			emu_die("run failed: %s", emu_cluster_report(ct));
		thr[r] = (double)emu_cluster_wall_ns(ct) / 1e9;
		run_free(&o);
	}
	qsort(serial, ROUNDS, sizeof *serial, cmp_d);
	qsort(par, ROUNDS, sizeof *par, cmp_d);
	qsort(thr, ROUNDS, sizeof *thr, cmp_d);
	snprintf(path, sizeof path, "%s/overhead.csv", dir);
	if (!(csv = fopen(path, "w")))
		emu_die("cannot write %s", path);
	fprintf(csv,
		"what,steps,global_batch,wall_s\ntrain small,%d,%d,%.4f\nrun small dp2 "
		"tp2,%d,%d,%.4f\nrun small dp2 tp2 a thread a device,%d,%d,%.4f\n",
		cfg.steps, cfg.gbs, serial[ROUNDS / 2], cfg.steps, cfg.gbs, par[ROUNDS / 2],
		cfg.steps, cfg.gbs, thr[ROUNDS / 2]);
	fclose(csv);
	printf("small, global batch %d, %d steps: train %.3f s, run --dp 2 --tp 2 %.3f s wall: "
	       "%.2fx (target <= 1.5x)\n",
	       cfg.gbs, cfg.steps, serial[ROUNDS / 2], par[ROUNDS / 2],
	       par[ROUNDS / 2] / serial[ROUNDS / 2]);
	printf("the same run with an OS thread a device: %.3f s (contexts on a thread a core: "
	       "%.2fx of that)\n",
	       thr[ROUNDS / 2], par[ROUNDS / 2] / thr[ROUNDS / 2]);
	printf("wrote %s\n", path);
	emu_cluster_free(ct);
	emu_cluster_free(c1);
	emu_cluster_free(c4);
	data_free(&data);
	return 0;
}
