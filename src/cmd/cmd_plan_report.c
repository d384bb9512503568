/* pemu plan's report: the ranked table, the Pareto front, the command lines of the best,
 * the --validate lines, as text or as one JSON object (cmd/cmd_plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/cmd_plan.h"
#include "cmd/report.h"
#include "units.h"
#include "util.h"

/* ------------------------------------------------------------------------------------ */
/* The report                                                                            */

/* The finished configuration of ranked entry x. */
void cmd_plan_cfg_of(const struct plan_cmd *p, const struct plan_entry *x, struct run_cfg *cfg)
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

	cmd_plan_cfg_of(p, x, &cfg);
	cmd_plan_layout(&cfg, lay, sizeof lay);
	printf("  %4d %10s %10.4g %6.1f%% %10s %6.1f%% %10s   %s\n", rank, t_of(x->e.step_ns),
	       x->e.tokens_s, 100 * x->e.mfu, b_of(x->e.peak),
	       100.0 * (double)x->e.bubble_ns / (double)x->e.step_ns, t_of(x->e.exposed_ns), lay);
}

/* The place in the ranking of the fastest layout Megatron-LM can run, or -1. */
static int megatron_best(const struct plan_cmd *p)
{
	for (int k = 0; k < p->r->nok; k++) {
		struct run_cfg cfg;

		cmd_plan_cfg_of(p, &p->r->all[p->r->rank[k]], &cfg);
		if (!cmd_plan_megatron_gap(&cfg, &p->cc->cfg))
			return k;
	}
	return -1;
}

void cmd_plan_print_text(const struct plan_cmd *p)
{
	const struct plan_result *r = p->r;
	const struct run_cfg *b = &p->s->base;
	const struct emu_config *ec = &p->cc->cfg;
	int top = p->top < r->nok ? p->top : r->nok;

	printf("# pemu plan: %s, %zu parameters (before each layout pads the vocabulary for its "
	       "tp), global batch %d of %d tokens, on %d GPU%s\n# ",
	       b->preset ? b->preset->name : "model", gpt_num_params(&b->model), b->gbs,
	       b->model.seq_len, p->s->gpus, p->s->gpus == 1 ? "" : "s");
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

		cmd_plan_cfg_of(p, &r->all[r->rank[k]], &cfg);
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
			cmd_plan_cfg_of(p, &r->all[r->rank[k]], &cfg);
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

	cmd_plan_cfg_of(p, x, &cfg);
	m = cfg.mesh.size;
	printf("%s{\"rank\":%d,\"layout\":{\"dp\":%d,\"tp\":%d,\"pp\":%d,\"cp\":%d,\"ep\":%d,"
	       "\"expert_tensor_parallel_size\":%d,\"schedule\":\"%s\",\"vpp\":%d,"
	       "\"micro_batch_size\":%d,\"zero_stage\":%d,\"recompute\":\"%s\","
	       "\"tp_overlap\":\"%s\",\"sequence_parallel\":%s,\"flash_attention\":%s,"
	       "\"cp_comm_type\":\"%s\",\"tp_first_layers\":%d,\"tp_first\":%d},",
	       rank > 1 ? "," : "", rank, m[MESH_DP], m[MESH_TP], m[MESH_PP], m[MESH_CP], cfg.ep,
	       cmd_plan_etp(&cfg), m[MESH_PP] > 1 ? sched_name(cfg.schedule) : "none", cfg.vpp,
	       cfg.mbs, cfg.zero, cmd_plan_recompute_name[cfg.recompute],
	       cfg.tp_overlap ? "oases" : "none", cfg.sp ? "true" : "false",
	       cfg.flash ? "true" : "false", cmd_plan_cp_comm_name[cfg.cp_comm], cfg.tpf_layers,
	       cfg.tpf_layers ? cfg.tpf : m[MESH_TP]);
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
		/* (as verify's: JSON has no NaN, and none compared is no error) */
		printf(",\"ran\":%s,\"passed\":%s,\"max_rel_err\":{\"loss\":%s,\"grad\":%s,"
		       "\"param\":%s}}",
		       p->passed[rank - 1] >= 0 ? "true" : "false",
		       p->passed[rank - 1] > 0 ? "true" : "false", report_jnum(v->loss_err, 6),
		       report_jnum(v->grad_err, 6),
		       v->noise_params >= v->param_entries ? "null" : report_jnum(v->param_err, 6));
	}
	printf("}");
}

void cmd_plan_print_json(const struct plan_cmd *p)
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
