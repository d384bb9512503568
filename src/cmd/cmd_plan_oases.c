/* pemu plan --oases: Oases's search for tensor-parallel degrees (run/oases_plan.h) on the
 * configuration pemu run's options describe: the measured block costs, the chain's
 * optimum, the plan rounded to two degrees and one cut, its dry-run against Megatron's
 * and against Oases at one degree, and the pemu run arguments that run it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "cmd/cmd.h"
#include "run/oases_plan.h"
#include "units.h"
#include "util.h"

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
			cli_put_arg(f, argv[i], json);
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

int cmd_plan_oases(int argc, char **argv, const struct cli *c, struct run_cfg *cfg,
		   struct cli_cluster *cc)
{
	struct oases_result *r;
	char err[512];
	int rc;

	if (cfg->mesh.size[MESH_TP] < 2)
		cli_fail(c,
			 "--oases searches the degrees of a tensor-parallel layout: give --tp > 1 "
			 "(the group its blocks' degrees divide), for example --tp 4");
	cfg->steps = 1;
	cfg->log_every = 0;
	cfg->tp_overlap = PAR_OVERLAP_OASES;
	cfg->recompute = PAR_RECOMPUTE_OASES;
	cfg->tpf_layers = cfg->tpf = 0; /* the search's to choose (a --tp-first given is dropped) */
	if (run_cfg_finish(cfg, cfg->mesh.world, err, sizeof err))
		cli_fail(c, "%s", err);
	cli_cluster_finish(cc, c, cfg->mesh.world);
	if (cc->nfail || cc->cfg.nslow)
		cli_fail(c, "--inject-fault: pemu plan searches a healthy cluster; faults are for "
			    "pemu run, verify and coll");
	cli_parsed();
	r = emu_xcalloc(1, sizeof *r);
	if ((rc = oases_plan(&cc->cfg, cfg, r, err, sizeof err))) {
		fprintf(stderr, "%s\n", err);
		free(r);
		return rc == EMU_EINVAL ? 2 : 1;
	}
	if (cc->json)
		print_json(argc, argv, r);
	else
		print_text(argc, argv, cfg, &cc->cfg, r);
	free(r);
	return 0;
}
