/* pemu run and pemu verify: training on the emulated cluster with a parallel
 * configuration, and the same plus the serial reference, compared as DESIGN.md §4 says.
 * The options are pemu train's (cmd_train.c parses them) with the mesh's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "clock.h"
#include "cmd/cmd.h"
#include "cmd/report.h"
#include "coll.h"
#include "mem.h"
#include "run/run.h"
#include "topo.h"
#include "trace.h"
#include "units.h"

static const char *const recompute_names[] = {"none", "selective", "full"};

int run_exec(int verify, const struct run_cfg *cfg, const struct emu_config *ecfg,
	     const char *model_name, const char *trace_path, int timeline, int json)
{
	struct emu_cluster *cl = emu_cluster_new(ecfg), *one = NULL;
	struct run_out par, ref;
	struct verify_result v = {0};
	int ndev = ecfg->ndev, rc;
	char mesh[96];

	mesh_describe(&cfg->mesh, mesh, sizeof mesh);
	if (!json) {
		printf("# pemu %s: %s, %zu parameters on %s, ZeRO stage %d%s, micro-batch %d, "
		       "global batch %d, %d steps\n",
		       verify ? "verify" : "run", model_name, gpt_num_params(&cfg->model), mesh,
		       cfg->zero,
		       cfg->recompute == 0   ? ""
		       : cfg->recompute == 1 ? ", selective recomputation"
					     : ", full recomputation",
		       cfg->mbs, cfg->gbs, cfg->steps);
		printf("# ");
		report_cluster_line(stdout, ecfg);
		printf("\n# %s, %s accounting\n", ecfg->dry_run ? "dry-run (no data)" : "execute",
		       cfg->prec == PREC_BF16 ? "bf16" : "fp32");
		fflush(stdout);
	}
	run_alloc(&par, cfg, verify);
	rc = run_parallel(cl, cfg, &par);
	if (rc) {
		fflush(stdout);
		fprintf(stderr, "pemu %s: the run failed (%s):\n%s\n", verify ? "verify" : "run",
			emu_err_name(rc), emu_cluster_report(cl));
		if (!json)
			report_memory_table(stdout, cl, ndev);
		goto out;
	}
	if (verify) {
		struct emu_config e1 = *ecfg;

		e1.topo.nodes = 1;
		e1.ndev = 1;
		e1.trace = 0;
		one = emu_cluster_new(&e1);
		run_alloc(&ref, cfg, 1);
		if ((rc = run_reference(one, cfg, &ref))) {
			fprintf(stderr, "pemu verify: the reference failed (%s):\n%s\n",
				emu_err_name(rc), emu_cluster_report(one));
			run_free(&ref);
			goto out;
		}
		verify_compare(&ref, &par, &cfg->model, &v);
	}
	{
		struct emu_dev *d0 = emu_cluster_dev(cl, 0);
		int64_t step = par.step_ns[cfg->steps - 1], comp = par.compute_ns[cfg->steps - 1];
		int64_t comm = report_comm_ns(d0) / cfg->steps, exposed = step - comp;
		double mfu = gpt_model_flops(&cfg->model, cfg->gbs) /
			     ((double)step / 1e9 * ecfg->topo.gpu.peak_flops * ndev);

		if (json) {
			printf("{\"command\":\"%s\",\"config\":{\"model\":\"%s\",\"parameters\":%"
			       "zu,\"dp\":%d,\"tp\":%d,\"pp\":%d,\"cp\":1,\"ep\":1,\"zero_stage\":%"
			       "d,\"micro_batch_size\":%d,\"global_batch_size\":%d,\"steps\":%d,"
			       "\"seed\":%" PRIu64 ",\"precision\":\"%s\",\"recompute\":\"%s\","
			       "\"schedule\":\"%s\",\"bucket_size\":%" PRIu64 ",\"cluster\":",
			       verify ? "verify" : "run", model_name, gpt_num_params(&cfg->model),
			       cfg->mesh.size[MESH_DP], cfg->mesh.size[MESH_TP],
			       cfg->mesh.size[MESH_PP], cfg->zero, cfg->mbs, cfg->gbs, cfg->steps,
			       cfg->seed, cfg->prec == PREC_BF16 ? "bf16" : "fp32",
			       recompute_names[cfg->recompute],
			       cfg->mesh.size[MESH_PP] > 1 ? sched_name(cfg->schedule) : "none",
			       cfg->bucket_bytes);
			report_cluster_json(stdout, ecfg);
			printf("},\"steps\":[");
			for (int s = 0; s < cfg->steps; s++) {
				printf("%s{\"step\":%d,\"loss\":%.9g,\"step_time_s\":%.9g",
				       s ? "," : "", s + 1, (double)par.loss[s],
				       (double)par.step_ns[s] / 1e9);
				if (verify)
					printf(",\"ref_loss\":%.9g", (double)ref.loss[s]);
				printf("}");
			}
			printf("],");
			if (verify)
				printf("\"verify\":{\"max_rel_err\":{\"loss\":%.6g,\"grad\":%.6g,"
				       "\"param\":%.6g},\"max_abs_err\":{\"loss\":%.6g,\"grad\":%."
				       "6g,\"param\":%.6g},\"tolerance\":{\"loss\":%g,\"grad\":%g,"
				       "\"param\":%g},\"noise_driven_params\":%zu,\"routing_"
				       "decisions\":%zu,\"routing_flips\":%zu,\"passed\":%s},",
				       v.loss_err, v.grad_err, v.param_err, v.loss_abs, v.grad_abs,
				       v.param_abs, v.loss_tol, v.grad_tol, v.param_tol,
				       v.noise_params, v.routes, v.route_flips,
				       v.passed ? "true" : "false");
			printf("\"time\":{\"step_time_s\":%.9g,\"compute_s\":%.9g,\"comm_s\":%.9g,"
			       "\"exposed_comm_s\":%.9g,\"bubble_fraction\":%.6g,\"mfu\":%.6g},",
			       (double)step / 1e9, (double)comp / 1e9, (double)comm / 1e9,
			       (double)exposed / 1e9, report_bubble_fraction(cfg, &par, step), mfu);
			if (cfg->mesh.size[MESH_PP] > 1)
				report_pipeline_json(stdout, cl, cfg, &par);
			report_memory_json(stdout, cl, ndev);
			printf(",");
			report_comm_json(stdout, cl);
			printf(",\"wall_s\":%.6g}\n", (double)emu_cluster_wall_ns(cl) / 1e9);
		} else {
			printf("# step time %.3f ms virtual: compute %.3f ms; communication %.3f "
			       "ms; "
			       "compute stream idle %.3f ms (exposed communication and waiting for "
			       "peers); MFU %.1f%% over %d GPUs\n",
			       (double)step / 1e6, (double)comp / 1e6, (double)comm / 1e6,
			       (double)exposed / 1e6, 100 * mfu, ndev);
			if (cfg->mesh.size[MESH_PP] > 1)
				report_pipeline_table(stdout, cl, cfg, &par, step);
			report_memory_table(stdout, cl, ndev);
			report_comm_table(stdout, cl);
			if (verify) {
				char gname[48], pname[48];

				printf("# verify against the serial reference (1 GPU, same seed "
				       "and data):\n");
				for (int s = 0; s < cfg->steps; s++)
					printf("#   step %3d  loss %.7f  reference %.7f\n", s + 1,
					       (double)par.loss[s], (double)ref.loss[s]);
				gpt_tensor_name(&cfg->model, v.grad_tensor, gname, sizeof gname);
				gpt_tensor_name(&cfg->model, v.param_tensor, pname, sizeof pname);
				printf("#   worst loss       %.3g (step %d), tolerance %g; largest "
				       "absolute error %.3g\n",
				       v.loss_err, v.loss_step + 1, v.loss_tol, v.loss_abs);
				printf("#   worst gradient   %.3g (%s, first step), tolerance %g; "
				       "largest absolute error %.3g\n",
				       v.grad_err, gname, v.grad_tol, v.grad_abs);
				printf("#   worst parameter  %.3g (%s, after step %d), tolerance "
				       "%g; largest absolute error %.3g\n",
				       v.param_err, pname, cfg->steps, v.param_tol, v.param_abs);
				printf("#   %zu parameter entries with a gradient zero to rounding "
				       "(the key biases among them) left out of the parameter "
				       "check\n",
				       v.noise_params);
				if (v.routes)
					printf("#   %zu of %zu MoE routing decisions differ from "
					       "the "
					       "reference's\n",
					       v.route_flips, v.routes);
				if (v.route_flips)
					printf("#   routing flip: the first at step %d, layer %d, "
					       "token "
					       "%d of its micro-batch. Rounding turned a top-k or "
					       "capacity decision; differences that follow come "
					       "from "
					       "that decision, not from the strategy. Another "
					       "--seed "
					       "gives a clean comparison.\n",
					       v.flip_step + 1, v.flip_layer, v.flip_token);
				printf("verify: %s\n", v.passed        ? "PASSED"
						       : v.route_flips ? "FAILED (routing flip)"
								       : "FAILED");
			}
		}
		if (!v.passed && verify)
			rc = 1;
	}
	if (verify)
		run_free(&ref);
	if (trace_path && trace_write_json(cl, trace_path))
		fprintf(stderr, "pemu: cannot write trace '%s'\n", trace_path);
	if (timeline)
		trace_timeline(cl, json ? stderr : stdout, 100, 16);
	if (timeline && cfg->mesh.size[MESH_PP] > 1)
		sched_draw(&par.sched, par.span, 100, json ? stderr : stdout);
out:
	run_free(&par);
	emu_cluster_free(cl);
	if (one)
		emu_cluster_free(one);
	return rc ? 1 : 0;
}
