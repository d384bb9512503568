/* bench/long_context: context parallelism's three attentions on long sequences, in
 * dry-run: llama-7b-shape on 64 H100s (8 nodes of dgx-h100), tp 8 with sequence
 * parallelism inside a node, cp 4 across nodes, dp 2; micro-batch 1, 2 micro-batches a
 * replica; the sequence from 8k to 128k. For each (par/cp.h):
 *
 *   ring        --cp-comm-type p2p: K, V round the ring, overlapped with the blocks
 *   contiguous  the same ring with each rank one contiguous chunk (unbalanced)
 *   all_gather  K, V all-gathered before the attention, dK, dV reduce-scattered after
 *   ulysses     --cp-comm-type a2a: all-to-all to heads and back
 *
 * it prints the step time, context parallelism's exposed communication (the time its
 * collectives are on the wire while the compute stream has nothing to do: the union of
 * the cp-tagged ops' spans less the compute stream's busy time, the worst of the cp
 * ranks), its bytes per rank, and each cp rank's attention kernel time (the fastest and
 * slowest rank: equal for the balanced layouts, not for the contiguous ring). Writes
 * DIR/long_context.csv (plots/long_context.gp draws it).
 * usage: bench/long_context [DIR]   (default build/bench/out) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "coll.h"
#include "presets.h"
#include "run/run.h"
#include "trace.h"
#include "util.h"

enum { TP = 8, CP = 4, DP = 2, NODES = 8 };

static const struct variant {
	const char *name;
	enum par_cp_comm comm;
	int contiguous;
} variants[] = {
	{"ring", PAR_CP_P2P, 0},
	{"contiguous", PAR_CP_P2P, 1},
	{"all_gather", PAR_CP_ALL_GATHER, 0},
	{"ulysses", PAR_CP_A2A, 0},
};
#define NV ((int)(sizeof variants / sizeof *variants))

struct result {
	double step_s, exposed_s, gib, attn_min_s, attn_max_s;
};

struct span {
	int64_t t0, t1;
};

static int by_start(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* Device id's exposed context-parallel communication and its attention kernels' time. */
static void measure(const struct emu_cluster *c, int id, int64_t *exposed, int64_t *attn)
{
	size_t n = trace_count(c, id), nc = 0, nk = 0;
	struct span *comp = emu_xcalloc(n + 1, sizeof *comp), *cp = emu_xcalloc(n + 1, sizeof *cp);
	size_t j = 0;
	int64_t e = 0, a = 0, end = 0;

	for (size_t k = 0; k < n; k++) {
		struct trace_op op;

		trace_op_get(c, id, k, &op);
		if (op.stream == EMU_STREAM_COMPUTE) {
			comp[nc++] = (struct span){op.t0, op.t1};
			if (!strncmp(op.name, "attention.flash", 15))
				a += op.t1 - op.t0;
		} else if (op.tag == PAR_TRAFFIC_CP) {
			cp[nk++] = (struct span){op.t0, op.t1};
		}
	}
	qsort(comp, nc, sizeof *comp, by_start);
	qsort(cp, nk, sizeof *cp, by_start);
	/* walk the union of the cp spans, less the compute stream's busy spans */
	for (size_t k = 0; k < nk; k++) {
		int64_t lo = cp[k].t0 > end ? cp[k].t0 : end, hi = cp[k].t1;

		if (hi <= lo)
			continue;
		end = hi;
		e += hi - lo;
		while (j < nc && comp[j].t1 <= lo)
			j++;
		for (size_t q = j; q < nc && comp[q].t0 < hi; q++) {
			int64_t a0 = comp[q].t0 > lo ? comp[q].t0 : lo;
			int64_t a1 = comp[q].t1 < hi ? comp[q].t1 : hi;

			e -= a1 > a0 ? a1 - a0 : 0;
		}
	}
	*exposed = e;
	*attn = a;
	free(comp);
	free(cp);
}

/* One dry-run step of variant v at sequence s; 0, or 1 if it does not run. */
static int one(const struct variant *v, int s, struct result *r, uint64_t *cp_bytes)
{
	static const char *const ops[] = {"send", "all-gather", "reduce-scatter", "all-to-all"};
	struct emu_config ec;
	struct emu_cluster *c;
	struct run_cfg cfg;
	struct run_out o;
	char err[256];
	int rc;

	memset(&cfg, 0, sizeof cfg);
	cfg.model = model_preset("llama-7b-shape")->cfg;
	cfg.model.seq_len = s;
	cfg.mbs = 1;
	cfg.gbs = 2 * DP;
	cfg.steps = 1;
	cfg.seed = 1;
	cfg.prec = PREC_BF16;
	optim_defaults(&cfg.opt);
	cfg.bucket_bytes = 25000000;
	cfg.vpp = 1;
	cfg.sp = 1;
	cfg.flash = 1;
	cfg.fold = 1;
	cfg.cp_comm = v->comm;
	cfg.cp_contiguous = v->contiguous;
	mesh_init(&cfg.mesh, TP, CP, 1, DP, 1);
	if (run_check(&cfg, TP * CP * DP, err, sizeof err)) {
		fprintf(stderr, "bench/long_context: %s\n", err);
		exit(1);
	}
	if (emu_config_default(&ec, "dgx-h100"))
		exit(1);
	ec.topo.nodes = NODES;
	ec.ndev = TP * CP * DP;
	ec.dry_run = 1;
	ec.trace = 1;
	c = emu_cluster_new(&ec);
	run_alloc(&o, &cfg, 0);
	rc = run_parallel(c, &cfg, &o);
	if (rc) {
		fprintf(stderr, "bench/long_context: %s at %d: %s\n", v->name, s,
			emu_cluster_report(c));
	} else {
		r->step_s = (double)o.step_ns[0] / 1e9;
		r->exposed_s = 0;
		r->attn_min_s = 1e30;
		r->attn_max_s = r->gib = 0;
		*cp_bytes = 0;
		for (int q = 0; q < CP; q++) { /* the cp ranks of tp rank 0, replica 0 */
			int64_t e, a;
			struct emu_dev *d = emu_cluster_dev(c, q * TP);

			measure(c, q * TP, &e, &a);
			r->exposed_s =
				(double)e / 1e9 > r->exposed_s ? (double)e / 1e9 : r->exposed_s;
			r->attn_min_s =
				(double)a / 1e9 < r->attn_min_s ? (double)a / 1e9 : r->attn_min_s;
			r->attn_max_s =
				(double)a / 1e9 > r->attn_max_s ? (double)a / 1e9 : r->attn_max_s;
			if ((double)mem_peak_total(d) / (1 << 30) > r->gib)
				r->gib = (double)mem_peak_total(d) / (1 << 30);
		}
		for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
			struct coll_stats st;

			if (!coll_stats_tag_get(emu_cluster_dev(c, 0), PAR_TRAFFIC_CP, ops[k], &st))
				*cp_bytes += st.bytes;
		}
	}
	run_free(&o);
	emu_cluster_free(c);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	char path[4096];
	FILE *csv;

	snprintf(path, sizeof path, "%s/long_context.csv", dir);
	if (!(csv = fopen(path, "w"))) {
		fprintf(stderr, "bench/long_context: cannot write %s\n", path);
		return 1;
	}
	fprintf(csv, "seq,variant,step_s,cp_exposed_s,cp_gib_per_rank,attn_min_s,attn_max_s,"
		     "peak_gib\n");
	printf("# llama-7b-shape on 64 H100 (8 nodes): tp 8 + sp in a node, cp %d across nodes, "
	       "dp %d; micro-batch 1, 2 a replica; dry-run, bf16\n",
	       CP, DP);
	printf("%7s %-11s %9s %12s %12s %21s %9s\n", "seq", "cp", "step s", "cp exposed s",
	       "cp GiB/rank", "attention s min..max", "peak GiB");
	for (int s = 8192; s <= 131072; s *= 2)
		for (int v = 0; v < NV; v++) {
			struct result r;
			uint64_t bytes = 0;

			if (one(&variants[v], s, &r, &bytes)) {
				printf("%7d %-11s %9s\n", s, variants[v].name, "fails");
				continue;
			}
			printf("%7d %-11s %9.3f %12.3f %12.2f %10.3f..%-10.3f %9.1f\n", s,
			       variants[v].name, r.step_s, r.exposed_s, (double)bytes / (1 << 30),
			       r.attn_min_s, r.attn_max_s, r.gib);
			fprintf(csv, "%d,%s,%.6f,%.6f,%.4f,%.6f,%.6f,%.3f\n", s, variants[v].name,
				r.step_s, r.exposed_s, (double)bytes / (1 << 30), r.attn_min_s,
				r.attn_max_s, r.gib);
			fflush(stdout);
		}
	fclose(csv);
	printf("# wrote %s\n", path);
	return 0;
}
