/* util: the three kinds of error handling pemu uses, and small helpers.
 *
 * A host failure (malloc, pthread, fopen) is not something the emulator can report on:
 * it prints file:line and exits. A broken internal invariant aborts through EMU_ASSERT,
 * which stays on in release builds. Outcomes the emulator exists to report (device OOM,
 * collective mismatch, deadlock, bad config) are values, see cluster.h. */
#ifndef EMU_UTIL_H
#define EMU_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define EMU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define EMU_NORETURN     __attribute__((noreturn))
#else
#define EMU_PRINTF(f, a)
#define EMU_NORETURN
#endif

/* Prints "file:line: message" and exits with status 70 (EX_SOFTWARE). */
EMU_NORETURN void emu_die_at(const char *file, int line, const char *fmt, ...) EMU_PRINTF(3, 4);
#define emu_die(...) emu_die_at(__FILE__, __LINE__, __VA_ARGS__)

/* An invariant of pemu's own code; never compiled out. */
#define EMU_ASSERT(cond)                                                                           \
	do {                                                                                       \
		if (!(cond))                                                                       \
			emu_die_at(__FILE__, __LINE__, "internal error: assertion '%s' failed",    \
				   #cond);                                                         \
	} while (0)

/* Allocation that cannot fail: dies with file:line on host out-of-memory. */
void *emu_xmalloc_at(const char *file, int line, size_t bytes);
void *emu_xcalloc_at(const char *file, int line, size_t n, size_t size);
void *emu_xrealloc_at(const char *file, int line, void *p, size_t bytes);
/* A spin-wait's pause: lets the core's other hyperthread run and saves power. */
static inline void emu_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

#define emu_xmalloc(b)     emu_xmalloc_at(__FILE__, __LINE__, (b))
#define emu_xcalloc(n, s)  emu_xcalloc_at(__FILE__, __LINE__, (n), (s))
#define emu_xrealloc(p, b) emu_xrealloc_at(__FILE__, __LINE__, (p), (b))

/* Grows *arr (of *cap elements of elem_size bytes) so that it holds at least need. */
void emu_grow(void **arr, size_t *cap, size_t need, size_t elem_size);

/* Wall clock in nanoseconds (CLOCK_MONOTONIC). Only for reporting wall time and pacing:
 * nothing that decides a result reads it. */
int64_t emu_wall_ns(void);

/* A growable NUL-terminated string, for reports. The caller frees .s with free(). */
struct emu_str {
	char *s;    /* the text so far, NUL-terminated (NULL before the first append) */
	size_t len; /* strlen(s) */
	size_t cap; /* bytes allocated for s */
};
void emu_str_addf(struct emu_str *str, const char *fmt, ...) EMU_PRINTF(2, 3);
void emu_str_vaddf(struct emu_str *str, const char *fmt, va_list ap) EMU_PRINTF(2, 0);

/* Copies src into dst (n bytes), cut to fit and always NUL-terminated: what
 * snprintf(dst, n, "%s", src) does, without its format machinery (a hot path names every
 * block and trace event). n > 0. */
void emu_strcpy_cut(char *dst, const char *src, size_t n);

#endif
