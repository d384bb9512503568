/* data: training text as bytes (vocabulary 256), and the batches cut from it.
 *
 * The built-in corpus is generated arithmetic, one sum per line ("417+88=505\n"): the
 * operands are random, the rest is determined by them, so a model that learns the format
 * and then addition drives its loss well below the corpus's unigram entropy, and its
 * samples show how far it got. The corpus is the same on every run; what the seed
 * decides is the order of the batches. */
#ifndef MODELS_DATA_H
#define MODELS_DATA_H

#include <stddef.h>
#include <stdint.h>

struct data {
	uint8_t *bytes; /* the text; owned, free with data_free */
	size_t n;       /* its length */
	char name[64];  /* "arithmetic (built-in)" or the file's name */
};

/* The built-in corpus, n bytes of it. */
void data_builtin(struct data *d, size_t n);
/* A file as bytes. 0, or -1 with a one-line reason in err (missing, unreadable, too short
 * for one sequence of seq_len + 1 bytes). */
int data_load(struct data *d, const char *path, int seq_len, char *err, size_t errn);
void data_free(struct data *d);

/* Micro-batch number index of a run with this seed: B windows of T + 1 bytes at offsets
 * drawn from (seed, index); tokens (B, T) are the window's first T bytes and targets
 * (B, T) the next ones. */
void data_batch(const struct data *d, uint64_t seed, uint64_t index, int B, int T, int *tokens,
		int *targets);

/* Entropy of the corpus's byte frequencies, in nats: the loss of a model that knows only
 * how often each byte occurs. */
double data_unigram_entropy(const struct data *d);

#endif
