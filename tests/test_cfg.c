/* run/cfg: the defaults, the values run_cfg_finish derives, and the one checker's rules,
 * each refused with its message and in its order; a run_cfg filled by hand from zero
 * (as the benches and test_par do) passes the checker unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "run/cfg.h"

static struct data corpus; /* never loaded: the checker only asks whether data is NULL */

/* init, then the tiny preset on a mesh, in execute mode. */
static void tiny(struct run_cfg *cfg, int tp, int dp, int pp)
{
	run_cfg_init(cfg);
	cfg->preset = model_preset("tiny");
	cfg->model = cfg->preset->cfg;
	mesh_init(&cfg->mesh, tp, 1, 1, dp, pp);
	cfg->data = &corpus;
}

static void finish_ok(struct run_cfg *cfg)
{
	char err[256] = "";

	if (run_cfg_finish(cfg, cfg->mesh.world, err, sizeof err))
		fail_msg("refused: %s", err);
}

static void test_defaults(void **state)
{
	struct run_cfg cfg;

	(void)state;
	run_cfg_init(&cfg);
	cfg.data = &corpus;
	finish_ok(&cfg);
	assert_string_equal(cfg.preset->name, "small");
	assert_int_equal(cfg.mbs, 16); /* the preset's */
	assert_int_equal(cfg.gbs, 16);
	assert_int_equal(cfg.steps, 300);
	assert_int_equal(cfg.seed, 1234);
	assert_int_equal(cfg.prec, PREC_FP32);
	assert_int_equal(cfg.schedule, SCHED_1F1B);
	assert_int_equal(cfg.vpp, 1);
	assert_int_equal(cfg.mlp_chunks, 1);
	assert_int_equal(cfg.recompute, 0);
	assert_int_equal(cfg.bucket_bytes, 0); /* Megatron's buckets: test_buckets */
	assert_int_equal(cfg.bucket_params, 0);
	assert_int_equal(cfg.log_every, 10);
	assert_int_equal(cfg.opt.decay_steps, 300);
	assert_float_equal(cfg.opt.min_lr, cfg.opt.lr / 10, 1e-12);
	assert_int_equal(cfg.model.vocab, 256); /* already a multiple of 128 */
	assert_int_equal(cfg.vocab_orig, 256);

	/* dry-run: a few steps, bf16; given values are kept */
	run_cfg_init(&cfg);
	cfg.opt.min_lr = 0;
	cfg.opt.decay_steps = 7;
	cfg.log_every = 0;
	finish_ok(&cfg);
	assert_int_equal(cfg.steps, 3);
	assert_int_equal(cfg.prec, PREC_BF16);
	assert_float_equal(cfg.opt.min_lr, 0, 0);
	assert_int_equal(cfg.opt.decay_steps, 7);
	assert_int_equal(cfg.log_every, 0);
	run_cfg_init(&cfg);
	cfg.prec = PREC_FP32;
	cfg.prec_set = 1;
	finish_ok(&cfg);
	assert_int_equal(cfg.prec, PREC_FP32);
}

/* Megatron's padding: a multiple of divisible-by x tp, the given vocabulary kept. */
static void test_vocab_padding(void **state)
{
	struct run_cfg cfg;

	(void)state;
	tiny(&cfg, 4, 1, 1);
	finish_ok(&cfg);
	assert_int_equal(cfg.model.vocab, 512);
	assert_int_equal(cfg.vocab_orig, 256);
	tiny(&cfg, 2, 1, 1);
	cfg.model.vocab = 300;
	cfg.vocab_div = 64;
	finish_ok(&cfg);
	assert_int_equal(cfg.model.vocab, 384);
	assert_int_equal(cfg.vocab_orig, 300);
}

/* Batches from the mesh, and the schedule and chunks from vpp or layers a chunk. */
static void test_pipeline_defaults(void **state)
{
	struct run_cfg cfg;

	(void)state;
	tiny(&cfg, 1, 2, 2);
	finish_ok(&cfg);
	assert_int_equal(cfg.gbs, 4 * 2 * 2 * 2); /* mbs x dp x 2 pp */
	assert_int_equal(cfg.schedule, SCHED_1F1B);
	assert_int_equal(cfg.vpp, 1);

	tiny(&cfg, 1, 1, 2);
	cfg.model.num_layers = 4;
	cfg.vpp = 2;
	finish_ok(&cfg);
	assert_int_equal(cfg.schedule, SCHED_INTERLEAVED);

	tiny(&cfg, 1, 1, 2);
	cfg.model.num_layers = 4;
	cfg.schedule = SCHED_INTERLEAVED;
	cfg.schedule_set = 1;
	finish_ok(&cfg);
	assert_int_equal(cfg.vpp, 2);

	tiny(&cfg, 1, 1, 2);
	cfg.model.num_layers = 8;
	cfg.vpp_layers = 1;
	finish_ok(&cfg);
	assert_int_equal(cfg.schedule, SCHED_INTERLEAVED);
	assert_int_equal(cfg.vpp, 4);
}

/* Each rule refused with its message; where two are broken, the earlier rule speaks. */
static void test_rules(void **state)
{
	static const struct {
		int tp, dp, pp, cp, ep;
		int rule; /* what to break, below */
		const char *says;
	} cases[] = {
		{1, 1, 1, 1, 1, 1, "hidden size 100 is not divisible by 3 attention heads"},
		{1, 1, 1, 1, 1, 2, "--global-batch-size 5 is not a multiple of"},
		{1, 1, 1, 3, 1, 0, "--cp 3 cuts each sequence into 2 x 3 chunks"},
		{3, 1, 1, 2, 1, 0, "--tp 3 does not divide the 4 attention heads"},
		{1, 1, 1, 1, 2, 0, "the mesh's ep is 2: experts fold onto the dense mesh's ranks"},
		{4096, 4096, 1, 1, 1, 0, "is more devices than pemu runs"},
		{1, 1, 1, 1, 1, 3, "--vpp: virtual pipeline stages need --pp > 1"},
		{1, 1, 2, 1, 1, 4, "pp 2 x 3 layers a chunk does not divide the 2 layers"},
		{1, 1, 2, 1, 1, 5, "--vpp 2: virtual stages need --schedule interleaved"},
		{1, 1, 1, 1, 1, 6, "--schedule gpipe: a pipeline schedule needs --pp > 1"},
		{1, 1, 3, 1, 1, 7, "--vocab-size 100 (padded to 128): the data is bytes"},
		{3, 1, 1, 1, 1, 0, "--tp 3 does not divide the 4 attention heads"},
		{1, 1, 2, 1, 1, 8, "--mlp-chunks with --schedule zb-h1"},
		{1, 1, 1, 1, 1, 9, "--sequence-parallel needs --tp > 1"},
		{1, 3, 1, 1, 1, 12, "--global-batch-size 8 is 2 micro-batches of 4, which --dp 3"},
		{1, 1, 2, 1, 1, 10, "pipelines run with ZeRO stage 0 or 1"},
		{1, 1, 3, 1, 1, 0, "--pp 3 does not divide the 2 layers"},
		{1, 1, 2, 1, 1, 11, "HelixPipe recomputes without attention"},
	};
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct run_cfg cfg;

		tiny(&cfg, 1, 1, 1);
		mesh_init(&cfg.mesh, cases[i].tp, cases[i].cp, cases[i].ep, cases[i].dp,
			  cases[i].pp);
		cfg.gbs = 24;
		switch (cases[i].rule) {
		case 1:
			cfg.model.hidden = 100;
			cfg.model.heads = 3;
			break;
		case 2:
			cfg.mbs = 2;
			cfg.gbs = 5;
			break;
		case 3:
			cfg.vpp = 2;
			break;
		case 4:
			cfg.vpp_layers = 3;
			break;
		case 5:
			cfg.vpp = 2;
			cfg.schedule_set = 1;
			break;
		case 6:
			cfg.schedule = SCHED_GPIPE;
			cfg.schedule_set = 1;
			break;
		case 7:
			cfg.model.vocab = 100;
			break;
		case 8:
			cfg.schedule = SCHED_ZBH1;
			cfg.schedule_set = 1;
			cfg.mlp_chunks = 2;
			break;
		case 9:
			cfg.sp = 1;
			break;
		case 10:
			cfg.zero = 3;
			break;
		case 11:
			cfg.schedule = SCHED_HELIX;
			cfg.schedule_set = 1;
			cfg.recompute = 1;
			break;
		case 12:
			cfg.gbs = 8;
			break;
		}
		err[0] = '\0';
		if (!run_cfg_finish(&cfg, cfg.mesh.world, err, sizeof err) ||
		    !strstr(err, cases[i].says))
			fail_msg("case %zu: got \"%s\", want \"%s\"", i, err, cases[i].says);
	}
}

/* Filled by hand from zero, as bench/ and test_par do, with run_check alone: the zero
 * schedule (gpipe) without a pipeline asks for nothing; a wrong device count is refused. */
/* The gradient buckets of the first chunk, as Megatron-LM sizes them (par/dp.h): one
 * bucket without an overlap at ZeRO 0-1, whatever size is given; with --overlap-grad-reduce
 * or --overlap-param-gather max(40M, 1M x dp x cp) parameters, or the size given, in
 * parameters or in bytes at the weights' width (rounded up); ZeRO-2 25 MB by default in
 * any case, ZeRO-3 by units. (The two sizes together are refused: test_cli_input.) */
static void test_buckets(void **state)
{
	static const struct {
		int zero, ogr, opg, dp, cp;
		enum prec prec;
		uint64_t bytes, params, want;
	} cases[] = {
		{0, 0, 0, 8, 1, PREC_BF16, 0, 0, 0},
		{1, 0, 0, 64, 1, PREC_BF16, 0, 5000000, 0},
		{0, 1, 0, 8, 1, PREC_BF16, 0, 0, 40000000},
		{1, 1, 0, 32, 2, PREC_BF16, 0, 0, 64000000},
		{1, 0, 1, 48, 1, PREC_FP32, 0, 0, 48000000},
		{0, 1, 0, 8, 1, PREC_BF16, 0, 5000000, 5000000},
		{0, 1, 0, 8, 1, PREC_BF16, 25000001, 0, 12500001},
		{0, 1, 0, 8, 1, PREC_FP32, 1 << 20, 0, 1 << 18},
		{2, 0, 0, 8, 1, PREC_BF16, 0, 0, 12500000},
		{2, 0, 0, 8, 1, PREC_FP32, 0, 0, 6250000},
		{3, 1, 0, 8, 1, PREC_BF16, 0, 0, 0},
	};
	struct run_cfg cfg;

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		run_cfg_init(&cfg);
		cfg.zero = cases[k].zero;
		cfg.overlap_grad = cases[k].ogr;
		cfg.overlap_param_gather = cases[k].opg;
		mesh_init(&cfg.mesh, 1, cases[k].cp, 1, cases[k].dp, 1);
		cfg.prec = cases[k].prec;
		cfg.bucket_bytes = cases[k].bytes;
		cfg.bucket_params = cases[k].params;
		if (run_bucket_params(&cfg) != cases[k].want)
			fail_msg("case %zu: %llu parameters a bucket, want %llu", k,
				 (unsigned long long)run_bucket_params(&cfg),
				 (unsigned long long)cases[k].want);
	}
}

static void test_by_hand(void **state)
{
	struct run_cfg cfg;
	struct sched sc;
	char err[256];

	(void)state;
	memset(&cfg, 0, sizeof cfg);
	cfg.model = model_preset("tiny")->cfg;
	cfg.mbs = 2;
	cfg.gbs = 8;
	cfg.steps = 3;
	optim_defaults(&cfg.opt);
	mesh_init(&cfg.mesh, 2, 1, 1, 2, 1);
	cfg.bucket_bytes = 64 << 10;
	cfg.data = &corpus;
	assert_int_equal(run_check(&cfg, 4, err, sizeof err), 0);
	assert_int_equal(run_check(&cfg, 8, err, sizeof err), -1);
	assert_string_equal(err, "the mesh needs 4 devices and the cluster has 8");

	mesh_init(&cfg.mesh, 1, 1, 1, 1, 2);
	cfg.schedule = SCHED_ZBH1;
	cfg.vpp = 1;
	assert_int_equal(run_check(&cfg, 2, err, sizeof err), 0);
	run_cfg_schedule(&cfg, &sc);
	assert_int_equal(sc.p, 2);
	assert_int_equal(sc.m, 4);
	assert_int_equal(sc.kind, SCHED_ZBH1);
	sched_free(&sc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),          cmocka_unit_test(test_vocab_padding),
		cmocka_unit_test(test_pipeline_defaults), cmocka_unit_test(test_rules),
		cmocka_unit_test(test_by_hand),           cmocka_unit_test(test_buckets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
