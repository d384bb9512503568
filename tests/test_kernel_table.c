/* docs/formulas.md's table of the memory-bound kernels against what the calls charge.
 *
 * The table (between its two HTML comments) gives each kernel's trace name, the call that
 * charges it, and its FLOPs and bytes as formulas of the shapes ("(2 M C + 2 C + 2 M) ab":
 * numbers, the shapes' names, + and -, parentheses, a product written as its factors side
 * by side). Each call runs here on one dry-run device whose clock makes a kernel's time
 * its FLOPs, then its bytes, times 1000 ns (no fixed cost, a ceiling and memory
 * efficiency of 1, the other term out of the way; the calibrated model, or the roofline
 * for the calls the table says), in bf16 with 2- and 4-byte gradients and in fp32, and
 * each time is compared exactly with what the row's figures give.
 *   - test_table: every kernel of the row's name the call records takes the row's FLOPs
 *     and bytes (its time, and its trace's args), every row is matched (in the precision it names,
 * if it names one), and every kernel a call records has a row of that call, is a nested call's
 * (listed), or is one of the GEMMs the docs give before the table;
 *   - test_every_kernel_named: every string in the arguments of a charge in models/ or
 *     src/ (emu_compute, sum_charge, the cross-entropy's ce_kernel) is named, in
 *     backticks, in the table or the paragraph after it, so that a new kernel charged by
 *     name cannot go undocumented (one charged through a wrapper that takes the name can);
 *   - test_formulas: the parser, and the shapes distinct. */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "attention.h"
#include "common.h"
#include "dropout.h"
#include "moe.h"
#include "ops.h"
#include "optim.h"
#include "trace.h"

#define DOC         "docs/formulas.md"
#define TABLE_START "<!-- kernel table:"
#define TABLE_END   "<!-- end of the kernel table -->"

/* The shapes every call runs on (the table's names; docs/formulas.md says what each is):
 * distinct values, none 2 or 4 (the bytes of an element), so that a formula naming the
 * wrong one fails. K = 3 (pemu routes to 1 or 2 experts) only counts here. The
 * attention's H is 3 sequences of 7 heads, from head 1. */
static const struct {
	const char *name;
	int v;
} shape[] = {{"M", 7},   {"C", 13},  {"n", 101},  {"N", 17}, {"B", 23}, {"T", 11},
	     {"E", 9},   {"K", 3},   {"cap", 19}, {"El", 5}, {"H", 21}, {"Tq", 29},
	     {"Tk", 31}, {"hs", 37}, {"t", 43},   {"V", 47}};
#define VIEW_B 3  /* the attention view's sequences: H / VIEW_B heads each */
#define MOE_F  16 /* an expert's MLP width (no table formula has it) */
#define MOE_E0 1  /* the first held expert */

static int dim(const char *name)
{
	for (size_t i = 0; i < sizeof shape / sizeof *shape; i++)
		if (!strcmp(shape[i].name, name))
			return shape[i].v;
	fail_msg("no shape %s", name);
	return 0;
}

static struct moe_shape moe_shape_of(int dropless)
{
	struct moe_shape s = {.M = dim("M"),
			      .C = dim("C"),
			      .F = MOE_F,
			      .E = dim("E"),
			      .k = dim("K"),
			      .cap = dropless ? dim("M") : dim("cap"),
			      .aux_coeff = 0.01f,
			      .e0 = MOE_E0,
			      .El = dim("El"),
			      .dropless = dropless};
	return s;
}

/* R: the rows a dropless MoE block's held experts get in a dry-run (moe_uniform_rows). */
static int held_rows(void)
{
	struct moe_shape s = moe_shape_of(1);
	int R = 0;

	for (int e = s.e0; e < s.e0 + s.El; e++)
		R += moe_uniform_rows(&s, e);
	return R;
}

/* ------------------------------------------------------------------------------------ */
/* The table's formulas                                                                 */

struct expr {
	const char *p, *row;
	const struct kctx *k;
};

static double expr_sum(struct expr *e);

static void blanks(struct expr *e)
{
	while (*e->p == ' ')
		e->p++;
}

static double value(struct expr *e, const char *name)
{
	const struct kctx *k = e->k;

	if (!strcmp(name, "ab"))
		return k->ab;
	if (!strcmp(name, "gb"))
		return k->gb;
	if (!strcmp(name, "cast"))
		return k->ab < 4; /* 16-bit logits are cast to fp32 */
	if (!strcmp(name, "R"))
		return held_rows();
	return dim(name);
}

static double factor(struct expr *e)
{
	char name[16];
	size_t n = 0;

	blanks(e);
	if (*e->p == '(') {
		double v;

		e->p++;
		v = expr_sum(e);
		blanks(e);
		if (*e->p != ')')
			fail_msg("%s: ')' expected at '%s'", e->row, e->p);
		e->p++;
		return v;
	}
	if (isdigit((unsigned char)*e->p))
		return strtod(e->p, (char **)&e->p);
	while (isalpha((unsigned char)*e->p) && n + 1 < sizeof name)
		name[n++] = *e->p++;
	name[n] = 0;
	if (!n)
		fail_msg("%s: a number, a shape or '(' expected at '%s'", e->row, e->p);
	return value(e, name);
}

static double product(struct expr *e)
{
	double v = factor(e);

	for (blanks(e); *e->p == '(' || isalnum((unsigned char)*e->p); blanks(e))
		v *= factor(e);
	return v;
}

static double expr_sum(struct expr *e)
{
	double v = product(e);

	for (blanks(e); *e->p == '+' || *e->p == '-'; blanks(e)) {
		int minus = *e->p++ == '-';
		double w = product(e);

		v = minus ? v - w : v + w;
	}
	return v;
}

static double eval(const char *text, const char *row, const struct kctx *k)
{
	struct expr e = {text, row, k};
	double v = expr_sum(&e);

	blanks(&e);
	if (*e.p)
		fail_msg("%s: '%s' left over in '%s'", row, e.p, text);
	return v;
}

/* ------------------------------------------------------------------------------------ */
/* The table                                                                            */

enum { MAX_ROWS = 128, CELL = 256 };

/* A row; only: 16 if the kernel runs with 16-bit logits only, 32 with fp32 only, else 0
 * (from its description). */
struct row {
	char kernel[CELL], call[CELL], flops[CELL], bytes[CELL], what[CELL];
	int only, seen;
};

/* The text of cell i (0-based) of a "| a | b | ..." line, backticks dropped; fails on a
 * line with fewer cells or a cell too long. */
static void cell(const char *line, int i, char *out)
{
	const char *p = line;
	size_t n = 0;

	for (int bar = 0; bar <= i; p++) {
		if (!*p)
			fail_msg("too few cells in '%s'", line);
		bar += *p == '|';
	}
	while (*p == ' ')
		p++;
	for (; *p && *p != '|'; p++)
		if (*p != '`') {
			if (n + 1 >= CELL)
				fail_msg("a cell longer than %d characters in '%s'", CELL - 1,
					 line);
			out[n++] = *p;
		}
	if (!*p)
		fail_msg("cell %d of '%s' is not closed by '|'", i, line);
	while (n && out[n - 1] == ' ')
		n--;
	out[n] = 0;
}

/* The table's rows; fails on a line inside it that is neither a row, the header, its
 * rule nor blank. */
static int read_table(struct row *rows)
{
	FILE *f = fopen(DOC, "r");
	char line[1024];
	int n = 0, in = 0;

	if (!f)
		fail_msg("cannot open %s (run from the repository's top)", DOC);
	while (fgets(line, sizeof line, f)) {
		if (!strncmp(line, TABLE_START, strlen(TABLE_START)))
			in = 1;
		else if (!strncmp(line, TABLE_END, strlen(TABLE_END)))
			in = 0;
		else if (in && !strncmp(line, "| `", 3)) {
			struct row *r = &rows[n];

			assert_true(n < MAX_ROWS);
			cell(line, 0, r->kernel);
			cell(line, 1, r->call);
			cell(line, 2, r->flops);
			cell(line, 3, r->bytes);
			cell(line, 4, r->what);
			r->only = strstr(r->what, "16-bit logits only") ? 16
				  : strstr(r->what, "fp32 logits only") ? 32
									: 0;
			r->seen = 0;
			n++;
		} else if (in && strcmp(line, "\n") && strncmp(line, "| kernel |", 10) &&
			   strncmp(line, "|---", 4))
			fail_msg("a line in %s's kernel table that is no row: %s", DOC, line);
	}
	fclose(f);
	return n;
}

/* ------------------------------------------------------------------------------------ */
/* The calls                                                                            */

static void call_layernorm_fwd(const struct kctx *k)
{
	layernorm_fwd(k, NULL, NULL, NULL, NULL, NULL, NULL, dim("M"), dim("C"));
}

static void call_layernorm_bwd(const struct kctx *k)
{
	layernorm_bwd(k, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, dim("M"), dim("C"));
}

static void call_gelu_fwd(const struct kctx *k)
{
	gelu_fwd(k, NULL, NULL, (size_t)dim("n"));
}

static void call_gelu_bwd(const struct kctx *k)
{
	gelu_bwd(k, NULL, NULL, NULL, (size_t)dim("n"));
}

static void call_residual_fwd(const struct kctx *k)
{
	residual_fwd(k, NULL, NULL, NULL, (size_t)dim("n"));
}

static void call_add_acc(const struct kctx *k)
{
	add_acc(k, NULL, NULL, (size_t)dim("n"));
}

static void call_sum_charge(const struct kctx *k)
{
	sum_charge(k, "reduce", dim("t"), dim("n"));
}

static void call_embedding_fwd(const struct kctx *k)
{
	embedding_fwd(k, NULL, NULL, NULL, NULL, dim("B"), dim("T"), dim("C"), 0);
}

static void call_embedding_bwd(const struct kctx *k)
{
	embedding_bwd(k, NULL, NULL, NULL, NULL, dim("B"), dim("T"), dim("C"), 0);
}

static void call_embedding_range_fwd(const struct kctx *k)
{
	embedding_range_fwd(k, NULL, NULL, NULL, 0, 1, dim("B"), dim("T"), dim("C"));
}

static void call_embedding_range_bwd(const struct kctx *k)
{
	embedding_range_bwd(k, NULL, NULL, NULL, 0, 1, dim("B"), dim("T"), dim("C"));
}

static void call_position_fwd(const struct kctx *k)
{
	position_fwd(k, NULL, NULL, dim("M"), NULL, dim("C"));
}

static void call_position_bwd(const struct kctx *k)
{
	position_bwd(k, NULL, NULL, dim("M"), NULL, dim("C"));
}

static void call_softmax_fwd(const struct kctx *k)
{
	softmax_fwd(k, NULL, NULL, dim("M"), dim("N"));
}

static void call_softmax_bwd(const struct kctx *k)
{
	softmax_bwd(k, NULL, NULL, NULL, dim("M"), dim("N"));
}

static void call_dropout_add_fwd(const struct kctx *k)
{
	dropout_add_fwd(k, NULL, NULL, NULL, NULL, NULL, NULL, dim("M"), dim("C"));
}

static void call_dropout_fwd(const struct kctx *k)
{
	dropout_fwd(k, NULL, NULL, NULL, NULL, dim("M"), dim("C"));
}

static void call_dropout_bwd(const struct kctx *k)
{
	dropout_bwd(k, NULL, NULL, NULL, 0.1f, (size_t)dim("n"));
}

static const struct attn_drop attn_drop = {.p = 0.1f, .seed = 1};

/* H = VIEW_B sequences x H / VIEW_B heads from head 1, Tq queries against Tk keys, with
 * attention dropout. */
static struct attn_view view(void)
{
	struct attn_view a = {.B = VIEW_B,
			      .Tq = dim("Tq"),
			      .Tk = dim("Tk"),
			      .q0 = dim("Tk") - dim("Tq"),
			      .h0 = 1,
			      .h1 = 1 + dim("H") / VIEW_B,
			      .hs = dim("hs"),
			      .drop = &attn_drop};
	assert_int_equal(dim("H") % VIEW_B, 0);
	return a;
}

static void call_attention_fwd_view(const struct kctx *k)
{
	struct attn_view a = view();

	attention_fwd_view(k, &a);
}

static void call_attention_bwd_view(const struct kctx *k)
{
	struct attn_view a = view();

	attention_bwd_view(k, &a, NULL, NULL, NULL, NULL, NULL);
}

static void call_attention_lse_merge(const struct kctx *k)
{
	struct attn_view a = view();

	attention_lse_merge(k, &a, NULL, 0, NULL, NULL);
}

static void call_optim_sq_norm_charge(const struct kctx *k)
{
	optim_sq_norm_charge(k, (size_t)dim("n"));
}

static void call_optim_adamw_charge(const struct kctx *k)
{
	optim_adamw_charge(k, (size_t)dim("n"));
}

/* A MoE block's forward, and its backward after it if bwd (dropless: on compact rows),
 * its activations and scratch allocated as a layer's are. */
static void moe_call(const struct kctx *k, int dropless, int bwd)
{
	struct moe_shape s = moe_shape_of(dropless);
	struct moe_acts a = {0};
	struct moe_scratch sc = {0};
	struct tensor *t[] = {&sc.dy, &sc.dx, &sc.dh, &sc.dpre, &sc.dprobs, &sc.dlogits};

	assert_int_equal(moe_acts_alloc(k, &a, &s), 0);
	assert_int_equal(moe_scratch_alloc(k, &sc, &s), 0);
	moe_fwd(k, &s, &a, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
	if (bwd)
		moe_bwd(k, &s, &a, &sc, NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
			NULL, NULL);
	for (size_t i = 0; i < sizeof t / sizeof *t; i++)
		tensor_free(k, t[i]);
	moe_acts_free(&a);
}

static void call_moe_fwd(const struct kctx *k)
{
	moe_call(k, 0, 0);
}

static void call_moe_bwd(const struct kctx *k)
{
	moe_call(k, 0, 1);
}

static void call_moe_compact_fwd(const struct kctx *k)
{
	moe_call(k, 1, 0);
}

static void call_moe_compact_bwd(const struct kctx *k)
{
	moe_call(k, 1, 1);
}

static void call_ce(const struct kctx *k, enum ce_impl impl)
{
	for (enum ce_phase ph = CE_PH_MAX; ph <= CE_PH_BWD; ph++)
		crossentropy_charge(k, impl, ph, dim("M"), dim("V"));
}

static void call_ce_one(const struct kctx *k)
{
	call_ce(k, CE_ONE);
}

static void call_ce_unfused(const struct kctx *k)
{
	call_ce(k, CE_UNFUSED);
}

static void call_ce_fused(const struct kctx *k)
{
	call_ce(k, CE_NATIVE);
}

static void call_ce_te(const struct kctx *k)
{
	call_ce(k, CE_TE);
}

/* The calls as the table names them. roofline: under that cost model (else the calibrated
 * one); nested: the kernels of other rows the call charges too (the MoE blocks' router and
 * experts, a backward's forward), besides the GEMMs below. */
#define CALL(f, nested)                                                                            \
	{                                                                                          \
#f, call_##f, 0, nested                                                            \
	}
static const struct call {
	const char *name;
	void (*fn)(const struct kctx *k);
	int roofline;
	const char *nested;
} calls[] = {{"attention_fwd_view, roofline", call_attention_fwd_view, 1, "attention.dropout"},
	     {"attention_bwd_view, roofline", call_attention_bwd_view, 1, "attention.dropout.bwd"},
	     {"crossentropy_charge, one", call_ce_one, 0, ""},
	     {"crossentropy_charge, unfused", call_ce_unfused, 0, ""},
	     {"crossentropy_charge, fused", call_ce_fused, 0, ""},
	     {"crossentropy_charge, te", call_ce_te, 0, ""},
	     CALL(layernorm_fwd, ""),
	     CALL(layernorm_bwd, ""),
	     CALL(gelu_fwd, ""),
	     CALL(gelu_bwd, ""),
	     CALL(residual_fwd, ""),
	     CALL(add_acc, ""),
	     CALL(sum_charge, ""),
	     CALL(embedding_fwd, ""),
	     CALL(embedding_bwd, ""),
	     CALL(embedding_range_fwd, ""),
	     CALL(embedding_range_bwd, ""),
	     CALL(position_fwd, ""),
	     CALL(position_bwd, ""),
	     CALL(softmax_fwd, ""),
	     CALL(softmax_bwd, ""),
	     CALL(dropout_add_fwd, ""),
	     CALL(dropout_fwd, ""),
	     CALL(dropout_bwd, ""),
	     CALL(attention_fwd_view, ""),
	     CALL(attention_bwd_view, ""),
	     CALL(attention_lse_merge, ""),
	     CALL(optim_sq_norm_charge, ""),
	     CALL(optim_adamw_charge, ""),
	     CALL(moe_fwd, "softmax gelu"),
	     CALL(moe_bwd, "softmax gelu moe.route moe.combine gelu.bwd softmax.bwd"),
	     CALL(moe_compact_fwd, "softmax gelu"),
	     CALL(moe_compact_bwd,
		  "softmax gelu moe.route moe.permute moe.unpermute gelu.bwd softmax.bwd")};

/* The GEMMs the calls charge, which the docs give before the table. */
static const char *const gemms[] = {
	"linear",           "linear.bwd_input",  "linear.bwd_weight",
	"attention.scores", "attention.context", "attention.bwd.dscores",
	"attention.bwd.dv", "attention.bwd.dq",  "attention.bwd.dk"};

/* ------------------------------------------------------------------------------------ */
/* Running a call                                                                       */

#define RATE      1e6 /* the test clock's FLOP/s, then bytes a second: 1000 ns each */
#define HUGE_RATE 1e30

enum { MAX_OPS = 256 };

struct run {
	const struct call *call;
	enum prec prec;
	int gb;
	int n;
	char name[MAX_OPS][48];
	int64_t ns[MAX_OPS];
	double flops[MAX_OPS]; /* as the trace gives them */
	uint64_t bytes[MAX_OPS];
};

static int run_main(struct emu_dev *d, void *arg)
{
	struct run *r = arg;
	struct kctx k;

	kctx_init(&k, d, r->prec);
	k.gb = r->gb;
	r->call->fn(&k);
	return 0;
}

/* Runs r's call on a clock of RATE FLOP/s (bytes 0) or RATE bytes a second (bytes 1), the
 * other without bound, no fixed costs; records each kernel's time. */
static void run_call(struct run *r, int bytes)
{
	struct emu_config cfg;
	struct emu_cluster *c;
	struct topo_gpu *g;

	assert_int_equal(emu_config_default(&cfg, "dgx-a100"), 0);
	cfg.ndev = 1;
	cfg.dry_run = 1;
	cfg.trace = 1;
	cfg.cost = r->call->roofline ? EMU_COST_ROOFLINE : EMU_COST_CALIBRATED;
	g = &cfg.topo.gpu;
	g->kernel_ns = g->launch_ns = g->gemm_ns = 0;
	g->gemm_ceiling = g->mem_eff = g->efficiency = 1;
	g->peak_flops = bytes ? HUGE_RATE : RATE;
	g->hbm_bw = bytes ? RATE : HUGE_RATE;
	assert_non_null(c = emu_cluster_new(&cfg));
	assert_int_equal(emu_cluster_run(c, run_main, r), 0);
	r->n = 0;
	for (size_t i = 0; i < trace_count(c, 0); i++) {
		struct trace_op op;

		trace_op_get(c, 0, i, &op);
		if (op.stream != EMU_STREAM_COMPUTE)
			continue;
		assert_true(r->n < MAX_OPS);
		snprintf(r->name[r->n], sizeof r->name[r->n], "%s", op.name);
		r->flops[r->n] = op.flops;
		r->bytes[r->n] = op.bytes;
		r->ns[r->n++] = op.t1 - op.t0;
	}
	emu_cluster_free(c);
}

/* What the clock charges for flops and bytes at those rates (emu/clock.c's kernel_ns with
 * no fixed cost): compared exactly, so that any difference in either shows. */
static int64_t expect_ns(double flops, double bytes, double flop_rate, double byte_rate)
{
	double math = flops / flop_rate, mem = bytes / byte_rate;

	return (int64_t)ceil((math > mem ? math : mem) * 1e9);
}

/* Whether name, a word of the space-separated list. */
static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = strstr(list, name); p; p = strstr(p + 1, name))
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
			return 1;
	return 0;
}

/* Whether call may charge name: a row of its own, a nested kernel with a row, or a GEMM. */
static int allowed(const struct row *rows, int nrows, const struct call *call, const char *name)
{
	int nested = in_list(call->nested, name);

	for (int i = 0; i < nrows; i++)
		if (!strcmp(rows[i].kernel, name) && (nested || !strcmp(rows[i].call, call->name)))
			return 1;
	for (size_t i = 0; i < sizeof gemms / sizeof *gemms; i++)
		if (!strcmp(gemms[i], name))
			return 1;
	return 0;
}

/* Holds call's kernels to the rows naming it, in one precision (gb a gradient's bytes). */
static void check_call(struct row *rows, int nrows, const struct call *call, enum prec prec, int gb)
{
	static struct run f, b;
	struct kctx k = {.prec = prec, .ab = prec == PREC_FP32 ? 4 : 2, .gb = gb};

	f.call = b.call = call;
	f.prec = b.prec = prec;
	f.gb = b.gb = gb;
	run_call(&f, 0);
	run_call(&b, 1);
	assert_int_equal(f.n, b.n);
	for (int i = 0; i < f.n; i++) {
		assert_string_equal(f.name[i], b.name[i]);
		if (!allowed(rows, nrows, call, f.name[i]))
			fail_msg("%s charges '%s', which has no row of that call in %s's kernel "
				 "table",
				 call->name, f.name[i], DOC);
	}
	for (int j = 0; j < nrows; j++) {
		struct row *w = &rows[j];
		int seen = 0, want = !w->only || w->only == 8 * k.ab;
		double fl, by;

		if (strcmp(w->call, call->name))
			continue;
		fl = eval(w->flops, w->kernel, &k);
		by = eval(w->bytes, w->kernel, &k);
		for (int i = 0; i < f.n; i++) {
			if (strcmp(f.name[i], w->kernel))
				continue;
			seen++;
			if (f.ns[i] != expect_ns(fl, by, RATE, HUGE_RATE) ||
			    b.ns[i] != expect_ns(fl, by, HUGE_RATE, RATE))
				fail_msg("%s's %s (ab %d, gb %d): the table says %g FLOPs and %g "
					 "bytes, the call charges about %g and %g",
					 call->name, w->kernel, k.ab, gb, fl, by,
					 (double)f.ns[i] / 1e9 * RATE,
					 (double)b.ns[i] / 1e9 * RATE);
			if (f.flops[i] != fl || f.bytes[i] != (uint64_t)llround(by))
				fail_msg("%s's %s: the trace's args give %g FLOPs and %llu bytes, "
					 "the table %g and %g",
					 call->name, w->kernel, f.flops[i],
					 (unsigned long long)f.bytes[i], fl, by);
		}
		if (!seen != !want)
			fail_msg("%s's %s (ab %d): %d kernels charged, where the table says %s",
				 call->name, w->kernel, k.ab, seen,
				 want ? "it runs" : "it runs in the other precision only");
		w->seen += seen;
	}
}

static void test_table(void **state)
{
	static struct row rows[MAX_ROWS];
	int n = read_table(rows);

	(void)state;
	assert_true(n >= 50);
	for (int j = 0; j < n; j++) {
		size_t i = 0;

		while (i < sizeof calls / sizeof *calls && strcmp(calls[i].name, rows[j].call))
			i++;
		if (i == sizeof calls / sizeof *calls)
			fail_msg("%s's row %s names %s, which this test does not run", DOC,
				 rows[j].kernel, rows[j].call);
	}
	for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
		check_call(rows, n, &calls[i], PREC_BF16, 2);
		check_call(rows, n, &calls[i], PREC_BF16, 4); /* fp32 gradients */
		check_call(rows, n, &calls[i], PREC_FP32, 4);
	}
	for (int j = 0; j < n; j++)
		if (!rows[j].seen)
			fail_msg("%s's kernel %s: %s charged none", DOC, rows[j].kernel,
				 rows[j].call);
}

/* ------------------------------------------------------------------------------------ */
/* Every kernel named in the code is named in the docs                                  */

static char *slurp(const char *path)
{
	size_t n;
	char *text = test_slurp(path, &n);

	if (!text)
		fail_msg("cannot read %s (run from the repository's top)", path);
	return text;
}

/* The charges whose second argument may be a kernel's name as a string. */
static const char *const charges[] = {"emu_compute(", "sum_charge(", "ce_kernel("};

/* Fails on a kernel name in a charge of file path (any string in its arguments) that
 * names does not give in backticks; returns the names found. */
static int check_file(const char *path, const char *names)
{
	char *text = slurp(path);
	int found = 0;

	for (size_t c = 0; c < sizeof charges / sizeof *charges; c++)
		for (const char *p = strstr(text, charges[c]); p; p = strstr(p + 1, charges[c])) {
			const char *q = p + strlen(charges[c]), *end;

			for (; *q && *q != ';' && *q != '{'; q = end + 1) {
				char quoted[80];

				if (*q != '"') {
					end = q;
					continue;
				}
				if (!(end = strchr(q + 1, '"')) || end - q > 70)
					fail_msg("%s: a string in a charge not closed", path);
				snprintf(quoted, sizeof quoted, "`%.*s`", (int)(end - q - 1),
					 q + 1);
				found++;
				if (!strstr(names, quoted))
					fail_msg("%s charges %s, which %s's kernel table does not "
						 "name",
						 path, quoted, DOC);
			}
		}
	free(text);
	return found;
}

static int check_dir(const char *dir, const char *names)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	if (!d)
		fail_msg("cannot open %s (run from the repository's top)", dir);
	while ((e = readdir(d))) {
		char path[512];
		size_t n = strlen(e->d_name);
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (stat(path, &st))
			fail_msg("cannot stat %s", path);
		if (S_ISDIR(st.st_mode))
			found += check_dir(path, names);
		else if (n > 2 && !strcmp(e->d_name + n - 2, ".c"))
			found += check_file(path, names);
	}
	closedir(d);
	return found;
}

static void test_every_kernel_named(void **state)
{
	char *doc = slurp(DOC), *start = strstr(doc, TABLE_START), *end = strstr(doc, TABLE_END);
	int n;

	(void)state;
	assert_non_null(start);
	assert_non_null(end);
	/* the table and the paragraph after it */
	end = strstr(end + strlen(TABLE_END) + 2, "\n\n");
	assert_non_null(end);
	*end = 0;
	n = check_dir("models", start) + check_dir("src", start);
	assert_true(n >= 60); /* (69 names in charges today: the scan finds them) */
	free(doc);
}

/* The parser itself: products side by side, sums and differences, parentheses, the
 * shapes' values; and the shapes distinct, none an element's 2 or 4 bytes. */
static void test_formulas(void **state)
{
	struct kctx k = {.prec = PREC_BF16, .ab = 2, .gb = 4};
	size_t ns = sizeof shape / sizeof *shape;

	(void)state;
	assert_true(eval("(2 M C + 2 C + 2 M) ab", "t", &k) == (2.0 * 7 * 13 + 2 * 13 + 2 * 7) * 2);
	assert_true(eval("(t - 1) n", "t", &k) == 42.0 * 101);
	assert_true(eval("H Tq (4 hs + 6)", "t", &k) == 21.0 * 29 * (4 * 37 + 6));
	assert_true(eval("(28 + gb - ab) n", "t", &k) == 30.0 * 101);
	assert_true(eval("(cast ab + 4) M V", "t", &k) == 6.0 * 7 * 47);
	assert_true(eval("0", "t", &k) == 0);
	for (size_t i = 0; i < ns; i++) {
		assert_true(shape[i].v != 2 && shape[i].v != 4);
		for (size_t j = i + 1; j < ns; j++)
			assert_int_not_equal(shape[i].v, shape[j].v);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_formulas),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_every_kernel_named),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
