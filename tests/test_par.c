/* pemu's strategies against the serial reference (DESIGN.md §4): for every combination of
 * dp in {1, 2, 4}, tp in {1, 2, 4}, ZeRO stage in {0, 1, 2, 3} and sequence parallelism
 * on and off where tp > 1, on tiny and moe-tiny, the loss of every step, every gradient
 * of the first step and every parameter after 3 steps agree within the design's
 * tolerances; a strategy that drops one all-reduce, bucket or ZeRO-3 gather does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "coll.h"
#include "common.h"
#include "mem.h"
#include "par/tp.h"
#include "presets.h"
#include "run/run.h"
#include "trace.h"

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

/* A fault plan for the parallel run (emu_cluster_set_fault), or none. */
static const char *fault_op;
static int fault_nth;

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
	if (fault_op && emu_cluster_set_fault(many, fault_op, fault_nth))
		fail_msg("no collective named %s", fault_op);
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
	int runs = 0;

	(void)state;
	for (int p = 0; p < 2; p++)
		for (int d = 0; d < 3; d++)
			for (int t = 0; t < 3; t++)
				for (int z = 0; z <= 3; z++)
					for (int sp = 0; sp <= (degrees[t] > 1); sp++) {
						struct run_cfg cfg;
						struct verify_result v;

						make_cfg(&cfg, presets[p], degrees[d], degrees[t],
							 z);
						cfg.sp = sp;
						v = verify(&cfg);
						runs++;
						if (p == 1 && (v.route_flips || !v.routes))
							fail_msg("%s dp %d tp %d zero %d sp %d: "
								 "%zu of %zu routing decisions "
								 "differ",
								 presets[p], degrees[d], degrees[t],
								 z, sp, v.route_flips, v.routes);
						if (!v.passed)
							fail_msg("%s dp %d tp %d zero %d sp %d: "
								 "loss %.2g (step %d), grad "
								 "%.2g (tensor %d), param %.2g "
								 "(tensor %d)",
								 presets[p], degrees[d], degrees[t],
								 z, sp, v.loss_err, v.loss_step,
								 v.grad_err, v.grad_tensor,
								 v.param_err, v.param_tensor);
					}
	assert_int_equal(runs, 120);
}
/* Pipelines: every schedule with pp in {2, 4} and m in {pp, 2 pp, 4 pp} micro-batches
 * (pp and 2 pp under the sanitizers), alone and with dp 2 x tp 2 and ZeRO-1, on tiny and
 * moe-tiny
 * with 8 layers (so that 4 stages of 2 chunks each hold one), micro-batches of 1
 * sequence. Against the serial reference: the loss of every step and every first-step
 * gradient, and alone every parameter after 3 steps. With dp 2 x tp 2 the parameters of
 * these 8-layer models drift from the serial ones by 1-3e-4 after 3 steps (tensor
 * parallelism's rounding, which Adam amplifies where an update nearly cancels: the same
 * error for every schedule and pp, and for pp = 1), so there they are compared with the
 * same dp x tp run without a pipeline, within the same 1e-4. The reference and that run
 * depend on the preset and the batch only, so each is run once for all schedules. */
static void test_pipeline_matrix(void **state)
{
	static const char *const presets[] = {"tiny", "moe-tiny"};
	static const enum sched_kind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED,
						SCHED_ZBH1,  SCHED_ZBH2, SCHED_HELIX};
	int runs = 0, fmax = test_skip_large() ? 2 : 4;

	(void)state;
	for (int pr = 0; pr < 2; pr++)
		for (int p = 2; p <= 4; p += 2)
			for (int f = 1; f <= fmax; f *= 2)
				for (int both = 0; both <= 1; both++) {
					int dp = both ? 2 : 1, tp = both ? 2 : 1;
					struct emu_cluster *one =
						test_cluster("dgx-a100", 1, 1, 0, 0);
					struct emu_cluster *c =
						test_cluster("dgx-a100", 2, 16, 0, 0);
					struct run_cfg cfg, flat;
					struct run_out ref, base;

					make_cfg(&cfg, presets[pr], dp, tp, both); /* ZeRO-1 */
					cfg.model.num_layers = 8;
					cfg.mbs = 1;
					cfg.gbs = f * p * dp;
					cfg.opt.warmup = 10; /* pemu's default */
					flat = cfg;
					run_alloc(&ref, &cfg, 1);
					run_alloc(&base, &flat, 1);
					if (run_reference(one, &cfg, &ref))
						fail_msg("reference failed: %s",
							 emu_cluster_report(one));
					if (both) {
						emu_cluster_free(c);
						c = test_cluster("dgx-a100", 1, dp * tp, 0, 0);
						if (run_parallel(c, &flat, &base))
							fail_msg("run without the pipeline failed: "
								 "%s",
								 emu_cluster_report(c));
					}
					emu_cluster_free(c);
					for (int k = 0; k < 6; k++) {
						struct verify_result v, vb;
						struct run_out par;
						char err[256];

						mesh_init(&cfg.mesh, tp, 1, 1, dp, p);
						cfg.schedule = kinds[k];
						cfg.vpp = kinds[k] == SCHED_INTERLEAVED ? 2 : 1;
						if (run_check(&cfg, cfg.mesh.world, err,
							      sizeof err))
							fail_msg("config refused: %s", err);
						c = test_cluster("dgx-a100", 2, cfg.mesh.world, 0,
								 0);
						run_alloc(&par, &cfg, 1);
						if (run_parallel(c, &cfg, &par))
							fail_msg("pipeline run failed: %s",
								 emu_cluster_report(c));
						verify_compare(&ref, &par, &cfg.model, &v);
						vb = v;
						if (both)
							verify_compare(&base, &par, &cfg.model,
								       &vb);
						run_free(&par);
						emu_cluster_free(c);
						runs++;
						if (v.loss_err > v.loss_tol ||
						    v.grad_err > v.grad_tol || !vb.passed ||
						    v.route_flips)
							fail_msg(
								"%s %s pp %d m %d dp %d tp %d: "
								"loss "
								"%.2g (step %d), grad %.2g (tensor "
								"%d), param %.2g (tensor %d), %zu "
								"routing flips",
								presets[pr], sched_name(kinds[k]),
								p, f * p, dp, tp, v.loss_err,
								v.loss_step, v.grad_err,
								v.grad_tensor, vb.param_err,
								vb.param_tensor, v.route_flips);
					}
					run_free(&ref);
					run_free(&base);
					emu_cluster_free(one);
				}
	assert_int_equal(runs, 2 * 6 * 2 * (fmax == 4 ? 3 : 2) * 2);
}

/* Leaving out one collective, the tensor-parallel all-reduce of layer 0's MLP output or
 * the first data-parallel gradient bucket's, or ZeRO-3's gather of layer 0, is a wrong
 * strategy: verify must see it. The fault plan (emu_cluster_set_fault) leaves out a
 * device's nth call of a collective, counted in the order the strategy makes them. */
static void test_broken_strategies_fail(void **state)
{
	struct run_cfg cfg;
	struct verify_result v;

	(void)state;
	/* tp 2, forward: the embedding's all-reduce (0), layer 0's attention output (1),
	 * its MLP output (2) */
	make_cfg(&cfg, "tiny", 1, 2, 0);
	fault_op = "all-reduce";
	fault_nth = 2;
	v = verify(&cfg);
	assert_false(v.passed);
	assert_true(v.loss_err > v.loss_tol); /* one micro-batch of the first step's four */
	assert_true(v.grad_err > 1e-2);
	/* dp 2: the first all-reduce is the first bucket's, in the last micro-batch of step 1 */
	make_cfg(&cfg, "tiny", 2, 1, 0);
	fault_nth = 0;
	v = verify(&cfg);
	assert_false(v.passed);
	assert_true(v.grad_err > 1e-2);
	/* ZeRO-3 gathers the embeddings (0), then layer 0 (1): read as ZeRO-3 left it between
	 * uses, NaN outside this rank's chunk */
	make_cfg(&cfg, "tiny", 2, 1, 3);
	fault_op = "all-gather";
	fault_nth = 1;
	v = verify(&cfg);
	fault_op = NULL;
	assert_false(v.passed);
	assert_true(isnan(v.loss_err));
	assert_int_equal(v.loss_step, 0);
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

/* A routing flip is found by comparing the decisions themselves: moe-tiny's 3 steps
 * (4 micro-batches each, 2 layers of which 1 is MoE, 64 tokens, top-2) agree with the
 * reference's; one decision changed by hand is reported where it is. */
static void test_routing_flip_detected(void **state)
{
	struct emu_cluster *one = test_cluster("dgx-a100", 1, 1, 0, 0);
	struct emu_cluster *many = test_cluster("dgx-a100", 1, 4, 0, 0);
	struct run_cfg cfg;
	struct run_out ref, par;
	struct verify_result v;
	size_t per_layer, e, nonzero = 0;
	int moe_layer = -1;

	(void)state;
	make_cfg(&cfg, "moe-tiny", 2, 2, 0);
	run_alloc(&ref, &cfg, 1);
	run_alloc(&par, &cfg, 1);
	assert_int_equal(run_reference(one, &cfg, &ref), 0);
	assert_int_equal(run_parallel(many, &cfg, &par), 0);
	verify_compare(&ref, &par, &cfg.model, &v);
	assert_true(v.passed);
	assert_int_equal(v.route_flips, 0);
	for (int l = 0; l < cfg.model.num_layers; l++)
		if (gpt_layer_is_moe(&cfg.model, l))
			moe_layer = moe_layer < 0 ? l : moe_layer;
	assert_true(moe_layer >= 0);
	per_layer = (size_t)cfg.mbs * cfg.model.seq_len * cfg.model.moe_top_k;
	assert_int_equal(ref.route_mb, per_layer * cfg.model.num_layers);
	for (e = 0; e < ref.route_mb * 12; e++)
		nonzero += ref.routes[e] != 0;
	assert_true(nonzero > 0);
	/* step 2, its third micro-batch, the MoE layer, token 5's second choice */
	e = (size_t)(1 * 4 + 2) * ref.route_mb + (size_t)moe_layer * per_layer + 5 * 2 + 1;
	par.routes[e] = par.routes[e] == 0 ? 1 : 0;
	verify_compare(&ref, &par, &cfg.model, &v);
	assert_int_equal(v.route_flips, 1);
	assert_int_equal(v.flip_step, 1);
	assert_int_equal(v.flip_layer, moe_layer);
	assert_int_equal(v.flip_token, 5);
	run_free(&ref);
	run_free(&par);
	emu_cluster_free(one);
	emu_cluster_free(many);
}

/* Recomputation changes when activations are computed, not what they are: none,
 * selective and full give bitwise the same losses, gradients and weights (with tp, sp and
 * MoE, and in a pipeline). In dry-run on gpt2-124m, selective saves exactly the attention
 * scores (L b a s^2 at 2 bytes; no dropout here), full keeps less than selective, and
 * full pays one more forward of the layers. */
static struct emu_cluster *dry(struct run_cfg *cfg, struct run_out *o);

static void test_recompute(void **state)
{
	struct run_out o[3];
	struct emu_cluster *c;
	uint64_t act[3];
	int64_t comp[3];

	(void)state;
	for (int pipe = 0; pipe <= 1; pipe++) {
		for (int r = 0; r < 3; r++) {
			struct run_cfg cfg;

			make_cfg(&cfg, "moe-tiny", 2, 2, 0);
			cfg.sp = 1;
			cfg.recompute = r;
			if (pipe) {
				mesh_init(&cfg.mesh, 2, 1, 1, 1, 2);
				cfg.schedule = SCHED_ZBH1;
				cfg.vpp = 1;
			}
			c = test_cluster("dgx-a100", 1, cfg.mesh.world, 0, 0);
			run_alloc(&o[r], &cfg, 1);
			if (run_parallel(c, &cfg, &o[r]))
				fail_msg("recompute %d: %s", r, emu_cluster_report(c));
			emu_cluster_free(c);
			if (r == 0)
				continue;
			assert_memory_equal(o[r].loss, o[0].loss,
					    sizeof(float) * (size_t)cfg.steps);
			for (int i = 0; i < o[0].np; i++) {
				size_t n = gpt_tensor_numel(&cfg.model, i) * sizeof(float);

				assert_memory_equal(o[r].grad0[i], o[0].grad0[i], n);
				assert_memory_equal(o[r].params[i], o[0].params[i], n);
			}
		}
		for (int r = 0; r < 3; r++)
			run_free(&o[r]);
	}
	for (int r = 0; r < 3; r++) {
		struct run_cfg cfg;

		make_cfg(&cfg, "gpt2-124m", 1, 1, 0);
		cfg.mbs = cfg.gbs = 1;
		cfg.steps = 1;
		cfg.recompute = r;
		c = dry(&cfg, &o[r]);
		act[r] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
		comp[r] = o[r].compute_ns[0];
		run_free(&o[r]);
		emu_cluster_free(c);
	}
	{
		struct run_cfg cfg;
		uint64_t scores;

		make_cfg(&cfg, "gpt2-124m", 1, 1, 0);
		scores = (uint64_t)cfg.model.num_layers * (uint64_t)cfg.model.heads *
			 (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.seq_len * 2;
		/* one layer's scores are live at a time during the recomputed backward */
		assert_int_equal(act[0] - act[1], scores - scores / (uint64_t)cfg.model.num_layers);
	}
	assert_true(act[2] < act[1]);
	assert_true(comp[1] > comp[0] && comp[2] > comp[1]);
}

/* HelixPipe's chunked MLP keeps none of the MLP for backward: on gpt2-124m in dry-run it
 * saves exactly the fc and fc.gelu activations of every layer (2 b s f at 2 bytes each),
 * costs one more fc forward; and verify passes with it, alone and in HelixPipe. */
static void test_mlp_chunks(void **state)
{
	uint64_t act[2];
	int64_t comp[2];

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;

		make_cfg(&cfg, "gpt2-124m", 1, 1, 0);
		cfg.mbs = cfg.gbs = 1;
		cfg.steps = 1;
		cfg.mlp_chunks = i ? 4 : 1;
		c = dry(&cfg, &o);
		act[i] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
		comp[i] = o.compute_ns[0];
		run_free(&o);
		emu_cluster_free(c);
		if (i) {
			uint64_t want = (uint64_t)cfg.model.num_layers * 2 *
					(uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.ffn * 2;

			assert_int_equal(act[0] - act[1], want);
			assert_true(comp[1] > comp[0]);
		}
	}
	for (int helix = 0; helix <= 1; helix++) {
		struct run_cfg cfg;
		struct verify_result v;

		make_cfg(&cfg, "tiny", 1, 2, 0);
		cfg.mlp_chunks = 3;
		cfg.sp = 1;
		if (helix) {
			cfg.model.num_layers = 4;
			mesh_init(&cfg.mesh, 2, 1, 1, 1, 2);
			cfg.schedule = SCHED_HELIX;
			cfg.vpp = 1;
			cfg.recompute = PAR_RECOMPUTE_FULL;
		}
		v = verify(&cfg);
		if (!v.passed)
			fail_msg("chunked MLP%s: loss %.2g, grad %.2g, param %.2g",
				 helix ? " in helix" : "", v.loss_err, v.grad_err, v.param_err);
	}
}

/* Determinism (DESIGN.md §3) with pipelines: the same config twice gives bitwise the
 * same losses, weights, virtual step times and Chrome trace, for HelixPipe's crossing
 * messages and ZB-H2 with tp 2 and sp. */
static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	buf = malloc(*n + 1);
	assert_int_equal(fread(buf, 1, *n, f), *n);
	fclose(f);
	return buf;
}

static void test_pipeline_determinism(void **state)
{
	static const enum sched_kind kinds[] = {SCHED_HELIX, SCHED_ZBH2};

	(void)state;
	for (int k = 0; k < 2; k++) {
		struct run_out o[2];
		char *tr[2], path[64];
		size_t n[2];
		struct run_cfg cfg;

		make_cfg(&cfg, "moe-tiny", 1, 2, 0);
		cfg.model.num_layers = 4;
		cfg.sp = 1;
		mesh_init(&cfg.mesh, 2, 1, 1, 1, 2);
		cfg.schedule = kinds[k];
		cfg.vpp = 1;
		for (int r = 0; r < 2; r++) {
			struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 1);

			run_alloc(&o[r], &cfg, 1);
			if (run_parallel(c, &cfg, &o[r]))
				fail_msg("%s: %s", sched_name(kinds[k]), emu_cluster_report(c));
			snprintf(path, sizeof path, "build/test_pipe_trace_%d.json", r);
			assert_int_equal(trace_write_json(c, path), 0);
			tr[r] = slurp(path, &n[r]);
			emu_cluster_free(c);
		}
		assert_memory_equal(o[0].loss, o[1].loss, sizeof(float) * (size_t)cfg.steps);
		assert_memory_equal(o[0].step_ns, o[1].step_ns,
				    sizeof(int64_t) * (size_t)cfg.steps);
		for (int i = 0; i < o[0].np; i++)
			assert_memory_equal(o[0].params[i], o[1].params[i],
					    gpt_tensor_numel(&cfg.model, i) * sizeof(float));
		assert_int_equal(n[0], n[1]);
		assert_memory_equal(tr[0], tr[1], n[0]);
		for (int r = 0; r < 2; r++) {
			free(tr[r]);
			run_free(&o[r]);
		}
	}
}

/* Runs cfg in dry-run on a dgx-a100 cluster big enough for its mesh; the caller reads
 * device 0's statistics and frees the cluster. */
static struct emu_cluster *dry(struct run_cfg *cfg, struct run_out *o)
{
	struct emu_cluster *c =
		test_cluster("dgx-a100", (cfg->mesh.world + 7) / 8, cfg->mesh.world, 1, 0);
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

/* Sum of the elements of the serial model's tensors [i0, i1). */
static double numel(const struct gpt_config *m, int i0, int i1)
{
	double n = 0;

	for (int i = i0; i < i1; i++)
		n += (double)gpt_tensor_numel(m, i);
	return n;
}

/* ZeRO's memory (REFERENCES.md, bf16 model: 2 + 2 + 12 bytes a parameter): stage 0 keeps
 * 16 Psi on every device, stage 1 4 Psi + 12 Psi / N, stage 2 2 Psi + 14 Psi / N, stage
 * 3 16 Psi / N, in the param, grad and optim categories. Stages 0-2 move 2 Psi per
 * device each step (all-reduce, or reduce-scatter + all-gather: 2 (N-1)/N Psi 2-byte
 * elements sent by each device), stage 3 3 Psi (two gathers and a reduce-scatter).
 * Flat buffers pad each parameter to a multiple of N elements, so the figures hold within
 * that padding (at most N elements a tensor). What stages 2-3 hold only while in use
 * (gradient buckets, gathered units) is charged as comm memory, within the working set
 * par_dp.h describes. */
static void test_zero_memory_and_volume(void **state)
{
	(void)state;
	for (int zero = 0; zero <= 3; zero++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		struct emu_dev *d;
		const int N = 4;
		const double bucket = 25e6;
		double psi, pad, emb, layer, want, got, sent, want_sent, comm, comm_max;

		make_cfg(&cfg, "gpt2-124m", N, 1, zero);
		cfg.mbs = 1;
		cfg.gbs = N;
		cfg.steps = 1;
		cfg.bucket_bytes = (uint64_t)bucket;
		c = dry(&cfg, &o);
		d = emu_cluster_dev(c, 0);
		psi = (double)gpt_num_params(&cfg.model);
		pad = (double)gpt_num_tensors(&cfg.model) * N;
		want = 2 * psi / (zero >= 3 ? N : 1);
		got = (double)mem_peak_bytes(d, MEM_PARAM);
		if (fabs(got - want) > 2 * pad)
			fail_msg("ZeRO %d: param %.6g bytes, want %.6g", zero, got, want);
		want = 2 * psi / (zero >= 2 ? N : 1);
		got = (double)mem_peak_bytes(d, MEM_GRAD);
		if (fabs(got - want) > 2 * pad)
			fail_msg("ZeRO %d: grad %.6g bytes, want %.6g", zero, got, want);
		want = 12 * psi / (zero >= 1 ? N : 1);
		got = (double)mem_peak_bytes(d, MEM_OPTIM);
		if (fabs(got - want) > 12 * pad)
			fail_msg("ZeRO %d: optim %.6g bytes, want %.6g", zero, got, want);
		/* the transients: stage 2 the wte bucket (the embeddings and at most a bucket
		 * more) and two others, a bucket being under the bucket size plus one layer;
		 * stage 3 the embeddings and two layers, as gathered weights and as
		 * gradients */
		emb = numel(&cfg.model, 0, 2);
		layer = numel(&cfg.model, 2, 2 + LP_N);
		comm = (double)mem_peak_bytes(d, MEM_COMM);
		comm_max = zero == 2   ? 2 * (emb + 3 * (bucket / 2 + layer))
			   : zero == 3 ? 2 * 2 * (emb + 2 * layer)
				       : 0;
		if (comm > comm_max + 2 * pad || (zero >= 2 && comm < 2 * emb))
			fail_msg("ZeRO %d: %.6g bytes of transient buffers, expected at least "
				 "%.6g and at most %.6g",
				 zero, comm, 2 * emb, comm_max);
		sent = (double)coll_link_bytes(d, TOPO_LINK_INTRA);
		want_sent = (zero == 3 ? 3.0 : 2.0) * (N - 1) / N * psi * 2;
		if (fabs(sent / want_sent - 1) > 1e-3)
			fail_msg("ZeRO %d: device 0 sent %.6g bytes, %d Psi is %.6g", zero, sent,
				 zero == 3 ? 3 : 2, want_sent);
		run_free(&o);
		emu_cluster_free(c);
	}
}

/* Megatron TP: 4 all-reduces of b s h per layer per micro-batch (2 forward, 2 backward),
 * plus, outside the layers, the vocab-parallel embedding (b s h), the cross-entropy's row
 * max (b s) and sums (2 b s), and the final layernorm's input gradient (b s h). */
static void test_tp_volume(void **state)
{
	struct run_cfg cfg;
	struct run_out o;
	struct emu_cluster *c;
	struct coll_stats st;
	uint64_t bsh, bs, L, want_calls, want_bytes;

	(void)state;
	make_cfg(&cfg, "small", 1, 4, 0);
	cfg.mbs = 2;
	cfg.gbs = 4; /* 2 micro-batches */
	cfg.steps = 1;
	c = dry(&cfg, &o);
	coll_stats_get(emu_cluster_dev(c, 0), "all-reduce", &st);
	L = (uint64_t)cfg.model.num_layers;
	bs = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len;
	bsh = bs * (uint64_t)cfg.model.hidden;
	/* per micro-batch; and once per step, the gradient norm's one element over tp */
	want_calls = 2 * (4 * L + 4) + 1;
	want_bytes = 2 * (4 * L * bsh + bsh + bs + 2 * bs + bsh) * 2 + 2;
	assert_int_equal(st.calls, want_calls);
	assert_int_equal(st.bytes, want_bytes);
	run_free(&o);
	emu_cluster_free(c);
}

/* Sequence parallelism moves the same volume as reduce-scatter + all-gather: each of
 * tensor parallelism's 4L + 2 all-reduces of b s h a micro-batch becomes one
 * reduce-scatter and one all-gather of b s h. */
static void test_sp_volume(void **state)
{
	struct run_cfg cfg;
	struct run_out o;
	struct emu_cluster *c;
	struct coll_stats rs, ag;
	uint64_t bsh, L, want;

	(void)state;
	make_cfg(&cfg, "small", 1, 4, 0);
	cfg.sp = 1;
	cfg.mbs = 2;
	cfg.gbs = 4; /* 2 micro-batches */
	cfg.steps = 1;
	c = dry(&cfg, &o);
	coll_stats_get(emu_cluster_dev(c, 0), "reduce-scatter", &rs);
	coll_stats_get(emu_cluster_dev(c, 0), "all-gather", &ag);
	L = (uint64_t)cfg.model.num_layers;
	bsh = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.hidden;
	want = 2 * (4 * L + 2);
	assert_int_equal(rs.calls, want);
	assert_int_equal(ag.calls, want);
	assert_int_equal(rs.bytes, want * bsh * 2);
	assert_int_equal(ag.bytes, want * bsh * 2);
	run_free(&o);
	emu_cluster_free(c);
}

/* With gradient buckets, data-parallel communication overlaps backward: the step's
 * exposed communication (step time minus compute) is below its total communication. */
static void test_buckets_overlap(void **state)
{
	struct run_cfg cfg;
	struct run_out o;
	struct emu_cluster *c;
	struct coll_stats st;
	int64_t exposed;

	(void)state;
	make_cfg(&cfg, "small", 4, 1, 0);
	cfg.mbs = 4;
	cfg.gbs = 16;
	cfg.steps = 1;
	cfg.bucket_bytes = 256 << 10; /* several buckets */
	c = dry(&cfg, &o);
	coll_stats_get(emu_cluster_dev(c, 0), "all-reduce", &st);
	exposed = o.step_ns[0] - o.compute_ns[0];
	assert_true(st.calls > 4);
	assert_true(exposed > 0 && exposed < st.time_ns);
	run_free(&o);
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matrix),
		cmocka_unit_test(test_broken_strategies_fail),
		cmocka_unit_test(test_pipeline_matrix),
		cmocka_unit_test(test_routing_flip_detected),
		cmocka_unit_test(test_recompute),
		cmocka_unit_test(test_mlp_chunks),
		cmocka_unit_test(test_pipeline_determinism),
		cmocka_unit_test(test_zero_memory_and_volume),
		cmocka_unit_test(test_tp_volume),
		cmocka_unit_test(test_sp_volume),
		cmocka_unit_test(test_buckets_overlap),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
