/* coll_data: an op's data movement (coll.h): the reductions in the ring algorithm's order
 * (or the hierarchical one's across nodes), gathers, broadcasts and all-to-alls, cut into
 * tasks (coll_op_run_task) that the members' threads share. Only the bits are decided
 * here; the time is coll_time.c's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "internal.h"

/* Elements reduced at a time in a local accumulator. */
#define BLK 512
/* Ops that write at least this much bypass the cache when they write results: the data
 * will not be read again soon, and a plain store would first read every line it
 * writes. */
#define STREAM_BYTES (8u << 20)

static void combine(float *acc, const float *x, size_t len, enum coll_redop redop)
{
	if (redop == COLL_SUM) {
		for (size_t i = 0; i < len; i++)
			acc[i] += x[i];
	} else {
		for (size_t i = 0; i < len; i++)
			acc[i] = x[i] > acc[i] ? x[i] : acc[i];
	}
}

/* acc[0..len) = send[off..off+len) of members order[first], order[first+1 mod n], ...,
 * (n of them), combined left to right. order maps positions to member indices (NULL:
 * the identity). */
static void ordered_reduce(const struct op *op, const int *order, int n, int first, size_t off,
			   size_t len, float *acc)
{
	int m0 = order ? order[first % n] : first % n;

	memcpy(acc, op->arg[m0].send + off, len * sizeof *acc);
	for (int t = 1; t < n; t++) {
		int m = order ? order[(first + t) % n] : (first + t) % n;

		combine(acc, op->arg[m].send + off, len, op->arg[0].redop);
	}
}

/* First element of chunk c when len elements are cut into n chunks. */
static size_t chunk_lo(size_t len, int n, int c)
{
	__extension__ typedef unsigned __int128 u128;

	return (size_t)((u128)len * (u128)c / (u128)n);
}

/* The chunk (of n over len) that element j lies in. */
static int chunk_of(size_t len, int n, size_t j)
{
	int c = (int)((__extension__(unsigned __int128) j * (unsigned)n) / len);

	while (c + 1 < n && chunk_lo(len, n, c + 1) <= j)
		c++;
	while (c > 0 && chunk_lo(len, n, c) > j)
		c--;
	return c;
}

/* dst[0..len) = src[0..len), with non-temporal stores where the CPU has them. */
static void store_stream(float *dst, const float *src, size_t len)
{
#if defined(__SSE2__)
	size_t i = 0;

	for (; i < len && ((uintptr_t)(dst + i) & 15); i++)
		dst[i] = src[i];
	for (; i + 4 <= len; i += 4)
		_mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
	for (; i < len; i++)
		dst[i] = src[i];
#else
	memcpy(dst, src, len * sizeof *dst);
#endif
}

/* The result of a block, to every member's recv. */
static void write_all(const struct op *op, size_t off, const float *v, size_t len)
{
	int stream = op->arg[0].count * sizeof(float) * (size_t)op->ch->n >= STREAM_BYTES;

	for (int m = 0; m < op->ch->n; m++) {
		if (stream)
			store_stream(op->arg[m].recv + off, v, len);
		else
			memcpy(op->arg[m].recv + off, v, len * sizeof *v);
	}
}

static void all_reduce_ring(const struct op *op, size_t lo, size_t hi)
{
	int n = op->ch->n;
	size_t count = op->arg[0].count;
	float acc[BLK];

	while (lo < hi) {
		int c = chunk_of(count, n, lo);
		size_t end = chunk_lo(count, n, c + 1);

		end = end < hi ? end : hi;
		for (size_t b = lo; b < end; b += BLK) {
			size_t len = end - b < BLK ? end - b : BLK;

			ordered_reduce(op, NULL, n, c + 1, b, len, acc);
			write_all(op, b, acc, len);
		}
		lo = end;
	}
}

static void all_reduce_hier(const struct op *op, size_t lo, size_t hi)
{
	const struct emu_group *ch = op->ch;
	int k = ch->hier_nodes, L = ch->hier_local;
	size_t count = op->arg[0].count;
	float acc[BLK], tmp[BLK];

	while (lo < hi) {
		int q = chunk_of(count, L, lo);
		size_t qlo = chunk_lo(count, L, q), qlen = chunk_lo(count, L, q + 1) - qlo;
		int r = chunk_of(qlen, k, lo - qlo);
		size_t end = qlo + chunk_lo(qlen, k, r + 1);

		end = end < hi ? end : hi;
		for (size_t b = lo; b < end; b += BLK) {
			size_t len = end - b < BLK ? end - b : BLK;

			for (int t = 0; t < k; t++) {
				int node = (r + 1 + t) % k;

				ordered_reduce(op, ch->hier_order + (size_t)node * (size_t)L, L,
					       q + 1, b, len, t ? tmp : acc);
				if (t)
					combine(acc, tmp, len, op->arg[0].redop);
			}
			write_all(op, b, acc, len);
		}
		lo = end;
	}
}

static void reduce_scatter(const struct op *op, size_t lo, size_t hi)
{
	int n = op->ch->n;
	size_t rc = op->arg[0].count;
	float acc[BLK];

	while (lo < hi) {
		int c = (int)(lo / rc);
		size_t end = (size_t)(c + 1) * rc;

		end = end < hi ? end : hi;
		for (size_t b = lo; b < end; b += BLK) {
			size_t len = end - b < BLK ? end - b : BLK;

			ordered_reduce(op, NULL, n, c + 1, b, len, acc);
			memcpy(op->arg[c].recv + (b - (size_t)c * rc), acc, len * sizeof *acc);
		}
		lo = end;
	}
}

static void copy(float *dst, const float *src, size_t len)
{
	if (dst != src)
		memmove(dst, src, len * sizeof *dst);
}

static void all_gather(const struct op *op, size_t lo, size_t hi)
{
	size_t sc = op->arg[0].count;

	while (lo < hi) {
		int i = (int)(lo / sc);
		size_t end = (size_t)(i + 1) * sc;

		end = end < hi ? end : hi;
		for (int m = 0; m < op->ch->n; m++)
			copy(op->arg[m].recv + lo, op->arg[i].send + (lo - (size_t)i * sc),
			     end - lo);
		lo = end;
	}
}

static void all_to_all(const struct op *op, size_t lo, size_t hi)
{
	int n = op->ch->n;
	size_t cnt = op->arg[0].count, per_dst = (size_t)n * cnt;

	while (lo < hi) {
		int j = (int)(lo / per_dst);
		size_t r = lo - (size_t)j * per_dst;
		int i = (int)(r / cnt);
		size_t off = r - (size_t)i * cnt, len = cnt - off;

		len = len < hi - lo ? len : hi - lo;
		copy(op->arg[j].recv + (size_t)i * cnt + off,
		     op->arg[i].send + (size_t)j * cnt + off, len);
		lo += len;
	}
}

static void all_to_all_v(const struct op *op, int j)
{
	const struct op_arg *dst = &op->arg[j];
	size_t roff = 0;

	for (int i = 0; i < op->ch->n; i++) {
		const struct op_arg *src = &op->arg[i];
		size_t soff = coll_sum_counts(src->send_counts, j);

		copy(dst->recv + roff, src->send + soff, dst->recv_counts[i]);
		roff += dst->recv_counts[i];
	}
}

void coll_op_run_task(struct op *op, int task)
{
	const struct op_arg *a = &op->arg[0];
	size_t lo = (size_t)task * TASK_ELEMS, hi = lo + TASK_ELEMS, work;
	int n = op->ch->n;

	switch (a->kind) {
	case OP_REDUCE_SCATTER:
	case OP_ALL_GATHER:
		work = a->count * (size_t)n;
		break;
	case OP_ALL_TO_ALL:
		work = a->count * (size_t)n * (size_t)n;
		break;
	default:
		work = a->count;
		break;
	}
	hi = hi < work ? hi : work;
	switch (a->kind) {
	case OP_SEND:
	case OP_RECV:
		if (op->arg[0].send) /* else lost (the fault plan): the receiver's buffer stays */
			copy(op->arg[1].recv + lo, op->arg[0].send + lo, hi - lo);
		break;
	case OP_BROADCAST:
		for (int m = 0; m < n; m++)
			if (m != a->root)
				copy(op->arg[m].recv + lo, op->arg[a->root].send + lo, hi - lo);
		break;
	case OP_REDUCE: {
		float acc[BLK];

		for (size_t b = lo; b < hi; b += BLK) {
			size_t len = hi - b < BLK ? hi - b : BLK;

			ordered_reduce(op, NULL, n, a->root + 1, b, len, acc);
			memcpy(op->arg[a->root].recv + b, acc, len * sizeof *acc);
		}
		break;
	}
	case OP_ALL_REDUCE:
		if (op->hier)
			all_reduce_hier(op, lo, hi);
		else
			all_reduce_ring(op, lo, hi);
		break;
	case OP_REDUCE_SCATTER:
		reduce_scatter(op, lo, hi);
		break;
	case OP_ALL_GATHER:
		all_gather(op, lo, hi);
		break;
	case OP_ALL_TO_ALL:
		all_to_all(op, lo, hi);
		break;
	case OP_ALL_TO_ALL_V:
		all_to_all_v(op, task);
		break;
	default:
		EMU_ASSERT(0);
	}
#if defined(__SSE2__)
	_mm_sfence(); /* non-temporal stores are weakly ordered: finish them before done */
#endif
}
