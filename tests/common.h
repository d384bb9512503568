/* Helpers shared by the test programs: a cluster for a preset, deterministic test data,
 * and a check that only the main thread asserts on (the project's rule: device threads record,
 * the main thread checks). */
#ifndef TESTS_COMMON_H
#define TESTS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cluster.h"

/* A cluster of nodes x 8 GPUs of preset, execute or dry-run, trace on or off, under the
 * roofline cost model: the formulas these tests hold the clock to are the roofline's
 * (the calibrated model's are held by test_clock's calibrated tests). */
static inline struct emu_cluster *test_cluster(const char *preset, int nodes, int ndev, int dry_run,
					       int trace)
{
	struct emu_config cfg;

	if (emu_config_default(&cfg, preset))
		abort();
	cfg.topo.nodes = nodes;
	cfg.ndev = ndev;
	cfg.dry_run = dry_run;
	cfg.trace = trace;
	cfg.cost = EMU_COST_ROOFLINE;
	return emu_cluster_new(&cfg);
}

/* A float in about [-2^10, 2^10] with a spread of exponents, so that the order of a sum
 * changes its rounding: a test can then tell one order from another. */
static inline float test_value(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed * 0x9E3779B97F4A7C15ULL) ^ (i + 0x632BE59BD9B4E019ULL);

	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ULL;
	x ^= x >> 29;
	x *= 0x94D049BB133111EBULL;
	x ^= x >> 32;
	{
		float mant = (float)(int)(x & 0xFFFFF) / 1048576.0f - 0.5f; /* [-0.5, 0.5) */
		int e = (int)((x >> 20) % 21) - 10;

		return mant * (float)(e >= 0 ? (double)(1u << e) : 1.0 / (double)(1u << -e));
	}
}

/* A float uniform in [-1, 1), a function of (seed, i) alone. */
static inline float test_uniform(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ULL + i * 0xD1B54A32D192ED03ULL;

	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ULL;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBULL;
	x ^= x >> 31;
	return (float)((double)(x >> 40) / (double)(1ULL << 23) - 1.0);
}

/* Runs "pemu args" (the binary $PEMU names, default build/pemu), capturing its stdout
 * (or with err its stderr) into out[n]; its exit code, or -1 if it did not exit. */
static inline int test_pemu(const char *args, int err, char *out, size_t n)
{
	const char *bin = getenv("PEMU") ? getenv("PEMU") : "build/pemu";
	char cmd[1024];
	size_t len;
	FILE *p;
	int st;

	if (snprintf(cmd, sizeof cmd, err ? "%s %s 2>&1 >/dev/null" : "%s %s 2>/dev/null", bin,
		     args) >= (int)sizeof cmd ||
	    !(p = popen(cmd, "r")))
		return -1;
	len = fread(out, 1, n - 1, p);
	out[len] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole of the file at path, NUL-terminated (free it), its length in *len; or NULL. */
static inline char *test_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	*len = 0;
	if (!f)
		return NULL;
	if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
	    (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
		buf[n] = '\0';
		*len = (size_t)n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static inline int test_skip_large(void)
{
	const char *s = getenv("PEMU_TEST_SCALE");

	return s && !strcmp(s, "small");
}

#endif
