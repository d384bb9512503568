/* run/ckpt_file: a checkpoint's bytes, written and read back with every one checked; see
 * run/ckpt.h, and docs/architecture.md (Checkpoints) for the format. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run/ckpt.h"
#include "util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pemu's checkpoints are little-endian; this host is not"
#endif

#define MAGIC      "PEMUCKPT"
#define TRAILER    "PEMUEND\n"
#define HEADER_MAX 65536
#define FNV_BASIS  0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull
#define TOO_BIG    (1ull << 62) /* bytes: more than any file */

void (*ckpt_write_hook)(uint64_t written);

/* A writer that keeps the checksum of what it wrote. */
struct out {
	FILE *f;
	uint64_t h, written;
	int err;
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * FNV_PRIME;
	return h;
}

static void put(struct out *o, const void *p, size_t n)
{
	if (o->err || !n)
		return;
	o->h = fnv(o->h, p, n);
	if (fwrite(p, 1, n, o->f) != n)
		o->err = errno ? errno : EIO;
	o->written += n;
	if (ckpt_write_hook)
		ckpt_write_hook(o->written);
}

static void put_u32(struct out *o, uint32_t x)
{
	put(o, &x, sizeof x);
}

static void put_u64(struct out *o, uint64_t x)
{
	put(o, &x, sizeof x);
}

/* x as the shortest decimal that reads back as x (strtof). */
static const char *shortest(char *buf, size_t n, float x)
{
	for (int p = 1; p <= 9; p++) {
		snprintf(buf, n, "%.*g", p, (double)x);
		if (strtof(buf, NULL) == x)
			break;
	}
	return buf;
}

/* The header's fields (docs/architecture.md, Checkpoints), in their order: integers
 * (held to the command line's limits when read, so that no size computed from them
 * wraps), then floats, each where it is in struct ckpt. The seed and the layout come
 * first and last. */
static const struct field {
	const char *key;
	size_t off;
	double min, max; /* what a reader accepts: the command line's range */
} int_fields[] =
	{
		{"iteration", offsetof(struct ckpt, iter), 0, 100000000},
		{"train_iters", offsetof(struct ckpt, train_iters), 0, 100000000},
		{"micro_batch_size", offsetof(struct ckpt, mbs), 1, 1 << 20},
		{"global_batch_size", offsetof(struct ckpt, gbs), 1, 1 << 24},
		{"num_layers", offsetof(struct ckpt, model.num_layers), 1, 100000},
		{"hidden_size", offsetof(struct ckpt, model.hidden), 1, 1 << 20},
		{"num_attention_heads", offsetof(struct ckpt, model.heads), 1, 1 << 16},
		{"ffn_hidden_size", offsetof(struct ckpt, model.ffn), 1, 1 << 24},
		{"seq_length", offsetof(struct ckpt, model.seq_len), 1, 1 << 22},
		{"vocab_size", offsetof(struct ckpt, vocab_orig), 2, 1 << 24},
		{"padded_vocab_size", offsetof(struct ckpt, model.vocab), 2, 2147483647.0},
		{"num_experts", offsetof(struct ckpt, model.num_experts), 0, 1 << 16},
		{"moe_top_k", offsetof(struct ckpt, model.moe_top_k), 0, 1 << 16},
		{"moe_every", offsetof(struct ckpt, model.moe_every), 0, 1 << 16},
		{"lr_warmup_iters", offsetof(struct ckpt, opt.warmup), 0, 100000000},
		{"lr_decay_iters", offsetof(struct ckpt, opt.decay_steps), 1, 100000000},
},
  float_fields[] = {
	  {"moe_capacity_factor", offsetof(struct ckpt, model.capacity_factor), 0, 1e6},
	  {"moe_aux_loss_coeff", offsetof(struct ckpt, model.aux_coeff), 0, 1e6},
	  {"hidden_dropout", offsetof(struct ckpt, model.hidden_dropout), 0, 0.999999},
	  {"attention_dropout", offsetof(struct ckpt, model.attention_dropout), 0, 0.999999},
	  {"lr", offsetof(struct ckpt, opt.lr), 0, 10},
	  {"min_lr", offsetof(struct ckpt, opt.min_lr), 0, 10},
	  {"weight_decay", offsetof(struct ckpt, opt.weight_decay), 0, 10},
	  {"adam_beta1", offsetof(struct ckpt, opt.beta1), 0, 0.999999},
	  {"adam_beta2", offsetof(struct ckpt, opt.beta2), 0, 0.999999},
	  {"adam_eps", offsetof(struct ckpt, opt.eps), 0, 1},
	  {"clip_grad", offsetof(struct ckpt, opt.clip), 0, 1e9},
};
#define NFIELDS(a) (sizeof(a) / sizeof *(a))

static int *int_at(struct ckpt *c, const struct field *f)
{
	return (int *)(void *)((char *)c + f->off);
}

static float *float_at(struct ckpt *c, const struct field *f)
{
	return (float *)(void *)((char *)c + f->off);
}

/* The header's text into s. */
static void header_text(const struct ckpt *c, struct emu_str *s)
{
	struct ckpt *cc = (struct ckpt *)c; /* (read only) */

	emu_str_addf(s, "seed %llu\n", (unsigned long long)c->seed);
	for (size_t i = 0; i < NFIELDS(int_fields); i++)
		emu_str_addf(s, "%s %d\n", int_fields[i].key, *int_at(cc, &int_fields[i]));
	for (size_t i = 0; i < NFIELDS(float_fields); i++) {
		char b[32];

		emu_str_addf(s, "%s %s\n", float_fields[i].key,
			     shortest(b, sizeof b, *float_at(cc, &float_fields[i])));
	}
	emu_str_addf(s, "layout %s\ntensors %d\n", c->layout, c->np);
}

int ckpt_write_file(const char *path, const struct ckpt *c, int *e)
{
	struct out o = {NULL, FNV_BASIS, 0, 0};
	struct emu_str hdr = {0};
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || !(o.f = fdopen(fd, "wb"))) {
		*e = errno;
		if (fd >= 0)
			close(fd);
		return -1;
	}
	header_text(c, &hdr);
	put(&o, MAGIC, 8);
	put_u32(&o, CKPT_VERSION);
	put_u32(&o, (uint32_t)hdr.len);
	put(&o, hdr.s, hdr.len);
	free(hdr.s);
	for (int i = 0; i < c->np; i++) {
		char name[48];
		size_t n = gpt_tensor_numel(&c->model, i);

		gpt_tensor_name(&c->model, i, name, sizeof name);
		put_u32(&o, (uint32_t)strlen(name));
		put(&o, name, strlen(name));
		put_u64(&o, n);
		put(&o, c->w[i], n * sizeof(float));
		put(&o, c->m[i], n * sizeof(float));
		put(&o, c->v[i], n * sizeof(float));
	}
	{
		uint64_t h = o.h;

		put_u64(&o, h);
	}
	put(&o, TRAILER, 8);
	if (!o.err && (fflush(o.f) || fsync(fileno(o.f))))
		o.err = errno;
	if (fclose(o.f) && !o.err)
		o.err = errno;
	*e = o.err;
	return o.err ? -1 : 0;
}

/* A reader that checks sizes and keeps the checksum. */
struct in {
	FILE *f;
	uint64_t h, got;
	int bad; /* short read */
};

static void get(struct in *r, void *p, size_t n)
{
	if (r->bad || !n)
		return;
	if (fread(p, 1, n, r->f) != n) {
		r->bad = 1;
		return;
	}
	r->h = fnv(r->h, p, n);
	r->got += n;
}

/* The value of key in the header's text, or NULL. */
static const char *hdr_value(const char *hdr, const char *key)
{
	size_t k = strlen(key);

	for (const char *l = hdr; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, key, k) && l[k] == ' ')
			return l + k + 1;
	return NULL;
}

/* The header's fields into c; 0, or -1 with the missing or bad key in *bad. */
static int parse_header(const char *hdr, struct ckpt *c, const char **bad)
{
	const char *v, *lay;
	char *end;
	long x;

	for (size_t i = 0; i < NFIELDS(int_fields); i++) {
		*bad = int_fields[i].key;
		if (!(v = hdr_value(hdr, int_fields[i].key)))
			return -1;
		errno = 0;
		x = strtol(v, &end, 10);
		if (end == v || *end != '\n' || errno || (double)x < int_fields[i].min ||
		    (double)x > int_fields[i].max)
			return -1;
		*int_at(c, &int_fields[i]) = (int)x;
	}
	for (size_t i = 0; i < NFIELDS(float_fields); i++) {
		*bad = float_fields[i].key;
		if (!(v = hdr_value(hdr, float_fields[i].key)))
			return -1;
		*float_at(c, &float_fields[i]) = strtof(v, &end);
		/* (NaN fails both comparisons: refused too) */
		if (end == v || *end != '\n' ||
		    !(*float_at(c, &float_fields[i]) >= float_fields[i].min) ||
		    !(*float_at(c, &float_fields[i]) <= float_fields[i].max))
			return -1;
	}
	*bad = "seed";
	if (!(v = hdr_value(hdr, "seed")))
		return -1;
	errno = 0;
	c->seed = strtoull(v, &end, 10);
	if (*v < '0' || *v > '9' || *end != '\n' || errno || c->seed > 0x7fffffff)
		return -1;
	*bad = "tensors";
	if (!(v = hdr_value(hdr, "tensors")))
		return -1;
	x = strtol(v, &end, 10);
	if (end == v || *end != '\n' || x < 0 || x > 2147483647L)
		return -1;
	c->np = (int)x;
	if ((lay = hdr_value(hdr, "layout")))
		snprintf(c->layout, sizeof c->layout, "%.*s", (int)strcspn(lay, "\n"), lay);
	c->vocab_saved = c->model.vocab;
	*bad = "padded_vocab_size (under vocab_size)";
	if (c->model.vocab < c->vocab_orig)
		return -1;
	*bad = "model (its sizes are not a model's)";
	return gpt_config_check(&c->model, NULL, 0) || c->np != gpt_num_tensors(&c->model) ? -1 : 0;
}

int ckpt_read(const char *path, struct ckpt *c, char *err, size_t n)
{
	struct in r = {NULL, FNV_BASIS, 0, 0};
	char magic[8], *hdr = NULL, trailer[8];
	uint32_t version = 0, hlen = 0;
	uint64_t sum = 0, want = 0, h;
	const char *bad = NULL;
	struct stat st;
	int rc = -1;

	memset(c, 0, sizeof *c);
	if (!(r.f = fopen(path, "rb")) || fstat(fileno(r.f), &st)) {
		snprintf(err, n, "--load: cannot read %s: %s", path, strerror(errno));
		if (r.f)
			fclose(r.f);
		return -1;
	}
	get(&r, magic, 8);
	if (r.bad || memcmp(magic, MAGIC, 8)) {
		snprintf(err, n, "--load: %s is not a pemu checkpoint (it does not start with %s)",
			 path, MAGIC);
		goto out;
	}
	get(&r, &version, 4);
	get(&r, &hlen, 4);
	if (!r.bad && version != CKPT_VERSION) {
		snprintf(err, n, "--load: %s is a checkpoint of format %u; this pemu reads %d",
			 path, version, CKPT_VERSION);
		goto out;
	}
	if (r.bad || hlen > HEADER_MAX) {
		snprintf(err, n, "--load: %s is corrupt: its header's length is %u", path, hlen);
		goto out;
	}
	hdr = emu_xcalloc((size_t)hlen + 1, 1);
	get(&r, hdr, hlen);
	if (r.bad || parse_header(hdr, c, &bad)) {
		snprintf(err, n, "--load: %s is corrupt: its header lacks a valid %s", path,
			 r.bad ? "end" : bad);
		goto out;
	}
	want = 16 + (uint64_t)hlen + 16;
	for (int i = 0; i < c->np && want < TOO_BIG; i++) {
		char name[48];
		uint64_t ne = gpt_tensor_numel(&c->model, i);

		/* (want stays under 2^63: it stops growing past TOO_BIG) */
		gpt_tensor_name(&c->model, i, name, sizeof name);
		want += 4 + strlen(name) + 8 + (ne < TOO_BIG / 16 ? 12 * ne : TOO_BIG);
	}
	if ((uint64_t)st.st_size != want) {
		snprintf(err, n,
			 "--load: %s is %s: %lld bytes, where a checkpoint of its model has %llu",
			 path, (uint64_t)st.st_size < want ? "truncated" : "corrupt (too long)",
			 (long long)st.st_size, (unsigned long long)want);
		goto out;
	}
	ckpt_alloc_tensors(c);
	for (int i = 0; i < c->np; i++) {
		char name[48], got[48];
		uint32_t len = 0;
		uint64_t numel = 0;
		size_t ne = gpt_tensor_numel(&c->model, i);

		gpt_tensor_name(&c->model, i, name, sizeof name);
		get(&r, &len, 4);
		if (!r.bad && len == strlen(name))
			get(&r, got, len);
		get(&r, &numel, 8);
		if (r.bad || len != strlen(name) || memcmp(got, name, len) || numel != ne) {
			snprintf(err, n,
				 "--load: %s is corrupt: tensor %d is not %s of %zu elements as "
				 "its header says",
				 path, i, name, ne);
			goto out;
		}
		get(&r, c->w[i], ne * sizeof(float));
		get(&r, c->m[i], ne * sizeof(float));
		get(&r, c->v[i], ne * sizeof(float));
	}
	h = r.h;
	get(&r, &sum, 8);
	get(&r, trailer, 8);
	if (r.bad || sum != h) {
		snprintf(err, n,
			 "--load: %s is corrupt: its checksum is %016llx, its contents' %016llx",
			 path, (unsigned long long)sum, (unsigned long long)h);
		goto out;
	}
	if (memcmp(trailer, TRAILER, 8)) {
		snprintf(err, n, "--load: %s is corrupt: it does not end with PEMUEND", path);
		goto out;
	}
	rc = 0;
out:
	if (rc && c->w)
		ckpt_free(c);
	free(hdr);
	fclose(r.f);
	return rc;
}
