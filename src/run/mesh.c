#include "run/mesh.h"

#include <limits.h>
#include <stdio.h>

#include "util.h"

void mesh_init(struct mesh *m, int tp, int cp, int ep, int dp, int pp)
{
	int sizes[MESH_NDIM] = {tp, cp, ep, dp, pp};
	long long world = 1;

	for (int d = 0; d < MESH_NDIM; d++) {
		EMU_ASSERT(sizes[d] >= 1);
		m->size[d] = sizes[d];
		world *= sizes[d];
		if (world > INT_MAX) /* a mesh run_check refuses; it must not overflow first */
			world = INT_MAX;
	}
	m->world = (int)world;
}

/* The stride of dim in the rank: the product of the faster dimensions' sizes. */
static int stride(const struct mesh *m, enum mesh_dim dim)
{
	int s = 1;

	for (int d = 0; d < (int)dim; d++)
		s *= m->size[d];
	return s;
}

int mesh_coord(const struct mesh *m, int rank, enum mesh_dim dim)
{
	return rank / stride(m, dim) % m->size[dim];
}

int mesh_rank(const struct mesh *m, const int *c)
{
	int r = 0;

	for (int d = 0; d < MESH_NDIM; d++)
		r += c[d] * stride(m, (enum mesh_dim)d);
	return r;
}

void mesh_group(const struct mesh *m, int rank, enum mesh_dim dim, int *out)
{
	int base = rank - mesh_coord(m, rank, dim) * stride(m, dim);

	for (int i = 0; i < m->size[dim]; i++)
		out[i] = base + i * stride(m, dim);
}

void mesh_group2(const struct mesh *m, int rank, enum mesh_dim a, enum mesh_dim b, int *out)
{
	int base = rank - mesh_coord(m, rank, a) * stride(m, a) -
		   mesh_coord(m, rank, b) * stride(m, b);

	for (int j = 0; j < m->size[b]; j++)
		for (int i = 0; i < m->size[a]; i++)
			out[j * m->size[a] + i] = base + i * stride(m, a) + j * stride(m, b);
}

const char *mesh_dim_name(enum mesh_dim dim)
{
	static const char *const names[MESH_NDIM] = {"tp", "cp", "ep", "dp", "pp"};

	return names[dim];
}

void mesh_describe(const struct mesh *m, char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int d = MESH_NDIM - 1; d >= 0; d--) {
		if (m->size[d] == 1 && !(d == MESH_DP))
			continue;
		len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s %d",
					len ? " x " : "", mesh_dim_name((enum mesh_dim)d),
					m->size[d]);
	}
	snprintf(buf + len, len < n ? n - len : 0, " = %d device%s", m->world,
		 m->world == 1 ? "" : "s");
}
