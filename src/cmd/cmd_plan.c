/* pemu plan: the search over parallel layouts (run/plan.h) on the model, batch and
 * cluster pemu run's options describe, with every degree and strategy the user did not
 * fix left to the search: a ranked table, the Pareto front of step time against peak
 * memory, the best layouts' pemu run and Megatron-LM command lines, --validate's tiny
 * runs checked against the serial reference, --timeline and --trace of the winner.
 * pemu plan --oases is Oases's search for tensor-parallel degrees (cmd_plan_oases.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cli.h"
#include "cmd/cli_model.h"
#include "cmd/cli_par.h"
#include "cmd/cmd.h"
#include "cmd/report.h"
#include "run/plan.h"
#include "trace.h"
#include "units.h"
#include "util.h"

enum {
	CLI_PLAN_OASES = 2000,
	CLI_PLAN_GPUS,
	CLI_PLAN_MAX_TP,
	CLI_PLAN_MAX_PP,
	CLI_PLAN_MAX_CP,
	CLI_PLAN_MAX_EP,
	CLI_PLAN_MAX_MBS,
	CLI_PLAN_TOP,
	CLI_PLAN_COMMANDS,
	CLI_PLAN_VALIDATE,
	CLI_PLAN_JOBS,
	CLI_PLAN_SP_OFF,
	CLI_PLAN_LAST
};

static const struct cli_opt plan_opts[] = {
	{"gpus", 0, 1, CLI_PLAN_GPUS, "N",
	 "GPUs to lay out (default: --nodes x --gpus-per-node of the cluster)"},
	{"max-tp", 0, 1, CLI_PLAN_MAX_TP, "N",
	 "the largest tensor-parallel size tried (default: the GPUs of a node)"},
	{"max-pp", 0, 1, CLI_PLAN_MAX_PP, "N", "the largest pipeline size (default: the layers)"},
	{"max-cp", 0, 1, CLI_PLAN_MAX_CP, "N",
	 "the largest context-parallel size (default: seq-length / 2048 from 4096 tokens, else "
	 "1: a rank keeps 1024 tokens or more)"},
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
	cli_print_opts(f, plan_opts);
	fprintf(f, "\nParallel options (each one given fixes that dimension; --oases: the "
		   "bounds, --tp the largest degree):\n");
	cli_print_opts(f, cli_par_opts);
	fprintf(f, "\nModel and training options (Megatron-LM's names):\n");
	cli_print_opts(f, cli_model_opts);
	fprintf(f, "\nCluster options:\n");
	cli_print_opts(f, cli_cluster_opts);
}

/* The dimension an option of cli_par or cli_model fixes, or -1. */
static int dim_of(int id)
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
/* A layout in words and as command lines                                               */

static const char *const recompute_name[] = {"none", "selective", "full", "oases"};
static const char *const cp_comm_name[] = {"p2p", "all_gather", "a2a"};

/* The expert tensor-parallel size cfg runs (Megatron's meaning: given explicitly). */
static int etp_of(const struct run_cfg *cfg)
{
	if (cfg->etp)
		return cfg->etp;
	return cfg->ep > 1 ? 1 : cfg->mesh.size[MESH_TP];
}

/* "dp16 tp8 pp8 1f1b mbs1 zero1 rc:full sp" */
static void layout_str(const struct run_cfg *cfg, char *b, size_t n)
{
	const int *m = cfg->mesh.size;
	struct emu_str s = {0};

	emu_str_addf(&s, "dp%d tp%d pp%d", m[MESH_DP], m[MESH_TP], m[MESH_PP]);
	if (m[MESH_CP] > 1)
		emu_str_addf(&s, " cp%d:%s", m[MESH_CP], cp_comm_name[cfg->cp_comm]);
	if (cfg->ep > 1)
		emu_str_addf(&s, " ep%d etp%d", cfg->ep, etp_of(cfg));
	if (m[MESH_PP] > 1)
		emu_str_addf(&s, " %s", sched_name(cfg->schedule));
	if (cfg->vpp > 1)
		emu_str_addf(&s, ":%d", cfg->vpp);
	emu_str_addf(&s, " mbs%d zero%d rc:%s", cfg->mbs, cfg->zero,
		     recompute_name[cfg->recompute]);
	if (cfg->tp_overlap)
		emu_str_addf(&s, " oases-tp");
	if (cfg->tpf_layers)
		emu_str_addf(&s, " tp-first:%d:%d", cfg->tpf_layers, cfg->tpf);
	if (cfg->sp)
		emu_str_addf(&s, " sp");
	if (cfg->flash)
		emu_str_addf(&s, " flash");
	snprintf(b, n, "%s", s.s ? s.s : "");
	free(s.s);
}

static int is_plan_only(int id)
{
	static const int drop[] = {CLI_PAR_DP,
				   CLI_PAR_VPP_LAYERS,
				   CLI_PAR_RECOMPUTE_METHOD,
				   CLI_PAR_RECOMPUTE_LAYERS,
				   CLI_DRY_RUN,
				   CLI_JSON,
				   CLI_TIMELINE,
				   CLI_TRACE};

	if (id >= CLI_PLAN_OASES || dim_of(id) >= 0)
		return 1;
	for (size_t k = 0; k < sizeof drop / sizeof *drop; k++)
		if (id == drop[k])
			return 1;
	return 0;
}

void cmd_plan_pemu_run(FILE *f, int argc, char **argv, const struct run_cfg *cfg, int json)
{
	struct cli c = {.prog = "pemu plan",
			.argc = argc,
			.argv = argv,
			.i = 1,
			.opts = {plan_opts, cli_model_opts, cli_cluster_opts, cli_par_opts, NULL}};
	const int *m = cfg->mesh.size;
	const char *v;
	int start = c.i, id;

	fprintf(f, "pemu run");
	while ((id = cli_next(&c, &v))) {
		if (!is_plan_only(id))
			for (int i = start; i < c.i; i++)
				cli_put_arg(f, argv[i], json);
		start = c.i;
	}
	fprintf(f, " --dp %d --tp %d --pp %d", m[MESH_DP], m[MESH_TP], m[MESH_PP]);
	if (m[MESH_CP] > 1)
		fprintf(f, " --cp %d --cp-comm-type %s", m[MESH_CP], cp_comm_name[cfg->cp_comm]);
	if (cfg->ep > 1)
		fprintf(f, " --ep %d", cfg->ep);
	if (cfg->etp)
		fprintf(f, " --expert-tensor-parallel-size %d", cfg->etp);
	if (m[MESH_PP] > 1)
		fprintf(f, " --schedule %s", sched_name(cfg->schedule));
	if (cfg->vpp > 1)
		fprintf(f, " --vpp %d", cfg->vpp);
	fprintf(f, " --micro-batch-size %d --zero-stage %d --recompute %s", cfg->mbs, cfg->zero,
		recompute_name[cfg->recompute]);
	if (cfg->tp_overlap)
		fprintf(f, " --tp-overlap oases");
	if (cfg->tpf_layers)
		fprintf(f, " --tp-first %d:%d", cfg->tpf_layers, cfg->tpf);
	if (cfg->sp)
		fprintf(f, " --sequence-parallel");
	if (cfg->flash)
		fprintf(f, " --use-flash-attn");
	fputs(" --steps 1 --dry-run", f); /* the step the plan ranked */
}

const char *cmd_plan_megatron_gap(const struct run_cfg *cfg, const struct emu_config *ec)
{
	if (cfg->mesh.world > ec->topo.gpus_per_node && cfg->mesh.world % ec->topo.gpus_per_node)
		return "torchrun starts as many processes on every node: the GPUs are not a "
		       "multiple of a node's";
	if (cfg->mesh.size[MESH_PP] > 1 && cfg->schedule != SCHED_1F1B &&
	    cfg->schedule != SCHED_INTERLEAVED)
		return cfg->schedule == SCHED_HELIX ? "HelixPipe's schedule is not in Megatron-LM"
		       : cfg->schedule == SCHED_GPIPE
			       ? "Megatron-LM runs no GPipe schedule"
			       : "the zero-bubble schedules are not in Megatron-LM";
	if (cfg->zero >= 2)
		return "ZeRO stages 2 and 3 are not Megatron-LM's (its distributed optimizer is "
		       "stage 1)";
	if (cfg->tp_overlap || cfg->recompute == PAR_RECOMPUTE_OASES)
		return "Oases's overlap and recomputation are not in Megatron-LM";
	if (cfg->model.num_experts > 0 && cfg->model.moe_every != 1)
		return "pemu's MoE layers are every Nth from layer N - 1, Megatron-LM's "
		       "--moe-layer-freq counts from layer 0";
	if (cfg->mlp_chunks > 1 || cfg->cp_contiguous)
		return "--mlp-chunks and --cp-layout are pemu's";
	if (cfg->ep > 1 && cfg->mesh.size[MESH_TP] > 1 && !cfg->sp)
		return "Megatron-LM runs expert and tensor parallelism with sequence parallelism "
		       "only";
	return NULL;
}

void cmd_plan_megatron(FILE *f, const struct run_cfg *cfg, const struct emu_config *ec)
{
	const struct gpt_config *g = &cfg->model;
	const int *m = cfg->mesh.size;
	int gpn = ec->topo.gpus_per_node, nodes = (cfg->mesh.world + gpn - 1) / gpn;

	fprintf(f, "torchrun --nnodes %d --nproc-per-node %d pretrain_gpt.py", nodes,
		cfg->mesh.world < gpn ? cfg->mesh.world : gpn);
	fprintf(f,
		" --num-layers %d --hidden-size %d --num-attention-heads %d --ffn-hidden-size "
		"%d --seq-length %d --max-position-embeddings %d --vocab-size %d "
		"--make-vocab-size-divisible-by %d --micro-batch-size %d --global-batch-size %d",
		g->num_layers, g->hidden, g->heads, g->ffn, g->seq_len, g->seq_len, cfg->vocab_orig,
		cfg->vocab_div, cfg->mbs, cfg->gbs);
	fprintf(f, " --tensor-model-parallel-size %d --pipeline-model-parallel-size %d", m[MESH_TP],
		m[MESH_PP]);
	if (cfg->vpp > 1)
		fprintf(f, " --num-layers-per-virtual-pipeline-stage %d",
			g->num_layers / (m[MESH_PP] * cfg->vpp));
	if (m[MESH_CP] > 1)
		fprintf(f, " --context-parallel-size %d --cp-comm-type %s", m[MESH_CP],
			cp_comm_name[cfg->cp_comm]);
	if (g->num_experts > 0) {
		fprintf(f,
			" --num-experts %d --moe-layer-freq 1 --moe-router-topk %d "
			"--moe-aux-loss-coeff %g",
			g->num_experts, g->moe_top_k, (double)g->aux_coeff);
		if (g->capacity_factor > 0)
			fprintf(f, " --moe-expert-capacity-factor %g", (double)g->capacity_factor);
		fprintf(f,
			" --expert-model-parallel-size %d --expert-tensor-parallel-size %d "
			"--moe-token-dispatcher-type %s",
			cfg->ep, etp_of(cfg),
			cfg->ep_dispatch == PAR_EP_ALLGATHER ? "allgather" : "alltoall");
	}
	if (cfg->sp)
		fprintf(f, " --sequence-parallel");
	if (cfg->flash)
		fprintf(f, " --use-flash-attn");
	if (cfg->recompute == PAR_RECOMPUTE_FULL)
		fprintf(f, " --recompute-granularity full --recompute-method uniform "
			   "--recompute-num-layers 1");
	else if (cfg->recompute == PAR_RECOMPUTE_SELECTIVE)
		fprintf(f, " --recompute-granularity selective");
	if (cfg->zero == 1)
		fprintf(f, " --use-distributed-optimizer");
	if (run_overlaps_grads(cfg))
		fprintf(f, " --overlap-grad-reduce");
	if (cfg->prec == PREC_BF16)
		fprintf(f, " --bf16");
	if (cfg->seed != 1234)
		fprintf(f, " --seed %llu", (unsigned long long)cfg->seed);
}

/* ------------------------------------------------------------------------------------ */
/* The report                                                                            */

struct plan_cmd {
	int argc;
	char **argv;
	const struct plan_space *s;
	const struct cli_cluster *cc;
	int top, commands, validate, jobs;
	const struct plan_result *r;
	int *passed;               /* [validate] 1 passed, 0 failed, -1 did not run */
	struct verify_result *ver; /* [validate] */
	char (*tiny)[96];          /* [validate] the tiny model in words */
	double t0;                 /* the progress bar's start */
	double last;               /* its last redraw */
};

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

/* The finished configuration of ranked entry x. */
static void cfg_of(const struct plan_cmd *p, const struct plan_entry *x, struct run_cfg *cfg)
{
	char err[512];

	if (plan_cfg(p->s, &x->p, cfg, err, sizeof err)) /* it passed before */
		emu_die("pemu plan: a ranked layout fails the checker: %s", err);
}

static const char *t_of(int64_t ns)
{
	static char buf[4][32];
	static int k;

	k = (k + 1) % 4;
	units_fmt_time(buf[k], sizeof buf[k], ns);
	return buf[k];
}

static const char *b_of(uint64_t b)
{
	static char buf[4][32];
	static int k;

	k = (k + 1) % 4;
	units_fmt_bytes(buf[k], sizeof buf[k], b);
	return buf[k];
}

static int dry_runs(const struct plan_result *r)
{
	return r->n - r->by_rule - r->by_bound;
}

static void print_row(const struct plan_cmd *p, int rank, const struct plan_entry *x)
{
	struct run_cfg cfg;
	char lay[160];

	cfg_of(p, x, &cfg);
	layout_str(&cfg, lay, sizeof lay);
	printf("  %4d %10s %10.4g %6.1f%% %10s %6.1f%% %10s   %s\n", rank, t_of(x->e.step_ns),
	       x->e.tokens_s, 100 * x->e.mfu, b_of(x->e.peak),
	       100.0 * (double)x->e.bubble_ns / (double)x->e.step_ns, t_of(x->e.exposed_ns), lay);
}

/* The place in the ranking of the fastest layout Megatron-LM can run, or -1. */
static int megatron_best(const struct plan_cmd *p)
{
	for (int k = 0; k < p->r->nok; k++) {
		struct run_cfg cfg;

		cfg_of(p, &p->r->all[p->r->rank[k]], &cfg);
		if (!cmd_plan_megatron_gap(&cfg, &p->cc->cfg))
			return k;
	}
	return -1;
}

static void print_text(const struct plan_cmd *p)
{
	const struct plan_result *r = p->r;
	const struct run_cfg *b = &p->s->base;
	const struct emu_config *ec = &p->cc->cfg;
	int top = p->top < r->nok ? p->top : r->nok;

	printf("# pemu plan: %s, %zu parameters, global batch %d of %d tokens, on %d GPUs\n# ",
	       b->preset ? b->preset->name : "model", gpt_num_params(&b->model), b->gbs,
	       b->model.seq_len, p->s->gpus);
	report_cluster_line(stdout, ec);
	printf("\n# %d layouts: %d refused by the rules, %d by the memory bound, %d out of "
	       "memory in dry-run, %d failed, %d fit; %d dry-runs in %.1f s (%.0f a second, %d "
	       "process%s)\n",
	       r->n, r->by_rule, r->by_bound, r->by_oom, r->failed, r->nok, dry_runs(r), r->wall_s,
	       dry_runs(r) / (r->wall_s > 0 ? r->wall_s : 1), p->jobs, p->jobs == 1 ? "" : "es");
	if (r->by_same)
		printf("# of the layouts searched with Oases's degrees a block (tp-first), %d kept "
		       "one degree throughout: the layout without it\n",
		       r->by_same);
	if (!r->nok) {
		if (r->failed)
			printf("# no layout ran: %d out of memory or refused by the bound under "
			       "%s a GPU, %d failed otherwise\n",
			       r->by_bound + r->by_oom,
			       b_of(ec->mem_cap ? ec->mem_cap : ec->topo.gpu.hbm_bytes), r->failed);
		else
			printf("# no layout fits in %s a GPU\n",
			       b_of(ec->mem_cap ? ec->mem_cap : ec->topo.gpu.hbm_bytes));
		return;
	}
	printf("# the fastest %d (step time virtual, device 0; peak memory the largest "
	       "device's):\n",
	       top);
	printf("  %4s %10s %10s %7s %10s %7s %10s   %s\n", "rank", "step", "tokens/s", "MFU",
	       "peak mem", "bubble", "exposed", "layout");
	for (int k = 0; k < top; k++)
		print_row(p, k + 1, &r->all[r->rank[k]]);
	printf("# Pareto front, step time against peak memory (each needs less memory than "
	       "every faster one):\n");
	for (int k = 0, j = 0; k < r->nok && j < r->npareto; k++)
		if (r->rank[k] == r->pareto[j]) {
			print_row(p, k + 1, &r->all[r->rank[k]]);
			j++;
		}
	for (int k = 0; k < p->commands && k < r->nok; k++) {
		struct run_cfg cfg;
		const char *gap;

		cfg_of(p, &r->all[r->rank[k]], &cfg);
		printf("# %d.\n", k + 1);
		cmd_plan_pemu_run(stdout, p->argc, p->argv, &cfg, 0);
		printf("\n");
		if ((gap = cmd_plan_megatron_gap(&cfg, &p->cc->cfg)))
			printf("#   Megatron-LM: no equivalent (%s)\n", gap);
		else {
			cmd_plan_megatron(stdout, &cfg, ec);
			printf("\n");
		}
	}
	{
		int k = megatron_best(p);

		if (k >= p->commands) {
			struct run_cfg cfg;

			printf("# the fastest layout Megatron-LM can run:\n");
			print_row(p, k + 1, &r->all[r->rank[k]]);
			cfg_of(p, &r->all[r->rank[k]], &cfg);
			cmd_plan_megatron(stdout, &cfg, ec);
			printf("\n");
		} else if (k < 0) {
			printf("# Megatron-LM can run none of the layouts that fit\n");
		}
	}
	for (int k = 0; k < p->validate && k < r->nok; k++) {
		const struct verify_result *v = &p->ver[k];

		if (p->passed[k] < 0)
			printf("# validate %d: the tiny run failed (%s)\n", k + 1, p->tiny[k]);
		else
			printf("# validate %d: %s on %s: worst loss %.3g, gradient %.3g, parameter "
			       "%.3g (tolerances %g, %g, %g)\n",
			       k + 1, p->passed[k] ? "PASSED" : "FAILED", p->tiny[k], v->loss_err,
			       v->grad_err, v->param_err, v->loss_tol, v->grad_tol, v->param_tol);
	}
}

static void json_entry(const struct plan_cmd *p, int rank, const struct plan_entry *x)
{
	struct run_cfg cfg;
	const int *m;
	const char *gap;

	cfg_of(p, x, &cfg);
	m = cfg.mesh.size;
	printf("%s{\"rank\":%d,\"layout\":{\"dp\":%d,\"tp\":%d,\"pp\":%d,\"cp\":%d,\"ep\":%d,"
	       "\"expert_tensor_parallel_size\":%d,\"schedule\":\"%s\",\"vpp\":%d,"
	       "\"micro_batch_size\":%d,\"zero_stage\":%d,\"recompute\":\"%s\","
	       "\"tp_overlap\":\"%s\",\"sequence_parallel\":%s,\"flash_attention\":%s,"
	       "\"cp_comm_type\":\"%s\",\"tp_first_layers\":%d,\"tp_first\":%d},",
	       rank > 1 ? "," : "", rank, m[MESH_DP], m[MESH_TP], m[MESH_PP], m[MESH_CP], cfg.ep,
	       etp_of(&cfg), m[MESH_PP] > 1 ? sched_name(cfg.schedule) : "none", cfg.vpp, cfg.mbs,
	       cfg.zero, recompute_name[cfg.recompute], cfg.tp_overlap ? "oases" : "none",
	       cfg.sp ? "true" : "false", cfg.flash ? "true" : "false", cp_comm_name[cfg.cp_comm],
	       cfg.tpf_layers, cfg.tpf_layers ? cfg.tpf : m[MESH_TP]);
	printf("\"step_time_s\":%.9g,\"compute_s\":%.9g,\"tokens_per_s\":%.6g,\"mfu\":%.6g,"
	       "\"peak_memory\":%llu,\"memory_bound\":%llu,\"bubble_fraction\":%.6g,"
	       "\"comm_exposed_s\":%.9g,\"devices_run\":%d",
	       (double)x->e.step_ns / 1e9, (double)x->e.compute_ns / 1e9, x->e.tokens_s, x->e.mfu,
	       (unsigned long long)x->e.peak, (unsigned long long)x->e.bound,
	       (double)x->e.bubble_ns / (double)x->e.step_ns, (double)x->e.exposed_ns / 1e9,
	       x->e.devices_run);
	if (rank <= p->commands) {
		printf(",\"pemu_run\":\"");
		cmd_plan_pemu_run(stdout, p->argc, p->argv, &cfg, 1);
		printf("\",\"megatron\":");
		if ((gap = cmd_plan_megatron_gap(&cfg, &p->cc->cfg))) {
			printf("null,\"megatron_gap\":");
			report_json_string(stdout, gap);
		} else {
			char *buf = NULL;
			size_t len = 0;
			FILE *mf = open_memstream(&buf, &len);

			cmd_plan_megatron(mf, &cfg, &p->cc->cfg);
			fclose(mf);
			report_json_string(stdout, buf);
			free(buf);
		}
	}
	if (rank <= p->validate) {
		const struct verify_result *v = &p->ver[rank - 1];

		printf(",\"validate\":{\"tiny\":");
		report_json_string(stdout, p->tiny[rank - 1]);
		printf(",\"ran\":%s,\"passed\":%s,\"max_rel_err\":{\"loss\":%.6g,\"grad\":%.6g,"
		       "\"param\":%.6g}}",
		       p->passed[rank - 1] >= 0 ? "true" : "false",
		       p->passed[rank - 1] > 0 ? "true" : "false", v->loss_err, v->grad_err,
		       v->param_err);
	}
	printf("}");
}

static void print_json(const struct plan_cmd *p)
{
	const struct plan_result *r = p->r;
	const struct run_cfg *b = &p->s->base;

	printf("{\"command\":\"plan\",\"model\":{\"name\":");
	report_json_string(stdout, b->preset ? b->preset->name : "model");
	printf(",\"parameters\":%zu,\"num_layers\":%d,\"hidden_size\":%d,"
	       "\"num_attention_heads\":%d,\"seq_length\":%d,\"num_experts\":%d,"
	       "\"global_batch_size\":%d},\"gpus\":%d,\"cluster\":",
	       gpt_num_params(&b->model), b->model.num_layers, b->model.hidden, b->model.heads,
	       b->model.seq_len, b->model.num_experts, b->gbs, p->s->gpus);
	report_cluster_json(stdout, &p->cc->cfg);
	printf(",\"space\":{\"layouts\":%d,\"refused_by_rule\":%d,\"pruned_by_memory_bound\":%d,"
	       "\"oases_kept_tp\":%d,\"out_of_memory\":%d,\"failed\":%d,\"fit\":%d,"
	       "\"dry_runs\":%d,\"jobs\":%d,"
	       "\"wall_s\":%.6g,\"layouts_per_s\":%.6g,"
	       "\"dry_runs_per_s\":%.6g},\"ranked\":[",
	       r->n, r->by_rule, r->by_bound, r->by_same, r->by_oom, r->failed, r->nok, dry_runs(r),
	       p->jobs, r->wall_s, r->n / (r->wall_s > 0 ? r->wall_s : 1),
	       dry_runs(r) / (r->wall_s > 0 ? r->wall_s : 1));
	for (int k = 0; k < r->nok; k++)
		json_entry(p, k + 1, &r->all[r->rank[k]]);
	printf("],\"pareto\":[");
	for (int k = 0, j = 0; k < r->nok && j < r->npareto; k++)
		if (r->rank[k] == r->pareto[j]) {
			printf("%s%d", j ? "," : "", k + 1);
			j++;
		}
	printf("],\"megatron_best\":%d}\n", megatron_best(p) + 1);
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

		cfg_of(p, &p->r->all[p->r->rank[k]], &cfg);
		p->passed[k] = -1;
		if (plan_tiny(&cfg, &tiny, err, sizeof err)) {
			snprintf(p->tiny[k], sizeof p->tiny[k], "no tiny twin: %.60s", err);
			bad = 1;
			continue;
		}
		snprintf(p->tiny[k], sizeof p->tiny[k],
			 "%d layers, hidden %d, %d heads, seq %d, global batch %d, %d GPUs",
			 tiny.model.num_layers, tiny.model.hidden, tiny.model.heads,
			 tiny.model.seq_len, tiny.gbs, tiny.mesh.world);
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

	cfg_of(p, &p->r->all[p->r->rank[0]], &cfg);
	ec.trace = 1;
	cl = emu_cluster_new(&ec);
	run_alloc(&o, &cfg, 0);
	rc = run_parallel(cl, &cfg, &o);
	if (p->cc->trace_path && trace_write_json(cl, p->cc->trace_path))
		fprintf(stderr, "pemu: cannot write trace '%s'\n", p->cc->trace_path);
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
	struct cli c = {.prog = "pemu plan",
			.argc = argc,
			.argv = argv,
			.i = 1,
			.opts = {plan_opts, cli_model_opts, cli_cluster_opts, cli_par_opts, NULL}};
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
			search_only = plan_opts[id - CLI_PLAN_GPUS].name;
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
			p.top = (int)cli_int(&c, "--top", v, 0, 1 << 20);
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
		if (dim_of(id) >= 0)
			s.fixed |= 1u << dim_of(id);
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
	if (!s.max_tp && !(s.fixed & (1u << PLAN_TP)))
		s.max_tp = cc.cfg.topo.gpus_per_node;
	s.base.steps = 1;
	s.base.log_every = 0;
	p.argc = argc;
	p.argv = argv;
	p.s = &s;
	p.cc = &cc;
	p.t0 = p.last = now_s();
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
		print_json(&p);
	else
		print_text(&p);
	if (r.nok && (cc.timeline || cc.trace_path))
		trace_winner(&p);
	free(p.passed);
	free(p.ver);
	free(p.tiny);
	plan_result_free(&r);
	cli_model_free(&mo);
	return rc;
}
