/* Helpers of the test programs that run whole configurations: a run and its serial
 * reference compared (verify), and a dry-run. Both fail the test on a refused or failed
 * run, naming why. */
#ifndef TESTS_VERIFY_H
#define TESTS_VERIFY_H

#include "common.h"
#include "presets.h"
#include "run/run.h"

/* The test programs' configuration: preset with micro-batch 2, global batch 8, 3 steps,
 * seed 11, fp32, AdamW with one warm-up step, a tp x dp x pp mesh (1F1B, one chunk a
 * stage), 64 KiB buckets (where an overlap cuts them: par/dp.h), training on data. */
static inline void test_make_cfg(struct run_cfg *cfg, const char *preset, int dp, int tp, int pp,
				 const struct data *data)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->model = model_preset(preset)->cfg;
	cfg->mbs = 2;
	cfg->gbs = 8;
	cfg->steps = 3;
	cfg->seed = 11;
	cfg->prec = PREC_FP32;
	optim_defaults(&cfg->opt);
	cfg->opt.warmup = 1;
	mesh_init(&cfg->mesh, tp, 1, 1, dp, pp);
	cfg->schedule = SCHED_1F1B;
	cfg->vpp = 1;
	cfg->bucket_bytes = 64 << 10;
	cfg->data = data;
}

/* Whether name contains one of the comma-separated substrings of filter (blanks around
 * each ignored; an empty one selects nothing). */
static inline int test_name_selected(const char *name, const char *filter)
{
	while (*filter) {
		size_t n = strcspn(filter, ",");
		const char *s = filter, *e = filter + n;
		char piece[64];

		while (s < e && *s == ' ')
			s++;
		while (e > s && e[-1] == ' ')
			e--;
		if (e > s && (size_t)(e - s) < sizeof piece) {
			memcpy(piece, s, (size_t)(e - s));
			piece[e - s] = 0;
			if (strstr(name, piece))
				return 1;
		}
		filter += n + (filter[n] == ',');
	}
	return 0;
}

/* Runs cfg on 2 nodes of 8 A100s and its reference on one; returns verify's result.
 * fault_op (or NULL) and fault_nth: a collective the parallel run drops
 * (emu_cluster_set_fault). */
static inline struct verify_result test_verify(const struct run_cfg *cfg, const char *fault_op,
					       int fault_nth)
{
	struct emu_cluster *one = test_cluster("dgx-a100", 1, 1, 0, 0);
	struct emu_cluster *many = test_cluster("dgx-a100", 2, cfg->mesh.world, 0, 0);
	struct run_out ref, par;
	struct verify_result v;
	char err[256];

	if (run_check(cfg, cfg->mesh.world, err, sizeof err))
		fail_msg("config refused: %s", err);
	run_alloc(&ref, cfg, 1);
	run_alloc(&par, cfg, 1);
	if (run_reference(one, cfg, &ref))
		fail_msg("reference failed: %s", emu_cluster_report(one));
	if (fault_op && emu_cluster_set_fault(many, fault_op, fault_nth))
		fail_msg("no collective named %s", fault_op);
	if (run_parallel(many, cfg, &par))
		fail_msg("parallel run failed: %s", emu_cluster_report(many));
	verify_compare(&ref, &par, cfg, &v);
	run_free(&ref);
	run_free(&par);
	emu_cluster_free(one);
	emu_cluster_free(many);
	return v;
}

/* cfg in dry-run at bf16 on nodes of 8 A100s, trace on or off, into o (run_free it); the
 * cluster, for its devices' counters (emu_cluster_free it). */
static inline struct emu_cluster *test_dry(struct run_cfg *cfg, struct run_out *o, int trace)
{
	struct emu_cluster *c =
		test_cluster("dgx-a100", (cfg->mesh.world + 7) / 8, cfg->mesh.world, 1, trace);
	char err[256];

	cfg->data = NULL;
	cfg->prec = PREC_BF16;
	if (run_check(cfg, cfg->mesh.world, err, sizeof err))
		fail_msg("config refused: %s", err);
	run_alloc(o, cfg, 0);
	if (run_parallel(c, cfg, o))
		fail_msg("dry run failed: %s", emu_cluster_report(c));
	return c;
}

/* cfg run on 1 and 2 host threads (nodes of 8 A100s) gives bitwise the same losses,
 * virtual step times and parameters; fails the test otherwise. */
static inline void test_same_on_threads(const struct run_cfg *cfg)
{
	struct run_out o[2];

	for (int w = 0; w < 2; w++) {
		struct emu_config ec;
		struct emu_cluster *c;

		if (emu_config_default(&ec, "dgx-a100"))
			fail_msg("no dgx-a100 preset");
		ec.ndev = cfg->mesh.world;
		ec.workers = w + 1;
		c = emu_cluster_new(&ec);
		run_alloc(&o[w], cfg, 1);
		if (run_parallel(c, cfg, &o[w]))
			fail_msg("run failed: %s", emu_cluster_report(c));
		emu_cluster_free(c);
	}
	assert_memory_equal(o[0].loss, o[1].loss, sizeof(float) * (size_t)cfg->steps);
	assert_memory_equal(o[0].step_ns, o[1].step_ns, sizeof(int64_t) * (size_t)cfg->steps);
	for (int i = 0; i < o[0].np; i++)
		assert_memory_equal(o[0].params[i], o[1].params[i],
				    gpt_tensor_numel(&cfg->model, i) * sizeof(float));
	run_free(&o[0]);
	run_free(&o[1]);
}

#endif
