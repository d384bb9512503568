/* coll_p2p: the NCCL communicator a device's sends run on (emu/coll.h), the channels
 * NCCL splits a send over on it, which bound the send's bandwidth where a link models
 * them, and the chunk a channel moves its part in (coll_time.c, p2p_peers_ns). */
#include "internal.h"
#include "util.h"

struct coll_p2p_comm coll_set_p2p_comm(struct emu_dev *d, struct coll_p2p_comm comm)
{
	struct coll_p2p_comm was = d->p2p_comm;

	EMU_ASSERT(comm.ranks >= 0 && (comm.ranks == 0 || comm.nodes >= 1));
	d->p2p_comm = comm;
	return was;
}

struct coll_p2p_comm coll_comm_of(const struct emu_dev *d, const int *devs, int n)
{
	int per;

	return (struct coll_p2p_comm){n, topo_group_nodes(&d->c->cfg.topo, devs, n, &per)};
}

struct coll_p2p_comm coll_comm_of_group(const struct emu_dev *d, const struct emu_group *g)
{
	return coll_comm_of(d, g->devs, g->n);
}

/* NCCL's send of S bytes over a communicator of comm->ranks on comm->nodes nodes (NCCL
 * 2.29.2: its addP2pToPlan, enqueue.cc, and the channels a peer, graph/paths.cc): split
 * over channels, first as many as its p2p channels allow every rank at once (a peer's
 * channels, halved while that many for each of the ranks exceeds P2P_CHANNELS), but no
 * more than one for each min_part bytes; then doubled, up to a peer's channels, while a
 * channel's part exceeds max_part. Both come from its p2p chunk: in a node its NVLink
 * chunk, 512 KiB, 1/8 and 32 of it; over nodes its network chunk, 128 KiB, 1/2 and 1 of
 * it. A peer's channels: in a node P2P_CHANNELS; over nodes the fewest of any peer's,
 * which a network peer's sets: ceil(the NIC's GB/s / 14), at least 1 (4 for 400 Gb/s;
 * P2P_PER_CHANNEL_NET_BW), to a power of 2, halved while that many for every 8 ranks
 * exceeds P2P_CHANNELS. So among 8 GPUs of a node a send of up to 64 MiB runs on 4
 * channels, among 4 up to 128 MiB on 8, among 2 up to 256 MiB on 16; on a communicator
 * over nodes of 400 Gb/s NICs on 4 at most, its sends inside a node too. P2P_CHANNELS:
 * "32 p2p channels, 32 p2p channels per peer", NCCL 2.29.2's log on an HGX H100 among 2,
 * 4 and 6 GPUs (waynehacking8/nccl-collectives-bench, results/scaling_attributed), taken
 * for communicators over nodes too (their p2p channels are their rings', unlogged). */
#define P2P_CHANNELS        32
#define P2P_NVL_CHUNK       (512ULL << 10)
#define P2P_NET_CHUNK       (128ULL << 10)
#define P2P_NVL_MIN_PARTS   8  /* a channel's least part: the chunk / this */
#define P2P_NVL_MAX_PARTS   32 /* and its most: this x the chunk */
#define P2P_NET_CH_GBPS     14 /* NCCL_P2P_PER_CHANNEL_NET_BW's default */
#define P2P_RANKS_PER_BATCH 8  /* NCCL_MAX_DEV_WORK_P2P_PER_BATCH */

/* (ceil(x / y) for x, y > 0) */
static uint64_t div_up(uint64_t x, uint64_t y)
{
	return x / y + (x % y != 0);
}

/* NCCL's p2p chunk (init.cc, computeBuffSizes): NVLink's inside a node, the network's on
 * a communicator over nodes, its sends inside a node too */
uint64_t coll_p2p_chunk(const struct coll_p2p_comm *comm)
{
	return comm->nodes <= 1 ? P2P_NVL_CHUNK : P2P_NET_CHUNK;
}

int coll_p2p_channels(const struct coll_p2p_comm *comm, uint64_t S, uint64_t nic_bw)
{
	int one_node = comm->nodes <= 1, peer = P2P_CHANNELS, c;
	uint64_t chunk = coll_p2p_chunk(comm);
	uint64_t min_part = one_node ? chunk / P2P_NVL_MIN_PARTS : chunk / 2;
	uint64_t max_part = one_node ? chunk * P2P_NVL_MAX_PARTS : chunk, by_size, part;
	uint64_t ranks = comm->ranks > 0 ? (uint64_t)comm->ranks : 1;

	if (!one_node) {
		uint64_t net =
			div_up(nic_bw / 1000000000 ? nic_bw / 1000000000 : 1, P2P_NET_CH_GBPS);

		for (peer = 1; (uint64_t)peer < net && peer < P2P_CHANNELS;)
			peer *= 2;
		while ((uint64_t)peer * div_up(ranks, P2P_RANKS_PER_BATCH) > P2P_CHANNELS &&
		       peer > 1)
			peer /= 2;
	}
	for (c = peer; (uint64_t)c * ranks > P2P_CHANNELS && c > 1;)
		c /= 2;
	by_size = div_up(S ? S : 1, min_part);
	if (by_size < (uint64_t)c)
		c = (int)by_size;
	part = div_up(S ? S : 1, (uint64_t)c);
	while (part > max_part && c <= peer / 2) {
		c *= 2;
		part = div_up(S, (uint64_t)c);
	}
	return c;
}
