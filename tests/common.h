/* Helpers shared by the test programs: a cluster for a preset, deterministic test data,
 * and a check that only the main thread asserts on (the project's rule: device threads record,
 * the main thread checks). */
#ifndef TESTS_COMMON_H
#define TESTS_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

/* A cluster of nodes x 8 GPUs of preset, execute or dry-run, trace on or off. */
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

static inline int test_skip_large(void)
{
	const char *s = getenv("PEMU_TEST_SCALE");

	return s && !strcmp(s, "small");
}

#endif
