/* team: a job is published as one word, its generation, its pieces and the next piece to
 * take; a thread takes piece i by moving the word from (g, p, i) to (g, p, i + 1), so it
 * reads the job's fields only for a piece it owns, and the caller rewrites them only once
 * every piece is done: no helper ever sees a job half written, and a late one finds the
 * word's generation moved on. */
#include "team.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define TEAM_MAX 256
/* Polls of the job word before a helper sleeps (about 0.1-1 ms): the kernels of a step
 * come one after another, a sleeping helper costs a wake-up each. */
#define TEAM_SPIN 20000
/* Polls of the pieces done before the caller yields its core at each poll: a piece
 * outstanding that long is a helper's that the kernel has taken the core from (another
 * process runs), and a spinning caller would keep it off the core for a time slice. */
#define TEAM_WAIT_SPIN 4000

/* What team_for_pieces runs: fn(arg, ...) over [0, n) in pieces, bounds on grain. */
struct job {
	team_fn fn;
	void *arg;
	size_t n, grain;
	int pieces;
};

/* A helper thread: worker w, and its scratch (team_scratch), grown as asked. */
struct helper {
	pthread_t th;
	int w;
	float *scratch;
	size_t nscratch; /* floats */
};

static struct {
	int threads;               /* the caller and the helpers h[1 .. threads - 1] */
	struct helper h[TEAM_MAX]; /* (h[0] unused: the caller's scratch is its own) */
	struct job job;            /* the current job, written while busy and no piece left */
	_Atomic uint64_t word;     /* gen << 32 | pieces << 16 | next */
	atomic_int done;           /* pieces finished of the current job */
	atomic_flag busy;          /* a job runs */
	pthread_mutex_t mu;        /* with cv: helpers asleep wait for a new generation */
	pthread_cond_t cv;
	int stop; /* team_stop: helpers return */
} team = {.threads = 1,
	  .busy = ATOMIC_FLAG_INIT,
	  .mu = PTHREAD_MUTEX_INITIALIZER,
	  .cv = PTHREAD_COND_INITIALIZER};

static uint32_t word_gen(uint64_t w)
{
	return (uint32_t)(w >> 32);
}

static int word_pieces(uint64_t w)
{
	return (int)((w >> 16) & 0xffff);
}

static int word_next(uint64_t w)
{
	return (int)(w & 0xffff);
}

/* Piece i of p of n elements: its bounds, multiples of grain, the last ending at n. */
static size_t bound(size_t n, size_t grain, int i, int p)
{
	size_t units = (n + grain - 1) / grain, b = units * (size_t)i / (size_t)p * grain;

	return i == p || b > n ? n : b;
}

static void run_piece(const struct job *j, int i, int w)
{
	j->fn(j->arg, bound(j->n, j->grain, i, j->pieces), bound(j->n, j->grain, i + 1, j->pieces),
	      w);
}

/* Takes and runs the pieces of generation gen left; returns when none is. */
static void take_pieces(uint32_t gen, int w)
{
	uint64_t cur = atomic_load_explicit(&team.word, memory_order_acquire);

	while (word_gen(cur) == gen && word_next(cur) < word_pieces(cur)) {
		if (!atomic_compare_exchange_weak_explicit(
			    &team.word, &cur, cur + 1, memory_order_acq_rel, memory_order_acquire))
			continue;
		run_piece(&team.job, word_next(cur), w);
		atomic_fetch_add_explicit(&team.done, 1, memory_order_release);
		cur = atomic_load_explicit(&team.word, memory_order_acquire);
	}
}

static void *helper_main(void *arg)
{
	struct helper *h = arg;
	uint32_t seen = word_gen(atomic_load_explicit(&team.word, memory_order_acquire));

	for (;;) {
		uint64_t cur;
		int spins = 0;

		while (word_gen(cur = atomic_load_explicit(&team.word, memory_order_acquire)) ==
			       seen &&
		       spins++ < TEAM_SPIN)
			emu_cpu_relax();
		if (word_gen(cur) == seen) {
			pthread_mutex_lock(&team.mu);
			while (!team.stop && word_gen(atomic_load_explicit(
						     &team.word, memory_order_acquire)) == seen)
				pthread_cond_wait(&team.cv, &team.mu);
			pthread_mutex_unlock(&team.mu);
			cur = atomic_load_explicit(&team.word, memory_order_acquire);
		}
		if (word_gen(cur) == seen) /* woken to stop */
			return NULL;
		seen = word_gen(cur);
		take_pieces(seen, h->w);
	}
}

int team_start(int threads)
{
	int rc = 0;

	EMU_ASSERT(team.threads == 1);
	threads = threads < 1 ? 1 : threads > TEAM_MAX ? TEAM_MAX : threads;
	team.stop = 0;
	for (int i = 1; i < threads; i++) {
		team.h[i].w = i;
		if (pthread_create(&team.h[i].th, NULL, helper_main, &team.h[i])) {
			rc = -1;
			break;
		}
		team.threads = i + 1;
	}
	return rc;
}

void team_stop(void)
{
	pthread_mutex_lock(&team.mu);
	team.stop = 1;
	pthread_cond_broadcast(&team.cv);
	pthread_mutex_unlock(&team.mu);
	for (int i = 1; i < team.threads; i++) {
		pthread_join(team.h[i].th, NULL);
		free(team.h[i].scratch);
		team.h[i].scratch = NULL;
		team.h[i].nscratch = 0;
	}
	team.threads = 1;
}

int team_threads(void)
{
	return team.threads;
}

int team_pieces(size_t n, size_t grain)
{
	return team_pieces_fixed(n, grain, team.threads);
}

int team_pieces_fixed(size_t n, size_t grain, int pieces)
{
	size_t units = (n + grain - 1) / grain;

	if (pieces > TEAM_MAX_PIECES)
		pieces = TEAM_MAX_PIECES;
	return units < (size_t)pieces ? (int)(units ? units : 1) : pieces < 1 ? 1 : pieces;
}

void team_for_pieces(size_t n, size_t grain, int pieces, team_fn fn, void *arg)
{
	struct job j = {fn, arg, n, grain ? grain : 1, 0};
	uint64_t cur;
	uint32_t gen;

	j.pieces = team_pieces_fixed(n, j.grain, pieces);
	if (j.pieces == 1) {
		fn(arg, 0, n, 0);
		return;
	}
	if (team.threads == 1 ||
	    atomic_flag_test_and_set_explicit(&team.busy, memory_order_acquire)) {
		for (int i = 0; i < j.pieces; i++) /* no helper, or another job runs: the caller */
			run_piece(&j, i, 0);
		return;
	}
	team.job = j;
	atomic_store_explicit(&team.done, 0, memory_order_relaxed);
	cur = atomic_load_explicit(&team.word, memory_order_relaxed);
	gen = word_gen(cur) + 1;
	pthread_mutex_lock(&team.mu); /* (so that a helper going to sleep sees the job) */
	atomic_store_explicit(&team.word, (uint64_t)gen << 32 | (uint64_t)j.pieces << 16,
			      memory_order_release);
	pthread_cond_broadcast(&team.cv);
	pthread_mutex_unlock(&team.mu);
	take_pieces(gen, 0);
	for (int spins = 0; atomic_load_explicit(&team.done, memory_order_acquire) < j.pieces;
	     spins++)
		if (spins < TEAM_WAIT_SPIN)
			emu_cpu_relax();
		else
			sched_yield();
	atomic_flag_clear_explicit(&team.busy, memory_order_release);
}

void team_for(size_t n, size_t grain, team_fn fn, void *arg)
{
	team_for_pieces(n, grain, team.threads, fn, arg);
}

static void zero_piece(void *arg, size_t lo, size_t hi, int w)
{
	(void)w;
	memset((float *)arg + lo, 0, (hi - lo) * sizeof(float));
}

void team_zero(float *p, size_t n)
{
	team_for(n, 1 << 16, zero_piece, p);
}

float *team_scratch(int w, float *own, size_t n)
{
	struct helper *h = &team.h[w];

	if (w == 0)
		return own;
	if (h->nscratch < n) {
		h->scratch = emu_xrealloc(h->scratch, n * sizeof *h->scratch);
		h->nscratch = n;
	}
	return h->scratch;
}
