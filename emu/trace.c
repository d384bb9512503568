/* trace: recording ops and memory per device, and writing them out; see trace.h. The
 * Chrome trace event format: "X" complete events, "C" counters, "s"/"f" flow events, "M"
 * metadata naming processes and threads; times in microseconds (printed with three
 * decimals, so nanoseconds survive exactly). */
#include "trace.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "units.h"
#include "util.h"

static const char *const stream_names[EMU_NSTREAMS] = {"compute", "comm",    "send",   "recv",
						       "comm2",   "ce send", "ce recv"};

/* The JSON threads: the streams before the copy engines' by number, then the compute
 * lanes, then the copy engines' (named only where used), so that a trace without them
 * numbers its threads as before they were. */
#define TID_LANE0 EMU_STREAM_CE_SEND
#define TID_CE0   (TID_LANE0 + TRACE_MAX_LANES)

void trace_reset(struct emu_dev *d)
{
	d->trace.nev = 0;
	d->trace.nmem = 0;
	d->lane = 0;
}

void trace_set_lane(struct emu_dev *d, int lane)
{
	EMU_ASSERT(lane >= 0 && lane <= TRACE_MAX_LANES);
	d->lane = lane;
}

void trace_add_op(struct emu_dev *d, const struct trace_ev *ev)
{
	struct trace_buf *t = &d->trace;

	if (!d->c->cfg.trace)
		return;
	emu_grow((void **)&t->ev, &t->capev, t->nev + 1, sizeof *t->ev);
	t->ev[t->nev++] = *ev;
}

void trace_add_mem(struct emu_dev *d)
{
	struct trace_buf *t = &d->trace;
	struct trace_mem *s;

	if (!d->c->cfg.trace)
		return;
	emu_grow((void **)&t->mem, &t->capmem, t->nmem + 1, sizeof *t->mem);
	s = &t->mem[t->nmem++];
	s->t = d->stream[EMU_STREAM_COMPUTE].t;
	memcpy(s->cur, d->mem.cur, sizeof s->cur);
}

size_t trace_count(const struct emu_cluster *c, int id)
{
	EMU_ASSERT(id >= 0 && id < c->cfg.ndev);
	return c->devs[id].trace.nev;
}

void trace_op_get(const struct emu_cluster *c, int id, size_t k, struct trace_op *op)
{
	const struct trace_ev *e;

	EMU_ASSERT(id >= 0 && id < c->cfg.ndev && k < c->devs[id].trace.nev);
	e = &c->devs[id].trace.ev[k];
	*op = (struct trace_op){e->t0,     e->t1,   e->bytes,  e->flops, e->name,
				e->stream, e->lane, e->posted, e->tag};
}

/* The highest lane of d's compute ops (0: none). */
static int compute_lanes(const struct emu_dev *d)
{
	int n = 0;

	for (size_t k = 0; k < d->trace.nev; k++)
		if (d->trace.ev[k].stream == EMU_STREAM_COMPUTE && d->trace.ev[k].lane > n)
			n = d->trace.ev[k].lane;
	return n;
}

/* The JSON thread of an op: its stream's, or its compute lane's after the streams. */
static int tid_of(const struct trace_ev *e)
{
	if (e->stream == EMU_STREAM_COMPUTE && e->lane)
		return TID_LANE0 + e->lane - 1;
	return e->stream >= EMU_STREAM_CE_SEND ? TID_CE0 + e->stream - EMU_STREAM_CE_SEND
					       : e->stream;
}

/* Prints ns as microseconds with exactly three decimals. */
static void put_us(FILE *f, int64_t ns)
{
	fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void put_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void write_device(FILE *f, const struct emu_cluster *c, const struct emu_dev *d)
{
	const struct trace_buf *t = &d->trace;
	int node = topo_node(&c->cfg.topo, d->id);

	fprintf(f,
		",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{"
		"\"name\":\"gpu %d (node %d, local %d)\"}}",
		d->id, d->id, node, d->id % c->cfg.topo.gpus_per_node);
	fprintf(f,
		",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{"
		"\"sort_index\":%d}}",
		d->id, d->id);
	for (int s = 0; s < EMU_NSTREAMS; s++) {
		struct trace_ev probe = {.stream = (uint8_t)s};
		int used = s < EMU_STREAM_CE_SEND;

		for (size_t i = 0; i < t->nev && !used; i++)
			used = t->ev[i].stream == s;
		if (used)
			fprintf(f,
				",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
				"\"args\":{\"name\":\"%s\"}}",
				d->id, tid_of(&probe), stream_names[s]);
	}
	for (int l = 1, n = compute_lanes(d); l <= n; l++)
		fprintf(f,
			",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
			"\"name\":\"compute lane %d\"}}",
			d->id, TID_LANE0 + l - 1, l);
	for (size_t i = 0; i < t->nev; i++) {
		const struct trace_ev *e = &t->ev[i];

		fputs(",\n{\"name\":", f);
		put_json_string(f, e->name);
		fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":",
			e->stream == EMU_STREAM_COMPUTE ? "compute" : "comm", d->id, tid_of(e));
		put_us(f, e->t0);
		fputs(",\"dur\":", f);
		put_us(f, e->t1 - e->t0);
		if (e->stream == EMU_STREAM_COMPUTE)
			fprintf(f, ",\"args\":{\"flops\":%.0f,\"bytes\":%llu}}", e->flops,
				(unsigned long long)e->bytes);
		else
			fprintf(f, ",\"args\":{\"bytes\":%llu}}", (unsigned long long)e->bytes);
		if (e->flow) {
			fprintf(f,
				",\n{\"name\":\"%s\",\"cat\":\"p2p\",\"ph\":\"%s\",%s\"id\":%llu,"
				"\"pid\":%d,\"tid\":%d,\"ts\":",
				e->flow_end ? "recv" : "send", e->flow_end ? "f" : "s",
				e->flow_end ? "\"bp\":\"e\"," : "", (unsigned long long)e->flow,
				d->id, e->stream);
			put_us(f, e->flow_end ? e->t0 + (e->t1 - e->t0) / 2 : e->t0);
			fputs("}", f);
		}
	}
	for (size_t i = 0; i < t->nmem; i++) {
		const struct trace_mem *m = &t->mem[i];

		fprintf(f,
			",\n{\"name\":\"memory (bytes)\",\"ph\":\"C\",\"pid\":%d,\"ts\":", d->id);
		put_us(f, m->t);
		fputs(",\"args\":{", f);
		for (int k = 0; k < MEM_NCAT; k++)
			fprintf(f, "%s\"%s\":%llu", k ? "," : "", mem_cat_name(k),
				(unsigned long long)m->cur[k]);
		fputs("}}", f);
	}
}

int trace_devices_written(const struct emu_cluster *c)
{
	int n = c->cfg.trace_devices;

	return n > 0 && n < c->cfg.ndev ? n : c->cfg.ndev;
}

int trace_write_json(const struct emu_cluster *c, const char *path)
{
	FILE *f = fopen(path, "w");
	int err, n = trace_devices_written(c);

	if (!f)
		return -1;
	fprintf(f,
		"{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"pemu\",\"cluster\":\"%"
		"s\",\"devices\":%d",
		c->cfg.topo.name, c->cfg.ndev);
	if (n < c->cfg.ndev) /* (a trace of every device reads as before) */
		fprintf(f, ",\"traced_devices\":%d", n);
	fputs("},\n\"traceEvents\":[\n", f);
	fputs("{\"name\":\"pemu\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{}}", f);
	for (int i = 0; i < n; i++)
		write_device(f, c, &c->devs[i]);
	fputs("\n]}\n", f);
	err = ferror(f);
	if (fclose(f) || err) {
		if (!errno)
			errno = EIO;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* ASCII timeline                                                                       */

/* The row of stream s (and, for compute, of lane only) of d. */
static void draw_row(FILE *out, const struct emu_dev *d, int s, int lane, int width, int64_t T)
{
	char label[16];
	char row[512];
	int64_t best[512];

	memset(row, '.', (size_t)width);
	memset(best, 0, sizeof best);
	for (size_t i = 0, k = 0; i < d->trace.nev; i++) {
		const struct trace_ev *e = &d->trace.ev[i];
		int first, last;
		char sym;

		if (e->stream != s || e->t1 <= e->t0 ||
		    (s == EMU_STREAM_COMPUTE && e->lane != lane))
			continue;
		/* Every other op of a row in lower case, so that back-to-back ops show apart. */
		sym = k++ % 2 && isupper((unsigned char)e->sym)
			      ? (char)tolower((unsigned char)e->sym)
			      : e->sym;
		first = (int)((__extension__(__int128) e->t0 * width) / T);
		last = (int)((__extension__(__int128)(e->t1 - 1) * width) / T);
		for (int x = first; x <= last && x < width; x++) {
			int64_t lo = (int64_t)((__extension__(__int128) x * T) / width);
			int64_t hi = (int64_t)((__extension__(__int128)(x + 1) * T) / width);
			int64_t ov = (e->t1 < hi ? e->t1 : hi) - (e->t0 > lo ? e->t0 : lo);

			if (ov > best[x]) {
				best[x] = ov;
				row[x] = sym;
			}
		}
	}
	row[width] = '\0';
	if (lane)
		snprintf(label, sizeof label, "lane%d", lane);
	else
		snprintf(label, sizeof label, "%s", stream_names[s]);
	fprintf(out, "gpu%-4d %-7s |%s|\n", d->id, label, row);
}

void trace_timeline(const struct emu_cluster *c, FILE *out, int width, int max_devs)
{
	int64_t T = 0;
	char tbuf[32], cbuf[32];
	int shown = 0, lanes = 0;

	if (width < 10)
		width = 10;
	if (width > 500)
		width = 500;
	for (int i = 0; i < c->cfg.ndev; i++)
		for (size_t k = 0; k < c->devs[i].trace.nev; k++)
			if (c->devs[i].trace.ev[k].t1 > T)
				T = c->devs[i].trace.ev[k].t1;
	if (T == 0) {
		fprintf(out, "timeline: nothing took virtual time%s\n",
			c->cfg.trace ? "" : " (trace recording was off)");
		return;
	}
	units_fmt_time(tbuf, sizeof tbuf, T);
	units_fmt_time(cbuf, sizeof cbuf, (T + width / 2) / width); /* (to the nearest ns) */
	fprintf(out, "timeline: 0 .. %s of virtual time, %d columns (one column = %s)\n", tbuf,
		width, cbuf);
	for (int i = 0; i < c->cfg.ndev; i++) {
		const struct emu_dev *d = &c->devs[i];

		if (shown == max_devs) {
			fprintf(out, "... %d more devices not drawn\n", c->cfg.ndev - i);
			break;
		}
		shown++;
		for (int s = 0; s < EMU_NSTREAMS; s++) {
			int used = 0;

			for (size_t k = 0; k < d->trace.nev && !used; k++)
				used = d->trace.ev[k].stream == s &&
				       (s != EMU_STREAM_COMPUTE || !d->trace.ev[k].lane);
			if (used)
				draw_row(out, d, s, 0, width, T);
			for (int l = 1, n = s == EMU_STREAM_COMPUTE ? compute_lanes(d) : 0; l <= n;
			     l++)
				draw_row(out, d, s, l, width, T);
		}
		lanes = lanes || compute_lanes(d);
	}
	fprintf(out,
		"legend: # compute  A all-reduce  S reduce-scatter  G all-gather  T all-to-all  "
		"V all-to-all-v  B broadcast  R reduce  > send  < recv  . idle\n"
		"        (every other op of a row in lower case)%s\n",
		lanes ? "; laneN: compute of lane N" : "");
}
