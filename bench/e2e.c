/* bench/e2e: what the whole predicts. bench/fidelity holds the calibrated cost model's
 * parts (GEMMs, memory-bound kernels, collectives) against microbenchmarks; this runs
 * whole training steps of published large runs as pemu dry-runs, under the default
 * (calibrated) clock, and sets pemu's throughput beside the published one. Nothing is
 * fitted to these rows: they check the whole. Two tables:
 *
 * Table 1 of Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM" (arXiv 2104.04473): GPT models of 1.7B to 1T parameters on
 * 32 to 3072 A100 80GB (DGX A100 nodes, eight 200 Gb/s HDR NICs each), sequence 2048,
 * vocabulary 51200, mixed precision, full activation recomputation, the interleaved
 * schedule where the paper's scripts give layers a virtual stage
 * (examples/sc21/run_table_1.sh), no sequence parallelism and no distributed optimizer
 * (neither existed yet), and each column-parallel layer's input-gradient all-reduce after
 * its weight gradient (--no-async-tensor-model-parallel-allreduce: Megatron-LM posted it
 * first, under that GEMM, from August 2021, after the paper), the pipelines' messages
 * cut over tp and gathered (--scatter-gather-tensors-in-pipeline: the paper's section 4.1,
 * Megatron-LM's default then); its pipelines' sends synchronous, 1F1B's and the
 * interleaved schedule's, in Megatron's batches (--p2p-sync: Megatron-LM's
 * p2p_communication.py then, batch_isend_irecv, each request waited for, then
 * torch.cuda.synchronize). Throughput is the paper's own count, teraFLOP/s a GPU:
 *
 *     F = 96 B s l h^2 (1 + s / 6h + V / 16 l h)   FLOPs an iteration (recomputation in)
 *
 * The Megatron-LM README's H100 table (NVIDIA/Megatron-LM images/model_table.png, commit
 * 937571cfd4, July 2024): Megatron-Core, GPT models of 1.7B to 462B parameters on 48 to
 * 6144 H100s (data-parallel 48 throughout), sequence 4096, vocabulary 131072, with
 * --overlap-grad-reduce, --overlap-param-gather (so the distributed optimizer),
 * --tp-comm-overlap and the pipeline's own overlap; in bf16, whose gradients Megatron-LM
 * then always kept and reduced in fp32 (megatron/training/arguments.py at that commit:
 * bf16 sets accumulate_allreduce_grads_in_fp32), so --accumulate-allreduce-grads-in-fp32. Its count
 * is Megatron's num_floating_point_operations (megatron/training/training.py at that commit), model
 * FLOPs only:
 *
 *     F = 72 B s l h^2 (1 + s / 6h + V / 12 l h)
 *
 * The README gives no micro-batch, recomputation, schedule or dropout; pemu takes
 * micro-batch 1, sequence parallelism with tp, flash attention, Megatron's dropouts (0.1),
 * the 1F1B schedule (Megatron's without a virtual-stage flag; its sends synchronous, as
 * Megatron-LM's 1F1B forces them: --p2p-sync) and the least recomputation
 * that fits in 80 GB (none, else selective, else full), and --tp-comm-overlap where tp > 1
 * (Transformer Engine's default methods, src/par/tpo.h).
 *
 * NVIDIA's GPT-3 175B benchmark (NVIDIA/dgxc-benchmarking, NeMo 24.11) runs NeMo's TE
 * preset (userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048: fc2's reduce-scatter as a
 * ring of sends, proj's pipeline on 24 SMs, the bulk collectives on 2 to 4 SMs the GEMMs
 * share), which pemu reads from bench/tp_overlap/nemo_gpt3_175b_h100_bf16.yaml.
 *
 * Each row is one `pemu run --dry-run --json` (the command is printed, so that any row
 * can be run by hand); the table gives pemu's step time, its throughput, the published
 * one, the error, and where pemu's step goes (the pipeline's bubble, exposed
 * communication). Writes DIR/e2e.csv; never fails on accuracy, only if a run does not
 * run.
 * usage: bench/e2e [DIR]   (default build/bench/out; pemu is PEMU or build/pemu) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct row {
	const char *params; /* the published parameter count, billions */
	int heads, hidden, layers, tp, pp, gpus, gbs, mbs;
	int layers_per_vstage; /* interleaved: layers a virtual stage; 0: 1F1B */
	double tflops;         /* published teraFLOP/s a GPU, or 0: from step_s */
	double step_s;         /* the published step time, where that is what is given */
};

static const struct row a100_rows[] = {
	{"1.7", 24, 2304, 24, 1, 1, 32, 512, 16, 0, 137, 0},
	{"3.6", 32, 3072, 30, 2, 1, 64, 512, 16, 0, 138, 0},
	{"7.5", 32, 4096, 36, 4, 1, 128, 512, 16, 0, 142, 0},
	{"18.4", 48, 6144, 40, 8, 1, 256, 1024, 8, 0, 135, 0},
	{"39.1", 64, 8192, 48, 8, 2, 512, 1536, 4, 0, 138, 0},
	{"76.1", 80, 10240, 60, 8, 4, 1024, 1792, 2, 5, 140, 0},
	{"145.6", 96, 12288, 80, 8, 8, 1536, 2304, 2, 5, 148, 0},
	{"310.1", 128, 16384, 96, 8, 16, 1920, 2160, 1, 3, 155, 0},
	{"529.6", 128, 20480, 105, 8, 35, 2520, 2520, 1, 1, 163, 0},
	{"1008", 160, 25600, 128, 8, 64, 3072, 3072, 1, 0, 163, 0},
};

static const struct row h100_rows[] = {
	{"1.7", 16, 2048, 24, 1, 1, 48, 192, 1, 0, 408.8, 0},
	{"7.1", 32, 4096, 30, 2, 1, 96, 192, 1, 0, 465.9, 0},
	{"16", 48, 6144, 32, 4, 1, 192, 192, 1, 0, 489.1, 0},
	{"32", 56, 7168, 48, 8, 1, 384, 192, 1, 0, 459.6, 0},
	{"70", 64, 8192, 84, 8, 2, 768, 384, 1, 0, 419.7, 0},
	{"119", 80, 10240, 92, 8, 4, 1536, 768, 1, 0, 420.5, 0},
	{"177", 96, 12288, 96, 8, 6, 2304, 1152, 1, 0, 432.8, 0},
	{"314", 128, 16384, 96, 8, 8, 3072, 1536, 1, 0, 474.4, 0},
	{"462", 144, 18432, 112, 8, 16, 6144, 3072, 1, 0, 459.9, 0},
};

/* NeMo's GPT-3 175B in BF16, weak-scaled: the step times of its table */
static const struct row nemo_rows[] = {
	{"175", 96, 12288, 96, 4, 8, 128, 256, 1, 1, 0, 8.91},
	{"175", 96, 12288, 96, 4, 8, 256, 512, 1, 1, 0, 8.95},
	{"175", 96, 12288, 96, 4, 8, 512, 1024, 1, 1, 0, 9.09},
	{"175", 96, 12288, 96, 4, 8, 1024, 2048, 1, 1, 0, 9.01},
	{"175", 96, 12288, 96, 4, 8, 2048, 4096, 1, 1, 0, 9.02},
};

/* The H100 tables' shared options: Megatron-Core's, as far as pemu has them */
#define H100_COMMON                                                                                \
	" --cluster dgx-h100 --use-flash-attn --use-distributed-optimizer --overlap-grad-reduce "  \
	"--overlap-param-gather"
/* Megatron-LM's: and its fp32 gradients */
#define H100_OPTS H100_COMMON " --accumulate-allreduce-grads-in-fp32"
/* NeMo's: and its userbuffers preset; its optimizer reduces the gradients in bf16
 * (gpt3_175b_hydra.yaml, optim.grad_sync_dtype), pemu's default */
#define NEMO_OPTS                                                                                  \
	H100_COMMON " --tp-comm-overlap-cfg bench/tp_overlap/nemo_gpt3_175b_h100_bf16.yaml"

/* A published table: its rows, the runs' shared shape and options, and its FLOP count
 * F = coef B s l h^2 (1 + s / 6h + V / (vdiv l h)). */
static const struct table {
	const char *what, *count, *name;
	const struct row *rows;
	int nrows, seq, vocab;
	double coef, vdiv;
	const char *opts;         /* besides the layout, for every row */
	const char *pipe_opts;    /* and for the rows with a pipeline */
	int sp;                   /* sequence parallelism where tp > 1 (2: and --tp-comm-overlap) */
	const char *recompute[3]; /* tried in order until a run fits */
	int il_sync;              /* the interleaved rows' sends synchronous too */
} tables[] = {
	{"Narayanan et al. 2021 (arXiv 2104.04473), Table 1, against pemu's dry-run (calibrated "
	 "clock, dgx-a100): seq 2048, vocab 51200, bf16, full recomputation, the input "
	 "gradients' all-reduces after the weight gradients and the pipelines' scatter/gather "
	 "(Megatron-LM's then), the pipelines' sends synchronous",
	 "96 B s l h^2 (1 + s/6h + V/16lh) / (step time x GPUs), the paper's count",
	 "Table 1",
	 a100_rows,
	 sizeof a100_rows / sizeof *a100_rows,
	 2048,
	 51200,
	 96,
	 16,
	 " --no-async-tensor-model-parallel-allreduce",
	 " --scatter-gather-tensors-in-pipeline",
	 0,
	 {"full", NULL, NULL},
	 1},
	{"the Megatron-LM README's H100 table (Megatron-Core, July 2024), against pemu's dry-run "
	 "(calibrated clock, dgx-h100): seq 4096, vocab 131072, bf16, micro-batch 1, the "
	 "distributed optimizer with both overlaps and fp32 gradients, flash attention, sp with "
	 "tp, dropout 0.1, 1F1B (its sends synchronous), the least recomputation that fits, "
	 "--tp-comm-overlap with tp",
	 "72 B s l h^2 (1 + s/6h + V/12lh) / (step time x GPUs), Megatron's model FLOPs",
	 "the H100 table",
	 h100_rows,
	 sizeof h100_rows / sizeof *h100_rows,
	 4096,
	 131072,
	 72,
	 12,
	 H100_OPTS,
	 "",
	 2,
	 {"none", "selective", "full"},
	 0},
	{"NVIDIA/dgxc-benchmarking 35a9aec, nemo_megatron/README_175b.md and "
	 "gpt3_175b_hydra.yaml: NeMo 24.11, GPT-3 175B in BF16 on 128 to 2048 H100s, against "
	 "pemu's dry-run (calibrated clock, dgx-h100): seq 2048, vocab 50257 padded to 50688, "
	 "micro-batch 1, interleaved (12 chunks a stage), sp, dropout 0.1, no recomputation, the "
	 "distributed optimizer with both overlaps, flash attention, --tp-comm-overlap with "
	 "NeMo's userbuffers preset",
	 "72 B s l h^2 (1 + s/6h + V/12lh) / (step time x GPUs), Megatron's model FLOPs (NeMo's "
	 "2.20e15 a sequence)",
	 "NeMo's GPT-3 175B",
	 nemo_rows,
	 sizeof nemo_rows / sizeof *nemo_rows,
	 2048,
	 50688,
	 72,
	 12,
	 NEMO_OPTS,
	 "",
	 2,
	 {"none", NULL, NULL},
	 0},
};

/* The number after "key": in s (the first), or NAN. */
static double json_num(const char *s, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof pat, "\"%s\":", key);
	p = strstr(s, pat);
	return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* The largest "peak": of the report's memory (bytes). */
static double max_peak(const char *s)
{
	double best = 0;

	for (const char *p = strstr(s, "\"peak\":"); p; p = strstr(p + 1, "\"peak\":")) {
		double v = strtod(p + 7, NULL);

		best = v > best ? v : best;
	}
	return best;
}

/* Runs cmd, its stdout into a malloc'd string (NULL if it fails). */
static char *run(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);

	if (!f || !buf) {
		free(buf);
		return NULL;
	}
	for (size_t n; (n = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
		len += n;
		if (len + 1 == cap) {
			char *b = realloc(buf, cap *= 2);

			if (!b) {
				free(buf);
				pclose(f);
				return NULL;
			}
			buf = b;
		}
	}
	buf[len] = 0;
	if (pclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Runs row r of table t (the first of its recomputation modes that fits) and prints its
 * line and its CSV line; adds its error to *sum, *lo, *hi. 0, or -1 if no run ran. */
static int run_row(const struct table *t, const struct row *r, const char *pemu, FILE *csv,
		   double *sum, double *lo, double *hi)
{
	int dp = r->gpus / (r->tp * r->pp);
	char sched[160] = "", cmd[1024], name[16];
	double b = r->gbs, h = r->hidden, l = r->layers;
	double flops = t->coef * b * t->seq * l * h * h *
		       (1 + t->seq / (6 * h) + t->vocab / (t->vdiv * l * h));
	double step, tf, pub, err, wall;
	char *out = NULL;

	if (r->pp > 1 && r->layers_per_vstage)
		snprintf(sched, sizeof sched,
			 " --schedule interleaved --num-layers-per-virtual-pipeline-stage %d%s",
			 r->layers_per_vstage, t->il_sync ? " --p2p-sync" : "");
	else if (r->pp > 1) /* (Megatron-LM's 1F1B: its sends synchronous, both eras) */
		snprintf(sched, sizeof sched, " --schedule 1f1b --p2p-sync");
	if (r->pp > 1)
		strncat(sched, t->pipe_opts, sizeof sched - strlen(sched) - 1);
	for (int k = 0; k < 3 && t->recompute[k] && !out; k++) {
		snprintf(
			cmd, sizeof cmd,
			"%s run --dry-run --model gpt3-175b --num-layers %d --hidden-size %d "
			"--num-attention-heads %d --seq-length %d --vocab-size %d --tp %d --pp %d "
			"--dp %d --micro-batch-size %d --global-batch-size %d --recompute %s%s%s%s "
			"--steps 1",
			pemu, r->layers, r->hidden, r->heads, t->seq, t->vocab, r->tp, r->pp, dp,
			r->mbs, r->gbs, t->recompute[k], sched,
			!t->sp || r->tp == 1 ? ""
			: t->sp == 1         ? " --sequence-parallel"
					     : " --sequence-parallel --tp-comm-overlap",
			t->opts);
		strncat(cmd, " --json", sizeof cmd - strlen(cmd) - 1);
		out = run(cmd); /* (a run that does not fit exits 1) */
	}
	cmd[strlen(cmd) - strlen(" --json")] = 0;
	printf("# %s\n", cmd);
	if (!out) {
		fprintf(stderr, "bench/e2e: the %sB row of %s did not run: %s\n", r->params,
			t->name, cmd);
		return -1;
	}
	step = json_num(strstr(out, "\"time\":") ? strstr(out, "\"time\":") : out, "step_time_s");
	wall = json_num(out, "wall_s");
	tf = flops / (step * r->gpus) / 1e12;
	pub = r->tflops ? r->tflops : flops / (r->step_s * r->gpus) / 1e12;
	err = tf / pub - 1;
	*sum += fabs(err);
	*lo = err < *lo ? err : *lo;
	*hi = err > *hi ? err : *hi;
	snprintf(name, sizeof name, "%s",
		 r->pp == 1             ? "-"
		 : r->layers_per_vstage ? "interleaved"
					: "1f1b");
	printf("%8s %5d %3d %3d %3d %-11s %9.3f %7.1f %9.4g %+6.1f%% %6.1f%% %9.3f %8.1f\n",
	       r->params, r->gpus, r->tp, r->pp, dp, name, step, tf, pub, 100 * err,
	       100 * json_num(out, "bubble_fraction"), json_num(out, "exposed_comm_s"),
	       max_peak(out) / (1 << 30));
	fprintf(csv, "%s,%s,%d,%d,%d,%d,%s,%.6f,%.2f,%.1f,%.4f,%.4f,%.6f,%.2f,%.3f\n", t->name,
		r->params, r->gpus, r->tp, r->pp, dp, name, step, tf, pub, err,
		json_num(out, "bubble_fraction"), json_num(out, "exposed_comm_s"),
		max_peak(out) / (1 << 30), wall);
	free(out);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	const char *pemu = getenv("PEMU") ? getenv("PEMU") : "build/pemu";
	char path[4096];
	FILE *csv;

	snprintf(path, sizeof path, "%s/e2e.csv", dir);
	if (!(csv = fopen(path, "w"))) {
		perror(path);
		return 1;
	}
	fprintf(csv, "table,params_b,gpus,tp,pp,dp,schedule,step_s,pemu_tflops,published_tflops,"
		     "error,bubble,exposed_comm_s,peak_gib,wall_s\n");
	for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
		const struct table *t = &tables[i];
		double sum = 0, lo = INFINITY, hi = -INFINITY;

		printf("%s# %s\n", i ? "\n" : "", t->what);
		printf("# teraFLOP/s a GPU = %s\n", t->count);
		printf("%8s %5s %3s %3s %3s %-11s %9s %7s %9s %7s %7s %9s %8s\n", "params B",
		       "GPUs", "tp", "pp", "dp", "schedule", "step s", "pemu TF", "published",
		       "error", "bubble", "exposed s", "peak GiB");
		fflush(stdout);
		for (int j = 0; j < t->nrows; j++)
			if (run_row(t, &t->rows[j], pemu, csv, &sum, &lo, &hi)) {
				fclose(csv);
				return 1;
			}
		printf("pemu against %s: mean error %.1f%%, from %+.1f%% to %+.1f%% over %d runs "
		       "(nothing fitted to them)\n",
		       t->name, 100 * sum / t->nrows, 100 * lo, 100 * hi, t->nrows);
	}
	fclose(csv);
	printf("wrote %s\n", path);
	return 0;
}
