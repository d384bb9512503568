/* pipe/schedule: pipeline schedules as data, and their generators; see pipe/schedule.h. */
#include "pipe/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int sched_warmup(const struct sched *sc, int s)
{
	int total = sc->m * sc->v, w = sc->kind == SCHED_INTERLEAVED
					       ? 2 * (sc->p - 1 - s) + (sc->v - 1) * sc->p
					       : sc->p - 1 - s;

	return w < total ? w : total;
}

static void build_1f1b(struct sched *sc, int s)
{
	int m = sc->m, w = sched_warmup(sc, s);

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
	int p = sc->p, v = sc->v, total = sc->m * v, w = sched_warmup(sc, s);

#define MB(k)  ((k) / (p * v) * p + (k) % p)
#define CHF(k) ((k) / p % v)
#define CHB(k) (v - 1 - (k) / p % v)
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
	int m = sc->m, w = sched_warmup(sc, s), nw = 0;

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
