/* bench/moe: expert parallelism on 64 H100s (8 nodes of dgx-h100), in dry-run: a
 * fine-grained MoE model (h 4096, 32 heads, 16 layers each with 64 experts of ffn 1792,
 * top-2: Mixtral's expert parameters cut 8 ways; sequence 4096, vocabulary 32000; pemu's
 * experts are GeLU MLPs, two matrices each), dp 64 with ZeRO-1, micro-batch 1, 2
 * micro-batches a rank; the experts over ep = 1 (every rank holds them all), 2, 4, 8 (the
 * ranks of a node), 16, 32 and 64 (across nodes), both dispatchers.
 *
 * For each: the step time, the share of it in expert parallelism's collectives (device
 * 0's time in them over the step; they block the compute stream, as Megatron's do without
 * --overlap-moe-expert-parallel-comm), and the memory of device 0: parameters, gradients
 * and optimizer state against Megatron's distributed-optimizer formula, 6 + 12/dp bytes a
 * dense parameter and 6 + 12/EDP an expert's, EDP = dp / ep (pemu keeps 16-bit gradients:
 * 4 + 12/d, which the table prints beside it). Writes DIR/moe.csv.
 * usage: bench/moe [DIR]   (default build/bench/out) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "coll.h"
#include "mem.h"
#include "presets.h"
#include "run/run.h"
#include "util.h"

enum { DP = 64, NODES = 8 };

static struct gpt_config model(void)
{
	struct gpt_config m = model_preset("moe-small")->cfg;

	m.num_layers = 16;
	m.hidden = 4096;
	m.heads = 32;
	m.ffn = 1792;
	m.seq_len = 4096;
	m.vocab = 32000;
	m.num_experts = 64;
	m.moe_top_k = 2;
	m.moe_every = 1;
	return m;
}

/* Parameters of cfg's model: the experts' (every MoE layer's four expert tensors) and the
 * rest. */
static void split_params(const struct gpt_config *m, double *dense, double *expert)
{
	double all = (double)gpt_num_params(m), ex = 0;

	for (int l = 0; l < m->num_layers; l++)
		if (gpt_layer_is_moe(m, l))
			ex += (double)m->num_experts *
			      (2.0 * m->hidden * m->ffn + m->ffn + m->hidden);
	*expert = ex;
	*dense = all - ex;
}

struct result {
	double step_s, ep_s, param_gib, grad_gib, optim_gib, act_gib, peak_gib;
};

static int one(int ep, enum par_ep_dispatch d, struct result *r)
{
	static const char *const ops[] = {"all-to-all", "all-to-all-v", "all-gather",
					  "reduce-scatter"};
	struct emu_config ec;
	struct emu_cluster *c;
	struct emu_dev *d0;
	struct run_cfg cfg;
	struct run_out o;
	char err[256];
	int rc;

	memset(&cfg, 0, sizeof cfg);
	cfg.model = model();
	cfg.mbs = 1;
	cfg.gbs = 2 * DP;
	cfg.steps = 1;
	cfg.seed = 1;
	cfg.prec = PREC_BF16;
	optim_defaults(&cfg.opt);
	cfg.bucket_bytes = 25000000;
	cfg.vpp = 1;
	cfg.flash = 1;
	cfg.zero = 1;
	cfg.fold = 1;
	cfg.ep = ep;
	cfg.ep_dispatch = d;
	mesh_init(&cfg.mesh, 1, 1, 1, DP, 1);
	if (run_check(&cfg, DP, err, sizeof err)) {
		fprintf(stderr, "bench/moe: %s\n", err);
		exit(1);
	}
	if (emu_config_default(&ec, "dgx-h100"))
		exit(1);
	ec.topo.nodes = NODES;
	ec.ndev = DP;
	ec.dry_run = 1;
	c = emu_cluster_new(&ec);
	run_alloc(&o, &cfg, 0);
	rc = run_parallel(c, &cfg, &o);
	d0 = emu_cluster_dev(c, 0);
	memset(r, 0, sizeof *r);
	if (!rc) {
		r->step_s = (double)o.step_ns[0] / 1e9;
		for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
			struct coll_stats st;

			if (!coll_stats_tag_get(d0, PAR_TRAFFIC_EP, ops[k], &st))
				r->ep_s += (double)st.time_ns / 1e9;
		}
	}
	r->param_gib = (double)mem_peak_bytes(d0, MEM_PARAM) / (1 << 30);
	r->grad_gib = (double)mem_peak_bytes(d0, MEM_GRAD) / (1 << 30);
	r->optim_gib = (double)mem_peak_bytes(d0, MEM_OPTIM) / (1 << 30);
	r->act_gib = (double)mem_peak_bytes(d0, MEM_ACT) / (1 << 30);
	r->peak_gib = (double)mem_peak_total(d0) / (1 << 30);
	run_free(&o);
	emu_cluster_free(c);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"alltoall", "allgather"};
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	struct gpt_config m = model();
	double dense, expert;
	char path[4096];
	FILE *csv;

	snprintf(path, sizeof path, "%s/moe.csv", dir);
	if (!(csv = fopen(path, "w"))) {
		fprintf(stderr, "bench/moe: cannot write %s\n", path);
		return 1;
	}
	split_params(&m, &dense, &expert);
	fprintf(csv, "ep,dispatcher,step_s,ep_share,params_grads_optim_gib,megatron_gib,"
		     "pemu_formula_gib,act_gib,peak_gib\n");
	printf("# MoE h 4096, 16 layers x 64 experts (ffn 1792, top-2), s 4096 on 64 H100 (8 "
	       "nodes): dp 64, ZeRO-1, micro-batch 1, 2 a rank; dry-run, bf16\n");
	printf("# parameters: %.2f B dense, %.2f B in experts\n", dense / 1e9, expert / 1e9);
	printf("%3s %-10s %9s %9s %22s %13s %13s %8s %8s\n", "ep", "dispatcher", "step s",
	       "ep share", "param+grad+optim GiB", "Megatron GiB", "4 + 12/d GiB", "act GiB",
	       "peak GiB");
	for (int ep = 1; ep <= DP; ep *= 2)
		for (int d = 0; d < (ep > 1 ? 2 : 1); d++) {
			struct result r;
			double edp = (double)DP / ep, ex = expert / ep;
			double meg = (dense * (6 + 12.0 / DP) + ex * (6 + 12.0 / edp)) / (1 << 30);
			double pf = (dense * (4 + 12.0 / DP) + ex * (4 + 12.0 / edp)) / (1 << 30);
			int oom = one(ep, (enum par_ep_dispatch)d, &r);

			char step[32] = "OOM", share[32] = "-";

			if (!oom) {
				snprintf(step, sizeof step, "%.3f", r.step_s);
				snprintf(share, sizeof share, "%.1f%%", 100 * r.ep_s / r.step_s);
			}
			printf("%3d %-10s %9s %9s %22.2f %13.2f %13.2f %8.2f %8.2f%s\n", ep,
			       ep > 1 ? names[d] : "-", step, share,
			       r.param_gib + r.grad_gib + r.optim_gib, meg, pf, r.act_gib,
			       r.peak_gib, oom ? " (does not fit in 80 GB)" : "");
			fprintf(csv, "%d,%s,%.6f,%.4f,%.3f,%.3f,%.3f,%.3f,%.3f\n", ep,
				ep > 1 ? names[d] : "none", oom ? 0 : r.step_s,
				oom ? 0 : r.ep_s / r.step_s, r.param_gib + r.grad_gib + r.optim_gib,
				meg, pf, r.act_gib, r.peak_gib);
			fflush(stdout);
		}
	fclose(csv);
	printf("# wrote %s\n", path);
	return 0;
}
