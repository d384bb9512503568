/* trace: every op on every stream of every device, in virtual time. Written as Chrome
 * trace event JSON (Perfetto and chrome://tracing open it: a process per device, a
 * thread per stream, memory as counter tracks, send->recv as flow arrows) and drawn as
 * an ASCII Gantt chart. Recording is per device with no locking; output is sorted by
 * device, so two identical runs give byte-identical files. */
#ifndef EMU_TRACE_H
#define EMU_TRACE_H

#include <stdint.h>
#include <stdio.h>

struct emu_cluster;
struct emu_dev;

/* Writes the last run's trace of c to path: devices 0 .. trace_devices_written(c) - 1.
 * 0, or -1 with errno if it cannot write. */
int trace_write_json(const struct emu_cluster *c, const char *path);
/* The devices c's trace keeps: emu_config's trace_devices, or every device. */
int trace_devices_written(const struct emu_cluster *c);

/* Draws the last run of c as rows of width characters, one per device and stream that
 * did something, at most max_devs devices (the rest are counted). */
void trace_timeline(const struct emu_cluster *c, FILE *out, int width, int max_devs);

/* Total recorded ops of device id (for tests). */
size_t trace_count(const struct emu_cluster *c, int id);

/* One recorded op: its span in virtual time, bytes (a message's, or the HBM bytes a
 * kernel was charged for), a kernel's FLOPs, name ("matmul", "all-reduce", ...), stream
 * (enum emu_stream), lane (of the compute that ran it or posted it), and for
 * communication whether it was posted (coll_i*) rather than blocking. */
struct trace_op {
	int64_t t0, t1;
	uint64_t bytes;
	double flops;
	const char *name; /* valid until the cluster runs again or is freed */
	int stream, lane, posted;
	int tag; /* communication: its traffic tag (coll_set_tag in coll.h), else 0 */
};

/* Op k (k < trace_count) of device id, in the order recorded. */
void trace_op_get(const struct emu_cluster *c, int id, size_t k, struct trace_op *op);

/* The most lanes, and the lane d records its next ops in: a device that interleaves
 * independent streams of work (two batches, say) marks whose each op is. 0, each run's
 * start, is no lane. The timeline draws each lane's compute in a row of its own
 * ("lane1", ...), the JSON trace as a thread of its own. */
#define TRACE_MAX_LANES 8
void trace_set_lane(struct emu_dev *d, int lane);

#endif
