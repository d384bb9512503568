/* Memory accounting by category: current and peak bytes, the cap to the byte, and the
 * same accounting in dry-run (no data) as in execute mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common.h"
#include "mem.h"

struct seen {
	uint64_t cur[MEM_NCAT], peak[MEM_NCAT], peak_total, after_free;
	int data_null, at_cap_ok, over_cap_null;
};

static int device(struct emu_dev *d, void *arg)
{
	struct seen *s = arg;
	struct mem_block *w, *g, *a1, *a2, *full, *over;

	if (emu_dev_id(d) != 0)
		return 0;
	w = mem_alloc(d, MEM_PARAM, 1000, "w");
	g = mem_alloc(d, MEM_GRAD, 1000, "g");
	a1 = mem_alloc(d, MEM_ACT, 300, "a1");
	a2 = mem_alloc(d, MEM_ACT, 200, "a2");
	s->data_null = w->data == NULL;
	mem_free(d, a1);
	mem_free(d, a2);
	a1 = mem_alloc(d, MEM_ACT, 100, "a3"); /* act: 500 at peak, then 100 */
	for (int k = 0; k < MEM_NCAT; k++) {
		s->cur[k] = mem_cur_bytes(d, k);
		s->peak[k] = mem_peak_bytes(d, k);
	}
	/* Exactly up to the cap fits; one byte more does not. */
	full = mem_alloc(d, MEM_WORK, mem_cap_bytes(d) - mem_cur_total(d), "fill");
	s->at_cap_ok = full != NULL;
	mem_free(d, full);
	s->peak_total = mem_peak_total(d);
	mem_free(d, g);
	s->after_free = mem_cur_total(d);
	(void)w;
	over = mem_alloc(d, MEM_WORK, mem_cap_bytes(d) - mem_cur_total(d) + 1, "over");
	s->over_cap_null = over == NULL;
	return over ? 0 : EMU_EOOM;
}

static void check(int dry_run)
{
	struct emu_config cfg;
	struct emu_cluster *c;
	struct seen s = {0};

	emu_config_default(&cfg, "rtx4090-pcie");
	cfg.ndev = 2;
	cfg.dry_run = dry_run;
	cfg.mem_cap = 1 << 20;
	c = emu_cluster_new(&cfg);
	assert_int_equal(emu_cluster_run(c, device, &s), EMU_EOOM);
	assert_int_equal(s.data_null, dry_run);
	assert_int_equal(s.cur[MEM_PARAM], 1000);
	assert_int_equal(s.cur[MEM_GRAD], 1000);
	assert_int_equal(s.cur[MEM_ACT], 100);
	assert_int_equal(s.peak[MEM_ACT], 500);
	assert_int_equal(s.cur[MEM_OPTIM], 0);
	assert_int_equal(s.peak[MEM_WORK], 0);
	assert_true(s.at_cap_ok);
	assert_int_equal(s.peak_total, 1 << 20);
	assert_int_equal(s.after_free, 1100);
	assert_true(s.over_cap_null);
	/* After the run every byte is returned; peaks stay for the report. */
	assert_int_equal(mem_cur_total(emu_cluster_dev(c, 0)), 0);
	assert_int_equal(mem_peak_bytes(emu_cluster_dev(c, 0), MEM_WORK), (1 << 20) - 2100);
	emu_cluster_free(c);
}

static void test_execute(void **state)
{
	(void)state;
	check(0);
}

static void test_dry_run_same_accounting(void **state)
{
	(void)state;
	check(1);
}

static void test_default_cap_is_hbm(void **state)
{
	struct emu_config cfg;
	struct emu_cluster *c;

	(void)state;
	emu_config_default(&cfg, "h20");
	cfg.ndev = 1;
	cfg.dry_run = 1; /* the device fills its cap: 96 GiB, which only dry-run can hold */
	c = emu_cluster_new(&cfg);
	assert_int_equal(emu_cluster_run(c, device, &(struct seen){0}), EMU_EOOM);
	assert_int_equal(mem_cap_bytes(emu_cluster_dev(c, 0)), 96ULL << 30);
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_execute),
		cmocka_unit_test(test_dry_run_same_accounting),
		cmocka_unit_test(test_default_cap_is_hbm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
