/* --tp-comm-overlap (src/par/tpo.h): Transformer Engine's overlap of sequence
 * parallelism's collectives with the GEMMs beside them.
 *   - numbers: the same GEMMs on row and column blocks and the same sums, so execute runs
 *     pass verify against the serial reference and against the run without the flag;
 *   - volume: each layer's four gathers before a GEMM become t - 1 sends of a rank's rows
 *     round the ring, each forward reduce-scatter TPO_SPLITS of a column chunk each, the
 *     bytes unchanged; the bulk ones (the backward re-gathers, the input gradients'
 *     reduce-scatters) stay;
 *   - time: on a DGX H100 at tp 8 the exposed tensor-parallel communication and the step
 *     are shorter, the compute longer (smaller GEMMs, 16 SMs fewer under the pipeline);
 *     a dry-run twice gives the same times to the nanosecond. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"
#include "par/tpo.h"
#include "presets.h"
#include "trace.h"
#include "run/run.h"
#include "verify.h"

static struct data corpus;

static void run_exec(struct run_cfg *cfg, struct run_out *o)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, cfg->mesh.world, 0, 0);
	char err[256];

	if (run_check(cfg, cfg->mesh.world, err, sizeof err))
		fail_msg("config refused: %s", err);
	run_alloc(o, cfg, 1);
	if (run_parallel(c, cfg, o))
		fail_msg("run failed: %s", emu_cluster_report(c));
	emu_cluster_free(c);
}

/* Execute runs with and without the flag agree within verify's tolerances (the GEMMs on
 * blocks may round differently in BLAS), and verify passes against the serial reference;
 * over tp 2 and 4, dp, a pipeline, zero-bubble's split
 * backward (which keeps the LayerNorm outputs whole), recomputation, dropout and MoE
 * layers (whose MLPs keep sp's collectives). */
static void test_same_numbers(void **state)
{
	static const struct {
		const char *model;
		int dp, tp, pp;
		enum sched_kind sched;
		enum par_recompute rec;
		int dropout;
	} cases[] = {
		{"tiny", 1, 2, 1, SCHED_1F1B, PAR_RECOMPUTE_NONE, 0},
		{"tiny", 2, 4, 1, SCHED_1F1B, PAR_RECOMPUTE_SELECTIVE, 1},
		{"moe-tiny", 1, 2, 1, SCHED_1F1B, PAR_RECOMPUTE_FULL, 0},
		{"tiny", 1, 2, 2, SCHED_1F1B, PAR_RECOMPUTE_NONE, 1},
		{"tiny", 1, 2, 2, SCHED_ZBH1, PAR_RECOMPUTE_NONE, 0},
	};

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct run_out o[2];
		struct run_cfg cfg;
		struct verify_result v;

		for (int on = 0; on < 2; on++) {
			test_make_cfg(&cfg, cases[k].model, cases[k].dp, cases[k].tp, cases[k].pp,
				      &corpus);
			cfg.sp = 1;
			cfg.recompute = cases[k].rec;
			cfg.tp_comm_overlap = on;
			if (cases[k].dropout)
				cfg.model.hidden_dropout = cfg.model.attention_dropout = 0.1f;
			if (cases[k].pp > 1) {
				cfg.model.num_layers = 4;
				cfg.schedule = cases[k].sched;
			}
			run_exec(&cfg, &o[on]);
		}
		verify_compare(&o[0], &o[1], &cfg, &v);
		assert_true(v.passed);
		run_free(&o[0]);
		run_free(&o[1]);
		if (k < 2) {
			v = test_verify(&cfg, NULL, 0);
			assert_true(v.passed);
		}
	}
}

/* Per micro-batch of b s tokens, L layers, t ranks, h hidden, 2-byte elements (bsh the
 * bytes of (b s, h)): sp's 4L + 2 all-gathers less the four a layer the rings take
 * (ln1 and ln2 forward, the residual gradient's rows twice in backward), plus its 2L + 1
 * re-gathers; 4L (t - 1) sends of bsh / t; the reduce-scatters' 4L + 2 with each forward
 * one (2 a layer) in TPO_SPLITS, their bytes unchanged. */
static void test_volume(void **state)
{
	struct run_cfg cfg;
	struct run_out o;
	struct emu_cluster *c;
	struct coll_stats rs, ag, snd;
	uint64_t L, bsh, t = 4, mb = 2;

	(void)state;
	test_make_cfg(&cfg, "small", 1, (int)t, 1, &corpus);
	cfg.sp = 1;
	cfg.tp_comm_overlap = 1;
	cfg.mbs = 2;
	cfg.gbs = (int)mb * cfg.mbs;
	cfg.steps = 1;
	c = test_dry(&cfg, &o, 0);
	coll_stats_get(emu_cluster_dev(c, 1), "reduce-scatter", &rs);
	coll_stats_get(emu_cluster_dev(c, 1), "all-gather", &ag);
	coll_stats_get(emu_cluster_dev(c, 1), "send", &snd);
	L = (uint64_t)cfg.model.num_layers;
	bsh = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.hidden * 2;
	assert_int_equal(ag.calls, mb * (2 + 2 * L + 1));
	assert_int_equal(ag.bytes, mb * (2 + 2 * L + 1) * bsh);
	assert_int_equal(snd.calls, mb * 4 * L * (t - 1));
	assert_int_equal(snd.bytes, mb * 4 * L * (t - 1) * bsh / t);
	assert_int_equal(rs.calls, mb * (2 * L * TPO_SPLITS + 2 * L + 2));
	assert_int_equal(rs.bytes, mb * (4 * L + 2) * bsh);
	run_free(&o);
	emu_cluster_free(c);
}

/* Device 0's ops of the last run, and the compute ones in order. */
struct ops {
	size_t n, nc;
	struct trace_op *op, **comp;
};

static void ops_get(const struct emu_cluster *c, struct ops *o)
{
	o->n = trace_count(c, 0);
	o->op = calloc(o->n, sizeof *o->op);
	o->comp = calloc(o->n, sizeof *o->comp);
	assert_true(o->op && o->comp);
	o->nc = 0;
	for (size_t k = 0; k < o->n; k++) {
		trace_op_get(c, 0, k, &o->op[k]);
		if (o->op[k].stream == EMU_STREAM_COMPUTE)
			o->comp[o->nc++] = &o->op[k];
	}
}

/* The compute op that starts at t0 (or NULL); the first to start at t0 or later. */
static const struct trace_op *starting(const struct ops *o, int64_t t0, int exact)
{
	for (size_t i = 0; i < o->nc; i++)
		if (exact ? o->comp[i]->t0 == t0 : o->comp[i]->t0 >= t0)
			return o->comp[i];
	return NULL;
}

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
	int64_t m = a > b ? a : b;

	return m > c ? m : c;
}

static int64_t max2(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* The times of the rings and the pipelines, from device 0's trace (small, tp 2, 4
 * micro-batches, alone and as the first of 2 pipeline stages, whose sends the rings' run
 * beside), to the nanosecond: every ring step's send and receive are posted as its
 * chunk's GEMM starts, and the next compute starts at max(the GEMM's end, the send's, the
 * receive's) (docs/formulas.md); every pipeline's chunk reduce-scatter k > 0 starts at
 * max(chunk k - 1's end, GEMM k's end), chunk 0's at GEMM 0's end, and the compute after
 * the last GEMM at max(its end, the last chunk's end). 4L ring steps a micro-batch, 2L
 * pipelines, L the stage's layers. */
static void check_schedule(int pp)
{
	struct run_cfg cfg;
	struct run_out out;
	struct emu_cluster *c;
	struct ops o;
	const struct trace_op *rs[TPO_SPLITS];
	size_t steps = 0, pipes = 0, nrs = 0;
	uint64_t chunk;

	test_make_cfg(&cfg, "small", 1, 2, pp, &corpus);
	cfg.sp = 1;
	cfg.tp_comm_overlap = 1;
	cfg.gbs = 4 * cfg.mbs;
	cfg.steps = 1;
	c = test_dry(&cfg, &out, 1);
	ops_get(c, &o);
	chunk = (uint64_t)cfg.mbs * cfg.model.seq_len * cfg.model.hidden / TPO_SPLITS * 2;
	for (size_t k = 0; k < o.n; k++) {
		const struct trace_op *e = &o.op[k], *g, *r = NULL, *next;

		if (e->stream == EMU_STREAM_CE_SEND) {
			for (size_t j = 0; j < o.n; j++)
				if (o.op[j].stream == EMU_STREAM_CE_RECV && o.op[j].t0 == e->t0)
					r = &o.op[j];
			g = starting(&o, e->t0, 1);
			assert_non_null(g);
			assert_non_null(r);
			next = starting(&o, g->t1, 0);
			assert_int_equal(next->t0, max3(g->t1, e->t1, r->t1));
			steps++;
		}
		if (strcmp(e->name, "reduce-scatter") || e->bytes != chunk)
			continue;
		rs[nrs++] = e;
		if (nrs < TPO_SPLITS)
			continue;
		nrs = 0;
		g = NULL;
		for (size_t i = 0; i < o.nc; i++)
			if (o.comp[i]->t1 == rs[0]->t0)
				g = o.comp[i];
		assert_non_null(g);
		for (int s = 1; s < TPO_SPLITS; s++) {
			g = starting(&o, g->t1, 1); /* the chunks' GEMMs back to back */
			assert_non_null(g);
			assert_int_equal(rs[s]->t0, max2(rs[s - 1]->t1, g->t1));
		}
		next = starting(&o, g->t1, 0);
		assert_int_equal(next->t0, max2(g->t1, rs[TPO_SPLITS - 1]->t1));
		pipes++;
	}
	assert_int_equal(steps, 4 * 4 * (size_t)cfg.model.num_layers / (size_t)pp);
	assert_int_equal(pipes, 4 * 2 * (size_t)cfg.model.num_layers / (size_t)pp);
	free(o.op);
	free(o.comp);
	run_free(&out);
	emu_cluster_free(c);
}

static void test_schedule(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 2; pp++)
		check_schedule(pp);
}

/* A GEMM's time on a DGX H100 under the calibrated clock, on all its SMs or under an SM
 * margin: the oracle of what the pieces charge (linear_fwd's and linear_bwd_input's
 * arguments, bf16). */
struct gemm_probe {
	int margin;
	double m, n, k, extra, bytes;
	int64_t t;
};

static int gemm_device(struct emu_dev *d, void *arg)
{
	struct gemm_probe *p = arg;

	emu_set_sm_margin(d, p->margin);
	p->t = emu_gemm(d, "probe", 1, p->m, p->n, p->k, p->extra, p->bytes);
	return 0;
}

static int64_t gemm_ns(int margin, double m, double n, double k, double extra, double bytes)
{
	struct gemm_probe p = {margin, m, n, k, extra, bytes, 0};
	struct emu_config ec;
	struct emu_cluster *c;

	if (emu_config_default(&ec, "dgx-h100"))
		fail_msg("no dgx-h100 preset");
	ec.ndev = 1;
	ec.dry_run = 1;
	c = emu_cluster_new(&ec);
	assert_int_equal(emu_cluster_run(c, gemm_device, &p), 0);
	emu_cluster_free(c);
	return p.t;
}

/* Device 0's ops named name lasting exactly t. */
static size_t lasting(const struct emu_cluster *c, const char *name, int64_t t)
{
	size_t n = 0;

	for (size_t k = 0; k < trace_count(c, 0); k++) {
		struct trace_op e;

		trace_op_get(c, 0, k, &e);
		n += !strcmp(e.name, name) && e.t1 - e.t0 == t;
	}
	return n;
}

/* gpt3-175b's layer shape at tp 8 on a DGX H100 (the calibrated clock; 4 layers, micro-batch
 * 1, 4 micro-batches): with the flag, less tensor-parallel communication exposed and a
 * shorter step, for more compute; the same times on a second run. The pipelines' chunk
 * GEMMs (proj's and fc2's, 4 each a layer and micro-batch) and the bulk method's input
 * gradients (QKV's and fc's) run on the SMs less 16, to the nanosecond of the GEMM law
 * there; without the flag none does. */
static void test_time(void **state)
{
	int64_t step[3], comp[3], exposed[3];
	double bt = 2048, h = 12288, t = 8, f = 4 * h;
	struct {
		const char *name;
		double m, n, k, extra, bytes;
		size_t want;
	} g[] = {
		{"linear", bt, h / 4, h / t, bt * h / 4, 0, 16 * 4},
		{"linear", bt, h / 4, f / t, bt * h / 4, 0, 16 * 4},
		{"linear.bwd_input", bt, h, 3 * h / t, 0, 0, 16},
		{"linear.bwd_input", bt, h, f / t, 0, 0, 16},
	};

	for (size_t i = 0; i < sizeof g / sizeof *g; i++) /* linear.c's bytes, 2 an element */
		g[i].bytes = 2 * (i < 2 ? g[i].m * g[i].k + g[i].n * g[i].k + g[i].m * g[i].n
					: g[i].m * g[i].k + g[i].k * g[i].n + 2 * g[i].m * g[i].n);

	(void)state;
	for (int on = 0; on < 3; on++) {
		struct emu_config ec;
		struct emu_cluster *c;
		struct run_cfg cfg;
		struct run_out o;
		char err[256];

		test_make_cfg(&cfg, "gpt3-175b", 1, 8, 1, NULL);
		cfg.model.num_layers = 4;
		cfg.model.vocab = 50688; /* padded, as Megatron's, to a multiple of 128 t */
		cfg.sp = 1;
		cfg.flash = 1;
		cfg.mbs = 1;
		cfg.gbs = 4;
		cfg.steps = 1;
		cfg.prec = PREC_BF16;
		cfg.tp_comm_overlap = on > 0;
		if (emu_config_default(&ec, "dgx-h100"))
			fail_msg("no dgx-h100 preset");
		ec.ndev = 8;
		ec.dry_run = 1;
		ec.trace = 1;
		c = emu_cluster_new(&ec);
		if (run_check(&cfg, 8, err, sizeof err))
			fail_msg("config refused: %s", err);
		run_alloc(&o, &cfg, 0);
		if (run_parallel(c, &cfg, &o))
			fail_msg("dry run failed: %s", emu_cluster_report(c));
		step[on] = o.step_ns[0];
		comp[on] = o.compute_ns[0];
		exposed[on] = coll_exposed_ns(emu_cluster_dev(c, 0));
		for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
			int64_t under =
				gemm_ns(TPO_SMS, g[i].m, g[i].n, g[i].k, g[i].extra, g[i].bytes);

			assert_true(under >
				    gemm_ns(0, g[i].m, g[i].n, g[i].k, g[i].extra, g[i].bytes));
			assert_int_equal(lasting(c, g[i].name, under), on ? g[i].want : 0);
		}
		run_free(&o);
		emu_cluster_free(c);
	}
	assert_true(exposed[1] < exposed[0] / 2);
	assert_true(step[1] < step[0]);
	assert_true(comp[1] > comp[0]);
	assert_int_equal(step[2], step[1]);
	assert_int_equal(comp[2], comp[1]);
	assert_int_equal(exposed[2], exposed[1]);
}

/* --tp-comm-overlap-cfg: NeMo's preset for GPT-3 175B read into the report's
 * tp_comm_overlap_cfg (the settings it gives, TE's defaults for the rest), and what else
 * YAML allows (a byte-order mark, "---", quotes, blanks before a colon, on/off, no final
 * newline); each bad file refused with exit code 2 and one line naming the file, the
 * line and why; the file without the flag, a directory and a missing file refused. */
static void cfg_run(const char *path, const char *text, const char *flags, int want, char *out,
		    size_t n)
{
	char args[512];
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	snprintf(args, sizeof args,
		 "run --model tiny --tp 2 --sequence-parallel %s --tp-comm-overlap-cfg %s "
		 "--dry-run --steps 1 --json",
		 flags, path);
	assert_int_equal(test_pemu(args, want != 0, out, n), want);
}

static void test_cfg_file(void **state)
{
	static const struct {
		const char *text, *says;
	} bad[] = {
		{"qkv_fprop:\n  method: pipeline\n",
		 ":2: qkv_fprop: method pipeline is not in this build, which runs qkv_fprop as "
		 "ring_exchange"},
		{"fc2_fprop:\n  method: bulk\n", ":2: fc2_fprop: method bulk is not in this build, "
						 "which runs fc2_fprop as pipeline "
						 "or ring_exchange"},
		{"qkv_dgrad:\n  method: ring_exchange\n",
		 ":2: qkv_dgrad: method ring_exchange is not in this build, which runs qkv_dgrad "
		 "as "
		 "bulk"},
		{"# a comment\nproj_wgrad:\n  method: external\n",
		 ":2: 'proj_wgrad' is not one of Transformer Engine's GEMMs"},
		{"qkv_fprop:\n  aggregate: 1\n", ":2: qkv_fprop: aggregate 1 is not in this build"},
		{"qkv_fprop:\n  use_ce: 0\n", ":2: qkv_fprop: use_ce 0 is not in this build"},
		{"---\nqkv_fprop:\n  atomic_gemm: 1\n",
		 ":3: qkv_fprop: atomic_gemm 1 is not in this build"},
		{"qkv_dgrad:\n  num_sm: 0\n",
		 ":2: qkv_dgrad: num_sm '0' is not a whole number from 1 to 1024"},
		{"qkv_dgrad:\n  num_sm: 4x\n",
		 ":2: qkv_dgrad: num_sm '4x' is not a whole number from 1 to 1024"},
		{"qkv_dgrad:\n  colour: blue\n", ":2: qkv_dgrad: unknown setting 'colour'"},
		{"  method: bulk\n", ":1: 'method' before any GEMM's name"},
		{"qkv_dgrad\n", ":1: 'qkv_dgrad' is not 'key: value'"},
		{"qkv_dgrad:\n  num_sm: 4\nqkv_dgrad:\n", ":3: qkv_dgrad is named twice"},
	};
	static char out[1 << 16];
	const char *path = "build/test-tpo-cfg.yaml", *on = "--tp-comm-overlap";

	(void)state;
	assert_int_equal(test_pemu("run --model tiny --tp 2 --sequence-parallel --tp-comm-overlap "
				   "--tp-comm-overlap-cfg "
				   "bench/tp_overlap/nemo_gpt3_175b_h100_bf16.yaml --dry-run "
				   "--steps 1 --json",
				   0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"qkv_dgrad\":{\"method\":\"bulk\",\"num_sm\":4,"
				    "\"set_sm_margin\":false}"));
	assert_non_null(strstr(out, "\"proj_fprop\":{\"method\":\"pipeline\",\"num_sm\":24,"
				    "\"num_splits\":4,\"set_sm_margin\":true}"));
	assert_non_null(strstr(out, "\"fc2_fprop\":{\"method\":\"ring_exchange\",\"num_sm\":1,"
				    "\"set_sm_margin\":true}"));
	assert_non_null(strstr(out, "\"qkv_fprop\":{\"method\":\"ring_exchange\",\"num_sm\":1,"
				    "\"set_sm_margin\":false}"));
	cfg_run(path,
		"\xEF\xBB\xBF---\nfc2_fprop :\n  method: 'ring_exchange'\n  set_sm_margin : on\n"
		"qkv_dgrad:\n  num_sm: \"2\"",
		on, 0, out, sizeof out);
	assert_non_null(strstr(out, "\"fc2_fprop\":{\"method\":\"ring_exchange\",\"num_sm\":16,"
				    "\"set_sm_margin\":true}"));
	assert_non_null(strstr(out, "\"qkv_dgrad\":{\"method\":\"bulk\",\"num_sm\":2,"));
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		cfg_run(path, bad[k].text, on, 2, out, sizeof out);
		if (!strstr(out, bad[k].says) || !strstr(out, path))
			fail_msg("case %zu: '%s' does not say '%s'", k, out, bad[k].says);
	}
	cfg_run(path, "qkv_dgrad:\n  num_sm: 4\n", "", 2, out, sizeof out);
	assert_non_null(strstr(out, "--tp-comm-overlap-cfg without --tp-comm-overlap"));
	remove(path);
	assert_int_equal(test_pemu("run --tp-comm-overlap-cfg build", 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--tp-comm-overlap-cfg: 'build' is not a file"));
	assert_int_equal(
		test_pemu("run --tp-comm-overlap-cfg build/no-such.yaml", 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--tp-comm-overlap-cfg: cannot open 'build/no-such.yaml'"));
}

/* The reduce-scatters as rings of sends (TE's CommOverlapP2P, NeMo's fc2_fprop): verify
 * passes, and so against the pipelines' run; each forward reduce-scatter a layer is
 * t - 1 sends of b s h / t to their owners and one reduce kernel, no collective. */
static void test_rs_ring(void **state)
{
	struct run_out o[2];
	struct run_cfg cfg;
	struct verify_result v;
	struct emu_cluster *c;
	struct coll_stats rs, snd;
	uint64_t L, bsh, t = 4, mb = 2;
	size_t reduces = 0;

	(void)state;
	for (int ring = 0; ring < 2; ring++) {
		test_make_cfg(&cfg, "tiny", 1, 4, 1, &corpus);
		cfg.sp = 1;
		cfg.tp_comm_overlap = 1;
		par_tpo_defaults(&cfg.tpo_cfg);
		cfg.tpo_cfg_set = 1;
		if (ring)
			cfg.tpo_cfg.g[PAR_TPO_PROJ_FPROP].method =
				cfg.tpo_cfg.g[PAR_TPO_FC2_FPROP].method = PAR_TPO_RING;
		run_exec(&cfg, &o[ring]);
	}
	verify_compare(&o[0], &o[1], &cfg, &v);
	assert_true(v.passed);
	run_free(&o[0]);
	run_free(&o[1]);
	v = test_verify(&cfg, NULL, 0);
	assert_true(v.passed);

	test_make_cfg(&cfg, "small", 1, (int)t, 1, &corpus);
	cfg.sp = 1;
	cfg.tp_comm_overlap = 1;
	par_tpo_defaults(&cfg.tpo_cfg);
	cfg.tpo_cfg_set = 1;
	cfg.tpo_cfg.g[PAR_TPO_PROJ_FPROP].method = cfg.tpo_cfg.g[PAR_TPO_FC2_FPROP].method =
		PAR_TPO_RING;
	cfg.mbs = 2;
	cfg.gbs = (int)mb * cfg.mbs;
	cfg.steps = 1;
	c = test_dry(&cfg, &o[0], 1);
	coll_stats_get(emu_cluster_dev(c, 1), "reduce-scatter", &rs);
	coll_stats_get(emu_cluster_dev(c, 1), "send", &snd);
	L = (uint64_t)cfg.model.num_layers;
	bsh = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.hidden * 2;
	assert_int_equal(rs.calls, mb * (2 * L + 2));
	assert_int_equal(snd.calls, mb * 6 * L * (t - 1));
	assert_int_equal(snd.bytes, mb * 6 * L * (t - 1) * bsh / t);
	for (size_t k = 0; k < trace_count(c, 1); k++) {
		struct trace_op e;

		trace_op_get(c, 1, k, &e);
		reduces += !strcmp(e.name, "reduce");
	}
	assert_int_equal(reduces, mb * 2 * L);
	run_free(&o[0]);
	emu_cluster_free(c);
	/* a pipeline's num_splits reaches it: in 2 chunks, 2 reduce-scatters a layer each */
	cfg.tpo_cfg.g[PAR_TPO_PROJ_FPROP].method = cfg.tpo_cfg.g[PAR_TPO_FC2_FPROP].method =
		PAR_TPO_PIPELINE;
	cfg.tpo_cfg.g[PAR_TPO_PROJ_FPROP].num_splits = cfg.tpo_cfg.g[PAR_TPO_FC2_FPROP].num_splits =
		2;
	c = test_dry(&cfg, &o[0], 0);
	coll_stats_get(emu_cluster_dev(c, 1), "reduce-scatter", &rs);
	assert_int_equal(rs.calls, mb * (2 * L * 2 + 2 * L + 2));
	run_free(&o[0]);
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_numbers), cmocka_unit_test(test_volume),
		cmocka_unit_test(test_schedule),     cmocka_unit_test(test_time),
		cmocka_unit_test(test_cfg_file),     cmocka_unit_test(test_rs_ring),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
