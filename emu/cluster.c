/* cluster: the cluster and its runs, the rendezvous of ops and waiting (channels are
 * chan.c's, the pool of workers fiber.c's, errors and deadlock reports fail.c's). See
 * internal.h for how devices meet and wait. */
#include "internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "util.h"

#define CHAN_BUCKETS    4096
#define DEV_STACK_BYTES (2u << 20)
/* Yields a waiting device makes before it sleeps, shared among the live devices: a few
 * hundred for 8 devices (a tiny collective then costs microseconds), a handful for 1024
 * (where spinning would only steal the core from the devices still to arrive). */
#define SPIN_TOTAL 2048
#define SPIN_MAX   256

/* ------------------------------------------------------------------------------------ */
/* Cluster                                                                              */

struct emu_cluster *emu_cluster_new(const struct emu_config *cfg)
{
	struct emu_cluster *c = emu_xcalloc(1, sizeof *c);
	pthread_mutexattr_t ma;
	char why[256];

	if (emu_config_check(cfg, why, sizeof why))
		emu_die("emu_cluster_new: %s", why);
	c->cfg = *cfg;
	if (!c->cfg.mem_cap)
		c->cfg.mem_cap = cfg->topo.gpu.hbm_bytes;
	c->devs = emu_xcalloc((size_t)cfg->ndev, sizeof *c->devs);
	/* Held for short stretches by every arrival, wait and wake: an adaptive mutex spins a
	 * little before it sleeps in the kernel. */
	if (pthread_mutexattr_init(&ma) ||
	    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP) ||
	    pthread_mutex_init(&c->lock, &ma) || pthread_cond_init(&c->rq_cond, NULL))
		emu_die("pthread_mutex_init failed");
	pthread_mutexattr_destroy(&ma);
	for (int i = 0; i < cfg->ndev; i++) {
		struct emu_dev *d = &c->devs[i];

		d->c = c;
		d->id = i;
		d->slow = 1;
		if (pthread_cond_init(&d->cond, NULL))
			emu_die("pthread_cond_init failed");
	}
	c->fault_kind = -1;
	c->node_slow = emu_xmalloc((size_t)cfg->topo.nodes * sizeof *c->node_slow);
	for (int n = 0; n < cfg->topo.nodes; n++)
		c->node_slow[n] = 1;
	for (int i = 0; i < cfg->nslow; i++)
		if (cfg->slow[i].dev < 0)
			c->node_slow[cfg->slow[i].node] *= cfg->slow[i].x;
	c->nrun = cfg->ndev;
	c->chan_nbuckets = CHAN_BUCKETS;
	c->chan_tab = emu_xcalloc(c->chan_nbuckets, sizeof *c->chan_tab);
	return c;
}

/* An op done with: onto its channel's spare list (freed under ASan, which then sees a
 * use after free). Under the cluster lock. */
static void op_free(struct op *op)
{
	for (int i = 0; i < op->ch->n; i++) {
		if (op->has[i]) {
			free(op->arg[i].send_counts);
			free(op->arg[i].recv_counts);
			free(op->arg[i].owned);
		}
	}
#ifdef __SANITIZE_ADDRESS__
	free(op->arg);
	free(op->has);
	free(op);
#else
	op->next = op->ch->spare;
	op->ch->spare = op;
#endif
}

/* Call seq of channel ch, no member arrived yet: a spare op if there is one (cheaper
 * than three callocs on the hot path). Under the cluster lock. */
static struct op *op_new(struct emu_group *ch, uint64_t seq)
{
	struct op *op = ch->spare;
	struct op_arg *arg;
	unsigned char *has;

	if (op) {
		ch->spare = op->next;
		arg = op->arg;
		has = op->has;
		memset(arg, 0, (size_t)ch->n * sizeof *arg);
		memset(has, 0, (size_t)ch->n);
		memset(op, 0, sizeof *op);
	} else {
		op = emu_xcalloc(1, sizeof *op);
		arg = emu_xcalloc((size_t)ch->n, sizeof *arg);
		has = emu_xcalloc((size_t)ch->n, 1);
	}
	op->ch = ch;
	op->seq = seq;
	op->arg = arg;
	op->has = has;
	atomic_init(&op->ready, 0);
	atomic_init(&op->next_task, 0);
	atomic_init(&op->tasks_done, 0);
	return op;
}

/* Forgets every op of every channel: channels start the next run at call 0. */
static void chans_reset(struct emu_cluster *c)
{
	for (size_t b = 0; b < c->chan_nbuckets; b++) {
		for (struct emu_group *ch = c->chan_tab[b]; ch; ch = ch->hnext) {
			while (ch->pending) {
				struct op *op = ch->pending;

				ch->pending = op->next;
				op_free(op);
			}
			memset(ch->seq, 0, (size_t)ch->n * sizeof *ch->seq);
		}
	}
}

static void dev_reset_results(struct emu_dev *d)
{
	free(d->err_report);
	d->err_report = NULL;
	d->err = 0;
	d->err_kind = NULL;
	memset(&d->stats, 0, sizeof d->stats);
	d->tag = 0;
	d->sm_margin = 0;
	d->p2p_ce = 0;
	d->p2p_rdv = 0;
	d->p2p_group = 0;
	d->groups = 0;
	d->coll_ctas = 0;
	d->p2p_comm = (struct coll_p2p_comm){0, 0};
	d->clock_failed = 0;
	memset(d->stream, 0, sizeof d->stream);
	d->flops = 0;
	d->compute_ns = 0;
	d->fault_calls = 0;
	free(d->dead);
	d->dead = NULL;
	d->slow = 1;
	free(d->gemm_memo);
	d->gemm_memo = NULL;
	for (int i = 0; i < d->c->cfg.nslow; i++)
		if (d->c->cfg.slow[i].dev == d->id)
			d->slow *= d->c->cfg.slow[i].x;
	trace_reset(d);
}

void emu_cluster_free(struct emu_cluster *c)
{
	if (!c)
		return;
	chans_reset(c);
	for (size_t b = 0; b < c->chan_nbuckets; b++) {
		struct emu_group *ch = c->chan_tab[b];

		while (ch) {
			struct emu_group *next = ch->hnext;

			free(ch->devs);
			free(ch->seq);
			free(ch->hier_order);
			free(ch->rep_member);
			while (ch->spare) {
				struct op *op = ch->spare;

				ch->spare = op->next;
				free(op->arg);
				free(op->has);
				free(op);
			}
			free(ch);
			ch = next;
		}
	}
	for (int i = 0; i < c->cfg.ndev; i++) {
		dev_reset_results(&c->devs[i]);
		free(c->devs[i].trace.ev);
		free(c->devs[i].trace.mem);
		while (c->devs[i].req_spare) {
			struct coll_req *r = c->devs[i].req_spare;

			c->devs[i].req_spare = r->next;
			free(r);
		}
		pthread_cond_destroy(&c->devs[i].cond);
	}
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->rq_cond);
	free(c->chan_tab);
	free(c->rep);
	free(c->node_slow);
	free(c->devs);
	free(c->err_report);
	free(c);
}

const char *emu_cluster_report(const struct emu_cluster *c)
{
	return c->err_report ? c->err_report : "";
}

const char *emu_cluster_err_kind(const struct emu_cluster *c)
{
	return c->err_kind ? c->err_kind : emu_err_name(c->err);
}

int64_t emu_cluster_wall_ns(const struct emu_cluster *c)
{
	return c->wall_ns;
}

const struct emu_config *emu_cluster_config(const struct emu_cluster *c)
{
	return &c->cfg;
}

struct emu_dev *emu_cluster_dev(struct emu_cluster *c, int id)
{
	EMU_ASSERT(id >= 0 && id < c->cfg.ndev);
	return &c->devs[id];
}

int emu_dev_id(const struct emu_dev *d)
{
	return d->id;
}

int emu_dev_count(const struct emu_dev *d)
{
	return d->c->cfg.ndev;
}

int emu_dev_dry_run(const struct emu_dev *d)
{
	return d->c->cfg.dry_run;
}

const struct topo *emu_dev_topo(const struct emu_dev *d)
{
	return &d->c->cfg.topo;
}

/* ------------------------------------------------------------------------------------ */
/* Rendezvous                                                                           */

/* Lets a blocked device go on: its thread's condition, or back on a run queue (that of
 * the worker running device by, which woke it, if any). */
void dev_wake_locked(struct emu_cluster *c, struct emu_dev *d, const struct emu_dev *by)
{
	if (c->pool)
		fiber_wake_locked(c, d, by);
	else
		pthread_cond_signal(&d->cond);
}

static void wake_waiters_locked(struct emu_cluster *c, struct op *op, const struct emu_dev *by)
{
	for (int i = 0; i < op->ch->n; i++) {
		struct emu_dev *w = &c->devs[op->ch->devs[i]];

		if (w->blocked && w->wait_op == op) {
			w->blocked = 0;
			c->nblocked--;
			dev_wake_locked(c, w, by);
		}
	}
}

int rdv_arrive(struct emu_dev *d, struct emu_group *ch, int member, const struct op_arg *arg,
	       struct op **out)
{
	struct emu_cluster *c = d->c;
	uint64_t k;
	struct op *op, **tail;

	pthread_mutex_lock(&c->lock);
	if (atomic_load(&c->failed)) {
		pthread_mutex_unlock(&c->lock);
		return EMU_EABORTED;
	}
	if (ch->fold_bad >= 0) {
		struct emu_str s = {0};

		emu_str_addf(&s, "device %d: a call on group ", d->id);
		chan_describe(&s, ch);
		emu_str_addf(&s,
			     " of devices that run and devices folded onto them (dry-run "
			     "folding), but device %d's representative %d is not in it",
			     ch->devs[ch->fold_bad], c->rep[ch->devs[ch->fold_bad]]);
		cluster_fail_locked(c, EMU_EINVAL, d->id, s.s);
		pthread_mutex_unlock(&c->lock);
		return EMU_EINVAL;
	}
	k = ch->seq[member]++;
	for (tail = &ch->pending; *tail && (*tail)->seq != k; tail = &(*tail)->next)
		;
	op = *tail;
	if (!op) {
		op = op_new(ch, k);
		*tail = op;
	}
	for (int i = 0; i < ch->n; i++) {
		if (op->has[i]) {
			op->mismatch |= coll_mismatch(&op->arg[i], arg);
			break;
		}
	}
	op->arg[member] = *arg;
	op->has[member] = 1;
	op->arrived++;
	op->refs++;
	if (op->arrived == ch->nlive) {
		*tail = op->next; /* no one else will look for this seq */
		op->next = NULL;
		fold_fill_mirrors(op);
		op->mismatch |= coll_op_resolve(c, op);
		if (op->mismatch) {
			cluster_fail_locked(c, EMU_EMISMATCH, -1, fail_mismatch_report(op));
		} else {
			atomic_store_explicit(&op->ready, 1, memory_order_release);
			wake_waiters_locked(c, op, d);
		}
	}
	pthread_mutex_unlock(&c->lock);
	*out = op;
	return 0;
}

void rdv_release(struct emu_dev *d, struct op *op)
{
	struct emu_cluster *c = d->c;

	pthread_mutex_lock(&c->lock);
	EMU_ASSERT(op->refs > 0);
	if (--op->refs == 0 && op->arrived == op->ch->n)
		op_free(op);
	pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------------------------------------ */
/* Waiting                                                                              */

int dev_wait_ready(struct emu_dev *d, struct op *op, int member)
{
	struct emu_cluster *c = d->c;
	int spins;

	if (atomic_load_explicit(&op->ready, memory_order_acquire))
		return 0;
	/* On the pool, parking is two context switches: no spinning. */
	spins = c->pool ? 0 : SPIN_TOTAL / (c->cfg.ndev > 0 ? c->cfg.ndev : 1);
	if (spins > SPIN_MAX)
		spins = SPIN_MAX;
	for (int i = 0; i < spins; i++) {
		sched_yield();
		if (atomic_load_explicit(&op->ready, memory_order_acquire))
			return 0;
		if (atomic_load_explicit(&c->failed, memory_order_relaxed))
			break;
	}
	pthread_mutex_lock(&c->lock);
	while (!atomic_load_explicit(&op->ready, memory_order_acquire) &&
	       !atomic_load(&c->failed)) {
		d->blocked = 1;
		d->wait_op = op;
		d->wait_member = member;
		c->nblocked++;
		fail_check_deadlock_locked(c);
		while (d->blocked && !atomic_load(&c->failed)) {
			if (c->pool)
				fiber_park_locked(d);
			else
				pthread_cond_wait(&d->cond, &c->lock);
		}
		if (d->blocked) {
			d->blocked = 0;
			c->nblocked--;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return atomic_load_explicit(&op->ready, memory_order_acquire) ? 0 : EMU_EABORTED;
}

void dev_wait_tasks(struct emu_dev *d, struct op *op)
{
	int t;

	(void)d;
	while ((t = atomic_fetch_add(&op->next_task, 1)) < op->ntasks) {
		coll_op_run_task(op, t);
		atomic_fetch_add_explicit(&op->tasks_done, 1, memory_order_release);
	}
	/* The tasks left are running on other members: short, and never waiting on anyone. */
	while (atomic_load_explicit(&op->tasks_done, memory_order_acquire) < op->ntasks)
		sched_yield();
}

int emu_barrier(struct emu_dev *d)
{
	struct op_arg arg = {.kind = OP_BARRIER};
	struct op *op;
	int rc = rdv_arrive(d, d->c->world, d->id, &arg, &op);

	if (rc)
		return rc;
	rc = dev_wait_ready(d, op, d->id);
	rdv_release(d, op);
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Running                                                                              */

void *dev_main(void *p)
{
	struct emu_dev *d = p;
	struct emu_cluster *c = d->c;
	int rc;

	d->wall_t0 = emu_wall_ns();
	trace_add_mem(d);
	rc = c->fn(d, c->fn_arg);
	/* Requests the function left unwaited: wait for them (their peers may need this
	 * device's data) when it succeeded, drop them when it failed or died. */
	while (d->reqs) {
		struct coll_req *r = d->reqs;

		if (rc == 0 && !d->dead) {
			rc = coll_wait(d, r);
		} else {
			d->reqs = r->next;
			if (d->reqs)
				d->reqs->prev = NULL;
			else
				d->reqs_tail = NULL;
			rdv_release(d, r->op);
			coll_req_put(d, r);
		}
	}
	pthread_mutex_lock(&c->lock);
	if (rc && rc != EMU_EABORTED && !d->err) {
		struct emu_str s = {0};

		emu_str_addf(&s, "device %d: the device function returned %d (%s)", d->id, rc,
			     emu_err_name(rc));
		cluster_fail_locked(c, rc < 0 && rc >= EMU_EINVAL ? rc : EMU_EDEVICE, d->id, s.s);
	}
	d->finished = 1;
	c->nlive--;
	fail_check_deadlock_locked(c);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int emu_cluster_run(struct emu_cluster *c, emu_dev_fn fn, void *arg)
{
	int n = c->cfg.ndev;
	int *all = emu_xmalloc((size_t)n * sizeof *all);
	pthread_attr_t attr;
	int64_t t0;

	/* Reset what the previous run left. */
	chans_reset(c);
	free(c->err_report);
	c->err_report = NULL;
	c->err = 0;
	c->err_kind = NULL;
	c->err_dev = -1;
	atomic_store(&c->failed, 0);
	c->nblocked = 0;
	c->nlive = c->nrun;
	c->fn = fn;
	c->fn_arg = arg;
	for (int i = 0; i < n; i++) {
		struct emu_dev *d = &c->devs[i];

		dev_reset_results(d);
		d->blocked = 0;
		d->finished = 0;
		d->wait_op = NULL;
		d->reqs = d->reqs_tail = NULL;
		d->wire_bytes = 4;
		d->coll_stream = EMU_STREAM_COMM;
		memset(&d->mem, 0, sizeof d->mem);
		d->mem.cap = c->cfg.mem_cap;
		all[i] = i;
	}
	pthread_mutex_lock(&c->lock);
	c->world = chan_get_locked(c, CHAN_GROUP, all, n);
	pthread_mutex_unlock(&c->lock);
	free(all);

	c->pool = c->cfg.workers >= 0;
	t0 = emu_wall_ns();
	if (c->pool) {
		fiber_run(c);
	} else {
		if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, DEV_STACK_BYTES))
			emu_die("pthread_attr_init failed");
		for (int i = 0; i < n; i++)
			if ((!c->rep || c->rep[i] == i) &&
			    pthread_create(&c->devs[i].thread, &attr, dev_main, &c->devs[i]))
				emu_die("pthread_create failed for device %d of %d", i, n);
		for (int i = 0; i < n; i++)
			if ((!c->rep || c->rep[i] == i) && pthread_join(c->devs[i].thread, NULL))
				emu_die("pthread_join failed");
		pthread_attr_destroy(&attr);
	}
	c->wall_ns = emu_wall_ns() - t0;
	if (!c->err && fail_any_dead(c)) { /* the others finished without it */
		struct emu_str s = {0};

		fail_describe_dead(&s, c);
		emu_str_addf(&s, "; the other devices finished without it");
		c->err = EMU_EDEVICE;
		c->err_dev = -1;
		c->err_report = s.s;
	}

	for (int i = 0; i < n; i++)
		mem_release_all(&c->devs[i]);
	fold_copy_results(c);
	chans_reset(c);

	/* Of several devices that failed on their own, report the lowest one, so that the
	 * report does not depend on which thread got there first. */
	if (c->err && c->err_dev >= 0) {
		for (int i = 0; i < n; i++) {
			struct emu_dev *d = &c->devs[i];

			if (d->err && d->err != EMU_EABORTED) {
				if (i != c->err_dev) {
					free(c->err_report);
					c->err_report = strdup(d->err_report);
					c->err = d->err;
					c->err_kind = d->err_kind;
					c->err_dev = i;
				}
				break;
			}
		}
	}
	return c->err;
}
