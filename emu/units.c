#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits s into a non-negative finite number and its suffix. */
static int split_number(const char *s, double *val, const char **suffix)
{
	char *end;

	if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	*val = strtod(s, &end);
	if (end == s || errno || !isfinite(*val) || *val < 0)
		return -1;
	*suffix = end;
	return 0;
}

/* Multiplies and checks that the result is a whole number (-1) that fits in 63 bits
 * (UNITS_TOO_LARGE). */
static int to_u64(double v, double mult, uint64_t *out)
{
	double r = v * mult;

	if (r >= 9.2e18)
		return UNITS_TOO_LARGE;
	if (r != floor(r))
		return -1;
	*out = (uint64_t)r;
	return 0;
}

int units_parse_size(const char *s, uint64_t *bytes)
{
	static const struct {
		const char *suffix;
		double mult;
	} tab[] = {
		{"", 1},
		{"B", 1},
		{"K", 1024.0},
		{"KiB", 1024.0},
		{"KB", 1e3},
		{"M", 1048576.0},
		{"MiB", 1048576.0},
		{"MB", 1e6},
		{"G", 1073741824.0},
		{"GiB", 1073741824.0},
		{"GB", 1e9},
		{"T", 1099511627776.0},
		{"TiB", 1099511627776.0},
		{"TB", 1e12},
	};
	const char *suf;
	double v;

	if (split_number(s, &v, &suf))
		return -1;
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (!strcmp(suf, tab[i].suffix))
			return to_u64(v, tab[i].mult, bytes);
	return -1;
}

int units_parse_bw(const char *s, uint64_t *bytes_per_s)
{
	static const struct {
		const char *suffix;
		double mult;
	} tab[] = {
		{"", 1},          {"B/s", 1},        {"KB/s", 1e3},   {"MB/s", 1e6},
		{"GB/s", 1e9},    {"TB/s", 1e12},    {"Kb/s", 125.0}, {"Mb/s", 1.25e5},
		{"Gb/s", 1.25e8}, {"Tb/s", 1.25e11},
	};
	const char *suf;
	double v;

	if (split_number(s, &v, &suf))
		return -1;
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
		if (!strcmp(suf, tab[i].suffix)) {
			double r = floor(v * tab[i].mult + 0.5);

			if (r >= 9.2e18)
				return UNITS_TOO_LARGE;
			if (r < 1)
				return -1;
			*bytes_per_s = (uint64_t)r;
			return 0;
		}
	}
	return -1;
}

int units_parse_time(const char *s, int64_t *ns)
{
	static const struct {
		const char *suffix;
		double mult;
	} tab[] = {{"", 1}, {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
	const char *suf;
	double v;

	if (split_number(s, &v, &suf))
		return -1;
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
		if (!strcmp(suf, tab[i].suffix)) {
			double r = floor(v * tab[i].mult + 0.5);

			if (r >= 9.2e18)
				return UNITS_TOO_LARGE;
			*ns = (int64_t)r;
			return 0;
		}
	}
	return -1;
}

int units_parse_int(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	if (!s || !*s || isspace((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end || errno || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int units_parse_double(const char *s, double *out)
{
	const char *suf;

	if (split_number(s, out, &suf) || *suf)
		return -1;
	return 0;
}

void units_fmt_bytes(char *buf, size_t n, uint64_t bytes)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, n, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, n, "%.1f %s", v, unit[u]);
}

void units_fmt_bw(char *buf, size_t n, uint64_t bytes_per_s)
{
	snprintf(buf, n, "%.4g GB/s", (double)bytes_per_s / 1e9);
}

void units_fmt_time(char *buf, size_t n, int64_t ns)
{
	if (ns < 1000)
		snprintf(buf, n, "%lld ns", (long long)ns);
	else if (ns < 1000000)
		snprintf(buf, n, "%.4g us", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, n, "%.4g ms", (double)ns / 1e6);
	else
		snprintf(buf, n, "%.4g s", (double)ns / 1e9);
}
