/* team: the host threads that one device's kernels share (issue 10, item 3).
 *
 * pemu train runs one device, and its kernels would leave the host's other cores idle:
 * OpenBLAS's own threads split a GEMM well only when it is large, and the elementwise
 * kernels have none. So the kernels cut their work themselves into pieces that write
 * disjoint parts of their output and hand the pieces to a team of host threads, the
 * caller among them: a GEMM by rows or columns of its output, attention by (sequence,
 * head), the row kernels by rows, a column sum by columns, elementwise kernels by ranges.
 * No piece adds into what another writes and no sum is reordered.
 *
 * Where the cut could change a number, it does not depend on the thread count. An
 * element of a GEMM is one dot product over the inner dimension, but which of its
 * kernels OpenBLAS runs on a tile, and so the order of its sums, depends on where the
 * tile falls in the call (measured here: Haswell's kernels give other last bits to 2.4%
 * of the elements of a 256x512 output, inner dimension 128, computed as two calls of
 * 256x256; SkylakeX's to a row computed alone). So
 * a GEMM is cut into pieces by its shape alone (team_for_pieces), on one thread as on
 * many, and only the elementwise, row and (sequence, head) kernels, whose every element is
 * computed the same way wherever it falls, are cut by the thread count (team_for). The
 * numbers are then bitwise the same on any number of threads (tests/test_team.c,
 * tests/test_cli.c).
 *
 * The team is the process's, started once (pemu train: OPENBLAS_NUM_THREADS if set, else
 * the online cores, with OpenBLAS kept to one thread) and used by one device at a time:
 * a kernel that finds the team busy (another device, a piece calling a kernel) runs its
 * pieces itself, in order. With no team (team_start not called, or 1 thread: pemu run,
 * verify, coll and plan, whose devices take the cores) team_for calls the kernel's
 * function once over the whole range, and team_for_pieces runs its pieces in order.
 *
 * Helpers spin a while after a job for the next one, then sleep on a condition variable. */
#ifndef MODELS_TEAM_H
#define MODELS_TEAM_H

#include <stddef.h>

/* A piece: elements [lo, hi) of the job's range, run by worker w (0: the caller, 1 ..
 * threads - 1: the helpers). */
typedef void (*team_fn)(void *arg, size_t lo, size_t hi, int w);

/* Starts threads - 1 helper threads (threads <= 1: none). 0, or -1 if one cannot be
 * created (the team then has the threads that could). Not while a job runs. */
int team_start(int threads);
/* Stops and joins the helpers and frees their scratch; the team is one thread again. */
void team_stop(void);
/* The team's threads: 1 without helpers. */
int team_threads(void);

/* The most pieces a job has. */
#define TEAM_MAX_PIECES 4096

/* The number of pieces team_for cuts n elements into: at most one a thread, each at
 * least grain elements (grain >= 1). */
int team_pieces(size_t n, size_t grain);
/* Runs fn over [0, n) in team_pieces(n, grain) pieces, their bounds multiples of grain,
 * and returns when every piece is done; on a busy team the caller runs them, in order. */
void team_for(size_t n, size_t grain, team_fn fn, void *arg);

/* The same in team_pieces_fixed(n, grain, pieces) pieces whatever the thread count:
 * min(pieces, units of grain in n, TEAM_MAX_PIECES), at least 1. Piece i is
 * [i u / p, (i + 1) u / p) units of grain (the last ending at n), on any thread. */
int team_pieces_fixed(size_t n, size_t grain, int pieces);
void team_for_pieces(size_t n, size_t grain, int pieces, team_fn fn, void *arg);

/* p[0, n) = 0, in pieces. */
void team_zero(float *p, size_t n);

/* Scratch for worker w of at least n floats: own for the caller (w 0), else a buffer of
 * the helper's that lives until team_stop (host memory, not the device's: the device is
 * charged for the caller's, as for one kernel). */
float *team_scratch(int w, float *own, size_t n);

#endif
