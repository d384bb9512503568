/* report: the report pieces more than one command prints; see report.h. */
#include "cmd/report.h"

#include <inttypes.h>
#include <math.h>

#include "coll.h"
#include "mem.h"
#include "run/ckpt.h"
#include "topo.h"
#include "units.h"

/* ------------------------------------------------------------------------------------ */
/* The cluster and the configuration                                                    */

void report_cluster_line(FILE *f, const struct emu_config *cfg)
{
	const struct topo *t = &cfg->topo;
	char cap[32], ib[32], eb[32], il[32], el[32];

	units_fmt_bytes(cap, sizeof cap, cfg->mem_cap ? cfg->mem_cap : t->gpu.hbm_bytes);
	units_fmt_bw(ib, sizeof ib, t->link[TOPO_LINK_INTRA].bw_bytes);
	units_fmt_bw(eb, sizeof eb, t->link[TOPO_LINK_INTER].bw_bytes);
	units_fmt_time(il, sizeof il, t->link[TOPO_LINK_INTRA].lat_ns);
	units_fmt_time(el, sizeof el, t->link[TOPO_LINK_INTER].lat_ns);
	fprintf(f,
		"%s: %d node%s x %d %s (%.0f TFLOP/s, %s cap); in a node %s %s, %s; between nodes "
		"%s %s, %s",
		t->name, t->nodes, t->nodes == 1 ? "" : "s", t->gpus_per_node, t->gpu.name,
		t->gpu.peak_flops / 1e12, cap, t->link[TOPO_LINK_INTRA].name, ib, il,
		t->link[TOPO_LINK_INTER].name, eb, el);
	if (t->nodes_per_dc > 0) { /* (the link between data centres, where there are some) */
		char db[32], dl[32];

		units_fmt_bw(db, sizeof db, t->link[TOPO_LINK_DC].bw_bytes);
		units_fmt_time(dl, sizeof dl, t->link[TOPO_LINK_DC].lat_ns);
		fprintf(f, "; between data centres of %d node%s %s %s, %s", t->nodes_per_dc,
			t->nodes_per_dc == 1 ? "" : "s", t->link[TOPO_LINK_DC].name, db, dl);
	}
	if (cfg->cost == EMU_COST_CALIBRATED)
		fprintf(f, "; calibrated cost model%s",
			t->link[TOPO_LINK_INTRA].nvls_eff > 0 ? ", NVLink SHARP" : "");
	else
		fprintf(f, "; roofline cost model");
}

static void json_link(FILE *f, const char *key, const struct topo_link *l)
{
	fprintf(f, "\"%s\":{\"name\":\"%s\",\"bw_bytes_per_s\":%llu,\"lat_ns\":%lld}", key, l->name,
		(unsigned long long)l->bw_bytes, (long long)l->lat_ns);
}

void report_cluster_json(FILE *f, const struct emu_config *cfg)
{
	const struct topo *t = &cfg->topo;

	fprintf(f,
		"{\"preset\":\"%s\",\"nodes\":%d,\"gpus_per_node\":%d,\"devices\":%d,\"gpu\":\"%"
		"s\",\"peak_flops\":%.6g,\"efficiency\":%g,\"hbm_bw\":%.6g,\"mem_cap\":%llu,",
		t->name, t->nodes, t->gpus_per_node, cfg->ndev, t->gpu.name, t->gpu.peak_flops,
		t->gpu.efficiency, t->gpu.hbm_bw,
		(unsigned long long)(cfg->mem_cap ? cfg->mem_cap : t->gpu.hbm_bytes));
	json_link(f, "intra", &t->link[TOPO_LINK_INTRA]);
	fputc(',', f);
	json_link(f, "inter", &t->link[TOPO_LINK_INTER]);
	fprintf(f, ",\"nodes_per_dc\":%d,", t->nodes_per_dc);
	if (t->nodes_per_dc > 0) {
		json_link(f, "dc", &t->link[TOPO_LINK_DC]);
		fputc(',', f);
	}
	fprintf(f, "\"dry_run\":%s,\"pace\":%g,\"cost_model\":\"%s\"",
		cfg->dry_run ? "true" : "false", cfg->pace,
		cfg->cost == EMU_COST_CALIBRATED ? "calibrated" : "roofline");
	if (cfg->cost == EMU_COST_CALIBRATED) /* NVLink SHARP in a node (--no-nvls: off) */
		fprintf(f, ",\"nvls\":%s",
			t->link[TOPO_LINK_INTRA].nvls_eff > 0 ? "true" : "false");
	fputc('}', f);
}

void report_vocab_padding(FILE *f, const struct run_cfg *cfg)
{
	if (cfg->model.vocab == cfg->vocab_orig)
		return;
	fprintf(f,
		"# vocabulary %d padded to %d, a multiple of %lld (Megatron's "
		"--make-vocab-size-divisible-by)\n",
		cfg->vocab_orig, cfg->model.vocab,
		(long long)cfg->vocab_div * cfg->mesh.size[MESH_TP]);
}

void report_checkpoint_line(FILE *f, const struct run_cfg *cfg)
{
	if (cfg->resume)
		fprintf(f,
			"# from the checkpoint of iteration %d (saved under %s): iterations %d to "
			"%d\n",
			cfg->step0, cfg->resume->layout, cfg->step0 + 1, cfg->step0 + cfg->steps);
	if (cfg->save && cfg->save_interval)
		fprintf(f, "# checkpoints into %s every %d iterations and at the end\n", cfg->save,
			cfg->save_interval);
	else if (cfg->save)
		fprintf(f, "# a checkpoint into %s at the end\n", cfg->save);
}

void report_dropout_line(FILE *f, const struct run_cfg *cfg)
{
	if (cfg->model.hidden_dropout > 0)
		fprintf(f,
			"# hidden dropout %g on the embeddings and on each branch before its "
			"residual "
			"add; every element's mask from (seed, layer, site, token, column), the "
			"same in "
			"every layout\n",
			(double)cfg->model.hidden_dropout);
	if (cfg->model.attention_dropout > 0)
		fprintf(f,
			"# attention dropout %g on the attention probabilities; every "
			"probability's mask from (seed, layer, sequence, global head, query and "
			"key "
			"positions), the same in every layout\n",
			(double)cfg->model.attention_dropout);
}

/* The checkpoints' and the dropout's fields of "config", only when used. */
static void checkpoint_json(FILE *f, const struct run_cfg *cfg)
{
	if (cfg->resume)
		fprintf(f, ",\"start_iteration\":%d,\"loaded_layout\":", cfg->step0);
	if (cfg->resume)
		report_json_string(f, cfg->resume->layout);
	if (cfg->save) {
		fprintf(f, ",\"save\":");
		report_json_string(f, cfg->save);
		fprintf(f, ",\"save_interval\":%d", cfg->save_interval);
	}
	if (cfg->model.hidden_dropout > 0)
		fprintf(f, ",\"hidden_dropout\":%g", (double)cfg->model.hidden_dropout);
	if (cfg->model.attention_dropout > 0)
		fprintf(f, ",\"attention_dropout\":%g", (double)cfg->model.attention_dropout);
}

static const char *model_name(const struct run_cfg *cfg)
{
	return cfg->preset ? cfg->preset->name : "custom";
}

static const char *prec_name(enum prec p)
{
	return p == PREC_BF16 ? "bf16" : "fp32";
}

/* --tp-comm-overlap and each GEMM's method, TE's defaults or --tp-comm-overlap-cfg's */
static void tpo_json(FILE *f, const struct run_cfg *cfg)
{
	struct par_tpo_cfg def;
	const struct par_tpo_cfg *t = cfg->tpo_cfg_set ? &cfg->tpo_cfg : &def;

	par_tpo_defaults(&def);
	fprintf(f, ",\"tp_comm_overlap\":true,\"tp_comm_overlap_cfg\":{");
	for (int g = 0; g < PAR_TPO_NGEMMS; g++) {
		const struct par_tpo_ub *u = &t->g[g];

		fprintf(f, "%s\"%s\":{\"method\":\"%s\",\"num_sm\":%d,", g ? "," : "",
			par_tpo_names[g], par_tpo_methods[u->method], u->num_sm);
		if (u->method == PAR_TPO_PIPELINE) /* (a ring's steps are tp's) */
			fprintf(f, "\"num_splits\":%d,", u->num_splits);
		fprintf(f, "\"set_sm_margin\":%s}", u->set_sm_margin ? "true" : "false");
	}
	fputc('}', f);
}

void report_config_json_train(FILE *f, const struct run_cfg *cfg, const struct emu_config *ecfg)
{
	const struct gpt_config *m = &cfg->model;

	fprintf(f,
		"\"config\":{\"model\":\"%s\",\"num_layers\":%d,\"hidden_size\":%d,\"num_"
		"attention_heads\":%d,\"seq_length\":%d,\"ffn_hidden_size\":%d,\"vocab_size\":%d,"
		"\"parameters\":%zu,\"micro_batch_size\":%d,\"global_batch_size\":%d,\"steps\":%d,"
		"\"seed\":%" PRIu64 ",\"precision\":\"%s\",\"cluster\":",
		model_name(cfg), m->num_layers, m->hidden, m->heads, m->seq_len, m->ffn, m->vocab,
		gpt_num_params(m), cfg->mbs, cfg->gbs, cfg->steps, cfg->seed, prec_name(cfg->prec));
	report_cluster_json(f, ecfg);
	checkpoint_json(f, cfg);
	if (cfg->fp32_grads) /* only when asked for, as pemu run's */
		fprintf(f, ",\"accumulate_allreduce_grads_in_fp32\":true");
	fputc('}', f);
}

const char *report_jnum(double x, int prec)
{
	static char buf[16][32];
	static int k;

	k = (k + 1) % 16;
	if (!isfinite(x))
		return "null";
	snprintf(buf[k], sizeof buf[k], "%.*g", prec, x);
	return buf[k];
}

void report_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void report_config_json_run(FILE *f, const struct run_cfg *cfg, const struct emu_config *ecfg)
{
	static const char *const recompute_names[] = {"none", "selective", "full", "oases"};
	const int *size = cfg->mesh.size;
	/* the first chunk's buckets, in bytes at the weights' width and in parameters; null
	 * for one bucket a chunk (ZeRO 0-1 without an overlap) or ZeRO-3's units */
	uint64_t b = run_bucket_params(cfg);
	char bytes[32] = "null", params[32] = "null";

	if (b) {
		snprintf(bytes, sizeof bytes, "%" PRIu64,
			 b * tensor_elem_bytes(cfg->prec, MEM_PARAM));
		snprintf(params, sizeof params, "%" PRIu64, b);
	}

	fprintf(f,
		"\"config\":{\"model\":\"%s\",\"parameters\":%zu,\"dp\":%d,\"tp\":%d,\"pp\":%d,"
		"\"cp\":%d,\"ep\":%d,\"zero_stage\":%d,\"micro_batch_size\":%d,\"global_batch_"
		"size\":"
		"%d,\"steps\":%d,\"seed\":%" PRIu64 ",\"precision\":\"%s\",\"recompute\":\"%s\","
		"\"tp_overlap\":\"%s\",\"schedule\":\"%s\",\"bucket_size\":%s,"
		"\"ddp_bucket_size\":%s,\"overlap_grad_reduce\":%s,\"cluster\":",
		model_name(cfg), gpt_num_params(&cfg->model), size[MESH_DP], size[MESH_TP],
		size[MESH_PP], size[MESH_CP], cfg->ep > 1 ? cfg->ep : 1, cfg->zero, cfg->mbs,
		cfg->gbs, cfg->steps, cfg->seed, prec_name(cfg->prec),
		recompute_names[cfg->recompute], cfg->tp_overlap ? "oases" : "none",
		size[MESH_PP] > 1 ? sched_name(cfg->schedule) : "none", bytes, params,
		run_overlaps_grads(cfg) ? "true" : "false");
	report_cluster_json(f, ecfg);
	checkpoint_json(f, cfg);
	if (cfg->overlap_param_gather) /* only when asked for */
		fprintf(f, ",\"overlap_param_gather\":true");
	if (cfg->tp_sync_dgrad) /* the same */
		fprintf(f, ",\"async_tensor_model_parallel_allreduce\":false");
	if (cfg->p2p_sync) /* the same */
		fprintf(f, ",\"p2p_sync\":true");
	if (cfg->pp_scatter) /* the same */
		fprintf(f, ",\"scatter_gather_tensors_in_pipeline\":true");
	if (cfg->tp_comm_overlap)
		tpo_json(f, cfg);
	if (cfg->fp32_grads) /* only when asked for */
		fprintf(f, ",\"accumulate_allreduce_grads_in_fp32\":true");
	if (cfg->ce != CE_UNFUSED) /* (the unfused one is Megatron's default) */
		fprintf(f,
			",\"cross_entropy_loss_fusion\":true,\"cross_entropy_fusion_impl\":\"%s\"",
			cfg->ce == CE_TE ? "te" : "native");
	if (size[MESH_CP] > 1) /* context parallelism's attention, only when used */
		fprintf(f, ",\"cp_comm_type\":\"%s\",\"cp_layout\":\"%s\"",
			cfg->cp_comm == PAR_CP_A2A          ? "a2a"
			: cfg->cp_comm == PAR_CP_ALL_GATHER ? "all_gather"
							    : "p2p",
			cfg->cp_contiguous ? "contiguous" : "balanced");
	if (cfg->ep > 1) /* expert parallelism's dispatcher and grid, only when used */
		fprintf(f,
			",\"moe_token_dispatcher_type\":\"%s\",\"expert_tensor_parallel_size\":%d,"
			"\"experts_over\":\"%s\"",
			cfg->ep_dispatch == PAR_EP_ALLGATHER ? "allgather" : "alltoall",
			run_ep_mode(cfg) == RUN_EP_DP ? size[MESH_TP] : 1,
			run_ep_mode(cfg) == RUN_EP_TP   ? "tp"
			: run_ep_mode(cfg) == RUN_EP_DP ? "dp_cp"
							: "tp_cp_dp");
	if (cfg->tpf_layers) /* Oases's mixed degrees, only when used */
		fprintf(f, ",\"tp_first\":{\"layers\":%d,\"tp\":%d}", cfg->tpf_layers, cfg->tpf);
	fputc('}', f);
}

/* ------------------------------------------------------------------------------------ */
/* Memory                                                                               */

void report_memory_line(FILE *f, struct emu_dev *d)
{
	char b[32];

	units_fmt_bytes(b, sizeof b, mem_peak_total(d));
	fprintf(f, "memory (peak) %s of ", b);
	units_fmt_bytes(b, sizeof b, mem_cap_bytes(d));
	fprintf(f, "%s:", b);
	for (int c = 0; c < MEM_NCAT; c++) {
		units_fmt_bytes(b, sizeof b, mem_peak_bytes(d, c));
		fprintf(f, " %s %s%s", mem_cat_name(c), b, c < MEM_NCAT - 1 ? "," : "\n");
	}
}

void report_memory_table(FILE *f, struct emu_cluster *cl, int ndev)
{
	char b[32];

	fprintf(f, "# memory per device (peak): %-8s", "total");
	for (int c = 0; c < MEM_NCAT; c++)
		fprintf(f, " %10s", mem_cat_name(c));
	fprintf(f, "\n");
	for (int i = 0; i < ndev; i++) {
		struct emu_dev *d = emu_cluster_dev(cl, i);

		if (ndev > 16 && i == 8) {
			fprintf(f, "#   ... %d more devices\n", ndev - 9);
			i = ndev - 1;
			d = emu_cluster_dev(cl, i);
		}
		units_fmt_bytes(b, sizeof b, mem_peak_total(d));
		fprintf(f, "#   device %-4d %18s", i, b);
		for (int c = 0; c < MEM_NCAT; c++) {
			units_fmt_bytes(b, sizeof b, mem_peak_bytes(d, c));
			fprintf(f, " %10s", b);
		}
		fprintf(f, "\n");
	}
}

void report_memory_json(FILE *f, struct emu_cluster *cl, int ndev)
{
	fprintf(f, "\"memory\":[");
	for (int i = 0; i < ndev; i++) {
		struct emu_dev *d = emu_cluster_dev(cl, i);

		fprintf(f,
			"%s{\"device\":%d,\"cap\":%" PRIu64 ",\"peak\":%" PRIu64
			",\"by_category\":{",
			i ? "," : "", i, mem_cap_bytes(d), mem_peak_total(d));
		for (int c = 0; c < MEM_NCAT; c++)
			fprintf(f, "%s\"%s\":%" PRIu64, c ? "," : "", mem_cat_name(c),
				mem_peak_bytes(d, c));
		fprintf(f, "}}");
	}
	fprintf(f, "]");
}

/* ------------------------------------------------------------------------------------ */
/* Communication                                                                        */

static const char *const coll_names[] = {"all-reduce", "reduce-scatter", "all-gather",
					 "all-to-all", "all-to-all-v",   "broadcast",
					 "reduce",     "send",           "recv"};
#define NCOLL (int)(sizeof coll_names / sizeof coll_names[0])

int64_t report_comm_ns(const struct emu_dev *d)
{
	int64_t t = 0;

	for (int k = 0; k < NCOLL; k++) {
		struct coll_stats st;

		if (!coll_stats_get(d, coll_names[k], &st))
			t += st.time_ns;
	}
	return t;
}

/* The strategies' names for their tagged traffic (enum par_traffic). */
static const char *const traffic_names[PAR_NTRAFFIC] = {"other", "cp", "ep"};

static const char *traffic_label(int tag, const char *op)
{
	static char buf[64];

	snprintf(buf, sizeof buf, "%s %s", traffic_names[tag], op);
	return buf;
}

void report_comm_table(FILE *f, struct emu_cluster *cl)
{
	struct emu_dev *d = emu_cluster_dev(cl, 0);
	char b[32], t[32];

	fprintf(f, "# communication of device 0 over the run:\n");
	for (int k = 0; k < NCOLL; k++) {
		struct coll_stats st;

		if (coll_stats_get(d, coll_names[k], &st) || !st.calls)
			continue;
		units_fmt_bytes(b, sizeof b, st.bytes);
		units_fmt_time(t, sizeof t, st.time_ns);
		fprintf(f, "#   %-15s %6" PRIu64 " calls %12s %12s\n", coll_names[k], st.calls, b,
			t);
	}
	for (int tag = 1; tag < PAR_NTRAFFIC; tag++)
		for (int k = 0; k < NCOLL; k++) {
			struct coll_stats st;

			if (coll_stats_tag_get(d, tag, coll_names[k], &st) || !st.calls)
				continue;
			units_fmt_bytes(b, sizeof b, st.bytes);
			units_fmt_time(t, sizeof t, st.time_ns);
			fprintf(f, "#     of which %-25s %6" PRIu64 " calls %12s %12s\n",
				traffic_label(tag, coll_names[k]), st.calls, b, t);
		}
	units_fmt_bytes(b, sizeof b, coll_link_bytes(d, TOPO_LINK_INTRA));
	units_fmt_bytes(t, sizeof t, coll_link_bytes(d, TOPO_LINK_INTER));
	fprintf(f, "#   sent over links in a node %s, between nodes %s\n", b, t);
}

void report_moe_table(FILE *f, const struct run_cfg *cfg, const struct run_out *o)
{
	int E = cfg->model.num_experts;

	if (!o->moe_hist)
		return;
	fprintf(f, "# tokens each expert took over the run (dropped at its capacity):\n");
	for (int l = 0; l < cfg->model.num_layers; l++) {
		uint64_t all = 0, lost = 0;

		if (!gpt_layer_is_moe(&cfg->model, l))
			continue;
		fprintf(f, "#   layer %-3d", l);
		for (int e = 0; e < E; e++) {
			uint64_t d, k = run_moe_tokens(o, cfg, l, e, &d);

			fprintf(f, " %" PRIu64, k);
			if (d)
				fprintf(f, " (%" PRIu64 ")", d);
			all += k + d;
			lost += d;
		}
		fprintf(f, "; %.1f%% dropped\n", all ? 100.0 * (double)lost / (double)all : 0.0);
	}
}

void report_moe_json(FILE *f, const struct run_cfg *cfg, const struct run_out *o)
{
	int E = cfg->model.num_experts, first = 1;

	fprintf(f, "\"moe\":[");
	for (int l = 0; o->moe_hist && l < cfg->model.num_layers; l++) {
		uint64_t d;

		if (!gpt_layer_is_moe(&cfg->model, l))
			continue;
		fprintf(f, "%s{\"layer\":%d,\"tokens\":[", first ? "" : ",", l);
		for (int e = 0; e < E; e++)
			fprintf(f, "%s%" PRIu64, e ? "," : "", run_moe_tokens(o, cfg, l, e, &d));
		fprintf(f, "],\"dropped\":[");
		for (int e = 0; e < E; e++) {
			run_moe_tokens(o, cfg, l, e, &d);
			fprintf(f, "%s%" PRIu64, e ? "," : "", d);
		}
		fprintf(f, "]}");
		first = 0;
	}
	fprintf(f, "]");
}

void report_comm_json(FILE *f, struct emu_cluster *cl)
{
	struct emu_dev *d = emu_cluster_dev(cl, 0);
	int first = 1;

	fprintf(f, "\"comm\":{\"device\":0,\"by_collective\":{");
	for (int k = 0; k < NCOLL; k++) {
		struct coll_stats st;

		if (coll_stats_get(d, coll_names[k], &st) || !st.calls)
			continue;
		fprintf(f, "%s\"%s\":{\"calls\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"time_s\":%.9g}",
			first ? "" : ",", coll_names[k], st.calls, st.bytes,
			(double)st.time_ns / 1e9);
		first = 0;
	}
	fprintf(f, "},\"by_strategy\":{");
	for (int tag = 1, any = 0; tag < PAR_NTRAFFIC; tag++) {
		first = 1;
		for (int k = 0; k < NCOLL; k++) {
			struct coll_stats st;

			if (coll_stats_tag_get(d, tag, coll_names[k], &st) || !st.calls)
				continue;
			if (first)
				fprintf(f, "%s\"%s\":{", any++ ? "," : "", traffic_names[tag]);
			fprintf(f,
				"%s\"%s\":{\"calls\":%" PRIu64 ",\"bytes\":%" PRIu64
				",\"time_s\":%.9g}",
				first ? "" : ",", coll_names[k], st.calls, st.bytes,
				(double)st.time_ns / 1e9);
			first = 0;
		}
		if (!first)
			fputc('}', f);
	}
	fprintf(f,
		"},\"by_link\":{\"intra\":%" PRIu64 ",\"inter\":%" PRIu64 ",\"dc\":%" PRIu64 "}}",
		coll_link_bytes(d, TOPO_LINK_INTRA), coll_link_bytes(d, TOPO_LINK_INTER),
		coll_link_bytes(d, TOPO_LINK_DC));
}

/* ------------------------------------------------------------------------------------ */
/* The pipeline                                                                         */

/* The device of pipeline stage s with tensor- and data-parallel rank 0. */
static int stage_dev(const struct run_cfg *cfg, int s)
{
	int c[MESH_NDIM] = {0};

	c[MESH_PP] = s;
	return mesh_rank(&cfg->mesh, c);
}

double report_bubble_fraction(const struct run_cfg *cfg, const struct run_out *o, int64_t step)
{
	int64_t worst = 0;

	for (int s = 0; s < cfg->mesh.size[MESH_PP] && o->bubble_ns; s++)
		worst = o->bubble_ns[s] > worst ? o->bubble_ns[s] : worst;
	return step > 0 ? (double)worst / (double)step : 0;
}

void report_pipeline_table(FILE *f, struct emu_cluster *cl, const struct run_cfg *cfg,
			   const struct run_out *o, int64_t step)
{
	int pp = cfg->mesh.size[MESH_PP];
	char b[32], t[32];

	fprintf(f, "# pipeline %s, %d stages", sched_name(cfg->schedule), pp);
	if (o->sched.v > 1)
		fprintf(f, " x %d chunks", o->sched.v);
	fprintf(f,
		", %d micro-batches a step: bubble %.1f%% of the step (the largest stage's; "
		"idle between its first and last compute)\n",
		o->sched.m, 100 * report_bubble_fraction(cfg, o, step));
	for (int s = 0; s < pp; s++) {
		struct emu_dev *d = emu_cluster_dev(cl, stage_dev(cfg, s));

		units_fmt_time(t, sizeof t, o->bubble_ns[s]);
		units_fmt_bytes(b, sizeof b, mem_peak_bytes(d, MEM_ACT));
		fprintf(f, "#   stage %-3d bubble %10s   peak activations %10s (device %d)\n", s, t,
			b, stage_dev(cfg, s));
	}
}

void report_pipeline_json(FILE *f, struct emu_cluster *cl, const struct run_cfg *cfg,
			  const struct run_out *o)
{
	fprintf(f,
		"\"pipeline\":{\"schedule\":\"%s\",\"chunks\":%d,\"micro_batches\":%d,"
		"\"stages\":[",
		sched_name(cfg->schedule), o->sched.v, o->sched.m);
	for (int s = 0; s < cfg->mesh.size[MESH_PP]; s++)
		fprintf(f,
			"%s{\"stage\":%d,\"device\":%d,\"bubble_s\":%.9g,\"peak_activations\":"
			"%" PRIu64 ",\"peak_in_flight\":%g}",
			s ? "," : "", s, stage_dev(cfg, s), (double)o->bubble_ns[s] / 1e9,
			mem_peak_bytes(emu_cluster_dev(cl, stage_dev(cfg, s)), MEM_ACT),
			sched_peak_inflight(&o->sched, s));
	fprintf(f, "]},");
}
