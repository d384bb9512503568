/* pipe/sched_check: proves a schedule valid before it runs (sched_check in
 * pipe/schedule.h): every action well formed, each (micro-batch, block) forwarded and
 * backwarded once per stage that holds it, sends and recvs matched, dependencies met, and
 * no cycle of waits; and counts what a list keeps in flight. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe/schedule.h"
#include "util.h"

static const char *op_name(enum sched_op op)
{
	static const char *const n[] = {
		"forward", "backward (inputs)", "backward (weights)", "backward", "send", "recv"};

	return n[op];
}

static const char *msg_name(enum sched_msg m)
{
	return m == SCHED_ACT ? "activations" : "gradient";
}

/* "micro-batch 3" or "micro-batch 3 (block 5)" */
static const char *what(const struct sched *sc, int mb, int j, char *buf, size_t n)
{
	if (sc->nb > sc->p)
		snprintf(buf, n, "micro-batch %d (block %d)", mb, j);
	else
		snprintf(buf, n, "micro-batch %d", mb);
	return buf;
}

/* For each (micro-batch, block), where in its stage's list each kind of action is (-1:
 * absent). */
struct where {
	int *f, *b, *w, *bw, *ra, *rg, *sa, *sg;
};

#define IDX(sc, mb, j) ((size_t)(mb) * (size_t)(sc)->nb + (size_t)(j))

static int wellformed(const struct sched *sc, char *err, size_t n)
{
	for (int s = 0; s < sc->p; s++)
		for (int i = 0; i < sc->n[s]; i++) {
			const struct sched_action *a = &sc->a[s][i];
			int j = a->block, want, holder;
			char b[64];

			if ((unsigned)a->op > SCHED_RECV || a->mb < 0 || a->mb >= sc->m || j < 0 ||
			    j >= sc->nb) {
				snprintf(err, n,
					 "stage %d, action %d: micro-batch %d or block %d out of "
					 "range (%d micro-batches, %d blocks)",
					 s, i, a->mb, j, sc->m, sc->nb);
				return -1;
			}
			if ((holder = sched_stage(sc, a->mb, j)) != s) {
				snprintf(err, n,
					 "stage %d, action %d: the %s of %s, which stage %d runs",
					 s, i, op_name(a->op), what(sc, a->mb, j, b, sizeof b),
					 holder);
				return -1;
			}
			if (a->op != SCHED_SEND && a->op != SCHED_RECV)
				continue;
			/* who the peer must be: the next block's stage for activations sent and
			 * gradients received, the previous one's otherwise */
			if ((a->op == SCHED_SEND) == (a->msg == SCHED_ACT))
				want = j + 1 < sc->nb ? sched_stage(sc, a->mb, j + 1) : -1;
			else
				want = j > 0 ? sched_stage(sc, a->mb, j - 1) : -1;
			if (a->peer != want || want == s) {
				snprintf(err, n,
					 "stage %d, action %d: a %s of the %s of %s with stage %d, "
					 "but %s",
					 s, i, op_name(a->op), msg_name(a->msg),
					 what(sc, a->mb, j, b, sizeof b), a->peer,
					 want < 0    ? "that block has no such neighbour"
					 : want == s ? "its neighbour block is on the same stage"
						     : "its neighbour block is elsewhere");
				return -1;
			}
		}
	return 0;
}

static int locate(const struct sched *sc, struct where *w, char *err, size_t n)
{
	size_t cells = (size_t)sc->m * sc->nb;
	int **all[] = {&w->f, &w->b, &w->w, &w->bw, &w->ra, &w->rg, &w->sa, &w->sg};

	for (size_t k = 0; k < sizeof all / sizeof *all; k++) {
		*all[k] = emu_xmalloc(cells * sizeof(int));
		for (size_t e = 0; e < cells; e++)
			(*all[k])[e] = -1;
	}
	for (int s = 0; s < sc->p; s++)
		for (int i = 0; i < sc->n[s]; i++) {
			const struct sched_action *a = &sc->a[s][i];
			int *slot;
			char b[64];

			switch (a->op) {
			case SCHED_F:
				slot = w->f;
				break;
			case SCHED_B:
				slot = w->b;
				break;
			case SCHED_W:
				slot = w->w;
				break;
			case SCHED_BW:
				slot = w->bw;
				break;
			case SCHED_RECV:
				slot = a->msg == SCHED_ACT ? w->ra : w->rg;
				break;
			default:
				slot = a->msg == SCHED_ACT ? w->sa : w->sg;
				break;
			}
			if (slot[IDX(sc, a->mb, a->block)] >= 0) {
				snprintf(err, n, "stage %d runs the %s%s%s of %s twice", s,
					 op_name(a->op),
					 a->op == SCHED_SEND || a->op == SCHED_RECV ? " of " : "",
					 a->op == SCHED_SEND || a->op == SCHED_RECV
						 ? msg_name(a->msg)
						 : "",
					 what(sc, a->mb, a->block, b, sizeof b));
				return -1;
			}
			slot[IDX(sc, a->mb, a->block)] = i;
		}
	return 0;
}

static void where_free(struct where *w)
{
	free(w->f);
	free(w->b);
	free(w->w);
	free(w->bw);
	free(w->ra);
	free(w->rg);
	free(w->sa);
	free(w->sg);
}

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		snprintf(err, n, __VA_ARGS__);                                                     \
		return -1;                                                                         \
	} while (0)

/* Every (micro-batch, block): forwarded and backwarded once, in order, with its inputs
 * there before use (received, or from the block before it on the same stage) and its
 * outputs produced before they are sent; every send received by its peer and every
 * recv sent. */
static int complete(const struct sched *sc, const struct where *w, char *err, size_t n)
{
	char b[64], b2[64];

	for (int mb = 0; mb < sc->m; mb++)
		for (int j = 0; j < sc->nb; j++) {
			size_t x = IDX(sc, mb, j);
			int s = sched_stage(sc, mb, j), bwd = w->bw[x] >= 0 ? w->bw[x] : w->b[x];
			int prev = j > 0 ? sched_stage(sc, mb, j - 1) : -1;
			int next = j + 1 < sc->nb ? sched_stage(sc, mb, j + 1) : -1;
			const char *wh = what(sc, mb, j, b, sizeof b);

			if (w->f[x] < 0)
				FAIL("stage %d never runs the forward of %s", s, wh);
			if (bwd < 0)
				FAIL("stage %d never runs the backward of %s", s, wh);
			if (w->bw[x] >= 0 && (w->b[x] >= 0 || w->w[x] >= 0))
				FAIL("stage %d runs the backward of %s both whole and split", s,
				     wh);
			if (w->b[x] >= 0 && w->w[x] < 0)
				FAIL("stage %d never runs the weight backward of %s", s, wh);
			if (bwd < w->f[x])
				FAIL("stage %d runs the backward of %s before its forward", s, wh);
			if (w->w[x] >= 0 && w->w[x] < w->b[x])
				FAIL("stage %d runs the weight backward of %s before its input "
				     "backward",
				     s, wh);
			if (prev >= 0 && prev != s && (w->ra[x] < 0 || w->ra[x] > w->f[x]))
				FAIL("stage %d runs the forward of %s before receiving its input "
				     "from "
				     "stage %d",
				     s, wh, prev);
			if (prev == s && w->f[IDX(sc, mb, j - 1)] > w->f[x])
				FAIL("stage %d runs the forward of %s before that of the block "
				     "before "
				     "it",
				     s, wh);
			if (next >= 0 && next != s && (w->rg[x] < 0 || w->rg[x] > bwd))
				FAIL("stage %d runs the backward of %s before receiving its "
				     "output's "
				     "gradient from stage %d",
				     s, wh, next);
			if (next == s) {
				size_t y = IDX(sc, mb, j + 1);
				int after = w->bw[y] >= 0 ? w->bw[y] : w->b[y];

				if (after > bwd)
					FAIL("stage %d runs the backward of %s before that of the "
					     "block after it",
					     s, wh);
			}
			if (w->sa[x] >= 0 && w->sa[x] < w->f[x])
				FAIL("stage %d sends the activations of %s before computing them",
				     s, wh);
			if (w->sg[x] >= 0 && w->sg[x] < bwd)
				FAIL("stage %d sends the gradient of %s before computing it", s,
				     wh);
			/* pairs: this block's output goes to block j + 1's input */
			if (next >= 0 && next != s) {
				size_t y = IDX(sc, mb, j + 1);
				const char *wn = what(sc, mb, j + 1, b2, sizeof b2);

				if (w->sa[x] < 0 && w->ra[y] >= 0)
					FAIL("stage %d receives the activations of %s from stage "
					     "%d, "
					     "which never sends them",
					     next, wn, s);
				if (w->sa[x] >= 0 && w->ra[y] < 0)
					FAIL("stage %d sends the activations of %s to stage %d, "
					     "which "
					     "never receives them",
					     s, wh, next);
				if (w->rg[x] >= 0 && w->sg[y] < 0)
					FAIL("stage %d receives the gradient of %s from stage %d, "
					     "which "
					     "never sends it",
					     s, wh, next);
				if (w->rg[x] < 0 && w->sg[y] >= 0)
					FAIL("stage %d sends the gradient of %s to stage %d, which "
					     "never "
					     "receives it",
					     next, wn, s);
			}
		}
	return 0;
}

#undef FAIL

/* Runs the lists with sends that never block and recvs that wait for their send; a
 * state where no stage can go on is a cycle of waits. */
static int progress(const struct sched *sc, char *err, size_t n)
{
	int p = sc->p, nb = sc->nb, left = 0, rc = 0;
	int *pc = emu_xcalloc((size_t)p, sizeof *pc);
	/* sent[(mb nb + j) 2 + msg]: block j's activations (out) or input gradient */
	unsigned char *sent = emu_xcalloc((size_t)sc->m * nb * 2, 1);

	for (int s = 0; s < p; s++)
		left += sc->n[s];
	while (left > 0) {
		int moved = 0;

		for (int s = 0; s < p; s++)
			while (pc[s] < sc->n[s]) {
				const struct sched_action *a = &sc->a[s][pc[s]];
				int j = a->block;

				if (a->op == SCHED_RECV) {
					int from = a->msg == SCHED_ACT ? j - 1 : j + 1;

					if (!sent[((size_t)a->mb * nb + from) * 2 + a->msg])
						break;
				} else if (a->op == SCHED_SEND) {
					sent[((size_t)a->mb * nb + j) * 2 + a->msg] = 1;
				}
				pc[s]++;
				left--;
				moved = 1;
			}
		if (!moved)
			break;
	}
	if (left > 0) {
		size_t len = 0;
		char b[64];

		len += (size_t)snprintf(err, n, "no stage can go on (a cycle of waits):");
		for (int s = 0; s < p && len < n; s++) {
			const struct sched_action *a;

			if (pc[s] == sc->n[s])
				continue;
			a = &sc->a[s][pc[s]];
			len += (size_t)snprintf(err + len, n - len,
						" stage %d waits for the %s of %s from stage %d;",
						s, msg_name(a->msg),
						what(sc, a->mb, a->block, b, sizeof b), a->peer);
		}
		if (len < n && len > 0 && err[len - 1] == ';')
			err[len - 1] = 0;
		rc = -1;
	}
	free(pc);
	free(sent);
	return rc;
}

int sched_check(const struct sched *sc, char *err, size_t n)
{
	struct where w = {0};
	int rc;

	if ((rc = wellformed(sc, err, n)))
		return rc;
	rc = locate(sc, &w, err, n);
	if (!rc)
		rc = complete(sc, &w, err, n);
	where_free(&w);
	return rc ? rc : progress(sc, err, n);
}

/* Blocks forwarded and not yet done with (whole backward, or weight pass), in
 * micro-batches: a stage runs nb / p blocks of each. */
double sched_peak_inflight(const struct sched *sc, int s)
{
	int cur = 0, peak = 0;

	for (int i = 0; i < sc->n[s]; i++) {
		enum sched_op op = sc->a[s][i].op;

		cur += op == SCHED_F ? 1 : op == SCHED_BW || op == SCHED_W ? -1 : 0;
		peak = cur > peak ? cur : peak;
	}
	return (double)peak * sc->p / sc->nb;
}
