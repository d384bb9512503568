/* The mesh in Megatron's rank order: tp fastest, then cp, ep, dp, pp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "run/mesh.h"

static void test_rank_order(void **state)
{
	struct mesh m;
	int g[8];

	(void)state;
	/* 16 devices: tp 2, dp 4, pp 2. Rank 13 = tp 1 + 2 * (dp 2) + 8 * (pp 1). */
	mesh_init(&m, 2, 1, 1, 4, 2);
	assert_int_equal(m.world, 16);
	assert_int_equal(mesh_coord(&m, 13, MESH_TP), 1);
	assert_int_equal(mesh_coord(&m, 13, MESH_DP), 2);
	assert_int_equal(mesh_coord(&m, 13, MESH_PP), 1);
	assert_int_equal(mesh_coord(&m, 13, MESH_CP), 0);
	assert_int_equal(mesh_rank(&m, (int[]){1, 0, 0, 2, 1}), 13);
	mesh_group(&m, 13, MESH_TP, g);
	assert_int_equal(g[0], 12);
	assert_int_equal(g[1], 13);
	mesh_group(&m, 13, MESH_DP, g);
	assert_memory_equal(g, ((int[]){9, 11, 13, 15}), 4 * sizeof(int));
	mesh_group(&m, 13, MESH_PP, g);
	assert_memory_equal(g, ((int[]){5, 13}), 2 * sizeof(int));
	mesh_group(&m, 13, MESH_CP, g);
	assert_int_equal(g[0], 13);
}

static void test_every_rank_once(void **state)
{
	struct mesh m;

	(void)state;
	mesh_init(&m, 2, 2, 1, 3, 2);
	for (int r = 0; r < m.world; r++) {
		int c[5];

		for (int d = 0; d < MESH_NDIM; d++)
			c[d] = mesh_coord(&m, r, (enum mesh_dim)d);
		assert_int_equal(mesh_rank(&m, c), r);
	}
}

static void test_describe(void **state)
{
	struct mesh m;
	char buf[64];

	(void)state;
	mesh_init(&m, 4, 1, 1, 2, 1);
	mesh_describe(&m, buf, sizeof buf);
	assert_string_equal(buf, "dp 2 x tp 4 = 8 devices");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rank_order),
		cmocka_unit_test(test_every_rank_once),
		cmocka_unit_test(test_describe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
