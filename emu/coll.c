/* coll: the collectives. Calls become op_args that cluster.c matches into ops; the last
 * member to arrive times the op (coll_op_resolve, coll_time.c) by the ring formulas of
 * docs/formulas.md (nccl-tests doc/PERFORMANCE.md), and the op's data movement is
 * cut into tasks (coll_op_run_task, coll_data.c) that add in the ring algorithm's order:
 * see coll.h for the order and the formulas. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "internal.h"
#include "util.h"

static const struct {
	const char *name;
	char sym; /* the ASCII timeline's letter */
} kinds[OP_NKIND] = {
	[OP_BARRIER] = {"barrier", '|'},
	[OP_SEND] = {"send", '>'},
	[OP_RECV] = {"recv", '<'},
	[OP_BROADCAST] = {"broadcast", 'B'},
	[OP_REDUCE] = {"reduce", 'R'},
	[OP_ALL_REDUCE] = {"all-reduce", 'A'},
	[OP_REDUCE_SCATTER] = {"reduce-scatter", 'S'},
	[OP_ALL_GATHER] = {"all-gather", 'G'},
	[OP_ALL_TO_ALL] = {"all-to-all", 'T'},
	[OP_ALL_TO_ALL_V] = {"all-to-all-v", 'V'},
};

const char *coll_op_name(enum op_kind k)
{
	return kinds[k].name;
}

int emu_cluster_set_fault(struct emu_cluster *c, const char *op, int nth)
{
	c->fault_kind = -1;
	if (!op)
		return 0;
	if (nth < 0)
		return -1;
	for (int k = OP_SEND; k < OP_NKIND; k++)
		if (k != OP_RECV && !strcmp(kinds[k].name, op)) {
			c->fault_kind = k;
			c->fault_nth = nth;
			return 0;
		}
	return -1;
}

/* ------------------------------------------------------------------------------------ */
/* Posting and waiting                                                                  */

/* Bytes member m puts on each link class for op, by the algorithm's traffic. On NCCL's
 * rings over the nodes, one per NIC (op->nic_rings = L members a node), each member is a
 * ring's way out of its node once in L rings: 1/L of its bytes go over the network, the
 * rest over NVLink. By NVLSTree over 2 nodes (op->nvls_tree = L), a member sends its 1/L
 * of the node's sum through its NIC, and its node's all-reduce is counted on NVLink as a
 * ring's. An all-to-all timed node by node (op->by_node) puts what a member sends its own
 * node's members on NVLink, the rest on the network. */
static void count_link_bytes(struct emu_dev *d, const struct op *op, int m)
{
	const struct op_arg *a = &op->arg[m];
	const struct emu_group *ch = op->ch;
	uint64_t S = op->bytes, *lb = d->stats.link_bytes;
	int n = ch->n;

	if (n == 1)
		return;
	if (op->nic_rings > 0) {
		uint64_t all = (uint64_t)(a->kind == OP_ALL_REDUCE ? 2 : 1) * (uint64_t)(n - 1) *
			       S / (uint64_t)n;

		lb[op->link] += all / (uint64_t)op->nic_rings;
		lb[TOPO_LINK_INTRA] += all - all / (uint64_t)op->nic_rings;
		return;
	}
	if (op->nvls_tree > 0) {
		uint64_t L = (uint64_t)op->nvls_tree;

		lb[op->link] += S / L;
		lb[TOPO_LINK_INTRA] += 2 * (L - 1) * S / L;
		return;
	}
	switch (a->kind) {
	case OP_SEND:
		lb[op->link] += S;
		break;
	case OP_BROADCAST:
		/* A chain from the root: everyone but the last passes the data on. */
		if ((m - a->root + n) % n != n - 1)
			lb[op->link] += S;
		break;
	case OP_REDUCE:
		if (m != a->root)
			lb[op->link] += S;
		break;
	case OP_ALL_REDUCE:
		if (op->hier) {
			uint64_t k = (uint64_t)ch->hier_nodes, L = (uint64_t)ch->hier_local;

			lb[TOPO_LINK_INTRA] += 2 * (L - 1) * S / L;
			lb[op->link] += 2 * (k - 1) * S / (k * L);
		} else {
			lb[op->link] += 2 * (uint64_t)(n - 1) * S / (uint64_t)n;
		}
		break;
	case OP_ALL_TO_ALL:
	case OP_ALL_TO_ALL_V:
		if (op->by_node) {
			uint64_t local, remote;

			coll_a2a_split(d->c, op, m, 0, &local, &remote);
			lb[TOPO_LINK_INTRA] += local;
			lb[op->link] += remote;
		} else if (a->kind == OP_ALL_TO_ALL) {
			lb[op->link] += (uint64_t)(n - 1) * S / (uint64_t)n;
		} else {
			lb[op->link] += coll_a2av_cross(op, m, 0);
		}
		break;
	case OP_REDUCE_SCATTER:
	case OP_ALL_GATHER:
		lb[op->link] += (uint64_t)(n - 1) * S / (uint64_t)n;
		break;
	default:
		break;
	}
}

int coll_req_resolve(struct emu_dev *d, struct coll_req *r)
{
	struct op *op = r->op;
	const struct op_arg *a = &op->arg[r->member];
	struct emu_stream_state *st = &d->stream[r->stream];
	int rc;

	if (r->resolved)
		return 0;
	rc = dev_wait_ready(d, op, r->member);
	if (rc)
		return rc;
	r->resolved = 1;
	if (st->t < op->t_end)
		st->t = op->t_end;
	emu_time_check(d, st->t, kinds[a->kind].name);
	st->grouped -= r->grouped != 0;
	r->grouped = 0;
	if (st->pending == r)
		st->pending = NULL;
	stats_add(d, a->kind, r->tag, op->bytes, op->t_end - op->t_start);
	{
		uint64_t before = 0, after = 0;

		for (int c = 0; c < TOPO_LINK_NCLASS; c++)
			before += d->stats.link_bytes[c];
		count_link_bytes(d, op, r->member);
		for (int c = 0; c < TOPO_LINK_NCLASS; c++)
			after += d->stats.link_bytes[c];
		d->stats.tagged_link[r->tag] += after - before;
	}
	if (d->c->cfg.trace) {
		struct trace_ev ev = {.t0 = op->t_start,
				      .t1 = op->t_end,
				      .bytes = op->bytes,
				      .stream = (uint8_t)r->stream,
				      .lane = (uint8_t)r->lane,
				      .tag = (uint8_t)r->tag,
				      .posted = (uint8_t)!r->blocking,
				      .sym = kinds[a->kind].sym};

		emu_strcpy_cut(ev.name, kinds[a->kind].name, sizeof ev.name);
		if (op->ch->kind == CHAN_P2P) {
			/* Unique per (src, dst, call): the same number on both ends. */
			ev.flow = ((uint64_t)op->ch->devs[0] * (uint64_t)d->c->cfg.ndev +
				   (uint64_t)op->ch->devs[1]) *
					  (1ULL << 20) +
				  op->seq + 1;
			ev.flow_end = a->kind == OP_RECV;
		}
		trace_add_op(d, &ev);
	}
	return 0;
}

int coll_stream_settle(struct emu_dev *d, int s, int keep)
{
	struct emu_stream_state *st = &d->stream[s];
	int rc = st->pending && (!keep || st->pending->grouped != keep)
			 ? coll_req_resolve(d, st->pending)
			 : 0;

	/* groups' ops (an eager send's end is known: it is not pending) */
	for (struct coll_req *r = d->reqs; r && st->grouped && !rc; r = r->next)
		if (r->stream == s && r->grouped && r->grouped != keep && !r->resolved &&
		    r->eager_end < 0)
			rc = coll_req_resolve(d, r);
	return rc;
}

static int post(struct emu_dev *d, struct emu_group *ch, int member, int stream, struct op_arg *arg,
		struct coll_req **out)
{
	struct emu_stream_state *st = &d->stream[stream];
	int64_t now = d->stream[EMU_STREAM_COMPUTE].t;
	struct coll_req *r;
	struct op *op;
	int rc;

	/* The ops before this one on its stream must have known ends before it can start,
	 * but those of its own group (coll_set_group), which follow each other's transfer
	 * time instead. */
	if ((rc = coll_stream_settle(d, stream, arg->grouped)))
		goto fail;
	arg->t_issue = st->t > now ? st->t : now;
	arg->wire_bytes = d->wire_bytes;
	if (arg->grouped) {
		arg->t_issue = arg->t_issue > st->group_t ? arg->t_issue : st->group_t;
		st->group_t = emu_time_add(arg->t_issue, coll_send_ns(d->c, ch, arg));
	}
	arg->ctas = d->coll_ctas;
	if ((rc = rdv_arrive(d, ch, member, arg, &op)))
		goto fail;
	if ((r = d->req_spare)) {
		d->req_spare = r->next;
		memset(r, 0, sizeof *r);
	} else {
		r = emu_xcalloc(1, sizeof *r);
	}
	r->op = op;
	r->member = member;
	r->stream = stream;
	r->eager_end = -1;
	r->lane = d->lane;
	r->tag = d->tag;
	r->post_t = now;
	r->post_busy = d->compute_ns;
	r->margin = d->sm_margin;
	r->grouped = arg->grouped;
	st->grouped += arg->grouped != 0;
	if (arg->kind == OP_SEND && !arg->rendezvous) { /* eager: its end is known now (coll.h) */
		r->eager_end = emu_time_add(arg->t_issue, coll_send_ns(d->c, ch, arg));
		st->t = r->eager_end;
	} else {
		st->pending = r;
	}
	r->prev = d->reqs_tail;
	if (d->reqs_tail)
		d->reqs_tail->next = r;
	else
		d->reqs = r;
	d->reqs_tail = r;
	*out = r;
	return 0;
fail:
	free(arg->send_counts);
	free(arg->recv_counts);
	return rc;
}

/* An eager send is over for its sender once its data has left: its statistics and
 * trace come from what the sender alone knows, and the op lives on (holding the copy)
 * until the receiver takes it. */
static void eager_done(struct emu_dev *d, struct coll_req *r)
{
	const struct op *op = r->op;
	const struct op_arg *a = &op->arg[r->member];
	uint64_t S = (uint64_t)a->count * (uint64_t)a->wire_bytes;
	int64_t t0 = r->eager_end - coll_send_ns(d->c, op->ch, a);

	r->resolved = 1;
	d->stream[r->stream].grouped -= r->grouped != 0;
	r->grouped = 0;
	stats_add(d, OP_SEND, r->tag, S, r->eager_end - t0);
	if (op->ch->n > 1) {
		d->stats.link_bytes[op->ch->link] += S;
		d->stats.tagged_link[r->tag] += S;
	}
	if (d->c->cfg.trace) {
		struct trace_ev ev = {.t0 = t0,
				      .t1 = r->eager_end,
				      .bytes = S,
				      .stream = (uint8_t)r->stream,
				      .lane = (uint8_t)r->lane,
				      .tag = (uint8_t)r->tag,
				      .posted = (uint8_t)!r->blocking,
				      .sym = kinds[OP_SEND].sym};

		emu_strcpy_cut(ev.name, kinds[OP_SEND].name, sizeof ev.name);
		ev.flow = ((uint64_t)op->ch->devs[0] * (uint64_t)d->c->cfg.ndev +
			   (uint64_t)op->ch->devs[1]) *
				  (1ULL << 20) +
			  op->seq + 1;
		trace_add_op(d, &ev);
	}
	emu_stream_advance(d, EMU_STREAM_COMPUTE, r->eager_end);
}

void coll_req_put(struct emu_dev *d, struct coll_req *r)
{
#ifdef __SANITIZE_ADDRESS__
	(void)d;
	free(r);
#else
	r->next = d->req_spare;
	d->req_spare = r;
#endif
}

int coll_wait(struct emu_dev *d, struct coll_req *req)
{
	int rc = 0;

	if (!req)
		return 0; /* a call the fault plan left out */
	if (req->eager_end >= 0)
		eager_done(d, req);
	else
		rc = coll_req_resolve(d, req);

	if (!rc && req->eager_end < 0) {
		int64_t cur, from;

		coll_sm_share(d, req);
		cur = d->stream[EMU_STREAM_COMPUTE].t;
		dev_wait_tasks(d, req->op);
		/* exposed: the wait from when the op moves data (not waiting for its members) */
		from = cur > req->op->t_start ? cur : req->op->t_start;
		if (req->op->t_end > from)
			d->stats.exposed_ns += req->op->t_end - from;
		emu_stream_advance(d, EMU_STREAM_COMPUTE, req->op->t_end);
	}
	EMU_ASSERT(req->prev ? req->prev->next == req : d->reqs == req);
	*(req->prev ? &req->prev->next : &d->reqs) = req->next;
	*(req->next ? &req->next->prev : &d->reqs_tail) = req->prev;
	if (d->stream[req->stream].pending == req)
		d->stream[req->stream].pending = NULL;
	rdv_release(d, req->op);
	coll_req_put(d, req);
	if (!rc)
		emu_pace(d);
	return rc;
}

/* Checks that a call's buffers exist in execute mode and that d is in g. */
static int check_call(struct emu_dev *d, struct emu_group *g, const char *what, int nbuf,
		      const void *b1, const void *b2, size_t count)
{
	if (!g)
		return dev_fail(d, EMU_EINVAL, "%s: no group", what);
	if (emu_group_rank(g, d) < 0)
		return dev_fail(d, EMU_EINVAL, "%s on a group that device %d is not in", what,
				d->id);
	if (!d->c->cfg.dry_run && count > 0 && (!b1 || (nbuf > 1 && !b2)))
		return dev_fail(d, EMU_EINVAL, "%s: NULL buffer in execute mode", what);
	return dev_check_failed(d);
}

static int post_group(struct emu_dev *d, struct emu_group *g, struct op_arg *arg,
		      struct coll_req **req)
{
	int nbuf = arg->kind == OP_BROADCAST ? 1 : 2;
	const void *b2 = arg->recv;
	int rc;

	if (arg->kind == OP_REDUCE && emu_group_rank(g, d) != arg->root)
		b2 = arg->send; /* only the root receives */
	rc = check_call(d, g, kinds[arg->kind].name, nbuf, arg->send, b2, arg->count);
	if (!rc && (arg->kind == OP_BROADCAST || arg->kind == OP_REDUCE) &&
	    (arg->root < 0 || arg->root >= g->n))
		rc = dev_fail(d, EMU_EINVAL, "%s: root %d is not a rank of a group of %d",
			      kinds[arg->kind].name, arg->root, g->n);
	if (!rc && (int)arg->kind == d->c->fault_kind && d->fault_calls++ == d->c->fault_nth) {
		*req = NULL; /* the fault plan: this call is left out */
		rc = 1;
	}
	if (rc) {
		free(arg->send_counts);
		free(arg->recv_counts);
		return rc > 0 ? 0 : rc;
	}
	return post(d, g, emu_group_rank(g, d), d->coll_stream, arg, req);
}

/* Waits for *req if the post (rc) succeeded. *req is read only after the post has run. */
static int blocking(struct emu_dev *d, int rc, struct coll_req **req)
{
	if (!rc && *req)
		(*req)->blocking = 1;
	return rc ? rc : coll_wait(d, *req);
}

static int post_p2p(struct emu_dev *d, int peer, enum op_kind kind, const float *send, float *recv,
		    size_t count, struct coll_req **req)
{
	int is_send = kind == OP_SEND, rc;
	struct op_arg arg = {.kind = kind, .count = count, .send = send, .recv = recv};

	arg.rendezvous = is_send && d->p2p_rdv; /* (coll_set_rendezvous) */
	arg.grouped = d->p2p_group;
	arg.p2p = d->p2p_comm;
	if (peer < 0 || peer >= d->c->cfg.ndev)
		return dev_fail(d, EMU_EINVAL, "%s: peer %d is not in the cluster (0..%d)",
				kinds[kind].name, peer, d->c->cfg.ndev - 1);
	if (peer == d->id)
		return dev_fail(d, EMU_EINVAL, "%s: device %d cannot %s itself", kinds[kind].name,
				d->id, is_send ? "send to" : "receive from");
	if (!d->c->cfg.dry_run && count > 0 && !(is_send ? (const void *)send : (const void *)recv))
		return dev_fail(d, EMU_EINVAL, "%s: NULL buffer in execute mode", kinds[kind].name);
	if ((rc = dev_check_failed(d)))
		return rc;
	if (is_send && (int)kind == d->c->fault_kind && d->fault_calls++ == d->c->fault_nth)
		send = arg.send = NULL;     /* the fault plan: its data is lost on the way */
	if (is_send && send && count > 0) { /* eager: the data leaves now (see coll.h) */
		arg.owned = emu_xmalloc(count * sizeof *arg.owned);
		memcpy(arg.owned, send, count * sizeof *arg.owned);
		arg.send = arg.owned;
	}
	rc = post(d, is_send ? chan_p2p(d, d->id, peer) : chan_p2p(d, peer, d->id), is_send ? 0 : 1,
		  d->p2p_ce ? (is_send ? EMU_STREAM_CE_SEND : EMU_STREAM_CE_RECV)
			    : (is_send ? EMU_STREAM_SEND : EMU_STREAM_RECV),
		  &arg, req);
	if (rc)
		free(arg.owned);
	return rc;
}

int coll_isend(struct emu_dev *d, int peer, const float *buf, size_t count, struct coll_req **req)
{
	return post_p2p(d, peer, OP_SEND, buf, NULL, count, req);
}

int coll_irecv(struct emu_dev *d, int peer, float *buf, size_t count, struct coll_req **req)
{
	return post_p2p(d, peer, OP_RECV, NULL, buf, count, req);
}

int coll_send(struct emu_dev *d, int peer, const float *buf, size_t count)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_isend(d, peer, buf, count, &r), &r);
}

int coll_recv(struct emu_dev *d, int peer, float *buf, size_t count)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_irecv(d, peer, buf, count, &r), &r);
}

int coll_iall_reduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		     size_t count, enum coll_redop op, struct coll_req **req)
{
	struct op_arg a = {
		.kind = OP_ALL_REDUCE, .redop = op, .count = count, .send = send, .recv = recv};

	return post_group(d, g, &a, req);
}

int coll_ireduce_scatter(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
			 size_t recv_count, enum coll_redop op, struct coll_req **req)
{
	struct op_arg a = {.kind = OP_REDUCE_SCATTER,
			   .redop = op,
			   .count = recv_count,
			   .send = send,
			   .recv = recv};

	return post_group(d, g, &a, req);
}

int coll_iall_gather(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		     size_t send_count, struct coll_req **req)
{
	struct op_arg a = {.kind = OP_ALL_GATHER, .count = send_count, .send = send, .recv = recv};

	return post_group(d, g, &a, req);
}

int coll_iall_to_all(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		     size_t count, struct coll_req **req)
{
	struct op_arg a = {.kind = OP_ALL_TO_ALL, .count = count, .send = send, .recv = recv};

	return post_group(d, g, &a, req);
}

int coll_ibroadcast(struct emu_dev *d, struct emu_group *g, float *buf, size_t count, int root,
		    struct coll_req **req)
{
	struct op_arg a = {
		.kind = OP_BROADCAST, .count = count, .root = root, .send = buf, .recv = buf};

	return post_group(d, g, &a, req);
}

int coll_ireduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		 size_t count, enum coll_redop op, int root, struct coll_req **req)
{
	struct op_arg a = {.kind = OP_REDUCE,
			   .redop = op,
			   .count = count,
			   .root = root,
			   .send = send,
			   .recv = recv};

	return post_group(d, g, &a, req);
}

int coll_broadcast(struct emu_dev *d, struct emu_group *g, float *buf, size_t count, int root)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_ibroadcast(d, g, buf, count, root, &r), &r);
}

int coll_reduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		size_t count, enum coll_redop op, int root)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_ireduce(d, g, send, recv, count, op, root, &r), &r);
}

int coll_all_reduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		    size_t count, enum coll_redop op)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_iall_reduce(d, g, send, recv, count, op, &r), &r);
}

int coll_reduce_scatter(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
			size_t recv_count, enum coll_redop op)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_ireduce_scatter(d, g, send, recv, recv_count, op, &r), &r);
}

int coll_all_gather(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		    size_t send_count)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_iall_gather(d, g, send, recv, send_count, &r), &r);
}

int coll_all_to_all(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		    size_t count)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_iall_to_all(d, g, send, recv, count, &r), &r);
}

int coll_iall_to_all_v(struct emu_dev *d, struct emu_group *g, const float *send,
		       const size_t *send_counts, float *recv, const size_t *recv_counts,
		       struct coll_req **req)
{
	struct op_arg a = {.kind = OP_ALL_TO_ALL_V, .send = send, .recv = recv};
	size_t bytes;

	if (!g || emu_group_rank(g, d) < 0)
		return check_call(d, g, "all-to-all-v", 2, send, recv, 0);
	/* The op keeps its own copies of the counts: the caller's may go out of scope. */
	bytes = (size_t)g->n * sizeof *send_counts;
	a.send_counts = emu_xmalloc(bytes);
	a.recv_counts = emu_xmalloc(bytes);
	memcpy(a.send_counts, send_counts, bytes);
	memcpy(a.recv_counts, recv_counts, bytes);
	a.count = coll_sum_counts(send_counts, g->n) + coll_sum_counts(recv_counts, g->n);
	return post_group(d, g, &a, req);
}

int coll_all_to_all_v(struct emu_dev *d, struct emu_group *g, const float *send,
		      const size_t *send_counts, float *recv, const size_t *recv_counts)
{
	struct coll_req *r = NULL;

	return blocking(d, coll_iall_to_all_v(d, g, send, send_counts, recv, recv_counts, &r), &r);
}
