/* cli_par: the parallel options; see cli_par.h. */
#include "cmd/cli_par.h"

#include <string.h>

#include "par/model.h"

const struct cli_opt cli_par_opts[] = {
	{"dp", 0, 1, CLI_PAR_DP, "N", "data-parallel size (default 1)"},
	{"data-parallel-size", 0, 1, CLI_PAR_DP, "N", "the same as --dp"},
	{"tp", 0, 1, CLI_PAR_TP, "N", "tensor-parallel size (default 1)"},
	{"tensor-model-parallel-size", 0, 1, CLI_PAR_TP, "N", "the same as --tp"},
	{"pp", 0, 1, CLI_PAR_PP, "N", "pipeline-parallel size: stages of consecutive layers"},
	{"pipeline-model-parallel-size", 0, 1, CLI_PAR_PP, "N", "the same as --pp"},
	{"schedule", 0, 1, CLI_PAR_SCHEDULE, "NAME",
	 "pipeline schedule: gpipe, 1f1b (default), interleaved, zb-h1, zb-h2, helix"},
	{"vpp", 0, 1, CLI_PAR_VPP, "V",
	 "model chunks a stage, for --schedule interleaved (default 2)"},
	{"num-layers-per-virtual-pipeline-stage", 0, 1, CLI_PAR_VPP_LAYERS, "N",
	 "the same given as layers a chunk (Megatron's)"},
	{"p2p-sync", 0, 0, CLI_PAR_P2P_SYNC, NULL,
	 "each send waits for its receiver and its transfer, in Megatron-LM's batches "
	 "(batch_isend_irecv, then torch.cuda.synchronize): 1f1b's (a send and the receive of "
	 "the other kind from the same peer after it one batch) and interleaved's over pp > 2 "
	 "(after each iteration its sends and the next inputs and gradients, received ahead); "
	 "not with --tp-overlap oases; default: sends posted and overlapped with compute"},
	{"no-overlap-p2p-communication", 0, 0, CLI_PAR_P2P_SYNC, NULL,
	 "the same, Megatron-LM's name for its interleaved schedule (its 1F1B's are always "
	 "synchronous)"},
	{"scatter-gather-tensors-in-pipeline", 0, 0, CLI_PAR_PP_SCATTER, NULL,
	 "Megatron-LM's of 2021 (its default then): with tp and no sp, each tensor-parallel rank "
	 "sends its 1/t of the stage's output (or input gradient), which the next stage "
	 "all-gathers over tp (default: every rank sends all of it, as Megatron-Core)"},
	{"recompute", 0, 1, CLI_PAR_RECOMPUTE, "MODE",
	 "activation recomputation: none (default), selective (attention scores), full, oases "
	 "(checkpoints after the tp collectives: none of them run again)"},
	{"recompute-granularity", 0, 1, CLI_PAR_RECOMPUTE, "MODE", "the same as --recompute"},
	{"recompute-method", 0, 1, CLI_PAR_RECOMPUTE_METHOD, "uniform",
	 "Megatron's: pemu's full recomputation is uniform, a layer a group"},
	{"recompute-num-layers", 0, 1, CLI_PAR_RECOMPUTE_LAYERS, "1",
	 "Megatron's: layers a recomputed group, 1 in pemu"},
	{"use-flash-attn", 0, 0, CLI_PAR_FLASH, NULL,
	 "memory-efficient attention: no (s, s) scores kept, recomputed in backward"},
	{"cross-entropy-loss-fusion", 0, 0, CLI_PAR_CE_FUSION, NULL,
	 "Megatron-LM's fused cross-entropy: 3 kernels forward and 1 backward over the logits "
	 "(default: its unfused one, 6 and 2, in fp32)"},
	{"cross-entropy-fusion-impl", 0, 1, CLI_PAR_CE_IMPL, "IMPL",
	 "with --cross-entropy-loss-fusion: native (the default, Megatron's jit-fused "
	 "functions) or te (Transformer Engine's: 2 kernels forward, the rows' max, sum and "
	 "target logit all-gathered over tp; Megatron-LM refuses it since June 2026)"},
	{"mlp-chunks", 0, 1, CLI_PAR_MLP_CHUNKS, "N",
	 "run the MLP over N chunks of rows, keeping none of it for backward (HelixPipe's)"},
	{"cp", 0, 1, CLI_PAR_CP, "N",
	 "context-parallel size: each sequence cut over N ranks (2N chunks, load-balanced)"},
	{"context-parallel-size", 0, 1, CLI_PAR_CP, "N", "the same as --cp"},
	{"cp-comm-type", 0, 1, CLI_PAR_CP_COMM, "TYPE",
	 "context parallelism's attention: p2p (default, the ring, overlapped), all_gather (K, V "
	 "gathered), a2a (Ulysses: all-to-all to heads)"},
	{"cp-layout", 0, 1, CLI_PAR_CP_LAYOUT, "L",
	 "balanced (default: rank r holds chunks r and 2N-1-r of 2N) or contiguous (chunk r of "
	 "N: the ring's ranks do unequal work, for comparison)"},
	{"ep", 0, 1, CLI_PAR_EP, "N",
	 "expert-parallel size: each MoE layer's experts over N data- or context-parallel "
	 "ranks (E/N each, tokens sent by the dispatcher); with --tp N over the "
	 "tensor-parallel group; with another --tp and --sequence-parallel over N ranks of tp x "
	 "cp x dp, each sending its own rows"},
	{"expert-model-parallel-size", 0, 1, CLI_PAR_EP, "N", "the same as --ep"},
	{"expert-tensor-parallel-size", 0, 1, CLI_PAR_ETP, "N",
	 "the experts' tensor-parallel size: tp without --ep (each expert cut as the dense "
	 "MLP); with it 1 (each expert whole on its rank: the default) or tp (each cut over "
	 "tp, spread over the dp x cp ranks); no other in this build"},
	{"moe-token-dispatcher-type", 0, 1, CLI_PAR_DISPATCHER, "TYPE",
	 "expert parallelism's dispatch: alltoall (default: all-to-all-v of the routed tokens) "
	 "or allgather (every rank's tokens gathered, outputs reduce-scattered)"},
	{"zero-stage", 0, 1, CLI_PAR_ZERO, "0-3",
	 "ZeRO over dp: 1 shards Adam's state, 2 also gradients, 3 also weights (default 0)"},
	{"use-distributed-optimizer", 0, 0, CLI_PAR_DIST_OPT, NULL,
	 "Megatron's distributed optimizer: ZeRO stage 1 unless --zero-stage gives more"},
	{"ddp-bucket-size", 0, 1, CLI_PAR_DDP_BUCKET, "N",
	 "data-parallel gradient bucket in parameters (ZeRO 0-1: Megatron-LM's, with "
	 "--overlap-grad-reduce or --overlap-param-gather, default max(40M, 1M x dp x cp); "
	 "without, one bucket a model chunk whatever the size; ZeRO-2: default 25MB; stage 3 "
	 "goes by layer)"},
	{"bucket-size", 0, 1, CLI_PAR_BUCKET, "SIZE",
	 "the same in bytes at the weights' width (PyTorch DDP's bucket_cap_mb)"},
	{"overlap-grad-reduce", 0, 0, CLI_PAR_OVERLAP_GRAD, NULL,
	 "reduce each gradient bucket as the last micro-batch's backward finishes it (ZeRO 0-1; "
	 "Megatron-LM's buckets: --ddp-bucket-size in the first stage's first chunk, one bucket "
	 "in each other chunk and stage; stages 2-3 always are)"},
	{"no-overlap-grad-reduce", 0, 0, CLI_PAR_NO_OVERLAP_GRAD, NULL,
	 "reduce the gradients after backward, one bucket a model chunk (the default, "
	 "Megatron-LM's; ZeRO 0-1)"},
	{"overlap-param-gather", 0, 0, CLI_PAR_OVERLAP_PARAM, NULL,
	 "ZeRO 1-2: gather each bucket's updated weights as the next forward reaches them, one "
	 "bucket ahead (default: all of them after the optimizer step, exposed)"},
	{"tp-overlap", 0, 1, CLI_PAR_TP_OVERLAP, "MODE",
	 "tensor-parallel collectives: none (default, Megatron's order), oases (two sub-batches "
	 "interleaved, each one's collectives hidden behind the other's compute)"},
	{"no-async-tensor-model-parallel-allreduce", 0, 0, CLI_PAR_NO_ASYNC_TP, NULL,
	 "Megatron-LM's before 2022: a column-parallel layer's input-gradient all-reduce "
	 "(reduce-scatter with sp) after its weight gradient, exposed (default: posted first, "
	 "under the weight gradient's GEMM)"},
	{"tp-comm-overlap", 0, 0, CLI_PAR_TP_COMM_OVERLAP, NULL,
	 "Megatron-LM's with Transformer Engine (needs --sequence-parallel): the all-gathers "
	 "before a GEMM fused into it as rings of sends, the reduce-scatters after a "
	 "row-parallel GEMM pipelined with it in 4 chunks on 16 SMs (TE's defaults)"},
	{"tp-comm-overlap-cfg", 0, 1, CLI_PAR_TP_COMM_OVERLAP_CFG, "FILE",
	 "with --tp-comm-overlap, its methods: Transformer Engine's userbuffers YAML, as "
	 "Megatron-LM and NeMo take it (each GEMM's method, num_sm, num_splits, set_sm_margin; "
	 "default: TE's)"},
	{"tp-first", 0, 1, CLI_PAR_TP_FIRST, "K:T",
	 "Oases's mixed degrees: the first K layers with tensor-parallel size T (T divides tp; "
	 "those layers' data-parallel size is dp tp / T)"},
	{"sequence-parallel", 0, 0, CLI_PAR_SP, NULL,
	 "sequence parallelism: LayerNorm regions split by tokens over tp"},
	{"fold", 0, 1, CLI_PAR_FOLD, "on|off",
	 "dry-run: simulate symmetric devices (replicas, tp ranks 2..) once, exactly (default "
	 "on); off runs every device"},
	{NULL, 0, 0, 0, NULL, NULL},
};

void cli_par_init(struct cli_par *p)
{
	p->dp = p->tp = p->pp = p->cp = p->ep = 1;
	p->dist_opt = 0;
	p->ce_fusion = 0;
	p->ce_impl = CE_NATIVE;
}

static int recompute_of(const struct cli *c, const char *v)
{
	if (!strcmp(v, "none"))
		return PAR_RECOMPUTE_NONE;
	if (!strcmp(v, "selective"))
		return PAR_RECOMPUTE_SELECTIVE;
	if (!strcmp(v, "full"))
		return PAR_RECOMPUTE_FULL;
	if (!strcmp(v, "oases"))
		return PAR_RECOMPUTE_OASES;
	cli_fail(c, "--recompute: '%s' is not none, selective, full or oases", v);
}

/* --bucket-size and --ddp-bucket-size are one setting: refused together. */
static void one_bucket_size(const struct cli *c, const struct run_cfg *cfg)
{
	if (cfg->bucket_bytes && cfg->bucket_params)
		cli_fail(c, "--bucket-size and --ddp-bucket-size both give the gradient bucket's "
			    "size: give one");
}

int cli_par_opt(struct cli_par *p, struct run_cfg *cfg, const struct cli *c, int id, const char *v)
{
	int kind;

	switch (id) {
	case CLI_PAR_DP:
		p->dp = (int)cli_int(c, "--dp", v, 1, 4096);
		break;
	case CLI_PAR_TP:
		p->tp = (int)cli_int(c, "--tp", v, 1, 4096);
		break;
	case CLI_PAR_PP:
		p->pp = (int)cli_int(c, "--pp", v, 1, 4096);
		break;
	case CLI_PAR_CP:
		p->cp = (int)cli_int(c, "--cp", v, 1, 4096);
		break;
	case CLI_PAR_CP_COMM:
		if (!strcmp(v, "p2p"))
			cfg->cp_comm = PAR_CP_P2P;
		else if (!strcmp(v, "all_gather"))
			cfg->cp_comm = PAR_CP_ALL_GATHER;
		else if (!strcmp(v, "a2a"))
			cfg->cp_comm = PAR_CP_A2A;
		else
			cli_fail(c, "--cp-comm-type: '%s' is not p2p, all_gather or a2a", v);
		break;
	case CLI_PAR_CP_LAYOUT:
		if (strcmp(v, "balanced") && strcmp(v, "contiguous"))
			cli_fail(c, "--cp-layout: '%s' is not balanced or contiguous", v);
		cfg->cp_contiguous = !strcmp(v, "contiguous");
		break;
	case CLI_PAR_ETP:
		cfg->etp = (int)cli_int(c, "--expert-tensor-parallel-size", v, 1, 4096);
		break;
	case CLI_PAR_DISPATCHER:
		if (strcmp(v, "alltoall") && strcmp(v, "allgather"))
			cli_fail(c,
				 "--moe-token-dispatcher-type: '%s' is not alltoall or allgather",
				 v);
		cfg->ep_dispatch = !strcmp(v, "allgather") ? PAR_EP_ALLGATHER : PAR_EP_ALLTOALL;
		break;
	case CLI_PAR_EP:
		p->ep = (int)cli_int(c, "--ep", v, 1, 4096);
		break;
	case CLI_PAR_SCHEDULE:
		if ((kind = sched_kind_of(v)) < 0)
			cli_fail(
				c,
				"--schedule: '%s' is not gpipe, 1f1b, interleaved, zb-h1, zb-h2 or "
				"helix",
				v);
		cfg->schedule = (enum sched_kind)kind;
		cfg->schedule_set = 1;
		break;
	case CLI_PAR_VPP:
		cfg->vpp = (int)cli_int(c, "--vpp", v, 1, 4096);
		break;
	case CLI_PAR_VPP_LAYERS:
		cfg->vpp_layers =
			(int)cli_int(c, "--num-layers-per-virtual-pipeline-stage", v, 1, 1 << 20);
		break;
	case CLI_PAR_RECOMPUTE:
		cfg->recompute = (enum par_recompute)recompute_of(c, v);
		break;
	case CLI_PAR_RECOMPUTE_METHOD:
		if (strcmp(v, "uniform"))
			cli_fail(c,
				 "--recompute-method: '%s' is not uniform (pemu recomputes every "
				 "layer, one a group)",
				 v);
		break;
	case CLI_PAR_RECOMPUTE_LAYERS:
		if (cli_int(c, "--recompute-num-layers", v, 1, 1 << 20) != 1)
			cli_fail(c, "--recompute-num-layers: pemu recomputes one layer a group, "
				    "so it is 1");
		break;
	case CLI_PAR_DIST_OPT:
		p->dist_opt = 1;
		break;
	case CLI_PAR_FLASH:
		cfg->flash = 1;
		break;
	case CLI_PAR_CE_FUSION:
		p->ce_fusion = 1;
		break;
	case CLI_PAR_CE_IMPL:
		if (strcmp(v, "native") && strcmp(v, "te"))
			cli_fail(c, "--cross-entropy-fusion-impl: '%s' is not native or te", v);
		p->ce_impl = !strcmp(v, "te") ? CE_TE : CE_NATIVE;
		cfg->ce_impl_set = 1;
		break;
	case CLI_PAR_MLP_CHUNKS:
		cfg->mlp_chunks = (int)cli_int(c, "--mlp-chunks", v, 1, 1 << 20);
		break;
	case CLI_PAR_ZERO:
		cfg->zero = (int)cli_int(c, "--zero-stage", v, 0, 3);
		break;
	case CLI_PAR_OVERLAP_GRAD:
	case CLI_PAR_NO_OVERLAP_GRAD:
		cfg->overlap_grad = id == CLI_PAR_OVERLAP_GRAD ? 1 : -1;
		break;
	case CLI_PAR_OVERLAP_PARAM:
		cfg->overlap_param_gather = 1;
		break;
	case CLI_PAR_BUCKET:
		cfg->bucket_bytes = cli_size(c, "--bucket-size", v);
		if (!cfg->bucket_bytes)
			cli_fail(c, "--bucket-size must be more than 0 bytes");
		one_bucket_size(c, cfg);
		break;
	case CLI_PAR_DDP_BUCKET:
		cfg->bucket_params = (uint64_t)cli_int(c, "--ddp-bucket-size", v, 1, 1L << 40);
		one_bucket_size(c, cfg);
		break;
	case CLI_PAR_SP:
		cfg->sp = 1;
		break;
	case CLI_PAR_TP_FIRST: {
		char k[32];
		const char *colon = strchr(v, ':');

		if (!colon || colon == v || (size_t)(colon - v) >= sizeof k)
			cli_fail(c, "--tp-first: '%s' is not K:T (layers:degree, e.g. 8:2)", v);
		memcpy(k, v, (size_t)(colon - v));
		k[colon - v] = '\0';
		cfg->tpf_layers = (int)cli_int(c, "--tp-first's layers", k, 1, 1 << 20);
		cfg->tpf = (int)cli_int(c, "--tp-first's degree", colon + 1, 1, 4096);
		break;
	}
	case CLI_PAR_TP_OVERLAP:
		if (strcmp(v, "none") && strcmp(v, "oases"))
			cli_fail(c, "--tp-overlap: '%s' is not none or oases", v);
		cfg->tp_overlap = !strcmp(v, "oases") ? PAR_OVERLAP_OASES : PAR_OVERLAP_NONE;
		break;
	case CLI_PAR_NO_ASYNC_TP:
		cfg->tp_sync_dgrad = 1;
		break;
	case CLI_PAR_P2P_SYNC:
		cfg->p2p_sync = 1;
		break;
	case CLI_PAR_PP_SCATTER:
		cfg->pp_scatter = 1;
		break;
	case CLI_PAR_TP_COMM_OVERLAP:
		cfg->tp_comm_overlap = 1;
		break;
	case CLI_PAR_TP_COMM_OVERLAP_CFG:
		cli_tpo_read(c, v, &cfg->tpo_cfg);
		cfg->tpo_cfg_set = 1;
		cfg->tpo_cfg_path = v;
		break;
	case CLI_PAR_FOLD:
		if (strcmp(v, "on") && strcmp(v, "off"))
			cli_fail(c, "--fold: '%s' is not on or off", v);
		cfg->fold = !strcmp(v, "on");
		break;
	default:
		return 0;
	}
	return 1;
}

void cli_par_finish(const struct cli_par *p, struct run_cfg *cfg)
{
	/* experts fold onto the dense mesh (Megatron's parallel folding): ep is not a factor
	 * of the devices */
	mesh_init(&cfg->mesh, p->tp, p->cp, 1, p->dp, p->pp);
	cfg->ep = p->ep;
	cfg->ce = p->ce_fusion ? p->ce_impl : CE_UNFUSED;
	if (p->dist_opt && cfg->zero < 1)
		cfg->zero = 1;
}
