/* libFuzzer target: the size, bandwidth, time, integer and number parsers (emu/units.h)
 * on any string; what parses is formatted and must format without overflow, an integer
 * that parses lies in its range and a number is not NaN (a crash otherwise). Built and run
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
	/* an integer that parses is inside its range */
	if (!units_parse_int(s, -4096, 4096, &l) && (l < -4096 || l > 4096))
		abort();
	if (!units_parse_int(s, 1, 1L << 40, &l) && (l < 1 || l > 1L << 40))
		abort();
	/* a number that parses is a number (the options' range checks compare with it) */
	if (!units_parse_double(s, &x) && x != x)
		abort();
	free(s);
	return 0;
}
