/* libFuzzer target: the size, bandwidth, time, integer and number parsers (emu/units.h)
 * on any string; what parses is formatted and must format without overflow. Built and run
 * by make fuzz / make fuzz-run (clang). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "units.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), buf[64];
	uint64_t u;
	int64_t t;
	long l;
	double x;

	memcpy(s, data, size);
	s[size] = 0;
	if (!units_parse_size(s, &u))
		units_fmt_bytes(buf, sizeof buf, u);
	if (!units_parse_bw(s, &u))
		units_fmt_bw(buf, sizeof buf, u);
	if (!units_parse_time(s, &t))
		units_fmt_time(buf, sizeof buf, t);
	(void)units_parse_int(s, -4096, 4096, &l);
	(void)units_parse_int(s, 1, 1L << 40, &l);
	(void)units_parse_double(s, &x);
	free(s);
	return 0;
}
