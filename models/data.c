#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rng.h"
#include "util.h"

/* The corpus is fixed: its generator's seed is not the run's. */
#define CORPUS_SEED 20240607u

void data_builtin(struct data *d, size_t n)
{
	size_t len = 0;
	uint64_t line = 0;

	d->bytes = emu_xmalloc(n + 32);
	while (len < n) {
		unsigned a = (unsigned)(rng_u64(CORPUS_SEED, 0, line) % 1000);
		unsigned b = (unsigned)(rng_u64(CORPUS_SEED, 1, line) % 1000);

		len += (size_t)sprintf((char *)d->bytes + len, "%u+%u=%u\n", a, b, a + b);
		line++;
	}
	d->n = n;
	snprintf(d->name, sizeof d->name, "arithmetic (built-in)");
}

int data_load(struct data *d, const char *path, int seq_len, char *err, size_t errn)
{
	struct stat st;
	FILE *f;
	long n;

	memset(d, 0, sizeof *d);
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(err, errn, "--data %s: not a regular file", path);
		return -1;
	}
	f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errn, "--data %s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		snprintf(err, errn, "--data %s: cannot read its size (not a regular file?)", path);
		fclose(f);
		return -1;
	}
	if (n < (long)seq_len + 1) {
		snprintf(err, errn,
			 "--data %s: %ld bytes, too short for one sequence of %d + 1 bytes%s", path,
			 n, seq_len, n == 0 ? " (the file is empty)" : "");
		fclose(f);
		return -1;
	}
	d->bytes = emu_xmalloc((size_t)n);
	if (fread(d->bytes, 1, (size_t)n, f) != (size_t)n) {
		snprintf(err, errn, "--data %s: read error", path);
		fclose(f);
		data_free(d);
		return -1;
	}
	fclose(f);
	d->n = (size_t)n;
	snprintf(d->name, sizeof d->name, "%.63s",
		 strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
	return 0;
}

void data_free(struct data *d)
{
	free(d->bytes);
	memset(d, 0, sizeof *d);
}

void data_batch(const struct data *d, uint64_t seed, uint64_t index, int B, int T, int *tokens,
		int *targets)
{
	size_t span = d->n - (size_t)T; /* window starts: 0 .. n - T - 1 */

	for (int b = 0; b < B; b++) {
		size_t off = (size_t)(rng_u64(seed, 1000 + index, (uint64_t)b) % span);

		for (int t = 0; t < T; t++) {
			tokens[b * T + t] = d->bytes[off + (size_t)t];
			targets[b * T + t] = d->bytes[off + (size_t)t + 1];
		}
	}
}

double data_unigram_entropy(const struct data *d)
{
	double count[256] = {0}, h = 0;

	for (size_t i = 0; i < d->n; i++)
		count[d->bytes[i]]++;
	for (int c = 0; c < 256; c++)
		if (count[c] > 0)
			h -= count[c] / (double)d->n * log(count[c] / (double)d->n);
	return h;
}
