/* par/cp_internal: what the files of context parallelism (par/cp*.c) share and nothing
 * else includes: a rank's place in the cp group and the shapes it computes (struct cp),
 * its views of attention and where their dropout is keyed, the row copies and their
 * charge, and each comm type's forward and backward for cp.c's tables. */
#ifndef PEMU_PAR_CP_INTERNAL_H
#define PEMU_PAR_CP_INTERNAL_H

#include "attention.h"
#include "par/internal.h"

/* p + off, or NULL in dry-run. */
static inline float *cp_at(float *p, size_t off)
{
	return p ? p + off : NULL;
}

/* This rank's place in the ring and the shapes it computes. */
struct cp {
	const struct kctx *k;
	struct emu_group *g;
	int n, r, prev, next; /* the group's size, this rank's place, its neighbours' ids */
	int contiguous;       /* the layout: chunk r of n, else chunks r and 2n - 1 - r */
	int B, T, ch, s;      /* sequences, rows a sequence, rows a chunk, the whole sequence */
	int C, nh, hs;        /* local columns, heads, head size */
	float *scratch;
	const int *pos, *pos_all;  /* my rows' positions, every rank's (par_model) */
	const struct attn_drop *d; /* the layer's attention dropout (p 0: none) */
	struct attn_drop dd[2];    /* its keys placed for the views in use */
	int local;                 /* PAR_BUG_ATTN_DROPOUT_LOCAL: keyed by local positions */
};

/* par/cp.c: what the comm types share. */
/* This rank's cp of m, on cut c with w's scratch, its attention dropout d. */
struct cp cp_of(struct par_model *m, const struct par_tp *c, struct par_work *w,
		const struct attn_drop *d);
/* View a's dropout, in slot of g: its queries at rows [q, ...) of mine, its keys at
 * positions kpos (NULL: their index, the sequence in position order). */
void cp_drop_at(struct cp *g, struct attn_view *a, int slot, int q, const int *kpos);
/* Rows [q, q + nq) of each local sequence's queries (in qkv, ld 3C) against key rows
 * [kr, kr + nk) of kv (K at kv, V at kv + C, ld ldkv, rows a sequence kvT), out at the
 * queries' rows of out (ld C); q0: the queries' offset past the first key (0 the causal
 * diagonal, nk or more all visible). */
struct attn_view cp_view(const struct cp *g, const float *qkv, float *out, const float *kv,
			 int ldkv, int kvT, int q, int nq, int kr, int nk, int q0);
/* Copies n rows of w floats from src (ld ls) to dst (ld ld), adding if add; the caller
 * charges the kernel (sum_charge: 1 block, 2 if it adds) once for all the rows it moves. */
void cp_rows_copy(const struct kctx *k, float *dst, int ld, const float *src, int ls, size_t n,
		  int w, int add);
/* This rank's K and V, (B T, 2C), from qkv. */
void cp_kv_pack(const struct cp *g, float *kv, const float *qkv);

/* The comm types' forward and backward (the shape of struct par_attn's): par/cp_ring.c's
 * ring (p2p), par/cp_whole.c's all-gather and Ulysses (a2a). 0 or a collective's error. */
int cp_ring_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		struct gpt_layer_acts *la, const struct attn_drop *d);
int cp_ring_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		struct gpt_layer_acts *la, const struct attn_drop *d);
int cp_gather_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, const struct attn_drop *d);
int cp_gather_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, const struct attn_drop *d);
int cp_ulysses_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, const struct attn_drop *d);
int cp_ulysses_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, const struct attn_drop *d);

#endif
