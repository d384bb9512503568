/* schedule: pipeline schedules as data; see schedule.h. */
#include "pipe/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "util.h"

static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "helix"};

const char *sched_name(enum sched_kind k)
{
	return names[k];
}

int sched_kind_of(const char *name)
{
	for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
		if (!strcmp(name, names[k]))
			return k;
	return -1;
}

int sched_constraints(enum sched_kind kind, int p, int m, int v, int L, char *err, size_t n)
{
	if (v > 1 && kind != SCHED_INTERLEAVED) {
		snprintf(err, n,
			 "--schedule %s runs one model chunk a stage; virtual stages (%d) "
			 "need --schedule interleaved",
			 sched_name(kind), v);
		return -1;
	}
	if (L % (p * v)) {
		if (v > 1)
			snprintf(err, n,
				 "--schedule interleaved: the %d layers do not split into pp %d x "
				 "%d virtual stages",
				 L, p, v);
		else
			snprintf(err, n, "--pp %d does not divide the %d layers", p, L);
		return -1;
	}
	if (kind == SCHED_HELIX && (m % p || v != 1)) {
		if (v != 1)
			snprintf(err, n,
				 "--schedule helix places the layers itself; virtual stages "
				 "do not apply");
		else
			snprintf(err, n,
				 "--schedule helix: the %d micro-batches a step are not a multiple "
				 "of pp %d (each group of pp micro-batches spreads its attention "
				 "over the pp stages)",
				 m, p);
		return -1;
	}
	if (kind == SCHED_INTERLEAVED && m % p) {
		snprintf(err, n,
			 "--schedule interleaved: the %d micro-batches a step are not a multiple "
			 "of pp %d",
			 m, p);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Building                                                                             */

void sched_init_empty(struct sched *sc, enum sched_kind kind, int p, int m, int v)
{
	memset(sc, 0, sizeof *sc);
	sc->kind = kind;
	sc->p = p;
	sc->m = m;
	sc->v = v;
	sc->nb = p * v;
	sc->n = emu_xcalloc((size_t)p, sizeof *sc->n);
	sc->a = emu_xcalloc((size_t)p, sizeof *sc->a);
	for (int s = 0; s < p; s++)
		/* every micro-batch and block: at most recv, F, send, recv, B, send, W */
		sc->a[s] = emu_xcalloc(7 * (size_t)m * (size_t)v + 1, sizeof **sc->a);
	sc->cap = 7 * m * v + 1;
}

void sched_push(struct sched *sc, int s, struct sched_action a)
{
	EMU_ASSERT(sc->n[s] < sc->cap);
	sc->a[s][sc->n[s]++] = a;
}

void sched_free(struct sched *sc)
{
	for (int s = 0; sc->a && s < sc->p; s++)
		free(sc->a[s]);
	free(sc->a);
	free(sc->n);
	memset(sc, 0, sizeof *sc);
}

int sched_stage(const struct sched *sc, int mb, int j)
{
	if (sc->kind != SCHED_HELIX)
		return j % sc->p;
	return j % 2 ? ((j - 1) / 2 + 1 + mb) % sc->p : j / 2 % sc->p;
}

void sched_push_fwd(struct sched *sc, int mb, int j)
{
	int s = sched_stage(sc, mb, j), prev = j > 0 ? sched_stage(sc, mb, j - 1) : s;
	int next = j + 1 < sc->nb ? sched_stage(sc, mb, j + 1) : s;

	if (prev != s)
		sched_push(sc, s, (struct sched_action){SCHED_RECV, mb, j, SCHED_ACT, prev});
	sched_push(sc, s, (struct sched_action){SCHED_F, mb, j, SCHED_ACT, -1});
	if (next != s)
		sched_push(sc, s, (struct sched_action){SCHED_SEND, mb, j, SCHED_ACT, next});
}

void sched_push_bwd(struct sched *sc, int mb, int j, enum sched_op op)
{
	int s = sched_stage(sc, mb, j), prev = j > 0 ? sched_stage(sc, mb, j - 1) : s;
	int next = j + 1 < sc->nb ? sched_stage(sc, mb, j + 1) : s;

	if (next != s)
		sched_push(sc, s, (struct sched_action){SCHED_RECV, mb, j, SCHED_GRAD, next});
	sched_push(sc, s, (struct sched_action){op, mb, j, SCHED_GRAD, -1});
	if (prev != s)
		sched_push(sc, s, (struct sched_action){SCHED_SEND, mb, j, SCHED_GRAD, prev});
}

static void build_gpipe(struct sched *sc, int s)
{
	for (int mb = 0; mb < sc->m; mb++)
		sched_push_fwd(sc, mb, s);
	for (int mb = sc->m - 1; mb >= 0; mb--)
		sched_push_bwd(sc, mb, s, SCHED_BW);
}

static void build_1f1b(struct sched *sc, int s)
{
	int m = sc->m, w = sc->p - 1 - s < m ? sc->p - 1 - s : m;

	for (int i = 0; i < w; i++)
		sched_push_fwd(sc, i, s);
	for (int i = 0; i < m - w; i++) {
		sched_push_fwd(sc, w + i, s);
		sched_push_bwd(sc, i, s, SCHED_BW);
	}
	for (int i = m - w; i < m; i++)
		sched_push_bwd(sc, i, s, SCHED_BW);
}

/* Megatron's interleaved order: the k-th chunk forward of a stage is micro-batch
 * (k / pv) p + k % p of chunk (k / p) % v; backwards go through the chunks in reverse. */
static void build_interleaved(struct sched *sc, int s)
{
	int p = sc->p, v = sc->v, total = sc->m * v;
	int w = 2 * (p - 1 - s) + (v - 1) * p;

#define MB(k)  ((k) / (p * v) * p + (k) % p)
#define CHF(k) ((k) / p % v)
#define CHB(k) (v - 1 - (k) / p % v)
	w = w < total ? w : total;
	for (int k = 0; k < w; k++)
		sched_push_fwd(sc, MB(k), CHF(k) * p + s);
	for (int i = 0; i < total - w; i++) {
		sched_push_fwd(sc, MB(w + i), CHF(w + i) * p + s);
		sched_push_bwd(sc, MB(i), CHB(i) * p + s, SCHED_BW);
	}
	for (int i = total - w; i < total; i++)
		sched_push_bwd(sc, MB(i), CHB(i) * p + s, SCHED_BW);
#undef MB
#undef CHF
#undef CHB
}

/* ZB-H1: 1F1B with the backward split, stage s deferring its first s weight passes, so
 * every stage has p micro-batches in flight and the deferred W fill the cool-down. */
static void build_zbh1(struct sched *sc, int s)
{
	int m = sc->m, w = sc->p - 1 - s < m ? sc->p - 1 - s : m, nw = 0;

#define W_NEXT() sched_push(sc, s, (struct sched_action){SCHED_W, nw++, s, SCHED_GRAD, -1})
	for (int i = 0; i < w; i++)
		sched_push_fwd(sc, i, s);
	for (int i = 0; i < m - w; i++) {
		sched_push_fwd(sc, w + i, s);
		sched_push_bwd(sc, i, s, SCHED_B);
		if (i >= s)
			W_NEXT();
	}
	for (int i = m - w; i < m; i++) {
		sched_push_bwd(sc, i, s, SCHED_B);
		if (i >= s)
			W_NEXT();
	}
	while (nw < m)
		W_NEXT();
#undef W_NEXT
}

/* ZB-H2: the greedy list scheduler of schedule.h on unit costs (F = B = W = 1, free
 * transfers). Time advances in whole units, so every arrival meets a free stage. */
static void build_zbh2(struct sched *sc)
{
	int p = sc->p, m = sc->m, left = 3 * p * m;
	int *fdone = emu_xcalloc((size_t)p * m, sizeof *fdone); /* end time, 0: not yet */
	int *bdone = emu_xcalloc((size_t)p * m, sizeof *bdone);
	int *wdone = emu_xcalloc((size_t)p * m, sizeof *wdone);
	int *nf = emu_xcalloc((size_t)p, sizeof *nf), *busy = emu_xcalloc((size_t)p, sizeof *busy);
	int *inflight = emu_xcalloc((size_t)p, sizeof *inflight);

	for (int t = 0; left > 0; t++) {
		for (int s = 0; s < p; s++) {
			int limit = 2 * p - 1, pick = -1;
			enum sched_op op = SCHED_F;

			if (busy[s] > t)
				continue;
			for (int mb = 0; mb < m && pick < 0; mb++) /* a ready B */
				if (fdone[s * m + mb] && fdone[s * m + mb] <= t &&
				    !bdone[s * m + mb] &&
				    (s == p - 1 ||
				     (bdone[(s + 1) * m + mb] && bdone[(s + 1) * m + mb] <= t))) {
					pick = mb;
					op = SCHED_B;
				}
			if (pick < 0 && nf[s] < m && inflight[s] < limit &&
			    (s == 0 ||
			     (fdone[(s - 1) * m + nf[s]] && fdone[(s - 1) * m + nf[s]] <= t))) {
				pick = nf[s]++;
				op = SCHED_F;
			}
			for (int mb = 0; mb < m && pick < 0; mb++) /* else the oldest W */
				if (bdone[s * m + mb] && bdone[s * m + mb] <= t &&
				    !wdone[s * m + mb]) {
					pick = mb;
					op = SCHED_W;
				}
			if (pick < 0)
				continue;
			busy[s] = t + 1;
			left--;
			if (op == SCHED_F) {
				fdone[s * m + pick] = t + 1;
				inflight[s]++;
				sched_push_fwd(sc, pick, s);
			} else if (op == SCHED_B) {
				bdone[s * m + pick] = t + 1;
				sched_push_bwd(sc, pick, s, SCHED_B);
			} else {
				wdone[s * m + pick] = t + 1;
				inflight[s]--;
				sched_push(sc, s,
					   (struct sched_action){SCHED_W, pick, s, SCHED_GRAD, -1});
			}
		}
	}
	free(fdone);
	free(bdone);
	free(wdone);
	free(nf);
	free(busy);
	free(inflight);
}

void sched_build(struct sched *sc, enum sched_kind kind, int p, int m, int v)
{
	if (kind == SCHED_HELIX) {
		sched_build_helix(sc, p, m, v, 1.0);
		return;
	}
	sched_init_empty(sc, kind, p, m, kind == SCHED_INTERLEAVED ? v : 1);
	if (kind == SCHED_ZBH2) {
		build_zbh2(sc);
		return;
	}
	for (int s = 0; s < p; s++) {
		if (kind == SCHED_GPIPE)
			build_gpipe(sc, s);
		else if (kind == SCHED_1F1B)
			build_1f1b(sc, s);
		else if (kind == SCHED_ZBH1)
			build_zbh1(sc, s);
		else
			build_interleaved(sc, s);
	}
}

/* ------------------------------------------------------------------------------------ */
/* Checking                                                                             */

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

/* ------------------------------------------------------------------------------------ */
/* Running and drawing                                                                  */

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

int sched_exec(const struct sched *sc, int s, struct emu_dev *d, const struct sched_ops *ops,
	       void *ctx, long long *span)
{
	struct inbox in;
	int rc = 0;

	inbox_init(&in, sc, s);

	for (int i = 0; i < sc->n[s] && !rc; i++) {
		const struct sched_action *a = &sc->a[s][i];
		int64_t t0 = emu_now(d);

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
			rc = ops->send(ctx, a->mb, a->block, a->msg, a->peer);
			break;
		case SCHED_RECV:
			rc = inbox_recv(&in, sc, a, ops, ctx);
			t0 = emu_now(d); /* the wait is not the action's */
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

void sched_draw(const struct sched *sc, long long *const *span, int width, void *f)
{
	FILE *out = f;
	long long q = 0, t0 = -1, end = 0;
	int chunked = sc->v > 1 && sc->kind != SCHED_HELIX;
	int cells, cw = chunked ? 5 : 4; /* characters a cell */

	/* the cell: the shortest compute action; time from the first action */
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
	if (cells > width) {
		q = (end + width - 1) / width;
		cells = (int)((end + q - 1) / q);
	}
	fprintf(out,
		"pipeline (%s, %d stages, %d micro-batches%s): one cell is %.3g ms; F "
		"forward, B backward, W weight backward,%s . idle\n",
		sched_name(sc->kind), sc->p, sc->m, chunked ? ", chunk after the colon" : "",
		(double)q / 1e6,
		sc->kind == SCHED_HELIX ? " A attention forward, a attention backward," : "");
	for (int s = 0; s < sc->p; s++) {
		int i = 0;

		fprintf(out, "stage %-3d|", s);
		for (int c = 0; c < cells; c++) {
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
