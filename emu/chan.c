/* chan: channels, the groups of devices that ops run on (a group's collectives, or one
 * direction of a point-to-point pair): made on first use and kept in a hash table for the
 * cluster's life, each with its slowest link, its node-aware layout and its folding. See
 * internal.h. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t chan_hash(enum chan_kind kind, const int *devs, int n)
{
	uint64_t h = 1469598103934665603ULL ^ (uint64_t)kind;

	for (int i = 0; i < n; i++) {
		h ^= (uint64_t)(unsigned)devs[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* The node-aware layout of a group, if it spans nodes evenly with more than one member
 * on each (see coll.h for the algorithm): members node by node, in the order the nodes
 * first appear, each node's in group order. */
struct hier_key {
	int node, first, i; /* a member's node, that node's first member, the member */
};

static int cmp_hier(const void *a, const void *b)
{
	const struct hier_key *x = a, *y = b;

	if (x->first != y->first)
		return (x->first > y->first) - (x->first < y->first);
	return (x->i > y->i) - (x->i < y->i);
}

static int cmp_node(const void *a, const void *b)
{
	const struct hier_key *x = a, *y = b;

	if (x->node != y->node)
		return (x->node > y->node) - (x->node < y->node);
	return (x->i > y->i) - (x->i < y->i);
}

static void chan_find_hier(const struct topo *t, struct emu_group *ch)
{
	int local, k = topo_group_nodes(t, ch->devs, ch->n, &local);
	struct hier_key *key;

	if (k < 2 || local < 2)
		return;
	ch->hier_nodes = k;
	ch->hier_local = local;
	ch->hier_order = emu_xmalloc((size_t)ch->n * sizeof *ch->hier_order);
	key = emu_xmalloc((size_t)ch->n * sizeof *key);
	for (int i = 0; i < ch->n; i++)
		key[i] = (struct hier_key){topo_node(t, ch->devs[i]), 0, i};
	/* by node: each node's members together, its first member leading */
	qsort(key, (size_t)ch->n, sizeof *key, cmp_node);
	for (int i = 0; i < ch->n; i++)
		key[i].first = i && key[i - 1].node == key[i].node ? key[i - 1].first : key[i].i;
	qsort(key, (size_t)ch->n, sizeof *key, cmp_hier);
	for (int i = 0; i < ch->n; i++)
		ch->hier_order[i] = key[i].i;
	free(key);
}

/* The channel of kind over devs, created on first use. Under c->lock. */
struct emu_group *chan_get_locked(struct emu_cluster *c, enum chan_kind kind, const int *devs,
				  int n)
{
	uint64_t h = chan_hash(kind, devs, n);
	size_t b = h % c->chan_nbuckets;
	struct emu_group *ch;

	for (ch = c->chan_tab[b]; ch; ch = ch->hnext)
		if (ch->hash == h && ch->kind == kind && ch->n == n &&
		    !memcmp(ch->devs, devs, (size_t)n * sizeof *devs))
			return ch;
	ch = emu_xcalloc(1, sizeof *ch);
	ch->kind = kind;
	ch->n = n;
	ch->devs = emu_xmalloc((size_t)n * sizeof *devs);
	memcpy(ch->devs, devs, (size_t)n * sizeof *devs);
	ch->seq = emu_xcalloc((size_t)n, sizeof *ch->seq);
	ch->link = topo_group_link_class(&c->cfg.topo, devs, n);
	if (kind == CHAN_GROUP)
		chan_find_hier(&c->cfg.topo, ch);
	fold_chan_init(c, ch);
	ch->hash = h;
	ch->hnext = c->chan_tab[b];
	c->chan_tab[b] = ch;
	c->nchans++;
	return ch;
}

struct emu_group *chan_p2p(struct emu_dev *d, int src, int dst)
{
	int devs[2] = {src, dst};
	struct emu_group *ch;

	pthread_mutex_lock(&d->c->lock);
	ch = chan_get_locked(d->c, CHAN_P2P, devs, 2);
	pthread_mutex_unlock(&d->c->lock);
	return ch;
}

struct emu_group *emu_group_get(struct emu_dev *d, const int *devs, int n)
{
	struct emu_cluster *c = d->c;
	struct emu_group *g;
	int member = 0;

	if (n < 1 || n > c->cfg.ndev) {
		dev_fail(d, EMU_EINVAL, "emu_group_get: a group of %d devices on a cluster of %d",
			 n, c->cfg.ndev);
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		if (devs[i] < 0 || devs[i] >= c->cfg.ndev) {
			dev_fail(d, EMU_EINVAL,
				 "emu_group_get: device %d is not in the cluster (0..%d)", devs[i],
				 c->cfg.ndev - 1);
			return NULL;
		}
		for (int j = 0; j < i; j++) {
			if (devs[j] == devs[i]) {
				dev_fail(d, EMU_EINVAL, "emu_group_get: device %d is listed twice",
					 devs[i]);
				return NULL;
			}
		}
		member |= devs[i] == d->id;
	}
	if (!member) {
		dev_fail(d, EMU_EINVAL, "emu_group_get: device %d asked for a group it is not in",
			 d->id);
		return NULL;
	}
	pthread_mutex_lock(&c->lock);
	g = chan_get_locked(c, CHAN_GROUP, devs, n);
	pthread_mutex_unlock(&c->lock);
	return g;
}

struct emu_group *emu_world(struct emu_dev *d)
{
	return d->c->world;
}

int emu_group_size(const struct emu_group *g)
{
	return g->n;
}

int emu_group_dev(const struct emu_group *g, int i)
{
	EMU_ASSERT(i >= 0 && i < g->n);
	return g->devs[i];
}

int emu_group_rank(const struct emu_group *g, const struct emu_dev *d)
{
	for (int i = 0; i < g->n; i++)
		if (g->devs[i] == d->id)
			return i;
	return -1;
}

void chan_describe(struct emu_str *s, const struct emu_group *ch)
{
	int contiguous = 1;

	for (int i = 1; i < ch->n; i++)
		contiguous &= ch->devs[i] == ch->devs[0] + i;
	if (ch->n > 2 && contiguous) {
		emu_str_addf(s, "{%d..%d}", ch->devs[0], ch->devs[ch->n - 1]);
		return;
	}
	emu_str_addf(s, "{");
	for (int i = 0; i < ch->n && i < 16; i++)
		emu_str_addf(s, "%s%d", i ? "," : "", ch->devs[i]);
	emu_str_addf(s, ch->n > 16 ? ",... (%d devices)}" : "}", ch->n);
}
