/* Checkpoints (run/ckpt.h): a run resumed from a checkpoint is the uninterrupted run,
 * bitwise (its losses, and its last checkpoint byte for byte), under every layout; a
 * checkpoint saved under one layout continues under another within verify's tolerances,
 * against the serial reference started from the same checkpoint; a crash mid-save loses
 * nothing; a damaged checkpoint is refused with a line saying what is wrong; and pemu's
 * --save, --load and --save-interval do all of it from the command line. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "run/ckpt.h"
#include "run/run.h"
#include "verify.h"

static struct data corpus;

/* A directory of its own under /tmp, and its removal. */
static void temp_dir(char *buf, size_t n)
{
	snprintf(buf, n, "/tmp/pemu-ckpt-XXXXXX");
	assert_non_null(mkdtemp(buf));
}

static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			unlink(path);
		}
	closedir(d);
	rmdir(dir);
}

/* The whole of a file, and its length. */
static unsigned char *slurp(const char *path, size_t *len)
{
	unsigned char *b = (unsigned char *)test_slurp(path, len);

	if (!b)
		fail_msg("cannot read %s", path);
	return b;
}

static void assert_same_file(const char *a, const char *b)
{
	size_t na, nb;
	unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);

	if (na != nb || memcmp(x, y, na))
		fail_msg("%s and %s differ (%zu and %zu bytes)", a, b, na, nb);
	free(x);
	free(y);
}

/* ------------------------------------------------------------------------------------ */
/* Layouts                                                                              */

static const struct layout {
	const char *name;
	int dp, tp, pp, cp, ep, zero, sp;
	int moe;
	float dropout; /* --hidden-dropout and --attention-dropout: the resumed run's masks are
			* the uninterrupted one's */
} layouts[] = {
	{"serial", 1, 1, 1, 1, 1, 0, 0, 0, 0},
	{"tp2-pp2-dp2-zero1", 2, 2, 2, 1, 1, 1, 0, 0, 0.1f},
	{"tp4-dp2", 2, 4, 1, 1, 1, 0, 0, 0, 0},
	{"tp2-dp2-zero3-sp", 2, 2, 1, 1, 1, 3, 1, 0, 0.1f},
	{"cp2-dp2-zero2", 2, 1, 1, 2, 1, 2, 0, 0, 0.1f},
	{"moe-dp2", 2, 1, 1, 1, 1, 0, 0, 1, 0},
	{"moe-ep2-dp2-zero1", 2, 1, 1, 1, 2, 1, 0, 1, 0.1f},
	{"moe-tp2-ep2", 1, 2, 1, 1, 2, 0, 0, 1, 0},
};

static const struct layout *layout_named(const char *name)
{
	for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
		if (!strcmp(layouts[i].name, name))
			return &layouts[i];
	fail_msg("no layout %s", name);
	return NULL;
}

/* The test configuration (tests/verify.h) under layout l: 4 layers (every pipeline
 * stage two), 4 iterations in all, warm-up and decay as a run of 4 would have them. */
static void layout_cfg(struct run_cfg *cfg, const struct layout *l)
{
	test_make_cfg(cfg, l->moe ? "moe-tiny" : "tiny", l->dp, l->tp, l->pp, &corpus);
	mesh_init(&cfg->mesh, l->tp, l->cp, 1, l->dp, l->pp);
	cfg->model.num_layers = 4;
	cfg->gbs = 8 * l->pp;
	cfg->ep = l->ep;
	cfg->zero = l->zero;
	cfg->sp = l->sp;
	cfg->flash = l->cp > 1;
	cfg->opt.decay_steps = 4;
	cfg->model.hidden_dropout = l->dropout;
	cfg->model.attention_dropout = l->dropout;
}

/* Runs cfg (steps from cfg->step0, resumed from cfg->resume if set) on its mesh, or as
 * the serial reference with ref; o is filled for verify_compare. */
static void run_cfg_on(const struct run_cfg *cfg, int ref, struct run_out *o)
{
	struct emu_cluster *cl = test_cluster("dgx-a100", 1, ref ? 1 : cfg->mesh.world, 0, 0);
	char err[256];
	int rc;

	if (!ref && run_check(cfg, cfg->mesh.world, err, sizeof err))
		fail_msg("refused: %s", err);
	run_alloc(o, cfg, 1);
	rc = ref ? run_reference(cl, cfg, o) : run_parallel(cl, cfg, o);
	if (rc)
		fail_msg("the run failed: %s", emu_cluster_report(cl));
	emu_cluster_free(cl);
}

/* The checkpoint of iteration iter in dir, fitted to cfg. */
static void load_into(const char *dir, int iter, struct run_cfg *cfg, struct ckpt *c)
{
	char path[512], err[600];

	ckpt_path(path, sizeof path, dir, iter);
	if (ckpt_read(path, c, err, sizeof err) || ckpt_fit(c, cfg, err, sizeof err))
		fail_msg("%s", err);
	cfg->resume = c;
	cfg->step0 = iter;
}

/* Under each layout: 4 iterations with a checkpoint every 2, and the same run resumed
 * from iteration 2 (a new process would do no more: the checkpoint is all it has). The
 * resumed run's losses are the uninterrupted run's last two, bitwise, and its checkpoint
 * of iteration 4 is the same file byte for byte. */
static void test_resume_is_bitwise(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
		const struct layout *l = &layouts[i];
		char a[64], b[64], fa[512], fb[512];
		struct run_cfg cfg, again;
		struct run_out whole, resumed;
		struct ckpt c;

		if (test_skip_large() && i > 1)
			continue;
		temp_dir(a, sizeof a);
		temp_dir(b, sizeof b);
		layout_cfg(&cfg, l);
		cfg.steps = 4;
		cfg.save = a;
		cfg.save_interval = 2;
		run_cfg_on(&cfg, 0, &whole);

		again = cfg;
		again.save = b;
		again.steps = 2;
		load_into(a, 2, &again, &c);
		run_cfg_on(&again, 0, &resumed);
		for (int s = 0; s < 2; s++)
			if (memcmp(&whole.loss[2 + s], &resumed.loss[s], sizeof(float)))
				fail_msg(
					"%s: the loss of iteration %d is %.9g resumed, %.9g in one "
					"run",
					l->name, 3 + s, (double)resumed.loss[s],
					(double)whole.loss[2 + s]);
		ckpt_path(fa, sizeof fa, a, 4);
		ckpt_path(fb, sizeof fb, b, 4);
		assert_same_file(fa, fb);
		printf("ok   %-20s resumed at 2: iterations 3-4 and the checkpoint of 4 bitwise\n",
		       l->name);
		ckpt_free(&c);
		run_free(&whole);
		run_free(&resumed);
		remove_dir(a);
		remove_dir(b);
	}
}

/* A checkpoint saved under one layout (2 iterations) continues under another (2 more)
 * as the serial reference started from the same checkpoint does, within verify's
 * tolerances: weights and Adam's state reach every rank of the new layout where its
 * shards want them (a rank that started from the initial weights, or with no Adam state,
 * would be off by a learning rate's worth at once). */
static void test_loads_under_any_layout(void **state)
{
	static const struct {
		const char *from, *to;
		int vocab_div; /* the loading run pads its vocabulary so (0: 128) */
	} pairs[] = {
		{"tp2-pp2-dp2-zero1", "tp4-dp2", 0},
		{"tp2-pp2-dp2-zero1", "tp2-dp2-zero3-sp", 0},
		{"tp2-dp2-zero3-sp", "cp2-dp2-zero2", 0},
		{"cp2-dp2-zero2", "serial", 0},
		{"serial", "tp2-pp2-dp2-zero1", 96}, /* 256 rows saved, 384 loaded */
		{"moe-ep2-dp2-zero1", "moe-tp2-ep2", 0},
		{"moe-tp2-ep2", "moe-dp2", 0},
	};

	(void)state;
	for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
		char dir[64];
		struct run_cfg cfg, next;
		struct run_out first, par, ref;
		struct verify_result v;
		struct ckpt c;

		if (test_skip_large() && i > 0)
			continue;
		temp_dir(dir, sizeof dir);
		layout_cfg(&cfg, layout_named(pairs[i].from));
		cfg.steps = 2;
		cfg.save = dir;
		run_cfg_on(&cfg, 0, &first);

		layout_cfg(&next, layout_named(pairs[i].to));
		if (pairs[i].vocab_div) { /* as run_cfg_finish pads: 96 x tp 2 */
			int unit = pairs[i].vocab_div * next.mesh.size[MESH_TP];

			next.vocab_div = pairs[i].vocab_div;
			next.vocab_orig = next.model.vocab;
			next.model.vocab = (next.model.vocab + unit - 1) / unit * unit;
		}
		next.steps = 2;
		load_into(dir, 2, &next, &c);
		assert_int_equal(c.model.vocab, next.model.vocab);
		run_cfg_on(&next, 0, &par);
		run_cfg_on(&next, 1, &ref);
		verify_compare(&ref, &par, &next, &v);
		if (!v.passed)
			fail_msg("%s -> %s: loss %.3g, gradient %.3g, parameter %.3g",
				 pairs[i].from, pairs[i].to, v.loss_err, v.grad_err, v.param_err);
		printf("ok   %-20s -> %-20s loss %.2g  grad %.2g  param %.2g\n", pairs[i].from,
		       pairs[i].to, v.loss_err, v.grad_err, v.param_err);
		ckpt_free(&c);
		run_free(&first);
		run_free(&par);
		run_free(&ref);
		remove_dir(dir);
	}
}

/* A vocabulary padded further on loading keeps the saved rows and their Adam state, and
 * the new rows are a fresh run's, with none. */
static void test_vocab_grows(void **state)
{
	char dir[64], path[512], err[600];
	struct run_cfg cfg;
	struct run_out o;
	struct ckpt saved, c;
	size_t h, keep;
	float *init;

	(void)state;
	temp_dir(dir, sizeof dir);
	layout_cfg(&cfg, layout_named("serial"));
	cfg.steps = 1;
	cfg.save = dir;
	run_cfg_on(&cfg, 0, &o);
	ckpt_path(path, sizeof path, dir, 1);
	assert_int_equal(ckpt_read(path, &saved, err, sizeof err), 0);
	assert_int_equal(ckpt_read(path, &c, err, sizeof err), 0);
	cfg.vocab_orig = cfg.model.vocab;
	cfg.model.vocab = 384;
	assert_int_equal(ckpt_fit(&c, &cfg, err, sizeof err), 0);
	h = (size_t)cfg.model.hidden;
	keep = (size_t)saved.model.vocab * h;
	init = calloc(384 * h, sizeof *init);
	gpt_tensor_init(&cfg.model, cfg.seed, 0, init);
	assert_memory_equal(c.w[0], saved.w[0], keep * sizeof(float));
	assert_memory_equal(c.m[0], saved.m[0], keep * sizeof(float));
	assert_memory_equal(c.w[0] + keep, init + keep, (384 * h - keep) * sizeof(float));
	for (size_t e = keep; e < 384 * h; e++)
		assert_true(c.m[0][e] == 0 && c.v[0][e] == 0);
	free(init);
	ckpt_free(&saved);
	ckpt_free(&c);
	run_free(&o);
	remove_dir(dir);
}

/* ------------------------------------------------------------------------------------ */
/* Crashes and damage                                                                   */

static uint64_t crash_at;

static void crash(uint64_t written)
{
	if (written >= crash_at)
		_exit(0);
}

/* A process killed half-way through writing the checkpoint of iteration 2 leaves the
 * tracker on iteration 1, whose checkpoint loads whole; the next save succeeds. */
static void test_crash_mid_save(void **state)
{
	char dir[64], err[600], path[512];
	struct run_cfg cfg;
	struct ckpt c, back;
	size_t len;
	unsigned char *first;
	pid_t pid;
	int st, iter;

	(void)state;
	temp_dir(dir, sizeof dir);
	layout_cfg(&cfg, layout_named("serial"));
	ckpt_alloc(&c, &cfg, 1);
	for (size_t e = 0; e < gpt_tensor_numel(&c.model, 3); e++)
		c.w[3][e] = (float)e;
	assert_int_equal(ckpt_save(dir, &c, err, sizeof err), 0);
	ckpt_path(path, sizeof path, dir, 1);
	first = slurp(path, &len);
	c.iter = 2;
	c.w[3][0] = -1;
	crash_at = len / 2;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		ckpt_write_hook = crash;
		ckpt_save(dir, &c, err, sizeof err);
		_exit(1); /* (the hook should have ended it) */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(ckpt_latest(dir, &iter, err, sizeof err), 1);
	assert_int_equal(iter, 1);
	ckpt_path(path, sizeof path, dir, 2);
	assert_int_equal(access(path, F_OK), -1); /* only its temporary file */
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), 0);
	assert_int_equal(back.iter, 1);
	assert_true(back.w[3][0] == 0 && back.w[3][5] == 5);
	ckpt_free(&back);
	assert_int_equal(ckpt_save(dir, &c, err, sizeof err), 0);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), 0);
	assert_int_equal(back.iter, 2);
	assert_true(back.w[3][0] == -1);
	ckpt_free(&back);
	ckpt_free(&c);
	free(first);
	remove_dir(dir);
}

/* Writes len bytes of b as dir's checkpoint of iteration 1, the tracker pointing at it. */
static void plant(const char *dir, const unsigned char *b, size_t len)
{
	char path[512];
	FILE *f;

	ckpt_path(path, sizeof path, dir, 1);
	assert_non_null(f = fopen(path, "wb"));
	assert_int_equal(fwrite(b, 1, len, f), len);
	fclose(f);
	snprintf(path, sizeof path, "%s/%s", dir, CKPT_TRACKER);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "1\n");
	fclose(f);
}

/* b (len bytes, a checkpoint) with the text old of its header replaced by new (as long)
 * and its checksum made right again: a header that is wrong, not damaged. */
static void rewrite(unsigned char *b, size_t len, const char *old, const char *new)
{
	unsigned char *at = NULL;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; !at && i + strlen(old) <= len; i++)
		at = memcmp(b + i, old, strlen(old)) ? NULL : b + i;
	assert_non_null(at);
	assert_int_equal(strlen(old), strlen(new));
	memcpy(at, new, strlen(new));
	for (size_t i = 0; i + 16 < len; i++) /* FNV-1a 64 of all before the sum */
		h = (h ^ b[i]) * 0x100000001b3ull;
	memcpy(b + len - 16, &h, sizeof h);
}

/* Every kind of damage is refused, the line naming the file and what is wrong; so are
 * headers whose checksum is right but whose values are not a run's. */
static void test_damage_is_refused(void **state)
{
	char dir[64], err[600], path[512];
	struct run_cfg cfg, other;
	struct ckpt c, back;
	unsigned char *good, *bad;
	size_t len;
	FILE *f;

	(void)state;
	temp_dir(dir, sizeof dir);
	layout_cfg(&cfg, layout_named("serial"));
	ckpt_alloc(&c, &cfg, 1);
	assert_int_equal(ckpt_save(dir, &c, err, sizeof err), 0);
	ckpt_free(&c);
	ckpt_path(path, sizeof path, dir, 1);
	good = slurp(path, &len);
	bad = malloc(len);

	plant(dir, good, len - 100);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "iter_0000001.pemu is truncated"));

	memcpy(bad, good, len);
	bad[len / 2] ^= 0x10; /* a bit of a tensor */
	plant(dir, bad, len);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "is corrupt: its checksum is"));

	memcpy(bad, good, len);
	bad[20] ^= 0x01; /* the header's text: "seed" becomes "sefd" or its value changes */
	plant(dir, bad, len);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "is corrupt"));

	memcpy(bad, good, len);
	bad[8] = 9; /* the format version */
	plant(dir, bad, len);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "a checkpoint of format 9; this pemu reads 1"));

	static const struct {
		const char *old, *new, *says;
	} wrong[] = {
		{"padded_vocab_size 256\n", "padded_vocab_size 002\n", "padded_vocab_size"},
		{"\nlr 0.001\n", "\nlr 1e+99\n", "valid lr"},
		{"\nadam_eps 1e-08\n", "\nadam_eps nan()\n", "valid adam_eps"}, /* NaN */
		{"seed 11\n", "seed -1\n", "valid seed"},
		{"num_layers 4\n", "num_layers 0\n", "valid num_layers"},
	};

	for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
		memcpy(bad, good, len);
		rewrite(bad, len, wrong[i].old, wrong[i].new);
		plant(dir, bad, len);
		assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
		if (!strstr(err, wrong[i].says))
			fail_msg("%s: %s", wrong[i].new, err);
	}
	memcpy(bad, good, len);
	rewrite(bad, len, "iteration 1\n", "iteration 7\n"); /* not the tracker's */
	plant(dir, bad, len);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "holds iteration 7, where"));

	plant(dir, (const unsigned char *)"not a checkpoint", 16);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "is not a pemu checkpoint"));

	snprintf(path, sizeof path, "%s/%s", dir, CKPT_TRACKER);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "seven\n");
	fclose(f);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "holds 'seven', not an iteration"));
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "1\n3\n"); /* one iteration, nothing after it */
	fclose(f);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "not an iteration"));

	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "3\n"); /* names a checkpoint that is not there */
	fclose(f);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "iter_0000003.pemu"));

	plant(dir, good, len); /* whole again: loads, but not into another model */
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), 0);
	other = cfg;
	other.model.hidden = 128;
	other.model.ffn = 512;
	assert_int_equal(ckpt_fit(&back, &other, err, sizeof err), -1);
	assert_non_null(strstr(err, "--hidden-size 64, this run's 128"));
	ckpt_free(&back);

	unlink(path);
	assert_int_equal(ckpt_load(dir, &back, err, sizeof err), -1);
	assert_non_null(strstr(err, "no checkpoint there"));
	free(good);
	free(bad);
	remove_dir(dir);
}

/* ------------------------------------------------------------------------------------ */
/* The command line                                                                     */

/* pemu's exit code for args (tests/common.h), which must exit. */
static int pemu(const char *args, int err, char *out, size_t n)
{
	int rc = test_pemu(args, err, out, n);

	assert_true(rc >= 0);
	return rc;
}

/* The loss of iteration it in a --json report's "steps". */
static double json_loss(const char *json, int it)
{
	char key[32];
	const char *at;

	snprintf(key, sizeof key, "{\"step\":%d,\"loss\":", it);
	assert_non_null(at = strstr(json, key));
	return strtod(at + strlen(key), NULL);
}

/* Megatron's relaunch: the same command with --save and --load on one directory starts
 * from iteration 0, and launched again after a stop continues where the checkpoint is,
 * to the same losses as one launch; pemu train's checkpoint loads into pemu verify
 * under tp 2 pp 2 dp 2 and passes; bad uses are exit 2 with a line. */
static void test_command_line(void **state)
{
	static char out[1 << 16], once[1 << 16];
	char dir[64], one[64], args[512];
	const char *common = "--model tiny --num-layers 4 --micro-batch-size 2 "
			     "--global-batch-size 8 --dp 2 --tp 2 --zero-stage 1";

	(void)state;
	temp_dir(dir, sizeof dir);
	temp_dir(one, sizeof one);
	snprintf(args, sizeof args, "run %s --steps 6 --json", common);
	assert_int_equal(pemu(args, 0, once, sizeof once), 0);
	/* the first launch stops at 3 (its --train-iters), the relaunch goes on to 6 */
	snprintf(args, sizeof args, "run %s --steps 3 --save %s --load %s --json", common, dir,
		 dir);
	assert_int_equal(pemu(args, 1, out, sizeof out), 0);
	assert_non_null(strstr(out, "starting from iteration 0"));
	snprintf(args, sizeof args, "run %s --steps 4 --hidden-dropout 0.1 --load %s", common, dir);
	assert_int_equal(pemu(args, 1, out, sizeof out), 0); /* a training setting: named */
	assert_non_null(strstr(out, "--hidden-dropout 0.1 (saved 0)"));
	snprintf(args, sizeof args, "run %s --steps 4 --attention-dropout 0.1 --load %s", common,
		 dir);
	assert_int_equal(pemu(args, 1, out, sizeof out), 0);
	assert_non_null(strstr(out, "--attention-dropout 0.1 (saved 0)"));
	snprintf(args, sizeof args,
		 "run %s --steps 6 --lr-decay-iters 6 --save %s --load %s --json", common, dir,
		 dir);
	/* (the first launch's learning rate decayed over 3: the relaunch says so) */
	assert_int_equal(pemu(args, 1, out, sizeof out), 0);
	assert_non_null(strstr(out, "note: the run differs"));
	/* launched again once done: nothing to train, and a success, as Megatron's relaunch */
	assert_int_equal(pemu(args, 1, out, sizeof out), 0);
	assert_non_null(
		strstr(out, "is at iteration 6, the --train-iters asked: nothing to train"));
	snprintf(args, sizeof args, "run %s --steps 5 --load %s", common, dir);
	assert_int_equal(pemu(args, 1, out, sizeof out), 2); /* past the iteration asked */
	assert_non_null(strstr(out, "--train-iters 5: the checkpoint in"));
	remove_dir(dir);
	temp_dir(dir, sizeof dir);
	snprintf(args, sizeof args, "run %s --steps 6 --save %s --save-interval 3 --json", common,
		 dir);
	assert_int_equal(pemu(args, 0, out, sizeof out), 0);
	{ /* a stop after iteration 3: only its checkpoint is left */
		char path[512];
		FILE *f;

		/* (and the host check's sizing dry-run, one step long, wrote none of its own) */
		ckpt_path(path, sizeof path, dir, 1);
		assert_int_not_equal(access(path, F_OK), 0);
		ckpt_path(path, sizeof path, dir, 6);
		unlink(path);
		snprintf(path, sizeof path, "%s/%s", dir, CKPT_TRACKER);
		assert_non_null(f = fopen(path, "w"));
		fprintf(f, "3\n");
		fclose(f);
	}
	snprintf(args, sizeof args, "run %s --load %s --json", common, dir);
	assert_int_equal(pemu(args, 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "\"start_iteration\":3"));
	for (int it = 4; it <= 6; it++)
		assert_true(json_loss(out, it) == json_loss(once, it));

	/* serial training's checkpoint into verify under another layout */
	snprintf(args, sizeof args, "train --model tiny --num-layers 4 --steps 2 --save %s", one);
	assert_int_equal(pemu(args, 0, out, sizeof out), 0);
	snprintf(args, sizeof args,
		 "verify --model tiny --num-layers 4 --tp 2 --pp 2 --dp 2 --micro-batch-size 2 "
		 "--global-batch-size 8 --load %s",
		 one);
	assert_int_equal(pemu(args, 0, out, sizeof out), 0);
	assert_non_null(strstr(out, "# from the checkpoint of iteration 2"));
	assert_non_null(strstr(out, "step   5  loss"));
	assert_non_null(strstr(out, "verify: PASSED"));

	snprintf(args, sizeof args, "run --model tiny --load %s --num-layers 2", one);
	assert_int_equal(pemu(args, 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--load: the checkpoint's model has --num-layers 4, this "
				    "run's 2"));
	assert_int_equal(pemu("run --model tiny --dry-run --save /tmp/x", 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--save: a dry-run holds shapes, not weights"));
	assert_int_equal(pemu("run --model tiny --save-interval 2", 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--save-interval 2: saves to --save DIR"));
	assert_int_equal(pemu("run --model tiny --load /nonexistent/dir", 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--load /nonexistent/dir: no checkpoint there"));
	assert_int_equal(pemu("train --model tiny --save /proc/pemu", 1, out, sizeof out), 2);
	assert_non_null(strstr(out, "--save /proc/pemu: cannot make the directory"));
	remove_dir(dir);
	remove_dir(one);
}

static int setup(void **state)
{
	(void)state;
	data_builtin(&corpus, 1 << 20);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	data_free(&corpus);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resume_is_bitwise),
		cmocka_unit_test(test_loads_under_any_layout),
		cmocka_unit_test(test_vocab_grows),
		cmocka_unit_test(test_crash_mid_save),
		cmocka_unit_test(test_damage_is_refused),
		cmocka_unit_test(test_command_line),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
