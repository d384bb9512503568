/* pipe/stage: a pipeline stage over a rank's model parts; see pipe/stage.h. */
#include "pipe/stage.h"

#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "util.h"

void pipe_stage_part(const struct sched *sc, int s, int L, unsigned char *held,
		     struct par_part *part)
{
	int p = sc->p;

	memset(held, 0, (size_t)L);
	if (sc->kind == SCHED_HELIX) {
		/* unit c (pre of layer c, post of layer c - 1) on stage c % p; both ends of
		 * the tied embedding on stage 0 */
		for (int l = 0; l < L; l++)
			held[l] = (l % p == s ? PAR_PART_PRE : 0) |
				  ((l + 1) % p == s ? PAR_PART_POST : 0);
		*part = (struct par_part){s == 0, s == 0, held};
		return;
	}
	/* chunk c of stage s is block c p + s, of L / (p v) consecutive layers */
	for (int c = 0, Lb = L / (p * sc->v); c < sc->v; c++)
		for (int l = 0; l < Lb; l++)
			held[(c * p + s) * Lb + l] = PAR_PART_PRE | PAR_PART_POST;
	*part = (struct par_part){s == 0, s == p - 1, held};
}

void pipe_stage_init(struct pipe_stage *ps, const struct sched *sc, int s, struct par_model *m,
		     struct emu_dev *d, const int *dev, int local, int accum,
		     const struct pipe_io *io)
{
	size_t bt = (size_t)m->nsub * m->B * m->cfg.seq_len, chunks = (size_t)local * (size_t)sc->v;
	size_t msgs = chunks * (size_t)m->nsub;
	int helix = sc->kind == SCHED_HELIX;

	memset(ps, 0, sizeof *ps);
	ps->sc = sc;
	ps->stage = s;
	ps->m = m;
	ps->d = d;
	ps->dev = dev;
	ps->local = local;
	ps->accum = accum;
	ps->Lb = helix ? 0 : m->cfg.num_layers / (sc->p * sc->v);
	ps->io = *io;
	ps->tok = emu_xcalloc(bt, sizeof *ps->tok);
	ps->tgt = emu_xcalloc(bt, sizeof *ps->tgt);
	if (helix) {
		ps->maxreq = 4 * local * sc->nb;
		ps->reqs = emu_xcalloc((size_t)ps->maxreq, sizeof *ps->reqs);
	}
	ps->nacts = helix ? local * sc->nb : (int)chunks;
	ps->acts = emu_xcalloc((size_t)ps->nacts, sizeof *ps->acts);
	ps->act_req = emu_xcalloc(msgs, sizeof *ps->act_req);
	ps->grad_req = emu_xcalloc(msgs, sizeof *ps->grad_req);
	ps->din = emu_xcalloc(msgs, sizeof *ps->din);
	ps->pend = emu_xcalloc(2 * (size_t)m->nsub, sizeof *ps->pend);
	ps->last_mb = emu_xcalloc((size_t)sc->nb, sizeof *ps->last_mb);
	for (int j = 0; j < sc->nb; j++)
		ps->last_mb[j] = -1;
	for (int i = 0; i < sc->n[s]; i++)
		if (sc->a[s][i].op == SCHED_W || sc->a[s][i].op == SCHED_BW)
			ps->last_mb[sc->a[s][i].block] = sc->a[s][i].mb;
}

void pipe_stage_free(struct pipe_stage *ps)
{
	for (int x = 0; ps->acts && x < ps->nacts; x++)
		if (ps->acts[x])
			pipe_stage_acts_free(ps, x);
	free(ps->acts);
	free(ps->reqs);
	free(ps->act_req);
	free(ps->grad_req);
	free(ps->din);
	for (int i = 0; ps->pend && i < ps->npend; i++)
		tensor_free(&ps->m->k, &ps->pend[i].part);
	free(ps->pend);
	free(ps->last_mb);
	free(ps->tok);
	free(ps->tgt);
	memset(ps, 0, sizeof *ps);
}

struct par_acts *pipe_stage_acts(struct pipe_stage *ps, int x)
{
	EMU_ASSERT(x >= 0 && x < ps->nacts);
	if (!ps->acts[x])
		ps->acts[x] = emu_xcalloc(1, sizeof *ps->acts[x]);
	return ps->acts[x];
}

void pipe_stage_acts_free(struct pipe_stage *ps, int x)
{
	EMU_ASSERT(x >= 0 && x < ps->nacts && ps->acts[x]);
	if (par_acts_held(ps->acts[x]))
		par_acts_free(ps->m, ps->acts[x]);
	free(ps->acts[x]);
	ps->acts[x] = NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Blocks of consecutive layers (every schedule but HelixPipe)                          */

/* The activations of micro-batch mb's chunk holding block j (allocated on first use). */
static struct par_acts *chunk_acts(struct pipe_stage *ps, int mb, int j, int *rc)
{
	struct par_acts *a = pipe_stage_acts(ps, mb * ps->sc->v + j / ps->sc->p);
	int l0 = j * ps->Lb;

	*rc = par_acts_held(a) ? 0 : par_acts_alloc(ps->m, a, l0, l0 + ps->Lb);
	return a;
}

static int chunk_fwd(void *ctx, int mb, int j)
{
	struct pipe_stage *ps = ctx;
	int rc;
	struct par_acts *a = chunk_acts(ps, mb, j, &rc);
	uint64_t g = ps->io.batch(ps->io.ctx, mb, a->l0 == 0 || a->l1 == ps->m->cfg.num_layers,
				  ps->tok, ps->tgt);
	float l;

	if (rc)
		return rc;
	par_acts_begin(ps->m, a, g);
	if ((rc = par_forward_part(ps->m, a, ps->tok, ps->tgt, &l)))
		return rc;
	ps->loss += (double)l / ps->accum;
	ps->io.forwarded(ps->io.ctx, g, a);
	return 0;
}

static int chunk_bwd(void *ctx, int mb, int j, int input, int weight)
{
	struct pipe_stage *ps = ctx;
	int x = mb * ps->sc->v + j / ps->sc->p, ns = ps->m->nsub, rc;
	struct par_acts *a = ps->acts[x];
	size_t n = (size_t)ps->m->Ml * (size_t)ps->m->cfg.hidden;
	int last = weight && mb == ps->last_mb[j] && ps->io.last_backward;

	EMU_ASSERT(a); /* (its forward or receive made it) */
	if (last)
		ps->io.last_backward(ps->io.ctx, 1);
	rc = par_backward_part(ps->m, a, 1.0f / ps->accum, input, weight);
	if (last)
		ps->io.last_backward(ps->io.ctx, 0);
	if (rc)
		return rc;
	for (int s = 0; input && a->l0 > 0 && s < ns; s++) { /* for the previous stage */
		struct tensor *d = &ps->din[x * ns + s];

		if ((rc = tensor_alloc(&ps->m->k, d, MEM_COMM, n, "pipeline gradient out")))
			return rc;
		if (d->data)
			memcpy(d->data, ps->m->work[s].dres.data, n * sizeof(float));
	}
	if (!weight)
		return 0;
	/* done with this micro-batch: its output went to the next stage, whose gradient
	 * has come back, so that send is over */
	for (int s = 0; s < ns; s++) {
		struct coll_req **r = &ps->act_req[x * ns + s];

		if (*r && (rc = coll_wait(ps->d, *r)))
			return rc;
		*r = NULL;
	}
	pipe_stage_acts_free(ps, x);
	return 0;
}

/* A message of n elements crosses the cut: all of it, or with scatter this rank's 1/t
 * (Megatron-LM's split_tensor_into_1d_equal_chunks: rank r's the r-th); its elements
 * and offset. */
static size_t cut_part(const struct pipe_stage *ps, size_t n, size_t *off)
{
	size_t t = (size_t)ps->m->tp;

	*off = 0;
	if (!ps->scatter || t < 2 || n % t)
		return n;
	*off = (size_t)ps->m->r * (n / t);
	return n / t;
}

/* Megatron-LM's pipeline batches its sends and receives (batch_p2p_comm) unless it
 * overlaps them (overlap_p2p_comm, which it forces off without virtual stages and leaves
 * on by default with them; --no-overlap-p2p-communication, pemu's --p2p-sync there), and
 * PyTorch runs a batch on the pipeline group's communicator; overlapped, they go one by
 * one (_p2p_ops), each on a communicator PyTorch makes for the pair (ProcessGroupNCCL's
 * pointToPoint, the process group started lazily, as Megatron-LM's init_process_group
 * without a device_id leaves it; with 2 stages one way goes on the world group, one by
 * one, a pair's too). HelixPipe's and the other schedules' batched, as 1F1B's (an
 * assumption). */
struct coll_p2p_comm pipe_stage_comm(const struct pipe_stage *ps, int peer)
{
	int pair[2] = {ps->dev[ps->stage], ps->dev[peer]};

	if (ps->sc->kind == SCHED_INTERLEAVED && !ps->sc->p2p_sync)
		return coll_comm_of(ps->d, pair, 2);
	return coll_comm_of(ps->d, ps->dev, ps->sc->p);
}

/* Each sub-batch's output or input gradient (Ml, h) crosses the cut as its own message. */
static int chunk_send(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe_stage *ps = ctx;
	int x = mb * ps->sc->v + j / ps->sc->p, ns = ps->m->nsub, rc = 0;
	size_t off, n = cut_part(ps, (size_t)ps->m->Ml * (size_t)ps->m->cfg.hidden, &off);
	int rdv = coll_set_rendezvous(ps->d, ps->sc->p2p_sync);
	struct coll_p2p_comm comm = coll_set_p2p_comm(ps->d, pipe_stage_comm(ps, peer));

	/* the interleaved schedule's batch posts its sends and receives as one group, until
	 * chunk_sync */
	coll_set_group(ps->d, ps->sc->p2p_sync && ps->sc->kind == SCHED_INTERLEAVED);
	for (int s = 0; s < ns && !rc; s++) {
		int y = x * ns + s;
		const float *src;

		if (what == SCHED_ACT) { /* the chunk's output */
			struct par_acts *sub = par_sub(ps->acts[x], s);

			src = par_la(sub, sub->l1 - 1)->res3.data;
			rc = coll_isend(ps->d, ps->dev[peer], src ? src + off : NULL, n,
					&ps->act_req[y]);
			continue;
		}
		/* the send holds its own copy (eager, emu/coll.h): the gradient's buffer can
		 * go (the chunk's activations may be gone already) */
		src = ps->din[y].data;
		rc = coll_isend(ps->d, ps->dev[peer], src ? src + off : NULL, n, &ps->grad_req[y]);
		tensor_free(&ps->m->k, &ps->din[y]);
	}
	coll_set_rendezvous(ps->d, rdv);
	coll_set_p2p_comm(ps->d, comm);
	return rc;
}

static int chunk_sync(void *ctx);

/* A message into dst (n elements): with scatter, this rank's 1/t received and the whole
 * all-gathered over tp (gather_split_1d_tensor), the others' parts from their peers;
 * with p2p_sync after the batch's sends are over too, as Megatron-LM gathered after its
 * torch.cuda.synchronize. Posted (post): the receive is the batch's, into dst or this
 * rank's part, and chunk_sync completes it. */
static int cut_recv(struct pipe_stage *ps, int peer, float *dst, size_t n, int post)
{
	size_t off, part = cut_part(ps, n, &off);
	struct pipe_recv *q = post ? &ps->pend[ps->npend] : NULL;
	struct tensor mine = {0};
	int rc;

	if (q) {
		EMU_ASSERT(ps->npend < 2 * ps->m->nsub);
		ps->npend++;
		q->dst = dst;
		if (part == n)
			return coll_irecv(ps->d, ps->dev[peer], dst, n, &q->req);
		rc = tensor_alloc(&ps->m->k, &q->part, MEM_COMM, part, "pipeline part received");
		return rc ? rc : coll_irecv(ps->d, ps->dev[peer], q->part.data, part, &q->req);
	}
	if (part == n)
		return coll_recv(ps->d, ps->dev[peer], dst, n);
	rc = tensor_alloc(&ps->m->k, &mine, MEM_COMM, part, "pipeline part received");
	if (!rc)
		rc = coll_recv(ps->d, ps->dev[peer], mine.data, part);
	if (!rc && ps->sc->p2p_sync)
		rc = chunk_sync(ps);
	if (!rc)
		rc = coll_all_gather(ps->d, ps->m->g, mine.data, dst, part);
	tensor_free(&ps->m->k, &mine);
	return rc;
}

static int chunk_recv_as(struct pipe_stage *ps, int mb, int j, enum sched_msg what, int peer,
			 int post)
{
	size_t n = (size_t)ps->m->Ml * (size_t)ps->m->cfg.hidden;
	int rc;
	struct par_acts *a = chunk_acts(ps, mb, j, &rc);

	for (int s = 0; !rc && s < par_nsub(a); s++) {
		struct par_acts *sub = par_sub(a, s);

		if (what == SCHED_ACT)
			rc = cut_recv(ps, peer, sub->enc.data, n, post);
		else if (!(rc = tensor_alloc(&ps->m->k, &sub->dout, MEM_ACT, n, "d stage output")))
			rc = cut_recv(ps, peer, sub->dout.data, n, post);
	}
	return rc;
}

/* The receives on the sends' communicator (a grouped receive's spacing takes it) */
static int chunk_recv_on(struct pipe_stage *ps, int mb, int j, enum sched_msg what, int peer,
			 int post)
{
	struct coll_p2p_comm comm = coll_set_p2p_comm(ps->d, pipe_stage_comm(ps, peer));
	int rc = chunk_recv_as(ps, mb, j, what, peer, post);

	coll_set_p2p_comm(ps->d, comm);
	return rc;
}

static int chunk_recv(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	return chunk_recv_on(ctx, mb, j, what, peer, 0);
}

static int chunk_post_recv(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe_stage *ps = ctx;

	coll_set_group(ps->d, 1);
	return chunk_recv_on(ps, mb, j, what, peer, 1);
}

static int chunk_wait(void *ctx)
{
	struct pipe_stage *ps = ctx;
	int rc = 0;

	for (int y = 0; y < ps->local * ps->sc->v * ps->m->nsub; y++) {
		int rc2 = ps->grad_req[y] ? coll_wait(ps->d, ps->grad_req[y]) : 0;

		rc = rc ? rc : rc2;
		ps->grad_req[y] = NULL;
		tensor_free(&ps->m->k, &ps->din[y]);
	}
	return rc;
}

/* p2p_sync's end of a batch: every send posted so far over (the batch's), then the
 * batch's posted receives, then their parts all-gathered, in the order received. */
static int chunk_sync(void *ctx)
{
	struct pipe_stage *ps = ctx;
	int rc = 0;

	coll_set_group(ps->d, 0);
	for (int y = 0; y < ps->local * ps->sc->v * ps->m->nsub; y++)
		for (int w = 0; w < 2; w++) {
			struct coll_req **r = w ? &ps->grad_req[y] : &ps->act_req[y];
			int rc2 = *r ? coll_wait(ps->d, *r) : 0;

			rc = rc ? rc : rc2;
			*r = NULL;
		}
	for (int i = 0; i < ps->npend; i++) {
		int rc2 = ps->pend[i].req ? coll_wait(ps->d, ps->pend[i].req) : 0;

		rc = rc ? rc : rc2;
		ps->pend[i].req = NULL;
	}
	for (int i = 0; i < ps->npend; i++) {
		struct pipe_recv *q = &ps->pend[i];

		if (!rc && q->part.n) /* (a part of the message, not all of it) */
			rc = coll_all_gather(ps->d, ps->m->g, q->part.data, q->dst, q->part.n);
		tensor_free(&ps->m->k, &q->part);
	}
	ps->npend = 0;
	return rc;
}

static const struct sched_ops chunk_ops = {chunk_fwd,  chunk_bwd,  chunk_send,     chunk_recv,
					   chunk_wait, chunk_sync, chunk_post_recv};

int pipe_stage_step(struct pipe_stage *ps, struct emu_group *emb, long long *span)
{
	int rc;

	ps->loss = 0;
	rc = sched_exec(ps->sc, ps->stage, ps->d,
			ps->sc->kind == SCHED_HELIX ? &pipe_helix_ops : &chunk_ops, ps, span);
	if (!rc && emb)
		rc = par_sum_tied_embedding(ps->m, emb);
	return rc;
}
