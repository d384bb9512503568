/* kernel_check: the harness the kernel tests share (test_kernels.c, test_attention.c): a
 * kernel run on one virtual A100, seeded inputs, and the checks against ref.h's
 * double-precision reference. It holds no reference of its own; ref.h does.
 *
 * Thresholds (norm-wise relative error, docs/formulas.md, Verification), stated per check:
 *   forward 1e-5: float32 against double, a few roundings per element;
 *   gradient 1e-4: float32 backward against a double central difference with step 1e-6
 *   (truncation error ~1e-12, so the float rounding of the analytic side dominates). */
#ifndef TESTS_KERNEL_CHECK_H
#define TESTS_KERNEL_CHECK_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common.h"
#include "ops.h"
#include "ref.h"

#define TOL_FWD  1e-5
#define TOL_GRAD 1e-4

typedef void (*dev_kernel_fn)(const struct kctx *k, void *ctx);

struct on_dev {
	dev_kernel_fn fn;
	void *ctx;
};

static inline int on_dev_main(struct emu_dev *d, void *arg)
{
	struct on_dev *o = arg;
	struct kctx k;

	kctx_init(&k, d, PREC_FP32);
	o->fn(&k, o->ctx);
	return 0;
}

/* Runs fn on one virtual A100 (kernels charge its clock). */
static inline void run_on_device(dev_kernel_fn fn, void *ctx)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 1, 0, 0);
	struct on_dev o = {fn, ctx};

	assert_int_equal(emu_cluster_run(c, on_dev_main, &o), 0);
	emu_cluster_free(c);
}

static inline float *rnd(size_t n, uint64_t seed, float scale)
{
	float *x = malloc(n * sizeof *x);

	for (size_t i = 0; i < n; i++)
		x[i] = scale * test_uniform(seed, i);
	return x;
}

static inline double *to_double(const float *x, size_t n)
{
	double *y = malloc(n * sizeof *y);

	for (size_t i = 0; i < n; i++)
		y[i] = x[i];
	return y;
}

static inline double dot(const double *a, const float *r, size_t n)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += a[i] * r[i];
	return s;
}

typedef double (*loss_fn)(void *ctx);

/* Compares grad (n, float, analytic) with central differences of loss over x (double, in
 * place), at up to 48 indices spread over x. */
static inline void fd_check(const char *what, loss_fn loss, void *ctx, double *x, size_t n,
			    const float *grad, double tol)
{
	enum { MAXS = 48 };
	size_t cnt = n < MAXS ? n : MAXS;
	float an[MAXS];
	double fd[MAXS], err;

	for (size_t s = 0; s < cnt; s++) {
		size_t i = s * n / cnt;
		double save = x[i], h = 1e-6 * (fabs(save) > 1 ? fabs(save) : 1), lp, lm;

		x[i] = save + h;
		lp = loss(ctx);
		x[i] = save - h;
		lm = loss(ctx);
		x[i] = save;
		fd[s] = (lp - lm) / (2 * h);
		an[s] = grad[i];
	}
	err = ref_rel_err(an, fd, cnt);
	if (err > tol)
		fail_msg("%s: gradient relative error %.3g > %.1g", what, err, tol);
}

static inline void fwd_check(const char *what, const float *out, const double *ref, size_t n,
			     double tol)
{
	double err = ref_rel_err(out, ref, n);

	if (err > tol)
		fail_msg("%s: forward relative error %.3g > %.1g", what, err, tol);
}

#endif
