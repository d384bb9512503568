/* pemu coll: the collective benchmark, in the manner of nccl-tests (its -b -e -f -g -n -w -c
 * flags and its columns). For each size: the virtual time of one collective on the
 * emulated cluster, algbw = S / time and busbw = algbw * factor (nccl-tests
 * doc/PERFORMANCE.md), the number of wrong elements against a serial computation, and
 * the wall time the emulator took per call.
 *
 * The check uses small whole numbers as data, so that every sum is exact in float and the
 * serial result does not depend on order; the order itself is tested bitwise in
 * tests/test_coll.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "clock.h"
#include "coll.h"
#include "cmd/cmd.h"
#include "cmd/report.h"
#include "mem.h"
#include "trace.h"
#include "units.h"

enum cop {
	C_ALL_REDUCE,
	C_REDUCE_SCATTER,
	C_ALL_GATHER,
	C_ALL_TO_ALL,
	C_BROADCAST,
	C_REDUCE,
	C_SEND_RECV,
	C_N
};

static const struct {
	const char *name;
	int bus_num; /* busbw factor: bus_num * (n-1) / n, or 1 when bus_num is 0 */
	int split;   /* the size is cut into n pieces */
} cops[C_N] = {
	[C_ALL_REDUCE] = {"all-reduce", 2, 0}, [C_REDUCE_SCATTER] = {"reduce-scatter", 1, 1},
	[C_ALL_GATHER] = {"all-gather", 1, 1}, [C_ALL_TO_ALL] = {"all-to-all", 1, 1},
	[C_BROADCAST] = {"broadcast", 0, 0},   [C_REDUCE] = {"reduce", 0, 0},
	[C_SEND_RECV] = {"send-recv", 0, 0},
};

/* What op's redop and root columns say: "none" for an op that does not reduce (as
 * nccl-tests prints it), the root only for broadcast and reduce. */
static const char *redop_name(enum cop op, enum coll_redop redop)
{
	if (op != C_ALL_REDUCE && op != C_REDUCE_SCATTER && op != C_REDUCE)
		return "none";
	return redop == COLL_SUM ? "sum" : "max";
}

static int rooted(enum cop op)
{
	return op == C_BROADCAST || op == C_REDUCE;
}

struct coll_bench {
	enum cop op;
	int n;        /* devices in the group */
	size_t count; /* the call's count argument */
	size_t nsend, nrecv;
	enum coll_redop redop;
	int root;
	int iters, warmup, check;
	/* Results, written by the devices. */
	uint64_t *wrong;   /* [n] */
	int64_t t_iter_ns; /* virtual time of the timed iterations, device 0 */
	int64_t wall_ns;   /* wall time of the timed iterations, device 0 */
};

/* Rank r's input element i: small whole numbers, so any sum of up to 2^16 is exact. */
static float input(int r, size_t i)
{
	return (float)((int)((7 * (size_t)r + 13 * i) % 17) - 8);
}

static float reduce_inputs(const struct coll_bench *b, size_t i)
{
	float acc = input(0, i);

	for (int r = 1; r < b->n; r++)
		acc = b->redop == COLL_SUM ? acc + input(r, i)
					   : (input(r, i) > acc ? input(r, i) : acc);
	return acc;
}

/* What rank r should hold in recv[i] after the call. */
static float expect(const struct coll_bench *b, int r, size_t i)
{
	size_t cnt = b->count;

	switch (b->op) {
	case C_ALL_REDUCE:
		return reduce_inputs(b, i);
	case C_REDUCE_SCATTER:
		return reduce_inputs(b, (size_t)r * cnt + i);
	case C_ALL_GATHER:
		return input((int)(i / cnt), i % cnt);
	case C_ALL_TO_ALL:
		return input((int)(i / cnt), (size_t)r * cnt + i % cnt);
	case C_BROADCAST:
		return input(b->root, i);
	case C_REDUCE:
		return r == b->root ? reduce_inputs(b, i) : 0.0f;
	case C_SEND_RECV:
		return input((r + b->n - 1) % b->n, i);
	default:
		return 0;
	}
}

static int call(struct emu_dev *d, const struct coll_bench *b, float *send, float *recv)
{
	struct emu_group *g = emu_world(d);
	int r = emu_dev_id(d), n = b->n, rc;
	struct coll_req *rq, *sq;

	switch (b->op) {
	case C_ALL_REDUCE:
		return coll_all_reduce(d, g, send, recv, b->count, b->redop);
	case C_REDUCE_SCATTER:
		return coll_reduce_scatter(d, g, send, recv, b->count, b->redop);
	case C_ALL_GATHER:
		return coll_all_gather(d, g, send, recv, b->count);
	case C_ALL_TO_ALL:
		return coll_all_to_all(d, g, send, recv, b->count);
	case C_BROADCAST:
		if (r == b->root && send && recv)
			memcpy(recv, send, b->count * sizeof *recv);
		return coll_broadcast(d, g, recv, b->count, b->root);
	case C_REDUCE:
		return coll_reduce(d, g, send, recv, b->count, b->redop, b->root);
	case C_SEND_RECV:
		/* Every rank sends to the next and receives from the previous, at once, as
		 * nccl-tests' sendrecv: on the communicator of all n (bench_device). */
		if (n == 1) {
			if (send && recv)
				memcpy(recv, send, b->count * sizeof *recv);
			return 0;
		}
		if ((rc = coll_irecv(d, (r + n - 1) % n, recv, b->count, &rq)) ||
		    (rc = coll_isend(d, (r + 1) % n, send, b->count, &sq)))
			return rc;
		return (rc = coll_wait(d, rq)) ? rc : coll_wait(d, sq);
	default:
		return EMU_EINVAL;
	}
}

static int bench_device(struct emu_dev *d, void *arg)
{
	struct coll_bench *b = arg;
	int r = emu_dev_id(d), rc = 0;
	struct mem_block *sb = mem_alloc(d, MEM_COMM, b->nsend * sizeof(float), "send buffer");
	struct mem_block *rb =
		sb ? mem_alloc(d, MEM_COMM, b->nrecv * sizeof(float), "recv buffer") : NULL;
	float *send, *recv;
	int64_t t0, w0;

	if (!sb || !rb)
		return EMU_EOOM;
	/* the sends (send-recv's) on the communicator of all, as nccl-tests' (emu/coll.h) */
	coll_set_p2p_comm(d, coll_comm_of_group(d, emu_world(d)));
	send = sb->data;
	recv = rb->data;
	if (send)
		for (size_t i = 0; i < b->nsend; i++)
			send[i] = input(r, i);
	b->wrong[r] = 0;
	if (b->check) {
		if ((rc = call(d, b, send, recv)))
			return rc;
		if (recv)
			for (size_t i = 0; i < b->nrecv; i++)
				b->wrong[r] += recv[i] != expect(b, r, i);
	}
	for (int i = 0; i < b->warmup && !rc; i++)
		rc = call(d, b, send, recv);
	if (rc || (rc = emu_barrier(d)))
		return rc;
	t0 = emu_now(d);
	w0 = emu_wall_ns();
	for (int i = 0; i < b->iters && !rc; i++)
		rc = call(d, b, send, recv);
	if (rc || (rc = emu_barrier(d)))
		return rc;
	if (r == 0) {
		b->wall_ns = emu_wall_ns() - w0;
		b->t_iter_ns = emu_now(d) - t0;
	}
	mem_free(d, rb);
	mem_free(d, sb);
	return 0;
}

static const struct cli_opt coll_opts[] = {
	{"op", 0, 1, 1, "NAME",
	 "all-reduce (default), reduce-scatter, all-gather, all-to-all, broadcast, reduce, "
	 "send-recv"},
	{"ngpus", 'g', 1, 2, "N", "devices in the group (default 8)"},
	{"minbytes", 'b', 1, 3, "SIZE", "smallest message (default 8)"},
	{"maxbytes", 'e', 1, 4, "SIZE", "largest message (default 64M)"},
	{"stepfactor", 'f', 1, 5, "N", "multiply the size by N each step (default 2)"},
	{"stepbytes", 'i', 1, 6, "SIZE", "add SIZE each step instead (default 0: use -f)"},
	{"iters", 'n', 1, 7, "N", "timed calls per size (default 20)"},
	{"warmup_iters", 'w', 1, 8, "N", "untimed calls first (default 5)"},
	{"check", 'c', 1, 9, "0|1", "check the result against a serial computation (default 1)"},
	{"op_type", 'o', 1, 10, "sum|max", "reduction (default sum)"},
	{"root", 'r', 1, 11, "N", "root rank of broadcast and reduce (default 0)"},
	{"csv", 0, 0, 12, NULL, "print CSV instead of the table"},
	{"help", 'h', 0, 13, NULL, "this help"},
	{"fold", 0, 1, 14, "on|off",
	 "dry-run: run only the ranks whose part differs, exactly (default on; not send-recv)"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pemu coll [options]\n\n"
		"Runs one collective on a group of virtual GPUs for a range of message sizes and "
		"prints,\n"
		"per size, the virtual time it takes on the emulated cluster, the algorithm and "
		"bus\n"
		"bandwidths that follow (as nccl-tests prints them), the number of wrong elements, "
		"and\n"
		"the wall time the emulator took.\n\n"
		"  pemu coll --op all-reduce -g 8 -b 8 -e 64M -f 2 --cluster dgx-a100\n"
		"  pemu coll -g 16 --cluster dgx-h100 --inter-bw 50GB/s --dry-run -e 1G --json\n\n"
		"Sizes take K, M, G (powers of 1024) or KB, MB, GB (powers of 1000). For "
		"reduce-scatter,\n"
		"all-gather and all-to-all the size is the whole buffer, cut into one piece per "
		"device.\n\n"
		"Collective options:\n");
	cli_print_opts(f, coll_opts);
	fprintf(f, "\nCluster options:\n");
	cli_print_opts(f, cli_cluster_opts);
	cli_print_exit_codes(f, "the run failed, or the check found wrong elements");
}

/* Element counts of a message of size bytes: the call's count and both buffers. */
static uint64_t set_size(struct coll_bench *b, uint64_t size)
{
	uint64_t unit = 4 * (uint64_t)(cops[b->op].split ? b->n : 1);
	uint64_t elems = (size < unit ? unit : size) / unit;

	b->count = (size_t)elems;
	b->nsend = b->nrecv = b->count;
	if (b->op == C_REDUCE_SCATTER)
		b->nsend *= (size_t)b->n;
	if (b->op == C_ALL_GATHER)
		b->nrecv *= (size_t)b->n;
	if (b->op == C_ALL_TO_ALL)
		b->nsend = b->nrecv = b->count * (size_t)b->n;
	return elems * unit;
}

static double bus_factor(const struct coll_bench *b)
{
	if (!cops[b->op].bus_num)
		return 1.0;
	return (double)cops[b->op].bus_num * (b->n - 1) / b->n;
}

int cmd_coll(int argc, char **argv)
{
	struct cli c = {.prog = "pemu coll",
			.argc = argc,
			.argv = argv,
			.i = 1,
			.opts = {coll_opts, cli_cluster_opts, NULL}};
	struct coll_bench *b = calloc(1, sizeof *b);
	struct cli_cluster cc;
	uint64_t minb = 8, maxb = 64ULL << 20, stepb = 0, sum_bus_n = 0, failed_at = 0, found = 0;
	long factor = 2;
	int csv = 0, id, first = 1, rc = 0, fold = 1;
	double sum_bus = 0;
	const char *v;
	struct emu_cluster *cl = NULL;

	if (!b)
		emu_die("out of host memory");
	b->op = C_ALL_REDUCE;
	b->n = 8;
	b->iters = 20;
	b->warmup = 5;
	b->check = 1;
	cli_cluster_init(&cc);
	while ((id = cli_next(&c, &v))) {
		if (cli_cluster_opt(&cc, id, v))
			continue;
		switch (id) {
		case 1: {
			int k;

			for (k = 0; k < C_N && strcmp(cops[k].name, v); k++)
				;
			if (k == C_N)
				cli_fail(&c,
					 "--op: unknown collective '%s' (all-reduce, "
					 "reduce-scatter, all-gather, all-to-all, broadcast, "
					 "reduce, send-recv)",
					 v);
			b->op = (enum cop)k;
			break;
		}
		case 2:
			b->n = (int)cli_int(&c, "-g", v, 1, 65536);
			break;
		case 3:
			minb = cli_size(&c, "-b", v);
			break;
		case 4:
			maxb = cli_size(&c, "-e", v);
			break;
		case 5:
			factor = cli_int(&c, "-f", v, 2, 1 << 20);
			break;
		case 6:
			stepb = cli_size(&c, "-i", v);
			break;
		case 7:
			b->iters = (int)cli_int(&c, "-n", v, 1, 1000000);
			break;
		case 8:
			b->warmup = (int)cli_int(&c, "-w", v, 0, 1000000);
			break;
		case 9:
			b->check = (int)cli_int(&c, "-c", v, 0, 1);
			break;
		case 10:
			if (strcmp(v, "sum") && strcmp(v, "max"))
				cli_fail(&c, "-o: unknown reduction '%s' (sum or max)", v);
			b->redop = strcmp(v, "sum") ? COLL_MAX : COLL_SUM;
			break;
		case 11:
			b->root = (int)cli_int(&c, "-r", v, 0, 65535); /* (under -g: below) */
			break;
		case 12:
			csv = 1;
			break;
		case 13:
			usage(stdout);
			free(b);
			return 0;
		case 14:
			if (strcmp(v, "on") && strcmp(v, "off"))
				cli_fail(&c, "--fold: '%s' is not on or off", v);
			fold = !strcmp(v, "on");
			break;
		}
	}
	if (minb == 0)
		cli_fail(&c, "-b 0: the smallest message must be at least 1 byte");
	if (minb > maxb)
		cli_fail(&c, "-b %llu is larger than -e %llu", (unsigned long long)minb,
			 (unsigned long long)maxb);
	if (b->root >= b->n)
		cli_fail(&c, "-r %d: the root must be a rank of the group (0..%d)", b->root,
			 b->n - 1);
	if (b->op == C_SEND_RECV && b->n < 2)
		cli_fail(&c, "--op send-recv -g %d: a send and its receive need 2 devices or more",
			 b->n);
	cli_cluster_finish(&cc, &c, b->n);
	if (cc.nfail)
		cli_fail(&c, "--inject-fault fail:DEV@STEP: pemu coll has no steps; a device's "
			     "failure is for pemu run and verify (slow and link work here)");
	if (cc.json && csv)
		cli_fail(&c, "--json and --csv: choose one");
	if (!cc.cfg.dry_run) { /* the largest size's two buffers on every device */
		struct coll_bench big = *b;
		uint64_t one;

		set_size(&big, maxb);
		one = ((uint64_t)big.nsend + big.nrecv) * sizeof(float);
		cli_host_check(&c, one * (uint64_t)b->n, one, "");
	}
	if (cc.cfg.dry_run)
		b->check = 0;
	cli_parsed();

	if (cc.json) {
		char root[16] = "null";

		if (rooted(b->op))
			snprintf(root, sizeof root, "%d", b->root);
		printf("{\"command\":\"coll\",\"op\":\"%s\",\"devices\":%d,\"redop\":\"%s\","
		       "\"root\":%s,\"iters\":%d,\"cluster\":",
		       cops[b->op].name, b->n, redop_name(b->op, b->redop), root, b->iters);
		report_cluster_json(stdout, &cc.cfg);
		printf(",\"results\":[");
	} else if (csv) {
		printf("op,devices,size_bytes,count,time_us,algbw_GBps,busbw_GBps,wrong,wall_us\n");
	} else {
		printf("# pemu coll: %s on %d device%s, %s\n# ", cops[b->op].name, b->n,
		       b->n == 1 ? "" : "s",
		       cc.cfg.dry_run ? "dry-run (no data moves)" : "execute mode");
		report_cluster_line(stdout, &cc.cfg);
		printf("\n# %d timed call%s per size after %d warm-up; check %s\n#\n", b->iters,
		       b->iters == 1 ? "" : "s", b->warmup, b->check ? "on" : "off");
		printf("# %12s %12s %6s %5s %5s %11s %12s %12s %7s %10s\n", "size(B)", "count",
		       "type", "redop", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
		       "wall(us)");
	}
	fflush(stdout);

	cl = emu_cluster_new(&cc.cfg);
	b->wrong = emu_xcalloc((size_t)b->n, sizeof *b->wrong);
	if (fold && cc.cfg.dry_run && b->op != C_SEND_RECV && b->n > 3) {
		/* Every rank makes the same call on the one group, so a dry-run need run only
		 * the ranks whose part differs (emu_cluster_set_fold): rank 0 for a collective
		 * without a root; with one, the root, the rank before it (the end of a
		 * broadcast's chain) and the lowest other rank, standing for the rest (rank 0
		 * always runs: it times the calls). */
		int *rep = emu_xcalloc((size_t)b->n, sizeof *rep);
		int rooted = !cops[b->op].bus_num, last = (b->root + b->n - 1) % b->n, low = 0;

		while (low == b->root || low == last)
			low++;
		for (int r = 0; r < b->n; r++)
			rep[r] = !rooted ? 0 : r == b->root || r == last ? r : low;
		if (emu_cluster_set_fold(cl, rep))
			emu_die("pemu coll: the fold plan was refused");
		free(rep);
	}
	for (uint64_t size = minb, last = 0; size <= maxb;
	     size = stepb ? size + stepb : size * (uint64_t)factor) {
		uint64_t bytes = set_size(b, size), wrong = 0;
		double t_us, algbw, busbw, wall_us;

		/* sizes under a whole element a member round up to one: a row once */
		if (bytes == last) {
			if (stepb == 0 && size > maxb / (uint64_t)factor)
				break;
			continue;
		}
		last = bytes;
		rc = emu_cluster_run(cl, bench_device, b);
		if (rc) {
			failed_at = bytes;
			fflush(stdout);
			fprintf(stderr, "pemu coll: %s failed at %llu bytes:\n%s\n",
				cops[b->op].name, (unsigned long long)bytes,
				emu_cluster_report(cl));
			break;
		}
		for (int r = 0; r < b->n; r++)
			wrong += b->wrong[r];
		t_us = (double)b->t_iter_ns / b->iters / 1e3;
		algbw = t_us > 0 ? (double)bytes / (t_us * 1e3) : 0;
		busbw = algbw * bus_factor(b);
		wall_us = (double)b->wall_ns / b->iters / 1e3;
		sum_bus += busbw;
		sum_bus_n++;
		if (cc.json) {
			printf("%s{\"size\":%llu,\"count\":%zu,\"time_us\":%.3f,\"algbw\":%.6g,"
			       "\"busbw\":%.6g,\"wrong\":",
			       first ? "" : ",", (unsigned long long)bytes, b->count, t_us, algbw,
			       busbw);
			if (b->check)
				printf("%llu", (unsigned long long)wrong);
			else
				printf("null");
			printf(",\"wall_us\":%.3f}", wall_us);
		} else if (csv) {
			printf("%s,%d,%llu,%zu,%.3f,%.6g,%.6g,", cops[b->op].name, b->n,
			       (unsigned long long)bytes, b->count, t_us, algbw, busbw);
			if (b->check)
				printf("%llu", (unsigned long long)wrong);
			printf(",%.3f\n", wall_us);
		} else {
			char wbuf[24];

			if (b->check)
				snprintf(wbuf, sizeof wbuf, "%llu", (unsigned long long)wrong);
			else
				snprintf(wbuf, sizeof wbuf, "N/A");
			printf("  %12llu %12zu %6s %5s %5d %11.2f %12.2f %12.2f %7s %10.1f\n",
			       (unsigned long long)bytes, b->count, "float",
			       redop_name(b->op, b->redop), rooted(b->op) ? b->root : -1, t_us,
			       algbw, busbw, wbuf, wall_us);
		}
		first = 0;
		fflush(stdout);
		found += b->check ? wrong : 0;
		if (stepb == 0 && size > maxb / (uint64_t)factor)
			break;
	}
	if (!rc && found) /* (a wrong element at any size fails the run, not the last's) */
		rc = 1;
	if (cc.json) {
		printf("],\"avg_busbw\":%.6g,", sum_bus_n ? sum_bus / (double)sum_bus_n : 0);
		if (rc < 0) { /* the run failed (not a wrong element): at which size, and why */
			printf("\"error\":{\"kind\":\"%s\",\"size\":%llu,\"report\":",
			       emu_cluster_err_kind(cl), (unsigned long long)failed_at);
			report_json_string(stdout, emu_cluster_report(cl));
			printf("},");
		}
		printf("\"passed\":%s}\n", rc ? "false" : "true");
	} else if (!csv) {
		printf("# Out of bounds values : %s\n", found ? "FOUND" : "0 OK");
		printf("# Avg bus bandwidth    : %.4g GB/s\n",
		       sum_bus_n ? sum_bus / (double)sum_bus_n : 0);
	}
	if (cc.trace_path && !cli_write_trace(&cc, cl, "pemu coll") && !cc.json && !csv)
		printf("# trace of the last size written to %s (open it in "
		       "https://ui.perfetto.dev)\n",
		       cc.trace_path);
	if (cc.timeline)
		trace_timeline(cl, cc.json || csv ? stderr : stdout, 100, 16);
	emu_cluster_free(cl);
	free(b->wrong);
	free(b);
	return rc ? 1 : 0;
}
