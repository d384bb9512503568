/* pemu plan: a layout in words, and as the pemu run and Megatron-LM command lines that
 * run it, or why Megatron-LM has none (cmd/cmd_plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "cmd/cli_model.h"
#include "cmd/cli_par.h"
#include "cmd/cmd.h"
#include "cmd/cmd_plan.h"
#include "util.h"

/* ------------------------------------------------------------------------------------ */
/* A layout in words and as command lines                                               */

const char *const cmd_plan_recompute_name[] = {"none", "selective", "full", "oases"};
const char *const cmd_plan_cp_comm_name[] = {"p2p", "all_gather", "a2a"};

/* The expert tensor-parallel size cfg runs (Megatron's meaning: given explicitly). */
int cmd_plan_etp(const struct run_cfg *cfg)
{
	if (cfg->etp)
		return cfg->etp;
	return cfg->ep > 1 ? 1 : cfg->mesh.size[MESH_TP];
}

/* "dp16 tp8 pp8 1f1b mbs1 zero1 rc:full sp" */
void cmd_plan_layout(const struct run_cfg *cfg, char *b, size_t n)
{
	const int *m = cfg->mesh.size;
	struct emu_str s = {0};

	emu_str_addf(&s, "dp%d tp%d pp%d", m[MESH_DP], m[MESH_TP], m[MESH_PP]);
	if (m[MESH_CP] > 1)
		emu_str_addf(&s, " cp%d:%s", m[MESH_CP], cmd_plan_cp_comm_name[cfg->cp_comm]);
	if (cfg->ep > 1)
		emu_str_addf(&s, " ep%d etp%d", cfg->ep, cmd_plan_etp(cfg));
	if (m[MESH_PP] > 1)
		emu_str_addf(&s, " %s", sched_name(cfg->schedule));
	if (cfg->vpp > 1)
		emu_str_addf(&s, ":%d", cfg->vpp);
	emu_str_addf(&s, " mbs%d zero%d rc:%s", cfg->mbs, cfg->zero,
		     cmd_plan_recompute_name[cfg->recompute]);
	if (cfg->tp_overlap)
		emu_str_addf(&s, " oases-tp");
	if (cfg->tpf_layers)
		emu_str_addf(&s, " tp-first:%d:%d", cfg->tpf_layers, cfg->tpf);
	if (cfg->sp)
		emu_str_addf(&s, cfg->tp_comm_overlap ? " sp+tpo" : " sp");
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
				   CLI_TRACE,
				   CLI_TRACE_DEVICES,
				   CLI_MODEL_STEPS, /* (the line runs the one step ranked) */
				   CLI_PAR_TP_COMM_OVERLAP, /* (where the layout has sp) */
				   CLI_PAR_P2P_SYNC,        /* (where it runs 1f1b, interleaved) */
				   CLI_PAR_PP_SCATTER,      /* (where the layout has tp, not sp) */
				   CLI_PAR_TP_COMM_OVERLAP_CFG,
				   CLI_PAR_CE_FUSION, /* (from the configuration, both) */
				   CLI_PAR_CE_IMPL};

	if (id >= CLI_PLAN_OASES || cmd_plan_dim(id) >= 0)
		return 1;
	for (size_t k = 0; k < sizeof drop / sizeof *drop; k++)
		if (id == drop[k])
			return 1;
	return 0;
}

void cmd_plan_pemu_run(FILE *f, int argc, char **argv, const struct run_cfg *cfg, int json)
{
	struct cli c = cmd_plan_cli(argc, argv);
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
		fprintf(f, " --cp %d --cp-comm-type %s", m[MESH_CP],
			cmd_plan_cp_comm_name[cfg->cp_comm]);
	if (cfg->ep > 1)
		fprintf(f, " --ep %d", cfg->ep);
	if (cfg->etp)
		fprintf(f, " --expert-tensor-parallel-size %d", cfg->etp);
	if (m[MESH_PP] > 1)
		fprintf(f, " --schedule %s", sched_name(cfg->schedule));
	if (cfg->vpp > 1)
		fprintf(f, " --vpp %d", cfg->vpp);
	if (cfg->p2p_sync)
		fprintf(f, " --p2p-sync");
	if (cfg->pp_scatter)
		fprintf(f, " --scatter-gather-tensors-in-pipeline");
	fprintf(f, " --micro-batch-size %d --zero-stage %d --recompute %s", cfg->mbs, cfg->zero,
		cmd_plan_recompute_name[cfg->recompute]);
	if (cfg->tp_overlap)
		fprintf(f, " --tp-overlap oases");
	if (cfg->tpf_layers)
		fprintf(f, " --tp-first %d:%d", cfg->tpf_layers, cfg->tpf);
	if (cfg->sp)
		fprintf(f, " --sequence-parallel");
	if (cfg->tp_comm_overlap)
		fprintf(f, " --tp-comm-overlap");
	if (cfg->tp_comm_overlap && cfg->tpo_cfg_path) {
		fprintf(f, " --tp-comm-overlap-cfg");
		cli_put_arg(f, cfg->tpo_cfg_path, json);
	}
	if (cfg->flash)
		fprintf(f, " --use-flash-attn");
	if (cfg->ce != CE_UNFUSED)
		fprintf(f, " --cross-entropy-loss-fusion%s",
			cfg->ce == CE_TE ? " --cross-entropy-fusion-impl te" : "");
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
	if (cfg->ce == CE_TE)
		return "Megatron-LM refuses --cross-entropy-fusion-impl te since June 2026 "
		       "(\"disabled due to stability issues\"); its releases before took it";
	if (cfg->pp_scatter)
		return "Megatron-Core sends each pipeline message whole: the scatter/gather over "
		       "tp was Megatron-LM's before it (its flag, long unused, removed in April "
		       "2026)";
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
	/* Megatron's dropouts default to 0.1: the model pemu ranked has these */
	fprintf(f, " --hidden-dropout %g --attention-dropout %g", (double)g->hidden_dropout,
		(double)g->attention_dropout);
	fprintf(f, " --tensor-model-parallel-size %d --pipeline-model-parallel-size %d", m[MESH_TP],
		m[MESH_PP]);
	if (cfg->vpp > 1)
		fprintf(f, " --num-layers-per-virtual-pipeline-stage %d",
			g->num_layers / (m[MESH_PP] * cfg->vpp));
	if (cfg->p2p_sync && cfg->schedule == SCHED_INTERLEAVED) /* (1F1B's always are) */
		fprintf(f, " --no-overlap-p2p-communication");
	if (m[MESH_CP] > 1)
		fprintf(f, " --context-parallel-size %d --cp-comm-type %s", m[MESH_CP],
			cmd_plan_cp_comm_name[cfg->cp_comm]);
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
			cfg->ep, cmd_plan_etp(cfg),
			cfg->ep_dispatch == PAR_EP_ALLGATHER ? "allgather" : "alltoall");
	}
	if (cfg->sp)
		fprintf(f, " --sequence-parallel");
	if (cfg->flash)
		fprintf(f, " --use-flash-attn");
	if (cfg->ce == CE_NATIVE) /* (TE's is a gap: cmd_plan_megatron_gap) */
		fprintf(f, " --cross-entropy-loss-fusion");
	if (cfg->recompute == PAR_RECOMPUTE_FULL)
		fprintf(f, " --recompute-granularity full --recompute-method uniform "
			   "--recompute-num-layers 1");
	else if (cfg->recompute == PAR_RECOMPUTE_SELECTIVE)
		fprintf(f, " --recompute-granularity selective");
	if (cfg->zero == 1)
		fprintf(f, " --use-distributed-optimizer");
	if (run_overlaps_grads(cfg))
		fprintf(f, " --overlap-grad-reduce");
	if (cfg->overlap_param_gather)
		fprintf(f, " --overlap-param-gather");
	if ((cfg->bucket_params || cfg->bucket_bytes) && run_bucket_params(cfg)) /* given */
		fprintf(f, " --ddp-bucket-size %llu", (unsigned long long)run_bucket_params(cfg));
	if (cfg->tp_sync_dgrad)
		fprintf(f, " --no-async-tensor-model-parallel-allreduce");
	if (cfg->tp_comm_overlap)
		fprintf(f, " --tp-comm-overlap");
	if (cfg->tp_comm_overlap && cfg->tpo_cfg_path) {
		fprintf(f, " --tp-comm-overlap-cfg");
		cli_put_arg(f, cfg->tpo_cfg_path, 0);
	}
	if (cfg->prec == PREC_BF16) /* (Megatron's bf16 keeps fp32 gradients unless told) */
		fprintf(f, " --bf16%s", cfg->fp32_grads ? "" : " --grad-reduce-in-bf16");
	if (cfg->seed != 1234)
		fprintf(f, " --seed %llu", (unsigned long long)cfg->seed);
}
