/* par/: properties of a rank's model, below any strategy's verify case. Tensor
 * parallelism's shard rules cut every tensor into disjoint shards that cover it exactly
 * once over the group (a replicated one is whole on every rank); a shard copied out and
 * back is unchanged; and a model with nothing parallel, walked piece by piece by the
 * plain executor, is the serial model bitwise (docs/formulas.md, Verification: a strategy that
 * splits no reduction must match bitwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common.h"
#include "par/tp.h"
#include "presets.h"
#include "run/run.h"
#include "util.h"

/* Each rank's coverage of every tensor: cover[r][i][e] = 1 if rank r holds element e of
 * tensor i, and whether its shard survived the round trip. Written by the devices, read
 * by the main thread. */
struct cover_job {
	struct gpt_config cfg;
	int tp;
	unsigned char **cover[4]; /* [tp][np][numel] */
	int roundtrip_ok[4];
	size_t held[4]; /* elements held in all */
};

static int cover_device(struct emu_dev *d, void *arg)
{
	struct cover_job *j = arg;
	int r = emu_dev_id(d), np = gpt_num_tensors(&j->cfg), devs[4], rc;
	struct par_cfg pc = {.model = j->cfg, .mbs = 1, .prec = PREC_FP32, .tp = j->tp, .pad = 1};
	struct par_groups g = {.dev = d, .tp_rank = r};
	struct par_source src = {7, NULL};
	struct par_model m;

	for (int i = 0; i < j->tp; i++)
		devs[i] = i;
	g.tp = emu_group_get(d, devs, j->tp);
	if ((rc = par_model_init(&m, &pc, &g, NULL, &src)))
		return rc;
	j->roundtrip_ok[r] = 1;
	for (int i = 0; i < np; i++) {
		size_t n = gpt_tensor_numel(&j->cfg, i), ln = m.p[i].n;
		float *full = emu_xcalloc(n, sizeof *full),
		      *local = emu_xcalloc(ln + 1, sizeof *local);
		float *back = emu_xcalloc(ln + 1, sizeof *back);

		/* the full tensor numbered 1..n: the shard copied out of it, written back into
		 * a zeroed tensor, marks exactly the elements this rank holds */
		for (size_t e = 0; e < n; e++)
			full[e] = (float)(e + 1);
		par_tp_shard_copy(&m, i, full, local, 0);
		memset(full, 0, n * sizeof *full);
		par_tp_shard_copy(&m, i, full, local, 1);
		for (size_t e = 0; e < n; e++)
			if (full[e] != 0) {
				j->cover[r][i][e] = 1;
				j->held[r]++;
				if (full[e] != (float)(e + 1))
					j->roundtrip_ok[r] = 0;
			}
		par_tp_shard_copy(&m, i, full, back, 0);
		if (ln && memcmp(back, local, ln * sizeof *back))
			j->roundtrip_ok[r] = 0;
		free(full);
		free(local);
		free(back);
	}
	par_model_free(&m);
	return 0;
}

static void check_cover(const char *preset, int tp)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, tp, 1, 0);
	struct cover_job j = {model_preset(preset)->cfg, tp, {0}, {0}, {0}};
	int np = gpt_num_tensors(&j.cfg);

	for (int r = 0; r < tp; r++) {
		j.cover[r] = emu_xcalloc((size_t)np, sizeof *j.cover[r]);
		for (int i = 0; i < np; i++)
			j.cover[r][i] = emu_xcalloc(gpt_tensor_numel(&j.cfg, i), 1);
	}
	if (emu_cluster_run(c, cover_device, &j))
		fail_msg("%s tp %d: %s", preset, tp, emu_cluster_report(c));
	for (int i = 0; i < np; i++) {
		char name[64];
		size_t n = gpt_tensor_numel(&j.cfg, i);
		int bias = 0;

		gpt_tensor_name(&j.cfg, i, name, sizeof name);
		/* a row-parallel bias lives on rank 0 alone (the others hold zeros) */
		bias = strstr(name, "proj.bias") || strstr(name, "fc2.bias");
		for (size_t e = 0; e < n; e++) {
			int k = 0;

			for (int r = 0; r < tp; r++)
				k += j.cover[r][i][e];
			if (k != 1 && k != tp)
				fail_msg("%s tp %d: %s element %zu held by %d ranks", preset, tp,
					 name, e, k);
		}
		/* split tensors are held once; replicated ones everywhere (biases: rank 0) */
		for (size_t e = 0; e < n && bias; e++)
			assert_int_equal(j.cover[0][i][e], 1);
	}
	for (int r = 0; r < tp; r++) {
		assert_true(j.roundtrip_ok[r]);
		for (int i = 0; i < np; i++)
			free(j.cover[r][i]);
		free(j.cover[r]);
	}
	emu_cluster_free(c);
}

static void test_shards_partition_every_tensor(void **state)
{
	(void)state;
	check_cover("tiny", 2);
	check_cover("tiny", 4);
	check_cover("moe-tiny", 2);
	check_cover("moe-tiny", 4);
}

/* The shards of a tensor-parallel tensor hold 1/t of it: wte by vocabulary rows, qkv and
 * fc by rows, proj and fc2 by columns, each rank the same count. */
static void test_shards_are_even(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 2, 1, 0);
	struct cover_job j = {model_preset("tiny")->cfg, 2, {0}, {0}, {0}};
	int np = gpt_num_tensors(&j.cfg);

	(void)state;
	for (int r = 0; r < 2; r++) {
		j.cover[r] = emu_xcalloc((size_t)np, sizeof *j.cover[r]);
		for (int i = 0; i < np; i++)
			j.cover[r][i] = emu_xcalloc(gpt_tensor_numel(&j.cfg, i), 1);
	}
	assert_int_equal(emu_cluster_run(c, cover_device, &j), 0);
	for (int i = 0; i < np; i++) {
		size_t k[2] = {0, 0}, n = gpt_tensor_numel(&j.cfg, i);

		for (int r = 0; r < 2; r++)
			for (size_t e = 0; e < n; e++)
				k[r] += j.cover[r][i][e];
		/* whole on both (replicated), whole on rank 0 alone (a row-parallel bias), or
		 * split in halves */
		if (k[1] == 0 || k[1] == n)
			assert_int_equal(k[0], n);
		else
			assert_true(k[0] == n / 2 && k[1] == n / 2);
	}
	for (int r = 0; r < 2; r++) {
		for (int i = 0; i < np; i++)
			free(j.cover[r][i]);
		free(j.cover[r]);
	}
	emu_cluster_free(c);
}

/* Nothing parallel: the plain executor over the pieces is the serial model, bitwise, in
 * losses, first gradients and final weights, dense and MoE, with recomputation too (the
 * memory-efficient attention is another kernel, checked against the standard one in
 * tests/test_kernels.c). */
static void test_serial_pieces_are_the_serial_model(void **state)
{
	static const struct {
		const char *preset;
		int recompute;
	} cases[] = {{"tiny", 0}, {"moe-tiny", 0}, {"tiny", 2}, {"moe-tiny", 1}};
	struct data corpus;

	(void)state;
	data_builtin(&corpus, 1 << 16);
	for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
		struct emu_cluster *one = test_cluster("dgx-a100", 1, 1, 0, 0);
		struct run_cfg cfg;
		struct run_out ref, par;
		struct verify_result v;
		char err[256];

		memset(&cfg, 0, sizeof cfg);
		cfg.model = model_preset(cases[t].preset)->cfg;
		cfg.mbs = 2;
		cfg.gbs = 4;
		cfg.steps = 2;
		cfg.seed = 5;
		cfg.prec = PREC_FP32;
		optim_defaults(&cfg.opt);
		mesh_init(&cfg.mesh, 1, 1, 1, 1, 1);
		cfg.recompute = (enum par_recompute)cases[t].recompute;
		cfg.mlp_chunks = 1;
		cfg.bucket_bytes = 1 << 20;
		cfg.data = &corpus;
		if (run_check(&cfg, 1, err, sizeof err))
			fail_msg("%s", err);
		run_alloc(&ref, &cfg, 1);
		run_alloc(&par, &cfg, 1);
		assert_int_equal(run_reference(one, &cfg, &ref), 0);
		assert_int_equal(run_parallel(one, &cfg, &par), 0);
		verify_compare(&ref, &par, &cfg, &v);
		assert_int_equal(v.route_flips, 0);
		assert_memory_equal(ref.loss, par.loss, (size_t)cfg.steps * sizeof *ref.loss);
		for (int i = 0; i < ref.np; i++) {
			size_t n = gpt_tensor_numel(&cfg.model, i) * sizeof(float);

			if (memcmp(ref.grad0[i], par.grad0[i], n) ||
			    memcmp(ref.params[i], par.params[i], n))
				fail_msg("%s recompute %d: tensor %d differs from the "
					 "serial "
					 "model's (gradient %g, weights %g apart)",
					 cases[t].preset, cases[t].recompute, i, v.grad_abs,
					 v.param_abs);
		}
		run_free(&ref);
		run_free(&par);
		emu_cluster_free(one);
	}
	data_free(&corpus);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shards_partition_every_tensor),
		cmocka_unit_test(test_shards_are_even),
		cmocka_unit_test(test_serial_pieces_are_the_serial_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
