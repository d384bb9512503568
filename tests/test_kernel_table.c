/* docs/formulas.md's table of the memory-bound kernels against what the calls charge.
 *
 * The table (between its two HTML comments) gives each kernel's trace name, the call that
 * charges it, and its FLOPs and bytes as formulas of the shapes ("(2 M C + 2 C + 2 M) ab":
 * numbers, the shapes' names, + and -, parentheses, a product written as its factors side
 * by side). Each call runs here on one dry-run device whose clock makes a kernel's time
 * its FLOPs, then its bytes, times 1000 ns (no fixed cost, a ceiling and memory
 * efficiency of 1, the other term out of the way; the calibrated model, or the roofline
 * for the calls the table says), once in bf16 with fp32 gradients and once in fp32.
 *   - test_table: every kernel of the row's name the call records takes the row's FLOPs
 *     and bytes exactly, every row is matched, and every kernel the calls record has a
 *     row or is one of the GEMMs the docs give before the table;
 *   - test_every_kernel_named: every kernel name a charge in models/ or src/ spells out
 *     (emu_compute, sum_charge, the cross-entropy's ce_kernel) is in the docs, in
 *     backticks, so that a new kernel cannot go undocumented. */
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
#define NS_PER      1000.0 /* the test clock's ns a FLOP, then a byte */

/* The shapes every call runs on (the table's names; docs/formulas.md says what each is).
 * Distinct values, so that a formula naming the wrong one fails. */
static const struct {
	const char *name;
	int v;
} shape[] = {{"M", 7},  {"C", 12}, {"n", 100}, {"N", 5},  {"B", 2}, {"T", 3},
	     {"E", 4},  {"K", 2},  {"cap", 5}, {"El", 3}, {"H", 6}, {"Tq", 5},
	     {"Tk", 8}, {"hs", 4}, {"t", 3},   {"F", 16}, {"V", 11}};

static int dim(const char *name)
{
	for (size_t i = 0; i < sizeof shape / sizeof *shape; i++)
		if (!strcmp(shape[i].name, name))
			return shape[i].v;
	fail_msg("no shape %s", name);
	return 0;
}

/* R: the rows a dropless MoE block's held experts get in a dry-run (moe_uniform_rows). */
static struct moe_shape moe_shape_of(int dropless)
{
	struct moe_shape s = {.M = dim("M"),
			      .C = dim("C"),
			      .F = dim("F"),
			      .E = dim("E"),
			      .k = dim("K"),
			      .cap = dropless ? dim("M") : dim("cap"),
			      .aux_coeff = 0.01f,
			      .El = dim("El"),
			      .dropless = dropless};
	return s;
}

static int held_rows(void)
{
	struct moe_shape s = moe_shape_of(1);
	int R = 0;

	for (int e = 0; e < s.El; e++)
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
	if (!strcmp(name, "gp"))
		return k->ab; /* the run's precision's gradient width: its activations' */
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

enum { MAX_ROWS = 64, CELL = 96 };

struct row {
	char kernel[CELL], call[CELL], flops[CELL], bytes[CELL];
	int seen;
};

/* The text of cell i (0-based) of a "| a | b | ..." line, backticks dropped. */
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
	for (; *p && *p != '|' && n + 1 < CELL; p++)
		if (*p != '`')
			out[n++] = *p;
	while (n && out[n - 1] == ' ')
		n--;
	out[n] = 0;
}

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
			assert_true(n < MAX_ROWS);
			cell(line, 0, rows[n].kernel);
			cell(line, 1, rows[n].call);
			cell(line, 2, rows[n].flops);
			cell(line, 3, rows[n].bytes);
			rows[n++].seen = 0;
		}
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

/* H = 1 sequence x H heads, Tq queries against Tk keys, with attention dropout. */
static struct attn_view view(void)
{
	struct attn_view a = {.B = 1,
			      .Tq = dim("Tq"),
			      .Tk = dim("Tk"),
			      .q0 = dim("Tk") - dim("Tq"),
			      .h1 = dim("H"),
			      .hs = dim("hs"),
			      .drop = &attn_drop};
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

/* The calls as the table names them; roofline: under that cost model (else the calibrated
 * one). */
#define CALL(f)                                                                                    \
	{                                                                                          \
#f, call_##f, 0                                                                    \
	}
static const struct call {
	const char *name;
	void (*fn)(const struct kctx *k);
	int roofline;
} calls[] = {{"attention_fwd_view, roofline", call_attention_fwd_view, 1},
	     {"attention_bwd_view, roofline", call_attention_bwd_view, 1},
	     {"crossentropy_charge, one", call_ce_one, 0},
	     {"crossentropy_charge, unfused", call_ce_unfused, 0},
	     {"crossentropy_charge, fused", call_ce_fused, 0},
	     {"crossentropy_charge, te", call_ce_te, 0},
	     CALL(layernorm_fwd),
	     CALL(layernorm_bwd),
	     CALL(gelu_fwd),
	     CALL(gelu_bwd),
	     CALL(residual_fwd),
	     CALL(add_acc),
	     CALL(sum_charge),
	     CALL(embedding_fwd),
	     CALL(embedding_bwd),
	     CALL(embedding_range_fwd),
	     CALL(embedding_range_bwd),
	     CALL(position_fwd),
	     CALL(position_bwd),
	     CALL(softmax_fwd),
	     CALL(softmax_bwd),
	     CALL(dropout_add_fwd),
	     CALL(dropout_fwd),
	     CALL(dropout_bwd),
	     CALL(attention_fwd_view),
	     CALL(attention_bwd_view),
	     CALL(attention_lse_merge),
	     CALL(optim_sq_norm_charge),
	     CALL(optim_adamw_charge),
	     CALL(moe_fwd),
	     CALL(moe_bwd),
	     CALL(moe_compact_fwd),
	     CALL(moe_compact_bwd)};

/* The GEMMs the calls charge, which the docs give before the table. */
static const char *const gemms[] = {
	"linear",           "linear.bwd_input",  "linear.bwd_weight",
	"attention.scores", "attention.context", "attention.bwd.dscores",
	"attention.bwd.dv", "attention.bwd.dq",  "attention.bwd.dk"};

/* ------------------------------------------------------------------------------------ */
/* Running a call                                                                       */

enum { MAX_OPS = 256 };

struct run {
	const struct call *call;
	enum prec prec;
	int gb;
	int n;
	char name[MAX_OPS][48];
	double amount[MAX_OPS]; /* FLOPs or bytes */
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

/* Runs r's call, recording each kernel's FLOPs (bytes 0) or bytes (bytes 1). */
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
	g->peak_flops = bytes ? 1e30 : 1e9 / NS_PER;
	g->hbm_bw = bytes ? 1e9 / NS_PER : 1e30;
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
		r->amount[r->n++] = (double)(op.t1 - op.t0) / NS_PER;
	}
	emu_cluster_free(c);
}

static int known(const struct row *rows, int nrows, const char *name)
{
	for (int i = 0; i < nrows; i++)
		if (!strcmp(rows[i].kernel, name))
			return 1;
	for (size_t i = 0; i < sizeof gemms / sizeof *gemms; i++)
		if (!strcmp(gemms[i], name))
			return 1;
	return 0;
}

/* Holds call's kernels to the rows naming it, in one precision. */
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
	for (int i = 0; i < f.n; i++)
		if (!known(rows, nrows, f.name[i]))
			fail_msg("%s charges '%s', which has no row in %s's kernel table",
				 call->name, f.name[i], DOC);
	for (int j = 0; j < nrows; j++) {
		struct row *w = &rows[j];
		double fl, by;

		if (strcmp(w->call, call->name))
			continue;
		fl = eval(w->flops, w->kernel, &k);
		by = eval(w->bytes, w->kernel, &k);
		for (int i = 0; i < f.n; i++) {
			if (strcmp(f.name[i], w->kernel))
				continue;
			w->seen++;
			if (llround(f.amount[i]) != llround(fl) ||
			    llround(b.amount[i]) != llround(by))
				fail_msg("%s's %s (ab %d, gb %d): the table says %.0f FLOPs and "
					 "%.0f "
					 "bytes, the call charges %.0f and %.0f",
					 call->name, w->kernel, k.ab, gb, fl, by, f.amount[i],
					 b.amount[i]);
		}
	}
}

static void test_table(void **state)
{
	static struct row rows[MAX_ROWS];
	int n = read_table(rows);

	(void)state;
	assert_true(n >= 30);
	for (int j = 0; j < n; j++) {
		size_t i = 0;

		while (i < sizeof calls / sizeof *calls && strcmp(calls[i].name, rows[j].call))
			i++;
		if (i == sizeof calls / sizeof *calls)
			fail_msg("%s's row %s names %s, which this test does not run", DOC,
				 rows[j].kernel, rows[j].call);
	}
	for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
		check_call(rows, n, &calls[i], PREC_BF16, 4); /* bf16, fp32 gradients */
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
	FILE *f = fopen(path, "rb");
	char *text;
	long n;

	if (!f)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	text = malloc((size_t)n + 1);
	assert_non_null(text);
	assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
	text[n] = 0;
	fclose(f);
	return text;
}

/* The charges whose second argument may be a kernel's name as a string. */
static const char *const charges[] = {"emu_compute(", "sum_charge(", "ce_kernel("};

/* Fails on a kernel name in a charge of file path that doc does not give in backticks;
 * returns the names found. */
static int check_file(const char *path, const char *doc)
{
	char *text = slurp(path);
	int found = 0;

	for (size_t c = 0; c < sizeof charges / sizeof *charges; c++)
		for (const char *p = strstr(text, charges[c]); p; p = strstr(p + 1, charges[c])) {
			const char *q = p + strlen(charges[c]), *end;
			char quoted[80];

			while (*q && *q != '"' && *q != ';' && *q != '{')
				q++;
			if (*q != '"' || !(end = strchr(q + 1, '"')) || end - q > 70)
				continue; /* a name passed in, or a definition */
			snprintf(quoted, sizeof quoted, "`%.*s`", (int)(end - q - 1), q + 1);
			found++;
			if (!strstr(doc, quoted))
				fail_msg("%s charges %s, which %s does not name", path, quoted,
					 DOC);
		}
	free(text);
	return found;
}

static int check_dir(const char *dir, const char *doc)
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
			found += check_dir(path, doc);
		else if (n > 2 && !strcmp(e->d_name + n - 2, ".c"))
			found += check_file(path, doc);
	}
	closedir(d);
	return found;
}

static void test_every_kernel_named(void **state)
{
	char *doc = slurp(DOC);
	int n;

	(void)state;
	n = check_dir("models", doc) + check_dir("src", doc);
	assert_true(n >= 60); /* (69 names in charges today: the scan finds them) */
	free(doc);
}

/* The parser itself: products side by side, sums, parentheses, the shapes' values. */
static void test_formulas(void **state)
{
	struct kctx k = {.prec = PREC_BF16, .ab = 2, .gb = 4};

	(void)state;
	assert_true(eval("(2 M C + 2 C + 2 M) ab", "t", &k) == (2.0 * 7 * 12 + 24 + 14) * 2);
	assert_true(eval("(t - 1) n", "t", &k) == 200);
	assert_true(eval("H Tq (4 hs + 6)", "t", &k) == 6.0 * 5 * 22);
	assert_true(eval("(28 + gb - gp) n", "t", &k) == 3000);
	assert_true(eval("0", "t", &k) == 0);
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
