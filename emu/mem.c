/* mem: per-device memory accounting; see mem.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "units.h"
#include "util.h"

static const char *const cat_names[MEM_NCAT] = {"param", "grad", "optim", "act", "comm", "work"};

const char *mem_cat_name(enum mem_cat cat)
{
	EMU_ASSERT((unsigned)cat < MEM_NCAT);
	return cat_names[cat];
}

static int oom(struct emu_dev *d, enum mem_cat cat, uint64_t bytes, const char *name)
{
	const struct mem_state *m = &d->mem;
	char b[32], cap[32], used[32];
	struct emu_str s = {0};
	int rc;

	units_fmt_bytes(b, sizeof b, bytes);
	units_fmt_bytes(cap, sizeof cap, m->cap);
	units_fmt_bytes(used, sizeof used, m->cur_total);
	emu_str_addf(&s,
		     "out of memory allocating '%s' (%llu bytes = %s, %s): cap %llu bytes (%s), in "
		     "use %llu bytes (%s):",
		     name, (unsigned long long)bytes, b, cat_names[cat], (unsigned long long)m->cap,
		     cap, (unsigned long long)m->cur_total, used);
	for (int k = 0; k < MEM_NCAT; k++) {
		units_fmt_bytes(b, sizeof b, m->cur[k]);
		emu_str_addf(&s, "%s %s=%s", k ? "," : "", cat_names[k], b);
	}
	rc = dev_fail(d, EMU_EOOM, "%s", s.s);
	free(s.s);
	return rc;
}

struct mem_block *mem_alloc(struct emu_dev *d, enum mem_cat cat, uint64_t bytes, const char *name)
{
	return mem_alloc_host(d, cat, bytes, bytes, name);
}

struct mem_block *mem_alloc_host(struct emu_dev *d, enum mem_cat cat, uint64_t bytes,
				 uint64_t host_bytes, const char *name)
{
	struct mem_state *m = &d->mem;
	struct mem_block *b;

	EMU_ASSERT((unsigned)cat < MEM_NCAT);
	if (bytes > m->cap - m->cur_total) {
		oom(d, cat, bytes, name);
		return NULL;
	}
	if ((b = m->spare)) { /* a record freed before: cheaper than calloc on the hot path */
		m->spare = b->next;
		memset(b, 0, sizeof *b);
	} else {
		b = emu_xcalloc(1, sizeof *b);
	}
	b->host = host_bytes ? (host_bytes + 63) / 64 * 64 : 0;
	if (!d->c->cfg.dry_run && host_bytes) {
		/* Rounded up to the alignment, as aligned_alloc wants; zeroed so that every
		 * run starts from the same bytes. */
		size_t sz = (size_t)b->host;

		b->data = aligned_alloc(64, sz);
		if (!b->data)
			emu_die("out of host memory: device %d allocating %llu bytes for '%s'",
				d->id, (unsigned long long)bytes, name);
		memset(b->data, 0, sz);
	}
	b->bytes = bytes;
	b->cat = cat;
	m->host_cur += b->host;
	if (m->host_cur > m->host_peak)
		m->host_peak = m->host_cur;
	emu_strcpy_cut(b->name, name, sizeof b->name);
	b->next = m->live;
	if (m->live)
		m->live->prev = b;
	m->live = b;
	m->cur[cat] += bytes;
	m->cur_total += bytes;
	if (m->cur[cat] > m->peak[cat])
		m->peak[cat] = m->cur[cat];
	if (m->cur_total > m->peak_total)
		m->peak_total = m->cur_total;
	trace_add_mem(d);
	return b;
}

static void unlink_block(struct mem_state *m, struct mem_block *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		m->live = b->next;
	if (b->next)
		b->next->prev = b->prev;
	m->cur[b->cat] -= b->bytes;
	m->cur_total -= b->bytes;
	m->host_cur -= b->host;
}

void mem_free(struct emu_dev *d, struct mem_block *b)
{
	if (!b)
		return;
	unlink_block(&d->mem, b);
	trace_add_mem(d);
	/* After a failure, another device may still be finishing a data task into this
	 * block (tasks are never abandoned half-way): its bytes are returned after the
	 * run, when every thread has stopped. */
	if (atomic_load(&d->c->failed)) {
		b->prev = NULL;
		b->next = d->mem.live;
		if (d->mem.live)
			d->mem.live->prev = b;
		d->mem.live = b;
		b->cat = MEM_NCAT; /* already unaccounted */
		return;
	}
	free(b->data);
#ifdef __SANITIZE_ADDRESS__
	free(b); /* every record freed, so that ASan sees a use after free */
#else
	b->data = NULL;
	b->next = d->mem.spare;
	d->mem.spare = b;
#endif
}

static void free_list(struct mem_block *b)
{
	while (b) {
		struct mem_block *next = b->next;

		free(b->data);
		free(b);
		b = next;
	}
}

void mem_release_all(struct emu_dev *d)
{
	free_list(d->mem.live);
	free_list(d->mem.spare);
	d->mem.live = NULL;
	d->mem.spare = NULL;
	memset(d->mem.cur, 0, sizeof d->mem.cur);
	d->mem.cur_total = 0;
}

uint64_t mem_cap_bytes(const struct emu_dev *d)
{
	return d->mem.cap;
}

uint64_t mem_cur_bytes(const struct emu_dev *d, enum mem_cat cat)
{
	EMU_ASSERT((unsigned)cat < MEM_NCAT);
	return d->mem.cur[cat];
}

uint64_t mem_cur_total(const struct emu_dev *d)
{
	return d->mem.cur_total;
}

uint64_t mem_peak_bytes(const struct emu_dev *d, enum mem_cat cat)
{
	EMU_ASSERT((unsigned)cat < MEM_NCAT);
	return d->mem.peak[cat];
}

uint64_t mem_peak_total(const struct emu_dev *d)
{
	return d->mem.peak_total;
}

uint64_t mem_host_peak(const struct emu_dev *d)
{
	return d->mem.host_peak;
}
