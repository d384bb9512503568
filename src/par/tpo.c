/* par/tpo: Transformer Engine's tensor-parallel communication overlap (--tp-comm-overlap);
 * see par/tpo.h. */
#include "par/tpo.h"

#include <stdlib.h>

#include "clock.h"
#include "coll.h"
#include "linear.h"

const char *const par_tpo_names[PAR_TPO_NGEMMS] = {
	"qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad", "proj_fprop",
	"fc2_fprop", "qkv_dgrad", "fc1_dgrad",  "qkv_wgrad", "fc1_wgrad"};
const char *const par_tpo_methods[3] = {"ring_exchange", "pipeline", "bulk"};

void par_tpo_defaults(struct par_tpo_cfg *c)
{
	for (int g = 0; g < PAR_TPO_NGEMMS; g++) {
		enum par_tpo_method k = g <= PAR_TPO_FC2_DGRAD   ? PAR_TPO_RING
					: g <= PAR_TPO_FC2_FPROP ? PAR_TPO_PIPELINE
								 : PAR_TPO_BULK;

		c->g[g] = (struct par_tpo_ub){k, k == PAR_TPO_RING ? 1 : TPO_SMS, TPO_SPLITS,
					      k != PAR_TPO_RING};
	}
}

/* The margin g's GEMMs leave (set_sm_margin), and the SMs its collectives take: set on
 * m's device; restore with tpo_unset. */
struct sms {
	int margin, ctas;
};

static struct sms tpo_set(struct par_model *m, const struct par_tpo_ub *u)
{
	struct emu_dev *d = m->k.d;

	return (struct sms){emu_set_sm_margin(d, u->set_sm_margin ? u->num_sm : 0),
			    coll_set_ctas(d, u->num_sm)};
}

static void tpo_unset(struct par_model *m, struct sms was)
{
	emu_set_sm_margin(m->k.d, was.margin);
	coll_set_ctas(m->k.d, was.ctas);
}

/* Waits req[0..n) (the NULL ones are no call), the first error kept. */
static int wait_all(struct emu_dev *d, struct coll_req **req, int n, int rc)
{
	for (int k = 0; k < n; k++) {
		int rc2 = coll_wait(d, req[k]);

		rc = rc ? rc : rc2;
		req[k] = NULL;
	}
	return rc;
}

int par_tpo_ag(struct par_model *m, const struct par_tp *c, enum par_tpo_gemm g, int dgrad,
	       const float *rows, float *whole, size_t C, float *out, const float *W,
	       const float *b, int N)
{
	struct emu_dev *d = m->k.d;
	int t = c->t, next = emu_group_dev(c->g, (c->r + 1) % t);
	int prev = emu_group_dev(c->g, (c->r + t - 1) % t), rc = 0;
	int ce = coll_use_copy_engines(d, 1);
	struct sms was = tpo_set(m, &m->pc.tpo_cfg.g[g]);
	size_t n = (size_t)c->Ml * C;

	if (whole && rows != par_rows_at(whole, (size_t)c->row0, C))
		memcpy(par_rows_at(whole, (size_t)c->row0, C), rows, n * sizeof *rows);
	for (int i = 0; i < t && !rc; i++) {
		int j = (c->r - i + t) % t, up = (j + t - 1) % t; /* in hand, coming next */
		const float *x = par_rows_at(whole, (size_t)j * c->Ml, C);
		float *y = par_rows_at(out, (size_t)j * c->Ml, (size_t)N);
		struct coll_req *rq[2] = {NULL, NULL};

		if (i < t - 1 && !(rc = coll_isend(d, next, x, n, &rq[0])))
			rc = coll_irecv(d, prev, par_rows_at(whole, (size_t)up * c->Ml, C), n,
					&rq[1]);
		if (!rc && dgrad)
			linear_bwd_input(&m->k, y, x, W, c->Ml, N, (int)C);
		else if (!rc)
			linear_fwd(&m->k, y, x, W, b, 1, c->Ml, (int)C, N);
		rc = wait_all(d, rq, 2, rc); /* (what was posted, also after a failure) */
	}
	tpo_unset(m, was);
	coll_use_copy_engines(d, ce);
	return rc;
}

/* Chunk s's first column of C cut in ns. */
static size_t split_at(size_t C, int ns, int s)
{
	return C * (size_t)s / (size_t)ns;
}

static int rs_pipeline(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       const struct par_tpo_ub *u, const float *in, const float *W, const float *b,
		       int K, size_t C, float *partial, float *local)
{
	struct emu_dev *d = m->k.d;
	int ns = C < (size_t)u->num_splits ? (int)C : u->num_splits, BT = c->B * m->T, rc = 0;
	size_t Ml = (size_t)c->Ml;
	struct coll_req **rq = emu_xcalloc((size_t)ns, sizeof *rq);
	float *rs = D(w->tpo_rs);
	struct sms was = tpo_set(m, u);

	for (int s = 0; s < ns && !rc; s++) {
		size_t c0 = split_at(C, ns, s), nc = split_at(C, ns, s + 1) - c0;

		linear_fwd(&m->k, partial ? partial + (size_t)BT * c0 : NULL, in,
			   W ? W + c0 * (size_t)K : NULL, b ? b + c0 : NULL, 1, BT, K, (int)nc);
		rc = coll_ireduce_scatter(d, c->g, partial ? partial + (size_t)BT * c0 : NULL,
					  rs ? rs + Ml * c0 : NULL, Ml * nc, COLL_SUM, &rq[s]);
	}
	tpo_unset(m, was); /* (what was posted keeps its margin and SMs; no GEMM follows) */
	rc = wait_all(d, rq, ns, rc);
	free(rq);
	for (int s = 0; !rc && rs && local && s < ns; s++) { /* chunk s's columns into local */
		size_t c0 = split_at(C, ns, s), nc = split_at(C, ns, s + 1) - c0;

		for (size_t i = 0; i < Ml; i++)
			memcpy(local + i * C + c0, rs + Ml * c0 + i * nc, nc * sizeof *rs);
	}
	return rc;
}

/* TE's split_overlap_rs of CommOverlapP2P: step i computes the rows of rank r + i + 1
 * (its own last), from step 1 on sending step i - 1's to their owner (r + i) and
 * receiving from rank r - i its share of this rank's rows; then the sum, each source
 * in the order the reduce-scatter takes them (r + 1, ..., r: emu/coll_data.c). */
static int rs_ring(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   const struct par_tpo_ub *u, const float *in, const float *W, const float *b,
		   int K, size_t C, float *partial, float *local)
{
	struct emu_dev *d = m->k.d;
	int t = c->t, r = c->r, rc = 0, ce = coll_use_copy_engines(d, 1);
	size_t Ml = (size_t)c->Ml, n = Ml * C;
	struct coll_req **rq = emu_xcalloc(2 * (size_t)t, sizeof *rq);
	float *got = D(w->tpo_rs); /* (t - 1) blocks of (Ml, C): block q - 1 from rank r - q */
	struct sms was = tpo_set(m, u);

	for (int i = 0; i < t && !rc; i++) {
		int dst = (r + i + 1) % t;

		if (i > 0 && !(rc = coll_isend(d, emu_group_dev(c->g, (r + i) % t),
					       par_rows_at(partial, (size_t)(i - 1) * Ml, C), n,
					       &rq[2 * i])))
			rc = coll_irecv(d, emu_group_dev(c->g, (r - i + t) % t),
					par_rows_at(got, (size_t)(i - 1) * Ml, C), n,
					&rq[2 * i + 1]);
		if (!rc)
			linear_fwd(&m->k, par_rows_at(partial, (size_t)i * Ml, C),
				   in ? in + (size_t)dst * Ml * (size_t)K : NULL, W, b, 1, (int)Ml,
				   K, (int)C);
	}
	rc = wait_all(d, rq, 2 * t, rc);
	tpo_unset(m, was);
	coll_use_copy_engines(d, ce);
	free(rq);
	if (rc)
		return rc;
	/* the sum: t - 1 adds of (Ml, C), reading t blocks and writing one */
	sum_charge(&m->k, "reduce", t, (double)n);
	for (int k = 0; local && got && k < t; k++) {
		int q = (r + 1 + k) % t, back = (r - q + t) % t; /* source q, sent at step back */
		const float *x =
			back ? got + (size_t)(back - 1) * n : partial + (size_t)(t - 1) * n;

		for (size_t e = 0; e < n; e++)
			local[e] = k ? local[e] + x[e] : x[e];
	}
	return 0;
}

int par_tpo_rs(struct par_model *m, const struct par_tp *c, struct par_work *w, enum par_tpo_gemm g,
	       const float *in, const float *W, const float *b, int K, size_t C, float *partial,
	       float *local, const float **out)
{
	const struct par_tpo_ub *u = &m->pc.tpo_cfg.g[g];

	*out = local;
	return u->method == PAR_TPO_RING ? rs_ring(m, c, w, u, in, W, b, K, C, partial, local)
					 : rs_pipeline(m, c, w, u, in, W, b, K, C, partial, local);
}

void par_tpo_rows(struct par_work *w)
{
	w->g = D(w->gfull);
}

void par_tpo_bulk(struct par_model *m, int g)
{
	if (g < 0 || !m->pc.tpo) {
		emu_set_sm_margin(m->k.d, 0);
		coll_set_ctas(m->k.d, 0);
		return;
	}
	tpo_set(m, &m->pc.tpo_cfg.g[g]);
}

int par_tpo_rs_ring(const struct par_model *m)
{
	return m->pc.tpo && (m->pc.tpo_cfg.g[PAR_TPO_PROJ_FPROP].method == PAR_TPO_RING ||
			     m->pc.tpo_cfg.g[PAR_TPO_FC2_FPROP].method == PAR_TPO_RING);
}
