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

/* Writes the last run's trace of c to path. 0, or -1 with errno if it cannot write. */
int trace_write_json(const struct emu_cluster *c, const char *path);

/* Draws the last run of c as rows of width characters, one per device and stream that
 * did something, at most max_devs devices (the rest are counted). */
void trace_timeline(const struct emu_cluster *c, FILE *out, int width, int max_devs);

/* Total recorded ops of device id (for tests). */
size_t trace_count(const struct emu_cluster *c, int id);

#endif
