/* Every collective, on groups of 1, 2, 3, 4, 5, 8 and 16 devices and counts 1, 7, 1000 and
 * 2^20+3, against a serial computation in the order coll.h documents (bitwise), and its
 * virtual time against the formulas of docs/formulas.md (to the nanosecond).
 *
 * The cluster is 2 nodes of 8 A100s, so some groups stay in a node (ring over NVLink),
 * some span the nodes unevenly (ring over InfiniBand) and some evenly (hierarchical). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"

enum which {
	W_ALL_REDUCE,
	W_REDUCE_SCATTER,
	W_ALL_GATHER,
	W_ALL_TO_ALL,
	W_ALL_TO_ALL_V,
	W_BROADCAST,
	W_REDUCE,
	W_SEND_RECV,
	W_N
};
static const char *const which_name[W_N] = {"all-reduce", "reduce-scatter", "all-gather",
					    "all-to-all", "all-to-all-v",   "broadcast",
					    "reduce",     "send/recv"};

/* Groups by size: some inside node 0, {7,8} and {6,7,8,9} across the two nodes, {2,0,1}
 * out of id order so that group rank and device id differ. */
static const int g1[] = {5}, g2[] = {7, 8}, g3[] = {2, 0, 1}, g4[] = {6, 7, 8, 9},
		 g5[] = {0, 1, 2, 3, 4}, g8[] = {0, 1, 2, 3, 4, 5, 6, 7},
		 g16[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const struct {
	const int *devs;
	int n;
} groups[] = {{g1, 1}, {g2, 2}, {g3, 3}, {g4, 4}, {g5, 5}, {g8, 8}, {g16, 16}};
static const size_t counts[] = {1, 7, 1000, (1u << 20) + 3};

#define MAXN 16

struct run {
	enum which w;
	const int *devs;
	int n;
	size_t count;                   /* the count argument of the call */
	size_t sc[MAXN][MAXN];          /* all-to-all-v: sc[i][j] elements from i to j */
	float *send[MAXN], *recv[MAXN]; /* by group rank */
	size_t nsend, nrecv;            /* elements per member */
	int root;
	int rc[MAXN];
	int64_t t_end[MAXN];
};

static int member(const struct run *r, int id)
{
	for (int i = 0; i < r->n; i++)
		if (r->devs[i] == id)
			return i;
	return -1;
}

static int device(struct emu_dev *d, void *arg)
{
	struct run *r = arg;
	int me = member(r, emu_dev_id(d)), rc = 0;
	struct emu_group *g;

	if (me < 0)
		return 0;
	g = emu_group_get(d, r->devs, r->n);
	if (!g)
		return EMU_EINVAL;
	switch (r->w) {
	case W_ALL_REDUCE:
		rc = coll_all_reduce(d, g, r->send[me], r->recv[me], r->count, COLL_SUM);
		break;
	case W_REDUCE_SCATTER:
		rc = coll_reduce_scatter(d, g, r->send[me], r->recv[me], r->count, COLL_SUM);
		break;
	case W_ALL_GATHER:
		rc = coll_all_gather(d, g, r->send[me], r->recv[me], r->count);
		break;
	case W_ALL_TO_ALL:
		rc = coll_all_to_all(d, g, r->send[me], r->recv[me], r->count);
		break;
	case W_ALL_TO_ALL_V: {
		size_t s[MAXN], v[MAXN];

		for (int j = 0; j < r->n; j++) {
			s[j] = r->sc[me][j];
			v[j] = r->sc[j][me];
		}
		rc = coll_all_to_all_v(d, g, r->send[me], s, r->recv[me], v);
		break;
	}
	case W_BROADCAST:
		rc = coll_broadcast(d, g, r->recv[me], r->count, r->root);
		break;
	case W_REDUCE:
		rc = coll_reduce(d, g, r->send[me], r->recv[me], r->count, COLL_SUM, r->root);
		break;
	case W_SEND_RECV:
		rc = me == 0 ? coll_send(d, r->devs[1], r->send[0], r->count)
			     : coll_recv(d, r->devs[0], r->recv[1], r->count);
		break;
	default:
		break;
	}
	r->rc[me] = rc;
	r->t_end[me] = emu_now(d);
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* The serial reference: the documented order, written out plainly.                    */

/* x_{order[start]} + x_{order[start+1]} + ... (n terms, indices mod n), left to right. */
static float ordered_sum(float *const *x, const int *order, int n, int start, size_t j)
{
	float acc = x[order[start % n]][j];

	for (int t = 1; t < n; t++)
		acc += x[order[(start + t) % n]][j];
	return acc;
}

/* Chunk of j when len is cut into n: chunk c is [c*len/n, (c+1)*len/n). */
static int chunk(size_t len, int n, size_t j)
{
	int c = 0;

	while (c + 1 < n && (uint64_t)(c + 1) * len / (uint64_t)n <= j)
		c++;
	return c;
}

static void expect_all_reduce(const struct run *r, const struct topo *t, float *out)
{
	int ident[MAXN], nodes[MAXN][MAXN], nnode = 0, L = 0, even = 1;

	for (int i = 0; i < r->n; i++)
		ident[i] = i;
	/* Members by node, nodes in order of first appearance. */
	for (int i = 0; i < r->n; i++) {
		int node = r->devs[i] / t->gpus_per_node, s;

		for (s = 0; s < nnode && nodes[s][0] >= 0 &&
			    r->devs[nodes[s][0]] / t->gpus_per_node != node;
		     s++)
			;
		if (s == nnode) {
			nnode++;
			for (int k = 0; k < MAXN; k++)
				nodes[s][k] = -1;
		}
		for (int k = 0; k < MAXN; k++)
			if (nodes[s][k] < 0) {
				nodes[s][k] = i;
				break;
			}
	}
	for (int s = 0; s < nnode; s++) {
		int cnt = 0;

		while (cnt < MAXN && nodes[s][cnt] >= 0)
			cnt++;
		if (s == 0)
			L = cnt;
		even &= cnt == L;
	}
	if (nnode > 1 && even && L > 1) {
		/* Hierarchical: node sums in local order, then across nodes in node order. */
		for (size_t j = 0; j < r->count; j++) {
			int q = chunk(r->count, L, j);
			size_t qlo = (uint64_t)q * r->count / (uint64_t)L;
			size_t qlen = (uint64_t)(q + 1) * r->count / (uint64_t)L - qlo;
			int sub = chunk(qlen, nnode, j - qlo);
			float acc = 0;

			for (int k = 0; k < nnode; k++) {
				float part = ordered_sum(r->send, nodes[(sub + 1 + k) % nnode], L,
							 q + 1, j);

				acc = k ? acc + part : part;
			}
			out[j] = acc;
		}
		return;
	}
	for (size_t j = 0; j < r->count; j++)
		out[j] = ordered_sum(r->send, ident, r->n, chunk(r->count, r->n, j) + 1, j);
}

/* The expected recv of member m, into out (r->nrecv elements). */
static void expected(const struct run *r, const struct topo *t, int m, float *out)
{
	int ident[MAXN];
	size_t off = 0;

	for (int i = 0; i < r->n; i++)
		ident[i] = i;
	switch (r->w) {
	case W_ALL_REDUCE:
		expect_all_reduce(r, t, out);
		break;
	case W_REDUCE_SCATTER:
		for (size_t j = 0; j < r->count; j++)
			out[j] = ordered_sum(r->send, ident, r->n, m + 1, (size_t)m * r->count + j);
		break;
	case W_ALL_GATHER:
		for (int i = 0; i < r->n; i++)
			memcpy(out + (size_t)i * r->count, r->send[i], r->count * sizeof *out);
		break;
	case W_ALL_TO_ALL:
		for (int i = 0; i < r->n; i++)
			memcpy(out + (size_t)i * r->count, r->send[i] + (size_t)m * r->count,
			       r->count * sizeof *out);
		break;
	case W_ALL_TO_ALL_V:
		for (int i = 0; i < r->n; i++) {
			size_t soff = 0;

			for (int j = 0; j < m; j++)
				soff += r->sc[i][j];
			memcpy(out + off, r->send[i] + soff, r->sc[i][m] * sizeof *out);
			off += r->sc[i][m];
		}
		break;
	case W_BROADCAST:
		for (size_t j = 0; j < r->count; j++)
			out[j] = test_value(100 + (uint64_t)r->root, j);
		break;
	case W_REDUCE:
		for (size_t j = 0; j < r->count; j++)
			out[j] = m == r->root ? ordered_sum(r->send, ident, r->n, r->root + 1, j)
					      : 0.0f;
		break;
	case W_SEND_RECV:
		if (m == 1)
			memcpy(out, r->send[0], r->count * sizeof *out);
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------------------------------ */
/* The formulas of docs/formulas.md.                                                       */

__extension__ typedef unsigned __int128 u128;

/* (steps) alpha + steps/parts * S / beta, the bandwidth term rounded up to 1 ns. */
static int64_t formula(const struct topo_link *l, uint64_t steps, uint64_t parts, uint64_t S)
{
	u128 num = (u128)steps * S * 1000000000u, den = (u128)parts * l->bw_bytes;

	return (int64_t)steps * l->lat_ns + (int64_t)((num + den - 1) / den);
}

static int64_t expected_time(const struct run *r, const struct topo *t)
{
	const int n = r->n;
	int spans = r->devs[0] / 8 != r->devs[n - 1] / 8;
	const struct topo_link *l = &t->link[spans ? TOPO_LINK_INTER : TOPO_LINK_INTRA];
	const struct topo_link *li = &t->link[TOPO_LINK_INTRA];
	uint64_t S = r->count * 4, worst = 0;

	if (n == 1)
		return 0;
	switch (r->w) {
	case W_ALL_REDUCE:
		if (n == 4 && spans) /* {6,7 | 8,9}: L = 2 per node, k = 2 nodes */
			return 2 * formula(li, 1, 2, S) + formula(l, 2 * (2 - 1), 2 * 2, S);
		if (n == 16) /* L = 8, k = 2 */
			return 2 * formula(li, 7, 8, S) + formula(l, 2 * (2 - 1), 2 * 8, S);
		return formula(l, 2 * (uint64_t)(n - 1), (uint64_t)n, S);
	case W_REDUCE_SCATTER:
	case W_ALL_GATHER:
	case W_ALL_TO_ALL:
		return formula(l, (uint64_t)(n - 1), (uint64_t)n, S * (uint64_t)n);
	case W_ALL_TO_ALL_V:
		for (int i = 0; i < n; i++) {
			uint64_t out = 0, in = 0;

			for (int j = 0; j < n; j++)
				if (j != i) {
					out += r->sc[i][j] * 4;
					in += r->sc[j][i] * 4;
				}
			worst = out > worst ? out : worst;
			worst = in > worst ? in : worst;
		}
		return (int64_t)(n - 1) * l->lat_ns +
		       (int64_t)(((u128)worst * 1000000000u + l->bw_bytes - 1) / l->bw_bytes);
	case W_BROADCAST:
	case W_REDUCE:
		return (int64_t)(n - 2) * l->lat_ns + formula(l, 1, 1, S);
	case W_SEND_RECV:
		return formula(l, 1, 1, S);
	default:
		return -1;
	}
}

/* ------------------------------------------------------------------------------------ */

static void setup(struct run *r, enum which w, const int *devs, int n, size_t count)
{
	memset(r, 0, sizeof *r);
	r->w = w;
	r->devs = devs;
	r->n = n;
	r->count = count;
	r->root = n > 1 ? n - 2 : 0;
	switch (w) {
	case W_ALL_REDUCE:
	case W_BROADCAST:
	case W_REDUCE:
	case W_SEND_RECV:
		r->nsend = r->nrecv = count;
		break;
	case W_REDUCE_SCATTER:
		r->nsend = count * (size_t)n;
		r->nrecv = count;
		break;
	case W_ALL_GATHER:
		r->nsend = count;
		r->nrecv = count * (size_t)n;
		break;
	case W_ALL_TO_ALL:
		r->nsend = r->nrecv = count * (size_t)n;
		break;
	case W_ALL_TO_ALL_V:
		/* Uneven: i sends (1 + (i + 2j) % 3) * count / 2 elements to j. */
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++)
				r->sc[i][j] = (size_t)(1 + (i + 2 * j) % 3) * count / 2;
		for (int i = 0; i < n; i++) {
			size_t s = 0, v = 0;

			for (int j = 0; j < n; j++) {
				s += r->sc[i][j];
				v += r->sc[j][i];
			}
			r->nsend = s > r->nsend ? s : r->nsend;
			r->nrecv = v > r->nrecv ? v : r->nrecv;
		}
		break;
	default:
		break;
	}
	for (int i = 0; i < n; i++) {
		r->send[i] = malloc((r->nsend ? r->nsend : 1) * sizeof(float));
		r->recv[i] = calloc(r->nrecv ? r->nrecv : 1, sizeof(float));
		for (size_t j = 0; j < r->nsend; j++)
			r->send[i][j] = test_value((uint64_t)i, j);
		if (w == W_BROADCAST)
			for (size_t j = 0; j < r->nrecv; j++)
				r->recv[i][j] =
					i == r->root ? test_value(100 + (uint64_t)i, j) : -1.0f;
	}
}

static void teardown(struct run *r)
{
	for (int i = 0; i < r->n; i++) {
		free(r->send[i]);
		free(r->recv[i]);
	}
}

/* Runs one case and checks data, return codes and time. */
static void check_case(struct emu_cluster *c, enum which w, int gi, size_t count)
{
	const struct topo *t = &emu_cluster_config(c)->topo;
	struct run r;
	float *want;
	int64_t t_want;

	if (w == W_SEND_RECV && groups[gi].n != 2)
		return;
	setup(&r, w, groups[gi].devs, groups[gi].n, count);
	assert_int_equal(emu_cluster_run(c, device, &r), 0);
	want = malloc((r.nrecv ? r.nrecv : 1) * sizeof *want);
	t_want = expected_time(&r, t);
	for (int m = 0; m < r.n; m++) {
		assert_int_equal(r.rc[m], 0);
		if (w == W_SEND_RECV && m == 0)
			continue;
		{
			size_t nrecv = r.nrecv;

			if (w == W_ALL_TO_ALL_V) /* members receive different amounts */
				for (int i = nrecv = 0; i < r.n; i++)
					nrecv += r.sc[i][m];
			expected(&r, t, m, want);
			if (memcmp(want, r.recv[m], nrecv * sizeof *want)) {
				for (size_t j = 0; j < nrecv; j++)
					if (memcmp(&want[j], &r.recv[m][j], sizeof *want))
						fail_msg("%s n=%d count=%zu: member %d element %zu "
							 "is %a, want %a",
							 which_name[w], r.n, count, m, j,
							 (double)r.recv[m][j], (double)want[j]);
			}
			if (r.t_end[m] != t_want)
				fail_msg("%s n=%d count=%zu: member %d ends at %lld ns, formula "
					 "says %lld",
					 which_name[w], r.n, count, m, (long long)r.t_end[m],
					 (long long)t_want);
		}
	}
	free(want);
	teardown(&r);
}

static void run_op(enum which w)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 2, 16, 0, 0);

	for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
		for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
			int scaled = w == W_REDUCE_SCATTER || w == W_ALL_GATHER ||
				     w == W_ALL_TO_ALL || w == W_ALL_TO_ALL_V;

			if (test_skip_large() && counts[ci] > 1000 && scaled && groups[gi].n > 4)
				continue;
			check_case(c, w, (int)gi, counts[ci]);
		}
	emu_cluster_free(c);
}

static void test_all_reduce(void **state)
{
	(void)state;
	run_op(W_ALL_REDUCE);
}

static void test_reduce_scatter(void **state)
{
	(void)state;
	run_op(W_REDUCE_SCATTER);
}

static void test_all_gather(void **state)
{
	(void)state;
	run_op(W_ALL_GATHER);
}

static void test_all_to_all(void **state)
{
	(void)state;
	run_op(W_ALL_TO_ALL);
}

static void test_all_to_all_v(void **state)
{
	(void)state;
	run_op(W_ALL_TO_ALL_V);
}

static void test_broadcast(void **state)
{
	(void)state;
	run_op(W_BROADCAST);
}

static void test_reduce(void **state)
{
	(void)state;
	run_op(W_REDUCE);
}

static void test_send_recv(void **state)
{
	(void)state;
	run_op(W_SEND_RECV);
}

/* The data is chosen so that order shows: a plain 0..n-1 sum differs from the ring's
 * order somewhere, so the bitwise checks above would catch a wrong order. */
static void test_order_is_observable(void **state)
{
	float *x[8];
	int ident[8] = {0, 1, 2, 3, 4, 5, 6, 7}, differ = 0;

	(void)state;
	for (int i = 0; i < 8; i++) {
		x[i] = malloc(1000 * sizeof(float));
		for (size_t j = 0; j < 1000; j++)
			x[i][j] = test_value((uint64_t)i, j);
	}
	for (size_t j = 0; j < 1000; j++) {
		float a = ordered_sum(x, ident, 8, 0, j), b = ordered_sum(x, ident, 8, 3, j);

		differ += memcmp(&a, &b, sizeof a) != 0;
	}
	for (int i = 0; i < 8; i++)
		free(x[i]);
	assert_true(differ > 10);
}

/* ------------------------------------------------------------------------------------ */
/* Overlap: a posted all-reduce and compute on the same device cost max(), not the sum.  */

struct overlap {
	double flops;      /* compute issued while the all-reduce is in flight */
	int async;         /* 1: coll_iall_reduce + compute + coll_wait */
	int64_t t_comm[8]; /* duration of the all-reduce alone, measured on a fresh stream */
	int64_t t_end[8];
	int64_t t_comp[8];
};

static int overlap_device(struct emu_dev *d, void *arg)
{
	struct overlap *o = arg;
	struct emu_group *g = emu_world(d);
	struct coll_req *req;
	float buf[1024] = {0};
	int id = emu_dev_id(d), rc;

	if (o->async) {
		if ((rc = coll_iall_reduce(d, g, buf, buf, 1024, COLL_SUM, &req)))
			return rc;
		o->t_comp[id] = emu_compute(d, "matmul", o->flops, 0);
		if ((rc = coll_wait(d, req)))
			return rc;
	} else {
		if ((rc = coll_all_reduce(d, g, buf, buf, 1024, COLL_SUM)))
			return rc;
		o->t_comp[id] = emu_compute(d, "matmul", o->flops, 0);
	}
	o->t_end[id] = emu_now(d);
	o->t_comm[id] = emu_stream_time(d, EMU_STREAM_COMM);
	return 0;
}

static void test_overlap(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 8, 0, 0);
	/* The all-reduce of 4 KiB on 8 A100s takes 14 alpha + bandwidth, about 42 us; compute
	 * of 1e9 and 1e11 FLOPs at 0.7 * 312 TFLOP/s takes about 7.6 us and 458 us. */
	double flops[] = {1e9, 1e11};

	(void)state;
	for (int f = 0; f < 2; f++) {
		struct overlap o = {.flops = flops[f], .async = 1},
			       b = {.flops = flops[f], .async = 0};

		assert_int_equal(emu_cluster_run(c, overlap_device, &o), 0);
		assert_int_equal(emu_cluster_run(c, overlap_device, &b), 0);
		for (int i = 0; i < 8; i++) {
			int64_t comm = o.t_comm[i], comp = o.t_comp[i];

			assert_true(comm > 0 && comp > 0);
			assert_int_equal(o.t_end[i], comm > comp ? comm : comp);
			assert_int_equal(b.t_end[i], comm + comp);
		}
	}
	emu_cluster_free(c);
}

/* An async all-reduce starts no earlier than the compute that was issued before it. */
static int after_compute_device(struct emu_dev *d, void *arg)
{
	int64_t *out = arg;
	float buf[16] = {0};
	int64_t before;
	int rc;

	emu_compute(d, "produce", 1e10 * (emu_dev_id(d) + 1), 0);
	before = emu_now(d);
	rc = coll_all_reduce(d, emu_world(d), buf, buf, 16, COLL_SUM);
	out[emu_dev_id(d) * 2] = before;
	out[emu_dev_id(d) * 2 + 1] = emu_now(d);
	return rc;
}

static void test_starts_at_last_arrival(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);
	const struct topo_link *l = &emu_cluster_config(c)->topo.link[TOPO_LINK_INTRA];
	int64_t t[8];

	(void)state;
	assert_int_equal(emu_cluster_run(c, after_compute_device, t), 0);
	/* Device 3 computed longest; everyone's all-reduce ends at its arrival + duration. */
	for (int i = 0; i < 4; i++)
		assert_int_equal(t[2 * i + 1], t[2 * 3] + formula(l, 6, 4, 64));
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_is_observable),
		cmocka_unit_test(test_all_reduce),
		cmocka_unit_test(test_reduce_scatter),
		cmocka_unit_test(test_all_gather),
		cmocka_unit_test(test_all_to_all),
		cmocka_unit_test(test_all_to_all_v),
		cmocka_unit_test(test_broadcast),
		cmocka_unit_test(test_reduce),
		cmocka_unit_test(test_send_recv),
		cmocka_unit_test(test_overlap),
		cmocka_unit_test(test_starts_at_last_arrival),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
