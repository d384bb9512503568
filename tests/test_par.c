/* pemu's strategies against the serial reference (DESIGN.md §4): for every combination of
 * dp in {1, 2, 4}, tp in {1, 2, 4} and ZeRO stage in {0, 1}, on tiny and moe-tiny, the loss
 * of every step, every gradient of the first step and every parameter after 3 steps
 * agree within the design's tolerances; a strategy that drops one all-reduce does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common.h"
#include "presets.h"
#include "run.h"

static struct data corpus;

static void make_cfg(struct run_cfg *cfg, const char *preset, int dp, int tp, int zero)
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
	mesh_init(&cfg->mesh, tp, 1, 1, dp, 1);
	cfg->zero = zero;
	cfg->bucket_bytes = 64 << 10;
	cfg->data = &corpus;
}

/* Runs cfg and its reference; returns verify's result. */
static struct verify_result verify(const struct run_cfg *cfg)
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
	if (run_parallel(many, cfg, &par))
		fail_msg("parallel run failed: %s", emu_cluster_report(many));
	verify_compare(&ref, &par, &cfg->model, &v);
	run_free(&ref);
	run_free(&par);
	emu_cluster_free(one);
	emu_cluster_free(many);
	return v;
}

static void test_matrix(void **state)
{
	static const char *const presets[] = {"tiny", "moe-tiny"};
	static const int degrees[] = {1, 2, 4};

	(void)state;
	for (int p = 0; p < 2; p++)
		for (int d = 0; d < 3; d++)
			for (int t = 0; t < 3; t++)
				for (int z = 0; z <= 1; z++) {
					struct run_cfg cfg;
					struct verify_result v;

					make_cfg(&cfg, presets[p], degrees[d], degrees[t], z);
					v = verify(&cfg);
					if (!v.passed)
						fail_msg("%s dp %d tp %d zero %d: loss %.2g (step "
							 "%d), grad %.2g (tensor %d), param %.2g "
							 "(tensor %d)",
							 presets[p], degrees[d], degrees[t], z,
							 v.loss_err, v.loss_step, v.grad_err,
							 v.grad_tensor, v.param_err,
							 v.param_tensor);
				}
}

/* Dropping one all-reduce, of the tensor-parallel MLP output in layer 0 or of the first
 * data-parallel gradient bucket, is a wrong strategy: verify must see it. */
static void test_broken_strategies_fail(void **state)
{
	struct run_cfg cfg;
	struct verify_result v;

	(void)state;
	make_cfg(&cfg, "tiny", 1, 2, 0);
	cfg.broken = 1;
	v = verify(&cfg);
	assert_false(v.passed);
	assert_true(v.loss_err > 1e-3);
	make_cfg(&cfg, "tiny", 2, 1, 0);
	cfg.broken = 2;
	v = verify(&cfg);
	assert_false(v.passed);
	assert_true(v.grad_err > 1e-2);
	/* and the unbroken one passes; what it leaves out as noise-driven is every key bias
	 * (L h entries, gradient zero in exact arithmetic) and a few entries whose first
	 * gradient happens to be tiny, under 0.1% of the model */
	make_cfg(&cfg, "tiny", 2, 2, 1);
	v = verify(&cfg);
	assert_true(v.passed);
	if (v.noise_params < (size_t)(cfg.model.num_layers * cfg.model.hidden) ||
	    v.noise_params > (size_t)(cfg.model.num_layers * cfg.model.hidden) +
				     gpt_num_params(&cfg.model) / 1000)
		fail_msg("%zu entries left out as noise-driven", v.noise_params);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matrix),
		cmocka_unit_test(test_broken_strategies_fail),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
