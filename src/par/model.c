/* par/model: a rank's parameters, activations and scratch; see par/model.h. */
#include "par/model.h"

#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "coll.h"
#include "par/cp.h"
#include "par/ep.h"
#include "par/internal.h"
#include "par/recompute.h"
#include "par/tp.h"
#include "par/tpo.h"
#include "util.h"

int par_unit_of(const struct par_model *m, int i)
{
	if (i < 2)
		return PAR_UNIT_EMB(m);
	if (i >= m->np - 2)
		return PAR_UNIT_LNF(m);
	return (i - 2) / LP_N;
}

/* The parameters in the order backward finishes them, each cut by tensor parallelism
 * (par_tp_describe), placed in the flat buffers and initialised from the serial
 * model's. */
/* The least common multiple of a and b (> 0). */
static size_t lcm(size_t a, size_t b)
{
	size_t x = a, y = b;

	while (y) {
		size_t t = x % y;

		x = y;
		y = t;
	}
	return a / x * b;
}

static int alloc_params(struct par_model *m, const struct par_source *src, size_t dpn, size_t edpn,
			int zero)
{
	const struct gpt_config *c = &m->cfg;
	size_t total = 0, owned = 0, pad = lcm(dpn, edpn);
	int k = 0, rc;

	m->np = gpt_num_tensors(c);
	m->p = emu_xcalloc((size_t)m->np, sizeof *m->p);
	m->order = emu_xcalloc((size_t)m->np, sizeof *m->order);
	/* backward finishes lnf, then the layers last to first, then wpe and wte */
	m->order[k++] = m->np - 2;
	m->order[k++] = m->np - 1;
	for (int l = c->num_layers - 1; l >= 0; l--)
		for (int w = 0; w < LP_N; w++)
			m->order[k++] = 2 + l * LP_N + w;
	m->order[k++] = 1;
	m->order[k++] = 0;
	for (int i = 0; i < m->np; i++) {
		par_tp_describe(m, i, &m->p[i]);
		m->partials |= m->p[i].partial != PAR_PARTIAL_NONE;
	}
	/* Every parameter starts at a multiple of pad (of the dp x cp degree dpn and of the
	 * experts' edpn), so that buckets made of whole parameters split evenly into the
	 * shards of their group; a sharded buffer keeps 1 / dpn of each parameter, and
	 * 1 / edpn of an expert's */
	for (int k2 = 0; k2 < m->np; k2++) {
		const struct par_param *p = &m->p[m->order[k2]];
		size_t next = (total + p->n + pad - 1) / pad * pad;

		m->p[m->order[k2]].off = total;
		owned += (next - total) / (p->expert ? edpn : dpn);
		total = next;
	}
	m->nflat = total;
	if ((rc = tensor_alloc_shard(&m->k, &m->weights, MEM_PARAM, m->nflat,
				     zero >= 3 ? owned : m->nflat, "weights")) ||
	    (rc = tensor_alloc_shard(&m->k, &m->grads, MEM_GRAD, m->nflat,
				     zero >= 2 ? owned : m->nflat, "gradients")))
		return rc;
	for (int i = 0; i < m->np; i++) {
		struct par_param *p = &m->p[i];

		if (!m->weights.data)
			continue;
		p->w = m->weights.data + p->off;
		p->g = m->grads.data + p->off;
		if (p->n && src->full) {
			par_tp_shard_copy(m, i, src->full[i], p->w, 0);
		} else if (p->n) {
			float *full = emu_xmalloc(gpt_tensor_numel(c, i) * sizeof *full);

			gpt_tensor_init(c, src->seed, i, full);
			par_tp_shard_copy(m, i, full, p->w, 0);
			free(full);
		}
	}
	return 0;
}

/* The scratch of the micro-batch in flight (par_work's shapes). */
static int alloc_work(struct par_model *m, struct par_work *w)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, h = (size_t)m->cfg.hidden, f = (size_t)m->Fl;
	size_t v = (size_t)m->Vl, ml = (size_t)m->Ml;
	int rc = 0;

#define A(t, n, name)                                                                              \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc(k, (t), MEM_WORK, (n), (name));                          \
	} while (0)
	A(&w->dres, ml * h, "d residual");
	if (m->cfg.hidden_dropout > 0)
		A(&w->ddrop, ml * h, "d branch (dropout)");
	if (m->sp) {
		A(&w->tmpl, ml * h, "branch out rows");
		A(&w->dlocal, ml * h, "d layernorm rows");
		A(&w->gfull, bt * h, "d residual gathered");
		if (m->ln_rows)
			A(&w->lnw, bt * h, "layernorm gathered");
		if (m->pc.tpo) /* (a ring exchange's: the other ranks' sums of this one's rows) */
			A(&w->tpo_rs, par_tpo_rs_ring(m) ? bt * h - ml * h : ml * h,
			  "reduce-scatter chunks");
	}
	A(&w->dln, bt * h, "d layernorm");
	A(&w->tmp, bt * h, "branch out");
	A(&w->dqkv, 3 * bt * h / (size_t)m->tp, "d qkv");
	A(&w->datty, bt * h / (size_t)m->tp, "d attention out");
	if (m->pc.mlp_chunks > 1) { /* the MLP runs chunk by chunk of rows, of any cut */
		size_t n = 0;

		for (int x = 0; x < (m->pc.tpf_layers ? PAR_NTPV : 1); x++) {
			const struct par_tp *c = &m->tpv[x];
			size_t rows = ((size_t)c->B * m->T + (size_t)m->pc.mlp_chunks - 1) /
				      (size_t)m->pc.mlp_chunks;

			n = rows * (size_t)c->Fl > n ? rows * (size_t)c->Fl : n;
		}
		A(&w->fch_c, n, "fc chunk");
		A(&w->fchg_c, n, "fc.gelu chunk");
		A(&w->dfch, n, "d fc chunk");
		A(&w->dfch_gelu, n, "d fc.gelu chunk");
	} else {
		A(&w->dfch, bt * f, "d fc");
		A(&w->dfch_gelu, bt * f, "d fc.gelu");
	}
	if (m->part.last)
		A(&w->dlogits, bt * v, "d logits");
	A(&w->att_scratch,
	  m->pc.flash ? 2 * (size_t)FLASH_ROWS * (size_t)(m->cp > 1 ? par_cp_keys(m) : m->T)
		      : (size_t)m->T * m->T,
	  "attention scratch");
	/* (fp32 floats, whatever the activations' precision: Megatron's and TE's are) */
#define A32(t, n, name)                                                                            \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc_bytes(k, (t), MEM_WORK, (n)*4, (name));                  \
	} while (0)
	if (m->tp > 1 && m->part.last && m->pc.ce != CE_TE) {
		A32(&w->ce_max, bt, "cross-entropy max");
		A32(&w->ce_sums, 2 * bt, "cross-entropy sums");
	} else if (m->tp > 1 && m->part.last) {
		A32(&w->ce_sums, 3 * bt * (size_t)(m->tp + 1), "cross-entropy rows");
	}
#undef A32
	if (m->cfg.num_experts > 0)
		A(&w->drouter, (size_t)m->cfg.num_experts * h, "d router");
	if (m->cfg.num_experts > 0 && m->route_n > 1)
		A(&w->route_cnt, par_moe_route_floats(m), "moe routing counts");
	if (!rc && m->cfg.num_experts > 0)
		rc = moe_scratch_alloc(k, &w->moe_scratch, &m->moe);
	if (!rc && m->cp > 1)
		rc = par_cp_alloc_work(m, w);
	if (!rc && m->ep > 1)
		rc = par_ep_alloc_work(m, w);
#undef A
	return rc;
}

unsigned par_acts_flags(const struct par_model *m)
{
	return (m->pc.flash ? GPT_ACTS_FLASH : 0u) | (m->pc.mlp_chunks > 1 ? GPT_ACTS_NO_MLP : 0u) |
	       (m->cfg.hidden_dropout > 0 ? GPT_ACTS_DROPOUT : 0u) |
	       (m->cfg.attention_dropout > 0 ? GPT_ACTS_ATTN_DROPOUT : 0u) |
	       (m->ln_rows ? GPT_ACTS_LN_ROWS : 0u);
}

int par_acts_embed_mask(struct par_model *m, struct par_acts *a)
{
	if (m->cfg.hidden_dropout <= 0 || a->mask_enc.mb)
		return 0;
	return tensor_alloc_bytes(&m->k, &a->mask_enc, MEM_ACT, (size_t)m->Ml * m->cfg.hidden,
				  "dropout mask embeddings");
}

void par_acts_begin(struct par_model *m, struct par_acts *a, uint64_t g)
{
	a->seq0 = (m->pc.batch0 + g) * (uint64_t)m->pc.mbs;
	for (int s = 0; s < a->nsub; s++)
		a->sub[s].seq0 = a->seq0 + (uint64_t)s * (uint64_t)m->B;
}

int par_acts_alloc_empty(struct par_model *m, struct par_acts *a, int l0, int l1)
{
	size_t bt = (size_t)m->B * m->T, nl = l1 > l0 ? (size_t)(l1 - l0) : 1;

	memset(a, 0, sizeof *a);
	a->l0 = l0;
	a->l1 = l1;
	a->cut = -1;
	a->la = emu_xcalloc(nl, sizeof *a->la);
	a->stash = emu_xcalloc(nl, sizeof *a->stash);
	if (kctx_math(&m->k)) { /* (a dry-run reads no token) */
		a->tokens = emu_xcalloc(bt, sizeof *a->tokens);
		a->targets = emu_xcalloc(bt, sizeof *a->targets);
		a->ltargets = emu_xcalloc(bt, sizeof *a->ltargets);
	}
	return 0;
}

int par_acts_layer(struct par_model *m, struct par_acts *a, int l, unsigned parts)
{
	const struct par_tp *c = m->plan[l].tp;

	return gpt_layer_acts_alloc(&m->k, par_la(a, l), c->B, m->T, c->Ml, m->cfg.hidden,
				    m->cfg.hidden / c->t, c->NHl, c->Fl,
				    gpt_layer_is_moe(&m->cfg, l) ? &c->moe : NULL, parts);
}

int par_acts_head(struct par_model *m, struct par_acts *a)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, h = (size_t)m->cfg.hidden, ml = (size_t)m->Ml;
	int rc;

	if ((rc = tensor_alloc(k, &a->lnf, MEM_ACT, (m->ln_rows ? ml : bt) * h, "lnf")) ||
	    (rc = tensor_alloc(k, &a->lnf_mean, MEM_ACT, ml, "lnf.mean")) ||
	    (rc = tensor_alloc(k, &a->lnf_rstd, MEM_ACT, ml, "lnf.rstd")) ||
	    /* Megatron's cross-entropy keeps its probabilities in fp32 for backward */
	    (rc = m->pc.ce == CE_ONE
			  ? tensor_alloc(k, &a->probs, MEM_ACT, bt * (size_t)m->Vl, "logits")
			  : tensor_alloc_bytes(k, &a->probs, MEM_ACT, bt * (size_t)m->Vl * 4,
					       "logits (fp32)")))
		return rc;
	return tensor_alloc(k, &a->losses, MEM_ACT, bt, "losses");
}

void par_acts_drop(struct par_model *m, struct par_acts *a, int l, unsigned what)
{
	const struct kctx *k = &m->k;
	struct gpt_layer_acts *la = par_la(a, l);

	if (what & PAR_DROP_POST) {
		struct tensor *t[] = {&la->res2,  &la->ln2,      &la->ln2_mean, &la->ln2_rstd,
				      &la->fch,   &la->fch_gelu, &la->res3,     &la->moe.probs,
				      &la->moe.x, &la->moe.pre,  &la->moe.h,    &la->moe.y,
				      &la->mask2, &la->mask3};

		for (size_t i = 0; i < sizeof t / sizeof *t; i++)
			tensor_free(k, t[i]);
	}
	if (what & PAR_DROP_PRE) {
		tensor_free(k, &la->ln1);
		tensor_free(k, &la->ln1_mean);
		tensor_free(k, &la->ln1_rstd);
		tensor_free(k, &la->qkv);
	}
}

/* Mixed degrees without sequence parallelism: where layer l0 finds its part of the
 * batch in enc, and the first layer after the first ones, whose input the parts gathered
 * (par/tp.h). Under sequence parallelism a rank's rows are the same either way. */
static int acts_cut(struct par_model *m, struct par_acts *a)
{
	const struct par_tp *f = &m->tpv[PAR_TPV_FIRST];
	int K = m->pc.tpf_layers;

	if (!K || f->parts == 1 || f->sp)
		return 0;
	if (a->l0 < K)
		a->enc_off = (size_t)f->part * (size_t)f->Ml * (size_t)m->cfg.hidden;
	if (a->l0 >= K || K > a->l1)
		return 0;
	a->cut = K;
	return tensor_alloc(&m->k, &a->cutbuf, MEM_ACT, (size_t)m->Ml * m->cfg.hidden,
			    "the parts gathered");
}

/* One (sub-)batch's activations. */
static int acts_alloc(struct par_model *m, struct par_acts *a, int l0, int l1)
{
	int rc = par_acts_alloc_empty(m, a, l0, l1);

	if (!rc)
		rc = tensor_alloc(&m->k, &a->enc, MEM_ACT, (size_t)m->Ml * m->cfg.hidden,
				  l0 ? "stage input" : "embeddings");
	if (!rc && l0 == 0)
		rc = par_acts_embed_mask(m, a);
	if (!rc)
		rc = acts_cut(m, a);
	for (int l = l0; l < l1 && !rc; l++) {
		rc = par_acts_layer(m, a, l, GPT_ACTS_ALL | par_acts_flags(m));
		par_recompute_drop(m, a, l); /* one layer's worth at a time */
	}
	if (!rc && l1 == m->cfg.num_layers)
		rc = par_acts_head(m, a);
	return rc;
}

int par_acts_alloc(struct par_model *m, struct par_acts *a, int l0, int l1)
{
	int rc = 0;

	if (m->nsub == 1)
		return acts_alloc(m, a, l0, l1);
	memset(a, 0, sizeof *a); /* Oases: a par_acts per sub-batch */
	a->l0 = l0;
	a->l1 = l1;
	a->nsub = m->nsub;
	a->sub = emu_xcalloc((size_t)m->nsub, sizeof *a->sub);
	for (int s = 0; s < m->nsub && !rc; s++)
		rc = acts_alloc(m, &a->sub[s], l0, l1);
	return rc;
}

void par_acts_free(struct par_model *m, struct par_acts *a)
{
	const struct kctx *k = &m->k;
	struct tensor *t[] = {&a->enc,    &a->lnf,    &a->lnf_mean, &a->lnf_rstd,
			      &a->probs,  &a->losses, &a->dout,     &a->din2,
			      &a->gout_a, &a->gout_x, &a->cutbuf,   &a->mask_enc};

	for (int s = 0; s < a->nsub; s++)
		par_acts_free(m, &a->sub[s]);
	free(a->sub);
	for (size_t i = 0; i < sizeof t / sizeof *t; i++)
		tensor_free(k, t[i]);
	for (int l = a->l0; a->la && l < a->l1; l++) {
		gpt_layer_acts_free(k, par_la(a, l));
		par_stash_free(m, par_stash_at(a, l));
	}
	free(a->la);
	free(a->stash);
	free(a->tokens);
	free(a->targets);
	free(a->ltargets);
	memset(a, 0, sizeof *a);
}

/* Each layer's plan: its attention, its MLP and its region, from the configuration; and
 * the region of the model's ends. */
static void make_plans(struct par_model *m)
{
	const struct par_mlp *dense = m->pc.mlp_chunks > 1 ? &par_mlp_chunked : &par_mlp_dense;

	m->ends = m->sp ? &par_region_sp : &par_region_tp;
	m->plan = emu_xcalloc((size_t)m->cfg.num_layers + 1, sizeof *m->plan);
	for (int l = 0; l < m->cfg.num_layers; l++) {
		const struct par_tp *c =
			&m->tpv[l < m->pc.tpf_layers ? PAR_TPV_FIRST : PAR_TPV_MODEL];

		m->plan[l] = (struct par_plan){
			m->cp > 1     ? par_cp_attn(m)
			: m->pc.flash ? &par_attn_flash
				      : &par_attn_heads,
			!gpt_layer_is_moe(&m->cfg, l) ? dense
			: m->ep > 1                   ? par_ep_mlp(m)
						      : &par_mlp_moe,
			c->sp ? &par_region_sp : &par_region_tp,
			c,
			NULL,
			0,
			0,
		};
		m->plan[l].mlp_region = gpt_layer_is_moe(&m->cfg, l) && m->ep_rows && m->tp > 1
						? &par_region_rows
						: m->plan[l].region;
		m->plan[l].tpo = m->pc.tpo && c->sp;
		m->plan[l].tpo_mlp = m->plan[l].tpo && m->plan[l].mlp == &par_mlp_dense;
	}
}

/* A tensor-parallel cut: t ways over g (this rank r in it), part `part` of parts of the
 * batch of B sequences. */
static void tp_view(const struct par_model *m, struct par_tp *c, int t, int r, struct emu_group *g,
		    int parts, int part, int B)
{
	const struct gpt_config *cfg = &m->cfg;

	*c = (struct par_tp){.t = t, .r = r, .g = g, .parts = parts, .part = part};
	c->B = B / parts;
	c->sp = m->pc.sp && m->pc.tp > 1;
	c->Ml = c->sp ? c->B * m->T / t : c->B * m->T;
	c->row0 = c->sp ? r * c->Ml : 0;
	c->NHl = cfg->heads / t;
	c->Fl = cfg->ffn / t;
	/* the experts: each cut t ways like the dense MLP, or, with ep = t (par/ep.h), E / t
	 * of them whole on each rank of the group */
	if (cfg->num_experts > 0) {
		/* the tokens a rank routes: the group's, or its own rows (par/ep.h) */
		int M = m->ep_rows ? c->Ml : c->B * m->T, K = cfg->moe_top_k, E = cfg->num_experts;
		int dropless = cfg->capacity_factor <= 0;

		c->moe = (struct moe_shape){.M = M,
					    .C = cfg->hidden,
					    .F = m->ep_tp || m->ep_rows ? cfg->ffn : c->Fl,
					    .E = E,
					    .k = K,
					    .cap = moe_capacity(cfg->capacity_factor, M, K, E),
					    .aux_coeff = cfg->aux_coeff,
					    .e0 = m->ep_tp ? r * (E / t) : 0,
					    .El = m->ep_tp ? E / t : 0,
					    .dropless = dropless};
		if (m->route_n > 1) { /* the micro-batch's capacity, over ranks (par/moe_route.c) */
			int all = moe_capacity(cfg->capacity_factor, c->B * m->T * m->cp, K, E);

			c->moe.Mall = c->B * m->T * m->cp;
			c->moe.cap_all = all;
			c->moe.cap = all < M ? all : M;
		}
		/* over ep ranks (par/ep.c), the rows a rank's experts can receive: at most cap
		 * from each rank an expert, or dropless every rank's choices */
		if (m->ep > 1)
			c->moe.rows = dropless ? m->ep * M * K : E * c->moe.cap;
	}
}

int par_model_init(struct par_model *m, const struct par_cfg *cfg, const struct par_groups *g,
		   const struct par_part *part, const struct par_source *src)
{
	const struct gpt_config *c = &cfg->model;
	int tp = cfg->tp, nsub = cfg->overlap == PAR_OVERLAP_OASES ? PAR_NSUB : 1;
	int B = cfg->mbs / nsub, rc;

	memset(m, 0, sizeof *m);
	m->pc = *cfg;
	m->cfg = *c;
	kctx_init(&m->k, g->dev, cfg->prec);
	if (cfg->fp32_grads)
		m->k.gb = 4;
	m->tp = tp;
	m->r = g->tp_rank;
	m->g = g->tp;
	m->B = B;
	m->nsub = nsub;
	m->cp = cfg->cp > 1 ? cfg->cp : 1;
	m->cpr = m->cp > 1 ? g->cp_rank : 0;
	m->cpg = m->cp > 1 ? g->cp : NULL;
	m->ep_tp = cfg->ep_tp; /* experts over the tp group (par/ep.h) */
	m->ep_rows = cfg->ep_rows;
	m->ep = cfg->ep > 1 && !m->ep_tp ? cfg->ep : 1;
	m->route_n = (m->ep_rows ? tp : 1) * m->cp;
	m->routeg = m->route_n > 1 ? g->route : NULL;
	m->route_r = m->route_n > 1 ? g->route_rank : 0;
	m->epr = m->ep > 1 ? g->ep_rank : 0;
	m->epg = m->ep > 1 ? g->ep : NULL;
	m->edpg = m->ep > 1 ? g->edp : NULL;
	m->T = c->seq_len / m->cp;
	m->NHl = c->heads / tp;
	m->Fl = c->ffn / tp;
	m->Vl = c->vocab / tp;
	m->v0 = m->r * m->Vl;
	tp_view(m, &m->tpv[PAR_TPV_MODEL], tp, m->r, g->tp, 1, 0, B);
	if (cfg->tpf_layers > 0) /* the first layers: my tpf ranks of the group, my part */
		tp_view(m, &m->tpv[PAR_TPV_FIRST], cfg->tpf, m->r % cfg->tpf, g->tpf, tp / cfg->tpf,
			m->r / cfg->tpf, B);
	m->merge = g->merge;
	m->sp = m->tpv[PAR_TPV_MODEL].sp;
	/* Megatron's sequence parallelism keeps a LayerNorm output's rows and gathers them
	 * again for backward (Korthikanti et al. 2022, section 4.2.2); Oases keeps them
	 * gathered (its checkpoints are after the collectives), and so do zero-bubble's
	 * deferred weight passes here */
	m->ln_rows = m->sp && nsub == 1 && cfg->recompute != PAR_RECOMPUTE_OASES && !cfg->split_bwd;
	m->Ml = m->tpv[PAR_TPV_MODEL].Ml;
	m->row0 = m->tpv[PAR_TPV_MODEL].row0;
	m->moe = m->tpv[PAR_TPV_MODEL].moe;
	m->pos = emu_xcalloc((size_t)m->T, sizeof *m->pos);
	m->pos_rows = emu_xcalloc((size_t)m->Ml, sizeof *m->pos_rows);
	for (int i = 0; i < m->T; i++) { /* (the bug: each half at the other's positions) */
		int j = cfg->bug == PAR_BUG_CP_CHUNKS && m->cp > 1 ? (i + m->T / 2) % m->T : i;

		m->pos[i] = par_cp_position(c->seq_len, m->cp, m->cpr, j, m->pc.cp_contiguous);
	}
	for (int i = 0; i < m->Ml; i++)
		m->pos_rows[i] = m->pos[(m->row0 + i) % m->T];
	m->pos_all = emu_xcalloc((size_t)m->cp * (size_t)m->T, sizeof *m->pos_all);
	for (int j = 0; j < m->cp; j++)
		for (int i = 0; i < m->T; i++)
			m->pos_all[(size_t)j * m->T + i] =
				par_cp_position(c->seq_len, m->cp, j, i, m->pc.cp_contiguous);
	m->layers = emu_xcalloc((size_t)c->num_layers + 1, 1);
	for (int l = 0; l < c->num_layers; l++)
		m->layers[l] = part ? part->layers[l] : PAR_PART_PRE | PAR_PART_POST;
	m->part = (struct par_part){part ? part->first : 1, part ? part->last : 1, m->layers};
	make_plans(m);
	if ((rc = alloc_params(m, src, cfg->pad ? (size_t)cfg->pad : 1,
			       cfg->edp ? (size_t)cfg->edp : 1, cfg->zero)))
		return rc;
	if (!part && (rc = par_acts_alloc(m, &m->own, 0, c->num_layers)))
		return rc;
	for (int s = 0; s < nsub && !rc; s++)
		rc = alloc_work(m, &m->work[s]);
	return rc;
}

void par_model_free(struct par_model *m)
{
	if (par_acts_held(&m->own))
		par_acts_free(m, &m->own);
	free(m->layers);
	free(m->pos);
	free(m->pos_rows);
	free(m->pos_all);
	free(m->plan);
	free(m->p);
	free(m->order);
	memset(m, 0, sizeof *m);
}

void par_zero_grad(struct par_model *m)
{
	par_zero(&m->grads);
}

int par_grad_wire(struct par_model *m)
{
	return coll_set_wire_bytes(m->k.d, m->k.gb);
}

int par_sum_tied_embedding(struct par_model *m, struct emu_group *emb)
{
	int was = par_grad_wire(m),
	    rc = coll_all_reduce(m->k.d, emb, m->p[0].g, m->p[0].g, m->p[0].n, COLL_SUM);

	coll_set_wire_bytes(m->k.d, was);
	return rc;
}
