/* pipe/sched_exec: the interpreter of schedules (sched_exec in pipe/schedule.h), which
 * walks one stage's list on its device through callbacks and so knows no model, and the
 * pipeline diagram of a run (sched_draw). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "pipe/schedule.h"
#include "util.h"

/* Messages between two devices are matched in the order they are posted (emu/coll.h),
 * while a stage may need them in another order. The schedule says in which order each
 * peer sends to this stage, so a RECV first takes in, into their own destinations,
 * whatever the peer sent before the message it wants: an unexpected-message queue. */
struct inbox {
	int *n, *cur;                     /* [p]: messages each peer sends here, taken so far */
	const struct sched_action ***msg; /* [p][n]: the peer's sends to this stage, in order */
	unsigned char *got;               /* [m nb 2]: taken in */
};

static void inbox_init(struct inbox *in, const struct sched *sc, int s)
{
	in->n = emu_xcalloc((size_t)sc->p, sizeof *in->n);
	in->cur = emu_xcalloc((size_t)sc->p, sizeof *in->cur);
	in->msg = emu_xcalloc((size_t)sc->p, sizeof *in->msg);
	in->got = emu_xcalloc((size_t)sc->m * sc->nb * 2, 1);
	for (int q = 0; q < sc->p; q++) {
		in->msg[q] = emu_xcalloc((size_t)sc->n[q] + 1, sizeof **in->msg);
		for (int i = 0; i < sc->n[q]; i++)
			if (sc->a[q][i].op == SCHED_SEND && sc->a[q][i].peer == s)
				in->msg[q][in->n[q]++] = &sc->a[q][i];
	}
}

static void inbox_free(struct inbox *in, const struct sched *sc)
{
	for (int q = 0; q < sc->p; q++)
		free(in->msg[q]);
	free(in->msg);
	free(in->n);
	free(in->cur);
	free(in->got);
}

static int inbox_recv(struct inbox *in, const struct sched *sc, const struct sched_action *a,
		      const struct sched_ops *ops, void *ctx)
{
	size_t want = ((size_t)a->mb * sc->nb + a->block) * 2 + a->msg;
	int q = a->peer, rc = 0;

	while (!in->got[want] && in->cur[q] < in->n[q] && !rc) {
		const struct sched_action *x = in->msg[q][in->cur[q]++];
		/* the sender's block precedes (activations) or follows (gradients) ours */
		int j = x->msg == SCHED_ACT ? x->block + 1 : x->block - 1;

		rc = ops->recv(ctx, x->mb, j, x->msg, q);
		in->got[((size_t)x->mb * sc->nb + j) * 2 + x->msg] = 1;
	}
	return rc;
}

/* One action's SEND or RECV; *t0 is its start (a RECV's wait is not the action's). */
static int exec_p2p(struct inbox *in, const struct sched *sc, const struct sched_action *a,
		    struct emu_dev *d, const struct sched_ops *ops, void *ctx, int64_t *t0)
{
	int rc;

	if (a->op == SCHED_SEND)
		return ops->send(ctx, a->mb, a->block, a->msg, a->peer);
	rc = inbox_recv(in, sc, a, ops, ctx);
	*t0 = emu_now(d);
	return rc;
}

/* With p2p_sync (1F1B): the batch from action i on (see sched_exec), its send first; the
 * index of its last action. A send and, right after it, the receive of the other kind
 * from the same peer are one batch (send_forward_recv_backward, send_backward_recv_forward
 * of the steady state), where stage s has a steady state (fewer warm-up forwards,
 * p - 1 - s, than micro-batches: without one, its last warm-up send_forward and first
 * cool-down recv_backward are separate calls); any other send or receive is one alone
 * (send_forward, recv_forward and the like). */
static int exec_batch(struct inbox *in, const struct sched *sc, int s, int i, struct emu_dev *d,
		      const struct sched_ops *ops, void *ctx, long long *span, int *rc)
{
	const struct sched_action *a = &sc->a[s][i], *b = a + 1;
	int e = i;

	if (a->op == SCHED_SEND && i + 1 < sc->n[s] && b->op == SCHED_RECV && b->peer == a->peer &&
	    b->msg != a->msg && sc->p - 1 - s < sc->m)
		e = i + 1;
	for (int k = i; k <= e && !*rc; k++) { /* (the send first, as listed) */
		int64_t t0 = emu_now(d);

		*rc = exec_p2p(in, sc, &sc->a[s][k], d, ops, ctx, &t0);
		if (span) {
			span[2 * k] = t0;
			span[2 * k + 1] = emu_now(d);
		}
	}
	if (!*rc)
		*rc = ops->sync(ctx);
	return e;
}

/* A receive of the interleaved schedule's batches: the next message peer q sends this
 * stage, whatever it holds, posted into its own destination (Megatron-LM queues what a
 * batch receives by model chunk, for the action that needs it). */
static int inbox_post(struct inbox *in, const struct sched *sc, int q, const struct sched_ops *ops,
		      void *ctx)
{
	const struct sched_action *x;
	int j;

	EMU_ASSERT(in->cur[q] < in->n[q]); /* Megatron's batches receive what is sent */
	x = in->msg[q][in->cur[q]++];
	j = x->msg == SCHED_ACT ? x->block + 1 : x->block - 1;
	in->got[((size_t)x->mb * sc->nb + j) * 2 + x->msg] = 1;
	return ops->post_recv(ctx, x->mb, j, x->msg, q);
}

/* Megatron-LM's get_model_chunk_id: the chunk of a stage's k-th chunk forward (or
 * backward), k taken modulo p v as Python takes it (k < 0 too). */
static int chunk_id(const struct sched *sc, int k, int fwd)
{
	int pv = sc->p * sc->v, c = (k % pv + pv) % pv / sc->p;

	return fwd ? c : sc->v - 1 - c;
}

/* Whether the batch after stage s's k-th chunk forward (backward) receives the next
 * input from the previous stage (gradient from the next): Megatron-Core's
 * recv_tensor_from_previous_stage. Every stage does but the leading one (the first in
 * forward, the last in backward), which runs p - 1 iterations ahead of the stage at the
 * other end: it receives that stage's (k - p + 1)-th output, none before the first and
 * none from its last chunk. */
static int recv_ahead(const struct sched *sc, int s, int k, int fwd)
{
	if (s != (fwd ? 0 : sc->p - 1))
		return 1;
	return k >= sc->p - 1 && chunk_id(sc, k - sc->p + 1, fwd) != (fwd ? sc->v - 1 : 0);
}

/* One batch of the interleaved schedule's (sched_exec): the sends listed in snd[ns]
 * (actions of stage s's list), the receives from the previous stage (rp) and from the
 * next (rn), posted in Megatron's order, then ops->sync. Each send's record spans the
 * batch. */
static int interleaved_batch(struct inbox *in, const struct sched *sc, int s, const int *snd,
			     int ns, int rp, int rn, struct emu_dev *d, const struct sched_ops *ops,
			     void *ctx, long long *span)
{
	int64_t t0 = emu_now(d);
	int rc = 0;

	for (int pass = 0; pass < 2 && !rc; pass++) { /* the previous stage's, then the next's */
		for (int k = 0; k < ns && !rc; k++) {
			const struct sched_action *a = &sc->a[s][snd[k]];

			if ((a->msg == SCHED_GRAD) == !pass)
				rc = ops->send(ctx, a->mb, a->block, a->msg, a->peer);
		}
		if (!rc && (pass ? rn : rp))
			rc = inbox_post(in, sc, (s + (pass ? 1 : sc->p - 1)) % sc->p, ops, ctx);
	}
	if (!rc)
		rc = ops->sync(ctx);
	for (int k = 0; span && k < ns; k++) {
		span[2 * snd[k]] = t0;
		span[2 * snd[k] + 1] = emu_now(d);
	}
	return rc;
}

/* Stage s's list of the interleaved schedule with p2p_sync (sched_exec). Its compute
 * actions are Megatron's iterations: w warm-up forwards, then a forward and a backward
 * each, then w cool-down backwards, each iteration's sends deferred to its batch. */
static int exec_interleaved_sync(struct inbox *in, const struct sched *sc, int s, struct emu_dev *d,
				 const struct sched_ops *ops, void *ctx, long long *span)
{
	int T = sc->m * sc->v, w = sched_warmup(sc, s), last = s == sc->p - 1;
	int snd[2] = {0, 0}, ns = 0, rcv = -1, g = -1, c = 0, rc;

	EMU_ASSERT(ops->post_recv && ops->sync);
	/* recv_forward: the first input, but on the first stage */
	rc = interleaved_batch(in, sc, s, snd, 0, s > 0, 0, d, ops, ctx, NULL);
	for (int i = 0; i <= sc->n[s] && !rc; i++) {
		const struct sched_action *a = i < sc->n[s] ? &sc->a[s][i] : NULL;
		int it = c < w ? c : c < 2 * T - w ? w + (c - w) / 2 : c - T + w;
		int64_t t0;

		if (a && a->op >= SCHED_SEND) { /* a send waits for its batch, a receive */
			EMU_ASSERT(a->op == SCHED_RECV ? rcv < 0 : ns < 2);
			if (a->op == SCHED_SEND)
				snd[ns++] = i;
			else
				rcv = i;
			continue;
		}
		if (g >= 0 && (!a || it != g)) { /* iteration g is over: its batch */
			int k = g < w ? g : g - w, rp = 0, rn = 0;

			if (g < w) { /* send_forward_recv_forward (..._backward at the last) */
				rp = recv_ahead(sc, s, k, 1) && k != T - 1;
				rn = k == w - 1 && w < T && !last;
			} else if (g < T) { /* send_forward_backward_recv_forward_backward */
				rp = recv_ahead(sc, s, w + k, 1) && k != T - w - 1;
				rn = recv_ahead(sc, s, k, 0);
			} else { /* send_backward_recv_backward */
				rn = recv_ahead(sc, s, k, 0) && k != T - 1;
			}
			rc = interleaved_batch(in, sc, s, snd, ns, rp, rn, d, ops, ctx, span);
			ns = 0;
			/* every forward in the warm-up: recv_backward, the first gradient */
			if (!rc && w == T && g == T - 1)
				rc = interleaved_batch(in, sc, s, snd, 0, 0, !last, d, ops, ctx,
						       NULL);
		}
		if (!a || rc)
			break;
		if (rcv >= 0) { /* what this action receives came in an earlier batch */
			const struct sched_action *r = &sc->a[s][rcv];

			EMU_ASSERT(in->got[((size_t)r->mb * sc->nb + r->block) * 2 + r->msg]);
			if (span)
				span[2 * rcv] = span[2 * rcv + 1] = emu_now(d);
			rcv = -1;
		}
		g = it;
		c++;
		t0 = emu_now(d);
		rc = a->op == SCHED_F
			     ? ops->fwd(ctx, a->mb, a->block)
			     : ops->bwd(ctx, a->mb, a->block, a->op != SCHED_W, a->op != SCHED_B);
		if (span) {
			span[2 * i] = t0;
			span[2 * i + 1] = emu_now(d);
		}
	}
	return rc;
}

/* The diagram's bands (rows of cells a stage, one under another) before a long run is
 * scaled to fit instead. */
#define DRAW_BANDS 6

int sched_exec(const struct sched *sc, int s, struct emu_dev *d, const struct sched_ops *ops,
	       void *ctx, long long *span)
{
	struct inbox in;
	int rc = 0;

	inbox_init(&in, sc, s);

	for (int i = 0; i < sc->n[s] && !rc; i++) {
		const struct sched_action *a = &sc->a[s][i];
		int64_t t0 = emu_now(d);

		if (sc->p2p_sync && sc->kind == SCHED_INTERLEAVED) {
			rc = exec_interleaved_sync(&in, sc, s, d, ops, ctx, span);
			break;
		}
		if (sc->p2p_sync && a->op >= SCHED_SEND) {
			EMU_ASSERT(ops->sync);
			i = exec_batch(&in, sc, s, i, d, ops, ctx, span, &rc);
			continue;
		}
		switch (a->op) {
		case SCHED_F:
			rc = ops->fwd(ctx, a->mb, a->block);
			break;
		case SCHED_B:
			rc = ops->bwd(ctx, a->mb, a->block, 1, 0);
			break;
		case SCHED_W:
			rc = ops->bwd(ctx, a->mb, a->block, 0, 1);
			break;
		case SCHED_BW:
			rc = ops->bwd(ctx, a->mb, a->block, 1, 1);
			break;
		case SCHED_SEND:
		case SCHED_RECV:
			rc = exec_p2p(&in, sc, a, d, ops, ctx, &t0);
			break;
		}
		if (span) {
			span[2 * i] = t0;
			span[2 * i + 1] = emu_now(d);
		}
	}
	if (!rc && ops->wait_sends)
		rc = ops->wait_sends(ctx);
	inbox_free(&in, sc);
	return rc;
}

/* One band of the diagram: every stage's cells [c0, c1) of q ns from t0. */
static void draw_band(const struct sched *sc, long long *const *span, long long t0, long long q,
		      int c0, int c1, FILE *out)
{
	int chunked = sc->v > 1 && sc->kind != SCHED_HELIX;

	for (int s = 0; s < sc->p; s++) {
		int i = 0;

		fprintf(out, "stage %-3d|", s);
		for (int c = c0; c < c1; c++) {
			long long mid = t0 + (long long)c * q + q / 2;
			const struct sched_action *a = NULL;

			while (i < sc->n[s] && span[s][2 * i + 1] <= t0 + (long long)c * q)
				i++;
			for (int k = i; k < sc->n[s] && span[s][2 * k] <= mid; k++)
				if (sc->a[s][k].op <= SCHED_BW && span[s][2 * k + 1] > mid)
					a = &sc->a[s][k];
			if (!a)
				fprintf(out, chunked ? "  .  " : "  . ");
			else if (chunked)
				fprintf(out, "%c%2d:%d", "FBWB"[a->op], a -> mb,
					a -> block / sc -> p);
			else if (sc->kind == SCHED_HELIX && a->block % 2)
				fprintf(out, "%c%-2d ", a->op == SCHED_F ? 'A' : 'a', a->mb);
			else
				fprintf(out, "%c%-2d ", "FBWB"[a->op], a -> mb);
		}
		fprintf(out, "|\n");
	}
}

void sched_draw(const struct sched *sc, long long *const *span, int width, void *f)
{
	FILE *out = f;
	long long q = 0, t0 = -1, end = 0;
	int chunked = sc->v > 1 && sc->kind != SCHED_HELIX;
	int cells, scaled = 0, cw = chunked ? 5 : 4; /* characters a cell */

	/* the cell: the shortest compute action, so that each covers a cell's middle and
	 * shows; time from the first action */
	for (int s = 0; s < sc->p; s++)
		for (int i = 0; i < sc->n[s]; i++) {
			long long d = span[s][2 * i + 1] - span[s][2 * i];

			if (sc->a[s][i].op <= SCHED_BW && d > 0 && (!q || d < q))
				q = d;
			t0 = t0 < 0 || span[s][2 * i] < t0 ? span[s][2 * i] : t0;
			end = span[s][2 * i + 1] > end ? span[s][2 * i + 1] : end;
		}
	if (!q)
		return;
	end -= t0;
	width = width / cw > 1 ? width / cw : 1;
	cells = (int)((end + q - 1) / q);
	if (cells > DRAW_BANDS * width) {
		q = (end + DRAW_BANDS * width - 1) / (DRAW_BANDS * width);
		cells = (int)((end + q - 1) / q);
		scaled = 1;
	}
	fprintf(out,
		"pipeline (%s, %d stages, %d micro-batches%s): one cell is %.3g ms%s; F "
		"forward, B backward, W weight backward,%s . idle\n",
		sched_name(sc->kind), sc->p, sc->m, chunked ? ", chunk after the colon" : "",
		(double)q / 1e6,
		scaled ? " (scaled to fit: an action shorter than a cell may not show)" : "",
		sc->kind == SCHED_HELIX ? " A attention forward, a attention backward," : "");
	for (int c0 = 0; c0 < cells; c0 += width) {
		int c1 = c0 + width < cells ? c0 + width : cells;

		if (cells > width)
			fprintf(out, "%.3f .. %.3f ms\n", (double)c0 * (double)q / 1e6,
				(double)c1 * (double)q / 1e6);
		draw_band(sc, span, t0, q, c0, c1, out);
	}
}
