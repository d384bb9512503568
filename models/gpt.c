/* gpt: the model of gpt.h, forward and backward written out kernel by kernel, the
 * optimizer step and sampling (its parameters and buffers are gpt_params.c's). */
#include "gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "dropout.h"
#include "linear.h"
#include "ops.h"
#include "rng.h"
#include "team.h"
#include "util.h"

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
	crossentropy_fwd(k, CE_ONE, D(m->losses), D(m->probs), D(m->probs), m->targets, BT, V);
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
	crossentropy_bwd(k, CE_ONE, D(m->dlogits), D(m->probs), m->targets, scale / (float)BT, BT,
			 V);
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
