/* 1024 devices start, run 100 collectives each in dry-run, and join: 10 all-reduces over
 * everyone (hierarchical: 128 nodes of 8), 30 inside each node, 60 sends and receives
 * round a ring. Every device makes every call, and a second run gives every device the
 * same virtual end time to the nanosecond. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"

#define NDEV  1024
#define COUNT (1u << 20)

struct result {
	int64_t t_end[NDEV];
	uint64_t calls[NDEV];
};

static int device(struct emu_dev *d, void *arg)
{
	struct result *r = arg;
	int id = emu_dev_id(d), node[8], rc = 0;
	struct emu_group *g;
	struct coll_stats st;

	for (int i = 0; i < 8; i++)
		node[i] = id / 8 * 8 + i;
	if (!(g = emu_group_get(d, node, 8)))
		return EMU_EINVAL;
	for (int i = 0; i < 100 && !rc; i++) {
		if (i % 10 == 0) {
			rc = coll_all_reduce(d, emu_world(d), NULL, NULL, COUNT, COLL_SUM);
		} else if (i % 3 == 0) {
			rc = coll_all_reduce(d, g, NULL, NULL, COUNT, COLL_SUM);
		} else if (id % 2 == 0) {
			rc = coll_send(d, (id + 1) % NDEV, NULL, 1024);
			if (!rc)
				rc = coll_recv(d, (id + NDEV - 1) % NDEV, NULL, 1024);
		} else {
			rc = coll_recv(d, (id + NDEV - 1) % NDEV, NULL, 1024);
			if (!rc)
				rc = coll_send(d, (id + 1) % NDEV, NULL, 1024);
		}
	}
	r->t_end[id] = emu_now(d);
	coll_stats_get(d, "all-reduce", &st);
	r->calls[id] = st.calls;
	coll_stats_get(d, "send", &st);
	r->calls[id] += st.calls * 1000;
	return rc;
}

static void test_1024_devices(void **state)
{
	static struct result r, again;
	struct emu_cluster *c = test_cluster("dgx-h100", NDEV / 8, NDEV, 1, 0);

	(void)state;
	assert_int_equal(emu_cluster_run(c, device, &r), 0);
	for (int i = 0; i < NDEV; i++) {
		assert_int_equal(r.calls[i], 40 + 60 * 1000);
		assert_true(r.t_end[i] > 0);
	}
	assert_int_equal(emu_cluster_run(c, device, &again), 0);
	assert_memory_equal(r.t_end, again.t_end, sizeof r.t_end);
	printf("1024 devices x 100 collectives (dry-run): %.2f s wall\n",
	       (double)emu_cluster_wall_ns(c) / 1e9);
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_1024_devices),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
