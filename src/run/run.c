/* run/run: what a run gives back (run_out), and the bookkeeping run/device.c and
 * run/ref.c share; see run/run.h. */
#include "run/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "util.h"

void run_alloc(struct run_out *o, const struct run_cfg *cfg, int snapshot)
{
	int np = gpt_num_tensors(&cfg->model), dp = cfg->mesh.size[MESH_DP];

	memset(o, 0, sizeof *o);
	o->steps = cfg->steps;
	o->accum = cfg->gbs / cfg->mbs;
	o->np = np;
	o->loss = emu_xcalloc((size_t)cfg->steps, sizeof *o->loss);
	o->loss_part =
		emu_xcalloc((size_t)cfg->steps * (size_t)dp * (size_t)cfg->mesh.size[MESH_PP] *
				    (size_t)cfg->mesh.size[MESH_CP],
			    sizeof *o->loss_part);
	o->dev_steps = emu_xcalloc((size_t)cfg->mesh.world, sizeof *o->dev_steps);
	o->step_ns = emu_xcalloc((size_t)cfg->steps, sizeof *o->step_ns);
	o->compute_ns = emu_xcalloc((size_t)cfg->steps, sizeof *o->compute_ns);
	o->exposed_ns = emu_xcalloc((size_t)cfg->steps, sizeof *o->exposed_ns);
	o->snapshot = snapshot;
	if (cfg->model.num_experts > 0 && cfg->data)
		o->moe_hist = emu_xcalloc(run_moe_slices(cfg) * (size_t)o->accum *
						  (size_t)cfg->model.num_layers * 2 *
						  (size_t)cfg->model.num_experts,
					  sizeof *o->moe_hist);
	if (!snapshot)
		return;
	if (cfg->model.num_experts > 0) {
		o->route_mb = (size_t)cfg->model.num_layers * (size_t)cfg->mbs *
			      (size_t)cfg->model.seq_len * (size_t)cfg->model.moe_top_k;
		o->routes = emu_xcalloc((size_t)cfg->steps * (size_t)(cfg->gbs / cfg->mbs) *
						o->route_mb,
					sizeof *o->routes);
	}
	o->gsteps = emu_xcalloc((size_t)np, sizeof *o->gsteps);
	o->grad0 = emu_xcalloc((size_t)np, sizeof *o->grad0);
	o->params = emu_xcalloc((size_t)np, sizeof *o->params);
	{
		size_t all = gpt_num_params(&cfg->model), fit = RUN_GSTEPS_MAX / (all ? all : 1);

		o->gsteps_n = fit < 1 ? 1 : fit < (size_t)cfg->steps ? (int)fit : cfg->steps;
	}
	for (int i = 0; i < np; i++) {
		size_t n = gpt_tensor_numel(&cfg->model, i);

		o->gsteps[i] = emu_xcalloc(n ? n * (size_t)o->gsteps_n : 1, sizeof(float));
		o->grad0[i] = o->gsteps[i];
		o->params[i] = emu_xcalloc(n ? n : 1, sizeof(float));
	}
}

void run_free(struct run_out *o)
{
	for (int i = 0; o->snapshot && i < o->np; i++) {
		free(o->gsteps[i]);
		free(o->params[i]);
	}
	free(o->gsteps);
	free(o->grad0);
	free(o->params);
	free(o->loss);
	free(o->loss_part);
	free(o->dev_steps);
	free(o->step_ns);
	free(o->compute_ns);
	free(o->exposed_ns);
	free(o->routes);
	free(o->moe_hist);
	for (int s = 0; o->span && s < o->sched.p; s++)
		free(o->span[s]);
	free(o->span);
	free(o->bubble_ns);
	sched_free(&o->sched);
	memset(o, 0, sizeof *o);
}

/* Keeps the routing decisions of sub-batch sub of nsub of micro-batch mb (in global
 * order) from its layers' la. */
void run_record_routes(struct run_out *o, const struct run_cfg *cfg, uint64_t mb, int sub, int nsub,
		       const struct run_rows *rows, const struct gpt_layer_acts *la, int l0, int l1)
{
	int L = cfg->model.num_layers, E = cfg->model.num_experts, K = cfg->model.moe_top_k;
	int s = cfg->model.seq_len, T = rows->T;
	size_t all = o->route_mb / (size_t)L, per = all / (size_t)nsub;
	int *out = o->routes ? o->routes + mb * o->route_mb + (size_t)sub * per : NULL;
	size_t choices = (size_t)rows->n * (size_t)K; /* this device's */

	for (int l = l0; o->moe_hist && l < l1; l++) { /* each micro-batch its own slots */
		const struct moe_acts *a = &la[l - l0].moe;
		uint64_t at =
			((uint64_t)rows->slice * (uint64_t)o->accum + mb % (uint64_t)o->accum) *
				(uint64_t)L +
			(uint64_t)l;
		uint64_t *h = o->moe_hist + at * 2 * (uint64_t)E;

		if (!gpt_layer_is_moe(&cfg->model, l) || !a->choice)
			continue;
		for (size_t e = 0; e < choices; e++)
			h[a->choice[e] + (a->slot[e] < 0 ? E : 0)]++;
	}

	for (int l = l0; out && l < l1; l++) {
		const struct moe_acts *a = &la[l - l0].moe;

		if (!gpt_layer_is_moe(&cfg->model, l) || !a->choice)
			continue;
		for (size_t e = 0; e < choices; e++) { /* choice e: row row0 + e / K */
			size_t t = (size_t)rows->row0 + e / (size_t)K, b = t / (size_t)T,
			       i = t % (size_t)T;
			size_t g = (b * (size_t)s + (size_t)(rows->pos ? rows->pos[i] : (int)i)) *
					   (size_t)K +
				   e % (size_t)K;

			out[l * all + g] = a->slot[e] >= 0 ? a->choice[e] : -1 - a->choice[e];
		}
	}
}

size_t run_moe_slices(const struct run_cfg *cfg)
{
	return (size_t)cfg->mesh.size[MESH_CP] * (size_t)cfg->mesh.size[MESH_TP];
}

uint64_t run_moe_tokens(const struct run_out *o, const struct run_cfg *cfg, int l, int e,
			uint64_t *dropped)
{
	int L = cfg->model.num_layers, E = cfg->model.num_experts;
	uint64_t kept = 0;

	*dropped = 0;
	for (int mb = 0; o->moe_hist && (size_t)mb < run_moe_slices(cfg) * (size_t)o->accum; mb++) {
		const uint64_t *h = o->moe_hist + ((size_t)mb * L + (size_t)l) * 2 * (size_t)E;

		kept += h[e];
		*dropped += h[E + e];
	}
	return kept;
}

void run_sum_losses(const struct run_cfg *cfg, struct run_out *o)
{
	for (int s = 0; s < cfg->steps; s++) {
		double l = 0;

		for (int r = 0; r < cfg->mesh.size[MESH_DP] * cfg->mesh.size[MESH_PP] *
					    cfg->mesh.size[MESH_CP];
		     r++)
			l += o->loss_part[r * cfg->steps + s];
		o->loss[s] = (float)l;
	}
}

/* The host bytes a dry-run of cfg (parallel, or the reference on one device) would have
 * held, summed, with the largest device's; if it fails, what it held by then, and the
 * failure's first line in why. One step, and without a pipeline one micro-batch a
 * replica; it writes no file. */
static uint64_t dry_need(const struct run_cfg *cfg, const struct emu_config *ecfg, int parallel,
			 uint64_t *largest, char *why, size_t n)
{
	struct emu_config e = *ecfg;
	struct run_cfg dry = *cfg;
	struct emu_cluster *c;
	struct run_out o;
	uint64_t sum = 0;
	int rc;

	e.dry_run = 1;
	e.trace = 0;
	e.pace = 0;
	e.nslow = 0; /* (the sizing run's memory is the run's whatever the faults) */
	if (!parallel) {
		e.topo.nodes = 1;
		e.ndev = 1;
	}
	dry.data = NULL;
	dry.save = NULL; /* (it would write a checkpoint of its shapes: zeros) */
	dry.nfail = 0;
	dry.steps = 1;
	/* Without a pipeline a micro-batch's activations are gone by the next one's forward,
	 * so one a replica holds what any number does (a global batch of millions sized in
	 * the time of one); a pipeline's in-flight micro-batches depend on their count. */
	if (cfg->mesh.size[MESH_PP] == 1)
		dry.gbs = dry.mbs * cfg->mesh.size[MESH_DP];
	dry.log_every = 0;
	dry.fold = 1;
	c = emu_cluster_new(&e);
	run_alloc(&o, &dry, 0);
	rc = parallel ? run_parallel(c, &dry, &o) : run_reference(c, &dry, &o);
	for (int i = 0; i < e.ndev; i++) {
		uint64_t h = mem_host_peak(emu_cluster_dev(c, i));

		sum += h;
		*largest = h > *largest ? h : *largest;
	}
	if (rc && !why[0])
		snprintf(why, n, "%.*s", (int)strcspn(emu_cluster_report(c), "\n"),
			 emu_cluster_report(c));
	run_free(&o);
	emu_cluster_free(c);
	return sum;
}

uint64_t run_host_need(const struct run_cfg *cfg, const struct emu_config *ecfg, int parallel,
		       int reference, uint64_t *largest, char *why, size_t n)
{
	uint64_t need = 0;

	*largest = 0;
	why[0] = 0;
	if (parallel)
		need += dry_need(cfg, ecfg, 1, largest, why, n);
	if (reference)
		need += dry_need(cfg, ecfg, 0, largest, why, n);
	return need;
}

uint64_t run_host_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}
