/* run/plan: what the search does with one layout (run/plan.h): its memory bound, its
 * one-step dry-run, and --validate's tiny twin run against the serial reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "mem.h"
#include "run/plan.h"
#include "run/run.h"
#include "tensor.h"
#include "util.h"

/* ------------------------------------------------------------------------------------ */
/* The memory bound                                                                     */

uint64_t plan_mem_bound(const struct run_cfg *cfg, int gpus)
{
	const struct gpt_config *m = &cfg->model;
	double total = (double)gpt_num_params(m), expert = 0, copies[3];
	double S = (double)cfg->mesh.size[MESH_DP] * cfg->mesh.size[MESH_CP], held;
	static const enum mem_cat cat[3] = {MEM_PARAM, MEM_GRAD, MEM_OPTIM};

	if (m->num_experts > 0 && m->moe_every > 0) /* (a little over: the rest is safe) */
		expert = (double)(m->num_layers / m->moe_every) * m->num_experts *
			 (2.0 * m->hidden * m->ffn + m->ffn + m->hidden);
	if (expert > total)
		expert = total;
	copies[0] = cfg->zero >= 3 ? 1 : S;
	copies[1] = cfg->zero >= 2 ? 1 : S;
	copies[2] = cfg->zero >= 1 ? 1 : S;
	held = 0;
	for (int c = 0; c < 3; c++)
		held += (cat[c] == MEM_GRAD ? run_grad_bytes(cfg)
					    : tensor_elem_bytes(cfg->prec, cat[c])) *
			((total - expert) * copies[c] + expert);
	return (uint64_t)(held / gpus);
}

/* ------------------------------------------------------------------------------------ */
/* One dry-run                                                                          */

enum plan_fate plan_dry_run(const struct emu_config *ecfg, const struct run_cfg *cfg,
			    struct plan_eval *e)
{
	struct emu_config ec = *ecfg;
	struct emu_cluster *cl;
	struct run_out o;
	int rc, last = cfg->steps - 1, N = cfg->mesh.world;

	ec.dry_run = 1;
	ec.trace = 0;
	cl = emu_cluster_new(&ec);
	run_alloc(&o, cfg, 0);
	rc = run_parallel(cl, cfg, &o);
	e->peak = 0;
	for (int i = 0; i < N; i++) {
		uint64_t p = mem_peak_total(emu_cluster_dev(cl, i));

		e->peak = p > e->peak ? p : e->peak;
	}
	e->err = rc;
	e->devices_run = o.devices_run;
	if (!rc) {
		double step_s;

		e->step_ns = o.step_ns[last];
		e->compute_ns = o.compute_ns[last];
		e->exposed_ns = o.exposed_ns[last];
		e->bubble_ns = 0;
		for (int s = 0; o.bubble_ns && s < cfg->mesh.size[MESH_PP]; s++)
			if (o.bubble_ns[s] > e->bubble_ns)
				e->bubble_ns = o.bubble_ns[s];
		step_s = (double)e->step_ns / 1e9;
		e->mfu = gpt_model_flops(&cfg->model, cfg->gbs) /
			 (step_s * ec.topo.gpu.peak_flops * N);
		e->tokens_s = (double)cfg->gbs * cfg->model.seq_len / step_s;
	}
	run_free(&o);
	emu_cluster_free(cl);
	return !rc ? PLAN_OK : rc == EMU_EOOM ? PLAN_OOM : PLAN_FAIL;
}

/* ------------------------------------------------------------------------------------ */
/* The tiny twin                                                                        */

int plan_tiny(const struct run_cfg *cfg, struct run_cfg *tiny, char *err, size_t n)
{
	const struct mesh *m = &cfg->mesh;
	int tp = m->size[MESH_TP], cp = m->size[MESH_CP], pp = m->size[MESH_PP];
	int dp = m->size[MESH_DP], micro = cfg->gbs / cfg->mbs / dp;
	int heads = 2 * tp * (cfg->cp_comm == PAR_CP_A2A ? cp : 1);
	int layers = pp * cfg->vpp * (pp * cfg->vpp == 1 ? 2 : 1);
	int tries[2] = {pp > 1 ? 2 * pp : 2, micro};

	if (cfg->schedule == SCHED_HELIX && layers < 2 * pp)
		layers = 2 * pp; /* (HelixPipe's attention of layer l runs on a later stage) */
	for (int t = 0; t < 2; t++) {
		*tiny = *cfg;
		tiny->model.num_layers = layers;
		tiny->model.heads = heads;
		tiny->model.hidden = 8 * heads;
		tiny->model.ffn = 4 * tiny->model.hidden;
		tiny->model.seq_len = 4 * cp * tp > 16 ? 4 * cp * tp : 16;
		tiny->model.vocab = 256;
		tiny->vocab_div = cfg->vocab_div;
		tiny->gbs = cfg->mbs * dp * (tries[t] < micro ? tries[t] : micro);
		tiny->steps = 3;
		tiny->prec = PREC_FP32;
		tiny->prec_set = 1;
		tiny->opt.decay_steps = 0;
		/* several buckets where the real model has them (an overlap: par/dp.h) */
		tiny->bucket_bytes = 4096;
		tiny->bucket_params = 0;
		tiny->log_every = 0;
		tiny->stop_diverged = 0;
		tiny->data = NULL;
		if (cfg->tpf_layers) /* the first layers at T still, or all of them */
			tiny->tpf_layers =
				cfg->tpf_layers >= cfg->model.num_layers ? layers : layers / 2;
		if (!run_cfg_finish(tiny, m->world, err, n)) {
			/* execute mode: run_cfg_finish took dry-run's defaults for nothing
			 * that was left unset */
			return 0;
		}
	}
	return -1;
}

int plan_validate(const struct emu_config *ecfg, const struct run_cfg *tiny,
		  struct verify_result *v)
{
	struct emu_config ec = *ecfg, e1;
	struct emu_cluster *cl, *one;
	struct run_out par, ref;
	int rc;

	memset(v, 0, sizeof *v);
	ec.dry_run = 0;
	ec.trace = 0;
	ec.ndev = tiny->mesh.world;
	e1 = ec;
	e1.topo.nodes = 1;
	e1.ndev = 1;
	cl = emu_cluster_new(&ec);
	one = emu_cluster_new(&e1);
	run_alloc(&par, tiny, 1);
	run_alloc(&ref, tiny, 1);
	if (!(rc = run_parallel(cl, tiny, &par)) && !(rc = run_reference(one, tiny, &ref)))
		verify_compare(&ref, &par, tiny, v);
	run_free(&par);
	run_free(&ref);
	emu_cluster_free(cl);
	emu_cluster_free(one);
	return rc;
}
