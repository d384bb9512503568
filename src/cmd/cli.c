/* cli: shared option parsing; see cli.h. */
#include "cmd/cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>

#include "run/run.h"
#include "trace.h"
#include "units.h"

const struct cli_opt cli_cluster_opts[] = {
	{"cluster", 0, 1, CLI_CLUSTER, "NAME",
	 "hardware preset (default dgx-a100): see 'pemu --help'"},
	{"nodes", 0, 1, CLI_NODES, "N", "number of nodes (default: as many as the devices need)"},
	{"gpus-per-node", 0, 1, CLI_GPUS_PER_NODE, "N",
	 "GPUs in each node (default: the preset's)"},
	{"intra-bw", 0, 1, CLI_INTRA_BW, "BW", "bandwidth between GPUs of a node, e.g. 300GB/s"},
	{"intra-lat", 0, 1, CLI_INTRA_LAT, "TIME", "latency between GPUs of a node, e.g. 3us"},
	{"inter-bw", 0, 1, CLI_INTER_BW, "BW", "bandwidth per GPU between nodes, e.g. 200Gb/s"},
	{"inter-lat", 0, 1, CLI_INTER_LAT, "TIME", "latency between nodes, e.g. 5us"},
	{"nodes-per-dc", 0, 1, CLI_NODES_PER_DC, "N",
	 "nodes per datacenter (default: one datacenter)"},
	{"dc-bw", 0, 1, CLI_DC_BW, "BW", "bandwidth between datacenters (default 100Gb/s)"},
	{"dc-lat", 0, 1, CLI_DC_LAT, "TIME", "latency between datacenters (default 10ms)"},
	{"gpu-flops", 0, 1, CLI_GPU_FLOPS, "X", "peak FLOP/s of a GPU, e.g. 312e12"},
	{"gpu-efficiency", 0, 1, CLI_GPU_EFF, "X",
	 "fraction of peak a GEMM reaches under the roofline (default 0.7)"},
	{"inject-fault", 0, 1, CLI_INJECT_FAULT, "SPEC",
	 "repeatable: fail:DEV@STEP (the device dies as the step begins), slow:DEV:X (its "
	 "kernels X times slower), link:NODE:X (the node's links X times slower)"},
	{"cost-model", 0, 1, CLI_COST_MODEL, "MODEL",
	 "calibrated (default: GEMM tiles and waves, measured ceilings, NCCL's achieved bus "
	 "bandwidth and latency) or roofline (the data sheets, one GEMM efficiency)"},
	{"no-nvls", 0, 0, CLI_NO_NVLS, NULL,
	 "calibrated: no NVLink SHARP (NCCL_NVLS_ENABLE=0): all-reduces on the ring or tree, "
	 "not NVLS in a node or NVLSTree on 2 nodes"},
	{"hbm-bw", 0, 1, CLI_HBM_BW, "BW", "memory bandwidth of a GPU, e.g. 2.04TB/s"},
	{"mem-cap", 0, 1, CLI_MEM_CAP, "SIZE", "memory cap per GPU, e.g. 80GB (default: its HBM)"},
	{"pace", 0, 1, CLI_PACE, "X", "wall clock follows virtual time times X (default 0: off)"},
	{"host-threads", 0, 1, CLI_HOST_THREADS, "N|per-gpu",
	 "host threads that run the virtual GPUs, each GPU a context on them (default: one a "
	 "core, one in dry-run; per-gpu: an OS thread each); with fewer GPUs than N (else "
	 "OPENBLAS_NUM_THREADS, else the cores) the rest help one GPU's kernels at a time"},
	{"dry-run", 0, 0, CLI_DRY_RUN, NULL, "shapes only: account time and memory, move no data"},
	{"trace", 0, 1, CLI_TRACE, "FILE", "write a Chrome trace (open it in Perfetto)"},
	{"trace-devices", 0, 1, CLI_TRACE_DEVICES, "N|all",
	 "devices the trace keeps, 0 to N-1 (default 16: a large model's step is tens of MB "
	 "of trace a device, and Perfetto opens about 1-2 GB)"},
	{"timeline", 0, 0, CLI_TIMELINE, NULL, "draw an ASCII timeline per device and stream"},
	{"json", 0, 0, CLI_JSON, NULL, "print one JSON object instead of the table"},
	{NULL, 0, 0, 0, NULL, NULL},
};

void (*cli_exit_hook)(int code);
void (*cli_parsed_hook)(void);

void cli_parsed(void)
{
	if (cli_parsed_hook)
		cli_parsed_hook();
}

void cli_fail(const struct cli *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", c->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (cli_exit_hook)
		cli_exit_hook(CLI_EXIT_USAGE);
	exit(CLI_EXIT_USAGE);
}

static const struct cli_opt *find(const struct cli *c, const char *name, size_t len, char s)
{
	for (int t = 0; c->opts[t]; t++)
		for (const struct cli_opt *o = c->opts[t]; o->name; o++)
			if (s ? o->shortname == s
			      : strlen(o->name) == len && !strncmp(o->name, name, len))
				return o;
	return NULL;
}

int cli_next(struct cli *c, const char **val)
{
	const struct cli_opt *o;
	const char *a, *eq = NULL;

	*val = NULL;
	if (c->i >= c->argc)
		return 0;
	a = c->argv[c->i++];
	if (a[0] == '-' && a[1] == '-' && a[2]) {
		eq = strchr(a, '=');
		o = find(c, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2), 0);
	} else if (a[0] == '-' && a[1] && !a[2]) {
		o = find(c, NULL, 0, a[1]);
	} else if (a[0] == '-' && a[1] && (o = find(c, NULL, 0, a[1])) && o->has_arg) {
		*val = a + 2; /* "-g8", as getopt (and so nccl-tests) reads it */
		return o->id;
	} else {
		cli_fail(c, "unexpected argument '%s' (options start with --; try '%s --help')", a,
			 c->prog);
	}
	if (!o)
		cli_fail(c, "unknown option '%s' (try '%s --help')", a, c->prog);
	if (!o->has_arg) {
		if (eq)
			cli_fail(c, "option --%s takes no value", o->name);
		return o->id;
	}
	if (eq) {
		*val = eq + 1;
	} else {
		if (c->i >= c->argc)
			cli_fail(c, "option %s needs a value (%s)", a, o->arg);
		*val = c->argv[c->i++];
	}
	return o->id;
}

long cli_int(const struct cli *c, const char *opt, const char *val, long min, long max)
{
	long v;

	if (units_parse_int(val, min, max, &v))
		cli_fail(c, "%s: '%s' is not a whole number from %ld to %ld", opt, val, min, max);
	return v;
}

uint64_t cli_size(const struct cli *c, const char *opt, const char *val)
{
	uint64_t v;

	int rc = units_parse_size(val, &v);

	if (rc == UNITS_TOO_LARGE)
		cli_fail(c, "%s %s: too large (a size is under 9.2e18 bytes, 8 EiB)", opt, val);
	if (rc)
		cli_fail(c,
			 "%s: malformed size '%s' (a whole number of bytes with an optional "
			 "suffix: K, M, G, T are powers of 1024, KB, MB, GB, TB powers of 1000)",
			 opt, val);
	return v;
}

double cli_double(const struct cli *c, const char *opt, const char *val, double min, double max)
{
	double v;

	if (units_parse_double(val, &v) || v < min || v > max)
		cli_fail(c, "%s: '%s' is not a number from %g to %g", opt, val, min, max);
	return v;
}

void cli_print_opts_but(FILE *f, const struct cli_opt *opts, int (*skip)(int id))
{
	for (const struct cli_opt *o = opts; o->name; o++) {
		char left[64];

		if (skip && skip(o->id))
			continue;
		if (o->shortname)
			snprintf(left, sizeof left, "-%c, --%s%s%s", o->shortname, o->name,
				 o->arg ? " " : "", o->arg ? o->arg : "");
		else
			snprintf(left, sizeof left, "    --%s%s%s", o->name, o->arg ? " " : "",
				 o->arg ? o->arg : "");
		fprintf(f, "  %-36s %s\n", left, o->help);
	}
}

void cli_print_opts(FILE *f, const struct cli_opt *opts)
{
	cli_print_opts_but(f, opts, NULL);
}

const char *cli_opt_name(const struct cli_opt *opts, int id)
{
	for (const struct cli_opt *o = opts; o->name; o++)
		if (o->id == id)
			return o->name;
	return "?";
}

/* ------------------------------------------------------------------------------------ */

int cli_link_opt(int id)
{
	return (id >= CLI_NODES && id <= CLI_DC_LAT) || id == CLI_NO_NVLS;
}

void cli_cluster_init(struct cli_cluster *cc)
{
	memset(cc, 0, sizeof *cc);
	cc->preset = "dgx-a100";
}

int cli_cluster_opt(struct cli_cluster *cc, int id, const char *val)
{
	switch (id) {
	case CLI_CLUSTER:
		cc->preset = val;
		return 1;
	case CLI_DRY_RUN:
		cc->cfg.dry_run = 1;
		return 1;
	case CLI_TRACE:
		cc->trace_path = val;
		return 1;
	case CLI_TIMELINE:
		cc->timeline = 1;
		return 1;
	case CLI_JSON:
		cc->json = 1;
		return 1;
	case CLI_NO_NVLS:
		cc->no_nvls = 1;
		return 1;
	case CLI_INJECT_FAULT: /* (more than the room: refused by cli_cluster_finish) */
		if (cc->nfaults < EMU_MAX_SLOW)
			cc->faults[cc->nfaults] = val;
		cc->nfaults++;
		return 1;
	default:
		if (id < CLI_CLUSTER || id > CLI_JSON)
			return 0;
		cc->ov[id - CLI_CLUSTER] = val;
		return 1;
	}
}

/* Whether s is a number alone, with no unit after it. */
static int bare_number(const char *s)
{
	char *end;

	(void)strtod(s, &end);
	return end != s && !*end;
}

/* --opt s, a bandwidth with its unit, into *out (exits with code 2 if it is not one). */
static void parse_bw(const struct cli *c, const char *opt, const char *s, const char *example,
		     uint64_t *out)
{
	char *end;
	int rc;

	if (bare_number(s))
		cli_fail(c,
			 "--%s %s: give the unit (for example %s); a bare number is not taken "
			 "as bytes a second",
			 opt, s, example);
	rc = units_parse_bw(s, out);
	if (!rc)
		return;
	if (rc == UNITS_TOO_LARGE)
		cli_fail(c, "--%s %s: too large (a bandwidth is under 9.2e18 bytes a second)", opt,
			 s);
	if (strtod(s, &end) == 0 && end != s) /* a number, 0, before the unit */
		cli_fail(c, "--%s %s: a bandwidth must be more than 0", opt, s);
	cli_fail(c, "--%s: malformed bandwidth '%s' (for example %s)", opt, s, example);
}

static void link_override(const struct cli *c, struct topo_link *l, const char *bw_opt,
			  const char *bw, const char *lat_opt, const char *lat)
{
	int rc = 0;

	if (bw)
		parse_bw(c, bw_opt, bw, "50GB/s or 200Gb/s", &l->bw_bytes);
	if (lat && bare_number(lat))
		cli_fail(c,
			 "--%s %s: give the unit (for example 5us, 2ms or 100ns); a bare number "
			 "is not taken as nanoseconds",
			 lat_opt, lat);
	if (lat && (rc = units_parse_time(lat, &l->lat_ns)) && rc != UNITS_TOO_LARGE)
		cli_fail(c, "--%s: malformed time '%s' (for example 5us, 2ms or 100ns)", lat_opt,
			 lat);
	if (lat && (rc || l->lat_ns > EMU_LAT_MAX)) /* (the clock's horizon stays far off) */
		cli_fail(c, "--%s %s: a link's latency is at most 1000 s", lat_opt, lat);
	if (lat) /* the calibrated model's steps take the latency given too */
		l->ll_hop_ns = l->hop_ns = l->ll128_hop_ns = l->lat_ns;
}

/* One --inject-fault SPEC: a slowdown into cc->cfg, a failure into cc->fail. */
static void parse_fault(struct cli_cluster *cc, const struct cli *c, const char *spec)
{
	char kind[8], rest;
	int a, b, n = 0;
	double x;

	if (sscanf(spec, "%7[a-z]:%d@%d%c", kind, &a, &b, &rest) == 3 && !strcmp(kind, "fail")) {
		cc->fail[cc->nfail].dev = a;
		cc->fail[cc->nfail++].step = b;
		return;
	}
	if (sscanf(spec, "%7[a-z]:%d:%lf%n", kind, &a, &x, &n) == 3 && !spec[n] &&
	    (!strcmp(kind, "slow") || !strcmp(kind, "link"))) {
		struct emu_slow *s = &cc->cfg.slow[cc->cfg.nslow++];

		*s = (struct emu_slow){!strcmp(kind, "slow") ? a : -1, a, x};
		if (a < 0)
			cli_fail(c, "--inject-fault %s: devices and nodes count from 0", spec);
		if (!(x >= 1 && x <= 1e6))
			cli_fail(c, "--inject-fault %s: the factor must be from 1 to 1e6", spec);
		return;
	}
	cli_fail(c,
		 "--inject-fault: '%s' is not fail:DEV@STEP, slow:DEV:X or link:NODE:X (for "
		 "example fail:3@2, slow:1:2.5, link:0:4)",
		 spec);
}

void cli_cluster_faults(const struct cli_cluster *cc, const struct cli *c, struct run_cfg *cfg)
{
	cfg->nfail = cc->nfail;
	for (int i = 0; i < cc->nfail; i++) {
		if (cc->fail[i].dev < 0 || cc->fail[i].dev >= cfg->mesh.world ||
		    cc->fail[i].step <= cfg->step0 || cc->fail[i].step > cfg->step0 + cfg->steps)
			cli_fail(c,
				 "--inject-fault fail:%d@%d: the run has devices 0 to %d and steps "
				 "%d to %d",
				 cc->fail[i].dev, cc->fail[i].step, cfg->mesh.world - 1,
				 cfg->step0 + 1, cfg->step0 + cfg->steps);
		cfg->fail[i].dev = cc->fail[i].dev;
		cfg->fail[i].step = cc->fail[i].step;
	}
}

void cli_host_check(const struct cli *c, uint64_t need, uint64_t largest, const char *fails)
{
	const char *off = getenv("PEMU_HOST_CHECK");
	uint64_t have = run_host_available();
	char n[32], l[32], h[32];

	if ((off && !strcmp(off, "off")) || !have || need <= have / 10 * 9)
		return;
	units_fmt_bytes(n, sizeof n, need);
	units_fmt_bytes(l, sizeof l, largest);
	units_fmt_bytes(h, sizeof h, have);
	if (fails[0])
		cli_fail(c,
			 "execute mode would hold about %s of host memory (the emulated GPUs' "
			 "tensors as fp32 data, %s on the largest) before it fails as its "
			 "dry-run does (%s), and this host has %s available: add --dry-run for "
			 "the whole report",
			 n, l, fails, h);
	cli_fail(c,
		 "execute mode would hold about %s of host memory (the emulated GPUs' tensors as "
		 "fp32 data, %s on the largest), and this host has %s available: add --dry-run "
		 "to size it without data, or make it smaller (PEMU_HOST_CHECK=off runs it "
		 "anyway)",
		 n, l, h);
}

void cli_cluster_finish(struct cli_cluster *cc, const struct cli *c, int devices)
{
	struct emu_config *cfg = &cc->cfg;
	const char **ov = cc->ov;
	int dry = cfg->dry_run;
	char why[256];

#define OV(id) ov[(id)-CLI_CLUSTER]
	if (emu_config_default(cfg, cc->preset)) {
		struct emu_str s = {0};

		for (int i = 0; topo_preset_names[i]; i++)
			emu_str_addf(&s, "%s%s", i ? ", " : "", topo_preset_names[i]);
		cli_fail(c, "--cluster: unknown preset '%s' (one of: %s)", cc->preset, s.s);
	}
	cfg->dry_run = dry;
	if (OV(CLI_GPUS_PER_NODE))
		cfg->topo.gpus_per_node =
			(int)cli_int(c, "--gpus-per-node", OV(CLI_GPUS_PER_NODE), 1, 1024);
	if (OV(CLI_NODES)) {
		cfg->topo.nodes = (int)cli_int(c, "--nodes", OV(CLI_NODES), 1, 65536);
		cc->nodes_given = 1;
	} else if (devices > 0) {
		cfg->topo.nodes = (devices + cfg->topo.gpus_per_node - 1) / cfg->topo.gpus_per_node;
	}
	if (OV(CLI_NODES_PER_DC))
		cfg->topo.nodes_per_dc =
			(int)cli_int(c, "--nodes-per-dc", OV(CLI_NODES_PER_DC), 1, 65536);
	link_override(c, &cfg->topo.link[TOPO_LINK_INTRA], "intra-bw", OV(CLI_INTRA_BW),
		      "intra-lat", OV(CLI_INTRA_LAT));
	link_override(c, &cfg->topo.link[TOPO_LINK_INTER], "inter-bw", OV(CLI_INTER_BW),
		      "inter-lat", OV(CLI_INTER_LAT));
	if ((OV(CLI_DC_BW) || OV(CLI_DC_LAT)) && cfg->topo.nodes_per_dc <= 0)
		cli_fail(c,
			 "--%s: the link between data centres needs --nodes-per-dc N (the "
			 "nodes of one data centre); without it there is none",
			 OV(CLI_DC_BW) ? "dc-bw" : "dc-lat");
	link_override(c, &cfg->topo.link[TOPO_LINK_DC], "dc-bw", OV(CLI_DC_BW), "dc-lat",
		      OV(CLI_DC_LAT));
	if (OV(CLI_GPU_FLOPS))
		cfg->topo.gpu.peak_flops =
			cli_double(c, "--gpu-flops", OV(CLI_GPU_FLOPS), 1e9, 1e20);
	if (OV(CLI_GPU_EFF))
		cfg->topo.gpu.efficiency =
			cli_double(c, "--gpu-efficiency", OV(CLI_GPU_EFF), 1e-3, 1);
	if (OV(CLI_COST_MODEL)) {
		if (!strcmp(OV(CLI_COST_MODEL), "calibrated"))
			cfg->cost = EMU_COST_CALIBRATED;
		else if (!strcmp(OV(CLI_COST_MODEL), "roofline"))
			cfg->cost = EMU_COST_ROOFLINE;
		else
			cli_fail(c, "--cost-model: '%s' is not roofline or calibrated",
				 OV(CLI_COST_MODEL));
	}
	if (cc->no_nvls)
		cfg->topo.link[TOPO_LINK_INTRA].nvls_eff = 0;
	if (cc->nfaults > EMU_MAX_SLOW)
		cli_fail(c, "--inject-fault: at most %d faults, not %d", EMU_MAX_SLOW, cc->nfaults);
	for (int i = 0; i < cc->nfaults; i++)
		parse_fault(cc, c, cc->faults[i]);
	if (OV(CLI_HBM_BW)) {
		uint64_t bw;

		parse_bw(c, "hbm-bw", OV(CLI_HBM_BW), "2TB/s", &bw);
		cfg->topo.gpu.hbm_bw = (double)bw;
	}
	if (OV(CLI_MEM_CAP)) {
		cfg->mem_cap = cli_size(c, "--mem-cap", OV(CLI_MEM_CAP));
		if (cfg->mem_cap == 0)
			cli_fail(c, "--mem-cap: a GPU needs more than 0 bytes of memory");
	}
	if (OV(CLI_PACE))
		cfg->pace = cli_double(c, "--pace", OV(CLI_PACE), 0, 1e6);
	if (OV(CLI_HOST_THREADS))
		cfg->workers =
			!strcmp(OV(CLI_HOST_THREADS), "per-gpu")
				? -1
				: (int)cli_int(c, "--host-threads", OV(CLI_HOST_THREADS), 1, 1024);
	cfg->trace_devices = CLI_TRACE_DEVICES_DEFAULT;
	if (OV(CLI_TRACE_DEVICES))
		cfg->trace_devices = !strcmp(OV(CLI_TRACE_DEVICES), "all")
					     ? 0
					     : (int)cli_int(c, "--trace-devices",
							    OV(CLI_TRACE_DEVICES), 1, 1 << 20);
#undef OV
	cfg->trace = cc->trace_path || cc->timeline;
	cfg->ndev = devices > 0 ? devices : topo_ndev(&cfg->topo);
	if (devices > topo_ndev(&cfg->topo))
		cli_fail(c, "%d devices are more than the cluster has (%d node%s x %d GPUs = %d)%s",
			 devices, cfg->topo.nodes, cfg->topo.nodes == 1 ? "" : "s",
			 cfg->topo.gpus_per_node, topo_ndev(&cfg->topo),
			 cc->nodes_given ? "; raise --nodes" : "");
	for (int i = 0; i < cfg->nslow; i++) {
		const struct emu_slow *s = &cfg->slow[i];

		if (s->dev >= cfg->ndev)
			cli_fail(c, "--inject-fault slow:%d:%g: the run has devices 0 to %d",
				 s->dev, s->x, cfg->ndev - 1);
		if (s->dev < 0 && s->node >= cfg->topo.nodes)
			cli_fail(c, "--inject-fault link:%d:%g: the cluster has node%s 0%s%.0d",
				 s->node, s->x, cfg->topo.nodes > 1 ? "s" : "",
				 cfg->topo.nodes > 1 ? " to " : "",
				 cfg->topo.nodes > 1 ? cfg->topo.nodes - 1 : 0);
	}
	if (emu_config_check(cfg, why, sizeof why))
		cli_fail(c, "%s", why);
	if (cc->trace_path) { /* before the run, not after it */
		FILE *f = fopen(cc->trace_path, "w");

		if (!f)
			cli_fail(c, "--trace: cannot write '%s' (%s)", cc->trace_path,
				 strerror(errno));
		fclose(f);
	}
}

static int trace_lost; /* a --trace file could not be written (cli_exit_code) */

int cli_write_trace(const struct cli_cluster *cc, const struct emu_cluster *cl, const char *prog)
{
	int n, all = emu_cluster_config(cl)->ndev;

	if (!cc->trace_path)
		return 0;
	n = trace_devices_written(cl);
	if (trace_write_json(cl, cc->trace_path)) {
		fprintf(stderr, "%s: cannot write trace '%s': %s\n", prog, cc->trace_path,
			strerror(errno));
		trace_lost = 1;
		return -1;
	}
	if (n < all)
		fprintf(stderr,
			"%s: the trace in %s keeps devices 0 to %d of %d (--trace-devices N or "
			"all for more)\n",
			prog, cc->trace_path, n - 1, all);
	return 0;
}

void cli_print_exit_codes(FILE *f, const char *one)
{
	char text[512];
	int col = 0;

	snprintf(text, sizeof text,
		 "Exit codes: 0 success; 1 %s; 2 bad input (refused before anything runs); 70 "
		 "the host itself ran out of memory; 74 the report or the --trace file could not "
		 "be written.",
		 one ? one
		     : "a run failed (out of memory, the virtual clock's horizon, a diverged "
		       "loss, ...) or a check found wrong results");
	fputc('\n', f);
	for (char *w = strtok(text, " "); w; w = strtok(NULL, " ")) { /* wrapped at 88 */
		int len = (int)strlen(w);

		if (col && col + 1 + len > 88) {
			fputc('\n', f);
			col = 0;
		}
		col += fprintf(f, "%s%s", col ? " " : "", w);
	}
	fputc('\n', f);
}

int cli_exit_code(int rc)
{
	int lost = fflush(stdout) != 0 || ferror(stdout);

	if (lost)
		fprintf(stderr, "pemu: cannot write the standard output: %s\n",
			strerror(errno ? errno : EIO));
	return rc == 0 && (lost || trace_lost) ? CLI_EXIT_OUTPUT : rc;
}

/* One argument as a shell reads it back: as is if it is plain, else in single quotes;
 * and with json, escaped for a JSON string. */
void cli_put_arg(FILE *f, const char *a, int json)
{
	int plain = *a != '\0';

	for (const char *p = a; *p; p++)
		plain &= strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
				"_./:=,+-@%",
				*p) != NULL;
	fputc(' ', f);
	if (!plain)
		fputc('\'', f);
	for (const char *p = a; *p; p++) {
		if (!plain && *p == '\'')
			fputs("'\\''", f);
		else if (json && (*p == '"' || *p == '\\'))
			fprintf(f, "\\%c", *p);
		else if (json && (unsigned char)*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	if (!plain)
		fputc('\'', f);
}
