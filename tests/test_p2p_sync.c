/* --p2p-sync's batches (pipe/schedule.h, sched_exec): Megatron-LM's synchronous sends and
 * receives on the unit-cost model (unit_sched.h), each send a rendezvous of D ns. 1F1B:
 * each send or receive a batch of its own, but a send and the receive of the other kind
 * from the same peer after it. Interleaved: Megatron's send_forward_recv_forward,
 * send_forward_backward_recv_forward_backward and send_backward_recv_backward after each
 * iteration, every batch's sends and receives posted together and received ahead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"
#include "unit_sched.h"
#include "pipe/schedule.h"

/* p2p_sync (Megatron-LM's 1F1B): each send or receive a batch of its own, but a send and
 * the receive of the other kind from the same peer right after it in a stage with a
 * steady state (its send_forward_recv_backward and send_backward_recv_forward), then
 * ops->sync; a stage goes on once its sends are over.
 * Sends of D ns (a rendezvous, coll_set_rendezvous, in dry-run) on 1F1B with p = 2:
 * stage 0 forwards micro-batch 0, sends it (stage 1 waits for it from the start) and
 * forwards micro-batch 1 at T + D, where eager sends let it start at T. Every list of
 * 1F1B runs to the end (no deadlock) for p = 2 and 4 and m = 1 to 8, never faster than
 * eager, every batch Megatron's and no compute inside one. */
enum { D = T / 2 };

struct sync_unit {
	struct unit u;
	int posted, received; /* the current batch's sends and receives so far */
	int peer, msg;        /* its send's */
	int violations;       /* a batch not Megatron's, or compute inside one */
};

static int s_send(void *ctx, int mb, int block, enum sched_msg what, int peer)
{
	struct sync_unit *x = ctx;
	int was = coll_set_rendezvous(x->u.d, x->u.sc->p2p_sync);
	int rc;

	(void)mb;
	(void)block;
	assert_true(x->u.nreq < 1024);
	x->violations += (x->received || x->posted) && x->u.sc->p2p_sync;
	x->peer = peer;
	x->msg = (int)what;
	/* D ns at 1 byte a ns: D / 4 floats at 4 bytes on the wire */
	rc = coll_isend(x->u.d, peer, NULL, D / 4, &x->u.req[x->u.nreq++]);
	coll_set_rendezvous(x->u.d, was);
	x->posted = 1;
	return rc;
}

static int s_recv(void *ctx, int mb, int block, enum sched_msg what, int peer)
{
	struct sync_unit *x = ctx;

	(void)mb;
	(void)block;
	/* a pair only as Megatron's steady state makes one: same peer, the other kind, and
	 * a stage with fewer warm-up forwards (p - 1 - s) than micro-batches */
	x->violations +=
		x->u.sc->p2p_sync &&
		(x->received || (x->posted && (peer != x->peer || (int)what == x->msg ||
					       x->u.sc->p - 1 - emu_dev_id(x->u.d) >= x->u.sc->m)));
	x->received = 1;
	return coll_recv(x->u.d, peer, NULL, D / 4);
}

static int s_sync(void *ctx)
{
	struct sync_unit *x = ctx;
	int rc = u_wait(&x->u);

	x->u.nreq = 0;
	x->posted = x->received = 0;
	return rc;
}

static int s_fwd(void *ctx, int mb, int block)
{
	struct sync_unit *x = ctx;

	x->violations += (x->posted || x->received) && x->u.sc->p2p_sync; /* left open */
	return u_fwd(&x->u, mb, block);
}

static int s_bwd(void *ctx, int mb, int block, int input, int weight)
{
	struct sync_unit *x = ctx;

	x->violations += (x->posted || x->received) && x->u.sc->p2p_sync;
	return u_bwd(&x->u, mb, block, input, weight);
}

struct sync_job {
	const struct sched *sc;
	long long end[4], *span[4];
	int violations;
};

static int sync_device(struct emu_dev *d, void *arg)
{
	static const struct sched_ops ops = {s_fwd, s_bwd, s_send, s_recv, s_sync, s_sync, NULL};
	struct sync_job *j = arg;
	struct sync_unit x = {.u = {.d = d, .sc = j->sc, .first = -1}};
	int s = emu_dev_id(d), rc = sched_exec(j->sc, s, d, &ops, &x, j->span[s]);

	j->end[s] = emu_now(d);
	j->violations += x.violations;
	return rc;
}

static void test_p2p_sync_batches(void **state)
{
	(void)state;
	for (int p = 2; p <= 4; p += 2)
		for (int m = 1; m <= 8; m++) {
			long long step[2] = {0, 0}, second_fwd[2] = {0, 0};

			for (int sync = 0; sync < 2; sync++) {
				struct emu_cluster *c = unit_cluster(p, 1);
				struct sync_job j = {0};
				struct sched sc;

				sched_build(&sc, SCHED_1F1B, p, m, 1);
				sc.p2p_sync = sync;
				j.sc = &sc;
				for (int s = 0; s < p; s++)
					j.span[s] =
						calloc(2 * (size_t)sc.n[s] + 1, sizeof(long long));
				if (emu_cluster_run(c, sync_device, &j))
					fail_msg("p %d, m %d: %s", p, m, emu_cluster_report(c));
				assert_int_equal(j.violations, 0);
				for (int s = 0; s < p; s++)
					step[sync] = j.end[s] > step[sync] ? j.end[s] : step[sync];
				for (int i = 0, f = 0; i < sc.n[0]; i++)
					if (sc.a[0][i].op == SCHED_F && f++ == 1)
						second_fwd[sync] = j.span[0][2 * i];
				for (int s = 0; s < p; s++)
					free(j.span[s]);
				emu_cluster_free(c);
				sched_free(&sc);
			}
			assert_true(step[1] >= step[0]);
			if (p == 2 && m >= 2) {
				assert_int_equal(second_fwd[0], T);
				assert_int_equal(second_fwd[1], T + D);
			}
		}
}

/* The interleaved schedule (p > 2; Megatron refuses 2). Per stage, a batch a sync: the first
 * input's (recv_forward), one after each warm-up forward, one after each steady-state
 * forward and backward, one before the cool-down when every forward is in the warm-up
 * (recv_backward), one after each cool-down backward: 1 + m v + w (+1) batches, w the
 * warm-up. Each batch holds at most one send and one receive each way (the output's to
 * the next stage, the gradient's to the previous one), all posted (post_recv, never the
 * blocking recv) before its sync, and no compute. Megatron's lockstep: stage s's b-th
 * batch is iteration b + s (the first stage runs p - 1 ahead of the last), and every
 * message is sent and received in batches of the same iteration, where no stage does all
 * its forwards in the warm-up. Stage 0 sends its first output and waits for it: its
 * second forward starts at T / v + D, eager T / v. Never faster than eager. */
struct il_unit {
	struct unit u;
	int batch;              /* syncs so far: the batch open */
	int sends[2], recvs[2]; /* the open batch's, by direction (0: the previous stage) */
	int violations;
	int *sent_in, *recv_in; /* [m nb 2] by message (sender's block): batch + stage */
};

static size_t il_msg(const struct sched *sc, int mb, int block, enum sched_msg what)
{
	return ((size_t)mb * (size_t)sc->nb + (size_t)block) * 2 + what;
}

static int il_send(void *ctx, int mb, int block, enum sched_msg what, int peer)
{
	struct il_unit *x = ctx;
	int s = emu_dev_id(x->u.d), prev = (s + x->u.sc->p - 1) % x->u.sc->p, rc;
	int was = coll_set_rendezvous(x->u.d, x->u.sc->p2p_sync);

	x->violations += x->u.sc->p2p_sync &&
			 (x->sends[peer != prev]++ || (what == SCHED_ACT) != (peer != prev));
	x->sent_in[il_msg(x->u.sc, mb, block, what)] = x->batch + s;
	coll_set_group(x->u.d, x->u.sc->p2p_sync);
	assert_true(x->u.nreq < 1024);
	rc = coll_isend(x->u.d, peer, NULL, D / 4, &x->u.req[x->u.nreq++]);
	coll_set_rendezvous(x->u.d, was);
	return rc;
}

static int il_post_recv(void *ctx, int mb, int block, enum sched_msg what, int peer)
{
	struct il_unit *x = ctx;
	int s = emu_dev_id(x->u.d), prev = (s + x->u.sc->p - 1) % x->u.sc->p;

	x->violations += x->recvs[peer != prev]++ || (what == SCHED_ACT) != (peer == prev);
	x->recv_in[il_msg(x->u.sc, mb, what == SCHED_ACT ? block - 1 : block + 1, what)] =
		x->batch + s;
	coll_set_group(x->u.d, 1);
	assert_true(x->u.nreq < 1024);
	return coll_irecv(x->u.d, peer, NULL, D / 4, &x->u.req[x->u.nreq++]);
}

static int il_recv(void *ctx, int mb, int block, enum sched_msg what, int peer)
{
	struct il_unit *x = ctx;

	(void)mb;
	(void)block;
	(void)what;
	x->violations += x->u.sc->p2p_sync; /* a batch's receives are posted */
	return coll_recv(x->u.d, peer, NULL, D / 4);
}

static int il_sync(void *ctx)
{
	struct il_unit *x = ctx;
	int rc;

	coll_set_group(x->u.d, 0);
	rc = u_wait(&x->u);
	x->u.nreq = 0;
	x->batch++;
	x->sends[0] = x->sends[1] = x->recvs[0] = x->recvs[1] = 0;
	return rc;
}

static int il_wait(void *ctx)
{
	struct il_unit *x = ctx;
	int rc = u_wait(&x->u);

	x->u.nreq = 0;
	return rc;
}

static int il_open(const struct il_unit *x)
{
	return x->u.sc->p2p_sync && (x->sends[0] || x->sends[1] || x->recvs[0] || x->recvs[1]);
}

static int il_fwd(void *ctx, int mb, int block)
{
	struct il_unit *x = ctx;

	x->violations += il_open(x);
	return u_fwd(&x->u, mb, block);
}

static int il_bwd(void *ctx, int mb, int block, int input, int weight)
{
	struct il_unit *x = ctx;

	x->violations += il_open(x);
	return u_bwd(&x->u, mb, block, input, weight);
}

struct il_job {
	const struct sched *sc;
	long long end[8], *span[8];
	int batches[8], violations[8];
	int *sent_in, *recv_in;
};

static int il_device(struct emu_dev *d, void *arg)
{
	static const struct sched_ops ops = {il_fwd,  il_bwd,  il_send,     il_recv,
					     il_wait, il_sync, il_post_recv};
	struct il_job *j = arg;
	struct il_unit x = {.u = {.d = d, .sc = j->sc, .first = -1}};
	int s = emu_dev_id(d), rc;

	x.sent_in = j->sent_in;
	x.recv_in = j->recv_in;
	rc = sched_exec(j->sc, s, d, &ops, &x, j->span[s]);
	j->end[s] = emu_now(d);
	j->batches[s] = x.batch;
	j->violations[s] = x.violations;
	return rc;
}

/* Runs sc (interleaved) on the unit-cost model with sends of D ns: the step's end, stage
 * 0's second forward's start, and j's record. */
static long long il_run(const struct sched *sc, struct il_job *j, long long *second_fwd)
{
	size_t msgs = (size_t)sc->m * (size_t)sc->nb * 2;
	struct emu_cluster *c = unit_cluster(sc->p, 1);
	long long step = 0;

	memset(j, 0, sizeof *j);
	j->sc = sc;
	j->sent_in = calloc(msgs, sizeof *j->sent_in);
	j->recv_in = calloc(msgs, sizeof *j->recv_in);
	for (int s = 0; s < sc->p; s++)
		j->span[s] = calloc(2 * (size_t)sc->n[s] + 1, sizeof(long long));
	if (emu_cluster_run(c, il_device, j))
		fail_msg("p %d, v %d, m %d: %s", sc->p, sc->v, sc->m, emu_cluster_report(c));
	for (int s = 0; s < sc->p; s++) {
		step = j->end[s] > step ? j->end[s] : step;
		assert_int_equal(j->violations[s], 0);
	}
	for (int i = 0, f = 0; i < sc->n[0]; i++)
		if (sc->a[0][i].op == SCHED_F && f++ == 1)
			*second_fwd = j->span[0][2 * i];
	for (int s = 0; s < sc->p; s++)
		free(j->span[s]);
	emu_cluster_free(c);
	return step;
}

static void test_p2p_sync_interleaved(void **state)
{
	(void)state;
	for (int p = 3; p <= 5; p++)
		for (int v = 2; v <= 3; v++)
			for (int m = p; m <= 3 * p; m += p) {
				struct sched sc;
				struct il_job eager, sync;
				long long fwd[2] = {0, 0}, step[2];
				int T_v = T / v, all_warm[8] = {0}, checked = 0;

				sched_build(&sc, SCHED_INTERLEAVED, p, m, v);
				step[0] = il_run(&sc, &eager, &fwd[0]);
				sc.p2p_sync = 1;
				step[1] = il_run(&sc, &sync, &fwd[1]);
				assert_true(step[1] >= step[0]);
				/* (T / v rounded to the ns) */
				assert_true(fwd[0] >= T_v && fwd[0] <= T_v + 1);
				assert_int_equal(fwd[1], fwd[0] + D);
				for (int s = 0; s < p; s++) {
					int w = sched_warmup(&sc, s);

					all_warm[s] = w == m * v;
					assert_int_equal(sync.batches[s],
							 1 + m * v + w + (w == m * v));
				}
				for (size_t k = 0; k < (size_t)m * sc.nb * 2; k++) {
					int block = (int)(k / 2 % (size_t)sc.nb), q = block % p;
					int r = (k % 2 == SCHED_ACT ? block + 1 : block - 1 + p) %
						p;

					if (!(sync.sent_in[k] || sync.recv_in[k]) || all_warm[q] ||
					    all_warm[r])
						continue;
					assert_int_equal(sync.sent_in[k], sync.recv_in[k]);
					checked++;
				}
				assert_true(checked > 0);
				free(eager.sent_in);
				free(eager.recv_in);
				free(sync.sent_in);
				free(sync.recv_in);
				sched_free(&sc);
			}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_p2p_sync_batches),
		cmocka_unit_test(test_p2p_sync_interleaved),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
