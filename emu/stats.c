/* stats: each device's communication statistics, by op and by traffic tag (coll.h's
 * coll_stats_get and the rest); coll.c records them as ops complete (stats_add). */
#include <string.h>

#include "internal.h"
#include "util.h"

void stats_add(struct emu_dev *d, enum op_kind k, int tag, uint64_t bytes, int64_t ns)
{
	d->stats.ops[k]++;
	d->stats.bytes[k] += bytes;
	d->stats.time_ns[k] += ns;
	d->stats.tagged[tag][k].ops++;
	d->stats.tagged[tag][k].bytes += bytes;
	d->stats.tagged[tag][k].time_ns += ns;
}

/* The op kind named name ("all-reduce", ...), or -1. */
static int kind_of(const char *name)
{
	for (int k = 0; k < OP_NKIND; k++)
		if (!strcmp(coll_op_name((enum op_kind)k), name))
			return k;
	return -1;
}

int coll_stats_get(const struct emu_dev *d, const char *op_name, struct coll_stats *out)
{
	int k = kind_of(op_name);

	if (k < 0)
		return -1;
	out->calls = d->stats.ops[k];
	out->bytes = d->stats.bytes[k];
	out->time_ns = d->stats.time_ns[k];
	return 0;
}

int coll_set_tag(struct emu_dev *d, int tag)
{
	int old = d->tag;

	EMU_ASSERT(tag >= 0 && tag < COLL_NTAGS);
	d->tag = tag;
	return old;
}

int coll_stats_tag_get(const struct emu_dev *d, int tag, const char *op_name,
		       struct coll_stats *out)
{
	int k = kind_of(op_name);

	EMU_ASSERT(tag >= 0 && tag < COLL_NTAGS);
	if (k < 0)
		return -1;
	out->calls = d->stats.tagged[tag][k].ops;
	out->bytes = d->stats.tagged[tag][k].bytes;
	out->time_ns = d->stats.tagged[tag][k].time_ns;
	return 0;
}

int64_t coll_exposed_ns(const struct emu_dev *d)
{
	return d->stats.exposed_ns;
}

uint64_t coll_link_bytes_tag(const struct emu_dev *d, int tag)
{
	EMU_ASSERT(tag >= 0 && tag < COLL_NTAGS);
	return d->stats.tagged_link[tag];
}

uint64_t coll_link_bytes(const struct emu_dev *d, int link_class)
{
	EMU_ASSERT(link_class >= 0 && link_class < TOPO_LINK_NCLASS);
	return d->stats.link_bytes[link_class];
}
