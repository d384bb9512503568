/* Units the command line reads, and the hardware presets against docs/formulas.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "topo.h"
#include "units.h"

static void test_sizes(void **state)
{
	uint64_t b;

	(void)state;
	assert_int_equal(units_parse_size("8", &b), 0);
	assert_int_equal(b, 8);
	assert_int_equal(units_parse_size("64M", &b), 0);
	assert_int_equal(b, 64ULL << 20);
	assert_int_equal(units_parse_size("1G", &b), 0);
	assert_int_equal(b, 1ULL << 30);
	assert_int_equal(units_parse_size("80GB", &b), 0);
	assert_int_equal(b, 80000000000ULL);
	assert_int_equal(units_parse_size("4TB", &b), 0);
	assert_int_equal(b, 4000000000000ULL);
	assert_int_equal(units_parse_size("1.5KiB", &b), 0);
	assert_int_equal(b, 1536);
	assert_int_equal(units_parse_size("8Q", &b), -1);
	assert_int_equal(units_parse_size("", &b), -1);
	assert_int_equal(units_parse_size("-1", &b), -1);
	assert_int_equal(units_parse_size("0.3", &b), -1); /* not a whole byte */
	assert_int_equal(units_parse_size("1e30", &b), UNITS_TOO_LARGE);
	assert_int_equal(units_parse_size("8E", &b), -1); /* (no such suffix) */
	assert_int_equal(units_parse_size("8000000T", &b), 0);
	assert_int_equal(units_parse_size("8388608T", &b), UNITS_TOO_LARGE); /* 2^63 */
	assert_int_equal(units_parse_size(" 8", &b), -1);
}

static void test_bandwidths_and_times(void **state)
{
	uint64_t bw;
	int64_t ns;
	long v;

	(void)state;
	assert_int_equal(units_parse_bw("50GB/s", &bw), 0);
	assert_int_equal(bw, 50000000000ULL);
	assert_int_equal(units_parse_bw("200Gb/s", &bw), 0);
	assert_int_equal(bw, 25000000000ULL);
	assert_int_equal(units_parse_bw("0GB/s", &bw), -1);
	assert_int_equal(units_parse_bw("50GB", &bw), -1);
	assert_int_equal(units_parse_bw("1e30GB/s", &bw), UNITS_TOO_LARGE);
	assert_int_equal(units_parse_time("1e30s", &ns), UNITS_TOO_LARGE);
	assert_int_equal(units_parse_time("5us", &ns), 0);
	assert_int_equal(ns, 5000);
	assert_int_equal(units_parse_time("2ms", &ns), 0);
	assert_int_equal(ns, 2000000);
	assert_int_equal(units_parse_time("1.5s", &ns), 0);
	assert_int_equal(ns, 1500000000);
	assert_int_equal(units_parse_time("5 us", &ns), -1);
	assert_int_equal(units_parse_int("12", 1, 100, &v), 0);
	assert_int_equal(v, 12);
	assert_int_equal(units_parse_int("12x", 1, 100, &v), -1);
	assert_int_equal(units_parse_int("0", 1, 100, &v), -1);
}

/* The data sheet figures of docs/formulas.md. */
static void test_presets(void **state)
{
	struct topo t;

	(void)state;
	assert_int_equal(topo_preset("dgx-a100", &t), 0);
	assert_true(t.gpu.peak_flops == 312e12);
	assert_int_equal(t.gpu.hbm_bytes, 80ULL << 30);
	assert_int_equal(t.link[TOPO_LINK_INTRA].bw_bytes, 300000000000ULL);
	assert_int_equal(t.link[TOPO_LINK_INTER].bw_bytes, 25000000000ULL); /* 200 Gb/s */
	assert_int_equal(topo_preset("dgx-h100", &t), 0);
	assert_true(t.gpu.peak_flops == 989e12 && t.gpu.hbm_bw == 3.35e12);
	assert_int_equal(t.link[TOPO_LINK_INTRA].bw_bytes, 450000000000ULL);
	assert_int_equal(t.link[TOPO_LINK_INTER].bw_bytes, 50000000000ULL); /* 400 Gb/s */
	assert_int_equal(topo_preset("h20", &t), 0);
	assert_true(t.gpu.peak_flops == 148e12);
	assert_int_equal(t.gpu.hbm_bytes, 96ULL << 30);
	assert_int_equal(topo_preset("rtx3090-pcie", &t), 0);
	assert_int_equal(t.link[TOPO_LINK_INTRA].bw_bytes, 25000000000ULL);
	assert_int_equal(t.link[TOPO_LINK_INTER].bw_bytes, 12500000000ULL); /* 100 Gb/s */
	assert_int_equal(topo_preset("rtx3090-nvlink", &t), 0);
	assert_int_equal(t.link[TOPO_LINK_INTRA].bw_bytes, 56000000000ULL);
	assert_int_equal(topo_preset("rtx4090-pcie", &t), 0);
	assert_true(t.gpu.peak_flops == 165e12);
	assert_int_equal(topo_preset("tpu-v9", &t), -1);
	for (int i = 0; topo_preset_names[i]; i++) {
		const char *name = topo_preset_names[i];

		assert_int_equal(topo_preset(name, &t), 0);
		/* the GEMM law's 64 x 64 tiles are the Hopper cards' (the H100's, which H200 and
		 * H20 take), none of the Ampere or Ada cards' (clock.c) */
		assert_int_equal(t.gpu.gemm_tile64, !strcmp(name, "dgx-h100") ||
							    !strcmp(name, "dgx-h200") ||
							    !strcmp(name, "h20"));
	}
}

static void test_link_classes(void **state)
{
	struct topo t;
	int g1[] = {0, 7}, g2[] = {0, 7, 8}, g3[] = {0, 16}, g4[] = {3};

	(void)state;
	topo_preset("dgx-h100", &t);
	t.nodes = 4;
	assert_int_equal(topo_link_class(&t, 3, 3), TOPO_LINK_SELF);
	assert_int_equal(topo_link_class(&t, 0, 7), TOPO_LINK_INTRA);
	assert_int_equal(topo_link_class(&t, 7, 8), TOPO_LINK_INTER);
	assert_int_equal(topo_group_link_class(&t, g1, 2), TOPO_LINK_INTRA);
	assert_int_equal(topo_group_link_class(&t, g2, 3), TOPO_LINK_INTER);
	assert_int_equal(topo_group_link_class(&t, g4, 1), TOPO_LINK_SELF);
	t.nodes_per_dc = 2;
	assert_int_equal(topo_group_link_class(&t, g3, 2), TOPO_LINK_DC);
	assert_int_equal(topo_link_class(&t, 8, 15), TOPO_LINK_INTRA);
	assert_int_equal(topo_link_class(&t, 8, 0), TOPO_LINK_INTER);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_bandwidths_and_times),
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_link_classes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
