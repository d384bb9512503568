/* Pipeline schedules (src/pipe/schedule.h): every generator's lists pass the checker; hand-made
 * invalid lists are rejected with the violation named; and run on the virtual cluster
 * with equal unit costs (F = B = W = T, free transfers), each schedule's measured bubble
 * and peak in-flight micro-batches equal docs/formulas.md's table, and HelixPipe's bubble
 * does not grow with the attention's cost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"
#include "unit_sched.h"
#include "pipe/schedule.h"

static const int kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1, SCHED_ZBH2};

static void test_generators_are_valid(void **state)
{
	(void)state;
	for (int p = 2; p <= 4; p += 2) /* helix: 2 layers a stage */
		for (int f = 1; f <= 4; f *= 2) {
			struct sched sc;
			char err[512];

			assert_int_equal(
				sched_constraints(SCHED_HELIX, p, f * p, 1, 2 * p, err, sizeof err),
				0);
			sched_build_helix(&sc, p, f * p, 2, 3.0);
			if (sched_check(&sc, err, sizeof err))
				fail_msg("helix p %d m %d: %s", p, f * p, err);
			sched_free(&sc);
		}
	for (int k = 0; k < 5; k++)
		for (int p = 2; p <= 4; p += 2)
			for (int f = 1; f <= 4; f *= 2) {
				struct sched sc;
				char err[512];
				int m = f * p, v = kinds[k] == SCHED_INTERLEAVED ? 2 : 1;

				assert_int_equal(
					sched_constraints(kinds[k], p, m, v, 8, err, sizeof err),
					0);
				sched_build(&sc, kinds[k], p, m, v);
				if (sched_check(&sc, err, sizeof err))
					fail_msg("%s p %d m %d: %s", sched_name(kinds[k]), p, m,
						 err);
				sched_free(&sc);
			}
}

/* Hand-made lists, each with one fault, and what the checker must say. */
static void expect_violation(struct sched *sc, const char *want)
{
	char err[512];

	assert_int_equal(sched_check(sc, err, sizeof err), -1);
	if (!strstr(err, want))
		fail_msg("checker said '%s', expected '%s'", err, want);
	sched_free(sc);
}

/* an action of stage s on its block (v = 1: block s) */
#define PUSH(sc, s, op, mb, msg, peer)                                                             \
	sched_push((sc), (s), (struct sched_action){(op), (mb), (s), (msg), (peer)})

static void test_checker_names_violations(void **state)
{
	struct sched sc;

	(void)state;
	/* a backward before its forward on the last stage */
	sched_init_empty(&sc, SCHED_1F1B, 2, 1, 1);
	PUSH(&sc, 0, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_RECV, 0, SCHED_GRAD, 1);
	PUSH(&sc, 0, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_RECV, 0, SCHED_ACT, 0);
	PUSH(&sc, 1, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 1, SCHED_SEND, 0, SCHED_GRAD, 0);
	expect_violation(&sc, "stage 1 runs the backward of micro-batch 0 before its forward");

	/* a forward before its input arrives; then an unmatched send: stage 0 sends
	 * micro-batch 0's activations, stage 1 never receives them */
	sched_init_empty(&sc, SCHED_GPIPE, 2, 1, 1);
	PUSH(&sc, 0, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_RECV, 0, SCHED_GRAD, 1);
	PUSH(&sc, 0, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 1, SCHED_RECV, 0, SCHED_ACT, 0);
	PUSH(&sc, 1, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_SEND, 0, SCHED_GRAD, 0);
	expect_violation(&sc, "stage 1 runs the forward of micro-batch 0 before receiving its "
			      "input from stage 0");
	sched_init_empty(&sc, SCHED_GPIPE, 2, 1, 1);
	PUSH(&sc, 0, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_RECV, 0, SCHED_GRAD, 1);
	PUSH(&sc, 0, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 1, SCHED_SEND, 0, SCHED_GRAD, 0);
	expect_violation(&sc, "stage 0 sends the activations of micro-batch 0 to stage 1, which "
			      "never receives them");
	sched_init_empty(&sc, SCHED_GPIPE, 2, 1, 1);
	PUSH(&sc, 0, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_RECV, 0, SCHED_ACT, 0);
	PUSH(&sc, 1, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 1, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_SEND, 0, SCHED_GRAD, 0);
	expect_violation(&sc, "stage 0 runs the backward of micro-batch 0 before receiving its "
			      "output's gradient from stage 1");
	sched_init_empty(&sc, SCHED_GPIPE, 2, 1, 1);
	PUSH(&sc, 0, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_RECV, 0, SCHED_GRAD, 1);
	PUSH(&sc, 0, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_RECV, 0, SCHED_ACT, 0);
	PUSH(&sc, 1, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 1, SCHED_BW, 0, SCHED_GRAD, -1);
	expect_violation(&sc, "stage 0 receives the gradient of micro-batch 0 from stage 1, "
			      "which never sends it");
	sched_init_empty(&sc, SCHED_GPIPE, 2, 1, 1);
	PUSH(&sc, 0, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	expect_violation(&sc, "stage 0 runs the send of activations of micro-batch 0 twice");
	/* a send to the wrong stage */
	sched_init_empty(&sc, SCHED_GPIPE, 3, 1, 1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 2);
	expect_violation(&sc, "stage 0, action 0: a send of the activations of micro-batch 0 "
			      "with stage 2");
	/* two stages each waiting for the other: every action present, in an order that
	 * cannot run */
	sched_init_empty(&sc, SCHED_1F1B, 2, 2, 1);
	PUSH(&sc, 0, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 0, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_RECV, 0, SCHED_GRAD, 1);
	PUSH(&sc, 0, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 0, SCHED_F, 1, SCHED_ACT, -1);
	PUSH(&sc, 0, SCHED_SEND, 1, SCHED_ACT, 1);
	PUSH(&sc, 0, SCHED_RECV, 1, SCHED_GRAD, 1);
	PUSH(&sc, 0, SCHED_BW, 1, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_RECV, 1, SCHED_ACT, 0);
	PUSH(&sc, 1, SCHED_F, 1, SCHED_ACT, -1);
	PUSH(&sc, 1, SCHED_BW, 1, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_SEND, 1, SCHED_GRAD, 0);
	PUSH(&sc, 1, SCHED_RECV, 0, SCHED_ACT, 0);
	PUSH(&sc, 1, SCHED_F, 0, SCHED_ACT, -1);
	PUSH(&sc, 1, SCHED_BW, 0, SCHED_GRAD, -1);
	PUSH(&sc, 1, SCHED_SEND, 0, SCHED_GRAD, 0);
	expect_violation(&sc, "no stage can go on (a cycle of waits): stage 0 waits for the "
			      "gradient of micro-batch 0 from stage 1; stage 1 waits for the "
			      "activations of micro-batch 1 from stage 0");
}

/* ------------------------------------------------------------------------------------ */
/* Unit costs on the virtual cluster                                                    */

struct unit_job {
	const struct sched *sc;
	long long end[8], busy[8], bubble[8];
	long long *span[8];
};

static int unit_device(struct emu_dev *d, void *arg)
{
	static const struct sched_ops ops = {u_fwd, u_bwd, u_send, u_recv, u_wait, NULL, NULL};
	struct unit_job *j = arg;
	struct unit u = {.d = d, .sc = j->sc, .first = -1};
	int s = emu_dev_id(d), rc = sched_exec(j->sc, s, d, &ops, &u, j->span[s]);

	j->end[s] = emu_now(d);
	j->busy[s] = emu_compute_ns(d);
	j->bubble[s] = u.last - u.first - j->busy[s];
	return rc;
}

/* Runs sc with unit costs; returns the step time (the last stage to finish). With draw,
 * draws the run there at most width characters a row (sched_draw). */
static long long run_unit(const struct sched *sc, struct unit_job *j, FILE *draw, int width)
{
	struct emu_cluster *c = unit_cluster(sc->p, 0);
	long long step = 0;

	memset(j, 0, sizeof *j);
	j->sc = sc;
	for (int s = 0; s < sc->p; s++)
		j->span[s] = calloc(2 * (size_t)sc->n[s] + 1, sizeof(long long));
	if (emu_cluster_run(c, unit_device, j))
		fail_msg("%s: %s", sched_name(sc->kind), emu_cluster_report(c));
	for (int s = 0; s < sc->p; s++)
		step = j->end[s] > step ? j->end[s] : step;
	if (draw)
		sched_draw(sc, j->span, width, draw);
	for (int s = 0; s < sc->p; s++)
		free(j->span[s]);
	emu_cluster_free(c);
	return step;
}

/* docs/formulas.md: bubble time (p-1)(T_F + T_B) for GPipe and 1F1B, where T_B is the whole
 * backward (2T here); divided by v interleaved; (p-1)(T_F + T_B - T_W) for ZB-H1 and
 * (p-1)(T_F + T_B - 2 T_W) for ZB-H2, where T_B is the input backward alone (T). A
 * stage's bubble is its idle time between its first and last action (schedule.h); the
 * largest over stages is compared, and for all but ZB-H2 it is stage 0's, which spans
 * the whole step: the step is then 3 m T plus the bubble. ZB-H2 fills its bubble from
 * m = 2p on; with m = p it is ZB-H1's. Peak in-flight micro-batches on stage 0: m, p,
 * p (1 + (p-1)/(p v)), p, 2p - 1 (at most m). */
static void test_bubbles_and_memory_match_the_table(void **state)
{
	(void)state;
	for (int k = 0; k < 5; k++)
		for (int p = 2; p <= 4; p += 2)
			for (int f = 1; f <= 4; f *= 2) {
				int m = f * p, v = kinds[k] == SCHED_INTERLEAVED ? 2 : 1;
				long long want_bubble, want_step, step, bubble;
				double want_peak;
				struct sched sc;
				struct unit_job j;

				switch (kinds[k]) {
				case SCHED_GPIPE:
				case SCHED_1F1B:
					want_bubble = (long long)(p - 1) * 3 * T;
					break;
				case SCHED_INTERLEAVED:
					want_bubble = (long long)(p - 1) * 3 * T / v;
					break;
				case SCHED_ZBH1:
					want_bubble = (long long)(p - 1) * T;
					break;
				default:
					want_bubble = m < 2 * p ? (long long)(p - 1) * T : 0;
					break;
				}
				want_peak = kinds[k] == SCHED_GPIPE ? m
					    : kinds[k] == SCHED_INTERLEAVED
						    ? p * (1 + (p - 1.0) / (p * v))
					    : kinds[k] == SCHED_ZBH2 && m >= 2 * p ? 2 * p - 1
										   : p;
				if (want_peak > m)
					want_peak = m;
				sched_build(&sc, kinds[k], p, m, v);
				step = run_unit(&sc, &j, NULL, 0);
				bubble = 0;
				for (int s = 0; s < p; s++) {
					assert_int_equal(j.busy[s], 3LL * m * T);
					bubble = j.bubble[s] > bubble ? j.bubble[s] : bubble;
				}
				if (bubble != want_bubble)
					fail_msg("%s p %d m %d: bubble %lld ns, want %lld",
						 sched_name(kinds[k]), p, m, bubble, want_bubble);
				want_step = 3LL * m * T + want_bubble;
				if (kinds[k] != SCHED_ZBH2 && step != want_step)
					fail_msg("%s p %d m %d: step %lld ns, want %lld",
						 sched_name(kinds[k]), p, m, step, want_step);
				if (sched_peak_inflight(&sc, 0) != want_peak)
					fail_msg("%s p %d m %d: %g micro-batches in flight on "
						 "stage 0, "
						 "want %g",
						 sched_name(kinds[k]), p, m,
						 sched_peak_inflight(&sc, 0), want_peak);
				sched_free(&sc);
			}
}

/* HelixPipe takes the attention out of the bubble (docs/formulas.md): with 4 stages of 2
 * layers and 8 micro-batches, a parameter unit costing T forward and 2T backward and an
 * attention r T and 2 r T, the largest stage bubble is the same for r = 1, 4 and 16, and
 * within 20% of (p-1)(T_F + T_B) of the units alone, 3 x 6 T = 18 T (1F1B's grows with
 * r: (p-1) 3 v (1 + r) T). */
static void test_helix_bubble_leaves_attention(void **state)
{
	long long first = -1;

	(void)state;
	for (int r = 1; r <= 16; r *= 4) {
		struct sched sc;
		struct unit_job j;
		long long bubble = 0;
		char err[256];

		sched_build_helix(&sc, 4, 8, 2, r);
		assert_int_equal(sched_check(&sc, err, sizeof err), 0);
		run_unit(&sc, &j, NULL, 0);
		for (int s = 0; s < 4; s++)
			bubble = j.bubble[s] > bubble ? j.bubble[s] : bubble;
		if (first < 0)
			first = bubble;
		if (bubble != first || bubble > 18LL * T * 12 / 10)
			fail_msg("helix, attention %d T: bubble %.2f T (with 1 T: %.2f T)", r,
				 (double)bubble / T, (double)first / T);
		sched_free(&sc);
	}
}

/* The diagram shows every compute action of every stage: a run longer than a row is
 * drawn in bands of rows, not scaled until some actions fall between two cells. Unit
 * costs, 4 stages and 8 micro-batches take 30 (ZB-H1) or 33 cells of the shortest
 * action; 15 fit a row of 60 characters, so the diagram has two or three bands. */
static void test_diagram_shows_every_action(void **state)
{
	static const enum sched_kind drawn[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_ZBH1};

	(void)state;
	for (size_t k = 0; k < sizeof drawn / sizeof *drawn; k++) {
		char row[8][4096] = {{0}}, line[4096];
		struct sched sc;
		struct unit_job j;
		FILE *f = tmpfile();
		int bands = 0;

		assert_non_null(f);
		sched_build(&sc, drawn[k], 4, 8, 1);
		run_unit(&sc, &j, f, 60);
		rewind(f);
		while (fgets(line, sizeof line, f)) {
			int s;

			if (strstr(line, " ms\n") && !strstr(line, "pipeline"))
				bands++;
			else if (sscanf(line, "stage %d", &s) == 1 && s >= 0 && s < 4) {
				assert_true(strlen(line) <= 60 + 12); /* the label and bars */
				strncat(row[s], strchr(line, '|'),
					sizeof row[s] - strlen(row[s]) - 1);
			}
		}
		fclose(f);
		assert_true(bands >= 2);
		for (int s = 0; s < 4; s++)
			for (int mb = 0; mb < 8; mb++)
				for (const char *op = "FBW"; *op; op++) {
					char want[16];

					if (*op == 'W' && drawn[k] != SCHED_ZBH1)
						continue;
					snprintf(want, sizeof want, "%c%-2d ", *op, mb);
					if (!strstr(row[s], want))
						fail_msg("%s: stage %d's diagram has no %s:\n%s",
							 sched_name(drawn[k]), s, want, row[s]);
				}
		sched_free(&sc);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_generators_are_valid),
		cmocka_unit_test(test_checker_names_violations),
		cmocka_unit_test(test_bubbles_and_memory_match_the_table),
		cmocka_unit_test(test_helix_bubble_leaves_attention),
		cmocka_unit_test(test_diagram_shows_every_action),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
