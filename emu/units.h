/* units: parsing and printing the quantities users type on the command line.
 *
 * Sizes: "8", "8K", "64M", "1G" are powers of 1024 (as nccl-tests reads -b/-e), and so are
 * "KiB", "MiB", "GiB", "TiB"; "KB", "MB", "GB", "TB" are powers of 1000 (as data sheets
 * write memory: "80GB"). Bandwidths: "50GB/s" (bytes, powers of 1000), "200Gb/s" (bits),
 * a bare number is bytes/s. Durations: "5us", "2ms", "100ns", "1s"; a bare number is ns.
 * Every parser returns 0 on success and -1 on malformed or out-of-range input; a size,
 * bandwidth or time that is a number too large for 63 bits, UNITS_TOO_LARGE. */
#ifndef EMU_UNITS_H
#define EMU_UNITS_H

#include <stddef.h>
#include <stdint.h>

#define UNITS_TOO_LARGE (-2)

int units_parse_size(const char *s, uint64_t *bytes);
int units_parse_bw(const char *s, uint64_t *bytes_per_s);
int units_parse_time(const char *s, int64_t *ns);
int units_parse_int(const char *s, long min, long max, long *out);
int units_parse_double(const char *s, double *out);

/* Human forms into buf (always NUL-terminated): "64.0 MiB", "300 GB/s", "12.5 us". */
void units_fmt_bytes(char *buf, size_t n, uint64_t bytes);
void units_fmt_bw(char *buf, size_t n, uint64_t bytes_per_s);
void units_fmt_time(char *buf, size_t n, int64_t ns);

#endif
