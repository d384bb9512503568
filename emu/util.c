#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void emu_die_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(70);
}

void *emu_xmalloc_at(const char *file, int line, size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	if (!p)
		emu_die_at(file, line, "out of host memory allocating %zu bytes", bytes);
	return p;
}

void *emu_xcalloc_at(const char *file, int line, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		emu_die_at(file, line, "out of host memory allocating %zu x %zu bytes", n, size);
	return p;
}

void *emu_xrealloc_at(const char *file, int line, void *p, size_t bytes)
{
	void *q = realloc(p, bytes ? bytes : 1);

	if (!q)
		emu_die_at(file, line, "out of host memory reallocating %zu bytes", bytes);
	return q;
}

void emu_grow(void **arr, size_t *cap, size_t need, size_t elem_size)
{
	size_t ncap = *cap ? *cap : 16;

	if (need <= *cap)
		return;
	while (ncap < need)
		ncap *= 2;
	*arr = emu_xrealloc(*arr, ncap * elem_size);
	*cap = ncap;
}

int64_t emu_wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void emu_str_vaddf(struct emu_str *str, const char *fmt, va_list ap)
{
	va_list ap2;
	int n;

	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	EMU_ASSERT(n >= 0);
	emu_grow((void **)&str->s, &str->cap, str->len + (size_t)n + 1, 1);
	vsnprintf(str->s + str->len, (size_t)n + 1, fmt, ap);
	str->len += (size_t)n;
}

void emu_str_addf(struct emu_str *str, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	emu_str_vaddf(str, fmt, ap);
	va_end(ap);
}

void emu_strcpy_cut(char *dst, const char *src, size_t n)
{
	size_t len = strnlen(src, n - 1);

	memcpy(dst, src, len);
	dst[len] = '\0';
}
