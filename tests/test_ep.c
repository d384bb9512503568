/* Expert parallelism (par/ep.h: the alltoall and allgather dispatchers) against the
 * serial reference and the formulas of docs/formulas.md:
 *   - the verify table: both dispatchers with ep 2 and 4 over dp 2 and 4, ZeRO 1-3, pp
 *     (1F1B, ZB-H1), selective and full recomputation; the experts over the
 *     tensor-parallel group (ep = tp 2 and 4, sp, dp 2 with ZeRO 1 and 3, pp 2, full
 *     recomputation), dropless (capacity factor 0) over dp and over tp, and the experts
 *     cut over tp (expert tensor parallelism = tp) spread over dp x cp; no routing flip;
 *   - under context parallelism (the experts over dp x cp ranks, over none, over tp): the
 *     table's cp cases; the capacity is the micro-batch's, every expert keeping and
 *     dropping the serial model's choices, and a router counting its own rank's alone
 *     fails verify;
 *   - the load-balancing loss is the same whatever the layout;
 *   - the bytes: in a dry-run (uniform routing) 4 T k h bytes (P - 1) / P a MoE layer,
 *     micro-batch and rank on the links, plus the counts' all-to-all; in an execute run
 *     the sum of the real splits, from the routing decisions;
 *   - ranks whose experts get no token take part (no hang) and the run verifies;
 *   - the experts' memory over ep, ZeRO-1's state and ZeRO-3's weights and gradients
 *     over dp (the experts' over their own group);
 *   - a dropped all-to-all-v fails verify; runs are bitwise deterministic.
 *
 *   PEMU_TEST_FILTER=allgather build/tests/test_ep      table cases containing it
 *
 * Cases are named layout/dispatcher: "dp4/ep2/zero1/alltoall". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "coll.h"
#include "common.h"
#include "mem.h"
#include "presets.h"
#include "run/run.h"
#include "verify.h"

static struct data corpus;

static const char *const dispatch_names[] = {"alltoall", "allgather"};

/* moe-tiny on dp ranks with experts over ep of them. */
static void make_cfg(struct run_cfg *cfg, int dp, int ep, int pp, enum par_ep_dispatch d)
{
	test_make_cfg(cfg, "moe-tiny", dp, 1, pp, &corpus);
	cfg->ep = ep;
	cfg->ep_dispatch = d;
	cfg->gbs = 4 * dp;
	if (pp > 1) {
		cfg->model.num_layers = 4;
		cfg->gbs = 4 * dp * pp;
	}
}

/* ------------------------------------------------------------------------------------ */
/* The verify table                                                                     */

static const struct layout {
	const char *name;
	int dp, ep, pp, zero;
	enum par_recompute recompute;
	enum sched_kind schedule;
	int tp, sp;   /* ep = tp: the experts over the tensor-parallel group */
	int dropless; /* capacity factor 0 */
	int cp;       /* context parallelism: the routing over the micro-batch's cp ranks */
	enum par_cp_comm comm;
} layouts[] = {
	{"dp2/ep2", 2, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp4/ep2", 4, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp4/ep4", 4, 4, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp4/ep2/zero1", 4, 2, 1, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp4/ep2/zero2", 4, 2, 1, 2, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp4/ep2/zero3/selective", 4, 2, 1, 3, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B, 1, 0, 0, 1,
	 PAR_CP_P2P},
	{"dp2/ep2/zero3/full", 2, 2, 1, 3, PAR_RECOMPUTE_FULL, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp4/ep4/zero1/full", 4, 4, 1, 1, PAR_RECOMPUTE_FULL, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp2/ep2/selective", 2, 2, 1, 0, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B, 1, 0, 0, 1,
	 PAR_CP_P2P},
	{"dp2/ep2/pp2", 2, 2, 2, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 1, PAR_CP_P2P},
	{"dp2/ep2/pp2/zb-h1/zero1", 2, 2, 2, 1, PAR_RECOMPUTE_NONE, SCHED_ZBH1, 1, 0, 0, 1,
	 PAR_CP_P2P},
	{"tp2/ep2", 1, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 0, 0, 1, PAR_CP_P2P},
	{"tp2/sp/ep2/full", 1, 2, 1, 0, PAR_RECOMPUTE_FULL, SCHED_1F1B, 2, 1, 0, 1, PAR_CP_P2P},
	{"tp4/ep4/dp2/zero1", 2, 4, 1, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 4, 0, 0, 1, PAR_CP_P2P},
	{"tp2/sp/ep2/dp2/zero3", 2, 2, 1, 3, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 1,
	 PAR_CP_P2P},
	{"tp2/ep2/pp2", 1, 2, 2, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 0, 0, 1, PAR_CP_P2P},
	{"dp4/ep2/dropless", 4, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 1, 1, PAR_CP_P2P},
	{"dp4/ep4/zero1/dropless", 4, 4, 1, 1, PAR_RECOMPUTE_FULL, SCHED_1F1B, 1, 0, 1, 1,
	 PAR_CP_P2P},
	{"tp2/sp/ep2/dropless", 1, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 1, 1, PAR_CP_P2P},
	{"tp2/ep1/dropless", 1, 1, 1, 0, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B, 2, 0, 1, 1,
	 PAR_CP_P2P},
	/* the experts cut over tp (--expert-tensor-parallel-size = tp), spread over dp x cp */
	{"etp2/tp2/dp2/ep2", 2, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 0, 0, 1, PAR_CP_P2P},
	{"etp2/tp2/sp/dp4/ep4/zero3", 4, 4, 1, 3, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 1,
	 PAR_CP_P2P},
	{"etp2/tp2/dp2/ep2/pp2/full", 2, 2, 2, 0, PAR_RECOMPUTE_FULL, SCHED_1F1B, 2, 0, 0, 1,
	 PAR_CP_P2P},
	{"etp2/tp2/sp/cp2/ep2", 1, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 2, PAR_CP_P2P},
	/* whole experts over ep ranks spanning tp (ep not tp): each rank its own rows */
	{"tp2/sp/dp2/ep4", 2, 4, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 1, PAR_CP_P2P},
	{"tp4/sp/dp2/ep2/selective", 2, 2, 1, 0, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B, 4, 1, 0, 1,
	 PAR_CP_P2P},
	{"tp2/sp/dp2/ep4/zero3", 2, 4, 1, 3, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 1,
	 PAR_CP_P2P},
	{"tp2/sp/dp2/ep4/zero1/dropless", 2, 4, 1, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 1, 1,
	 PAR_CP_P2P},
	{"tp2/sp/dp2/ep4/pp2/full", 2, 4, 2, 0, PAR_RECOMPUTE_FULL, SCHED_1F1B, 2, 1, 0, 1,
	 PAR_CP_P2P},
	{"tp2/sp/cp2/ep4/a2a", 1, 4, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 2, PAR_CP_A2A},
	/* under context parallelism: the experts over dp x cp, or none, or over tp */
	{"cp2/ep2", 1, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 2, PAR_CP_P2P},
	{"cp2/dp2/ep4/zero1", 2, 4, 1, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 2, PAR_CP_P2P},
	{"cp2/dp2/ep2/all_gather/selective", 2, 2, 1, 0, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B, 1, 0,
	 0, 2, PAR_CP_ALL_GATHER},
	{"cp4/a2a/ep2/full", 1, 2, 1, 0, PAR_RECOMPUTE_FULL, SCHED_1F1B, 1, 0, 0, 4, PAR_CP_A2A},
	{"cp2/ep2/pp2", 1, 2, 2, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 2, PAR_CP_P2P},
	{"cp2/dp2/ep2/zero3", 2, 2, 1, 3, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 2, PAR_CP_P2P},
	{"cp2/ep2/dropless", 1, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 1, 2, PAR_CP_P2P},
	{"cp4/ep1", 1, 1, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0, 0, 4, PAR_CP_P2P},
	{"cp2/tp2/sp/ep1/zero1", 2, 1, 1, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 2,
	 PAR_CP_P2P},
	{"cp2/a2a/tp2/sp/ep2", 1, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 2, 1, 0, 2, PAR_CP_A2A},
};

static int selected(const char *name)
{
	const char *f = getenv("PEMU_TEST_FILTER");

	return !f || !*f || test_name_selected(name, f);
}

static void test_verify_table(void **state)
{
	int ran = 0, failed = 0, skipped = 0;

	(void)state;
	for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++)
		for (int d = 0; d < 2; d++) {
			const struct layout *lo = &layouts[l];
			struct run_cfg cfg;
			struct verify_result r;
			char name[64], worst[64];

			snprintf(name, sizeof name, "%s/%s", lo->name, dispatch_names[d]);
			if (!selected(name)) {
				skipped++;
				continue;
			}
			int etp = !strncmp(lo->name, "etp", 3);

			/* over the tp group there is no dispatch to choose */
			if (((lo->tp > 1 && !etp && lo->ep == lo->tp) || lo->ep == 1) && d) {
				skipped++;
				continue;
			}
			make_cfg(&cfg, lo->dp, lo->ep, lo->pp, (enum par_ep_dispatch)d);
			mesh_init(&cfg.mesh, lo->tp, lo->cp, 1, lo->dp, lo->pp);
			cfg.cp_comm = lo->comm;
			cfg.etp = etp ? lo->tp : 0;
			cfg.flash = cfg.flash || lo->cp > 1;
			cfg.sp = lo->sp;
			cfg.model.capacity_factor = lo->dropless ? 0.0f : cfg.model.capacity_factor;
			cfg.zero = lo->zero;
			cfg.recompute = lo->recompute;
			cfg.schedule = lo->schedule;
			r = test_verify(&cfg, NULL, 0);
			ran++;
			failed += !r.passed || r.routes == 0;
			gpt_tensor_name(&cfg.model, r.param_tensor, worst, sizeof worst);
			printf("%-4s %-34s loss %.2e  grad %.2e  param %.2e (%s), %zu routes\n",
			       r.passed && r.routes ? "ok" : "FAIL", name, r.loss_err, r.grad_err,
			       r.param_err, worst, r.routes);
		}
	printf("ep verify table: %d cases ran, %d failed, %d skipped\n", ran, failed, skipped);
	if (!ran)
		fail_msg("PEMU_TEST_FILTER selects no case");
	assert_int_equal(failed, 0);
}

/* ------------------------------------------------------------------------------------ */
/* The load-balancing loss                                                              */

/* The first step's loss of cfg (execute), one micro-batch a replica. */
static double first_loss(struct run_cfg cfg)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, cfg.mesh.world, 0, 0);
	struct run_out o;
	char err[256];
	double l;

	cfg.steps = 1;
	if (run_check(&cfg, cfg.mesh.world, err, sizeof err))
		fail_msg("config refused: %s", err);
	run_alloc(&o, &cfg, 0);
	if (run_parallel(c, &cfg, &o))
		fail_msg("run failed: %s", emu_cluster_report(c));
	l = o.loss[0];
	run_free(&o);
	emu_cluster_free(c);
	return l;
}

/* The aux loss of the first step is the loss with the coefficient less the loss
 * without it (the weights and the routing are the initial ones either way): the same for
 * ep 1, 2 and 4, both dispatchers, and the experts over a tp group of 2. */
static void test_aux_loss(void **state)
{
	double aux[11];
	int k = 0;

	(void)state;
	for (int ep = 1; ep <= 4; ep *= 2)
		for (int d = 0; d < (ep > 1 ? 2 : 1); d++) {
			struct run_cfg cfg;
			double with, without;

			make_cfg(&cfg, 4, ep, 1, (enum par_ep_dispatch)d);
			cfg.model.aux_coeff = 1.0f;
			with = first_loss(cfg);
			cfg.model.aux_coeff = 0.0f;
			without = first_loss(cfg);
			aux[k++] = with - without;
		}
	/* and over the tensor-parallel group (tp 2 dp 2); under context parallelism, the
	 * experts over no rank, over the cp ranks, over dp x cp (tp, cp, ep, dp) */
	static const int more[][4] = {{2, 1, 2, 2}, {1, 2, 1, 2}, {1, 2, 2, 2},
				      {1, 2, 4, 2}, {2, 1, 4, 2}, {2, 2, 4, 1}};

	for (int i = 0; i < 6; i++) {
		struct run_cfg cfg;
		double with, without;

		make_cfg(&cfg, more[i][3], more[i][2], 1, PAR_EP_ALLTOALL);
		mesh_init(&cfg.mesh, more[i][0], more[i][1], 1, more[i][3], 1);
		cfg.flash = more[i][1] > 1;
		cfg.sp = more[i][0] > 1 && more[i][2] != more[i][0]; /* (each rank its rows) */
		cfg.gbs = 16;
		cfg.model.aux_coeff = 1.0f;
		with = first_loss(cfg);
		cfg.model.aux_coeff = 0.0f;
		without = first_loss(cfg);
		aux[k++] = with - without;
	}
	printf("aux loss: ep 1 %.7f; ep 2 %.7f %.7f; ep 4 %.7f %.7f; ep = tp 2 %.7f; cp 2 ep 1 "
	       "%.7f, ep 2 %.7f, dp 2 ep 4 %.7f; ep 4 over tp 2 dp 2 %.7f, over tp 2 cp 2 "
	       "%.7f\n",
	       aux[0], aux[1], aux[2], aux[3], aux[4], aux[5], aux[6], aux[7], aux[8], aux[9],
	       aux[10]);
	assert_true(aux[0] > 0.5); /* E sum f P: 1 when perfectly balanced */
	for (int i = 1; i < k; i++)
		assert_true(fabs(aux[i] - aux[0]) <= 1e-6 * aux[0]);
}

/* ------------------------------------------------------------------------------------ */
/* The capacity under context parallelism                                               */

/* Under cp, and with each rank routing its own rows to experts over tp and dp ranks, the
 * capacity is the micro-batch's (par/moe_route.c): every expert keeps and drops exactly
 * the serial model's choices, summed from each rank's histogram, with some dropped; a
 * router counting its own rank's choices alone keeps others and fails verify. */
static void test_capacity_cp(void **state)
{
	/* tp, cp, dp, ep, contiguous: under cp; each rank its own rows over tp (and cp) */
	static const int cases[][5] = {{1, 2, 1, 2, 0}, {1, 2, 1, 2, 1}, {1, 4, 1, 1, 0},
				       {1, 4, 1, 1, 1}, {2, 1, 2, 4, 0}, {2, 2, 1, 4, 1}};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		int tp = cases[i][0], cp = cases[i][1], dp = cases[i][2], contiguous = cases[i][4];

		{
			struct emu_cluster *one = test_cluster("dgx-a100", 1, 1, 0, 0);
			struct emu_cluster *many = test_cluster("dgx-a100", 1, tp * cp * dp, 0, 0);
			struct run_cfg cfg;
			struct run_out ref, par;
			uint64_t dropped = 0, differ = 0;

			make_cfg(&cfg, dp, cases[i][3], 1, PAR_EP_ALLTOALL);
			mesh_init(&cfg.mesh, tp, cp, 1, dp, 1);
			cfg.flash = cp > 1;
			cfg.sp = tp > 1;
			cfg.cp_contiguous = contiguous;
			cfg.steps = 2;
			run_alloc(&ref, &cfg, 0);
			run_alloc(&par, &cfg, 0);
			if (run_reference(one, &cfg, &ref) || run_parallel(many, &cfg, &par))
				fail_msg("run failed");
			for (int l = 0; l < cfg.model.num_layers; l++)
				for (int e = 0;
				     gpt_layer_is_moe(&cfg.model, l) && e < cfg.model.num_experts;
				     e++) {
					uint64_t d0, d1, k0 = run_moe_tokens(&ref, &cfg, l, e, &d0),
							 k1 = run_moe_tokens(&par, &cfg, l, e, &d1);

					differ += k0 != k1 || d0 != d1;
					dropped += d0;
				}
			printf("tp %d cp %d%s dp %d ep %d: %" PRIu64 " choices dropped, %" PRIu64
			       " experts' counts differ\n",
			       tp, cp, contiguous ? " contiguous" : "", dp, cfg.ep, dropped,
			       differ);
			assert_true(dropped > 0);
			assert_int_equal(differ, 0);
			run_free(&ref);
			run_free(&par);
			emu_cluster_free(one);
			emu_cluster_free(many);
			cfg.bug = PAR_BUG_MOE_ROUTE;
			assert_false(test_verify(&cfg, NULL, 0).passed);
		}
	}
}

/* ------------------------------------------------------------------------------------ */
/* Volumes                                                                              */

/* Uniform routing (dry-run, bf16): each rank sends T k / E rows of h to every expert, so
 * per MoE layer and micro-batch 4 all-to-all-v's (dispatch and combine, forward and
 * backward) each put T k h 2 (P - 1) / P bytes on the links, and the counts' all-to-all
 * (E - E / P) 2 bytes; T = b s. */
static void test_volumes_uniform(void **state)
{
	(void)state;
	for (int ep = 2; ep <= 4; ep *= 2) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		struct coll_stats st;
		uint64_t T, k, h, E, mb = 2, moe = 1, want;

		make_cfg(&cfg, 4, ep, 1, PAR_EP_ALLTOALL);
		cfg.model.num_experts = 8;
		cfg.gbs = cfg.mbs * 4 * (int)mb; /* mb micro-batches a rank */
		cfg.steps = 1;
		T = (uint64_t)cfg.mbs * cfg.model.seq_len;
		k = (uint64_t)cfg.model.moe_top_k;
		h = (uint64_t)cfg.model.hidden;
		E = 8;
		c = test_dry(&cfg, &o, 0);
		want = mb * moe *
		       (4 * T * k * h * 2 * (uint64_t)(ep - 1) / (uint64_t)ep +
			(E - E / (uint64_t)ep) * 2);
		assert_int_equal(coll_link_bytes_tag(emu_cluster_dev(c, 0), PAR_TRAFFIC_EP), want);
		coll_stats_tag_get(emu_cluster_dev(c, 0), PAR_TRAFFIC_EP, "all-to-all-v", &st);
		assert_int_equal(st.calls, 4 * mb * moe);
		assert_int_equal(st.bytes, 4 * mb * moe * T * k * h * 2); /* S: all a rank sends */
		run_free(&o);
		emu_cluster_free(c);
	}
}

/* An execute run: device 0's expert-parallel bytes on the links are the sum of the real
 * splits, from the routing decisions the run recorded: twice (forward and backward) the
 * rows of its tokens routed to the other ranks' experts and the rows the other ranks
 * routed to its experts (whose outputs, and input gradients, it sends back), h floats
 * each, plus the counts. */
static void test_volumes_real(void **state)
{
	const int dp = 4, ep = 4;
	struct run_cfg cfg;
	struct run_out o;
	struct emu_cluster *c;
	uint64_t rows = 0, want;
	int E, El, K, L, accum, local;

	(void)state;
	make_cfg(&cfg, dp, ep, 1, PAR_EP_ALLTOALL);
	cfg.steps = 2;
	c = test_cluster("dgx-a100", 1, dp, 0, 0);
	run_alloc(&o, &cfg, 1);
	if (run_parallel(c, &cfg, &o))
		fail_msg("run failed: %s", emu_cluster_report(c));
	E = cfg.model.num_experts;
	El = E / ep;
	K = cfg.model.moe_top_k;
	L = cfg.model.num_layers;
	accum = cfg.gbs / cfg.mbs;
	local = accum / dp;
	for (int s = 0; s < cfg.steps; s++)
		for (int r = 0; r < ep; r++) /* the ranks of device 0's ep group */
			for (int mb = 0; mb < local; mb++) {
				size_t g = (size_t)s * accum + (size_t)r * local + (size_t)mb;
				const int *d = o.routes + g * o.route_mb;

				for (int l = 0; l < L; l++) {
					if (!gpt_layer_is_moe(&cfg.model, l))
						continue;
					for (size_t i = 0; i < o.route_mb / (size_t)L; i++) {
						int e = d[(size_t)l * (o.route_mb / L) + i];

						if (e < 0)
							continue; /* dropped: not sent */
						/* mine to another rank, or another rank's to mine
						 */
						rows += (r == 0) != (e / El == 0);
					}
				}
			}
	want = 2 * rows * (uint64_t)cfg.model.hidden * 4 +
	       (uint64_t)cfg.steps * local * (uint64_t)(E - El) * 4; /* one MoE layer */
	(void)K;
	assert_int_equal(coll_link_bytes_tag(emu_cluster_dev(c, 0), PAR_TRAFFIC_EP), want);
	printf("device 0: %llu expert-parallel rows crossed the links in %d steps\n",
	       (unsigned long long)rows, cfg.steps);
	run_free(&o);
	emu_cluster_free(c);
}

/* ------------------------------------------------------------------------------------ */
/* Empty experts, memory                                                                */

/* Two tokens a micro-batch and one choice each, 8 experts on 8 ranks: at least 6 ranks'
 * experts get nothing from a rank, most get nothing at all; every rank still takes part
 * in every all-to-all, and the run verifies. */
static void test_empty_experts(void **state)
{
	(void)state;
	for (int d = 0; d < 2; d++) {
		struct run_cfg cfg;
		struct verify_result v;

		make_cfg(&cfg, 8, 8, 1, (enum par_ep_dispatch)d);
		cfg.model.num_experts = 8;
		cfg.model.moe_top_k = 1;
		cfg.model.seq_len = 2;
		cfg.mbs = 1;
		cfg.gbs = 8;
		v = test_verify(&cfg, NULL, 0);
		assert_true(v.passed);
		assert_true(v.routes > 0);
	}
}

/* In a dry-run (bf16) a rank holds the dense parameters and E / ep experts of each MoE
 * layer: its parameter bytes are 2 (dense + experts / ep), and under ZeRO-1 its Adam state
 * shards the dense part over dp and its experts over dp / ep (their own group). */
static void test_memory(void **state)
{
	uint64_t param[3], optim[3], param3[3], grad3[3];
	int eps[3] = {1, 2, 4};

	(void)state;
	for (int i = 0; i < 6; i++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		struct emu_dev *d;

		make_cfg(&cfg, 4, eps[i % 3], 1, PAR_EP_ALLTOALL);
		cfg.model = model_preset("moe-small")->cfg;
		cfg.zero = i < 3 ? 1 : 3;
		cfg.steps = 1;
		c = test_dry(&cfg, &o, 0);
		d = emu_cluster_dev(c, 0);
		if (i < 3) {
			param[i] = mem_peak_bytes(d, MEM_PARAM);
			optim[i] = mem_peak_bytes(d, MEM_OPTIM);
		} else {
			param3[i - 3] = mem_peak_bytes(d, MEM_PARAM);
			grad3[i - 3] = mem_peak_bytes(d, MEM_GRAD);
		}
		run_free(&o);
		emu_cluster_free(c);
	}
	{
		/* the experts' parameters, from the model: E (2 h f + f + h) a MoE layer, at 2
		 * bytes; ep 2 holds half of them, ep 4 a quarter */
		const struct gpt_config *m = &model_preset("moe-small")->cfg;
		uint64_t ex = 0;

		for (int l = 0; l < m->num_layers; l++)
			if (gpt_layer_is_moe(m, l))
				ex += (uint64_t)m->num_experts *
				      (2ull * m->hidden * m->ffn + (uint64_t)m->ffn + m->hidden) *
				      2;
		printf("expert parameter bytes %llu; a rank's at ep 1, 2, 4: %llu %llu %llu\n",
		       (unsigned long long)ex, (unsigned long long)param[0],
		       (unsigned long long)param[1], (unsigned long long)param[2]);
		assert_true(param[0] - param[1] == ex / 2);
		assert_true(param[1] - param[2] == ex / 4);
		/* ZeRO-1 shards every element over dp in the end (dense over dp, experts over
		 * dp / ep of ep-times fewer): the optimizer state does not change with ep */
		assert_true(optim[0] == optim[1] && optim[1] == optim[2]);
		/* and ZeRO-3 the weights and gradients likewise: a quarter of ep 1's at every
		 * ep */
		printf("ZeRO-3 weights and gradients of a rank at ep 1, 2, 4: %llu %llu %llu, "
		       "%llu %llu %llu\n",
		       (unsigned long long)param3[0], (unsigned long long)param3[1],
		       (unsigned long long)param3[2], (unsigned long long)grad3[0],
		       (unsigned long long)grad3[1], (unsigned long long)grad3[2]);
		for (int i = 0; i < 3; i++) {
			assert_true(param3[i] * 4 == param[0]);
			assert_true(grad3[i] == param3[i]);
		}
	}
}

/* ------------------------------------------------------------------------------------ */
/* Broken and repeated                                                                  */

/* A dropped all-to-all-v (the first dispatch) fails verify; the unbroken run passes. */
static void test_broken_fails(void **state)
{
	static const char *const op[] = {"all-to-all-v", "all-gather"};

	(void)state;
	for (int d = 0; d < 2; d++) {
		struct run_cfg cfg;
		struct verify_result v;

		make_cfg(&cfg, 2, 2, 1, (enum par_ep_dispatch)d);
		v = test_verify(&cfg, op[d], d == 0 ? 0 : 1);
		assert_false(v.passed);
		v = test_verify(&cfg, NULL, 0);
		assert_true(v.passed);
	}
}

static void test_deterministic(void **state)
{
	(void)state;
	for (int d = 0; d < 2; d++) {
		struct run_cfg cfg;

		make_cfg(&cfg, 4, 2, 1, (enum par_ep_dispatch)d);
		cfg.zero = 1;
		test_same_on_threads(&cfg);
	}
	{ /* under cp (the routing's counts exchanged), the experts cut over tp */
		struct run_cfg cfg;

		make_cfg(&cfg, 2, 2, 1, PAR_EP_ALLTOALL);
		mesh_init(&cfg.mesh, 2, 2, 1, 2, 1);
		cfg.flash = 1;
		cfg.sp = 1;
		cfg.etp = 2;
		test_same_on_threads(&cfg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verify_table),  cmocka_unit_test(test_aux_loss),
		cmocka_unit_test(test_capacity_cp),   cmocka_unit_test(test_volumes_uniform),
		cmocka_unit_test(test_volumes_real),  cmocka_unit_test(test_empty_experts),
		cmocka_unit_test(test_memory),        cmocka_unit_test(test_broken_fails),
		cmocka_unit_test(test_deterministic),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
