/* run/ref: the serial reference (run_reference in run/run.h): models/gpt.c's whole model
 * on one device, with the run's seed, data and batches (and its checkpoint, if it was
 * loaded from one), and nothing parallel. Under
 * Oases's overlap (par/overlap.h) its micro-batches are the run's sub-batches, as the
 * run's MoE routers see them: capacity and load-balancing loss per sub-batch. */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "run/ckpt.h"
#include "run/run.h"
#include "util.h"

struct job {
	const struct run_cfg *cfg;
	struct run_out *o;
};

static int ref_device(struct emu_dev *d, void *arg)
{
	struct job *j = arg;
	const struct run_cfg *cfg = j->cfg;
	struct run_out *o = j->o;
	int accum = cfg->gbs / cfg->mbs, BT = cfg->mbs * cfg->model.seq_len, rc;
	int nsub = cfg->tp_overlap == PAR_OVERLAP_OASES ? PAR_NSUB : 1, rows = BT / nsub;
	const struct run_rows whole = {NULL, cfg->model.seq_len, 0, rows, 0};
	int *tok = emu_xcalloc((size_t)BT, sizeof *tok),
	    *tgt = emu_xcalloc((size_t)BT, sizeof *tgt);
	struct kctx k;
	struct gpt m;

	kctx_init(&k, d, cfg->prec);
	if ((rc = gpt_init(&m, &k, &cfg->model, cfg->mbs / nsub, cfg->seed)))
		goto out;
	if (cfg->resume && kctx_math(&k))
		ckpt_to_gpt(cfg->resume, &m);
	for (int s = 0; s < cfg->steps; s++) {
		int64_t t0 = emu_now(d), c0 = emu_compute_ns(d);
		double loss = 0;

		gpt_zero_grad(&m);
		for (int a = 0; a < accum; a++) {
			if (cfg->data)
				data_batch(cfg->data, cfg->seed,
					   (uint64_t)(cfg->step0 + s) * accum + a, cfg->mbs,
					   cfg->model.seq_len, tok, tgt);
			for (int sb = 0; sb < nsub; sb++) {
				/* the sub-batch's first sequence in the run (dropout's keys) */
				m.seq0 = ((uint64_t)(cfg->step0 + s) * accum + a) * cfg->mbs +
					 (uint64_t)sb * (cfg->mbs / nsub);
				loss += (double)gpt_forward(&m, tok + sb * rows, tgt + sb * rows) /
					(accum * nsub);
				if (kctx_math(&k))
					run_record_routes(o, cfg, (uint64_t)s * accum + a, sb, nsub,
							  &whole, m.la, 0, cfg->model.num_layers);
				gpt_backward(&m, 1.0f / (float)(accum * nsub));
			}
		}
		if (s < o->gsteps_n && o->snapshot && kctx_math(&k))
			for (int i = 0; i < m.np; i++)
				if (m.p[i].n)
					memcpy(o->gsteps[i] + (size_t)s * m.p[i].n, m.p[i].g.data,
					       m.p[i].n * sizeof(float));
		gpt_update(&m, &cfg->opt, cfg->step0 + s + 1);
		if ((rc = emu_dev_check(d))) /* (the clock's horizon, say) */
			goto out;
		o->loss_part[s] = (float)loss;
		o->dev_steps[0] = s + 1;
		o->step_ns[s] = emu_now(d) - t0;
		o->compute_ns[s] = emu_compute_ns(d) - c0;
	}
	if (o->snapshot && kctx_math(&k))
		for (int i = 0; i < m.np; i++)
			if (m.p[i].n)
				memcpy(o->params[i], m.p[i].w.data, m.p[i].n * sizeof(float));
out:
	gpt_free(&m);
	free(tok);
	free(tgt);
	return rc;
}

int run_reference(struct emu_cluster *c, const struct run_cfg *cfg, struct run_out *o)
{
	struct run_cfg one = *cfg;
	struct job j = {&one, o};
	int rc;

	mesh_init(&one.mesh, 1, 1, 1, 1, 1);
	j.cfg = &one;
	rc = emu_cluster_run(c, ref_device, &j);
	run_sum_losses(&one, o);
	o->steps_done = o->dev_steps[0];
	return rc;
}
