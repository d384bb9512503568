/* gpt_params: a GPT's configuration (its check, its parameter count and FLOPs), its
 * parameters as named tensors (sizes, initialisation, weight decay) and the buffers a
 * model holds (gpt_init, gpt_free). The math is gpt.c's. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
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
		snprintf(err, n,
			 "--num-experts %d: fewer experts than the %d each token picks "
			 "(--moe-top-k, 2 unless given)",
			 c->num_experts, c->moe_top_k);
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
	size_t r = (size_t)rows, lnr = parts & GPT_ACTS_LN_ROWS ? r : bt;
	int rc = 0;

#define A(t, n, name)                                                                              \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_ensure(k, (t), MEM_ACT, (n), (name));                          \
	} while (0)
	if (parts & GPT_ACTS_PRE) {
		A(&a->ln1, lnr * (size_t)h, "ln1");
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
	A(&a->ln2, lnr * (size_t)h, "ln2");
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
