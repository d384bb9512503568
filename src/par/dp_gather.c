/* par/dp_gather: ZeRO 1-2's all-gathers of the updated weights, after the optimizer step
 * or, with overlap_param_gather (Megatron-LM's --overlap-param-gather), owed to the next
 * forward: see par/dp.h. */
#include <stdlib.h>

#include "coll.h"
#include "par/dp.h"
#include "util.h"

int par_dp_post_gather(struct par_dp_state *s, struct par_dp_bucket *b, struct coll_req **req)
{
	struct par_model *m = s->m;
	size_t lo, chunk = par_dp_chunk(b, &lo);
	float *w = m->weights.data;
	enum emu_stream prev = coll_use_stream(m->k.d, EMU_STREAM_COMM2);
	int rc =
		coll_iall_gather(m->k.d, b->g, w ? w + lo : NULL, w ? w + b->lo : NULL, chunk, req);

	coll_use_stream(m->k.d, prev);
	return rc;
}

/* overlap_param_gather: posts bucket b's all-gather if it is still owed. */
static int post_owed(struct par_dp_state *s, struct par_dp_bucket *b)
{
	if (!b->owed)
		return 0;
	b->owed = 0;
	return par_dp_post_gather(s, b, &b->gather);
}

/* overlap_param_gather: waits for bucket b's all-gather if it is on its way. */
static int wait_gather(struct par_dp_state *s, struct par_dp_bucket *b)
{
	int rc = b->gather ? coll_wait(s->m->k.d, b->gather) : 0;

	b->gather = NULL;
	return rc;
}

/* The use hook with overlap_param_gather (ZeRO 1-2): unit u is about to be read. Posts
 * what is owed of its buckets and of the next bucket in forward order (the buckets go in
 * backward order: the one below), then waits for its own: Megatron-LM's forward
 * pre-hook, which finishes a bucket's all-gather and starts the next one's. */
static int use_owed(void *ctx, int u)
{
	struct par_dp_state *s = ctx;
	int lo = s->unit_lo[u], hi = s->unit_hi[u], rc = 0;

	for (int k = hi; k >= lo - 1 && k >= 0 && !rc; k--)
		rc = post_owed(s, &s->b[k]);
	for (int k = hi; k >= lo && !rc; k--)
		rc = wait_gather(s, &s->b[k]);
	return rc;
}

int par_dp_gather_owed(struct par_dp_state *s)
{
	int rc = 0;

	for (int k = s->nb - 1; k >= 0 && !rc; k--)
		rc = post_owed(s, &s->b[k]);
	for (int k = 0; k < s->nb; k++) { /* every posted one, even after an error */
		int rc2 = wait_gather(s, &s->b[k]);

		rc = rc ? rc : rc2;
	}
	return rc;
}

void par_dp_unit_ranges(struct par_dp_state *s)
{
	struct par_model *m = s->m;
	int L = m->cfg.num_layers, j = 0;

	s->unit_lo = emu_xcalloc(2 * ((size_t)L + 2), sizeof *s->unit_lo);
	s->unit_hi = s->unit_lo + L + 2;
	for (int u = 0; u < L + 2; u++) {
		s->unit_lo[u] = s->nb;
		s->unit_hi[u] = -1;
	}
	for (int k = 0; k < m->np; k++) {
		int u = par_unit_of(m, m->order[k]);

		while (s->b[j].last < k)
			j++;
		s->unit_lo[u] = j < s->unit_lo[u] ? j : s->unit_lo[u];
		s->unit_hi[u] = j > s->unit_hi[u] ? j : s->unit_hi[u];
	}
	m->use = use_owed;
}
