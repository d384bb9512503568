/* The pemu program's input as a user meets it: bad input is one clear line on stderr
 * and exit code 2, never a crash; --help names the commands and options; the parser the
 * fuzzer drives refuses through its hook. Runs the binary named by $PEMU (default
 * build/pemu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_test.h"
#include "cmd/cli.h"
#include "cmd/cmd.h"
#include "common.h"

static void test_bad_input(void **state)
{
	static const struct {
		const char *args, *says;
	} cases[] = {
		{"coll --frobnicate", "unknown option '--frobnicate'"},
		{"coll -b 8Q", "malformed size '8Q'"},
		{"plan --oases --model tiny",
		 "--oases searches the degrees of a tensor-parallel layout: give --tp > 1"},
		{"coll --op send-recv -g 1",
		 "--op send-recv -g 1: a send and its receive need 2 devices or more"},
		{"coll -e 12XB", "malformed size '12XB'"},
		{"coll -g 16 --nodes 1",
		 "16 devices are more than the cluster has (1 node x 8 GPUs = 8)"},
		{"coll --mem-cap 0", "--mem-cap: a GPU needs more than 0 bytes"},
		{"coll -g 0", "-g: '0' is not a whole number"},
		{"coll -g", "option -g needs a value"},
		{"coll --cluster tpu-v9", "unknown preset 'tpu-v9'"},
		{"coll --inter-bw fast", "malformed bandwidth 'fast'"},
		/* a unit is needed: a bare 300 was 300 bytes a second, a bare 5 5 ns */
		{"coll --intra-bw 300", "--intra-bw 300: give the unit (for example 50GB/s or "
					"200Gb/s); a bare number is not taken as bytes a second"},
		{"coll --intra-lat 5",
		 "--intra-lat 5: give the unit (for example 5us, 2ms or 100ns)"},
		{"coll --inter-bw 0GB/s", "--inter-bw 0GB/s: a bandwidth must be more than 0"},
		{"train --model tiny --hbm-bw 2", "--hbm-bw 2: give the unit (for example 2TB/s)"},
		{"coll --inter-lat 5parsecs", "malformed time '5parsecs'"},
		{"coll --op allreduce", "unknown collective 'allreduce'"},
		{"coll -b 1M -e 1K", "is larger than -e"},
		{"coll -r 9 -g 4", "the root must be a rank of the group"},
		{"coll --dry-run=yes", "takes no value"},
		{"coll stray", "unexpected argument 'stray'"},
		{"plan --model tiny --gpus 8 --global-batch-size 32 --tp 3",
		 "--tp 3 does not divide the 8 GPUs"},
		{"plan --model tiny --gpus 8 --global-batch-size 32 --dp 3",
		 "--dp 3 does not divide the 8 GPUs"},
		{"plan --model tiny --gpus 8 --global-batch-size 32 --num-layers 4 --tp 4 --pp 4",
		 "--tp 4 x --pp 4 = 16 is more than the 8 GPUs"},
		{"plan --model tiny --gpus 1 --global-batch-size 32 --tp 2",
		 "--tp 2 is more than the 1 GPU"},
		{"run --model tiny --dp 2 --global-batch-size 4 --micro-batch-size 4",
		 "--global-batch-size 4 is 1 micro-batch of 4, which --dp 2 does not divide"},
		{"plan --model tiny --gpus 8 --global-batch-size 32 --top 0",
		 "--top: '0' is not a whole number from 1"},
		{"run --model tiny --dp 2 --dc-bw 1Gb/s",
		 "--dc-bw: the link between data centres needs --nodes-per-dc N"},
		{"coll -g=2",
		 "-g: '=2' is not a whole number from 1 to 65536"}, /* (getopt's too) */
		{"train-me", "unknown command 'train-me'"},
		{"train --data /nonexistent/file.txt", "--data /nonexistent/file.txt: cannot open"},
		{"train --data /dev/null", "not a regular file"},
		{"train --data build/empty.txt", "(the file is empty)"},
		{"train --data /", "--data /: not a regular file"},
		{"train --hidden-size 100 --num-attention-heads 3",
		 "hidden size 100 is not divisible by 3 attention heads"},
		{"train --model gpt5", "unknown preset 'gpt5'"},
		{"train --precision fp16", "'fp16' is not fp32 or bf16"},
		{"train --global-batch-size 5 --micro-batch-size 2",
		 "not a multiple of --micro-batch-size 2"},
		{"train --steps 0", "--train-iters: '0' is not a whole number"},
		{"train --model moe-tiny --num-experts 2 --moe-top-k 3",
		 "--moe-top-k 3: the router picks 1 or 2"},
		{"train --num-experts 1 --moe-top-k 2",
		 "--num-experts 1: fewer experts than the 2 each token picks (--moe-top-k"},
		{"train --mem-cap 0", "--mem-cap: a GPU needs more than 0 bytes"},
		{"train --lr 1e-4 --min-lr 1e-3",
		 "--min-lr 0.001 is above --lr 0.0001: the learning rate decays from --lr"},
		{"train --tp 2", "unknown option '--tp'"},
		{"train --inter-bw 10GB/s",
		 "--inter-bw: pemu train runs one GPU, which has no links (pemu run takes it)"},
		{"run --model tiny --tp 3", "--tp 3 does not divide the 4 attention heads"},
		{"run --model tiny --dp 3 --global-batch-size 8 --micro-batch-size 2",
		 "which --dp 3 does not divide"},
		{"run --model tiny --cp 3",
		 "--cp 3 cuts each sequence into 2 x 3 chunks (Megatron's"},
		{"run --model tiny --cp 4 --tp 2 --cp-comm-type a2a",
		 "gives each of the 4 context-parallel ranks a share of the 2 heads"},
		{"run --model moe-tiny --tp 2 --ep 4 --dp 2",
		 "--ep 4 with --tp 2: whole experts over ep ranks that are not the tp group take "
		 "each rank's own tokens, its sequence-parallel rows: add --sequence-parallel (as "
		 "Megatron-Core's MoE with tp), or give --ep 2 (the experts over the tp group) or "
		 "--expert-tensor-parallel-size 2 (each cut over tp)"},
		{"run --model tiny --cost-model exact",
		 "--cost-model: 'exact' is not roofline or calibrated"},
		{"run --model tiny --dp 2 --overlap-param-gather",
		 "--overlap-param-gather with --zero-stage 0: without a distributed optimizer"},
		{"run --model tiny --dp 2 --zero-stage 3 --overlap-param-gather",
		 "--overlap-param-gather with --zero-stage 3: ZeRO-3 gathers each layer's weights "
		 "before every use already"},
		{"run --model tiny --dp 2 --zero-stage 2 --no-overlap-grad-reduce",
		 "--no-overlap-grad-reduce with --zero-stage 2: stages 2 and 3 reduce each "
		 "micro-batch's gradients as backward makes them"},
		{"coll -g 4 --inject-fault link:1:4",
		 "--inject-fault link:1:4: the cluster has node 0"},
		{"run --model tiny --dp 2 --inject-fault fail:2@1",
		 "--inject-fault fail:2@1: the run has devices 0 to 1"},
		{"run --model tiny --inject-fault slow:0:0.5",
		 "--inject-fault slow:0:0.5: the factor must be from 1 to 1e6"},
		{"run --model tiny --cp 2 --cp-comm-type ring",
		 "--cp-comm-type: 'ring' is not p2p, all_gather or a2a"},
		{"run --model tiny --cp 2 --cp-comm-type all_gather --cp-layout contiguous",
		 "--cp-layout contiguous is the ring's (--cp-comm-type p2p)"},
		{"run --model tiny --cp 2 --cp-layout zigzag",
		 "--cp-layout: 'zigzag' is not balanced"},
		{"run --model tiny --cp 2 --tp 2 --tp-overlap oases",
		 "--cp 2 (p2p) with --tp-overlap oases: not combined in this build"},
		{"run --model tiny --pp 2 --schedule interleaved",
		 "--schedule interleaved: the 2 layers do not split into pp 2 x 2 virtual stages"},
		{"run --model tiny --num-layers 4 --pp 2 --schedule interleaved "
		 "--global-batch-size 12",
		 "the 3 micro-batches a step are not a multiple of pp 2"},
		{"run --model tiny --pp 3", "--pp 3 does not divide the 2 layers"},
		{"run --model tiny --pp 2 --schedule zb-h1 --mlp-chunks 2",
		 "--mlp-chunks with --schedule zb-h1"},
		{"run --model tiny --pp 2 --schedule helix --recompute selective",
		 "HelixPipe recomputes without attention"},
		{"run --model tiny --pp 2 --schedule helix --global-batch-size 12",
		 "--schedule helix: the 3 micro-batches a step are not a multiple of pp 2"},
		{"run --model tiny --pp 2 --schedule zb", "--schedule: 'zb' is not gpipe, 1f1b"},
		{"run --model tiny --vpp 2", "--vpp: virtual pipeline stages need --pp > 1"},
		{"run --model tiny --pp 2 --zero-stage 3", "pipelines run with ZeRO stage 0 or 1"},
		{"run --model tiny --recompute-method block", "'block' is not uniform"},
		{"run --model tiny --recompute-num-layers 2", "so it is 1"},
		{"run --model moe-tiny --moe-layer-freq 2", "'2' is not 1"},
		{"run --model tiny --max-position-embeddings 16",
		 "--max-position-embeddings 16 is under --seq-length 32"},
		{"plan --model tiny --gpus 8 --global-batch-size 16 --tp-first 1:1",
		 "--tp-first: the mixed degrees are the search's to choose"},
		{"plan --model tiny --gpus 8 --global-batch-size 16 --ep 2",
		 "the first says: --ep 2: the model has no MoE layers"},
		{"plan --model tiny --gpus 0 --global-batch-size 16", "--gpus: '0'"},
		{"plan --oases --model tiny --tp 2 --pp 2 --global-batch-size 8 --p2p-sync",
		 "--p2p-sync: a pipeline's, and pemu plan --oases searches no pipelines"},
		{"plan --oases --model tiny --tp 2 --gpus 8",
		 "--gpus: the layout search's option, not --oases's"},
		{"run --model tiny --zero-stage 4",
		 "--zero-stage: '4' is not a whole number from 0 to 3"},
		{"run --model tiny --sequence-parallel", "--sequence-parallel needs --tp > 1"},
		{"run --model tiny --tp 2 --tp-comm-overlap",
		 "--tp-comm-overlap needs --sequence-parallel (as Megatron-LM's: it overlaps "
		 "sequence parallelism's all-gathers and reduce-scatters)"},
		{"run --model tiny --tp-comm-overlap", "which needs --tp > 1"},
		{"run --model tiny --tp 2 --sequence-parallel --tp-comm-overlap --tp-overlap oases",
		 "--tp-comm-overlap with --tp-overlap oases: two orders of the same collectives"},
		{"plan --model tiny --gpus 8 --tp-comm-overlap "
		 "--no-async-tensor-model-parallel-allreduce",
		 "--tp-comm-overlap with --no-async-tensor-model-parallel-allreduce: two orders"},
		{"plan --oases --model tiny --tp 2 --tp-comm-overlap",
		 "--tp-comm-overlap with --oases: two orders of the same collectives"},
		{"run --model tiny --cross-entropy-fusion-impl te",
		 "--cross-entropy-fusion-impl without --cross-entropy-loss-fusion: it chooses the "
		 "fused cross-entropy's kernels, and the unfused one runs"},
		{"run --model tiny --cross-entropy-loss-fusion --cross-entropy-fusion-impl triton",
		 "--cross-entropy-fusion-impl: 'triton' is not native or te"},
		{"run --model tiny --dp 16 --nodes 1", "16 devices are more than the cluster has"},
		{"verify --model tiny --dp 2 --dry-run", "verify compares numbers"},
		{"run --bucket-size 0", "--bucket-size must be more than 0 bytes"},
		{"run --ddp-bucket-size 5 --bucket-size 1M",
		 "--bucket-size and --ddp-bucket-size both give the gradient bucket's size: give "
		 "one"},
		{"run --ddp-bucket-size 0", "--ddp-bucket-size"},
		{"run --model tiny --sample 10", "only pemu train generates text"},
		/* the rules of run/check.c's one checker, each with its message, in its order */
		{"run --model tiny --ep 2", "--ep 2: the model has no MoE layers (--num-experts)"},
		{"run --model moe-tiny --ep 3 --dp 3", "--ep 3 does not divide the 4 experts"},
		{"run --model moe-tiny --ep 2 --tp 4",
		 "--ep 2 with --tp 4: whole experts over ep ranks that are not the tp group"},
		{"run --model moe-tiny --ep 4 --tp 2 --sequence-parallel --dp 3 "
		 "--global-batch-size 12",
		 "--ep 4: whole experts over the tp x cp x dp ranks, and the 6 of --tp 2 --cp 1 "
		 "--dp 3 "
		 "do not split into groups of 4"},
		{"run --model moe-tiny --ep 4 --cp 2 --dp 3 --global-batch-size 12",
		 "--ep 4: the experts are spread over the data-parallel x context-parallel ranks, "
		 "and the 3 x 2 of --dp 3 --cp 2 do not split into groups of 4"},
		{"run --model moe-tiny --ep 4 --dp 2", "--dp 2 does not split into groups of 4"},
		{"run --model moe-tiny --ep 2 --dp 2 --pp 2 --num-layers 4 --schedule helix",
		 "--ep 2 with --schedule helix: not combined in this build"},
		{"run --model moe-tiny --tp 4 --ep 2 --dp 2 --expert-tensor-parallel-size 2",
		 "--expert-tensor-parallel-size 2: with --ep this build holds each expert whole "
		 "(1) "
		 "or cuts it as the dense MLP over --tp (4)"},
		{"run --model moe-tiny --moe-token-dispatcher-type allgather",
		 "expert parallelism's, which needs --ep > 1"},
		{"run --model moe-tiny --ep 2 --dp 2 --moe-token-dispatcher-type flex",
		 "--moe-token-dispatcher-type: 'flex' is not alltoall or allgather"},
		{"run --model tiny --cp-comm-type a2a",
		 "context parallelism's, which needs --cp > 1"},
		/* products refused, never wrapped */
		{"run --model tiny --micro-batch-size 1048576 --seq-length 1 --dp 512 --pp 2 "
		 "--num-layers 2 --dry-run",
		 "the default --global-batch-size, micro-batch 1048576 x dp 512 x 2 pp = "
		 "2147483648"},
		{"run --model tiny --tp 2048 --make-vocab-size-divisible-by 1048576 --dry-run",
		 "pads the vocabulary of 256 to 2147483648, more than pemu takes"},
		{"run --model tiny --micro-batch-size 1048576 --seq-length 4194304 --dry-run",
		 "is 4398046511104 tokens a micro-batch, more than pemu takes"},
		{"coll -g 2 -b 1K -e 1K --intra-lat 9e18ns",
		 "--intra-lat 9e18ns: a link's latency is at most 1000 s"},
		{"run --model tiny --inter-lat 1001s",
		 "--inter-lat 1001s: a link's latency is at most"},
		{"run --model tiny --intra-lat 1e30s",
		 "--intra-lat 1e30s: a link's latency is at most"},
		{"coll -g 2 --intra-bw 1e30GB/s", "--intra-bw 1e30GB/s: too large"},
		{"run --model tiny --mem-cap 99999999T",
		 "--mem-cap 99999999T: too large (a size is under 9.2e18 bytes"},
		/* execute mode's host memory, estimated by a dry-run before anything runs */
		{"coll -g 8 -b 64G -e 64G",
		 "execute mode would hold about 1.0 TiB of host memory (the emulated GPUs' tensors "
		 "as fp32 data, 128.0 GiB on the largest)"},
		{"verify --model gpt3-175b --mem-cap 4TB",
		 "of host memory (the emulated GPUs' tensors as fp32 data"},
		/* and what a run holds before it fails as its sizing dry-run does */
		{"train --model gpt3-175b --mem-cap 2T --steps 1",
		 "execute mode would hold about 2.0 TiB of host memory (the emulated GPUs' tensors "
		 "as fp32 data, 2.0 TiB on the largest) before it fails as its dry-run does "
		 "(device 0: out of memory allocating 'layers.75.fc.weight.grad'"},
		{"run --model gpt3-175b --dp 2 --mem-cap 2T --steps 1",
		 "execute mode would hold about 3.5 TiB of host memory (the emulated GPUs' tensors "
		 "as fp32 data, 1.7 TiB on the largest) before it fails as its dry-run does "
		 "(device 0: out of memory allocating 'adam state'"},
		{"run --model tiny --trace /nonexistent/dir/x.json",
		 "--trace: cannot write '/nonexistent/dir/x.json' (No such file or directory)"},
		{"run --model moe-tiny --ep 2 --dp 2 --expert-tensor-parallel-size 2",
		 "--expert-tensor-parallel-size 2: with --ep this build holds each expert whole "
		 "(1) "
		 "or cuts it as the dense MLP over --tp (1)"},
		{"run --model moe-tiny --tp 2 --expert-tensor-parallel-size 1",
		 "without --ep the experts are cut as the dense MLP, over --tp, so it is 2 here"},
		{"run --model tiny --dp 4096 --tp 4096",
		 "--dp 4096 x --tp 4096 x --pp 1 x --cp 1 is more devices than pemu runs"},
		{"run --model tiny --num-layers-per-virtual-pipeline-stage 3 --pp 2",
		 "pp 2 x 3 layers a chunk does not divide the 2 layers"},
		{"run --model tiny --num-layers-per-virtual-pipeline-stage 1",
		 "--vpp: virtual pipeline stages need --pp > 1"},
		{"run --model tiny --pp 2 --vpp 2 --schedule 1f1b",
		 "--vpp 2: virtual stages need --schedule interleaved"},
		{"run --model tiny --schedule gpipe",
		 "--schedule gpipe: a pipeline schedule needs --pp > 1"},
		{"run --model tiny --schedule interleaved",
		 "--schedule interleaved: a pipeline schedule needs --pp > 1"},
		{"run --model tiny --p2p-sync", "--p2p-sync: needs a pipeline, --pp > 1"},
		{"run --model tiny --num-layers 4 --pp 2 --schedule zb-h1 --p2p-sync",
		 "--p2p-sync: needs --schedule 1f1b or interleaved"},
		{"run --model tiny --num-layers 4 --pp 2 --schedule interleaved --p2p-sync",
		 "--p2p-sync: the interleaved schedule needs --pp > 2 (as Megatron-LM refuses it"},
		{"run --model tiny --num-layers 4 --pp 2 --tp 2 --tp-overlap oases --p2p-sync",
		 "--p2p-sync: not with --tp-overlap oases in this build"},
		{"run --model tiny --tp 2 --scatter-gather-tensors-in-pipeline",
		 "--scatter-gather-tensors-in-pipeline: needs a pipeline, --pp > 1"},
		{"run --model tiny --pp 2 --scatter-gather-tensors-in-pipeline",
		 "--scatter-gather-tensors-in-pipeline: needs --tp > 1"},
		{"run --model tiny --pp 2 --tp 2 --sequence-parallel "
		 "--scatter-gather-tensors-in-pipeline",
		 "with --sequence-parallel each rank's output is its own rows already"},
		{"train --vocab-size 100", "--vocab-size 100 (padded to 128): the data is bytes"},
		{"run --model tiny --vocab-size 100",
		 "--vocab-size 100 (padded to 128): the data is bytes"},
		{"run --model tiny --mlp-chunks 100000", "more chunks than the 128 tokens"},
		{"train --model tiny --hidden-dropout 1",
		 "--hidden-dropout 1: a probability under 1"},
		{"run --model tiny --hidden-dropout -0.1",
		 "--hidden-dropout: '-0.1' is not a number"},
		{"run --model tiny --attention-dropout 1",
		 "--attention-dropout 1: a probability under 1"},
		{"run --model tiny --hidden-size 2048 --num-attention-heads 2048 "
		 "--attention-dropout "
		 "0.1 --dry-run",
		 "--attention-dropout with 2048 heads: its masks are keyed by up to 1024 heads"},
		{"run --model tiny --tp 2 --sequence-parallel --seq-length 3 --micro-batch-size 1",
		 "--tp 2 does not divide the 3 tokens of a micro-batch"},
		{"run --model tiny --hidden-size 100 --num-attention-heads 3 --tp 3",
		 "hidden size 100 is not divisible by 3 attention heads"},
		{"run --model tiny --tp 3 --cp 2", "--tp 3 does not divide the 4 attention heads"},
		{"run --model tiny --pp 3 --vocab-size 100",
		 "--vocab-size 100 (padded to 128): the data is bytes"},
		{"", "usage: pemu"},
	};
	char out[8192];
	FILE *empty = fopen("build/empty.txt", "w");

	(void)state;
	assert_non_null(empty);
	fclose(empty);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = run(cases[i].args, 1, out, sizeof out);

		if (rc != 2 || !strstr(out, cases[i].says))
			fail_msg("pemu %s: exit %d, stderr:\n%s\nwant exit 2 and \"%s\"",
				 cases[i].args, rc, out, cases[i].says);
		if (*cases[i].args && lines(out) != 1)
			fail_msg("pemu %s: want one line, got:\n%s", cases[i].args, out);
	}
}

static void test_help(void **state)
{
	char out[16384];

	(void)state;
	assert_int_equal(run("--help", 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "  train "));
	assert_non_null(strstr(out, "  run "));
	assert_non_null(strstr(out, "  verify "));
	assert_non_null(strstr(out, "  coll "));
	assert_non_null(strstr(out, "rtx3090-nvlink"));
	assert_int_equal(run("coll --help", 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "--inter-bw"));
	assert_non_null(strstr(out, "-b, --minbytes SIZE"));
	assert_int_equal(run("run --help", 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "--tensor-model-parallel-size N"));
	assert_non_null(strstr(out, "--zero-stage 0-3"));
	assert_non_null(strstr(out, "--num-layers N"));
	/* every command's help ends with its exit codes (DESIGN.md: each documented there) */
	for (int i = 0; i < 5; i++) {
		static const char *const cmds[] = {"--help", "run --help", "train --help",
						   "coll --help", "plan --help"};

		static char help[1 << 16];
		char *e;

		assert_int_equal(run(cmds[i], 0, help, sizeof help), 0);
		assert_non_null(e = strstr(help, "Exit codes: 0 success; 1 "));
		for (char *c = e; *c; c++) /* (wherever the lines wrap) */
			*c = *c == '\n' ? ' ' : *c;
		assert_non_null(strstr(e, " 2 bad input (refused before anything runs); "));
		assert_non_null(
			strstr(e, " 74 the report or the --trace file could not be written."));
	}
}

/* "pemu args" with its standard output on /dev/full (a full disk): its exit code, and
 * its stderr in out[n]. */
static int run_on_full(const char *args, char *out, size_t n)
{
	const char *bin = getenv("PEMU") ? getenv("PEMU") : "build/pemu";
	char cmd[512];
	size_t len;
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/full", bin, args);
	assert_non_null(p = popen(cmd, "r"));
	len = fread(out, 1, n - 1, p);
	out[len] = '\0';
	st = pclose(p);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* An output that cannot be written is not a success: the report on a full standard
 * output, or the --trace file on a full disk, exit 74 and say so. */
static void test_output_lost(void **state)
{
	char out[4096];

	(void)state;
	if (access("/dev/full", W_OK))
		skip();
	assert_int_equal(run("run --model tiny --steps 1 --trace /dev/full", 1, out, sizeof out),
			 74);
	assert_non_null(strstr(out, "pemu run: cannot write trace '/dev/full'"));
	assert_int_equal(run_on_full("run --model tiny --steps 1 --json", out, sizeof out), 74);
	assert_non_null(strstr(out, "pemu: cannot write the standard output"));
	assert_int_equal(run_on_full("train --model tiny --steps 1", out, sizeof out), 74);
	assert_int_equal(run_on_full("coll -g 2 -e 64", out, sizeof out), 74);
	assert_int_equal(run_on_full("--help", out, sizeof out), 74);
	assert_int_equal(run_on_full("--version", out, sizeof out), 74);
	/* (a failed run keeps its own code) */
	assert_int_equal(run_on_full("run --model tiny --steps 1 --mem-cap 1KB", out, sizeof out),
			 1);
	assert_int_equal(run("run --model tiny --steps 1 --json", 0, out, sizeof out), 0);
}

/* The parser the fuzzer drives (tests/fuzz/cli.c): cmd_run_parse reads a command line
 * without running it, and a refusal goes through cli_exit_hook, back to the caller with
 * code 2, where the program would have exited. */
static jmp_buf parse_back;

static void parse_refused(int code)
{
	longjmp(parse_back, code);
}

static void test_parse_only(void **state)
{
	char *good[] = {"run", "--model", "tiny", "--dp", "2", "--tp", "2", NULL};
	char *bad[] = {"run", "--model", "tiny", "--tp", "3", NULL};
	volatile int refused = 0;

	(void)state;
	cli_exit_hook = parse_refused;
	switch (setjmp(parse_back)) {
	case 0:
		assert_int_equal(cmd_run_parse(7, good, 0), 0);
		break;
	default:
		refused = 1;
	}
	assert_int_equal(refused, 0);
	switch (setjmp(parse_back)) {
	case 0:
		cmd_run_parse(5, bad, 0);
		break;
	case CLI_EXIT_USAGE:
		refused = 2;
		break;
	default:
		refused = 3;
	}
	assert_int_equal(refused, 2);
	cli_exit_hook = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_parse_only),
		cmocka_unit_test(test_help),
		cmocka_unit_test(test_output_lost),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
