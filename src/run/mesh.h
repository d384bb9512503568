/* mesh: the parallel configuration as a grid of ranks and the groups each rank belongs to,
 * in Megatron-LM's rank order: tp varies fastest, then cp, ep, dp, and pp slowest
 * (Megatron's parallel_state; picotron's grid of groups). Rank r runs on device r, so a
 * tp group is tp consecutive devices and stays inside a node whenever tp divides the GPUs
 * per node. This module only does arithmetic: strategies ask it who their peers are. */
#ifndef PEMU_MESH_H
#define PEMU_MESH_H

#include <stddef.h>

enum mesh_dim { MESH_TP, MESH_CP, MESH_EP, MESH_DP, MESH_PP, MESH_NDIM };

struct mesh {
	int size[MESH_NDIM]; /* the degree of each dimension, indexed by enum mesh_dim */
	int world;           /* their product (INT_MAX if larger) */
};

/* A mesh of these degrees (each >= 1). */
void mesh_init(struct mesh *m, int tp, int cp, int ep, int dp, int pp);

/* The coordinate of rank along dim. */
int mesh_coord(const struct mesh *m, int rank, enum mesh_dim dim);

/* The rank with coordinates c[MESH_NDIM]. */
int mesh_rank(const struct mesh *m, const int *c);

/* The ranks of rank's group along dim (those that differ from it in dim alone), in the
 * order of that coordinate, into out[size[dim]]. */
void mesh_group(const struct mesh *m, int rank, enum mesh_dim dim, int *out);

/* The ranks of rank's group along dims a and b together (those that differ from it in
 * a, b or both: size[a] x size[b] of them), a varying fastest, into out. */
void mesh_group2(const struct mesh *m, int rank, enum mesh_dim a, enum mesh_dim b, int *out);

const char *mesh_dim_name(enum mesh_dim dim);

/* One line describing m: "dp 2 x tp 4 = 8 devices". */
void mesh_describe(const struct mesh *m, char *buf, size_t n);

#endif
