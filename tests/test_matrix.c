/* The 5-D verify matrix: dp x tp x pp x cp x ep, each 1 or 2, with sequence parallelism,
 * ZeRO 0 and 1, recomputation (none, selective, full), every cp comm type and both MoE
 * dispatchers, on tiny and moe-tiny, against the serial reference.
 *
 * The product has 4608 points; a dimension that a point does not use is not varied (the
 * cp comm type without cp, the dispatcher without ep, sp without tp), which leaves 1728
 * distinct configurations, of which run_check (the one checker) refuses those this build
 * does not combine (ep without MoE layers, ep over more ranks than dp x cp has, Ulysses
 * where cp does not divide a rank's heads, ...): the program prints how many for each
 * reason. Of the ones it accepts, make test runs a sample: each configuration gets a
 * fixed pseudo-random key from its name (splitmix64 of an FNV-1a hash); the smallest key
 * of every mesh (model, dp, tp, pp, cp, ep) runs, so that every accepted mesh is
 * covered, then the smallest keys of the rest up to SAMPLE in all, the same on every
 * machine (PEMU_TEST_SCALE=small, the sanitizers' runs: each mesh's only).
 * PEMU_TEST_MATRIX=all runs every accepted configuration (minutes, not make test's time); the
 * program fails if any case fails verify or a MoE case compares no routing decision.
 *
 *   PEMU_TEST_MATRIX=all build/tests/test_matrix
 *   PEMU_TEST_FILTER=cp2/ep1 build/tests/test_matrix      (within the sample, or all) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common.h"
#include "presets.h"
#include "run/run.h"
#include "verify.h"

enum { SAMPLE = 64 };

static struct data corpus;

struct point {
	char name[96];
	uint64_t key;
	int moe, dp, tp, pp, cp, ep, sp, zero;
	int first; /* the smallest key of its mesh */
	enum par_recompute recompute;
	enum par_cp_comm comm;
	enum par_ep_dispatch dispatch;
};

static uint64_t key_of(const char *s)
{
	uint64_t h = 1469598103934665603ull, z;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	z = h + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void make_cfg(struct run_cfg *cfg, const struct point *p)
{
	test_make_cfg(cfg, p->moe ? "moe-tiny" : "tiny", p->dp, p->tp, p->pp, &corpus);
	mesh_init(&cfg->mesh, p->tp, p->cp, 1, p->dp, p->pp);
	cfg->ep = p->ep;
	cfg->sp = p->sp;
	cfg->zero = p->zero;
	cfg->recompute = p->recompute;
	cfg->cp_comm = p->comm;
	cfg->ep_dispatch = p->dispatch;
	cfg->flash = p->cp > 1;
	cfg->gbs = 4 * p->dp * p->pp;
	if (p->pp > 1)
		cfg->model.num_layers = 4;
}

static int by_key(const void *a, const void *b)
{
	const struct point *x = a, *y = b;

	return x->key < y->key ? -1 : x->key > y->key;
}

/* The refusals by reason: run_check's message up to its first ':' or digit-free stem. */
struct reasons {
	char what[16][72];
	int count[16], n;
};

static void count_reason(struct reasons *r, const char *err)
{
	char stem[72];
	size_t k = 0;

	/* the message without its numbers, cut at 64 characters */
	for (const char *c = err; *c && k < 64; c++)
		if (*c < '0' || *c > '9')
			stem[k++] = *c;
	stem[k] = 0;
	for (int i = 0; i < r->n; i++)
		if (!strcmp(r->what[i], stem)) {
			r->count[i]++;
			return;
		}
	if (r->n < 16) {
		strcpy(r->what[r->n], stem);
		r->count[r->n++] = 1;
	}
}

/* Every distinct point of the product that run_check accepts, into pts (sorted by key,
 * each mesh's first marked); the counts of distinct and refused ones, and why. */
static int enumerate(struct point *pts, int *distinct, int *refused, struct reasons *why)
{
	static const char *const rc_names[] = {"none", "selective", "full"};
	static const char *const comm_names[] = {"p2p", "all_gather", "a2a"};
	static const char *const disp_names[] = {"alltoall", "allgather"};
	int n = 0;

	*distinct = *refused = 0;
	for (int moe = 0; moe < 2; moe++)
		for (int dp = 1; dp <= 2; dp++)
			for (int tp = 1; tp <= 2; tp++)
				for (int pp = 1; pp <= 2; pp++)
					for (int cp = 1; cp <= 2; cp++)
						for (int ep = 1; ep <= 2; ep++)
							for (int x = 0; x < 2 * 2 * 3 * 3 * 2;
							     x++) {
								struct point p = {.moe = moe,
										  .dp = dp,
										  .tp = tp,
										  .pp = pp,
										  .cp = cp,
										  .ep = ep};
								struct run_cfg cfg;
								char err[256];

								p.sp = x % 2;
								p.zero = x / 2 % 2;
								p.recompute = (enum par_recompute)(
									x / 4 % 3);
								p.comm = (enum par_cp_comm)(x / 12 %
											    3);
								p.dispatch = (enum par_ep_dispatch)(
									x / 36 % 2);
								if ((p.sp && tp == 1) ||
								    (p.comm && cp == 1) ||
								    (p.dispatch && ep == 1))
									continue;
								++*distinct;
								snprintf(
									p.name, sizeof p.name,
									"%s/dp%d/tp%d%s/pp%d/"
									"cp%d%s%s/"
									"ep%d%s%s/zero%d/%s",
									moe ? "moe-tiny" : "tiny",
									dp, tp, p.sp ? "/sp" : "",
									pp, cp, cp > 1 ? "-" : "",
									cp > 1 ? comm_names[p.comm]
									       : "",
									ep, ep > 1 ? "-" : "",
									ep > 1 ? disp_names
											 [p.dispatch]
									       : "",
									p.zero,
									rc_names[p.recompute]);
								make_cfg(&cfg, &p);
								if (run_check(&cfg, cfg.mesh.world,
									      err, sizeof err)) {
									++*refused;
									count_reason(why, err);
									continue;
								}
								p.key = key_of(p.name);
								pts[n++] = p;
							}
	qsort(pts, (size_t)n, sizeof *pts, by_key);
	for (int i = 0; i < n; i++) {
		int seen = 0;

		for (int j = 0; j < i && !seen; j++)
			seen = pts[j].moe == pts[i].moe && pts[j].dp == pts[i].dp &&
			       pts[j].tp == pts[i].tp && pts[j].pp == pts[i].pp &&
			       pts[j].cp == pts[i].cp && pts[j].ep == pts[i].ep;
		pts[i].first = !seen;
	}
	return n;
}

static void test_matrix(void **state)
{
	struct point *pts = calloc(4608, sizeof *pts);
	const char *all = getenv("PEMU_TEST_MATRIX"), *f = getenv("PEMU_TEST_FILTER");
	struct reasons why = {0};
	int distinct, refused, n = enumerate(pts, &distinct, &refused, &why);
	int every = all && !strcmp(all, "all"), meshes = 0, ran = 0, failed = 0, rest;

	(void)state;
	for (int i = 0; i < n; i++)
		meshes += pts[i].first;
	rest = SAMPLE > meshes && !test_skip_large() ? SAMPLE - meshes : 0;
	printf("5-D matrix: %d distinct configurations, %d refused by run_check, %d accepted "
	       "over %d meshes; running %s\n",
	       distinct, refused, n, meshes,
	       every ? "all" : "each mesh's smallest key, then the smallest of the rest");
	for (int i = 0; i < why.n; i++)
		printf("  refused %4d: %s...\n", why.count[i], why.what[i]);
	for (int i = 0; i < n; i++) {
		struct run_cfg cfg;
		struct verify_result v;
		int bad;

		if (!every && !pts[i].first && rest-- <= 0)
			continue;
		if (f && *f && !test_name_selected(pts[i].name, f))
			continue;
		make_cfg(&cfg, &pts[i]);
		v = test_verify(&cfg, NULL, 0);
		bad = !v.passed || (pts[i].moe && v.routes == 0);
		ran++;
		failed += bad;
		printf("%-4s %-62s loss %.1e grad %.1e param %.1e\n", bad ? "FAIL" : "ok",
		       pts[i].name, v.loss_err, v.grad_err, v.param_err);
	}
	printf("5-D matrix: %d ran, %d failed\n", ran, failed);
	free(pts);
	if (!ran)
		fail_msg("PEMU_TEST_FILTER selects no case of those run");
	assert_int_equal(failed, 0);
}

/* A broken strategy fails the matrix: for the first accepted point of each kind in key
 * order, a dropped ring step (a lost K, V message: the fault plan's send), the chunks in
 * the wrong order (every cp comm type), a dispatch split off by one (alltoall over
 * data-parallel ranks), and a MoE router under cp counting its own rank's choices alone
 * each fail verify, where the same point passed above. */
static void test_broken(void **state)
{
	struct point *pts = calloc(4608, sizeof *pts);
	struct reasons why = {0};
	int distinct, refused, n = enumerate(pts, &distinct, &refused, &why);
	int done[6] = {0};

	(void)state;
	for (int i = 0; i < n; i++) {
		const struct point *p = &pts[i];
		struct run_cfg cfg;
		struct verify_result v;
		int kind = p->cp > 1 && p->comm == PAR_CP_P2P && !done[0] ? 0
			   : p->cp > 1 && !done[1 + p->comm]              ? 1 + (int)p->comm
			   : p->ep > 1 && p->tp == 1 && p->dispatch == PAR_EP_ALLTOALL && !done[4]
				   ? 4
			   : p->moe && p->cp > 1 && !done[5] ? 5
							     : -1;

		if (kind < 0)
			continue;
		done[kind] = 1;
		make_cfg(&cfg, p);
		cfg.bug = kind == 0   ? PAR_BUG_NONE
			  : kind == 4 ? PAR_BUG_EP_SPLIT
			  : kind == 5 ? PAR_BUG_MOE_ROUTE
				      : PAR_BUG_CP_CHUNKS;
		v = test_verify(&cfg, kind == 0 ? "send" : NULL, 0);
		printf("%-4s %-62s %s: grad %.1e\n", v.passed ? "FAIL" : "ok", p->name,
		       kind == 0   ? "a lost ring step"
		       : kind == 4 ? "split off by one"
		       : kind == 5 ? "a rank's own capacity"
				   : "chunks swapped",
		       v.grad_err);
		assert_false(v.passed);
	}
	for (int k = 0; k < 6; k++)
		assert_true(done[k]);
	free(pts);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_matrix),
					   cmocka_unit_test(test_broken)};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
