/* pemu plan: the search over parallel layouts (run/plan.h) on the model, batch and
 * cluster pemu run's options describe, with every degree and strategy the user did not
 * fix left to the search: a ranked table, the Pareto front of step time against peak
 * memory, the best layouts' pemu run and Megatron-LM command lines, --validate's tiny
 * runs checked against the serial reference, --timeline and --trace of the winner.
 * The report is cmd_plan_report.c's, the command lines cmd_plan_lines.c's; pemu plan
 * --oases is Oases's search for tensor-parallel degrees (cmd_plan_oases.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cli.h"
#include "cmd/cli_model.h"
#include "cmd/cli_par.h"
#include "cmd/cmd.h"
#include "cmd/cmd_plan.h"
#include "cmd/report.h"
#include "run/plan.h"
#include "trace.h"
#include "util.h"

const struct cli_opt cmd_plan_opts[] = {
	{"gpus", 0, 1, CLI_PLAN_GPUS, "N",
	 "GPUs to lay out (default: --nodes x --gpus-per-node of the cluster)"},
	{"max-tp", 0, 1, CLI_PLAN_MAX_TP, "N",
	 "the largest tensor-parallel size tried (default: the GPUs of a node)"},
	{"max-pp", 0, 1, CLI_PLAN_MAX_PP, "N", "the largest pipeline size (default: the layers)"},
	{"max-cp", 0, 1, CLI_PLAN_MAX_CP, "N",
	 "the largest context-parallel size (default: seq-length / 2048, at least 1: a rank "
	 "keeps 2048 tokens or more, two chunks of 1024 in the balanced layout)"},
	{"max-ep", 0, 1, CLI_PLAN_MAX_EP, "N",
	 "the largest expert-parallel size (default: the experts)"},
	{"max-micro-batch-size", 0, 1, CLI_PLAN_MAX_MBS, "N",
	 "micro-batches tried: the powers of two up to N (default 8)"},
	{"top", 0, 1, CLI_PLAN_TOP, "N", "layouts in the ranked table (default 10)"},
	{"commands", 0, 1, CLI_PLAN_COMMANDS, "K",
	 "the best K with their pemu run and Megatron-LM command lines (default 3)"},
	{"validate", 0, 1, CLI_PLAN_VALIDATE, "K",
	 "run the best K at a tiny scale (the same layout, tiny widths) in execute mode, each "
	 "checked against the serial reference as pemu verify checks (exit 1 on a mismatch)"},
	{"jobs", 0, 1, CLI_PLAN_JOBS, "N",
	 "processes for the dry-runs (default: the host's cores; the result is the same)"},
	{"with-sp-off", 0, 0, CLI_PLAN_SP_OFF, NULL,
	 "with tp > 1, try without sequence parallelism too (by default taken: it moves the "
	 "same bytes and keeps less)"},
	{"oases", 0, 0, CLI_PLAN_OASES, NULL,
	 "Oases's search instead: a tensor-parallel degree per block, rounded to --tp-first K:T"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pemu plan [options]\n\n"
		"Searches every parallel layout of the model on the cluster in dry-run: dp x tp x "
		"pp x cp\n"
		"(and ep for MoE models), the schedule and its chunks, the micro-batch, ZeRO, "
		"recomputation,\n"
		"Oases's overlap, sequence parallelism, flash attention, cp's attention, and with "
		"Oases's\n"
		"overlap and recomputation on one stage Oases's degrees a block (its search's "
		"--tp-first K:T).\n"
		"Each layout passes\n"
		"pemu run's checker, then a memory lower bound (weights, gradients, Adam's state), "
		"then a\n"
		"one-step dry-run, where running out of memory means it does not fit. The "
		"survivors are\n"
		"ranked by step time. An option of the space given (--tp 8, --schedule 1f1b, "
		"--zero-stage 1,\n"
		"--micro-batch-size 2, --sequence-parallel, ...) fixes it. Exit 0, 1 if no "
		"layout fits or\n"
		"a --validate run fails, 2 on bad input (a layout pemu run's checker refuses "
		"whatever\n"
		"the search chooses included).\n\n"
		"  pemu plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 "
		"--global-batch-size 1536\n"
		"  pemu plan --model tiny --gpus 8 --global-batch-size 32 --validate 3\n"
		"  pemu plan --oases --cluster rtx3090-pcie --gpus-per-node 4 --nodes 8 --tp 4 "
		"--dp 8\n"
		"      --hidden-size 4096 --num-layers 16 --num-attention-heads 64 --seq-length "
		"1024\n"
		"      --micro-batch-size 4 --global-batch-size 640 --zero-stage 1\n\n"
		"Plan options:\n");
	cli_print_opts(f, cmd_plan_opts);
	fprintf(f, "\nParallel options (each one given fixes that dimension; --oases: the "
		   "bounds, --tp the largest degree):\n");
	cli_print_opts(f, cli_par_opts);
	fprintf(f, "\nModel and training options (Megatron-LM's names):\n");
	cli_print_opts(f, cli_model_opts);
	fprintf(f, "\nCluster options:\n");
	cli_print_opts(f, cli_cluster_opts);
	cli_print_exit_codes(f, "no layout fits, or a --validate run fails");
}

/* The dimension an option of cli_par or cli_model fixes, or -1. */
struct cli cmd_plan_cli(int argc, char **argv)
{
	return (struct cli){
		.prog = "pemu plan",
		.argc = argc,
		.argv = argv,
		.i = 1,
		.opts = {cmd_plan_opts, cli_model_opts, cli_cluster_opts, cli_par_opts, NULL}};
}

int cmd_plan_dim(int id)
{
	switch (id) {
	case CLI_PAR_TP:
		return PLAN_TP;
	case CLI_PAR_PP:
		return PLAN_PP;
	case CLI_PAR_CP:
		return PLAN_CP;
	case CLI_PAR_EP:
		return PLAN_EP;
	case CLI_PAR_ETP:
		return PLAN_ETP;
	case CLI_PAR_SCHEDULE:
		return PLAN_SCHEDULE;
	case CLI_PAR_VPP:
		return PLAN_VPP;
	case CLI_MODEL_MBS:
		return PLAN_MBS;
	case CLI_PAR_ZERO:
	case CLI_PAR_DIST_OPT:
		return PLAN_ZERO;
	case CLI_PAR_RECOMPUTE:
		return PLAN_RECOMPUTE;
	case CLI_PAR_TP_OVERLAP:
		return PLAN_OVERLAP;
	case CLI_PAR_SP:
		return PLAN_SP;
	case CLI_PAR_FLASH:
		return PLAN_FLASH;
	case CLI_PAR_CP_COMM:
		return PLAN_CP_COMM;
	default:
		return -1;
	}
}

/* ------------------------------------------------------------------------------------ */
/* The search's progress, --validate, the winner's trace                                 */

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The progress bar on stderr, at most five times a second. */
static void progress(int done, int n, void *arg)
{
	struct plan_cmd *p = arg;
	double t = now_s(), el = t - p->t0;
	char bar[31];
	int w = (int)(30.0 * done / n);

	if (done < n && t - p->last < 0.2)
		return;
	p->last = t;
	for (int i = 0; i < 30; i++)
		bar[i] = i < w ? '#' : '.';
	bar[30] = '\0';
	fprintf(stderr, "\rpemu plan: [%s] %d/%d layouts, %.1f s", bar, done, n, el);
	if (done > 0 && done < n)
		fprintf(stderr, ", about %.0f s to go ", el / done * (n - done));
	else
		fprintf(stderr, "%20s", "");
	if (done == n)
		fputc('\n', stderr);
}

/* --validate: the best K at a tiny scale, each against the serial reference. */
static int validate(struct plan_cmd *p)
{
	struct data d;
	int bad = 0;

	data_builtin(&d, 1 << 20);
	for (int k = 0; k < p->validate && k < p->r->nok; k++) {
		struct run_cfg cfg, tiny;
		char err[512];

		cmd_plan_cfg_of(p, &p->r->all[p->r->rank[k]], &cfg);
		p->passed[k] = -1;
		if (plan_tiny(&cfg, &tiny, err, sizeof err)) {
			snprintf(p->tiny[k], sizeof p->tiny[k], "no tiny twin: %.60s", err);
			bad = 1;
			continue;
		}
		snprintf(p->tiny[k], sizeof p->tiny[k], "%d layers", tiny.model.num_layers);
		if (tiny.tpf_layers)
			snprintf(p->tiny[k] + strlen(p->tiny[k]),
				 sizeof p->tiny[k] - strlen(p->tiny[k]), " (the first %d at tp %d)",
				 tiny.tpf_layers, tiny.tpf);
		snprintf(p->tiny[k] + strlen(p->tiny[k]), sizeof p->tiny[k] - strlen(p->tiny[k]),
			 ", hidden %d, %d heads, seq %d, global batch %d, %d GPUs",
			 tiny.model.hidden, tiny.model.heads, tiny.model.seq_len, tiny.gbs,
			 tiny.mesh.world);
		tiny.data = &d;
		if (!p->cc->json)
			fprintf(stderr, "pemu plan: validating %d of %d (%s)\n", k + 1, p->validate,
				p->tiny[k]);
		if (plan_validate(&p->cc->cfg, &tiny, &p->ver[k])) {
			bad = 1;
			continue;
		}
		p->passed[k] = p->ver[k].passed;
		bad |= !p->ver[k].passed;
	}
	data_free(&d);
	return bad;
}

/* --timeline and --trace: the winner again, traced. */
static void trace_winner(const struct plan_cmd *p)
{
	struct emu_config ec = p->cc->cfg;
	struct run_cfg cfg;
	struct run_out o;
	struct emu_cluster *cl;
	FILE *out = p->cc->json ? stderr : stdout;
	int rc;

	cmd_plan_cfg_of(p, &p->r->all[p->r->rank[0]], &cfg);
	ec.trace = 1;
	cl = emu_cluster_new(&ec);
	run_alloc(&o, &cfg, 0);
	rc = run_parallel(cl, &cfg, &o);
	cli_write_trace(p->cc, cl, "pemu plan");
	if (p->cc->timeline) {
		fprintf(out, "# the winner's step:\n");
		trace_timeline(cl, out, 100, 16);
		if (!rc && cfg.mesh.size[MESH_PP] > 1)
			sched_draw(&o.sched, o.span, 100, out);
	}
	run_free(&o);
	emu_cluster_free(cl);
}

int cmd_plan(int argc, char **argv)
{
	struct cli c = cmd_plan_cli(argc, argv);
	struct plan_space s;
	struct plan_result r;
	struct plan_cmd p = {0};
	struct cli_model mo;
	struct cli_par po;
	struct cli_cluster cc;
	const char *v;
	char err[512];
	int id, oases = 0, gpus = 0, rc = 0, dp_given = 0, search_refuses = 0;
	const char *search_only = NULL; /* the first of the search's own options given */
	long jobs = sysconf(_SC_NPROCESSORS_ONLN);

	memset(&s, 0, sizeof s);
	run_cfg_init(&s.base);
	cli_model_init(&mo);
	cli_par_init(&po);
	cli_cluster_init(&cc);
	p.top = 10;
	p.commands = 3;
	p.jobs = jobs > 0 ? (int)(jobs < 64 ? jobs : 64) : 1;
	while ((id = cli_next(&c, &v))) {
		if (id > CLI_PLAN_OASES && id < CLI_PLAN_LAST && !search_only)
			search_only = cmd_plan_opts[id - CLI_PLAN_GPUS].name;
		switch (id) {
		case CLI_PLAN_OASES:
			oases = 1;
			continue;
		case CLI_PLAN_GPUS:
			gpus = (int)cli_int(&c, "--gpus", v, 1, 65536);
			continue;
		case CLI_PLAN_MAX_TP:
			s.max_tp = (int)cli_int(&c, "--max-tp", v, 1, 65536);
			continue;
		case CLI_PLAN_MAX_PP:
			s.max_pp = (int)cli_int(&c, "--max-pp", v, 1, 65536);
			continue;
		case CLI_PLAN_MAX_CP:
			s.max_cp = (int)cli_int(&c, "--max-cp", v, 1, 65536);
			continue;
		case CLI_PLAN_MAX_EP:
			s.max_ep = (int)cli_int(&c, "--max-ep", v, 1, 65536);
			continue;
		case CLI_PLAN_MAX_MBS:
			s.max_mbs = (int)cli_int(&c, "--max-micro-batch-size", v, 1, 1 << 20);
			continue;
		case CLI_PLAN_TOP:
			p.top = (int)cli_int(&c, "--top", v, 1, 1 << 20);
			continue;
		case CLI_PLAN_COMMANDS:
			p.commands = (int)cli_int(&c, "--commands", v, 0, 1 << 20);
			continue;
		case CLI_PLAN_VALIDATE:
			p.validate = (int)cli_int(&c, "--validate", v, 0, 64);
			continue;
		case CLI_PLAN_JOBS:
			p.jobs = (int)cli_int(&c, "--jobs", v, 1, 64);
			continue;
		case CLI_PLAN_SP_OFF:
			s.both_sp = 1;
			continue;
		case CLI_PAR_VPP_LAYERS:
		case CLI_PAR_TP_FIRST:
			search_refuses = id;
			break;
		case CLI_PAR_DP:
			dp_given = 1;
			break;
		default:
			break;
		}
		if (cmd_plan_dim(id) >= 0)
			s.fixed |= 1u << cmd_plan_dim(id);
		if (cli_cluster_opt(&cc, id, v) || cli_model_opt(&mo, &s.base, &c, id, v) ||
		    cli_par_opt(&po, &s.base, &c, id, v))
			continue;
		if (id == CLI_MODEL_HELP) {
			usage(stdout);
			cli_model_free(&mo);
			return 0;
		}
	}
	cc.cfg.dry_run = 1; /* the search runs on shapes alone */
	cli_model_finish(&mo, &s.base, &c, 1);
	cli_par_finish(&po, &s.base);
	if (mo.sample)
		cli_fail(&c, "--sample: only pemu train generates text");
	if (oases && search_only)
		cli_fail(&c, "--%s: the layout search's option, not --oases's", search_only);
	if (s.base.tp_comm_overlap && (oases || s.base.tp_sync_dgrad))
		cli_fail(&c, "--tp-comm-overlap with %s: two orders of the same collectives",
			 oases ? "--oases" : "--no-async-tensor-model-parallel-allreduce");
	if (oases && (s.base.p2p_sync || s.base.pp_scatter))
		cli_fail(&c, "--%s: a pipeline's, and pemu plan --oases searches no pipelines",
			 s.base.p2p_sync ? "p2p-sync" : "scatter-gather-tensors-in-pipeline");
	if (!oases && search_refuses == CLI_PAR_VPP_LAYERS)
		cli_fail(&c, "--num-layers-per-virtual-pipeline-stage: pemu plan searches the "
			     "pipeline's size, so fix the chunks a stage with --vpp");
	if (!oases && search_refuses == CLI_PAR_TP_FIRST)
		cli_fail(&c, "--tp-first: the mixed degrees are the search's to choose (Oases's "
			     "search on each layout it fits, or pemu plan --oases)");
	if (oases) {
		rc = cmd_plan_oases(argc, argv, &c, &s.base, &cc);
		cli_model_free(&mo);
		return rc;
	}
	if (!s.base.gbs)
		cli_fail(&c, "--global-batch-size is needed: the layouts are compared on the "
			     "same batch");
	cli_cluster_finish(&cc, &c, gpus);
	if (cc.nfail || cc.cfg.nslow)
		cli_fail(&c, "--inject-fault: pemu plan searches a healthy cluster; faults are for "
			     "pemu run, verify and coll");
	s.gpus = cc.cfg.ndev;
	s.dp_fixed = dp_given ? po.dp : 0;
	{ /* a degree given that no layout of the GPUs has: said, not "no layout" */
		const struct {
			int given, deg;
			const char *opt;
		} d[] = {{s.fixed & (1u << PLAN_TP), s.base.mesh.size[MESH_TP], "--tp"},
			 {s.fixed & (1u << PLAN_PP), s.base.mesh.size[MESH_PP], "--pp"},
			 {s.fixed & (1u << PLAN_CP), s.base.mesh.size[MESH_CP], "--cp"},
			 {dp_given, po.dp, "--dp"}};

		char what[128] = "";
		long prod = 1;
		int len = 0, n = 0;

		for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
			if (!d[i].given || d[i].deg <= 0)
				continue;
			if (d[i].deg > s.gpus || s.gpus % d[i].deg)
				cli_fail(&c, "%s %d %s the %d GPU%s", d[i].opt, d[i].deg,
					 d[i].deg > s.gpus ? "is more than" : "does not divide",
					 s.gpus, s.gpus == 1 ? "" : "s");
			prod *= d[i].deg;
			n++;
			len += snprintf(what + len, sizeof what - (size_t)len, "%s%s %d",
					len ? " x " : "", d[i].opt, d[i].deg);
		}
		if (n > 1 && (prod > s.gpus || s.gpus % prod))
			cli_fail(&c, "%s = %ld %s the %d GPUs", what, prod,
				 prod > s.gpus ? "is more than" : "does not divide", s.gpus);
	}
	if (!s.max_tp && !(s.fixed & (1u << PLAN_TP)))
		s.max_tp = cc.cfg.topo.gpus_per_node;
	s.base.steps = 1;
	s.base.log_every = 0;
	p.argc = argc;
	p.argv = argv;
	p.s = &s;
	p.cc = &cc;
	p.t0 = p.last = now_s();
	cli_parsed();
	if (plan_search(&s, &cc.cfg, p.jobs, isatty(STDERR_FILENO) ? progress : NULL, &p, &r, err,
			sizeof err)) {
		fprintf(stderr, "%s\n", err);
		cli_model_free(&mo);
		return 2;
	}
	if (r.by_rule == r.n) { /* bad input: one line, exit 2 */
		struct run_cfg cfg;

		plan_cfg(&s, &r.all[0].p, &cfg, err, sizeof err);
		fprintf(stderr,
			"pemu plan: no layout passes pemu run's checker; the first says: %s\n",
			err);
		plan_result_free(&r);
		cli_model_free(&mo);
		return 2;
	}
	p.r = &r;
	p.passed = emu_xcalloc((size_t)p.validate + 1, sizeof *p.passed);
	p.ver = emu_xcalloc((size_t)p.validate + 1, sizeof *p.ver);
	p.tiny = emu_xcalloc((size_t)p.validate + 1, sizeof *p.tiny);
	if (!r.nok)
		rc = 1;
	else if (p.validate)
		rc = validate(&p);
	if (cc.json)
		cmd_plan_print_json(&p);
	else
		cmd_plan_print_text(&p);
	if (r.nok && (cc.timeline || cc.trace_path))
		trace_winner(&p);
	free(p.passed);
	free(p.ver);
	free(p.tiny);
	plan_result_free(&r);
	cli_model_free(&mo);
	return rc;
}
