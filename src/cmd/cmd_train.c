/* pemu train: the serial reference, the whole model on one virtual GPU. Prints the loss
 * per step with the virtual step time and MFU, memory by category at the end, and with
 * --sample N the text the model writes after training. --dry-run does the same
 * accounting with no data, for any model size. The options are cli_model's; the
 * configuration is checked by run/cfg.h like every other command's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "cmd/cli.h"
#include "cmd/cli_model.h"
#include "cmd/cmd.h"
#include "cmd/report.h"
#include "gpt.h"
#include "run/cfg.h"
#include "run/ckpt.h"
#include "run/run.h"
#include "team.h"
#include "trace.h"
#include "units.h"

struct train {
	const struct run_cfg *cfg; /* finished by run_cfg_finish */
	int sample;                /* bytes to generate after training */
	int json;                  /* --json: no progress lines, one object at the end */
	/* results, written by the device */
	float *loss;       /* [steps] */
	int64_t *step_ns;  /* [steps] virtual time of each step */
	int64_t *wall_ns;  /* [steps] */
	double flops_step; /* FLOPs charged by the last step */
	int steps_done;    /* the steps finished (of a failed run, before the failure) */
	struct ckpt *ck;   /* --save: the checkpoint the device fills, or NULL */
	char *sample_text; /* [sample + 1] or NULL; freed by train() */
};

static void usage(FILE *f)
{
	fprintf(f, "usage: pemu train [options]\n\n"
		   "Trains a GPT on one virtual GPU: the serial reference that every parallel\n"
		   "strategy is checked against. Prints the loss per step, the virtual step "
		   "time\n"
		   "and MFU on the emulated GPU, and memory by category. Its kernels share\n"
		   "--host-threads N host threads (default: OPENBLAS_NUM_THREADS if set, else\n"
		   "one a core), and give the same numbers on any count.\n\n"
		   "  pemu train --model small --steps 300 --sample 200\n"
		   "  pemu train --model gpt3-175b --dry-run --mem-cap 4TB\n\n");
	fprintf(f, "Model and training options (Megatron-LM's names):\n");
	cli_print_opts(f, cli_model_opts);
	fprintf(f,
		"\nCluster options (one GPU of the preset; the links' options are pemu run's):\n");
	cli_print_opts_but(f, cli_cluster_opts, cli_link_opt);
	cli_print_exit_codes(f, "the run failed (out of memory, the virtual clock's horizon, a "
				"diverged loss)");
}

/* The progress line of step s (0-based). */
static void print_step(struct emu_dev *d, const struct train *t, int s, double loss)
{
	const struct run_cfg *cfg = t->cfg;
	double peak = emu_dev_topo(d)->gpu.peak_flops;
	char lbuf[16];

	if (emu_dev_dry_run(d))
		snprintf(lbuf, sizeof lbuf, "    n/a");
	else
		snprintf(lbuf, sizeof lbuf, "%7.4f", loss);
	printf("step %5d/%d | loss %s | lr %.2e | %9.3f ms/step virtual | MFU %5.1f%% | %8.1f ms "
	       "wall\n",
	       cfg->step0 + s + 1, cfg->step0 + cfg->steps, lbuf,
	       (double)optim_lr(&cfg->opt, cfg->step0 + s), (double)t->step_ns[s] / 1e6,
	       100 * gpt_model_flops(&cfg->model, cfg->gbs) / ((double)t->step_ns[s] / 1e9 * peak),
	       (double)t->wall_ns[s] / 1e6);
	fflush(stdout);
}

static int train_device(struct emu_dev *d, void *arg)
{
	struct train *t = arg;
	const struct run_cfg *cfg = t->cfg;
	int accum = cfg->gbs / cfg->mbs, BT = cfg->mbs * cfg->model.seq_len, rc;
	int *tok = calloc((size_t)BT, sizeof *tok), *tgt = calloc((size_t)BT, sizeof *tgt);
	struct kctx k;
	struct gpt m;

	if (!tok || !tgt)
		return emu_dev_fail(d, "out of host memory for a batch");
	kctx_init(&k, d, cfg->prec);
	k.gb = (int)run_grad_bytes(cfg);
	rc = gpt_init(&m, &k, &cfg->model, cfg->mbs, cfg->seed);
	if (!rc && cfg->resume && !emu_dev_dry_run(d))
		ckpt_to_gpt(cfg->resume, &m);
	for (int s = 0; !rc && s < cfg->steps; s++) {
		int64_t t0 = emu_now(d), w0 = emu_wall_ns();
		double f0 = emu_flops(d), loss = 0;
		int it = cfg->step0 + s + 1; /* the iteration, from 1 */

		gpt_zero_grad(&m);
		for (int a = 0; a < accum; a++) {
			if (!emu_dev_dry_run(d))
				data_batch(cfg->data, cfg->seed, (uint64_t)(it - 1) * accum + a,
					   cfg->mbs, cfg->model.seq_len, tok, tgt);
			m.seq0 = ((uint64_t)(it - 1) * accum + a) * cfg->mbs; /* (dropout's keys) */
			loss += gpt_forward(&m, tok, tgt) / accum;
			gpt_backward(&m, 1.0f / accum);
		}
		if (!isfinite(loss)) {
			rc = emu_dev_fail_as(d, RUN_DIVERGED,
					     "the loss is %g at step %d: training diverged (try "
					     "a lower --lr or --clip-grad)",
					     loss, it);
			break;
		}
		gpt_update(&m, &cfg->opt, it);
		if ((rc = emu_dev_check(d))) /* (the clock's horizon, say) */
			break;
		t->loss[s] = (float)loss;
		t->step_ns[s] = emu_now(d) - t0;
		t->wall_ns[s] = emu_wall_ns() - w0;
		t->flops_step = emu_flops(d) - f0;
		t->steps_done = s + 1;
		if (cfg->log_every && (s == 0 || s == cfg->steps - 1 || it % cfg->log_every == 0))
			print_step(d, t, s, loss);
		if (t->ck && ckpt_saves_at(cfg, it)) {
			ckpt_from_gpt(t->ck, &m);
			rc = ckpt_save_at(d, cfg, t->ck, it);
		}
	}
	if (!rc && t->sample > 0 && !emu_dev_dry_run(d)) {
		int prompt = '\n';

		t->sample_text = calloc((size_t)t->sample + 1, 1);
		gpt_sample(&m, &prompt, 1, t->sample, cfg->seed, t->sample_text);
	}
	free(tok);
	free(tgt);
	gpt_free(&m);
	return rc;
}

/* The sample as text, bytes that are not printable ASCII (control codes a terminal would
 * act on, halves of UTF-8) written as \xNN. */
static void print_sample(FILE *f, const char *text, int n)
{
	fprintf(f, "# sample (%d bytes after a newline; unprintable bytes and \\ as \\xNN):\n", n);
	for (int i = 0; i < n; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c == '\n' || (c >= 0x20 && c < 0x7f && c != '\\')) /* (a backslash too) */
			fputc(c, f);
		else
			fprintf(f, "\\x%02x", c);
	}
	fputc('\n', f);
}

/* The same as a JSON string: every byte, NUL included; bytes outside printable ASCII as
 * \u00NN (the byte as a code point), so the JSON stays UTF-8. */
static void json_sample(FILE *f, const char *text, int n)
{
	fprintf(f, ",\"sample\":\"");
	for (int i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)text[i];

		if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fprintf(f, "\"");
}

static void print_header(const struct run_cfg *cfg, const struct emu_config *ecfg)
{
	const struct gpt_config *g = &cfg->model;
	size_t nparams = gpt_num_params(g);
	char pb[32];

	printf("# pemu train: %s, %zu parameters (%.3g B), %d layers, hidden %d, %d heads, seq "
	       "%d, vocab %d\n",
	       cfg->preset->name, nparams, (double)nparams / 1e9, g->num_layers, g->hidden,
	       g->heads, g->seq_len, g->vocab);
	report_vocab_padding(stdout, cfg);
	if (g->num_experts)
		printf("# MoE: %d experts, top-%d, in every layer l with (l + 1) %% %d == 0, "
		       "capacity factor %g, aux loss coefficient %g\n",
		       g->num_experts, g->moe_top_k, g->moe_every, (double)g->capacity_factor,
		       (double)g->aux_coeff);
	units_fmt_bytes(pb, sizeof pb, ecfg->mem_cap ? ecfg->mem_cap : ecfg->topo.gpu.hbm_bytes);
	printf("# one %s (%.0f TFLOP/s, %s), %s, %s accounting; micro-batch %d, global batch %d, "
	       "%d step%s, seed %" PRIu64 "\n",
	       ecfg->topo.gpu.name, ecfg->topo.gpu.peak_flops / 1e12, pb,
	       ecfg->dry_run ? "dry-run (no data)" : "execute",
	       cfg->prec == PREC_BF16 ? "bf16" : "fp32", cfg->mbs, cfg->gbs, cfg->steps,
	       cfg->steps == 1 ? "" : "s", cfg->seed);
	if (cfg->data)
		printf("# data: %s, %zu bytes, unigram entropy %.3f nats\n", cfg->data->name,
		       cfg->data->n, data_unigram_entropy(cfg->data));
	report_checkpoint_line(stdout, cfg);
	report_dropout_line(stdout, cfg);
	fflush(stdout);
}

/* The field "steps": the first n of t's, each its iteration, loss (null in a dry-run: it
 * has none) and virtual time. */
static void json_steps(const struct train *t, const struct emu_config *ecfg, int n)
{
	printf("\"steps\":[");
	for (int s = 0; s < n; s++)
		printf("%s{\"step\":%d,\"loss\":%s,\"step_time_s\":%.9g}", s ? "," : "",
		       t->cfg->step0 + s + 1, ecfg->dry_run ? "null" : report_jnum(t->loss[s], 9),
		       (double)t->step_ns[s] / 1e9);
	printf("]");
}

/* The report of a finished run: one JSON object, or the closing "# " lines. */
static void print_report(const struct train *t, struct emu_cluster *cl,
			 const struct emu_config *ecfg)
{
	const struct run_cfg *cfg = t->cfg;
	struct emu_dev *d = emu_cluster_dev(cl, 0);
	int64_t step = t->step_ns[cfg->steps - 1];
	double mflops = gpt_model_flops(&cfg->model, cfg->gbs),
	       mfu = mflops / ((double)step / 1e9 * ecfg->topo.gpu.peak_flops);

	if (!t->json) {
		printf("# step time %.3f ms virtual (FLOPs charged %.4g, Megatron's count %.4g), "
		       "MFU %.1f%%; wall %.2f s in all\n",
		       (double)step / 1e6, t->flops_step, mflops, 100 * mfu,
		       (double)emu_cluster_wall_ns(cl) / 1e9);
		report_memory_line(stdout, d);
		if (t->sample_text)
			print_sample(stdout, t->sample_text, t->sample);
		return;
	}
	printf("{\"command\":\"train\",");
	report_config_json_train(stdout, cfg, ecfg);
	printf(",");
	json_steps(t, ecfg, cfg->steps);
	printf(",\"time\":{\"step_time_s\":%.9g,\"compute_s\":%.9g,\"comm_s\":0,\"exposed_comm_"
	       "s\":0,\"bubble_fraction\":0,\"mfu\":%.6g,\"flops_per_step\":%.6g,\"model_flops_"
	       "per_step\":%.6g},",
	       (double)step / 1e9, (double)step / 1e9, mfu, t->flops_step, mflops);
	report_memory_json(stdout, cl, 1);
	printf(",\"comm\":{},\"wall_s\":%.6g", (double)emu_cluster_wall_ns(cl) / 1e9);
	if (t->sample_text)
		json_sample(stdout, t->sample_text, t->sample);
	printf("}\n");
}

/* A failed run's report as one JSON object, as pemu run's: the configuration, the steps
 * finished before the failure, the error (its kind and the cluster's report) and the
 * memory up to the failure. */
static void json_failure(const struct train *t, const struct emu_config *ecfg,
			 struct emu_cluster *cl)
{
	printf("{\"command\":\"train\",");
	report_config_json_train(stdout, t->cfg, ecfg);
	printf(",");
	json_steps(t, ecfg, t->steps_done);
	printf(",\"error\":{\"kind\":\"%s\",\"report\":", emu_cluster_err_kind(cl));
	report_json_string(stdout, emu_cluster_report(cl));
	printf("},");
	report_memory_json(stdout, cl, 1);
	printf(",\"comm\":{},\"wall_s\":%.6g}\n", (double)emu_cluster_wall_ns(cl) / 1e9);
}

/* Trains cfg on one device of cc's cluster and prints the report; the exit code. */
static int train(const struct run_cfg *cfg, const struct cli_cluster *cc, int sample)
{
	struct train t = {.cfg = cfg, .sample = sample, .json = cc->json};
	struct ckpt ck;
	struct emu_cluster *cl;
	int rc;

	t.loss = calloc((size_t)cfg->steps, sizeof *t.loss);
	t.step_ns = calloc((size_t)cfg->steps, sizeof *t.step_ns);
	t.wall_ns = calloc((size_t)cfg->steps, sizeof *t.wall_ns);
	if (!t.loss || !t.step_ns || !t.wall_ns)
		emu_die("out of host memory");
	if (!t.json)
		print_header(cfg, &cc->cfg);
	cl = emu_cluster_new(&cc->cfg);
	if (cfg->save) {
		ckpt_alloc(&ck, cfg, 0);
		t.ck = &ck;
	}
	/* One device: its kernels share the host's cores (models/team.h, cmd_team_threads;
	 * pemu.c keeps OpenBLAS to one thread). */
	if (team_start(cmd_team_threads(&cc->cfg, 1)))
		fprintf(stderr, "pemu train: %d of %d host threads started\n", team_threads(),
			cmd_team_threads(&cc->cfg, 1));
	rc = emu_cluster_run(cl, train_device, &t);
	team_stop();
	if (rc) {
		fflush(stdout);
		fprintf(stderr, "pemu train: the run failed (%s):\n%s\n", emu_cluster_err_kind(cl),
			emu_cluster_report(cl));
		if (t.json) /* the report all the same, its error beside the configuration */
			json_failure(&t, &cc->cfg, cl);
		else
			report_memory_line(stderr, emu_cluster_dev(cl, 0));
	} else {
		print_report(&t, cl, &cc->cfg);
		cli_write_trace(cc, cl, "pemu train");
		if (cc->timeline)
			trace_timeline(cl, t.json ? stderr : stdout, 100, 1);
	}
	emu_cluster_free(cl);
	if (t.ck)
		ckpt_free(&ck);
	free(t.loss);
	free(t.step_ns);
	free(t.wall_ns);
	free(t.sample_text);
	return rc ? 1 : 0;
}

int cmd_train(int argc, char **argv)
{
	struct cli c = {.prog = "pemu train",
			.argc = argc,
			.argv = argv,
			.i = 1,
			.opts = {cli_model_opts, cli_cluster_opts, NULL}};
	struct run_cfg cfg;
	struct cli_model mo;
	struct cli_cluster cc;
	const char *v;
	char err[512];
	int id, rc;

	run_cfg_init(&cfg);
	cli_model_init(&mo);
	cli_cluster_init(&cc);
	while ((id = cli_next(&c, &v))) {
		if (cli_link_opt(id))
			cli_fail(&c,
				 "--%s: pemu train runs one GPU, which has no links (pemu run "
				 "takes it)",
				 cli_opt_name(cli_cluster_opts, id));
		if (cli_cluster_opt(&cc, id, v) || cli_model_opt(&mo, &cfg, &c, id, v))
			continue;
		if (id == CLI_MODEL_HELP) {
			usage(stdout);
			return 0;
		}
	}
	cli_model_finish(&mo, &cfg, &c, cc.cfg.dry_run);
	cli_model_checkpoint(&mo, &cfg, &c, 1);
	if (cc.json)
		cfg.log_every = 0;
	if (run_cfg_finish(&cfg, 1, err, sizeof err))
		cli_fail(&c, "%s", err);
	cli_model_checkpoint_finish(&mo, &cfg, &c);
	cli_cluster_finish(&cc, &c, 1);
	if (cc.nfail)
		cli_fail(&c, "--inject-fault fail: pemu train runs the serial model on one device; "
			     "a device's failure is for pemu run and verify");
	if (!cc.cfg.dry_run) {
		char fails[256];
		uint64_t largest,
			need = run_host_need(&cfg, &cc.cfg, 0, 1, &largest, fails, sizeof fails);

		if (cfg.save) /* (the full tensors the device saves through) */
			need += ckpt_bytes(&cfg.model);

		cli_host_check(&c, need, largest, fails);
	}
	cli_parsed();
	cli_model_load(&mo, &cfg, &c);
	rc = train(&cfg, &cc, mo.sample);
	cli_model_free(&mo);
	return rc;
}
