/* pemu run and pemu verify: training on the emulated cluster with a parallel
 * configuration, and the same plus the serial reference, compared as docs/formulas.md
 * (Verification) says. The options are cli_model's and cli_par's; run/cfg.h derives the defaults
 * and checks the configuration before any thread starts. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "cmd/cli.h"
#include "cmd/cli_model.h"
#include "cmd/cli_par.h"
#include "cmd/cmd.h"
#include "cmd/report.h"
#include "coll.h"
#include "run/run.h"
#include "team.h"
#include "trace.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: pemu run|verify [options]\n\n"
		   "run trains on the emulated cluster with a parallel configuration and "
		   "reports\n"
		   "loss, virtual step time (compute, communication, idle), memory per device "
		   "and\n"
		   "bytes per collective; verify also runs the serial reference on the same "
		   "seed and\n"
		   "data and compares losses, gradients (the first step's, and more loosely the "
		   "later\n"
		   "ones) and final parameters (exit 1 on a mismatch).\n\n"
		   "  pemu verify --model tiny --dp 2 --tp 2 --zero-stage 1 --steps 3\n"
		   "  pemu run --model gpt3-175b --dry-run --tp 8 --dp 16 --zero-stage 1 "
		   "--nodes 16\n"
		   "  pemu verify --model tiny --num-layers 4 --pp 2 --schedule zb-h1 "
		   "--timeline\n"
		   "  pemu run --model llama-7b-shape --seq-length 32768 --cluster h20 --nodes "
		   "8 --tp 8 --pp 8\n"
		   "      --sequence-parallel --use-flash-attn --schedule helix --recompute full "
		   "--dry-run\n\n"
		   "Parallel options:\n");
	cli_print_opts(f, cli_par_opts);
	fprintf(f, "\nModel and training options (Megatron-LM's names):\n");
	cli_print_opts(f, cli_model_opts);
	fprintf(f, "\nCluster options:\n");
	cli_print_opts(f, cli_cluster_opts);
	cli_print_exit_codes(f,
			     "the run failed (out of memory, the virtual clock's horizon, a "
			     "diverged loss, a device that died, ...), or verify found a mismatch");
}

/* The first step (from 1) whose loss in o is not finite, or 0. */
static int diverged_at(const struct run_cfg *cfg, const struct run_out *o)
{
	for (int s = 0; s < cfg->steps; s++)
		if (!isfinite(o->loss[s]))
			return s + 1;
	return 0;
}

static const char *cmd_name(int verify)
{
	return verify ? "verify" : "run";
}

static void print_header(int verify, const struct run_cfg *cfg, const struct emu_config *ecfg)
{
	char mesh[96], first[64] = "", cp[64] = "";
	static const char *const recompute[] = {"", ", selective recomputation",
						", full recomputation", ", Oases's recomputation"};

	mesh_describe(&cfg->mesh, mesh, sizeof mesh);
	if (cfg->tpf_layers)
		snprintf(first, sizeof first, ", the first %d layers at tp %d", cfg->tpf_layers,
			 cfg->tpf);
	else if (run_ep_mode(cfg) == RUN_EP_TP)
		snprintf(first, sizeof first, ", experts over the tp group (ep %d)", cfg->ep);
	else if (run_ep_mode(cfg) == RUN_EP_ROWS)
		snprintf(first, sizeof first, ", experts over ep %d of tp x cp x dp (%s)", cfg->ep,
			 cfg->ep_dispatch == PAR_EP_ALLGATHER ? "allgather" : "alltoall");
	else if (cfg->ep > 1)
		snprintf(first, sizeof first, ", experts over ep %d%s (%s)", cfg->ep,
			 cfg->mesh.size[MESH_TP] > 1 ? ", each cut over tp" : "",
			 cfg->ep_dispatch == PAR_EP_ALLGATHER ? "allgather" : "alltoall");
	if (cfg->mesh.size[MESH_CP] > 1)
		snprintf(cp, sizeof cp, " (cp: %s)",
			 cfg->cp_comm == PAR_CP_A2A          ? "Ulysses all-to-all"
			 : cfg->cp_comm == PAR_CP_ALL_GATHER ? "K, V all-gathered"
			 : cfg->cp_contiguous                ? "the ring, p2p, contiguous chunks"
							     : "the ring, p2p");
	printf("# pemu %s: %s, %zu parameters on %s%s%s, ZeRO stage %d%s%s, micro-batch %d, "
	       "global batch %d, %d step%s\n",
	       cmd_name(verify), cfg->preset->name, gpt_num_params(&cfg->model), mesh, cp, first,
	       cfg->zero, recompute[cfg->recompute],
	       cfg->tp_overlap ? ", Oases's overlapped tp (2 sub-batches)" : "", cfg->mbs, cfg->gbs,
	       cfg->steps, cfg->steps == 1 ? "" : "s");
	printf("# ");
	report_cluster_line(stdout, ecfg);
	printf("\n# %s, %s accounting\n", ecfg->dry_run ? "dry-run (no data)" : "execute",
	       cfg->prec == PREC_BF16 ? "bf16" : "fp32");
	report_checkpoint_line(stdout, cfg);
	report_dropout_line(stdout, cfg);
	fflush(stdout);
}

/* verify's comparison as "# " lines and the verdict. */
static void print_verify(const struct run_cfg *cfg, const struct run_out *par,
			 const struct run_out *ref, const struct verify_result *v)
{
	char gname[48], pname[48], first[32];

	printf("# verify against the serial reference (1 GPU, same seed and data):\n");
	for (int s = 0; s < cfg->steps; s++)
		printf("#   step %3d  loss %.7f  reference %.7f\n", cfg->step0 + s + 1,
		       (double)par->loss[s], (double)ref->loss[s]);
	gpt_tensor_name(&cfg->model, v->grad_tensor, gname, sizeof gname);
	gpt_tensor_name(&cfg->model, v->param_tensor, pname, sizeof pname);
	printf("#   worst loss       %.3g (step %d), tolerance %g; largest absolute error %.3g\n",
	       v->loss_err, cfg->step0 + v->loss_step + 1, v->loss_tol, v->loss_abs);
	if (cfg->step0) /* (a resumed run's first step is not 1) */
		snprintf(first, sizeof first, "first step, %d", cfg->step0 + 1);
	else
		snprintf(first, sizeof first, "first step");
	printf("#   worst gradient   %.3g (%s, %s), tolerance %g; largest absolute error %.3g\n",
	       v->grad_err, gname, first, v->grad_tol, v->grad_abs);
	if (v->later_step) {
		char lname[48];

		gpt_tensor_name(&cfg->model, v->later_tensor, lname, sizeof lname);
		printf("#   worst gradient of a later step %.3g (%s, step %d), tolerance %g; "
		       "largest "
		       "absolute error %.3g\n",
		       v->later_err, lname, cfg->step0 + v->later_step + 1, v->later_tol,
		       v->later_abs);
	}
	if (v->noise_params < v->param_entries) {
		printf("#   worst parameter  %.3g (%s, after step %d), tolerance %g; largest "
		       "absolute error %.3g\n",
		       v->param_err, pname, cfg->step0 + cfg->steps, v->param_tol, v->param_abs);
	} else { /* (a long run: the gradients' checks hold it, each kept step's) */
		int kept = ref->gsteps_n < par->gsteps_n ? ref->gsteps_n : par->gsteps_n;

		printf("#   worst parameter  none compared: every entry is one the run's rounding "
		       "could move that far (the gradients of the first %d step%s are compared "
		       "above)\n",
		       kept, kept == 1 ? "" : "s");
	}
	printf("#   %zu of %zu parameter entries that the run's gradient differences could move "
	       "by half the tolerance (the key biases among them) left out of the parameter "
	       "check\n",
	       v->noise_params, v->param_entries);
	if (v->routes)
		printf("#   %zu of %zu MoE routing decisions differ from the reference's\n",
		       v->route_flips, v->routes);
	if (v->route_flips)
		printf("#   routing flip: the first at step %d, layer %d, token %d of its "
		       "micro-batch. Rounding turned a top-k or capacity decision; differences "
		       "that follow come from that decision, not from the strategy. Another --seed "
		       "gives a clean comparison.\n",
		       cfg->step0 + v->flip_step + 1, v->flip_layer, v->flip_token);
	if (diverged_at(cfg, ref))
		printf("#   the reference diverged too (its loss is %g at step %d): training "
		       "diverged, which is no strategy's mismatch (try a lower --lr or "
		       "--clip-grad)\n",
		       (double)ref->loss[diverged_at(cfg, ref) - 1],
		       cfg->step0 + diverged_at(cfg, ref));
	printf("verify: %s\n", v->passed               ? "PASSED"
			       : diverged_at(cfg, ref) ? "FAILED (training diverged)"
			       : v->route_flips        ? "FAILED (routing flip)"
						       : "FAILED");
}

/* The report as text: time, pipeline, memory, communication, and verify's comparison. */
static void print_report(int verify, const struct run_cfg *cfg, struct emu_cluster *cl,
			 const struct run_out *par, const struct run_out *ref,
			 const struct verify_result *v, double mfu)
{
	int64_t step = par->step_ns[cfg->steps - 1], comp = par->compute_ns[cfg->steps - 1];
	int64_t comm = report_comm_ns(emu_cluster_dev(cl, 0)) / cfg->steps;
	int64_t exposed = par->exposed_ns[cfg->steps - 1]; /* (the step's, as its idle time) */
	int ndev = cfg->mesh.world;

	printf("# step time %.3f ms virtual: compute %.3f ms; communication %.3f ms; compute "
	       "stream idle %.3f ms (%.3f ms of it waiting for communication in flight, the "
	       "rest for peers); MFU %.1f%% over %d GPU%s\n",
	       (double)step / 1e6, (double)comp / 1e6, (double)comm / 1e6,
	       (double)(step - comp) / 1e6, (double)exposed / 1e6, 100 * mfu, ndev,
	       ndev == 1 ? "" : "s");
	if (cfg->mesh.size[MESH_PP] > 1)
		report_pipeline_table(stdout, cl, cfg, par, step);
	report_memory_table(stdout, cl, ndev);
	report_comm_table(stdout, cl);
	report_moe_table(stdout, cfg, par);
	if (verify)
		print_verify(cfg, par, ref, v);
	if (par->devices_run < ndev)
		printf("# dry-run folding: %d of the %d devices simulated, each of the others a "
		       "replica or tensor-parallel peer of one of them (exact; --fold off runs "
		       "all)\n",
		       par->devices_run, ndev);
}

/* The field "steps": the first n steps of o, each its iteration, loss (null in a
 * dry-run: it has none) and virtual time, and with ref the reference's loss. */
static void json_steps(const struct run_cfg *cfg, const struct emu_config *ecfg,
		       const struct run_out *o, const struct run_out *ref, int n)
{
	printf("\"steps\":[");
	for (int s = 0; s < n; s++) {
		printf("%s{\"step\":%d,\"loss\":%s,\"step_time_s\":%.9g", s ? "," : "",
		       cfg->step0 + s + 1, ecfg->dry_run ? "null" : report_jnum(o->loss[s], 9),
		       (double)o->step_ns[s] / 1e9);
		if (ref)
			printf(",\"ref_loss\":%s", report_jnum(ref->loss[s], 9));
		printf("}");
	}
	printf("]");
}

/* The field "verify": the worst errors (a parameter's null where none was compared) and
 * where each was, the tolerances, and what was left out or flipped. */
static void json_verify(const struct run_cfg *cfg, const struct run_out *ref,
			const struct verify_result *v)
{
	int none = v->noise_params >= v->param_entries;
	char gname[48], lname[48], pname[48];

	gpt_tensor_name(&cfg->model, v->grad_tensor, gname, sizeof gname);
	gpt_tensor_name(&cfg->model, v->later_tensor, lname, sizeof lname);
	gpt_tensor_name(&cfg->model, v->param_tensor, pname, sizeof pname);
	printf("\"verify\":{\"max_rel_err\":{\"loss\":%s,\"grad\":%s,\"grad_later\":%s,"
	       "\"param\":%s},\"max_abs_err\":{\"loss\":%s,\"grad\":%s,\"grad_later\":%s,"
	       "\"param\":%s},\"tolerance\":{\"loss\":%g,\"grad\":%g,\"grad_later\":%g,"
	       "\"param\":%g},",
	       report_jnum(v->loss_err, 6), report_jnum(v->grad_err, 6),
	       report_jnum(v->later_err, 6), none ? "null" : report_jnum(v->param_err, 6),
	       report_jnum(v->loss_abs, 6), report_jnum(v->grad_abs, 6),
	       report_jnum(v->later_abs, 6), none ? "null" : report_jnum(v->param_abs, 6),
	       v->loss_tol, v->grad_tol, v->later_tol, v->param_tol);
	/* (the steps as the report numbers them; a tensor by its Megatron-style name) */
	printf("\"worst\":{\"loss_step\":%d,\"grad\":\"%s\",", cfg->step0 + v->loss_step + 1,
	       gname);
	if (v->later_step)
		printf("\"grad_later\":\"%s\",\"grad_later_step\":%d,", lname,
		       cfg->step0 + v->later_step + 1);
	else
		printf("\"grad_later\":null,\"grad_later_step\":null,");
	if (none)
		printf("\"param\":null},");
	else
		printf("\"param\":\"%s\"},", pname);
	printf("\"noise_driven_params\":%zu,\"param_entries\":%zu,\"routing_decisions\":%zu,"
	       "\"routing_flips\":%zu,\"reference_diverged\":%s,\"passed\":%s},",
	       v->noise_params, v->param_entries, v->routes, v->route_flips,
	       diverged_at(cfg, ref) ? "true" : "false", v->passed ? "true" : "false");
}

/* The report as one JSON object (docs/architecture.md, The JSON report). */
static void json_report(int verify, const struct run_cfg *cfg, const struct emu_config *ecfg,
			struct emu_cluster *cl, const struct run_out *par,
			const struct run_out *ref, const struct verify_result *v, double mfu)
{
	int64_t step = par->step_ns[cfg->steps - 1], comp = par->compute_ns[cfg->steps - 1];
	int64_t comm = report_comm_ns(emu_cluster_dev(cl, 0)) / cfg->steps;
	int64_t exposed = par->exposed_ns[cfg->steps - 1]; /* (the step's, as its idle time) */

	printf("{\"command\":\"%s\",", cmd_name(verify));
	report_config_json_run(stdout, cfg, ecfg);
	printf(",");
	json_steps(cfg, ecfg, par, verify ? ref : NULL, cfg->steps);
	printf(",");
	if (verify)
		json_verify(cfg, ref, v);
	printf("\"time\":{\"step_time_s\":%.9g,\"compute_s\":%.9g,\"comm_s\":%.9g,\"exposed_comm_"
	       "s\":%.9g,\"comm_exposed_s\":%.9g,\"bubble_fraction\":%s,\"mfu\":%s},",
	       (double)step / 1e9, (double)comp / 1e9, (double)comm / 1e9,
	       (double)(step - comp) / 1e9, (double)exposed / 1e9,
	       report_jnum(report_bubble_fraction(cfg, par, step), 6), report_jnum(mfu, 6));
	if (cfg->mesh.size[MESH_PP] > 1)
		report_pipeline_json(stdout, cl, cfg, par);
	report_memory_json(stdout, cl, cfg->mesh.world);
	printf(",");
	report_comm_json(stdout, cl);
	if (cfg->model.num_experts > 0) {
		printf(",");
		report_moe_json(stdout, cfg, par);
	}
	printf(",\"devices_run\":%d,\"wall_s\":%.6g}\n", par->devices_run,
	       (double)emu_cluster_wall_ns(cl) / 1e9);
}

/* A failed run's report as one JSON object: the configuration, the error (its kind and
 * the report of err, the failed cluster: cl, or the reference's, "in":"reference"), the
 * steps par finished before it, and the parallel run's memory and communication up to
 * the failure. */
static void json_failure(int verify, const struct run_cfg *cfg, const struct emu_config *ecfg,
			 struct emu_cluster *cl, struct emu_cluster *err, const struct run_out *par)
{
	printf("{\"command\":\"%s\",", cmd_name(verify));
	report_config_json_run(stdout, cfg, ecfg);
	printf(",");
	json_steps(cfg, ecfg, par, NULL, par->steps_done);
	printf(",\"error\":{\"kind\":\"%s\",%s\"report\":", emu_cluster_err_kind(err),
	       err != cl ? "\"in\":\"reference\"," : "");
	report_json_string(stdout, emu_cluster_report(err));
	printf("},");
	report_memory_json(stdout, cl, cfg->mesh.world);
	printf(",");
	report_comm_json(stdout, cl);
	printf(",\"wall_s\":%.6g}\n", (double)emu_cluster_wall_ns(cl) / 1e9);
}

/* Runs cfg on cc's cluster (and with verify, the reference on one device of it) and
 * prints the report; the exit code. */
static int run_exec(int verify, const struct run_cfg *cfg, const struct cli_cluster *cc)
{
	const struct emu_config *ecfg = &cc->cfg;
	struct emu_cluster *cl = emu_cluster_new(ecfg), *one = NULL;
	struct run_out par, ref;
	struct verify_result v = {0};
	int rc;

	if (!cc->json)
		print_header(verify, cfg, ecfg);
	run_alloc(&par, cfg, verify);
	/* devices fewer than the host threads: the rest help one device's kernels at a time */
	team_start(cmd_team_threads(ecfg, ecfg->ndev));
	rc = run_parallel(cl, cfg, &par);
	team_stop();
	if (rc) {
		fflush(stdout);
		fprintf(stderr, "pemu %s: the run failed (%s):\n%s\n", cmd_name(verify),
			emu_cluster_err_kind(cl), emu_cluster_report(cl));
		if (cc->json)
			json_failure(verify, cfg, ecfg, cl, cl, &par);
		else
			report_memory_table(stdout, cl, ecfg->ndev);
		goto out;
	}
	if (verify) {
		struct emu_config e1 = *ecfg;

		e1.topo.nodes = 1;
		e1.ndev = 1;
		e1.trace = 0;
		e1.nslow = 0; /* (the faults are the parallel run's) */
		one = emu_cluster_new(&e1);
		run_alloc(&ref, cfg, 1);
		team_start(cmd_team_threads(ecfg, 1)); /* the reference's one device */
		rc = run_reference(one, cfg, &ref);
		team_stop();
		if (rc) {
			fprintf(stderr, "pemu verify: the reference failed (%s):\n%s\n",
				emu_cluster_err_kind(one), emu_cluster_report(one));
			if (cc->json) /* (the report all the same: the parallel run's, its error) */
				json_failure(verify, cfg, ecfg, cl, one, &par);
			run_free(&ref);
			goto out;
		}
		verify_compare(&ref, &par, cfg, &v);
	}
	{
		int64_t step = par.step_ns[cfg->steps - 1];
		double mfu = gpt_model_flops(&cfg->model, cfg->gbs) /
			     ((double)step / 1e9 * ecfg->topo.gpu.peak_flops * ecfg->ndev);

		if (cc->json)
			json_report(verify, cfg, ecfg, cl, &par, &ref, &v, mfu);
		else
			print_report(verify, cfg, cl, &par, &ref, &v, mfu);
		if (!v.passed && verify)
			rc = 1;
	}
	if (verify)
		run_free(&ref);
out: /* the trace and the timeline, of a failed run too: up to the failure */
	cli_write_trace(cc, cl, verify ? "pemu verify" : "pemu run");
	if (cc->timeline)
		trace_timeline(cl, cc->json ? stderr : stdout, 100, 16);
	if (cc->timeline && cfg->tp_overlap)
		fprintf(cc->json ? stderr : stdout,
			"        lane1, lane2: the two sub-batches of --tp-overlap oases\n");
	if (cc->timeline && cfg->mesh.size[MESH_PP] > 1 && !rc)
		sched_draw(&par.sched, par.span, 100, cc->json ? stderr : stdout);
	run_free(&par);
	emu_cluster_free(cl);
	if (one)
		emu_cluster_free(one);
	return rc ? 1 : 0;
}

/* The command line into cfg, mo and cc, checked; 1 if --help printed the usage. */
static int parse(int argc, char **argv, int verify, struct run_cfg *cfg, struct cli_model *mo,
		 struct cli_cluster *cc, struct cli *c)
{
	struct cli_par po;
	const char *v;
	char err[512];
	int id;

	*c = (struct cli){.prog = verify ? "pemu verify" : "pemu run",
			  .argc = argc,
			  .argv = argv,
			  .i = 1,
			  .opts = {cli_model_opts, cli_cluster_opts, cli_par_opts, NULL}};
	run_cfg_init(cfg);
	cli_model_init(mo);
	cli_par_init(&po);
	cli_cluster_init(cc);
	while ((id = cli_next(c, &v))) {
		if (cli_cluster_opt(cc, id, v) || cli_model_opt(mo, cfg, c, id, v) ||
		    cli_par_opt(&po, cfg, c, id, v))
			continue;
		if (id == CLI_MODEL_HELP) {
			usage(stdout);
			return 1;
		}
	}
	cli_model_finish(mo, cfg, c, cc->cfg.dry_run);
	if (mo->sample)
		cli_fail(c, "--sample: only pemu train generates text");
	cli_par_finish(&po, cfg);
	cli_model_checkpoint(mo, cfg, c, !verify);
	if (verify &&
	    !cfg->steps) /* verify compares a few steps (docs/formulas.md, Verification) */
		cfg->steps = 3;
	if (verify) /* it runs on past a loss that is not finite, to say which run went wrong */
		cfg->stop_diverged = 0;
	if (cc->json)
		cfg->log_every = 0;
	if (run_cfg_finish(cfg, cfg->mesh.world, err, sizeof err))
		cli_fail(c, "%s", err);
	cli_model_checkpoint_finish(mo, cfg, c);
	cli_cluster_finish(cc, c, cfg->mesh.world);
	cli_cluster_faults(cc, c, cfg);
	if (verify && cc->cfg.dry_run)
		cli_fail(c, "--dry-run: verify compares numbers, so it runs in execute mode");
	return 0;
}

int cmd_run_parse_cfg(int argc, char **argv, int verify, struct run_cfg *out)
{
	struct run_cfg cfg;
	struct cli_model mo;
	struct cli_cluster cc;
	struct cli c;
	int rc = parse(argc, argv, verify, &cfg, &mo, &cc, &c);

	cli_model_free(&mo);
	if (out)
		*out = cfg;
	return rc;
}

int cmd_run_parse(int argc, char **argv, int verify)
{
	return cmd_run_parse_cfg(argc, argv, verify, NULL);
}

static int run_or_verify(int argc, char **argv, int verify)
{
	struct run_cfg cfg;
	struct cli_model mo;
	struct cli_cluster cc;
	struct cli c;
	int rc;

	if (parse(argc, argv, verify, &cfg, &mo, &cc, &c)) {
		cli_model_free(&mo);
		return 0;
	}
	if (!cc.cfg.dry_run) { /* before the data is loaded or anything allocated */
		char fails[256];
		uint64_t largest, need = run_host_need(&cfg, &cc.cfg, 1, verify, &largest, fails,
						       sizeof fails);

		if (cfg.save) /* (the full tensors the devices save through) */
			need += ckpt_bytes(&cfg.model);

		cli_host_check(&c, need, largest, fails);
	}
	cli_model_load(&mo, &cfg, &c);
	if (!cc.json)
		report_vocab_padding(stdout, &cfg);
	rc = run_exec(verify, &cfg, &cc);
	cli_model_free(&mo);
	return rc;
}

int cmd_run(int argc, char **argv)
{
	return run_or_verify(argc, argv, 0);
}

int cmd_verify(int argc, char **argv)
{
	return run_or_verify(argc, argv, 1);
}
