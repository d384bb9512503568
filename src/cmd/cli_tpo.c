/* cli_tpo: --tp-comm-overlap-cfg FILE, Transformer Engine's userbuffers configuration as
 * Megatron-LM takes it (a YAML file, the ub_cfgs of transformer_engine.pytorch
 * initialize_ub), and as NeMo and Megatron Bridge ship their presets: a GEMM's name at
 * the start of a line, then its settings indented under it, one "key: value" a line,
 * "#" comments. A GEMM left out, or a setting, keeps TE's default (get_default_config).
 *
 *   qkv_dgrad:                 # bulk: a whole collective beside the GEMM
 *     method: bulk
 *     num_sm: 4
 *     set_sm_margin: 0
 *   fc2_fprop:                 # a reduce-scatter as a ring of sends
 *     method: ring_exchange
 *
 * Read: method, num_sm, num_splits, set_sm_margin. Taken and ignored: cga_size (the CTAs'
 * clusters), fp8_buf (pemu's activations are bf16), comm_priority and gemm_priority (the
 * streams' priorities), and on a GEMM that is no ring exchange aggregate, atomic_gemm and
 * use_ce (TE ignores them there). Refused, each as not in this build: the external method,
 * a ring exchange's aggregate or atomic_gemm set or use_ce 0,
 * pipeline_rs_overlap_first_gemm set, and an input gradient's reduce-scatter other than
 * bulk (TE's dgrad_reduce_scatter_overlap). The YAML taken: mappings by indentation,
 * plain or quoted scalars, "#" comments, a "---" line, a byte-order mark; a GEMM named
 * twice is refused (PyYAML would keep the last). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/cli_par.h"

/* Where the file is wrong: "FILE:LINE: what" (the parser's text is static: nothing to
 * free on the way out). */
#define BAD(...)                                                                                   \
	cli_fail(c, "--tp-comm-overlap-cfg %s:%d: %s", path, line,                                 \
		 (snprintf(msg, sizeof msg, __VA_ARGS__), msg))

enum { TEXT_MAX = 64 << 10 };

static int is_true(const char *v, int *out)
{
	static const char *const yes[] = {"1",   "true", "True", "TRUE", "yes",
					  "Yes", "YES",  "on",   "On",   "ON"};
	static const char *const no[] = {"0",  "false", "False", "FALSE", "no",
					 "No", "NO",    "off",   "Off",   "OFF"};

	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
		if (!strcmp(v, yes[i]))
			return *out = 1, 1;
		if (!strcmp(v, no[i]))
			return *out = 0, 1;
	}
	return 0;
}

/* The whole number v in [1, 1024], or -1. */
static int count_of(const char *v)
{
	char *end;
	long x = strtol(v, &end, 10);

	return isdigit((unsigned char)*v) && !*end && x >= 1 && x <= 1024 ? (int)x : -1;
}

/* Which methods g may take in this build: an all-gather before its GEMM the ring, a
 * reduce-scatter after one the pipeline or the ring, the others bulk (TE's CommOverlap
 * and CommOverlapP2P; TE also pipelines or rings an input gradient's reduce-scatter). */
static int method_ok(enum par_tpo_gemm g, enum par_tpo_method k)
{
	if (g <= PAR_TPO_FC2_DGRAD)
		return k == PAR_TPO_RING;
	if (g <= PAR_TPO_FC2_FPROP)
		return k == PAR_TPO_RING || k == PAR_TPO_PIPELINE;
	return k == PAR_TPO_BULK;
}

static void setting(const struct cli *c, const char *path, int line, struct par_tpo_ub *u,
		    enum par_tpo_gemm g, const char *key, const char *v)
{
	static const char *const ignored[] = {"cga_size", "fp8_buf", "comm_priority",
					      "gemm_priority"};
	static const char *const ring_only[] = {"aggregate", "atomic_gemm", "use_ce"};
	const char *name = par_tpo_names[g];
	char msg[256];
	int b, n;

	if (!strcmp(key, "method")) {
		for (int k = 0; k < 3; k++)
			if (!strcmp(v, par_tpo_methods[k])) {
				if (!method_ok(g, (enum par_tpo_method)k))
					BAD("%s: method %s is not in this build, which runs %s as "
					    "%s",
					    name, v, name,
					    g <= PAR_TPO_FC2_DGRAD   ? "ring_exchange"
					    : g <= PAR_TPO_FC2_FPROP ? "pipeline or ring_exchange"
								     : "bulk");
				u->method = (enum par_tpo_method)k;
				return;
			}
		BAD("%s: method '%s' is not ring_exchange, pipeline or bulk%s", name, v,
		    !strcmp(v, "external") ? " (external is not in this build)" : "");
	}
	if (!strcmp(key, "num_sm") || !strcmp(key, "num_splits")) {
		if ((n = count_of(v)) < 0)
			BAD("%s: %s '%s' is not a whole number from 1 to 1024", name, key, v);
		*(!strcmp(key, "num_sm") ? &u->num_sm : &u->num_splits) = n;
		return;
	}
	if (!strcmp(key, "set_sm_margin")) {
		if (!is_true(v, &u->set_sm_margin))
			BAD("%s: set_sm_margin '%s' is not 0 or 1", name, v);
		return;
	}
	if (!strcmp(key, "pipeline_rs_overlap_first_gemm")) {
		if (!is_true(v, &b) || b)
			BAD("%s: pipeline_rs_overlap_first_gemm '%s' is not in this build (only 0)",
			    name, v);
		return;
	}
	for (size_t i = 0; i < sizeof ring_only / sizeof *ring_only; i++)
		if (!strcmp(key, ring_only[i])) {
			int want = i == 2; /* use_ce 1, the others 0 */

			if (!is_true(v, &b))
				BAD("%s: %s '%s' is not 0 or 1", name, key, v);
			if (b != want && u->method == PAR_TPO_RING)
				BAD("%s: %s %d is not in this build (only %s %d)", name, key, b,
				    key, want);
			return;
		}
	for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
		if (!strcmp(key, ignored[i]))
			return;
	BAD("%s: unknown setting '%s' (method, num_sm, num_splits, set_sm_margin, ...)", name, key);
}

/* The file's text (at most 64 KiB) into text, NUL-terminated; its length. */
static size_t slurp(const struct cli *c, const char *path, char *text)
{
	struct stat st;
	FILE *f = fopen(path, "rb");
	size_t n;
	int bad;

	if (!f)
		cli_fail(c, "--tp-comm-overlap-cfg: cannot open '%s'", path);
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		fclose(f);
		cli_fail(c, "--tp-comm-overlap-cfg: '%s' is not a file", path);
	}
	n = fread(text, 1, TEXT_MAX + 1, f);
	bad = ferror(f);
	fclose(f);
	if (bad)
		cli_fail(c, "--tp-comm-overlap-cfg: cannot read '%s'", path);
	if (n > TEXT_MAX)
		cli_fail(c, "--tp-comm-overlap-cfg: '%s' is longer than 64 KiB", path);
	text[n] = '\0';
	return n;
}

/* s without blanks at either end, and without the quotes of a quoted scalar. */
static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	if (e - s >= 2 && (*s == '"' || *s == '\'') && e[-1] == *s) {
		e[-1] = '\0';
		s++;
	}
	return s;
}

void cli_tpo_read(const struct cli *c, const char *path, struct par_tpo_cfg *cfg)
{
	static char text[TEXT_MAX + 1];
	char msg[256], *next = text;
	size_t n = slurp(c, path, text);
	int line = 1, g = -1, named[PAR_TPO_NGEMMS] = {0};

	par_tpo_defaults(cfg);
	if (strlen(text) != n)
		BAD("the file holds a NUL byte");
	if (!strncmp(next, "\xEF\xBB\xBF", 3)) /* a byte-order mark */
		next += 3;
	for (; next && *next; line++) {
		char *s = next, *colon, *key, *v, *e;

		if ((next = strchr(s, '\n')))
			*next++ = '\0';
		if ((e = strchr(s, '#')))
			*e = '\0';
		if (!*trim(s) || !strcmp(trim(s), "---"))
			continue;
		if (!(colon = strchr(s, ':')))
			BAD("'%s' is not 'key: value'", trim(s));
		*colon = '\0';
		v = trim(colon + 1);
		if (!isspace((unsigned char)*s)) { /* a GEMM's name */
			key = trim(s);
			for (g = 0; g < PAR_TPO_NGEMMS && strcmp(key, par_tpo_names[g]); g++)
				;
			if (g == PAR_TPO_NGEMMS || *v)
				BAD("'%s' is not one of Transformer Engine's GEMMs (qkv_fprop, "
				    "fc1_fprop, "
				    "proj_dgrad, fc2_dgrad, proj_fprop, fc2_fprop, qkv_dgrad, "
				    "fc1_dgrad, qkv_wgrad, fc1_wgrad) followed by its settings%s",
				    key,
				    !strcmp(key, "proj_wgrad") || !strcmp(key, "fc2_wgrad")
					    ? " (its external method is not in this build)"
					    : "");
			if (named[g]++)
				BAD("%s is named twice", key);
			continue;
		}
		key = trim(s);
		if (g < 0)
			BAD("'%s' before any GEMM's name", key);
		setting(c, path, line, &cfg->g[g], (enum par_tpo_gemm)g, key, v);
	}
}
