/* tensor: a float array on a virtual device, allocated through the device's memory
 * accounting (emu/mem.h), and the context every kernel runs in.
 *
 * The host always computes in fp32. What is accounted follows the precision model:
 *   fp32: 4 bytes per element everywhere; Adam keeps m and v (8 bytes per parameter).
 *   bf16: mixed-precision training as ZeRO counts it (arXiv 1910.02054): 16-bit
 *         weights, gradients and activations (2 bytes), and per parameter 12 bytes of
 *         optimizer state (fp32 master weight, m, v): 2 + 2 + 12 = 16 bytes.
 * Execute mode defaults to fp32, dry-run to bf16; either can be chosen for either, and
 * the same choice gives the same accounting and virtual time in both modes. */
#ifndef MODELS_TENSOR_H
#define MODELS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "mem.h"

enum prec { PREC_FP32, PREC_BF16 };

/* What every kernel needs: the device it charges, and the bytes an activation element
 * occupies in memory traffic (4 in fp32, 2 in bf16), and a gradient (the same, or 4 with
 * fp32 main gradients: Megatron-LM's --accumulate-allreduce-grads-in-fp32). */
struct kctx {
	struct emu_dev *d;
	enum prec prec;
	int ab; /* bytes per activation element */
	int gb; /* bytes per gradient element, in memory and on the wire */
};

/* gb as ab: gradients in the training precision. */
void kctx_init(struct kctx *k, struct emu_dev *d, enum prec prec);
/* 1 when the kernel should compute (execute mode), 0 in dry-run. */
int kctx_math(const struct kctx *k);

struct tensor {
	float *data;          /* n floats; NULL in dry-run */
	size_t n;             /* elements */
	struct mem_block *mb; /* the device memory behind it */
};

/* Allocates n elements of category cat on k's device. 0, or EMU_EOOM (the device has
 * failed with the report). Zeroed. */
int tensor_alloc(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t n,
		 const char *name);
/* Adam's state for n parameters: 2n floats (m, then v) on the host; accounted as
 * 8 bytes per parameter in fp32 and 12 (with the fp32 master copy) in bf16. */
/* tensor_alloc unless t already holds memory (0 then): for activations given back for
 * recomputation and brought back by the same call. */
int tensor_ensure(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t n,
		  const char *name);
/* n elements of category cat on the host, of which the device is charged for resident
 * only: for ZeRO, whose device keeps one shard of a buffer between uses and is charged
 * separately (par_dp.c) for the rest while it is gathered or being reduced. The host
 * keeps all n so that the kernels address the buffer as a whole. */
int tensor_alloc_shard(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t n,
		       size_t resident, const char *name);
/* nbytes of device memory (a byte mask), with data holding at least as many bytes. */
int tensor_alloc_bytes(const struct kctx *k, struct tensor *t, enum mem_cat cat, size_t nbytes,
		       const char *name);
int tensor_alloc_optim(const struct kctx *k, struct tensor *t, size_t nparams, const char *name);
void tensor_free(const struct kctx *k, struct tensor *t);

/* Accounted bytes per element of category cat under prec. */
unsigned tensor_elem_bytes(enum prec prec, enum mem_cat cat);

#endif
