/* coll_arg: a member's call as an op_arg: whether two members' calls of one op differ (a
 * collective mismatch), a call described for the reports that name it (fail.c), and the
 * bytes a member's all-to-all moves inside its node and out of it. */
#include "internal.h"

#include "util.h"

int coll_mismatch(const struct op_arg *a, const struct op_arg *b)
{
	int p2p = (a->kind == OP_SEND && b->kind == OP_RECV) ||
		  (a->kind == OP_RECV && b->kind == OP_SEND);

	if (a->kind != b->kind && !p2p)
		return 1;
	if (a->wire_bytes != b->wire_bytes)
		return 1;
	switch (a->kind) {
	case OP_REDUCE:
		return a->count != b->count || a->root != b->root || a->redop != b->redop;
	case OP_BROADCAST:
		return a->count != b->count || a->root != b->root;
	case OP_ALL_REDUCE:
	case OP_REDUCE_SCATTER:
		return a->count != b->count || a->redop != b->redop;
	case OP_ALL_TO_ALL_V:
	case OP_BARRIER:
		return 0; /* all-to-all-v counts are checked once everyone is there */
	default:
		return a->count != b->count;
	}
}

void coll_describe_arg(struct emu_str *s, const struct emu_group *ch, const struct op_arg *a)
{
	static const char *const redops[] = {"sum", "max"};

	switch (a->kind) {
	case OP_SEND:
		emu_str_addf(s, "send(count=%zu) to device %d", a->count, ch->devs[1]);
		return;
	case OP_RECV:
		emu_str_addf(s, "recv(count=%zu) from device %d", a->count, ch->devs[0]);
		return;
	case OP_BARRIER:
		emu_str_addf(s, "barrier");
		break;
	case OP_ALL_TO_ALL_V:
		emu_str_addf(s, "all-to-all-v(sends %zu, receives %zu elements)",
			     coll_sum_counts(a->send_counts, ch->n),
			     coll_sum_counts(a->recv_counts, ch->n));
		break;
	case OP_REDUCE:
		emu_str_addf(s, "reduce(count=%zu, %s, root=%d)", a->count, redops[a->redop],
			     a->root);
		break;
	case OP_BROADCAST:
		emu_str_addf(s, "broadcast(count=%zu, root=%d)", a->count, a->root);
		break;
	case OP_ALL_REDUCE:
	case OP_REDUCE_SCATTER:
		emu_str_addf(s, "%s(count=%zu, %s)", coll_op_name(a->kind), a->count,
			     redops[a->redop]);
		break;
	default:
		emu_str_addf(s, "%s(count=%zu)", coll_op_name(a->kind), a->count);
		break;
	}
	if (a->wire_bytes != 4)
		emu_str_addf(s, " [%d-byte elements]", a->wire_bytes);
	emu_str_addf(s, " on group ");
	chan_describe(s, ch);
}

/* Bytes member m of an all-to-all-v sends to (recv from) the other members. */
uint64_t coll_a2av_cross(const struct op *op, int m, int recv)
{
	const struct op_arg *a = &op->arg[m];
	const size_t *v = recv ? a->recv_counts : a->send_counts;

	return (uint64_t)(coll_sum_counts(v, op->ch->n) - v[m]) * (uint64_t)a->wire_bytes;
}

/* The members of ch on member m's node, m included. */
static int members_on_node(const struct topo *t, const struct emu_group *ch, int m)
{
	int node = topo_node(t, ch->devs[m]), k = 0;

	if (ch->hier_nodes > 1) /* spread evenly (chan.c) */
		return ch->hier_local;
	for (int i = 0; i < ch->n; i++)
		k += topo_node(t, ch->devs[i]) == node;
	return k;
}

void coll_a2a_split(const struct emu_cluster *c, const struct op *op, int m, int recv,
		    uint64_t *local, uint64_t *remote)
{
	const struct topo *t = &c->cfg.topo;
	const struct emu_group *ch = op->ch;
	const struct op_arg *a = &op->arg[m];
	int node = topo_node(t, ch->devs[m]);

	*local = *remote = 0;
	if (a->kind == OP_ALL_TO_ALL) { /* count elements for each member, both ways */
		uint64_t on = (uint64_t)members_on_node(t, ch, m);

		*local = (on - 1) * (uint64_t)a->count * (uint64_t)a->wire_bytes;
		*remote = ((uint64_t)ch->n - on) * (uint64_t)a->count * (uint64_t)a->wire_bytes;
		return;
	}
	for (int j = 0; j < ch->n; j++) {
		uint64_t b = (uint64_t)(recv ? a->recv_counts : a->send_counts)[j] *
			     (uint64_t)a->wire_bytes;

		if (j == m)
			continue;
		if (topo_node(t, ch->devs[j]) == node)
			*local += b;
		else
			*remote += b;
	}
}
