#include "tensor.h"

#include <string.h>

void kctx_init(struct kctx *k, struct emu_dev *d, enum prec prec)
{
	k->d = d;
	k->prec = prec;
	k->ab = prec == PREC_BF16 ? 2 : 4;
	k->gb = k->ab;
}

int kctx_math(const struct kctx *k)
{
	return !emu_dev_dry_run(k->d);
}

unsigned tensor_elem_bytes(enum prec prec, enum mem_cat cat)
{
	if (prec == PREC_FP32)
		return cat == MEM_OPTIM ? 8 : 4;
	return cat == MEM_OPTIM ? 12 : 2;
}

/* A gradient's bytes are k's own (fp32 main gradients or not); the rest the precision's. */
static uint64_t elem_bytes(const struct kctx *k, enum mem_cat cat)
{
	return cat == MEM_GRAD ? (uint64_t)k->gb : tensor_elem_bytes(k->prec, cat);
}

static int alloc(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t n, uint64_t bytes,
		 uint64_t host_bytes, const char *name)
{
	memset(t, 0, sizeof *t);
	t->mb = mem_alloc_host(k->d, cat, bytes, host_bytes, name);
	if (!t->mb)
		return EMU_EOOM;
	t->data = t->mb->data;
	t->n = n;
	return 0;
}

int tensor_alloc(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t n,
		 const char *name)
{
	return alloc(k, t, cat, n, (uint64_t)n * elem_bytes(k, cat), (uint64_t)n * 4, name);
}

int tensor_ensure(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t n,
		  const char *name)
{
	return t->mb ? 0 : tensor_alloc(k, t, cat, n, name);
}

int tensor_alloc_shard(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t n,
		       size_t resident, const char *name)
{
	return alloc(k, t, cat, n, (uint64_t)resident * elem_bytes(k, cat), (uint64_t)n * 4, name);
}

int tensor_alloc_bytes(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t nbytes,
		       const char *name)
{
	size_t n = (nbytes + sizeof(float) - 1) / sizeof(float);

	return alloc(k, t, cat, n, nbytes, (uint64_t)n * sizeof(float), name);
}

int tensor_alloc_optim(const struct kctx *k, struct tensor *t, size_t nparams, const char *name)
{
	return alloc(k, t, MEM_OPTIM, 2 * nparams,
		     (uint64_t)nparams * tensor_elem_bytes(k->prec, MEM_OPTIM),
		     (uint64_t)nparams * 8, name);
}

void tensor_free(const struct kctx *k, struct tensor *t)
{
	mem_free(k->d, t->mb);
	memset(t, 0, sizeof *t);
}
