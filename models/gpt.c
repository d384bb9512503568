/* gpt: the model of gpt.h, forward and backward written out kernel by kernel. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "dropout.h"
#include "linear.h"
#include "ops.h"
#include "rng.h"
#include "team.h"
#include "util.h"

static const char *const lp_names[LP_N] = {"ln1.weight",   "ln1.bias",  "qkv.weight", "qkv.bias",
					   "proj.weight",  "proj.bias", "ln2.weight", "ln2.bias",
					   "fc.weight",    "fc.bias",   "fc2.weight", "fc2.bias",
					   "router.weight"};

double gpt_model_flops(const struct gpt_config *c, int batch)
{
	double B = batch, s = c->seq_len, L = c->num_layers, h = c->hidden, V = c->vocab;

	return 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
}

int gpt_layer_is_moe(const struct gpt_config *c, int l)
{
	return c->num_experts > 0 && (l + 1) % c->moe_every == 0;
}

/* Elements of parameter w of layer l. */
static size_t layer_param_n(const struct gpt_config *c, int l, enum gpt_lp w)
{
	size_t h = (size_t)c->hidden, f = (size_t)c->ffn;
	size_t e = gpt_layer_is_moe(c, l) ? (size_t)c->num_experts : 1;
	size_t n[LP_N] = {h,
			  h,
			  3 * h * h,
			  3 * h,
			  h * h,
			  h,
			  h,
			  h,
			  e * f * h,
			  e * f,
			  e * h * f,
			  e * h,
			  gpt_layer_is_moe(c, l) ? e * h : 0};

	return n[w];
}

size_t gpt_num_params(const struct gpt_config *c)
{
	size_t n = ((size_t)c->vocab + (size_t)c->seq_len + 2) * (size_t)c->hidden;

	for (int l = 0; l < c->num_layers; l++)
		for (int w = 0; w < LP_N; w++)
			n += layer_param_n(c, l, (enum gpt_lp)w);
	return n;
}

int gpt_config_check(const struct gpt_config *c, char *err, size_t n)
{
	if (c->num_layers < 1 || c->hidden < 1 || c->heads < 1 || c->vocab < 2 || c->seq_len < 1 ||
	    c->ffn < 1) {
		snprintf(err, n,
			 "every model size must be positive (layers %d, hidden %d, heads %d, vocab "
			 "%d, seq %d, ffn %d)",
			 c->num_layers, c->hidden, c->heads, c->vocab, c->seq_len, c->ffn);
		return -1;
	}
	if (c->hidden % c->heads) {
		snprintf(err, n, "hidden size %d is not divisible by %d attention heads", c->hidden,
			 c->heads);
		return -1;
	}
	if (c->num_experts < 0 ||
	    (c->num_experts > 0 && (c->moe_every < 1 || c->capacity_factor < 0))) {
		snprintf(err, n,
			 "a MoE model needs experts >= 1, --moe-every >= 1 and a capacity factor "
			 ">= 0 (0: dropless)");
		return -1;
	}
	if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1)) {
		snprintf(err, n, "--hidden-dropout %g: a probability in [0, 1)",
			 (double)c->hidden_dropout);
		return -1;
	}
	if (!(c->attention_dropout >= 0 && c->attention_dropout < 1)) {
		snprintf(err, n, "--attention-dropout %g: a probability in [0, 1)",
			 (double)c->attention_dropout);
		return -1;
	}
	if (c->attention_dropout > 0 && c->heads > 1024) {
		snprintf(err, n,
			 "--attention-dropout with %d heads: its masks are keyed by up to 1024 "
			 "heads (models/dropout.c)",
			 c->heads);
		return -1;
	}
	if (c->num_experts > 0 && (c->moe_top_k < 1 || c->moe_top_k > 2)) {
		snprintf(err, n, "--moe-top-k %d: the router picks 1 or 2 experts a token",
			 c->moe_top_k);
		return -1;
	}
	if (c->num_experts > 0 && c->moe_top_k > c->num_experts) {
		snprintf(err, n, "--moe-top-k %d is larger than the %d experts", c->moe_top_k,
			 c->num_experts);
		return -1;
	}
	return 0;
}

struct gpt_param *gpt_param(struct gpt *m, int layer, enum gpt_lp which)
{
	return &m->p[2 + layer * LP_N + which];
}

/* ------------------------------------------------------------------------------------ */
/* Construction                                                                         */

int gpt_num_tensors(const struct gpt_config *c)
{
	return 2 + c->num_layers * LP_N + 2;
}

/* The layer (or -1) and per-layer index of tensor i. */
static int tensor_layer(const struct gpt_config *c, int i, int *w)
{
	if (i < 2 || i >= gpt_num_tensors(c) - 2)
		return -1;
	*w = (i - 2) % LP_N;
	return (i - 2) / LP_N;
}

size_t gpt_tensor_numel(const struct gpt_config *c, int i)
{
	size_t h = (size_t)c->hidden;
	int w, l = tensor_layer(c, i, &w);

	if (i == 0)
		return (size_t)c->vocab * h;
	if (i == 1)
		return (size_t)c->seq_len * h;
	return l < 0 ? h : layer_param_n(c, l, (enum gpt_lp)w);
}

void gpt_tensor_name(const struct gpt_config *c, int i, char *buf, size_t n)
{
	int w, l = tensor_layer(c, i, &w);

	if (i == 0)
		snprintf(buf, n, "wte");
	else if (i == 1)
		snprintf(buf, n, "wpe");
	else if (l < 0)
		snprintf(buf, n, "lnf.%s", i == gpt_num_tensors(c) - 2 ? "weight" : "bias");
	else
		snprintf(buf, n, "layers.%d.%s", l, lp_names[w]);
}

int gpt_tensor_decays(const struct gpt_config *c, int i)
{
	int w, l = tensor_layer(c, i, &w);

	return i < 2 || (l >= 0 && (w == LP_QKVW || w == LP_PROJW || w == LP_FCW || w == LP_FC2W ||
				    w == LP_ROUTER));
}

void gpt_tensor_init(const struct gpt_config *c, uint64_t seed, int i, float *out)
{
	size_t n = gpt_tensor_numel(c, i);
	double std = 0, resid_std = 0.02 / sqrt(2.0 * c->num_layers);
	float fill = 0;
	int w, l = tensor_layer(c, i, &w);

	if (i == 1)
		std = 0.01;
	else if (i == 0 || (l >= 0 && (w == LP_QKVW || w == LP_FCW || w == LP_ROUTER)))
		std = 0.02;
	else if (l >= 0 && (w == LP_PROJW || w == LP_FC2W))
		std = resid_std;
	else if (l < 0 ? i == gpt_num_tensors(c) - 2 : (w == LP_LN1W || w == LP_LN2W))
		fill = 1.0f; /* LayerNorm weights */
	for (size_t e = 0; e < n; e++)
		out[e] = std > 0 ? (float)(std * rng_normal(seed, (uint64_t)i, e)) : fill;
}

static int alloc_params(struct gpt *m, uint64_t seed)
{
	const struct gpt_config *c = &m->cfg;
	int rc;

	m->np = gpt_num_tensors(c);
	m->p = emu_xcalloc((size_t)m->np, sizeof *m->p);
	for (int i = 0; i < m->np; i++) {
		struct gpt_param *p = &m->p[i];
		char gname[48];

		gpt_tensor_name(c, i, p->name, sizeof p->name);
		p->n = gpt_tensor_numel(c, i);
		p->decay = gpt_tensor_decays(c, i);
		snprintf(gname, sizeof gname, "%s.grad", p->name);
		if ((rc = tensor_alloc(&m->k, &p->w, MEM_PARAM, p->n, p->name)) ||
		    (rc = tensor_alloc(&m->k, &p->g, MEM_GRAD, p->n, gname)) ||
		    (rc = tensor_alloc_optim(&m->k, &p->opt, p->n, "adam state")))
			return rc;
		if (p->w.data)
			gpt_tensor_init(c, seed, i, p->w.data);
	}
	return 0;
}

int gpt_layer_acts_alloc(const struct kctx *k, struct gpt_layer_acts *a, int B, int T, int rows,
			 int h, int hl, int heads, int ffn, const struct moe_shape *moe,
			 unsigned parts)
{
	int flash = (parts & GPT_ACTS_FLASH) != 0;
	size_t bt = (size_t)B * T, att = (size_t)B * heads * T * (flash ? 1 : (size_t)T);
	size_t r = (size_t)rows;
	int rc = 0;

#define A(t, n, name)                                                                              \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_ensure(k, (t), MEM_ACT, (n), (name));                          \
	} while (0)
	if (parts & GPT_ACTS_PRE) {
		A(&a->ln1, bt * (size_t)h, "ln1");
		A(&a->ln1_mean, r, "ln1.mean");
		A(&a->ln1_rstd, r, "ln1.rstd");
	}
	if (parts & (GPT_ACTS_PRE | GPT_ACTS_ATTN))
		A(&a->qkv, 3 * bt * (size_t)hl, "qkv");
	if (parts & GPT_ACTS_ATTN)
		A(&a->att, att, flash ? "attention lse" : "attention scores");
	if ((parts & GPT_ACTS_ATTN) && (parts & GPT_ACTS_ATTN_DROPOUT) && !flash) {
		A(&a->attd, att, "attention probabilities dropped");
		if (!rc && !a->amask.mb)
			rc = tensor_alloc_bytes(k, &a->amask, MEM_ACT, att,
						"attention dropout mask");
	}
	if (parts & (GPT_ACTS_ATTN | GPT_ACTS_POST))
		A(&a->atty, bt * (size_t)hl, "attention out");
	if (!(parts & GPT_ACTS_POST))
		return rc;
	A(&a->res2, r * (size_t)h, "residual 2");
	A(&a->ln2, bt * (size_t)h, "ln2");
	A(&a->ln2_mean, r, "ln2.mean");
	A(&a->ln2_rstd, r, "ln2.rstd");
	if (moe) {
		if (!rc)
			rc = moe_acts_alloc(k, &a->moe, moe);
	} else if (!(parts & GPT_ACTS_NO_MLP)) {
		A(&a->fch, bt * (size_t)ffn, "fc");
		A(&a->fch_gelu, bt * (size_t)ffn, "fc.gelu");
	}
	A(&a->res3, r * (size_t)h, "residual 3");
#undef A
	if (!rc && (parts & GPT_ACTS_DROPOUT) && !a->mask2.mb)
		rc = tensor_alloc_bytes(k, &a->mask2, MEM_ACT, r * (size_t)h, "dropout mask 2");
	if (!rc && (parts & GPT_ACTS_DROPOUT) && !a->mask3.mb)
		rc = tensor_alloc_bytes(k, &a->mask3, MEM_ACT, r * (size_t)h, "dropout mask 3");
	return rc;
}

void gpt_layer_acts_free(const struct kctx *k, struct gpt_layer_acts *a)
{
	struct tensor *t[] = {&a->ln1,     &a->ln1_mean, &a->ln1_rstd, &a->qkv,       &a->att,
			      &a->atty,    &a->res2,     &a->ln2,      &a->ln2_mean,  &a->ln2_rstd,
			      &a->fch,     &a->fch_gelu, &a->res3,     &a->moe.probs, &a->moe.x,
			      &a->moe.pre, &a->moe.h,    &a->moe.y,    &a->mask2,     &a->mask3,
			      &a->amask,   &a->attd};

	for (size_t i = 0; i < sizeof t / sizeof *t; i++)
		tensor_free(k, t[i]);
	moe_acts_free(&a->moe);
}
static int alloc_acts(struct gpt *m)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, h = (size_t)m->cfg.hidden, f = (size_t)m->cfg.ffn;
	size_t v = (size_t)m->cfg.vocab;
	int rc = 0, drop = m->cfg.hidden_dropout > 0;
	unsigned adrop = m->cfg.attention_dropout > 0 ? GPT_ACTS_ATTN_DROPOUT : 0;

	m->la = emu_xcalloc((size_t)m->cfg.num_layers, sizeof *m->la);
#define A(t, cat, n, name)                                                                         \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc(k, (t), (cat), (n), (name));                             \
	} while (0)
	A(&m->enc, MEM_ACT, bt * h, "embeddings");
	for (int l = 0; l < m->cfg.num_layers && !rc; l++)
		rc = gpt_layer_acts_alloc(k, &m->la[l], m->B, m->T, m->B * m->T, m->cfg.hidden,
					  m->cfg.hidden, m->cfg.heads, m->cfg.ffn,
					  gpt_layer_is_moe(&m->cfg, l) ? &m->moe : NULL,
					  GPT_ACTS_ALL | (drop ? GPT_ACTS_DROPOUT : 0) | adrop);
	A(&m->lnf, MEM_ACT, bt * h, "lnf");
	A(&m->lnf_mean, MEM_ACT, bt, "lnf.mean");
	A(&m->lnf_rstd, MEM_ACT, bt, "lnf.rstd");
	A(&m->probs, MEM_ACT, bt * v, "logits");
	A(&m->losses, MEM_ACT, bt, "losses");
	A(&m->dres, MEM_WORK, bt * h, "d residual");
	A(&m->dln, MEM_WORK, bt * h, "d layernorm");
	A(&m->tmp, MEM_WORK, bt * h, "branch out");
	A(&m->dqkv, MEM_WORK, 3 * bt * h, "d qkv");
	A(&m->datty, MEM_WORK, bt * h, "d attention out");
	A(&m->dfch, MEM_WORK, bt * f, "d fc");
	A(&m->dfch_gelu, MEM_WORK, bt * f, "d fc.gelu");
	A(&m->dlogits, MEM_WORK, bt * v, "d logits");
	A(&m->att_scratch, MEM_WORK, (size_t)m->T * m->T, "attention scratch");
	if (drop)
		A(&m->ddrop, MEM_WORK, bt * h, "d branch (dropout)");
#undef A
	if (!rc && drop)
		rc = tensor_alloc_bytes(k, &m->mask_enc, MEM_ACT, bt * h,
					"dropout mask embeddings");
	if (!rc && m->cfg.num_experts > 0)
		rc = moe_scratch_alloc(k, &m->moe_scratch, &m->moe);
	return rc;
}

int gpt_init(struct gpt *m, const struct kctx *k, const struct gpt_config *cfg, int B,
	     uint64_t seed)
{
	int rc;

	memset(m, 0, sizeof *m);
	m->cfg = *cfg;
	m->k = *k;
	m->B = B;
	m->T = cfg->seq_len;
	m->tokens = emu_xcalloc((size_t)B * m->T, sizeof *m->tokens);
	if (cfg->num_experts > 0)
		m->moe = (struct moe_shape){.M = B * m->T,
					    .C = cfg->hidden,
					    .F = cfg->ffn,
					    .E = cfg->num_experts,
					    .k = cfg->moe_top_k,
					    .cap = moe_capacity(cfg->capacity_factor, B * m->T,
								cfg->moe_top_k, cfg->num_experts),
					    .aux_coeff = cfg->aux_coeff,
					    .dropless = cfg->capacity_factor <= 0};
	m->targets = emu_xcalloc((size_t)B * m->T, sizeof *m->targets);
	m->seed = seed;
	m->train = 1;
	if ((rc = alloc_params(m, seed)))
		return rc;
	return alloc_acts(m);
}

void gpt_free(struct gpt *m)
{
	/* Device memory goes back with the run (and mem_free of a NULL block is a no-op),
	 * so freeing what exists is enough, even after a failed gpt_init. */
	for (int i = 0; m->p && i < m->np; i++) {
		tensor_free(&m->k, &m->p[i].w);
		tensor_free(&m->k, &m->p[i].g);
		tensor_free(&m->k, &m->p[i].opt);
	}
	free(m->p);
	for (int l = 0; m->la && l < m->cfg.num_layers; l++)
		moe_acts_free(&m->la[l].moe);
	free(m->la);
	free(m->tokens);
	free(m->targets);
	m->p = NULL;
	m->la = NULL;
	m->tokens = m->targets = NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Forward                                                                              */

#define D(t)       ((t).data)
#define W(m, l, i) (gpt_param((m), (l), (i))->w.data)
#define G(m, l, i) (gpt_param((m), (l), (i))->g.data)

static void zero(struct tensor *t)
{
	if (t->data)
		team_zero(t->data, t->n);
}

/* Hidden dropout at a site: on while training with p > 0. */
static int dropping(const struct gpt *m)
{
	return m->train && m->cfg.hidden_dropout > 0;
}

/* res + branch into out, through the site's dropout if on; the embeddings' (DROP_EMBED):
 * out = the dropout of branch, in place (nothing without dropout). */
static void branch_add(struct gpt *m, int l, enum drop_site s, float *out, struct tensor *mask,
		       const float *res, const float *branch)
{
	int BT = m->B * m->T, C = m->cfg.hidden;
	struct dropout d = {m->cfg.hidden_dropout, m->seed, dropout_site(l, s)};
	struct drop_rows r = {m->seq0, m->T, m->cfg.seq_len, 0, NULL};

	if (dropping(m) && s == DROP_EMBED)
		dropout_fwd(&m->k, out, (unsigned char *)D(*mask), &d, &r, BT, C);
	else if (dropping(m))
		dropout_add_fwd(&m->k, out, (unsigned char *)D(*mask), res, branch, &d, &r, BT, C);
	else if (s != DROP_EMBED)
		residual_fwd(&m->k, out, res, branch, (size_t)BT * C);
}

/* Layer l's attention over the whole sequences, its probabilities through attention
 * dropout while training with p > 0 (the mask and P' kept in a). */
static struct attn_view attn_of(struct gpt *m, int l, struct gpt_layer_acts *a, struct attn_drop *d)
{
	int C = m->cfg.hidden, NH = m->cfg.heads;
	struct attn_view v =
		attention_qkv_view(D(a->atty), D(a->att), D(a->qkv), m->B, m->T, NH, 0, NH, C / NH);

	*d = (struct attn_drop){.p = m->cfg.attention_dropout,
				.seed = m->seed,
				.layer = l,
				.seq0 = m->seq0,
				.S = m->cfg.seq_len};
	if (m->train && d->p > 0) {
		v.drop = d;
		v.mask = (unsigned char *)D(a->amask);
		v.attd = D(a->attd);
	}
	return v;
}

/* The branch's output gradient: dres, or its masked copy in m->ddrop. */
static const float *branch_grad(struct gpt *m, const struct tensor *mask)
{
	if (!dropping(m))
		return D(m->dres);
	dropout_bwd(&m->k, D(m->ddrop), D(m->dres), (const unsigned char *)D(*mask),
		    m->cfg.hidden_dropout, (size_t)m->B * m->T * m->cfg.hidden);
	return D(m->ddrop);
}

float gpt_forward(struct gpt *m, const int *tokens, const int *targets)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, BT = B * T, C = m->cfg.hidden, F = m->cfg.ffn;
	int V = m->cfg.vocab, L = m->cfg.num_layers;
	const float *x;
	float loss = 0;

	if (kctx_math(k)) {
		memcpy(m->tokens, tokens, (size_t)BT * sizeof *tokens);
		memcpy(m->targets, targets, (size_t)BT * sizeof *targets);
	}
	m->aux_loss = 0;
	embedding_fwd(k, D(m->enc), m->tokens, m->p[0].w.data, m->p[1].w.data, B, T, C, 0);
	branch_add(m, -1, DROP_EMBED, D(m->enc), &m->mask_enc, NULL, D(m->enc));
	x = D(m->enc);
	for (int l = 0; l < L; l++) {
		struct gpt_layer_acts *a = &m->la[l];
		struct attn_drop ad;
		struct attn_view av;

		layernorm_fwd(k, D(a->ln1), D(a->ln1_mean), D(a->ln1_rstd), x, W(m, l, LP_LN1W),
			      W(m, l, LP_LN1B), BT, C);
		linear_fwd(k, D(a->qkv), D(a->ln1), W(m, l, LP_QKVW), W(m, l, LP_QKVB), 1, BT, C,
			   3 * C);
		av = attn_of(m, l, a, &ad);
		attention_fwd_view(k, &av);
		linear_fwd(k, D(m->tmp), D(a->atty), W(m, l, LP_PROJW), W(m, l, LP_PROJB), 1, BT, C,
			   C);
		branch_add(m, l, DROP_ATTN, D(a->res2), &a->mask2, x, D(m->tmp));
		layernorm_fwd(k, D(a->ln2), D(a->ln2_mean), D(a->ln2_rstd), D(a->res2),
			      W(m, l, LP_LN2W), W(m, l, LP_LN2B), BT, C);
		if (gpt_layer_is_moe(&m->cfg, l)) {
			m->aux_loss += moe_fwd(k, &m->moe, &a->moe, D(m->tmp), D(a->ln2),
					       W(m, l, LP_ROUTER), W(m, l, LP_FCW), W(m, l, LP_FCB),
					       W(m, l, LP_FC2W), W(m, l, LP_FC2B));
		} else {
			linear_fwd(k, D(a->fch), D(a->ln2), W(m, l, LP_FCW), W(m, l, LP_FCB), 1, BT,
				   C, F);
			gelu_fwd(k, D(a->fch_gelu), D(a->fch), (size_t)BT * F);
			linear_fwd(k, D(m->tmp), D(a->fch_gelu), W(m, l, LP_FC2W), W(m, l, LP_FC2B),
				   1, BT, F, C);
		}
		branch_add(m, l, DROP_MLP, D(a->res3), &a->mask3, D(a->res2), D(m->tmp));
		x = D(a->res3);
	}
	layernorm_fwd(k, D(m->lnf), D(m->lnf_mean), D(m->lnf_rstd), x, m->p[m->np - 2].w.data,
		      m->p[m->np - 1].w.data, BT, C);
	linear_fwd(k, D(m->probs), D(m->lnf), m->p[0].w.data, NULL, 0, BT, C, V); /* tied to wte */
	crossentropy_fwd(k, D(m->losses), D(m->probs), D(m->probs), m->targets, BT, V);
	if (kctx_math(k)) {
		double s = 0;

		for (int i = 0; i < BT; i++)
			s += m->losses.data[i];
		loss = (float)(s / BT) + m->aux_loss;
	}
	return loss;
}

/* ------------------------------------------------------------------------------------ */
/* Backward                                                                             */

void gpt_zero_grad(struct gpt *m)
{
	for (int i = 0; i < m->np; i++)
		zero(&m->p[i].g);
}

void gpt_backward(struct gpt *m, float scale)
{
	const struct kctx *k = &m->k;
	int B = m->B, T = m->T, BT = B * T, C = m->cfg.hidden, F = m->cfg.ffn;
	int V = m->cfg.vocab, L = m->cfg.num_layers;
	const float *x_last = L ? D(m->la[L - 1].res3) : D(m->enc);

	/* loss -> logits -> final layernorm: dres holds d(block output) from here on. */
	zero(&m->dlogits);
	crossentropy_bwd(k, D(m->dlogits), D(m->probs), m->targets, scale / (float)BT, BT, V);
	zero(&m->dln);
	linear_bwd_input(k, D(m->dln), D(m->dlogits), m->p[0].w.data, BT, C, V);
	linear_bwd_weight(k, m->p[0].g.data, NULL, 0, D(m->dlogits), D(m->lnf), BT, C, V);
	zero(&m->dres);
	layernorm_bwd(k, D(m->dres), m->p[m->np - 2].g.data, m->p[m->np - 1].g.data, D(m->dln),
		      x_last, m->p[m->np - 2].w.data, D(m->lnf_mean), D(m->lnf_rstd), BT, C);
	for (int l = L - 1; l >= 0; l--) {
		struct gpt_layer_acts *a = &m->la[l];
		const float *x = l ? D(m->la[l - 1].res3) : D(m->enc);
		struct attn_drop ad;
		struct attn_view av;

		/* res3 = res2 + fc2(gelu(fc(ln2(res2)))), or res2 + moe(ln2(res2)), the branch
		 * through its dropout */
		const float *g = branch_grad(m, &a->mask3);

		if (gpt_layer_is_moe(&m->cfg, l)) {
			zero(&m->dln);
			moe_bwd(k, &m->moe, &a->moe, &m->moe_scratch, D(m->dln), g, scale,
				D(a->ln2), W(m, l, LP_ROUTER), W(m, l, LP_FCW), W(m, l, LP_FC2W),
				G(m, l, LP_ROUTER), G(m, l, LP_FCW), G(m, l, LP_FCB),
				G(m, l, LP_FC2W), G(m, l, LP_FC2B));
			goto ln2_bwd;
		}
		zero(&m->dfch_gelu);
		linear_bwd_input(k, D(m->dfch_gelu), g, W(m, l, LP_FC2W), BT, F, C);
		linear_bwd_weight(k, G(m, l, LP_FC2W), G(m, l, LP_FC2B), 1, g, D(a->fch_gelu), BT,
				  F, C);
		zero(&m->dfch);
		gelu_bwd(k, D(m->dfch), D(a->fch), D(m->dfch_gelu), (size_t)BT * F);
		zero(&m->dln);
		linear_bwd_input(k, D(m->dln), D(m->dfch), W(m, l, LP_FCW), BT, C, F);
		linear_bwd_weight(k, G(m, l, LP_FCW), G(m, l, LP_FCB), 1, D(m->dfch), D(a->ln2), BT,
				  C, F);
	ln2_bwd:
		layernorm_bwd(k, D(m->dres), G(m, l, LP_LN2W), G(m, l, LP_LN2B), D(m->dln),
			      D(a->res2), W(m, l, LP_LN2W), D(a->ln2_mean), D(a->ln2_rstd), BT, C);
		/* res2 = x + proj(attention(qkv(ln1(x)))) */
		g = branch_grad(m, &a->mask2);
		zero(&m->datty);
		linear_bwd_input(k, D(m->datty), g, W(m, l, LP_PROJW), BT, C, C);
		linear_bwd_weight(k, G(m, l, LP_PROJW), G(m, l, LP_PROJB), 1, g, D(a->atty), BT, C,
				  C);
		zero(&m->dqkv);
		av = attn_of(m, l, a, &ad);
		attention_bwd_view(k, &av, D(m->dqkv), m->dqkv.data ? D(m->dqkv) + C : NULL,
				   m->dqkv.data ? D(m->dqkv) + 2 * C : NULL, D(m->att_scratch),
				   D(m->datty));
		zero(&m->dln);
		linear_bwd_input(k, D(m->dln), D(m->dqkv), W(m, l, LP_QKVW), BT, C, 3 * C);
		linear_bwd_weight(k, G(m, l, LP_QKVW), G(m, l, LP_QKVB), 1, D(m->dqkv), D(a->ln1),
				  BT, C, 3 * C);
		layernorm_bwd(k, D(m->dres), G(m, l, LP_LN1W), G(m, l, LP_LN1B), D(m->dln), x,
			      W(m, l, LP_LN1W), D(a->ln1_mean), D(a->ln1_rstd), BT, C);
	}
	if (dropping(m)) /* the embeddings' dropout, in place: dres is not read again */
		dropout_bwd(k, D(m->dres), D(m->dres), (const unsigned char *)D(m->mask_enc),
			    m->cfg.hidden_dropout, (size_t)BT * C);
	embedding_bwd(k, m->p[0].g.data, m->p[1].g.data, D(m->dres), m->tokens, B, T, C, 0);
}

double gpt_update(struct gpt *m, const struct optim_cfg *o, int t)
{
	double sq = 0, norm;
	float scale = 1.0f, lr = optim_lr(o, t - 1);

	for (int i = 0; i < m->np; i++)
		if (m->p[i].n) /* the router of a dense layer is empty */
			sq += optim_sq_norm(&m->k, m->p[i].g.data, m->p[i].n);
	norm = sqrt(sq);
	if (o->clip > 0 && norm > o->clip)
		scale = (float)(o->clip / norm);
	for (int i = 0; i < m->np; i++)
		if (m->p[i].n)
			optim_adamw(&m->k, o, m->p[i].w.data, m->p[i].g.data, m->p[i].opt.data,
				    m->p[i].opt.data ? m->p[i].opt.data + m->p[i].n : NULL,
				    m->p[i].n, lr, scale, m->p[i].decay, t);
	return norm;
}

/* ------------------------------------------------------------------------------------ */
/* Sampling                                                                             */

void gpt_sample(struct gpt *m, const int *prompt, int nprompt, int n, uint64_t seed, char *out)
{
	int T = m->T, B = m->B, V = m->cfg.vocab, len = nprompt;
	int *ctx = emu_xcalloc((size_t)(nprompt + n), sizeof *ctx);
	int *tok = emu_xcalloc((size_t)T, sizeof *tok);
	struct moe_shape moe = m->moe;

	/* One sequence is enough: run the model as a micro-batch of 1 (the buffers, sized
	 * for B, hold it; MoE experts keep their capacity, so none is dropped). */
	m->B = 1;
	m->moe.M = T;
	memcpy(ctx, prompt, (size_t)nprompt * sizeof *ctx);
	for (int i = 0; i < n; i++) {
		int start = len > T ? len - T : 0, used = len - start, next = 0;
		const float *p;
		double u = rng_uniform(seed, 77, (uint64_t)i), acc = 0;

		/* Row 0 holds the context, left-aligned; causal attention makes position
		 * used-1 see exactly the context. Targets are irrelevant (0). */
		memset(tok, 0, (size_t)T * sizeof *tok);
		memcpy(tok, ctx + start, (size_t)used * sizeof *tok);
		m->train = 0;
		gpt_forward(m, tok, tok);
		m->train = 1;
		p = m->probs.data + (size_t)(used - 1) * V;
		for (next = 0; next < V - 1; next++) {
			acc += p[next];
			if (u < acc)
				break;
		}
		ctx[len++] = next;
		out[i] = (char)next;
	}
	m->B = B;
	m->moe = moe;
	free(ctx);
	free(tok);
}
