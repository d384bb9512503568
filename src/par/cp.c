/* par/cp: context parallelism's attention, by comm type; see par/cp.h. This file holds
 * what the comm types share (par/cp_internal.h), their tables and the entry points; the
 * ring is par/cp_ring.c, all-gather and Ulysses par/cp_whole.c. Shapes per rank, for one
 * (micro-)batch of B sequences: T = s / cp rows a sequence in two chunks of ch = T / 2
 * rows, C = h / t the columns of this rank's nh = a / t heads of hs each; qkv (B, T, 3C),
 * atty (B, T, C), lse (B, nh, T) in la->att.
 *
 * Attention dropout (models/dropout.h) keys each probability by its query's and key's
 * global positions: a view's queries are rows of this rank's (m->pos), its keys rows of
 * the rank that sent them (the ring: m->pos_all of the sender, in the balanced chunk
 * order), or of the sequence in position order (all-gather, Ulysses); Ulysses's heads
 * are this rank's head group of the tp rank's. */
#include "par/cp.h"

#include "clock.h"
#include "coll.h"
#include "par/cp_internal.h"

int par_cp_position(int s, int cp, int r, int i, int contiguous)
{
	int ch = s / (2 * cp);

	if (contiguous || cp == 1) /* (without cp any s: an odd one has no halves) */
		return r * (s / cp) + i;
	return (i < ch ? r : 2 * cp - 1 - r) * ch + i % ch;
}

struct cp cp_of(struct par_model *m, const struct par_tp *c, struct par_work *w,
		const struct attn_drop *d)
{
	struct cp g = {.k = &m->k, .g = m->cpg, .n = m->cp, .r = m->cpr};

	g.contiguous = m->pc.cp_contiguous;
	g.prev = emu_group_dev(g.g, (g.r + g.n - 1) % g.n);
	g.next = emu_group_dev(g.g, (g.r + 1) % g.n);
	g.B = c->B;
	g.T = m->T;
	g.ch = m->T / 2;
	g.s = m->T * m->cp;
	g.C = m->cfg.hidden / c->t;
	g.nh = c->NHl;
	g.hs = m->cfg.hidden / m->cfg.heads;
	g.scratch = D(w->att_scratch);
	g.pos = m->pos;
	g.pos_all = m->pos_all;
	g.d = d;
	g.local = m->pc.bug == PAR_BUG_ATTN_DROPOUT_LOCAL;
	return g;
}

void cp_drop_at(struct cp *g, struct attn_view *a, int slot, int q, const int *kpos)
{
	if (g->d->p <= 0)
		return;
	g->dd[slot] = *g->d;
	g->dd[slot].qpos = g->local ? NULL : g->pos + q;
	g->dd[slot].kpos = g->local ? NULL : kpos;
	a->drop = &g->dd[slot];
}

struct attn_view cp_view(const struct cp *g, const float *qkv, float *out, const float *kv,
			 int ldkv, int kvT, int q, int nq, int kr, int nk, int q0)
{
	struct attn_view a = {.B = g->B, .Tq = nq, .Tk = nk, .q0 = q0, .h1 = g->nh, .hs = g->hs};
	size_t C = (size_t)g->C;

	a.q = cp_at((float *)qkv, (size_t)q * 3 * C);
	a.ldq = 3 * g->C;
	a.bsq = (size_t)g->T * 3 * C;
	a.k = cp_at((float *)kv, (size_t)kr * ldkv);
	a.v = cp_at((float *)kv, (size_t)kr * ldkv + C);
	a.ldk = a.ldv = ldkv;
	a.bsk = (size_t)kvT * ldkv;
	a.out = cp_at(out, (size_t)q * C);
	a.ldo = g->C;
	a.bso = (size_t)g->T * C;
	return a;
}

void cp_rows_copy(const struct kctx *k, float *dst, int ld, const float *src, int ls, size_t n,
		  int w, int add)
{
	if (!kctx_math(k))
		return;
	for (size_t i = 0; i < n; i++) {
		float *d = dst + i * (size_t)ld;
		const float *x = src + i * (size_t)ls;

		for (int j = 0; j < w; j++)
			d[j] = add ? d[j] + x[j] : x[j];
	}
}

void cp_kv_pack(const struct cp *g, float *kv, const float *qkv)
{
	size_t rows = (size_t)g->B * g->T;

	sum_charge(g->k, "cp.kv pack", 1, (double)(rows * 2 * g->C));
	cp_rows_copy(g->k, kv, 2 * g->C, cp_at((float *)qkv, (size_t)g->C), 3 * g->C, rows,
		     2 * g->C, 0);
}

/* ------------------------------------------------------------------------------------ */

typedef int (*attn_fn)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       struct gpt_layer_acts *la, const struct attn_drop *d);

/* f, its collectives tagged as context parallelism's (the report's by-strategy bytes). */
static int tagged(attn_fn f, struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, const struct attn_drop *d)
{
	int old = coll_set_tag(m->k.d, PAR_TRAFFIC_CP), rc = f(m, c, w, la, d);

	coll_set_tag(m->k.d, old);
	return rc;
}

#define TAGGED(f)                                                                                  \
	static int f##_tagged(struct par_model *m, const struct par_tp *c, struct par_work *w,     \
			      struct gpt_layer_acts *la, const struct attn_drop *d)                \
	{                                                                                          \
		return tagged(f, m, c, w, la, d);                                                  \
	}
TAGGED(cp_ring_fwd)
TAGGED(cp_ring_bwd)
TAGGED(cp_gather_fwd)
TAGGED(cp_gather_bwd)
TAGGED(cp_ulysses_fwd)
TAGGED(cp_ulysses_bwd)
#undef TAGGED

static const struct par_attn ring = {"ring attention (cp p2p)", cp_ring_fwd_tagged,
				     cp_ring_bwd_tagged, NULL};
static const struct par_attn gather = {"all-gather attention (cp all_gather)", cp_gather_fwd_tagged,
				       cp_gather_bwd_tagged, NULL};
static const struct par_attn ulysses = {"Ulysses attention (cp a2a)", cp_ulysses_fwd_tagged,
					cp_ulysses_bwd_tagged, NULL};

const struct par_attn *par_cp_attn(const struct par_model *m)
{
	switch (m->pc.cp_comm) {
	case PAR_CP_ALL_GATHER:
		return &gather;
	case PAR_CP_A2A:
		return &ulysses;
	default:
		return &ring;
	}
}

int par_cp_keys(const struct par_model *m)
{
	return m->pc.cp_comm == PAR_CP_P2P ? m->T : m->T * m->cp;
}

int par_cp_alloc_work(struct par_model *m, struct par_work *w)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, C = (size_t)m->cfg.hidden / (size_t)m->tp;
	size_t n = (size_t)m->cp;
	int rc = 0;

#define A(t, cnt, name)                                                                            \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc(k, (t), MEM_WORK, (cnt), (name));                        \
	} while (0)
	switch (m->pc.cp_comm) {
	case PAR_CP_P2P:
		A(&w->kv[0], bt * 2 * C, "cp kv in hand");
		A(&w->kv[1], bt * 2 * C, "cp kv arriving");
		A(&w->dkv[0], bt * 2 * C, "cp dkv partial");
		A(&w->dkv[1], bt * 2 * C, "cp dkv partial, the other");
		A(&w->dkv[2], bt * 2 * C, "cp dkv partial arriving");
		A(&w->bout, bt * C, "cp block out");
		A(&w->blse, bt * (size_t)m->NHl, "cp block lse");
		break;
	case PAR_CP_ALL_GATHER:
		A(&w->kv[0], bt * 2 * C, "cp kv");
		A(&w->kv[1], n * bt * 2 * C, "cp kv gathered");
		A(&w->dkv[0], n * bt * 2 * C, "cp kv by position");
		A(&w->dkv[1], n * bt * 2 * C, "cp dkv by position");
		break;
	case PAR_CP_A2A:
		A(&w->kv[0], bt * 3 * C, "cp a2a send");
		A(&w->kv[1], bt * 3 * C, "cp a2a recv");
		A(&w->dkv[0], bt * 3 * C, "cp d qkv by heads");
		A(&w->dkv[1], bt * 2 * C, "cp out, d out by heads");
		break;
	}
#undef A
	return rc;
}
