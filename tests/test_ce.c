/* The cross-entropy as the frameworks run it (models/ops.h, enum ce_impl): Megatron-LM's
 * unfused vocab_parallel_cross_entropy (its default), its fused one
 * (--cross-entropy-loss-fusion) and Transformer Engine's
 * (--cross-entropy-fusion-impl te).
 *   - time: each one's kernels over the M x V logits, in order, each at the roofline of
 *     its bytes a logit (bf16 logits, fp32 inside): 52, 32 and 22 bytes a logit over
 *     forward and backward;
 *   - memory: the probabilities kept for backward in fp32, and in forward the logits at
 *     the activations' precision beside them: 4 bytes a logit more at the activations'
 *     peak than one bf16 copy;
 *   - numbers: each passes verify against the serial reference at tp 1, 2 and 4 (TE's
 *     merges the ranks' maxima and sums, the others reduce them), and the unfused and
 *     fused ones, the same sums reduced in two all-reduces or one, give bitwise the same
 *     run at tp 2. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common.h"
#include "ops.h"
#include "presets.h"
#include "trace.h"
#include "run/run.h"
#include "verify.h"

static struct data corpus;

/* Each implementation's kernels, forward then backward, and the bytes each moves a logit
 * with 2-byte logits (docs/formulas.md). */
struct kernel {
	const char *name;
	int bytes;
};
static const struct {
	enum ce_impl impl;
	int n, total;
	struct kernel k[8];
} impls[] = {
	{CE_UNFUSED,
	 8,
	 52,
	 {{"crossentropy.float", 6},
	  {"crossentropy.max", 4},
	  {"crossentropy.sub", 8},
	  {"crossentropy.exp", 8},
	  {"crossentropy.sum", 4},
	  {"crossentropy.div", 8},
	  {"crossentropy.bwd.mul", 8},
	  {"crossentropy.bwd.cast", 6}}},
	{CE_NATIVE,
	 4,
	 32,
	 {{"crossentropy.float_max", 6},
	  {"crossentropy.sub_exp_sum", 8},
	  {"crossentropy.div", 8},
	  {"crossentropy.bwd", 10}}},
	{CE_TE,
	 4,
	 22,
	 {{"crossentropy.online_softmax", 2},
	  {"crossentropy.grad", 6},
	  {"crossentropy.bwd.mul", 8},
	  {"crossentropy.bwd.cast", 6}}},
};
#define NIMPLS (sizeof impls / sizeof *impls)

/* One micro-batch of the tiny model over tp ranks, the cross-entropy impl's. */
static void make_cfg(struct run_cfg *cfg, int tp, enum ce_impl impl, const struct data *data)
{
	test_make_cfg(cfg, "tiny", 1, tp, 1, data);
	cfg->gbs = cfg->mbs;
	cfg->ce = impl;
}

/* The roofline's time of a kernel of mv FLOPs and mv x bytes on d's GPU (emu/clock.c). */
static int64_t roofline_ns(const struct topo_gpu *g, double mv, int bytes)
{
	double math = mv / (g->peak_flops * g->efficiency), mem = mv * bytes / g->hbm_bw;

	return g->launch_ns + (int64_t)ceil((math > mem ? math : mem) * 1e9);
}

static void test_kernels_time(void **state)
{
	struct emu_config ec;

	(void)state;
	assert_int_equal(emu_config_default(&ec, "dgx-a100"), 0);
	for (int tp = 1; tp <= 2; tp++)
		for (size_t i = 0; i < NIMPLS; i++) {
			struct run_cfg cfg;
			struct run_out o;
			struct emu_cluster *c;
			double mv;
			int n = 0, total = 0;

			make_cfg(&cfg, tp, impls[i].impl, NULL);
			cfg.steps = 1;
			c = test_dry(&cfg, &o, 1);
			mv = (double)cfg.mbs * cfg.model.seq_len * (cfg.model.vocab / tp);
			for (size_t k = 0; k < trace_count(c, 0); k++) {
				struct trace_op op;

				trace_op_get(c, 0, k, &op);
				if (op.stream != EMU_STREAM_COMPUTE ||
				    strncmp(op.name, "crossentropy", 12))
					continue;
				assert_true(n < impls[i].n);
				assert_string_equal(op.name, impls[i].k[n].name);
				assert_int_equal(op.t1 - op.t0, roofline_ns(&ec.topo.gpu, mv,
									    impls[i].k[n].bytes));
				total += impls[i].k[n++].bytes;
			}
			assert_int_equal(n, impls[i].n);
			assert_int_equal(total, impls[i].total);
			run_free(&o);
			emu_cluster_free(c);
		}
}

static void test_memory(void **state)
{
	uint64_t one = 0, mv, work[2];

	(void)state;
	for (int k = -1; k < (int)NIMPLS; k++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		uint64_t act;

		make_cfg(&cfg, 1, k < 0 ? CE_ONE : impls[k].impl, NULL);
		c = test_dry(&cfg, &o, 0);
		act = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
		mv = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.vocab;
		if (k < 0)
			one = act;
		else /* fp32 kept (2 bytes more) and the bf16 logits beside them (2) */
			assert_int_equal(act - one, 4 * mv);
		run_free(&o);
		emu_cluster_free(c);
	}
	/* at tp 2, the work buffers of the rows' reductions in fp32: the max and the 2 sums,
	 * or TE's (max, sum, target logit) of this rank and then of the 2 ranks */
	for (int te = 0; te < 2; te++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;

		make_cfg(&cfg, 2, te ? CE_TE : CE_UNFUSED, NULL);
		c = test_dry(&cfg, &o, 0);
		work[te] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_WORK);
		mv = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len; /* rows */
		run_free(&o);
		emu_cluster_free(c);
	}
	assert_int_equal(work[1] - work[0], (3 * 3 - 3) * mv * 4);
}

static void test_numbers(void **state)
{
	struct run_out o[2];

	(void)state;
	for (int tp = 1; tp <= 4; tp *= 2)
		for (size_t i = 0; i < NIMPLS; i++) {
			struct run_cfg cfg;
			struct verify_result v;

			make_cfg(&cfg, tp, impls[i].impl, &corpus);
			cfg.gbs = 4 * cfg.mbs;
			v = test_verify(&cfg, NULL, 0);
			if (!v.passed)
				fail_msg("tp %d, cross-entropy %zu: verify failed", tp, i);
		}
	for (int f = 0; f < 2; f++) {
		struct run_cfg cfg;
		struct emu_cluster *c = test_cluster("dgx-a100", 1, 2, 0, 0);

		make_cfg(&cfg, 2, f ? CE_NATIVE : CE_UNFUSED, &corpus);
		run_alloc(&o[f], &cfg, 1);
		if (run_parallel(c, &cfg, &o[f]))
			fail_msg("run failed: %s", emu_cluster_report(c));
		emu_cluster_free(c);
	}
	assert_memory_equal(o[0].loss, o[1].loss, sizeof(float) * (size_t)o[0].steps);
	for (int i = 0; i < o[0].np; i++)
		assert_memory_equal(o[0].params[i], o[1].params[i],
				    gpt_tensor_numel(&model_preset("tiny")->cfg, i) *
					    sizeof(float));
	run_free(&o[0]);
	run_free(&o[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernels_time),
		cmocka_unit_test(test_memory),
		cmocka_unit_test(test_numbers),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
