/* The unit-cost model of pipeline schedules on the virtual cluster, for the tests that
 * run sched_exec (test_sched, test_p2p_sync): a stage's F, B or W of a whole micro-batch
 * costs T ns (HelixPipe's attention attn_cost T), sends and receives are of no bytes. */
#ifndef PEMU_TESTS_UNIT_SCHED_H
#define PEMU_TESTS_UNIT_SCHED_H

#include "clock.h"
#include "coll.h"
#include "pipe/schedule.h"

enum { T = 1000000 }; /* ns of one F, B or W of a whole stage */

struct unit {
	struct emu_dev *d;
	const struct sched *sc;
	struct coll_req *req[1024];
	int nreq;
	long long first, last; /* the stage's first compute start, last compute end */
	float none;
};

static inline int work(struct unit *u, int block, int units)
{
	/* HelixPipe's blocks: a parameter unit costs T, an attention attn_cost T; the
	 * others' blocks T / v, so that a stage's share of a micro-batch costs T */
	double t = u->sc->kind != SCHED_HELIX ? (double)T / u->sc->v
		   : block % 2                ? T * u->sc->attn_cost
					      : T;

	if (u->first < 0)
		u->first = emu_now(u->d);
	/* bytes at 1 byte per ns (hbm_bw 1e9, no launch cost): exactly units t ns */
	emu_compute(u->d, "unit", 0, units * t);
	u->last = emu_now(u->d);
	return 0;
}

static inline int u_fwd(void *ctx, int mb, int block)
{
	(void)mb;
	return work(ctx, block, 1);
}

static inline int u_bwd(void *ctx, int mb, int block, int input, int weight)
{
	(void)mb;
	return work(ctx, block, input + weight);
}

static inline int u_send(void *ctx, int mb, int block, enum sched_msg what, int peer)
{
	struct unit *u = ctx;

	(void)mb;
	(void)block;
	(void)what;
	assert_true(u->nreq < 1024);
	return coll_isend(u->d, peer, &u->none, 0, &u->req[u->nreq++]);
}

static inline int u_recv(void *ctx, int mb, int block, enum sched_msg what, int peer)
{
	struct unit *u = ctx;

	(void)mb;
	(void)block;
	(void)what;
	return coll_recv(u->d, peer, &u->none, 0);
}

static inline int u_wait(void *ctx)
{
	struct unit *u = ctx;
	int rc = 0;

	for (int i = 0; i < u->nreq; i++) {
		int rc2 = coll_wait(u->d, u->req[i]);

		rc = rc ? rc : rc2;
	}
	return rc;
}

/* Its cluster: p devices on the roofline, a kernel's bytes at 1 byte a ns without launch
 * cost, links without latency at 1 byte a ns (D / 4 floats of 4 bytes cross in D ns);
 * dry_run where no data moves. */
static inline struct emu_cluster *unit_cluster(int p, int dry_run)
{
	struct emu_config cfg;

	assert_int_equal(emu_config_default(&cfg, "dgx-a100"), 0);
	cfg.ndev = p;
	cfg.dry_run = dry_run;
	cfg.cost = EMU_COST_ROOFLINE;
	cfg.topo.gpu.hbm_bw = 1e9;
	cfg.topo.gpu.launch_ns = 0;
	for (int l = 0; l < TOPO_LINK_NCLASS; l++) {
		cfg.topo.link[l].lat_ns = 0;
		cfg.topo.link[l].bw_bytes = 1000000000ULL;
	}
	return emu_cluster_new(&cfg);
}

#endif
