/* pemu plan --oases: Oases's search for tensor-parallel degrees (run/oases_plan.h) on the
 * configuration pemu run's options describe: the measured block costs, the chain's
 * optimum, the plan rounded to two degrees and one cut, its dry-run against Megatron's
 * and against Oases at one degree, and the pemu run arguments that run it. The full
 * layout search (pemu plan without --oases) is not in this build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "cmd/cli_model.h"
#include "cmd/cli_par.h"
#include "cmd/cmd.h"
#include "run/oases_plan.h"
#include "units.h"
#include "util.h"

enum { CLI_PLAN_OASES = 2000 };

static const struct cli_opt plan_opts[] = {
	{"oases", 0, 0, CLI_PLAN_OASES, NULL,
	 "Oases's search: a tensor-parallel degree per block, rounded to --tp-first K:T"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: pemu plan --oases [options]\n\n"
		   "Searches, in dry-run, a tensor-parallel degree for every attention and MLP "
		   "block\n"
		   "(powers of two up to --tp, each with data-parallel size dp tp / t) under "
		   "Oases's\n"
		   "overlap and recomputation, from each block's measured costs, solves the "
		   "chain\n"
		   "exactly, rounds it to the first K layers at a smaller T and the rest at "
		   "--tp, and\n"
		   "checks the rounded plan by a dry-run of it.\n\n"
		   "  pemu plan --oases --cluster rtx3090-pcie --gpus-per-node 4 --nodes 8 --tp 4 "
		   "--dp 8\n"
		   "      --hidden-size 4096 --num-layers 16 --num-attention-heads 64 "
		   "--seq-length 1024\n"
		   "      --micro-batch-size 4 --global-batch-size 640 --zero-stage 1\n\n"
		   "Plan options:\n");
	cli_print_opts(f, plan_opts);
	fprintf(f, "\nParallel options (the space's bounds: --tp the largest degree):\n");
	cli_print_opts(f, cli_par_opts);
	fprintf(f, "\nModel and training options (Megatron-LM's names):\n");
	cli_print_opts(f, cli_model_opts);
	fprintf(f, "\nCluster options:\n");
	cli_print_opts(f, cli_cluster_opts);
}

/* One argument as a shell reads it back: as is if it is plain, else in single quotes;
 * and with json, escaped for a JSON string. */
static void put_arg(FILE *f, const char *a, int json)
{
	int plain = *a != '\0';

	for (const char *p = a; *p; p++)
		plain &= strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
				"_./:=,+-@%",
				*p) != NULL;
	fputc(' ', f);
	if (!plain)
		fputc('\'', f);
	for (const char *p = a; *p; p++) {
		if (!plain && *p == '\'')
			fputs("'\\''", f);
		else if (json && (*p == '"' || *p == '\\'))
			fprintf(f, "\\%c", *p);
		else if (json && (unsigned char)*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	if (!plain)
		fputc('\'', f);
}

/* The pemu run arguments of the plan: the user's, but for the ones the plan sets. */
static void run_args(FILE *f, int argc, char **argv, const struct oases_result *r, int json)
{
	static const char *const drop1[] = {"--oases", "--json", "--dry-run", NULL};
	static const char *const drop2[] = {"--tp-overlap", "--recompute",
					    "--recompute-granularity", "--tp-first", NULL};
	char tail[64];

	fprintf(f, "pemu run");
	for (int i = 1; i < argc; i++) {
		int skip = 0;

		for (int k = 0; drop1[k]; k++)
			skip |= !strcmp(argv[i], drop1[k]);
		for (int k = 0; drop2[k] && !skip; k++)
			if (!strcmp(argv[i], drop2[k])) {
				skip = 1;
				i++; /* and its value */
			} else if (!strncmp(argv[i], drop2[k], strlen(drop2[k])) &&
				   argv[i][strlen(drop2[k])] == '=') {
				skip = 1;
			}
		if (!skip)
			put_arg(f, argv[i], json);
	}
	fprintf(f, " --tp-overlap oases --recompute oases");
	if (r->K) {
		snprintf(tail, sizeof tail, "%d:%d", r->K, r->T);
		fprintf(f, " --tp-first %s", tail);
	}
	fprintf(f, " --dry-run");
}

/* The chain's optimum as runs of layers with the same (attention, MLP) degrees. */
static void print_chain(FILE *f, const struct oases_result *r)
{
	const struct oases_costs *c = &r->costs;

	for (int l = 0; l < c->layers;) {
		int a = r->d[2 * l], m = r->d[2 * l + 1], e = l;

		while (e + 1 < c->layers && r->d[2 * e + 2] == a && r->d[2 * e + 3] == m)
			e++;
		fprintf(f, "#   layers %d-%d: attention at tp %d, MLP at tp %d\n", l, e, c->deg[a],
			c->deg[m]);
		l = e + 1;
	}
}

/* ns as a time with its unit (one of a few rotating buffers, for one printf). */
static const char *t_of(double ns)
{
	static char buf[6][32];
	static int k;

	k = (k + 1) % 6;
	units_fmt_time(buf[k], sizeof buf[k], (int64_t)ns);
	return buf[k];
}

static void print_text(int argc, char **argv, const struct run_cfg *cfg,
		       const struct emu_config *ec, const struct oases_result *r)
{
	const struct oases_costs *c = &r->costs;

	printf("# pemu plan --oases: %s, %d layers, hidden %d, on %d x %s (dp %d x tp %d), "
	       "micro-batch %d, %d a step\n",
	       cfg->preset ? cfg->preset->name : "model", cfg->model.num_layers, cfg->model.hidden,
	       cfg->mesh.world, ec->topo.gpu.name, cfg->mesh.size[MESH_DP], cfg->mesh.size[MESH_TP],
	       cfg->mbs, c->micro);
	printf("# block costs measured by dry-run, per sub-batch in ms (dp: the gradients' "
	       "all-reduce once a step), memory a device in GiB:\n");
	printf("#   %3s %-9s %8s %8s %8s %8s %8s %8s %8s\n", "tp", "block", "fwd", "comm", "bwd",
	       "recomp", "bwd comm", "dp", "memory");
	for (int k = 0; k < c->ndeg; k++)
		for (int b = 0; b < 2; b++) {
			const struct oases_block *x = &c->blk[b][k];

			printf("#   %3d %-9s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n",
			       c->deg[k], b ? "MLP" : "attention", x->c / 1e6, x->m / 1e6,
			       x->b / 1e6, x->r / 1e6, x->mb / 1e6, x->dp / 1e6,
			       x->mem / (1 << 30));
		}
	printf("# the chain's optimum, %s a step by the cost model (memory under %.2f GiB):\n",
	       t_of(r->best_ns), c->mem_cap / (1 << 30));
	print_chain(stdout, r);
	if (r->rK == c->layers)
		printf("# rounded to two degrees and one cut: every layer at tp %d (--tp-first "
		       "%d:%d): %s a step by the model\n",
		       r->rT, r->rK, r->rT, t_of(r->rounded_ns));
	else if (r->rK)
		printf("# rounded to two degrees and one cut: the first %d layers at tp %d, the "
		       "rest at tp %d: %s a step by the model\n",
		       r->rK, r->rT, cfg->mesh.size[MESH_TP], t_of(r->rounded_ns));
	else
		printf("# rounded to two degrees and one cut: every layer at tp %d: %s a step by "
		       "the model\n",
		       cfg->mesh.size[MESH_TP], t_of(r->rounded_ns));
	if (r->fell_back)
		printf("# the rounded plan ran slower in dry-run than tp %d throughout, which is "
		       "the plan\n",
		       cfg->mesh.size[MESH_TP]);
	if (r->megatron_ns > 0)
		printf("# checked by dry-run: Megatron (full recomputation) %s, Oases at tp %d %s, "
		       "the plan %s (%.2fx Megatron), peak %.2f GiB on device 0\n",
		       t_of(r->megatron_ns), cfg->mesh.size[MESH_TP], t_of(r->uniform_ns),
		       t_of(r->checked_ns), r->megatron_ns / r->checked_ns,
		       r->checked_peak / (1 << 30));
	else
		printf("# checked by dry-run: Megatron (full recomputation) does not fit, the plan "
		       "%s, peak %.2f GiB on device 0\n",
		       t_of(r->checked_ns), r->checked_peak / (1 << 30));
	if (r->megatron_ns > 0 && r->megatron_ns < r->checked_ns)
		printf("# Megatron's order runs faster here: the two sub-batches' smaller kernels "
		       "cost more than the collectives they hide\n");
	run_args(stdout, argc, argv, r, 0);
	printf("\n");
}

static void print_json(int argc, char **argv, const struct oases_result *r)
{
	const struct oases_costs *c = &r->costs;

	printf("{\"command\":\"plan\",\"search\":\"oases\",\"degrees\":[");
	for (int k = 0; k < c->ndeg; k++)
		printf("%s%d", k ? "," : "", c->deg[k]);
	printf("],\"blocks\":[");
	for (int k = 0; k < c->ndeg; k++)
		for (int b = 0; b < 2; b++) {
			const struct oases_block *x = &c->blk[b][k];

			printf("%s{\"tp\":%d,\"block\":\"%s\",\"fwd_s\":%.9g,\"comm_s\":%.9g,"
			       "\"bwd_s\":%.9g,\"recompute_s\":%.9g,\"bwd_comm_s\":%.9g,\"dp_s\":%."
			       "9g,"
			       "\"memory\":%.0f}",
			       k || b ? "," : "", c->deg[k], b ? "mlp" : "attention", x->c / 1e9,
			       x->m / 1e9, x->b / 1e9, x->r / 1e9, x->mb / 1e9, x->dp / 1e9,
			       x->mem);
		}
	printf("],\"optimum\":{\"step_s\":%.9g,\"tp\":[", r->best_ns / 1e9);
	for (int i = 0; i < 2 * c->layers; i++)
		printf("%s%d", i ? "," : "", c->deg[r->d[i]]);
	printf("]},\"rounded\":{\"tp_first_layers\":%d,\"tp_first\":%d,\"step_s\":%.9g},"
	       "\"plan\":{\"tp_first_layers\":%d,\"tp_first\":%d,\"fell_back\":%s},",
	       r->rK, r->rT, r->rounded_ns / 1e9, r->K, r->T, r->fell_back ? "true" : "false");
	printf("\"dry_run\":{\"megatron_s\":%.9g,\"oases_uniform_s\":%.9g,\"plan_s\":%.9g,"
	       "\"plan_peak\":%.0f},\"run\":\"",
	       r->megatron_ns / 1e9, r->uniform_ns / 1e9, r->checked_ns / 1e9, r->checked_peak);
	run_args(stdout, argc, argv, r, 1);
	printf("\"}\n");
}

int cmd_plan(int argc, char **argv)
{
	struct cli c = {.prog = "pemu plan",
			.argc = argc,
			.argv = argv,
			.i = 1,
			.opts = {plan_opts, cli_model_opts, cli_cluster_opts, cli_par_opts, NULL}};
	struct run_cfg cfg;
	struct cli_model mo;
	struct cli_par po;
	struct cli_cluster cc;
	struct oases_result *r;
	const char *v;
	char err[512];
	int id, oases = 0, rc;

	run_cfg_init(&cfg);
	cli_model_init(&mo);
	cli_par_init(&po);
	cli_cluster_init(&cc);
	while ((id = cli_next(&c, &v))) {
		if (id == CLI_PLAN_OASES) {
			oases = 1;
			continue;
		}
		if (cli_cluster_opt(&cc, id, v) || cli_model_opt(&mo, &cfg, &c, id, v) ||
		    cli_par_opt(&po, &cfg, &c, id, v))
			continue;
		if (id == CLI_MODEL_HELP) {
			usage(stdout);
			return 0;
		}
	}
	if (!oases)
		cli_fail(&c, "only Oases's search (--oases) is in this build; the search over "
			     "every layout is not yet");
	cc.cfg.dry_run = 1; /* the search runs on shapes alone */
	cli_model_finish(&mo, &cfg, &c, 1);
	cli_par_finish(&po, &cfg);
	cfg.steps = 1;
	cfg.log_every = 0;
	cfg.tp_overlap = PAR_OVERLAP_OASES;
	cfg.recompute = PAR_RECOMPUTE_OASES;
	cfg.tpf_layers = cfg.tpf = 0; /* the search's to choose (a --tp-first given is dropped) */
	if (run_cfg_finish(&cfg, cfg.mesh.world, err, sizeof err))
		cli_fail(&c, "%s", err);
	cli_cluster_finish(&cc, &c, cfg.mesh.world);
	if (cc.nfail || cc.cfg.nslow)
		cli_fail(&c, "--inject-fault: pemu plan searches a healthy cluster; faults are for "
			     "pemu run, verify and coll");
	r = emu_xcalloc(1, sizeof *r);
	if ((rc = oases_plan(&cc.cfg, &cfg, r, err, sizeof err))) {
		fprintf(stderr, "%s\n", err);
		free(r);
		cli_model_free(&mo);
		return rc == EMU_EINVAL ? 2 : 1;
	}
	if (cc.json)
		print_json(argc, argv, r);
	else
		print_text(argc, argv, &cfg, &cc.cfg, r);
	free(r);
	cli_model_free(&mo);
	return 0;
}
