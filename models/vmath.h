/* vmath: the exponential the kernels use, written so that a loop of it vectorises.
 *
 * libm's expf is a call per element (no loop around it vectorises), and which of its
 * versions runs depends on the host (glibc picks an FMA one on CPUs that have FMA), so
 * the last bit of a softmax or a GeLU could differ from one machine to another. This one
 * is plain float arithmetic with no branch and no call, the same on every host at the
 * build's flags (-std=c11 keeps GCC from fusing a multiply and an add into an FMA), and
 * GCC turns a loop of it into packed SSE instructions.
 *
 * exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 with ln 2 in two parts (the
 * first exact in float, so k C1 is exact), exp(r) on |r| <= ln 2 / 2 by Cephes's degree-5
 * minimax polynomial (S. L. Moshier, Cephes Mathematical Library, expf.c): within 1 ulp
 * of the correctly rounded value (tests/test_kernels.c, test_exp). 2^k goes into the
 * exponent bits. x is clamped to [-87.3, 88], where 2^k stays a normal float: above it
 * the result is about 1.65e38 (expf's is up to inf), below it exactly 0 (expf's a
 * denormal under 1.2e-38); NaN gives NaN. */
#ifndef MODELS_VMATH_H
#define MODELS_VMATH_H

#include <stdint.h>
#include <string.h>

/* VM_CLONES before an elementwise kernel: GCC builds it for AVX-512, AVX2 and the base
 * x86-64 and picks one when the program loads (an ifunc), so its loops run 16 or 8 lanes
 * wide where the host has them. The bits are the same in every version: -std=c11 keeps
 * multiplies and adds unfused (no FMA), each lane rounds as the scalar operation does, and
 * the kernels it is put on have no reduction whose order the width could change. */
/* (Not under ThreadSanitizer: the loader runs the version-picking resolver before TSan's
 * runtime is up, and the program dies at start.) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PEMU_NO_CLONES) && \
	!defined(__SANITIZE_THREAD__)
#define VM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VM_CLONES
#endif

static inline float vm_expf(float x)
{
	const float log2e = 1.44269504088896341f, c1 = 0.693359375f, c2 = -2.12194440e-4f;
	const float round = 12582912.0f; /* 1.5 2^23: adding it rounds to an integer */
	float xc = x > 88.0f ? 88.0f : x < -87.3f ? -87.3f : x; /* (NaN stays NaN) */
	float xk = xc == xc ? xc : 0.0f;                        /* (no NaN into an int) */
	float kf = (xk * log2e + round) - round;
	float r = (xc - kf * c1) - kf * c2, r2 = r * r, p, scale;
	int32_t bits = ((int32_t)kf + 127) * (1 << 23);

	p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r2 + r + 1.0f;
	memcpy(&scale, &bits, sizeof scale);
	return x < -87.3f ? 0.0f : p * scale;
}

#endif
