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
 * streams' priorities). Refused, each as not in this build: the external method,
 * aggregate, atomic_gemm, use_ce 0 and pipeline_rs_overlap_first_gemm set. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli_par.h"
#include "util.h"

/* Where the file is wrong: "FILE:LINE: what". */
#define BAD(...)                                                                                   \
	cli_fail(c, "--tp-comm-overlap-cfg %s:%d: %s", path, line,                                 \
		 (snprintf(msg, sizeof msg, __VA_ARGS__), msg))

static int is_true(const char *v, int *out)
{
	static const char *const yes[] = {"1", "true", "True", "TRUE", "yes"};
	static const char *const no[] = {"0", "false", "False", "FALSE", "no"};

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

	return *v && !*end && x >= 1 && x <= 1024 ? (int)x : -1;
}

/* Which methods g may take: an all-gather before its GEMM only the ring, a reduce-scatter
 * after one the pipeline or the ring, the others bulk (TE's CommOverlap and
 * CommOverlapP2P). */
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
	char msg[256];
	int b, n;

	if (!strcmp(key, "method")) {
		for (int k = 0; k < 3; k++)
			if (!strcmp(v, par_tpo_methods[k])) {
				if (!method_ok(g, (enum par_tpo_method)k))
					BAD("%s: method %s: Transformer Engine runs %s as %s",
					    par_tpo_names[g], v, par_tpo_names[g],
					    g <= PAR_TPO_FC2_DGRAD   ? "ring_exchange"
					    : g <= PAR_TPO_FC2_FPROP ? "pipeline or ring_exchange"
								     : "bulk");
				u->method = (enum par_tpo_method)k;
				return;
			}
		BAD("%s: method '%s' is not ring_exchange, pipeline or bulk%s", par_tpo_names[g], v,
		    !strcmp(v, "external") ? " (external is not in this build)" : "");
	}
	if (!strcmp(key, "num_sm") || !strcmp(key, "num_splits")) {
		if ((n = count_of(v)) < 0)
			BAD("%s: %s '%s' is not a whole number from 1 to 1024", par_tpo_names[g],
			    key, v);
		*(key[4] == 's' && key[5] == 'm' ? &u->num_sm : &u->num_splits) = n;
		return;
	}
	if (!strcmp(key, "set_sm_margin")) {
		if (!is_true(v, &u->set_sm_margin))
			BAD("%s: set_sm_margin '%s' is not 0 or 1", par_tpo_names[g], v);
		return;
	}
	if (!strcmp(key, "aggregate") || !strcmp(key, "atomic_gemm") ||
	    !strcmp(key, "pipeline_rs_overlap_first_gemm") || !strcmp(key, "use_ce")) {
		int want = !strcmp(key, "use_ce");

		if (!is_true(v, &b))
			BAD("%s: %s '%s' is not 0 or 1", par_tpo_names[g], key, v);
		if (b != want)
			BAD("%s: %s %d is not in this build (only %s %d)", par_tpo_names[g], key, b,
			    key, want);
		return;
	}
	for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
		if (!strcmp(key, ignored[i]))
			return;
	BAD("%s: unknown setting '%s' (method, num_sm, num_splits, set_sm_margin, ...)",
	    par_tpo_names[g], key);
}

/* The file's text (at most 64 KiB), closed before a line is read. */
static char *slurp(const struct cli *c, const char *path)
{
	enum { MAX = 64 << 10 };
	FILE *f = fopen(path, "r");
	char *text = emu_xmalloc(MAX + 1);
	size_t n;

	if (!f) {
		free(text);
		cli_fail(c, "--tp-comm-overlap-cfg: cannot open '%s'", path);
	}
	n = fread(text, 1, MAX + 1, f);
	fclose(f);
	if (n > MAX) {
		free(text);
		cli_fail(c, "--tp-comm-overlap-cfg: '%s' is longer than 64 KiB", path);
	}
	text[n] = '\0';
	return text;
}

void cli_tpo_read(const struct cli *c, const char *path, struct par_tpo_cfg *cfg)
{
	char *text = slurp(c, path), *next = text, msg[256];
	int line = 0, g = -1;

	par_tpo_defaults(cfg);
	while (next && *next) {
		char *s = next, *colon, *v, *e;
		int indent;

		line++;
		if ((next = strchr(s, '\n')))
			*next++ = '\0';
		if ((e = strchr(s, '#')))
			*e = '\0';
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = '\0';
		for (indent = 0; s[indent] == ' ' || s[indent] == '\t'; indent++)
			;
		if (!s[indent])
			continue;
		if (!(colon = strchr(s + indent, ':')))
			BAD("'%s' is not 'key: value'", s + indent);
		*colon = '\0';
		for (v = colon + 1; isspace((unsigned char)*v); v++)
			;
		if (!indent) {
			for (g = 0; g < PAR_TPO_NGEMMS && strcmp(s, par_tpo_names[g]); g++)
				;
			if (g == PAR_TPO_NGEMMS || *v)
				BAD("'%s' is not one of Transformer Engine's GEMMs (qkv_fprop, "
				    "fc1_fprop, "
				    "proj_dgrad, fc2_dgrad, proj_fprop, fc2_fprop, qkv_dgrad, "
				    "fc1_dgrad, qkv_wgrad, fc1_wgrad) followed by its settings%s",
				    s,
				    !strcmp(s, "proj_wgrad") || !strcmp(s, "fc2_wgrad")
					    ? " (its external method is not in this build)"
					    : "");
			continue;
		}
		if (g < 0)
			BAD("'%s' before any GEMM's name", s + indent);
		setting(c, path, line, &cfg->g[g], (enum par_tpo_gemm)g, s + indent, v);
	}
	free(text);
}
