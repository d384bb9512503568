/* fold: dry-run folding (emu_cluster_set_fold in cluster.h). Devices that would run the
 * same ops at the same virtual times as another device (data-parallel replicas, most
 * tensor-parallel peers) are not run: each stands in a collective for what its
 * representative called, and takes its representative's results when the run ends.
 *
 * Inside a channel, a member that does not run ("a mirror") is filled in when the last
 * member that runs arrives: its call is its representative's call on the same channel,
 * which must therefore be a member too (else the channel is refused). That is exact
 * when the devices are symmetric; proving it is the caller's part. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Every channel made so far, for the plan just set. */
static void chans_refold(struct emu_cluster *c)
{
	for (size_t b = 0; b < c->chan_nbuckets; b++)
		for (struct emu_group *ch = c->chan_tab[b]; ch; ch = ch->hnext)
			fold_chan_init(c, ch);
}

int emu_cluster_set_fold(struct emu_cluster *c, const int *rep)
{
	int n = c->cfg.ndev;

	if (rep) {
		if (!c->cfg.dry_run)
			return -1;
		for (int i = 0; i < n; i++)
			if (rep[i] < 0 || rep[i] >= n || rep[rep[i]] != rep[i])
				return -1;
	}
	free(c->rep);
	c->rep = NULL;
	c->nrun = n;
	if (rep) {
		c->rep = emu_xmalloc((size_t)n * sizeof *c->rep);
		memcpy(c->rep, rep, (size_t)n * sizeof *c->rep);
		c->nrun = 0;
		for (int i = 0; i < n; i++)
			c->nrun += rep[i] == i;
	}
	chans_refold(c);
	return 0;
}

/* The member index of device dev in ch, or -1: direct when the members are consecutive
 * ids (the world, a tensor-parallel group), else a search. */
static int member_of(const struct emu_group *ch, int dev)
{
	if (ch->devs[ch->n - 1] - ch->devs[0] == ch->n - 1 && ch->devs[0] <= dev &&
	    dev <= ch->devs[ch->n - 1] && ch->devs[dev - ch->devs[0]] == dev)
		return dev - ch->devs[0];
	for (int j = 0; j < ch->n; j++)
		if (ch->devs[j] == dev)
			return j;
	return -1;
}

int emu_cluster_devices_run(const struct emu_cluster *c)
{
	return c->nrun;
}

void fold_chan_init(const struct emu_cluster *c, struct emu_group *ch)
{
	free(ch->rep_member);
	ch->rep_member = NULL;
	ch->nlive = ch->n;
	ch->fold_bad = -1;
	if (!c->rep)
		return;
	ch->rep_member = emu_xmalloc((size_t)ch->n * sizeof *ch->rep_member);
	ch->nlive = 0;
	for (int i = 0; i < ch->n; i++) {
		int r = c->rep[ch->devs[i]];

		ch->rep_member[i] = -1;
		if (r == ch->devs[i]) {
			ch->nlive++;
			continue;
		}
		ch->rep_member[i] = member_of(ch, r);
		if (ch->rep_member[i] < 0 && ch->fold_bad < 0)
			ch->fold_bad = i;
	}
	if (ch->nlive == 0)
		ch->fold_bad = -1; /* nobody calls it */
}

void fold_fill_mirrors(struct op *op)
{
	const struct emu_group *ch = op->ch;

	if (!ch->rep_member)
		return;
	for (int i = 0; i < ch->n; i++) {
		const struct op_arg *src;
		struct op_arg *dst = &op->arg[i];
		size_t bytes = (size_t)ch->n * sizeof(size_t);

		if (ch->rep_member[i] < 0)
			continue;
		src = &op->arg[ch->rep_member[i]];
		*dst = *src;
		dst->owned = NULL;
		if (src->send_counts) {
			dst->send_counts = emu_xmalloc(bytes);
			memcpy(dst->send_counts, src->send_counts, bytes);
		}
		if (src->recv_counts) {
			dst->recv_counts = emu_xmalloc(bytes);
			memcpy(dst->recv_counts, src->recv_counts, bytes);
		}
		op->has[i] = 1;
		op->arrived++;
	}
}

/* A p2p flow id (coll.c) of rep's, for the mirror off devices further on: its two ends
 * are the rep's ends shifted alike, which is what a mesh fold is. */
static uint64_t shift_flow(uint64_t flow, int off, int ndev)
{
	uint64_t pair = (flow >> 20), seq = flow & ((1ULL << 20) - 1);
	uint64_t src = pair / (uint64_t)ndev, dst = pair % (uint64_t)ndev;

	src += (uint64_t)off;
	dst += (uint64_t)off;
	if (src >= (uint64_t)ndev || dst >= (uint64_t)ndev)
		return 0;
	return ((src * (uint64_t)ndev + dst) << 20) + seq;
}

static void copy_trace(struct emu_dev *d, const struct emu_dev *r)
{
	const struct trace_buf *s = &r->trace;
	struct trace_buf *t = &d->trace;

	emu_grow((void **)&t->ev, &t->capev, s->nev, sizeof *t->ev);
	emu_grow((void **)&t->mem, &t->capmem, s->nmem, sizeof *t->mem);
	if (s->nev)
		memcpy(t->ev, s->ev, s->nev * sizeof *t->ev);
	if (s->nmem)
		memcpy(t->mem, s->mem, s->nmem * sizeof *t->mem);
	t->nev = s->nev;
	t->nmem = s->nmem;
	for (size_t i = 0; i < t->nev; i++)
		if (t->ev[i].flow)
			t->ev[i].flow = shift_flow(t->ev[i].flow, d->id - r->id, d->c->cfg.ndev);
}

void fold_copy_results(struct emu_cluster *c)
{
	if (!c->rep)
		return;
	for (int i = 0; i < c->cfg.ndev; i++) {
		struct emu_dev *d = &c->devs[i];
		const struct emu_dev *r = &c->devs[c->rep[i]];

		if (r == d)
			continue;
		d->stats = r->stats;
		for (int k = 0; k < EMU_NSTREAMS; k++)
			d->stream[k].t = r->stream[k].t;
		d->flops = r->flops;
		d->compute_ns = r->compute_ns;
		memcpy(d->mem.cur, r->mem.cur, sizeof d->mem.cur);
		memcpy(d->mem.peak, r->mem.peak, sizeof d->mem.peak);
		d->mem.cur_total = r->mem.cur_total;
		d->mem.peak_total = r->mem.peak_total;
		d->mem.host_cur = r->mem.host_cur;
		d->mem.host_peak = r->mem.host_peak;
		if (c->cfg.trace && (!c->cfg.trace_devices || d->id < c->cfg.trace_devices))
			copy_trace(d, r);
	}
}
