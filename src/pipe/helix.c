/* pipe/helix: HelixPipe (Zhang et al. 2025, arXiv 2507.00394), whole: its lists, its
 * blocks as the layer pieces of par/layer.h, and its stage's callbacks for sched_exec.
 *
 * The cut and the placement (section 4.1). A layer is cut at its attention: a
 * micro-batch runs 2L + 1 blocks, parameter unit c (block 2c: the embeddings and the
 * part of layer 0 before its attention for c = 0, the rest of layer c - 1 and the part
 * of layer c before its attention, and for c = L the rest of the last layer and the
 * output layer) and the attention of layer l (block 2l + 1, no parameters). Unit c lives
 * on stage c % p, so the units go round the ring of stages L / p times and units 0 and L
 * (the tied embedding) share stage 0. The attention of micro-batch mb at layer l runs on
 * stage (l + 1 + mb) % p: the attention of p consecutive micro-batches runs on p
 * different stages at once, and the first stage to start waits only for units, not for
 * attention. Choices where the paper leaves a detail open: the lists are made by a list
 * scheduler on modelled costs (a unit's forward 1, an attention's attn_cost, a backward
 * twice its forward), in first-in-last-out order: forward work first, earliest
 * micro-batch first; then backward, latest micro-batch first. Whenever a stage has
 * forwards of two micro-batches ready it runs the earlier one and the other's
 * transfers overlap it (the paper's two folds); the scheduler does not limit the folds
 * to two. Requires m and L divisible by p.
 *
 * The blocks in pieces (par/layer.h): unit c runs proj, mid, mlp and out of layer c - 1
 * (from the attention output and the residual x_{c-1} it receives) and pre of layer c;
 * the attention block runs attn of its layer, passing the residual on untouched. What a
 * block sends: a unit its qkv (B T, 3h/t) and its output x_c (Ml, h) to the attention;
 * an attention its atty (B T, h/t) and x_c to the next unit; backward, the gradients of
 * the same tensors the other way.
 *
 * Recomputation without attention (section 4.2, with --recompute full): once a block's
 * output has left, a unit keeps only its inputs (the attention output and the residual)
 * and runs its pieces again in backward; an attention block keeps its activations but
 * lets the residual it passed on go. The chunked MLP (section 4.3) is par/mlp.c's. */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "pipe/stage.h"
#include "util.h"

/* ------------------------------------------------------------------------------------ */
/* The lists                                                                            */

/* HelixPipe's lists (schedule.h): list scheduling on modelled costs, first-in-last-out.
 * Every (micro-batch, block) has a forward and a backward task; a task is ready when the
 * task it depends on has finished (no transfer time is modelled here). The stage that
 * can start something earliest starts, of its ready tasks, the forward of the earliest
 * micro-batch (then block), else the backward of the latest micro-batch (then block). */
/* Whether task (back, mb, j) goes before (cback, cmb, cj) of the same start time on one
 * stage: forward first; forward by earliest micro-batch then block, backward by latest. */
static int helix_before(int back, int mb, int j, int cback, int cmb, int cj)
{
	if (back != cback)
		return back < cback;
	return back ? mb > cmb || (mb == cmb && j > cj) : mb < cmb || (mb == cmb && j < cj);
}

void sched_build_helix(struct sched *sc, int p, int m, int v, double attn_cost)
{
	int nb = 2 * p * v + 1, left = 2 * m * nb;
	double *ff = emu_xmalloc((size_t)m * nb * sizeof *ff),
	       *fb = emu_xmalloc((size_t)m * nb * sizeof *fb);
	double *free_at = emu_xcalloc((size_t)p, sizeof *free_at);
	/* the ready tasks: a micro-batch's forward blocks run in order, then its backward
	 * blocks in reverse, so each has at most one of each ready, the next of its chain */
	int *fj = emu_xcalloc((size_t)m, sizeof *fj), *bj = emu_xmalloc((size_t)m * sizeof *bj);
	/* per stage, the best ready task this round: micro-batch (-1: none), block, back,
	 * start */
	int *cmb = emu_xmalloc((size_t)p * sizeof *cmb), *cj = emu_xmalloc((size_t)p * sizeof *cj),
	    *cback = emu_xmalloc((size_t)p * sizeof *cback);
	double *ct = emu_xmalloc((size_t)p * sizeof *ct);

	sched_init_empty(sc, SCHED_HELIX, p, m, v);
	sc->nb = nb;
	sc->attn_cost = attn_cost;
	sc->cap = 6 * m * nb + 1; /* room for every block's actions */
	for (int s = 0; s < p; s++) {
		free(sc->a[s]);
		sc->a[s] = emu_xcalloc((size_t)sc->cap, sizeof **sc->a);
	}
	for (int x = 0; x < m * nb; x++)
		ff[x] = fb[x] = -1;
	for (int mb = 0; mb < m; mb++)
		bj[mb] = nb - 1;
	while (left > 0) {
		int bs = -1, bmb = 0, bjj = 0, bback = 0;
		double bt = 0;

		for (int s = 0; s < p; s++)
			cmb[s] = -1;
		for (int mb = 0; mb < m; mb++)
			for (int back = 0; back <= 1; back++) {
				int j = back ? bj[mb] : fj[mb], x = mb * nb + j, s;
				double dep, t;

				if (back ? j < 0 || ff[mb * nb + nb - 1] < 0 : j >= nb)
					continue;
				dep = back ? (j + 1 < nb ? fb[x + 1] : ff[x]) : (j ? ff[x - 1] : 0);
				s = sched_stage(sc, mb, j);
				t = dep > free_at[s] ? dep : free_at[s];
				/* better: earlier start, then helix_before */
				if (cmb[s] < 0 || t < ct[s] ||
				    (t == ct[s] &&
				     helix_before(back, mb, j, cback[s], cmb[s], cj[s]))) {
					cmb[s] = mb;
					cj[s] = j;
					cback[s] = back;
					ct[s] = t;
				}
			}
		for (int s = 0; s < p; s++)
			if (cmb[s] >= 0 && (bs < 0 || ct[s] < bt)) {
				bs = s;
				bmb = cmb[s];
				bjj = cj[s];
				bback = cback[s];
				bt = ct[s];
			}
		EMU_ASSERT(bs >= 0);
		{
			double cost = (bjj % 2 ? attn_cost : 1.0) * (bback ? 2.0 : 1.0);

			free_at[bs] = bt + cost;
			if (bback) {
				fb[bmb * nb + bjj] = bt + cost;
				sched_push_bwd(sc, bmb, bjj, SCHED_BW);
				bj[bmb]--;
			} else {
				ff[bmb * nb + bjj] = bt + cost;
				sched_push_fwd(sc, bmb, bjj);
				fj[bmb]++;
			}
			left--;
		}
	}
	free(ff);
	free(fb);
	free(free_at);
	free(fj);
	free(bj);
	free(cmb);
	free(cj);
	free(cback);
	free(ct);
}

/* ------------------------------------------------------------------------------------ */
/* The blocks                                                                           */

static const enum par_piece post_pieces[] = {PAR_PROJ, PAR_MID, PAR_MLP, PAR_OUT};

/* Block j's activations in a: an attention's (layer c = j / 2) with the residual it
 * passes; unit c's with the rest of layer c - 1 and the part of layer c before its
 * attention (or the output layer for c = L). */
static int block_alloc(struct par_model *m, struct par_acts *a, int j)
{
	const struct kctx *k = &m->k;
	int L = m->cfg.num_layers, c = j / 2, rc;
	unsigned how = par_acts_flags(m);
	size_t nx = (size_t)m->Ml * m->cfg.hidden;

	if (j % 2) {
		if ((rc = par_acts_alloc_empty(m, a, c, c + 1)) ||
		    (rc = tensor_alloc(k, &a->enc, MEM_ACT, nx, "residual passed")))
			return rc;
		return par_acts_layer(m, a, c, GPT_ACTS_ATTN | how);
	}
	if ((rc = par_acts_alloc_empty(m, a, c ? c - 1 : 0, c < L ? c + 1 : L)) ||
	    (rc = tensor_alloc(k, &a->enc, MEM_ACT, nx, c ? "stage input" : "embeddings")) ||
	    (c == 0 && (rc = par_acts_embed_mask(m, a))))
		return rc;
	if (c > 0 && (rc = par_acts_layer(m, a, c - 1, GPT_ACTS_POST | how)))
		return rc;
	if (c < L)
		return par_acts_layer(m, a, c, GPT_ACTS_PRE | how);
	return par_acts_head(m, a);
}

/* Unit c's forward pieces (without the embeddings and the loss). */
static int unit_fwd(struct par_model *m, struct par_acts *a, int c)
{
	int rc;

	if (c > 0 && (rc = par_layer_use(m, c - 1)))
		return rc;
	for (int i = 0; c > 0 && i < 4; i++)
		if ((rc = par_layer_fwd(m, &m->work[0], a, c - 1, post_pieces[i])))
			return rc;
	if (c == m->cfg.num_layers)
		return 0;
	if ((rc = par_layer_use(m, c)) || (rc = par_layer_fwd(m, &m->work[0], a, c, PAR_PRE)))
		return rc;
	return par_layer_fwd(m, &m->work[0], a, c, PAR_QKV);
}

static int block_fwd(struct par_model *m, struct par_acts *a, int j, const int *tokens,
		     const int *targets, float *loss)
{
	int L = m->cfg.num_layers, c = j / 2, rc;

	*loss = 0;
	a->aux_loss = 0;
	if (j % 2)
		return par_layer_fwd(m, &m->work[0], a, c, PAR_ATTN);
	if (c == 0 || c == L)
		par_set_batch(m, a, tokens, targets);
	if ((c == 0 && (rc = par_embed_fwd(m, &m->work[0], a))) || (rc = unit_fwd(m, a, c)) ||
	    (c == L && (rc = par_head_fwd(m, &m->work[0], a, par_layer_input(a, L)))))
		return rc;
	*loss = par_part_loss(m, a, c == L);
	return 0;
}

/* Copies n floats (either side NULL in dry-run: nothing). */
static void copy_in(float *to, const float *from, size_t n)
{
	if (to && from)
		memcpy(to, from, n * sizeof *to);
}

static int block_bwd(struct par_model *m, struct par_acts *a, int j, float scale)
{
	const struct kctx *k = &m->k;
	struct par_work *w = &m->work[0];
	int L = m->cfg.num_layers, c = j / 2, rc;
	size_t BT = (size_t)m->B * m->T, C = (size_t)m->cfg.hidden, nx = (size_t)m->Ml * C;
	size_t nq = 3 * BT * C / (size_t)m->tp, no = BT * C / (size_t)m->tp;

	if (j % 2) { /* attention: d atty in, d qkv out; the residual's gradient passes */
		copy_in((w->datty).data, (a->din2).data, no);
		if ((rc = par_layer_bwd(m, w, a, c, PAR_ATTN, scale, 1)) ||
		    (rc = tensor_alloc(k, &a->gout_a, MEM_ACT, nq, "d qkv out")) ||
		    (rc = tensor_alloc(k, &a->gout_x, MEM_ACT, nx, "d residual out")))
			return rc;
		copy_in((a->gout_a).data, (w->dqkv).data, nq);
		copy_in((a->gout_x).data, (a->dout).data, nx);
		return 0;
	}
	if (m->pc.recompute == PAR_RECOMPUTE_FULL && c < L) { /* what block_drop let go */
		float aux = a->aux_loss;
		unsigned how = par_acts_flags(m);

		for (int i = 0; c > 0 && i < 4; i++)
			if ((i == 0 && (rc = par_acts_layer(m, a, c - 1, GPT_ACTS_POST | how))) ||
			    (rc = par_layer_fwd(m, w, a, c - 1, post_pieces[i])))
				return rc;
		if ((rc = par_acts_layer(m, a, c, GPT_ACTS_PRE | how)) ||
		    (rc = par_layer_fwd(m, w, a, c, PAR_PRE)) ||
		    (rc = par_layer_fwd(m, w, a, c, PAR_QKV)))
			return rc;
		a->aux_loss = aux;
	}
	if (c == L) {
		if ((rc = par_head_bwd(m, w, a, par_layer_input(a, L), scale)))
			return rc;
	} else {
		copy_in((w->dres).data, (a->dout).data, nx);
		copy_in((w->dqkv).data, (a->din2).data, nq);
		if ((rc = par_layer_bwd(m, w, a, c, PAR_QKV, scale, 1)) ||
		    (rc = par_layer_bwd(m, w, a, c, PAR_PRE, scale, 1)) ||
		    (rc = par_layer_ready(m, c, LP_LN1W, LP_PROJW))) /* ln1 and qkv */
			return rc;
	}
	if (c == 0)
		return par_embed_bwd(m, w, a);
	for (int i = 3; i >= 0; i--)
		if ((rc = par_layer_bwd(m, w, a, c - 1, post_pieces[i], scale, 1)))
			return rc;
	if ((rc = par_layer_ready(m, c - 1, LP_PROJW, LP_N))) /* the rest of layer c - 1 */
		return rc;
	if ((rc = tensor_alloc(k, &a->gout_a, MEM_ACT, no, "d attention out")) ||
	    (rc = tensor_alloc(k, &a->gout_x, MEM_ACT, nx, "d residual out")))
		return rc;
	copy_in((a->gout_a).data, (w->datty).data, no);
	copy_in((a->gout_x).data, (w->dres).data, nx);
	return 0;
}

/* What block j sends and receives, in order, into parts[] (up to 2 tensors, allocated
 * for what is received if need be): its output (grad 0, out 1) or input (grad 0, out 0);
 * the gradient of its output (grad 1, out 0) or of its input (grad 1, out 1). The count
 * of parts, or a negative enum emu_err. */
static int block_msg(struct par_model *m, struct par_acts *a, int j, int grad, int out,
		     struct tensor **parts)
{
	const struct kctx *k = &m->k;
	int L = m->cfg.num_layers, c = j / 2, attn = j % 2, rc;
	size_t BT = (size_t)m->B * m->T, C = (size_t)m->cfg.hidden, nx = (size_t)m->Ml * C;
	size_t nq = 3 * BT * C / (size_t)m->tp, no = BT * C / (size_t)m->tp;

	if (!grad && out) { /* unit c: qkv and its output x_c; attention: atty and x */
		parts[0] = attn ? &par_la(a, c)->atty : &par_la(a, c)->qkv;
		parts[1] = attn || c == 0 ? &a->enc : &par_la(a, c - 1)->res3;
		return 2;
	}
	if (!grad) { /* unit c > 0: the attention output and x_{c-1}; attention: qkv and x */
		parts[0] = attn ? &par_la(a, c)->qkv : &par_la(a, c - 1)->atty;
		parts[1] = &a->enc;
		return 2;
	}
	if (out) {
		parts[0] = &a->gout_a;
		parts[1] = &a->gout_x;
		return 2;
	}
	/* the gradient of the output: d qkv (unit c < L) or d atty (attention), and of x */
	EMU_ASSERT(attn || c < L);
	if ((rc = tensor_ensure(k, &a->din2, MEM_ACT, attn ? no : nq, "d output in")) ||
	    (rc = tensor_ensure(k, &a->dout, MEM_ACT, nx, "d residual in")))
		return rc;
	parts[0] = &a->din2;
	parts[1] = &a->dout;
	return 2;
}

/* With --recompute full, once block j's output has left: recomputation without
 * attention (the file's head). */
static void block_drop(struct par_model *m, struct par_acts *a, int j)
{
	const struct kctx *k = &m->k;
	int c = j / 2;

	if (m->pc.recompute != PAR_RECOMPUTE_FULL)
		return;
	if (j % 2) {
		tensor_free(k, &a->enc);
		return;
	}
	if (c == m->cfg.num_layers)
		return; /* the output layer's backward needs its activations */
	if (c > 0)      /* the rest of layer c - 1, but its input, the attention output */
		par_acts_drop(m, a, c - 1, PAR_DROP_POST);
	par_acts_drop(m, a, c, PAR_DROP_PRE);
}

/* ------------------------------------------------------------------------------------ */
/* The stage: sched_exec's callbacks                                                    */

/* Block j of micro-batch mb's activations (allocated on first use). */
static struct par_acts *hx_acts(struct pipe_stage *ps, int mb, int j, int *rc)
{
	struct par_acts *a = pipe_stage_acts(ps, mb * ps->sc->nb + j);

	*rc = a->la ? 0 : block_alloc(ps->m, a, j);
	return a;
}

/* Hands what block jf produced to block jt on the same stage (no message): its output
 * (grad 0) or its input's gradient (grad 1). */
static int hx_pass(struct pipe_stage *ps, struct par_acts *from, int jf, struct par_acts *to,
		   int jt, int grad)
{
	struct tensor *out[2], *in[2];
	int n = block_msg(ps->m, from, jf, grad, 1, out);
	int n2 = block_msg(ps->m, to, jt, grad, 0, in);

	if (n < 0 || n2 < 0)
		return n < 0 ? n : n2;
	for (int i = 0; i < n; i++)
		if (in[i]->data && out[i]->data)
			memcpy(in[i]->data, out[i]->data, out[i]->n * sizeof(float));
	return 0;
}

static int hx_fwd(void *ctx, int mb, int j)
{
	struct pipe_stage *ps = ctx;
	const struct sched *sc = ps->sc;
	int rc;
	struct par_acts *a = hx_acts(ps, mb, j, &rc);
	uint64_t g = ps->io.batch(ps->io.ctx, mb, j == 0 || j == sc->nb - 1, ps->tok, ps->tgt);
	float l;

	if (rc)
		return rc;
	par_acts_begin(ps->m, a, g);
	if ((rc = block_fwd(ps->m, a, j, ps->tok, ps->tgt, &l)))
		return rc;
	ps->loss += (double)l / ps->accum;
	if (j % 2 == 0)
		ps->io.forwarded(ps->io.ctx, g, a);
	/* the next block here takes the output now, so that recomputation can let it go */
	if (j + 1 < sc->nb && sched_stage(sc, mb, j + 1) == ps->stage) {
		struct par_acts *next = hx_acts(ps, mb, j + 1, &rc);

		if (rc || (rc = hx_pass(ps, a, j, next, j + 1, 0)))
			return rc;
		block_drop(ps->m, a, j);
	} else if (j + 1 == sc->nb) {
		block_drop(ps->m, a, j);
	}
	return 0;
}

static int hx_bwd(void *ctx, int mb, int j, int input, int weight)
{
	struct pipe_stage *ps = ctx;
	const struct sched *sc = ps->sc;
	struct par_acts *a = ps->acts[mb * sc->nb + j];
	int rc, last = mb == ps->last_mb[j] && ps->io.last_backward;

	EMU_ASSERT(a); /* (its forward or receive made it) */
	(void)input;
	(void)weight;
	if (last)
		ps->io.last_backward(ps->io.ctx, 1);
	rc = block_bwd(ps->m, a, j, 1.0f / ps->accum);
	if (last)
		ps->io.last_backward(ps->io.ctx, 0);
	if (rc)
		return rc;
	if (j > 0 && sched_stage(sc, mb, j - 1) != ps->stage)
		return 0; /* its send takes the input's gradient, then the block goes */
	if (j > 0 && (rc = hx_pass(ps, a, j, ps->acts[mb * sc->nb + j - 1], j - 1, 1)))
		return rc;
	pipe_stage_acts_free(ps, mb * sc->nb + j);
	return 0;
}

static int hx_send(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe_stage *ps = ctx;
	struct par_acts *a = ps->acts[mb * ps->sc->nb + j];
	struct tensor *part[2];
	struct coll_p2p_comm comm;
	int n, rc = 0;

	EMU_ASSERT(a); /* (its forward or backward ran here) */
	n = block_msg(ps->m, a, j, what == SCHED_GRAD, 1, part);
	comm = coll_set_p2p_comm(ps->d, pipe_stage_comm(ps, peer));
	for (int i = 0; i < n && !rc; i++) {
		EMU_ASSERT(ps->nreq < ps->maxreq);
		rc = coll_isend(ps->d, ps->dev[peer], part[i]->data, part[i]->n,
				&ps->reqs[ps->nreq++]);
	}
	coll_set_p2p_comm(ps->d, comm);
	if (what == SCHED_GRAD) /* the sends hold copies: the block is done */
		pipe_stage_acts_free(ps, mb * ps->sc->nb + j);
	else
		block_drop(ps->m, a, j);
	return n < 0 ? n : rc;
}

static int hx_recv(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe_stage *ps = ctx;
	struct tensor *part[2];
	struct coll_p2p_comm comm;
	int rc, n;
	struct par_acts *a = hx_acts(ps, mb, j, &rc);

	if (rc)
		return rc;
	n = block_msg(ps->m, a, j, what == SCHED_GRAD, 0, part);
	comm = coll_set_p2p_comm(ps->d, pipe_stage_comm(ps, peer));
	for (int i = 0; i < n && !rc; i++)
		rc = coll_recv(ps->d, ps->dev[peer], part[i]->data, part[i]->n);
	coll_set_p2p_comm(ps->d, comm);
	return n < 0 ? n : rc;
}

static int hx_wait(void *ctx)
{
	struct pipe_stage *ps = ctx;
	int rc = 0;

	for (int i = 0; i < ps->nreq; i++) {
		int rc2 = coll_wait(ps->d, ps->reqs[i]);

		rc = rc ? rc : rc2;
	}
	ps->nreq = 0;
	return rc;
}

const struct sched_ops pipe_helix_ops = {hx_fwd, hx_bwd, hx_send, hx_recv, hx_wait, NULL, NULL};
