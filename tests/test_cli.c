/* The pemu program's commands as a user meets them (bad input and --help are
 * test_cli_input.c's): pemu coll checks its results (0 wrong), reports say what the run
 * measured and name its defaults, failures are reports, and --json parses to the fields
 * scripts read. Runs the binary named by $PEMU (default build/pemu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <math.h>

#include "cli_test.h"
#include "common.h"

static void test_coll_checks_every_op(void **state)
{
	static const char *const ops[] = {"all-reduce", "reduce-scatter", "all-gather",
					  "all-to-all", "broadcast",      "reduce",
					  "send-recv"};
	char args[256], out[16384];

	(void)state;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		/* (the first with --timeline, which goes to stderr: stdout stays CSV) */
		snprintf(args, sizeof args,
			 "coll --op %s -g 12 --nodes 2 -b 4 -e 1M -f 16 -n 2 -w 1 -r 3 --csv%s",
			 ops[i], i ? "" : " --timeline");
		assert_int_equal(run(args, 0, out, sizeof out), 0);
		/* Header plus one line per size (4, 64, 1K, 16K, 256K), and no wrong element;
		 * for the ops that cut the size over the 12, 4 and 64 bytes are both one
		 * element a member, 48 bytes: one row */
		assert_int_equal(lines(out), i >= 1 && i <= 3 ? 5 : 6);
		for (const char *l = strchr(out, '\n') + 1; *l; l = strchr(l, '\n') + 1) {
			unsigned long long size, count, wrong;
			double t, alg, bus, wall;
			char op[32];

			assert_int_equal(sscanf(l, "%31[^,],12,%llu,%llu,%lf,%lf,%lf,%llu,%lf", op,
						&size, &count, &t, &alg, &bus, &wrong, &wall),
					 8);
			assert_string_equal(op, ops[i]);
			assert_int_equal(wrong, 0);
			assert_true(t > 0 && alg > 0 && bus > 0);
		}
	}
}

static void test_coll_json(void **state)
{
	char out[16384];

	(void)state;
	assert_int_equal(run("coll -g 8 -b 1M -e 4M -f 4 --json", 0, out, sizeof out), 0);
	assert_int_equal(out[0], '{');
	assert_non_null(strstr(out, "\"command\":\"coll\""));
	assert_non_null(
		strstr(out, "\"results\":[{\"size\":1048576,\"count\":262144,\"time_us\":"));
	assert_non_null(strstr(out, "\"wrong\":0"));
	assert_non_null(strstr(out, "\"passed\":true}"));
	/* 1 MiB on 8 A100s under the default, calibrated, model: NCCL's LL128 over NVLink3,
	 * 8.1 us + 14 * 4.1 us + 14/8 * 1 MiB / (0.9375 * 300 GB/s) = 72.025 us (ceil to ns) */
	assert_non_null(strstr(out, "\"cost_model\":\"calibrated\""));
	assert_non_null(strstr(out, "\"time_us\":72.025"));
	/* under the roofline: 14 * 3 us + 14/8 * 1 MiB / 300 GB/s = 48.117 us */
	assert_int_equal(run("coll -g 8 -b 1M -e 1M --json --dry-run --cost-model roofline", 0, out,
			     sizeof out),
			 0);
	assert_non_null(strstr(out, "\"wrong\":null"));
	assert_non_null(strstr(out, "\"time_us\":48.117"));
	/* an op without a reduction or a root says so: "none", null (the table's -1) */
	assert_int_equal(run("coll -g 4 --op all-gather -b 1K -e 1K --json", 0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"op\":\"all-gather\",\"devices\":4,\"redop\":\"none\","
				    "\"root\":null,"));
	assert_int_equal(run("coll -g 4 --op reduce -r 3 -b 1K -e 1K --json", 0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"redop\":\"sum\",\"root\":3,"));
	/* a short option's value attached, as nccl-tests takes it (getopt): -g2 -b1K */
	assert_int_equal(run("coll -g2 -b1K -e1K -n1 -w0 --json", 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "\"devices\":2,"));
	assert_non_null(strstr(out, "\"results\":[{\"size\":1024,"));
	/* the timeline's scale in the unit its span takes: 153.2 us over 100 columns */
	assert_int_equal(run("coll -g 4 -b 1M -e 1M -n 3 -w 0 --timeline", 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "timeline: 0 .. 153.2 us of virtual time, 100 columns (one "
				    "column = 1.532 us)"));
	/* a root is any rank of the group, however large */
	assert_int_equal(run("coll -g 4096 --op broadcast -r 2000 --dry-run -b 1K -e 1K", 0, out,
			     sizeof out),
			 0);
	assert_non_null(strstr(out, "  float  none  2000 "));
}

/* Per-figure overrides reach the clock. 16 devices on nodes 0 and 1 of 4 run the
 * roofline's hierarchical all-reduce of 16 MiB: reduce-scatter and all-gather over NVLink4 (3 us,
 * 450 GB/s), each 7 * 3 us + 7/8 * 16 MiB / 450 GB/s = 21000 + 32623 ns; between the nodes
 * 2 * 7 us + 2/16 * 16 MiB / 10 GB/s = 14000 + 209716 ns. In all 330.962 us. */
static void test_coll_overrides(void **state)
{
	char out[16384];

	(void)state;
	assert_int_equal(
		run("coll -g 16 --cluster dgx-h100 --nodes 4 --inter-bw 10GB/s --inter-lat 7us "
		    "-b 16M -e 16M -n 1 -w 0 --dry-run --json --cost-model roofline",
		    0, out, sizeof out),
		0);
	assert_non_null(strstr(out, "\"nodes\":4,\"gpus_per_node\":8,\"devices\":16"));
	assert_non_null(strstr(out, "\"bw_bytes_per_s\":10000000000,\"lat_ns\":7000"));
	assert_non_null(strstr(out, "\"time_us\":330.962"));
	/* the link between data centres, named in the report where there is one: 2 members
	 * a data centre apart, 2 x 2 ms + 1 MiB / 125 MB/s = 12388.608 us */
	assert_int_equal(run("coll -g 2 --gpus-per-node 1 --nodes 2 --nodes-per-dc 1 --dc-bw 1Gb/s "
			     "--dc-lat 2ms -b 1M -e 1M -n 1 -w 0 --dry-run --json --cost-model "
			     "roofline",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"nodes_per_dc\":1,\"dc\":{\"name\":\"inter-DC\","
				    "\"bw_bytes_per_s\":125000000,\"lat_ns\":2000000},"));
	assert_non_null(strstr(out, "\"time_us\":12388.608"));
	assert_int_equal(run("coll -g 2 --gpus-per-node 1 --nodes 2 --nodes-per-dc 1 -b 1M -e 1M "
			     "-n 1 -w 0 --dry-run",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "; between data centres of 1 node inter-DC "));
}

/* GPT-3 175B on one 80 GB GPU: the OOM report, not a crash; with a 4 TB cap it fits and
 * memory is printed by category (16 bytes a parameter in bf16: 2 + 2 + 12). */
static void test_train_gpt3_dry_run(void **state)
{
	char out[16384];

	(void)state;
	assert_int_equal(run("train --model gpt3-175b --dry-run --steps 1", 1, out, sizeof out), 1);
	assert_non_null(strstr(out, "device 0: out of memory allocating"));
	assert_non_null(strstr(out, "cap 85899345920 bytes (80.0 GiB)"));
	assert_int_equal(run("train --model gpt3-175b --dry-run --steps 1 --mem-cap 4TB", 0, out,
			     sizeof out),
			 0);
	/* 50257 padded to 50304 as Megatron does: 47 more rows of 12288 */
	assert_non_null(strstr(out, "174604836864 parameters"));
	assert_non_null(strstr(out, "vocabulary 50257 padded to 50304"));
	assert_non_null(strstr(out, "param 325.2 GiB, grad 325.2 GiB, optim 1.9 TiB, act"));
}

/* tiny trains from the command line, and --json carries the report's fields. */
static void test_train_json(void **state)
{
	char out[65536];
	double first, last;
	const char *p;

	(void)state;
	assert_int_equal(
		run("train --model tiny --steps 30 --json --sample 20", 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "\"command\":\"train\""));
	assert_non_null(strstr(out, "\"parameters\":118528"));
	assert_non_null(strstr(out, "\"time\":{\"step_time_s\":"));
	assert_non_null(strstr(out, "\"memory\":[{\"device\":0,\"cap\":"));
	assert_non_null(strstr(out, "\"sample\":\""));
	p = strstr(out, "\"loss\":");
	assert_non_null(p);
	first = atof(p + 7);
	p = strstr(out, "{\"step\":30,\"loss\":");
	assert_non_null(p);
	last = atof(p + 19);
	assert_true(first > 5.3 && last < first - 0.5);
	{ /* the text sample: a backslash as \x5c, so that \xNN always means one byte */
		FILE *f = fopen("build/backslashes.txt", "w");

		assert_non_null(f);
		for (int i = 0; i < 5000; i++)
			fputs("a\\b\n", f);
		fclose(f);
		assert_int_equal(run("train --model tiny --steps 60 --lr 0.01 --data "
				     "build/backslashes.txt --sample 20",
				     0, out, sizeof out),
				 0);
		assert_non_null(strstr(out, "unprintable bytes and \\ as \\xNN"));
		assert_non_null(strstr(out, "\na\\x5cb\n"));
		remove("build/backslashes.txt");
	}
	/* fp32 gradients: 4 bytes a parameter in the grad category, and said in the config */
	assert_int_equal(run("train --model tiny --steps 1 --dry-run --json --precision bf16 "
			     "--accumulate-allreduce-grads-in-fp32",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"accumulate_allreduce_grads_in_fp32\":true"));
	assert_non_null(strstr(out, "\"grad\":474112,")); /* 4 x 118528 */
	/* a dry-run has no loss: null (the table's n/a), in train's report and run's */
	assert_non_null(strstr(out, "{\"step\":1,\"loss\":null,\"step_time_s\":"));
	assert_int_equal(
		run("run --model tiny --steps 1 --dp 2 --dry-run --json", 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "{\"step\":1,\"loss\":null,\"step_time_s\":"));
	/* Megatron's --grad-reduce-in-bf16 wins over it, before or after */
	for (int after = 0; after < 2; after++) {
		assert_int_equal(run(after ? "train --model tiny --steps 1 --dry-run --json --bf16 "
					     "--accumulate-allreduce-grads-in-fp32 "
					     "--grad-reduce-in-bf16"
					   : "train --model tiny --steps 1 --dry-run --json --bf16 "
					     "--grad-reduce-in-bf16 "
					     "--accumulate-allreduce-grads-in-fp32",
				     0, out, sizeof out),
				 0);
		assert_null(strstr(out, "accumulate_allreduce_grads_in_fp32"));
		assert_non_null(strstr(out, "\"grad\":237056,")); /* 2 x 118528 */
	}
}

/* A device's kernels share the host threads the devices leave (models/team.h;
 * OPENBLAS_NUM_THREADS of them here): pemu train's one device, pemu run's one, and pemu
 * verify's two and then its reference's one. The report (losses, virtual times, memory,
 * verify's errors, the sample) is the same byte for byte with 1, 2 and 3, but for the
 * wall time. */
static void test_host_threads(void **state)
{
	static const char *const cmds[] = {
		"train --model small --steps 3 --json --sample 30",
		"run --model small --steps 2 --json",
		"verify --model tiny --dp 2 --steps 2 --json",
	};
	static char out[3][65536];

	(void)state;
	for (size_t c = 0; c < sizeof cmds / sizeof *cmds; c++) {
		for (int t = 0; t < 3; t++) {
			char *w, n[2] = {(char)('1' + t), 0};

			setenv("OPENBLAS_NUM_THREADS", n, 1);
			assert_int_equal(run(cmds[c], 0, out[t], sizeof out[t]), 0);
			w = strstr(out[t], "\"wall_s\":");
			assert_non_null(w);
			*w = '\0'; /* the wall time and what follows it: compared below */
			w = strpbrk(w + 1, ",}");
			assert_non_null(w);
			memmove(out[t] + strlen(out[t]) + 1, w, strlen(w) + 1);
		}
		setenv("OPENBLAS_NUM_THREADS", "1", 1);
		for (int t = 1; t < 3; t++) {
			assert_string_equal(out[0], out[t]);
			assert_string_equal(out[0] + strlen(out[0]) + 1,
					    out[t] + strlen(out[t]) + 1);
		}
	}
}

/* On a CPU with AVX2 whose model OpenBLAS does not know, it loads its baseline kernels
 * (Prescott) and pemu runs itself again with kernels the CPU can run (cmd_blas_kernels);
 * with OPENBLAS_CORETYPE set, the user's choice stands. OPENBLAS_VERBOSE=2 makes an
 * OpenBLAS built for many CPUs (Debian's) name the kernels it loads, on stderr. */
static void test_blas_kernels(void **state)
{
	char out[4096], *last;

	(void)state;
	setenv("OPENBLAS_VERBOSE", "2", 1);
	unsetenv("OPENBLAS_CORETYPE");
	assert_int_equal(run("--version", 1, out, sizeof out), 0);
	last = strrchr(out, ':');
	if (!strstr(out, "Core: ")) { /* an OpenBLAS built for one CPU: it picks nothing */
		unsetenv("OPENBLAS_VERBOSE");
		skip();
	}
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		assert_null(strstr(last, "Prescott"));
	setenv("OPENBLAS_CORETYPE", "Prescott", 1);
	assert_int_equal(run("--version", 1, out, sizeof out), 0);
	assert_string_equal(out, "Core: Prescott\n");
	unsetenv("OPENBLAS_CORETYPE");
	unsetenv("OPENBLAS_VERBOSE");
}

/* verify from the command line: a passing configuration exits 0 and says so, with the
 * JSON report of docs/architecture.md in --json. */
static void test_verify(void **state)
{
	char out[65536];

	(void)state;
	assert_int_equal(run("verify --model tiny --dp 2 --tp 2 --zero-stage 3 "
			     "--global-batch-size 8 "
			     "--micro-batch-size 2",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "dp 2 x tp 2 = 4 devices, ZeRO stage 3"));
	assert_non_null(strstr(out, "3 steps")); /* verify's default */
	assert_non_null(strstr(out, "over 4 GPUs\n"));
	assert_non_null(strstr(out, "verify: PASSED"));
	assert_int_equal(
		run("verify --model moe-tiny --dp 2 --tp 2 --steps 2 --global-batch-size 4 "
		    "--micro-batch-size 2 --json",
		    0, out, sizeof out),
		0);
	assert_non_null(strstr(out, "\"command\":\"verify\""));
	assert_non_null(strstr(out, "\"ref_loss\":"));
	assert_non_null(strstr(out, "\"passed\":true"));
	assert_non_null(strstr(out, "\"max_abs_err\":{\"loss\":"));
	assert_non_null(strstr(out, "\"routing_flips\":0,"));
	/* where each worst error was, by name, and what the parameter check left out of what */
	assert_non_null(strstr(out, "\"worst\":{\"loss_step\":1,\"grad\":\"layers."));
	assert_non_null(strstr(out, ",\"grad_later_step\":2,\"param\":\"layers."));
	assert_non_null(strstr(out, ",\"param_entries\":218048,"));
	assert_non_null(strstr(out, "\"exposed_comm_s\":"));
	assert_non_null(strstr(out, "\"by_collective\":{\"all-reduce\""));
	assert_non_null(strstr(out, "{\"device\":3,"));
	/* a long run, where rounding could move every parameter past half the tolerance:
	 * none compared, null, not a worst error of 0 (the gradients of the steps kept are) */
	assert_int_equal(run("verify --model moe-tiny --ep 2 --dp 2 --steps 150 --seed 1 --json", 0,
			     out, sizeof out),
			 1); /* (a routing flip, by then) */
	assert_non_null(strstr(out, "\"param\":null},\"max_abs_err\""));
	assert_non_null(strstr(out, "\"param\":null},\"tolerance\""));
	assert_non_null(strstr(out, "\"param\":null},\"noise_driven_params\":218048,"
				    "\"param_entries\":218048,"));
	/* the experts' grid, named: whole experts over ranks spanning tp */
	assert_int_equal(run("verify --model moe-tiny --tp 2 --sequence-parallel --dp 2 --ep 4 "
			     "--steps 2 --json",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"expert_tensor_parallel_size\":1,\"experts_over\":"
				    "\"tp_cp_dp\""));
	/* the defaults, Megatron's: the calibrated clock, the gradients after backward */
	assert_non_null(strstr(out, "\"cost_model\":\"calibrated\""));
	assert_non_null(strstr(out, "\"overlap_grad_reduce\":false"));
	assert_non_null(strstr(out, "\"passed\":true"));
	/* and the others, named in the report */
	assert_int_equal(run("run --model tiny --dp 2 --steps 1 --cost-model roofline "
			     "--overlap-grad-reduce --json",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"cost_model\":\"roofline\""));
	assert_non_null(strstr(out, "\"overlap_grad_reduce\":true"));
	/* NVLink SHARP on a DGX H100 (emu/topo.c): 64 MiB in 8.1 + 55 us + 64 MiB at 269.1
	 * GB/s; --no-nvls: the ring by Simple (NCCL's model prefers it to LL128 from 34 MiB),
	 * 8.1 + 14 x 3.4 us + 7/4 x 64 MiB at 0.79 x 450 = 355.5 GB/s = 8.1 + 47.6 + 330.354
	 * = 386.054 us */
	assert_int_equal(run("coll -g 8 -b 64M -e 64M -n 1 -w 0 --cluster dgx-h100 --dry-run "
			     "--cost-model calibrated",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, " 312.48 "));
	assert_int_equal(run("coll -g 8 -b 64M -e 64M -n 1 -w 0 --cluster dgx-h100 --dry-run "
			     "--cost-model calibrated --no-nvls",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, " 386.05 "));
	assert_int_equal(run("run --model tiny --cluster dgx-h100 --dp 2 --steps 1 --cost-model "
			     "calibrated --no-nvls --json",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"cost_model\":\"calibrated\",\"nvls\":false}"));
	/* an odd sequence, with tp and a pipeline: every position as the serial model's (7
	 * once took position 6 to 3, as halves for context parallelism) */
	assert_int_equal(run("verify --model tiny --seq-length 7 --tp 2 --pp 2 --num-layers 4 "
			     "--global-batch-size 4 --micro-batch-size 1 --steps 1",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "verify: PASSED"));
	/* a slowed device in verify: the serial reference runs without the faults */
	assert_int_equal(run("verify --model tiny --dp 2 --steps 2 --inject-fault slow:1:2", 0, out,
			     sizeof out),
			 0);
	assert_non_null(strstr(out, "verify: PASSED"));
}

/* A training that diverges: pemu run stops at the step whose loss is not finite, saying
 * so (exit 1); pemu verify runs on and says both runs diverged, in JSON that is JSON
 * (no inf or nan: null). */
static void test_divergence(void **state)
{
	static char out[65536];

	(void)state;
	assert_int_equal(
		run("run --model tiny --dp 2 --lr 10 --clip-grad 0 --steps 5", 1, out, sizeof out),
		1);
	assert_non_null(strstr(out, "at step 3: training diverged (try a lower --lr"));
	assert_non_null(strstr(out, "pemu run: the run failed (training diverged):"));
	assert_int_equal(run("verify --model tiny --dp 2 --lr 10 --clip-grad 0 --steps 5", 0, out,
			     sizeof out),
			 1);
	assert_non_null(strstr(out, "the reference diverged too"));
	assert_non_null(strstr(out, "verify: FAILED (training diverged)"));
	assert_int_equal(run("verify --model tiny --dp 2 --lr 10 --clip-grad 0 --steps 5 --json", 0,
			     out, sizeof out),
			 1);
	assert_non_null(strstr(out, "\"reference_diverged\":true"));
	assert_non_null(strstr(out, "\"loss\":null"));
	assert_null(strstr(out, "inf"));
	assert_null(strstr(out, "nan"));
}

/* A duration past the virtual clock's horizon fails the run with why (exit 1), never a
 * wrapped, negative time, and stops it at the step that passed it (no step line shows
 * the clamped time), for the serial trainer, a parallel run and verify's reference. */
static void test_clock_horizon(void **state)
{
	static const char *const cmds[] = {
		"train --model gpt3-175b --dry-run --mem-cap 4TB --hbm-bw 1B/s --steps 2",
		"run --model gpt3-175b --dry-run --mem-cap 4TB --hbm-bw 1B/s --steps 2",
		"run --model gpt3-175b --dry-run --mem-cap 4TB --hbm-bw 1B/s --steps 2 "
		"--cost-model "
		"roofline"};
	static char out[65536];

	(void)state;
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		assert_int_equal(run(cmds[i], 1, out, sizeof out), 1);
		assert_non_null(
			strstr(out, "the virtual clock passed its horizon (2^62 ns, 146 years)"));
		assert_non_null(strstr(out, "the run failed (clock horizon):"));
		assert_null(strstr(out, "step     1/2"));
	}
	assert_int_equal(run("coll -g 2 -b 1G -e 1G --dry-run --intra-bw 1B/s", 1, out, sizeof out),
			 1);
	assert_non_null(strstr(out, "the virtual clock passed its horizon"));
}

/* The JSON number after "key": in s. */
static double json_num(const char *s, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof k, "\"%s\":", key);
	p = strstr(s, k);
	assert_non_null(p);
	return strtod(p + strlen(k), NULL);
}

/* The mean time of a send in the JSON report of "pemu args" (comm.by_collective.send of
 * its first device), in ns. */
static double send_ns(const char *args)
{
	static char out[1 << 18];
	double calls, t;
	const char *p;

	assert_int_equal(run(args, 0, out, sizeof out), 0);
	p = strstr(out, "\"send\":{\"calls\":");
	assert_non_null(p);
	calls = strtod(p + strlen("\"send\":{\"calls\":"), NULL);
	assert_true(calls > 0);
	t = json_num(p, "time_s");
	return t * 1e9 / calls;
}

/* Sends as NCCL splits them over its channels on an H100 node (emu/coll.h), by the
 * communicator they run on: a micro-batch's 4096 tokens of hidden 4096 in bf16, 32 MiB,
 * on 1F1B's pipeline group of 4 (Megatron-LM's batched sends) goes on 8 channels of 21
 * GB/s, parts of 4 MiB and a chunk of 512 KiB more, 8100 + 3400 + 199729 + 199729 / 8 =
 * 236195 ns, as the interleaved schedule's batched with --p2p-sync
 * (--no-overlap-p2p-communication); overlapped (its default), one by one on the pair's
 * communicator, on 16, 11500 + 99865 + 99865 / 4 = 136331 ns, as the context-parallel
 * ring's 32 MiB of K and V (Transformer Engine's); an A100's NVLink3 at its link's rate,
 * 8100 + 10800 + 2^25 / 234 GB/s. */
static void test_send_channels(void **state)
{
	static char out[1 << 14];
	static const char *const pp =
		"run --dry-run --model llama-7b-shape --num-layers 8 --seq-length 4096 --pp 4 "
		"--global-batch-size 8 --micro-batch-size 1 --steps 1 --json";
	char args[512];

	(void)state;
	snprintf(args, sizeof args, "%s --cluster dgx-h100", pp);
	assert_true(send_ns(args) == 236195);
	snprintf(args, sizeof args,
		 "%s --cluster dgx-h100 --schedule interleaved "
		 "--num-layers-per-virtual-pipeline-stage 1",
		 pp);
	assert_true(send_ns(args) == 136331);
	strcat(args, " --p2p-sync");
	assert_true(send_ns(args) == 236195);
	assert_true(send_ns("run --dry-run --cluster dgx-h100 --model llama-7b-shape --num-layers "
			    "2 --seq-length 8192 --cp 4 --cp-comm-type p2p --global-batch-size 1 "
			    "--micro-batch-size 1 --steps 1 --json") == 136331);
	snprintf(args, sizeof args, "%s --cluster dgx-a100", pp);
	assert_true(send_ns(args) == 8100 + 10800 + ceil(33554432 / 234e9 * 1e9));
	/* nccl-tests' sendrecv among 8: 64 MiB on 4 channels of 21 GB/s, parts of 16 MiB and a
	 * chunk of 512 KiB more: 8100 + 3400 + 33/32 x 2^26 / 84 GB/s (emu/coll_time.c) */
	assert_int_equal(run("coll --op send-recv -g 8 --cluster dgx-h100 --dry-run -b 64M -e 64M "
			     "--json",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"time_us\":835.382"));
}

/* time.comm_exposed_s is the communication the compute stream waited for: under a
 * pipeline, far less than its idle time (exposed_comm_s, which counts the bubble), and
 * at most the communication; with blocking tensor-parallel all-reduces alone, all of the
 * idle time. */
static void test_comm_exposed(void **state)
{
	static char out[1 << 18];
	double comm, idle, exposed, step;

	(void)state;
	assert_int_equal(
		run("run --model gpt2-124m --dry-run --pp 4 --steps 1 --json", 0, out, sizeof out),
		0);
	comm = json_num(out, "comm_s");
	idle = json_num(out, "exposed_comm_s");
	exposed = json_num(out, "comm_exposed_s");
	assert_true(exposed > 0 && exposed <= comm && comm < idle);
	assert_int_equal(
		run("run --model gpt2-124m --dry-run --tp 4 --steps 1 --json", 0, out, sizeof out),
		0);
	assert_true(fabs(json_num(out, "comm_exposed_s") - json_num(out, "exposed_comm_s")) < 1e-9);
	/* the input gradients' all-reduces under the weight gradients' GEMMs, as Megatron-LM
	 * posts them; after them, exposed, with Megatron's flag of before 2022 (said in the
	 * report's config) */
	step = json_num(out, "step_time_s");
	assert_null(strstr(out, "async_tensor_model_parallel_allreduce"));
	assert_int_equal(run("run --model gpt2-124m --dry-run --tp 4 --steps 1 --json "
			     "--no-async-tensor-model-parallel-allreduce",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"async_tensor_model_parallel_allreduce\":false"));
	assert_true(json_num(out, "step_time_s") > step);
	/* Megatron-LM's 1F1B sends and receives, waited for batch by batch (said in the
	 * report's config): the step longer than with the sends overlapped */
	assert_int_equal(run("run --model gpt2-124m --dry-run --pp 4 --global-batch-size 16 "
			     "--steps 1 --json",
			     0, out, sizeof out),
			 0);
	step = json_num(out, "step_time_s");
	assert_null(strstr(out, "p2p_sync"));
	assert_int_equal(run("run --model gpt2-124m --dry-run --pp 4 --global-batch-size 16 "
			     "--steps 1 --json --p2p-sync",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"p2p_sync\":true"));
	assert_true(json_num(out, "step_time_s") > step);
	/* Megatron-LM's scatter/gather of 2021 (said in the report's config too) */
	assert_int_equal(run("run --model gpt2-124m --dry-run --pp 2 --tp 2 --global-batch-size 8 "
			     "--steps 1 --json --scatter-gather-tensors-in-pipeline",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"scatter_gather_tensors_in_pipeline\":true"));
	/* Transformer Engine's overlap (said in the report's config): sp's collectives fused
	 * into the GEMMs, less of them exposed than sp's alone */
	assert_int_equal(run("run --model gpt2-124m --dry-run --tp 4 --sequence-parallel "
			     "--steps 1 --json",
			     0, out, sizeof out),
			 0);
	exposed = json_num(out, "comm_exposed_s");
	assert_null(strstr(out, "tp_comm_overlap"));
	assert_int_equal(run("run --model gpt2-124m --dry-run --tp 4 --sequence-parallel "
			     "--tp-comm-overlap --steps 1 --json",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"tp_comm_overlap\":true"));
	assert_true(json_num(out, "comm_exposed_s") < exposed);
	/* the fused cross-entropy (said in the report's config, Megatron's names; the
	 * unfused, its default, not): fewer bytes through HBM, a shorter step */
	assert_int_equal(
		run("run --model gpt2-124m --dry-run --tp 2 --steps 1 --json", 0, out, sizeof out),
		0);
	step = json_num(out, "step_time_s");
	assert_null(strstr(out, "cross_entropy"));
	assert_int_equal(run("run --model gpt2-124m --dry-run --tp 2 --steps 1 --json "
			     "--cross-entropy-fusion-impl te --cross-entropy-loss-fusion",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"cross_entropy_loss_fusion\":true,"
				    "\"cross_entropy_fusion_impl\":\"te\""));
	assert_true(json_num(out, "step_time_s") < step);
	/* steps unlike each other (MoE routing, weights gathered in the next step): the
	 * waiting is the last step's, as its idle time is, and never more than it */
	assert_int_equal(
		run("run --model moe-tiny --dp 4 --ep 2 --steps 3 --json", 0, out, sizeof out), 0);
	assert_true(json_num(out, "comm_exposed_s") <= json_num(out, "exposed_comm_s") + 1e-12);
	assert_int_equal(run("run --model gpt2-124m --dry-run --dp 8 --use-distributed-optimizer "
			     "--overlap-param-gather --steps 2 --json",
			     0, out, sizeof out),
			 0);
	assert_true(json_num(out, "comm_exposed_s") <= json_num(out, "exposed_comm_s") + 1e-12);
}

/* A run that fails with --json still prints its report, the error in it (what ran out
 * of memory, where), and writes its trace up to the failure. */
static void test_failed_json(void **state)
{
	static char out[1 << 18];
	FILE *f;
	long len;

	(void)state;
	remove("build/failed.trace.json");
	assert_int_equal(run("run --model gpt2-124m --mem-cap 1GB --dry-run --steps 1 --json "
			     "--trace build/failed.trace.json",
			     0, out, sizeof out),
			 1);
	assert_true(out[0] == '{');
	assert_non_null(strstr(out, "\"error\":{\"kind\":\"device out of memory\",\"report\":\""));
	/* the preset's attention dropout keeps the dropped probabilities (Megatron's path) */
	assert_non_null(strstr(out, "out of memory allocating 'attention probabilities dropped'"));
	assert_non_null(strstr(out, "\"memory\":["));
	f = fopen("build/failed.trace.json", "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fclose(f);
	assert_true(len > 1000); /* the ops up to the failure */
	/* pemu train's too, in execute mode */
	assert_int_equal(run("train --model tiny --lr 10 --clip-grad 0 --json", 0, out, sizeof out),
			 1);
	assert_true(out[0] == '{');
	assert_non_null(strstr(out, "{\"command\":\"train\",\"config\":{"));
	assert_non_null(strstr(out, "\"kind\":\"training diverged\",\"report\":\"device 0: the "
				    "loss is inf at step 3: training diverged"));
	assert_non_null(strstr(out, "\"memory\":["));
	/* the steps finished before it, and only those */
	assert_non_null(strstr(out, "\"steps\":[{\"step\":1,\"loss\":5.55869389,"));
	assert_non_null(strstr(out, "{\"step\":2,\"loss\":"));
	assert_null(strstr(out, "{\"step\":3,"));
	{ /* pemu run's: a device that dies as step 3 begins leaves steps 1 and 2, as the run
	   * that went on has them */
		static char whole[1 << 16];
		const char *a, *b, *end;

		assert_int_equal(run("run --model tiny --dp 2 --tp 2 --steps 4 --json", 0, whole,
				     sizeof whole),
				 0);
		assert_int_equal(run("run --model tiny --dp 2 --tp 2 --steps 4 --inject-fault "
				     "fail:2@3 --json",
				     0, out, sizeof out),
				 1);
		assert_non_null(strstr(out, "\"kind\":\"device failure\""));
		assert_non_null(a = strstr(whole, "\"steps\":[{\"step\":1,"));
		assert_non_null(end = strstr(a, ",{\"step\":3,"));
		assert_non_null(b = strstr(out, "\"steps\":[{\"step\":1,"));
		assert_memory_equal(a, b, (size_t)(end - a));
		assert_true(b[end - a] == ']');
	}
	/* and a folded dry-run's (one device simulated for the 8): the 10 steps before the
	 * clock passed its horizon, as unfolded */
	for (int fold = 0; fold < 2; fold++) {
		assert_int_equal(run(fold ? "run --model gpt2-124m --dp 8 --dry-run --steps 14 "
					    "--intra-bw 1B/s --json"
					  : "run --model gpt2-124m --dp 8 --dry-run --steps 14 "
					    "--intra-bw 1B/s --json --fold off",
				     0, out, sizeof out),
				 1);
		assert_non_null(strstr(out, "\"kind\":\"clock horizon\""));
		assert_non_null(strstr(out, "{\"step\":10,\"loss\":null,"));
		assert_null(strstr(out, "{\"step\":11,"));
	}
	/* verify's reference failing where the layout fits (tp 2 halves the weights): the
	 * report, its error the reference's */
	assert_int_equal(run("verify --model tiny --steps 2 --tp 2 --mem-cap 2196KB --json", 0, out,
			     sizeof out),
			 1);
	assert_true(out[0] == '{');
	assert_non_null(strstr(out,
			       "\"error\":{\"kind\":\"device out of memory\",\"in\":"
			       "\"reference\",\"report\":\"device 0: out of memory allocating"));
	assert_non_null(strstr(out, "\"memory\":[{"));
}

/* A trace keeps devices 0 to 15 unless told (--trace-devices N or all), and says so:
 * a large model's step is tens of MB of trace a device. */
static void test_trace_devices(void **state)
{
	static char out[1 << 16], file[1 << 22];
	FILE *f;
	size_t n;

	(void)state;
	assert_int_equal(run("run --model tiny --dp 32 --dry-run --steps 1 --trace "
			     "build/t32.json",
			     1, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "pemu run: the trace in build/t32.json keeps devices 0 to 15 "
				    "of 32 (--trace-devices N or all for more)"));
	assert_non_null(f = fopen("build/t32.json", "r"));
	n = fread(file, 1, sizeof file - 1, f);
	fclose(f);
	assert_true(n > 0 && n < sizeof file - 1);
	file[n] = 0;
	assert_non_null(strstr(file, "\"devices\":32,\"traced_devices\":16"));
	assert_non_null(strstr(file, "\"pid\":15,"));
	assert_null(strstr(file, "\"pid\":16,")); /* device 16 on: not in the trace */
	assert_int_equal(run("run --model tiny --dp 32 --dry-run --steps 1 --trace "
			     "build/t32.json --trace-devices all",
			     1, out, sizeof out),
			 0);
	assert_null(strstr(out, "keeps devices"));
	assert_non_null(f = fopen("build/t32.json", "r"));
	n = fread(file, 1, sizeof file - 1, f);
	fclose(f);
	assert_true(n > 0 && n < sizeof file - 1);
	file[n] = 0;
	assert_non_null(strstr(file, "\"devices\":32},")); /* every device: as before */
	assert_non_null(strstr(file, "\"pid\":31,"));
	assert_int_equal(run("run --model tiny --trace-devices 0", 1, out, sizeof out), 2);
	remove("build/t32.json");
}

/* The pemu run line that the JSON string at key (in out) holds, run with extra: its
 * step time equals planned to the nanosecond. */
static void assert_line_runs(char *out, const char *key, const char *extra, double planned)
{
	static char out2[65536];
	char cmd[1024], *r, *e;
	double ran;

	assert_non_null(r = strstr(out, key));
	r += strlen(key) + strlen(":\"pemu ");
	assert_non_null(e = strchr(r, '"'));
	*e = '\0';
	snprintf(cmd, sizeof cmd, "%s %s --json", r, extra);
	assert_int_equal(run(cmd, 0, out2, sizeof out2), 0);
	assert_non_null(r = strstr(out2, "\"time\":{\"step_time_s\":"));
	ran = atof(r + strlen("\"time\":{\"step_time_s\":"));
	if (planned <= 0 || ran != planned)
		fail_msg("the plan's figure %.9g s, its pemu run line %.9g s", planned, ran);
}

/* pemu plan --oases: a plan on a small model over 8 RTX 3090s over PCIe, in JSON; the
 * pemu run command it prints runs the plan it checked (the same step time, to the
 * nanosecond). */
static void test_plan_oases(void **state)
{
	static char out[65536];
	char *r;
	double planned;

	(void)state;
	assert_int_equal(run("plan --oases --cluster rtx3090-pcie --gpus-per-node 4 --nodes 2 "
			     "--tp 4 --dp 2 --hidden-size 1024 --num-layers 4 "
			     "--num-attention-heads 16 --seq-length 512 --vocab-size 1024 "
			     "--micro-batch-size 8 --global-batch-size 64 --json",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"command\":\"plan\""));
	assert_non_null(strstr(out, "\"degrees\":[1,2,4]"));
	assert_non_null(r = strstr(out, "\"plan_s\":"));
	planned = atof(r + strlen("\"plan_s\":"));
	assert_line_runs(out, "\"run\"", "--steps 1", planned);
}

/* pemu plan's search in JSON: the pemu run line of its winner runs the figure it ranked
 * (the same step time, to the nanosecond); no batch is bad input; a cap nothing fits
 * under is exit 1 with the reason. */
static void test_plan_search(void **state)
{
	static char out[1 << 20];
	char *r;
	double planned;

	(void)state;
	assert_int_equal(run("plan --model tiny --gpus 8 --global-batch-size 16 "
			     "--max-micro-batch-size 2 --commands 1 --json --steps 5",
			     0, out, sizeof out),
			 0);
	assert_non_null(strstr(out, "\"command\":\"plan\""));
	{ /* the pemu run line runs the one step ranked: the plan's own --steps is not in it */
		const char *line = strstr(out, "\"pemu_run\":\"");
		char cmd[4096];

		assert_non_null(line);
		assert_int_equal(sscanf(line, "\"pemu_run\":\"%4095[^\"]", cmd), 1);
		assert_non_null(strstr(cmd, " --steps 1 --dry-run"));
		assert_null(strstr(cmd, "--steps 5"));
	}
	assert_non_null(strstr(out, "\"pruned_by_memory_bound\":"));
	assert_non_null(r = strstr(out, "\"ranked\":[{\"rank\":1,"));
	assert_non_null(r = strstr(r, "\"step_time_s\":"));
	planned = atof(r + strlen("\"step_time_s\":"));
	assert_line_runs(r, "\"pemu_run\"", "", planned); /* as printed */
	/* the cross-entropy's kernels: in the run line once, which times as ranked, and in
	 * Megatron's; Transformer Engine's, which Megatron-LM now refuses, in no Megatron
	 * line */
	for (int te = 0; te < 2; te++) {
		char cmd[4096], mcmd[4096];
		const char *l,
			*want = te ? " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te"
				   : " --cross-entropy-loss-fusion";

		assert_int_equal(
			run(te ? "plan --model tiny --gpus 8 --global-batch-size 16 "
				 "--max-micro-batch-size 2 --commands 1 --json "
				 "--cross-entropy-fusion-impl te --cross-entropy-loss-fusion"
			       : "plan --model tiny --gpus 8 --global-batch-size 16 "
				 "--max-micro-batch-size 2 --commands 1 --json "
				 "--cross-entropy-loss-fusion",
			    0, out, sizeof out),
			0);
		assert_non_null(r = strstr(out, "\"ranked\":[{\"rank\":1,"));
		assert_non_null(l = strstr(r, "\"pemu_run\":\""));
		assert_int_equal(sscanf(l, "\"pemu_run\":\"%4095[^\"]", cmd), 1);
		assert_non_null(l = strstr(cmd, want));
		assert_null(strstr(l + strlen(want), "--cross-entropy"));
		if (te) {
			assert_non_null(
				strstr(r, "\"megatron\":null,\"megatron_gap\":"
					  "\"Megatron-LM refuses --cross-entropy-fusion-impl te"));
		} else {
			assert_non_null(l = strstr(r, "\"megatron\":\""));
			assert_int_equal(sscanf(l, "\"megatron\":\"%4095[^\"]", mcmd), 1);
			assert_non_null(l = strstr(mcmd, want));
			assert_null(strstr(l + strlen(want), "--cross-entropy"));
		}
		assert_non_null(r = strstr(r, "\"step_time_s\":"));
		planned = atof(r + strlen("\"step_time_s\":"));
		assert_line_runs(r, "\"pemu_run\"", "", planned);
	}
	/* fp32 gradients: the user's flag in the run line, which times as ranked; Megatron's
	 * bf16 keeps them by default, and pemu's 16-bit ones are its --grad-reduce-in-bf16 */
	for (int fp32 = 0; fp32 < 2; fp32++) {
		char cmd[4096], mcmd[4096];
		const char *l;

		assert_int_equal(run(fp32 ? "plan --model tiny --gpus 8 --global-batch-size 16 "
					    "--max-micro-batch-size 2 --commands 1 --json "
					    "--accumulate-allreduce-grads-in-fp32"
					  : "plan --model tiny --gpus 8 --global-batch-size 16 "
					    "--max-micro-batch-size 2 --commands 1 --json",
				     0, out, sizeof out),
				 0);
		assert_non_null(r = strstr(out, "\"ranked\":[{\"rank\":1,"));
		assert_non_null(l = strstr(r, "\"pemu_run\":\""));
		assert_int_equal(sscanf(l, "\"pemu_run\":\"%4095[^\"]", cmd), 1);
		l = strstr(cmd, " --accumulate-allreduce-grads-in-fp32");
		assert_true(fp32 ? l && !strstr(l + 2, "--accumulate") : !l);
		assert_non_null(l = strstr(r, "\"megatron\":\""));
		assert_int_equal(sscanf(l, "\"megatron\":\"%4095[^\"]", mcmd), 1);
		l = strstr(mcmd, " --bf16");
		assert_non_null(l);
		assert_true(fp32 ? !strstr(mcmd, "grad-reduce-in-bf16")
				 : !strncmp(l, " --bf16 --grad-reduce-in-bf16", 29));
		assert_non_null(r = strstr(r, "\"step_time_s\":"));
		planned = atof(r + strlen("\"step_time_s\":"));
		assert_line_runs(r, "\"pemu_run\"", "", planned);
	}
	assert_int_equal(run("plan --model tiny --tp 2", 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--global-batch-size is needed"));
	assert_int_equal(run("plan --model tiny --gpus 8 --global-batch-size 16 --mem-cap 100K", 0,
			     out, sizeof out),
			 1);
	assert_non_null(strstr(out, "no layout fits in 100.0 KiB a GPU"));
}

/* Whether process pid is still running: not gone, nor a zombie waiting to be reaped. */
static int running(pid_t pid)
{
	char path[64], line[128];
	int alive = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "State:", 6))
			alive = !strchr(line, 'Z') && !strchr(line, 'X');
	fclose(f);
	return alive;
}

/* pemu plan's worker processes end with it: killed while its workers search (a job
 * scheduler's kill, not the terminal's Ctrl-C, which reaches them all), they do not run
 * on for minutes, reparented. */
static void test_plan_workers_end(void **state)
{
	const char *bin = getenv("PEMU") ? getenv("PEMU") : "build/pemu";
	struct timespec tick = {0, 20 * 1000 * 1000};
	char path[64], kids[256] = "";
	int workers[2], n = 0;
	pid_t p;
	FILE *f;

	(void)state;
	p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execl(bin, bin, "plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus",
		      "1024", "--global-batch-size", "1536", "--jobs", "2", (char *)NULL);
		_exit(127);
	}
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)p, (int)p);
	for (int i = 0; i < 1000 && n < 2; i++) { /* (the search starts within seconds) */
		nanosleep(&tick, NULL);
		if ((f = fopen(path, "r"))) {
			if (!fgets(kids, sizeof kids, f))
				kids[0] = '\0';
			fclose(f);
		}
		n = sscanf(kids, "%d %d", &workers[0], &workers[1]);
	}
	kill(p, SIGTERM);
	waitpid(p, NULL, 0);
	if (n < 2)
		skip(); /* (no /proc children list here, or no workers made) */
	for (int i = 0; i < 250 && (running(workers[0]) || running(workers[1])); i++)
		nanosleep(&tick, NULL);
	assert_false(running(workers[0]));
	assert_false(running(workers[1]));
}

static void test_coll_oom_is_a_report(void **state)
{
	char out[8192];

	(void)state;
	assert_int_equal(run("coll -g 4 -b 64M -e 64M --mem-cap 100M", 1, out, sizeof out), 1);
	assert_non_null(strstr(out, "out of memory allocating 'recv buffer'"));
	assert_non_null(strstr(out, "cap 104857600 bytes"));
	/* in --json too, where the sizes before it stay: the error, its kind and size */
	assert_int_equal(run("coll -g 4 -b 256 -e 1K --mem-cap 1KB --json", 0, out, sizeof out), 1);
	assert_non_null(strstr(out, "\"results\":[{\"size\":256,"));
	assert_non_null(strstr(out,
			       "\"error\":{\"kind\":\"device out of memory\",\"size\":512,"
			       "\"report\":\"device 0: out of memory allocating 'recv buffer'"));
	assert_non_null(strstr(out, "\"passed\":false}"));
	/* and the text's check line does not call it a wrong value */
	assert_int_equal(run("coll -g 4 -b 256 -e 1K --mem-cap 1KB", 0, out, sizeof out), 1);
	assert_non_null(strstr(out, "# Out of bounds values : 0 OK"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_coll_checks_every_op),
		cmocka_unit_test(test_coll_json),
		cmocka_unit_test(test_coll_overrides),
		cmocka_unit_test(test_coll_oom_is_a_report),
		cmocka_unit_test(test_train_gpt3_dry_run),
		cmocka_unit_test(test_train_json),
		cmocka_unit_test(test_host_threads),
		cmocka_unit_test(test_blas_kernels),
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_plan_oases),
		cmocka_unit_test(test_plan_search),
		cmocka_unit_test(test_plan_workers_end),
		cmocka_unit_test(test_divergence),
		cmocka_unit_test(test_failed_json),
		cmocka_unit_test(test_trace_devices),
		cmocka_unit_test(test_clock_horizon),
		cmocka_unit_test(test_comm_exposed),
		cmocka_unit_test(test_send_channels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
