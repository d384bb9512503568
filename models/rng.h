/* rng: counter-based random numbers. A value is a pure function of (seed, stream, index),
 * so initialisation and batch order depend on the seed alone, never on the order in
 * which threads ask (splitmix64 finaliser, Steele et al. 2014). */
#ifndef MODELS_RNG_H
#define MODELS_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t i)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ULL ^ (stream + 1) * 0xD1B54A32D192ED03ULL ^
		     (i + 1) * 0xAEF17502108EF2D9ULL;

	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ULL;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static inline double rng_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
	return (double)(rng_u64(seed, stream, i) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller on two uniforms of the same index). */
static inline double rng_normal(uint64_t seed, uint64_t stream, uint64_t i)
{
	double u1 = rng_uniform(seed, stream, 2 * i), u2 = rng_uniform(seed, stream, 2 * i + 1);

	return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

#endif
