/* run/ckpt: checkpoints in a directory, saved atomically and loaded; fitted to a run and
 * to the serial model. The file's bytes are run/ckpt_file.c's. See ckpt.h. */
#include "run/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster.h"
#include "util.h"

void ckpt_alloc_tensors(struct ckpt *c)
{
	c->np = gpt_num_tensors(&c->model);
	c->w = emu_xcalloc((size_t)c->np, sizeof *c->w);
	c->m = emu_xcalloc((size_t)c->np, sizeof *c->m);
	c->v = emu_xcalloc((size_t)c->np, sizeof *c->v);
	for (int i = 0; i < c->np; i++) {
		size_t n = gpt_tensor_numel(&c->model, i);

		c->w[i] = emu_xcalloc(n ? n : 1, sizeof **c->w);
		c->m[i] = emu_xcalloc(n ? n : 1, sizeof **c->m);
		c->v[i] = emu_xcalloc(n ? n : 1, sizeof **c->v);
	}
}

void ckpt_alloc(struct ckpt *c, const struct run_cfg *cfg, int iter)
{
	char mesh[96];

	memset(c, 0, sizeof *c);
	c->model = cfg->model;
	c->vocab_orig = cfg->vocab_orig ? cfg->vocab_orig : cfg->model.vocab;
	c->vocab_saved = cfg->model.vocab;
	c->iter = iter;
	c->train_iters = cfg->step0 + cfg->steps;
	c->seed = cfg->seed;
	c->mbs = cfg->mbs;
	c->gbs = cfg->gbs;
	c->opt = cfg->opt;
	mesh_describe(&cfg->mesh, mesh, sizeof mesh);
	snprintf(c->layout, sizeof c->layout, "%s, ZeRO %d", mesh, cfg->zero);
	if (cfg->ep > 1)
		snprintf(c->layout + strlen(c->layout), sizeof c->layout - strlen(c->layout),
			 ", ep %d", cfg->ep);
	ckpt_alloc_tensors(c);
}

void ckpt_free(struct ckpt *c)
{
	for (int i = 0; i < c->np; i++) {
		free(c->w[i]);
		free(c->m[i]);
		free(c->v[i]);
	}
	free(c->w);
	free(c->m);
	free(c->v);
	memset(c, 0, sizeof *c);
}

uint64_t ckpt_bytes(const struct gpt_config *model)
{
	uint64_t n = 0;

	for (int i = 0; i < gpt_num_tensors(model); i++)
		n += gpt_tensor_numel(model, i);
	return 12 * n;
}

int ckpt_saves_at(const struct run_cfg *cfg, int it)
{
	return cfg->save && ((cfg->save_interval && it % cfg->save_interval == 0) ||
			     it == cfg->step0 + cfg->steps);
}

/* ------------------------------------------------------------------------------------ */
/* Files                                                                                */

static void path_of(char *buf, size_t n, const char *dir, const char *name)
{
	snprintf(buf, n, "%s/%s", dir, name);
}

static void file_of(char *buf, size_t n, const char *dir, int iter, int tmp)
{
	snprintf(buf, n, "%s/%siter_%07d.pemu%s", dir, tmp ? "." : "", iter, tmp ? ".tmp" : "");
}

void ckpt_path(char *buf, size_t n, const char *dir, int iter)
{
	file_of(buf, n, dir, iter, 0);
}

int ckpt_check_dir(const char *dir, char *err, size_t n)
{
	char path[4096], probe[4200];
	size_t len = strlen(dir);
	int fd;

	if (!len || len >= sizeof path - 64) {
		snprintf(err, n, "--save: the directory name is %s", len ? "too long" : "empty");
		return -1;
	}
	memcpy(path, dir, len + 1);
	for (size_t i = 1; i <= len; i++) { /* mkdir -p */
		if (path[i] != '/' && path[i] != '\0')
			continue;
		path[i] = '\0';
		if (mkdir(path, 0777) && errno != EEXIST) {
			snprintf(err, n, "--save %s: cannot make the directory %s: %s", dir, path,
				 strerror(errno));
			return -1;
		}
		path[i] = i < len ? '/' : '\0';
	}
	snprintf(probe, sizeof probe, "%s/.pemu-probe.%ld", dir, (long)getpid());
	if ((fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) {
		snprintf(err, n, "--save %s: cannot write there: %s", dir, strerror(errno));
		return -1;
	}
	close(fd);
	unlink(probe);
	return 0;
}

/* The directory's entry made durable: after a rename, fsync of the directory. */
static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* The tracker's text into path, flushed to the disk. */
static int write_tracker(const char *path, int iter, int *e)
{
	FILE *f = fopen(path, "w");
	int bad;

	if (!f) {
		*e = errno;
		return -1;
	}
	bad = fprintf(f, "%d\n", iter) < 0 || fflush(f) || fsync(fileno(f));
	*e = bad ? errno : 0;
	if (fclose(f) && !bad) {
		*e = errno;
		bad = 1;
	}
	return bad ? -1 : 0;
}

int ckpt_save(const char *dir, const struct ckpt *c, char *err, size_t n)
{
	char tmp[4200], final[4200], ttmp[4200], tracker[4200];
	int e = 0;

	file_of(tmp, sizeof tmp, dir, c->iter, 1);
	file_of(final, sizeof final, dir, c->iter, 0);
	if (ckpt_write_file(tmp, c, &e) || rename(tmp, final)) {
		snprintf(err, n, "--save: cannot write %s: %s", final, strerror(e ? e : errno));
		unlink(tmp);
		return -1;
	}
	sync_dir(dir);
	path_of(ttmp, sizeof ttmp, dir, "." CKPT_TRACKER ".tmp");
	path_of(tracker, sizeof tracker, dir, CKPT_TRACKER);
	if (write_tracker(ttmp, c->iter, &e) || rename(ttmp, tracker)) {
		snprintf(err, n, "--save: cannot write %s: %s", tracker, strerror(e ? e : errno));
		unlink(ttmp);
		return -1;
	}
	sync_dir(dir);
	return 0;
}

int ckpt_save_at(struct emu_dev *d, const struct run_cfg *cfg, struct ckpt *c, int it)
{
	char err[4608];

	c->iter = it;
	if (ckpt_save(cfg->save, c, err, sizeof err))
		return emu_dev_fail(d, "%s", err);
	if (cfg->log_every) {
		printf("saved the checkpoint of iteration %d to %s\n", it, cfg->save);
		fflush(stdout);
	}
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Reading                                                                              */

int ckpt_latest(const char *dir, int *iter, char *err, size_t n)
{
	char path[4200], text[64];
	size_t len = 0, i = 0;
	struct stat st;
	FILE *f;
	long v = 0;

	path_of(path, sizeof path, dir, CKPT_TRACKER);
	if (!(f = fopen(path, "r"))) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		snprintf(err, n, "--load: cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		fclose(f);
		snprintf(err, n, "--load: %s is not a file", path);
		return -1;
	}
	len = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[len] = '\0';
	/* the decimal iteration, blanks at most after it: nothing else */
	for (; i < len && text[i] >= '0' && text[i] <= '9' && v <= 100000000; i++)
		v = v * 10 + (text[i] - '0');
	while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
		i++;
	if (!len || text[0] < '0' || text[0] > '9' || i != len || v > 100000000 ||
	    (size_t)st.st_size != len) {
		for (size_t k = 0; k < len; k++) /* (shown on one line) */
			text[k] = text[k] >= ' ' && text[k] < 127 ? text[k] : ' ';
		while (len && text[len - 1] == ' ')
			text[--len] = '\0';
		snprintf(err, n, "--load: %s holds '%.32s', not an iteration", path, text);
		return -1;
	}
	*iter = (int)v;
	return 1;
}

int ckpt_load(const char *dir, struct ckpt *c, char *err, size_t n)
{
	char path[4200];
	int iter, got = ckpt_latest(dir, &iter, err, n);

	if (got < 0)
		return -1;
	if (!got) {
		snprintf(err, n, "--load %s: no checkpoint there (no %s)", dir, CKPT_TRACKER);
		return -1;
	}
	file_of(path, sizeof path, dir, iter, 0);
	if (ckpt_read(path, c, err, n))
		return -1;
	if (c->iter != iter) {
		snprintf(err, n, "--load: %s holds iteration %d, where %s/%s names %d", path,
			 c->iter, dir, CKPT_TRACKER, iter);
		ckpt_free(c);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Fitting a checkpoint to a run                                                        */

/* wte of c grown or cut to V rows: the rows both have kept, any new ones as a fresh run
 * of seed initialises them, with no Adam state. */
static void fit_vocab(struct ckpt *c, int V, uint64_t seed)
{
	struct gpt_config g = c->model;
	size_t h = (size_t)g.hidden, keep = (size_t)(V < g.vocab ? V : g.vocab) * h;
	float *w, *m, *v;

	g.vocab = V;
	w = emu_xcalloc((size_t)V * h, sizeof *w);
	m = emu_xcalloc((size_t)V * h, sizeof *m);
	v = emu_xcalloc((size_t)V * h, sizeof *v);
	gpt_tensor_init(&g, seed, 0, w);
	memcpy(w, c->w[0], keep * sizeof *w);
	memcpy(m, c->m[0], keep * sizeof *m);
	memcpy(v, c->v[0], keep * sizeof *v);
	free(c->w[0]);
	free(c->m[0]);
	free(c->v[0]);
	c->w[0] = w;
	c->m[0] = m;
	c->v[0] = v;
	c->model.vocab = V;
}

int ckpt_fit(struct ckpt *c, const struct run_cfg *cfg, char *err, size_t n)
{
	const struct gpt_config *a = &c->model, *b = &cfg->model;
	int vocab = cfg->vocab_orig ? cfg->vocab_orig : b->vocab;
	const struct {
		const char *opt;
		int saved, now;
	} shape[] = {
		{"--num-layers", a->num_layers, b->num_layers},
		{"--hidden-size", a->hidden, b->hidden},
		{"--num-attention-heads", a->heads, b->heads},
		{"--ffn-hidden-size", a->ffn, b->ffn},
		{"--seq-length", a->seq_len, b->seq_len},
		{"--vocab-size", c->vocab_orig, vocab},
		{"--num-experts", a->num_experts, b->num_experts},
		{"--moe-every", a->num_experts ? a->moe_every : 0,
		 b->num_experts ? b->moe_every : 0},
	};

	for (size_t i = 0; i < sizeof shape / sizeof *shape; i++)
		if (shape[i].saved != shape[i].now) {
			snprintf(err, n,
				 "--load: the checkpoint's model has %s %d, this run's %d (a "
				 "checkpoint loads into the same model, under any layout)",
				 shape[i].opt, shape[i].saved, shape[i].now);
			return -1;
		}
	if (a->vocab != b->vocab)
		fit_vocab(c, b->vocab, cfg->seed);
	return 0;
}

void ckpt_differences(const struct ckpt *c, const struct run_cfg *cfg, char *buf, size_t n)
{
	const struct optim_cfg *a = &c->opt, *b = &cfg->opt;
	const struct {
		const char *opt;
		double saved, now;
	} set[] = {
		{"--seed", (double)c->seed, (double)cfg->seed},
		{"--micro-batch-size", c->mbs, cfg->mbs},
		{"--global-batch-size", c->gbs, cfg->gbs},
		{"--lr", a->lr, b->lr},
		{"--min-lr", a->min_lr, b->min_lr},
		{"--lr-warmup-iters", a->warmup, b->warmup},
		{"--lr-decay-iters", a->decay_steps, b->decay_steps},
		{"--weight-decay", a->weight_decay, b->weight_decay},
		{"--adam-beta1", a->beta1, b->beta1},
		{"--adam-beta2", a->beta2, b->beta2},
		{"--clip-grad", a->clip, b->clip},
		{"--moe-top-k", c->model.moe_top_k, cfg->model.moe_top_k},
		{"--moe-expert-capacity-factor", c->model.capacity_factor,
		 cfg->model.capacity_factor},
		{"--moe-aux-loss-coeff", c->model.aux_coeff, cfg->model.aux_coeff},
		{"--hidden-dropout", c->model.hidden_dropout, cfg->model.hidden_dropout},
		{"--attention-dropout", c->model.attention_dropout, cfg->model.attention_dropout},
		/* (padded rows enter the softmax: another padding is another model's output) */
		{"padded vocabulary", c->vocab_saved, cfg->model.vocab},
	};
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof set / sizeof *set; i++)
		if (set[i].saved != set[i].now)
			len += (size_t)snprintf(buf + len, len < n ? n - len : 0,
						"%s%s %g (saved %g)", len ? ", " : "", set[i].opt,
						set[i].now, set[i].saved);
}

void ckpt_from_gpt(struct ckpt *c, const struct gpt *m)
{
	for (int i = 0; i < m->np && i < c->np; i++) {
		const struct gpt_param *p = &m->p[i];

		if (!p->n || !p->w.data)
			continue;
		memcpy(c->w[i], p->w.data, p->n * sizeof(float));
		memcpy(c->m[i], p->opt.data, p->n * sizeof(float));
		memcpy(c->v[i], p->opt.data + p->n, p->n * sizeof(float));
	}
}

void ckpt_to_gpt(const struct ckpt *c, struct gpt *m)
{
	for (int i = 0; i < m->np && i < c->np; i++) {
		struct gpt_param *p = &m->p[i];

		if (!p->n || !p->w.data)
			continue;
		memcpy(p->w.data, c->w[i], p->n * sizeof(float));
		memcpy(p->opt.data, c->m[i], p->n * sizeof(float));
		memcpy(p->opt.data + p->n, c->v[i], p->n * sizeof(float));
	}
}
