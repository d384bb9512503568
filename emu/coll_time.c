/* coll_time: when a collective ends, under the run's cost model (emu/clock.h): the
 * roofline's ring formulas on the data sheets' links, or the calibrated model's NCCL-like
 * protocols, NVLink SHARP, rings and trees over nodes, NVLSTree on 2 nodes, all-to-alls
 * node by node, and sends (and all-to-alls inside a node) on NCCL's p2p channels
 * (constants and their sources in topo.c, the formulas in docs/formulas.md). The last
 * member to arrive calls coll_op_resolve. Under the calibrated model also the SMs a
 * collective takes from the compute beside it, charged at its wait (coll_sm_share). */
#include <stdint.h>

#include "clock.h"
#include "internal.h"
#include "util.h"

/* The calibrated model's SM share (topo.c): NVLink SHARP's CTAs, and the bytes of a
 * message a channel takes before NCCL uses another. */
#define NVLS_CTAS 16
#define CTA_BYTES (32ULL << 10)

/* The channels of a message of S bytes on a link of k: one a CTA_BYTES, at least one. */
static int channels(int k, uint64_t S)
{
	uint64_t by_size = S / CTA_BYTES + (S % CTA_BYTES != 0);

	return by_size < (uint64_t)k ? (int)(by_size ? by_size : 1) : k;
}

int coll_channels(const struct topo_link *l, uint64_t bytes)
{
	return channels(l->ctas, bytes);
}

/* ceil(num * S / (den * beta)) seconds, in ns, at most EMU_TIME_MAX; the products in 128
 * bits (a --inter-bw of exabytes a second times the members still divides). */
static int64_t bw_ns(uint64_t num, uint64_t S, uint64_t den, uint64_t beta)
{
	__extension__ typedef unsigned __int128 u128;
	u128 d = (u128)den * beta, t;

	EMU_ASSERT(d > 0);
	t = ((u128)num * S * 1000000000U + d - 1) / d;
	return t > (u128)EMU_TIME_MAX ? EMU_TIME_MAX : (int64_t)t;
}

/* A link under the run's cost model (clock.h): a collective's fixed cost, and its
 * protocols' step latency and bandwidth: the roofline's 0 and alpha, beta for each, or
 * the calibrated base and NCCL-like LL, LL128 (ll128_bw 0: none; up to ll128_max, or
 * where NCCL's model picks it when that is 0) and bulk protocols, NVLink SHARP (topo.h;
 * nvls_bw 0: none) and, between nodes, NVLSTree's ramp and ceiling a NIC (nvls_tree_bw 0:
 * none). */
struct wire {
	int64_t base, ll_hop, hop, ll128_hop, nvls, pxn, nvls_tree;
	uint64_t ll_bw, bw, ll128_bw, ll128_max, nvls_bw, nvls_tree_bw;
	uint64_t ring_loop; /* a ring's loop beyond its chunks, in thousandths of a step */
	uint64_t p2p_ch_bw; /* a send's channel's bandwidth (0: none) */
};

/* beta x eff in bytes a second, beta where that is not a rate */
static uint64_t eff_bw(const struct topo_link *l, double eff)
{
	double bw = (double)l->bw_bytes * eff;

	return bw >= 1 && bw < 1.8e19 ? (uint64_t)bw : l->bw_bytes;
}

static struct wire wire_of(const struct emu_cluster *c, const struct topo_link *l)
{
	struct wire w = {
		.ll_hop = l->lat_ns, .hop = l->lat_ns, .ll_bw = l->bw_bytes, .bw = l->bw_bytes};

	if (c->cfg.cost != EMU_COST_CALIBRATED)
		return w;
	w.base = l->base_ns;
	w.ll_hop = l->ll_hop_ns;
	w.hop = l->hop_ns;
	w.bw = eff_bw(l, l->bus_eff);
	w.pxn = l->pxn_ns;
	/* (the low-latency protocol never beats the link: a lower --*-bw bounds it too) */
	w.ll_bw = l->ll_bw < w.bw ? l->ll_bw : w.bw;
	if (l->ll128_eff > 0) {
		w.ll128_hop = l->ll128_hop_ns;
		w.ll128_bw = eff_bw(l, l->ll128_eff);
		w.ll128_max = l->ll128_max;
	}
	if (l->nvls_eff > 0) {
		w.nvls = l->nvls_ns;
		w.nvls_bw = eff_bw(l, l->nvls_eff);
	}
	w.nvls_tree = l->nvls_tree_ns;
	w.nvls_tree_bw = l->nvls_tree_bw;
	w.p2p_ch_bw = l->p2p_ch_bw;
	/* (in thousandths; a loop of up to 1000 steps keeps ring_ns's products in range) */
	if (l->ring_loop > 0 && l->ring_loop < 1000)
		w.ring_loop = (uint64_t)(l->ring_loop * 1000 + 0.5);
	return w;
}

/* NCCL's own cost model (src/graph/tuning.cc, unchanged from 2.18 to 2.29), which picks
 * the protocol it runs: on NVLink a ring's LL128 costs 14.0 us (baseLat) + 1.9 us a step
 * (hwLat) and moves the bus bytes at 0.92 of Simple's bandwidth (busBw * 0.92); Simple
 * costs 8.4 us + 3.4 us a step. */
#define NCCL_LL128_BASE_NS   14000
#define NCCL_LL128_HOP_NS    1900
#define NCCL_SIMPLE_BASE_NS  8400
#define NCCL_SIMPLE_HOP_NS   3400
#define NCCL_LL128_BW_OVER25 23 /* LL128's bandwidth: 23/25 = 0.92 of Simple's */

/* Whether NCCL sends steps steps and num S / den bus bytes with LL128 rather than
 * Simple: its model (above) says LL128 is the faster, with the link's Simple bandwidth
 * standing in for NCCL's (18 NVLink4 links x 20.6 GB/s, SM90_NVLINK_BW in NCCL's
 * src/graph/topo.h: 370.8 GB/s, against NVLink4's 355.5 fitted, 0.79 x 450). LL128's cheaper steps
 * (1.5 us each, more than its 5.6 us higher base from 4 steps on) against its lower
 * bandwidth make it the faster below a size that grows with the steps: on 8 GPUs, 22 MiB
 * for all-gather and reduce-scatter, 34 MiB for all-reduce. */
static int nccl_picks_ll128(const struct wire *l, uint64_t steps, uint64_t num, uint64_t S,
			    uint64_t den)
{
	/* (23/25 of the bandwidth rather than 25/23 of the bytes: num x S stays in range) */
	uint64_t bw128 = l->bw / 25 * NCCL_LL128_BW_OVER25;
	int64_t ll128 = emu_time_add(NCCL_LL128_BASE_NS + (int64_t)steps * NCCL_LL128_HOP_NS,
				     bw_ns(num, S, den, bw128 ? bw128 : 1));
	int64_t simple = emu_time_add(NCCL_SIMPLE_BASE_NS + (int64_t)steps * NCCL_SIMPLE_HOP_NS,
				      bw_ns(num, S, den, l->bw));

	return ll128 < simple;
}

/* steps steps and num S / den bytes over the wire, by the protocol NCCL would send a
 * message of S bytes with: the faster of LL and the bulk one, which is LL128 where the
 * link has it (up to its largest message, or as far as NCCL's model prefers it,
 * ll128_max 0) and Simple otherwise; the bulk one's bytes times mul / div (a ring's loop,
 * ring_ns; NCCL's model, which picks the protocol, has no such factor). */
static int64_t proto_scaled_ns(const struct wire *l, uint64_t steps, uint64_t num, uint64_t S,
			       uint64_t den, uint64_t mul, uint64_t div)
{
	int64_t ll = emu_time_add((int64_t)steps * l->ll_hop, bw_ns(num, S, den, l->ll_bw));
	int ll128 = l->ll128_bw &&
		    (l->ll128_max ? S <= l->ll128_max : nccl_picks_ll128(l, steps, num, S, den));
	int64_t bulk = ll128 ? emu_time_add((int64_t)steps * l->ll128_hop,
					    bw_ns(num * mul, S, den * div, l->ll128_bw))
			     : emu_time_add((int64_t)steps * l->hop,
					    bw_ns(num * mul, S, den * div, l->bw));

	return ll < bulk ? ll : bulk;
}

static int64_t proto_ns(const struct wire *l, uint64_t steps, uint64_t num, uint64_t S,
			uint64_t den)
{
	return proto_scaled_ns(l, steps, num, S, den, 1, 1);
}

/* The GPUs of a node the links' bus efficiencies were measured among (topo.c) */
#define RING_LOOP_REF_GPUS 8

/* The ring collectives' (n-1) alpha + (n-1)/n S / beta, doubled for all-reduce. With
 * loop, a reduce-scatter's, all-gather's or all-reduce's ring inside a node (an
 * all-to-all has none, topo.c): each loop of its steps moves T = n - 1 chunks (2 (n - 1)
 * for all-reduce) and costs ring_loop of a step more, so its bus bytes take
 * (T + ring_loop) / T of the link's time, and bus_eff, measured among 8, already holds
 * (T8 + ring_loop) / T8: among n < 8 the bulk protocol's bytes are scaled by the ratio. */
static int64_t ring_ns(const struct wire *l, int n, uint64_t S, int twice, int loop)
{
	uint64_t steps = (uint64_t)(n - 1) * (twice ? 2 : 1);
	uint64_t ref = (uint64_t)(RING_LOOP_REF_GPUS - 1) * (twice ? 2 : 1), rl = l->ring_loop;

	if (!loop || !rl || !steps || steps >= ref)
		return proto_ns(l, steps, steps, S, (uint64_t)n);
	return proto_scaled_ns(l, steps, steps, S, (uint64_t)n, (steps * 1000 + rl) * ref,
			       steps * (ref * 1000 + rl));
}

/* An all-reduce of S bytes inside a node by NVLink SHARP: the switch reduces, in one
 * pass whatever the number of GPUs. Charged only where it costs less than the ring: NCCL
 * picks its algorithm, as its protocol, by the least time its model predicts (tuning.cc,
 * ncclTopoGetAlgoTime), so what it runs takes at most about the ring's time. On 8 H100s
 * from 18.3 MiB up. This law is a line fitted from 32 MiB up: below, where NCCL already
 * runs NVLS (from 2 MiB on 8 H200s), its 55 us overstates the time, and the ring's law
 * stands in (docs/formulas.md). And only among NCCL_NVLS_MIN_GPUS or more: NCCL's model
 * (its table as NCCL 2.29 prints it on an HGX H100, waynehacking8/nccl-collectives-bench)
 * gives NVLS among 2 and 4 GPUs 102 and 160 GB/s of algorithm bandwidth, under the
 * ring's 360 and 240 by Simple, and where its 25 us undercuts LL128's latency (25.4 us
 * among 4) LL is cheaper still, so it is never the least time there: NCCL ran the ring
 * (its log; NVLS among 6, where NVLS's 216 equals the ring's at less latency; 4 H100s
 * under NCCL's defaults: 359 GB/s of bus bandwidth at 2 GiB, the ring's,
 * xxrjun/nccl-tests-cluster). 5 is taken as 4, not measured: NVLS's bandwidth in NCCL's
 * model, 30 n^2 / (n - 1) GB/s from 4 GPUs up, is 188 there, under the ring's 225, so the ring
 * takes the large messages; its lower latency may win it 2.5 to 8 MiB, where pemu's NVLS
 * line costs more than the ring anyway. 7 as 6 (245 against 210). */
#define NCCL_NVLS_MIN_GPUS 6

static int64_t nvls_ns(const struct wire *l, uint64_t S)
{
	return emu_time_add(l->nvls, bw_ns(1, S, 1, l->nvls_bw));
}

static int a2av_consistent(const struct op *op)
{
	for (int i = 0; i < op->ch->n; i++)
		for (int j = 0; j < op->ch->n; j++)
			if (op->arg[i].send_counts[j] != op->arg[j].recv_counts[i])
				return 0;
	return 1;
}

/* The largest message of an all-to-all-v from one member to another. */
static uint64_t a2av_largest(const struct op *op)
{
	uint64_t most = 0;

	for (int i = 0; i < op->ch->n; i++)
		for (int j = 0; j < op->ch->n; j++)
			if (j != i && op->arg[i].send_counts[j] > most)
				most = op->arg[i].send_counts[j];
	return most * (uint64_t)op->arg[0].wire_bytes;
}

static uint64_t task_count(uint64_t elems)
{
	return (elems + TASK_ELEMS - 1) / TASK_ELEMS;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* L NICs' bandwidth, at most UINT64_MAX */
static uint64_t times_sat(uint64_t bw, int L)
{
	return bw > UINT64_MAX / (uint64_t)L ? UINT64_MAX : bw * (uint64_t)L;
}

/* NCCL's sends at once from a member over comm, on a link that models their channels
 * (p2p_ch_bw): a message of up to b bytes to each peer, out bytes in all through the
 * member's link (b for one send). A peer's message is split over its channels
 * (coll_p2p_channels), each at p2p_ch_bw at most, while the member's link carries out
 * bytes at its bandwidth at most: every channel at its share of the slower. NCCL sends
 * by LL where each channel has at most P2P_LL_BYTES of the message, by Simple otherwise,
 * never by LL128 (enqueue.cc, addP2pToPlan). By Simple a channel moves its part through
 * the connection's buffer a chunk at a time (coll_p2p_chunk), written by the sender and
 * copied out by the receiver a chunk behind: one chunk, or the part where it is smaller,
 * more than the part, both copies at the channel's rate (docs/formulas.md). */
#define P2P_LL_BYTES 16384 /* NCCL_P2P_LL_THRESHOLD's default */

static int64_t p2p_peers_ns(const struct emu_cluster *c, const struct wire *l, uint64_t b,
			    uint64_t out, const struct coll_p2p_comm *comm)
{
	__extension__ typedef unsigned __int128 u128;
	uint64_t nic = c->cfg.topo.link[TOPO_LINK_INTER].bw_bytes, chunk = coll_p2p_chunk(comm);
	int ch = coll_p2p_channels(comm, b, nic);
	uint64_t cap = times_sat(l->p2p_ch_bw, ch);
	uint64_t part = b / (uint64_t)ch + (b % (uint64_t)ch != 0);
	int64_t by_ch = bw_ns(1, b, 1, cap), by_link = bw_ns(1, out, 1, l->bw), body, by_ll;

	if (part <= P2P_LL_BYTES) {
		by_ll = bw_ns(1, out, 1, l->ll_bw);
		return emu_time_add(l->ll_hop, by_ch > by_ll ? by_ch : by_ll);
	}
	body = by_ch > by_link ? by_ch : by_link;
	return emu_time_add(
		l->hop, emu_time_add(body, (int64_t)((u128)body * min_u64(chunk, part) / part)));
}

/* A message of S bytes on link l, as a send of NCCL's over comm where the link models
 * its channels (p2p_ch_bw, comm->ranks > 0: p2p_peers_ns); else at the link's rate by
 * the protocols of a collective's step. */
static int64_t p2p_ns(const struct emu_cluster *c, const struct wire *l, uint64_t S,
		      const struct coll_p2p_comm *comm)
{
	if (comm->ranks > 0 && l->p2p_ch_bw)
		return p2p_peers_ns(c, l, S, S, comm);
	return proto_ns(l, 1, 1, S, 1);
}

/* The injected slowdown of the links of ch's members' nodes: the largest. */
static double links_slow(const struct emu_cluster *c, const struct emu_group *ch)
{
	double x = 1;

	for (int i = 0; c->cfg.nslow && i < ch->n; i++) {
		double y = c->node_slow[topo_node(&c->cfg.topo, ch->devs[i])];

		x = y > x ? y : x;
	}
	return x;
}

/* A's send over ch, its fixed cost and slowdown included (as coll_op_resolve times it). */
int64_t coll_send_ns(const struct emu_cluster *c, const struct emu_group *ch,
		     const struct op_arg *a)
{
	struct wire w = wire_of(c, &c->cfg.topo.link[ch->link]);
	uint64_t S = (uint64_t)a->count * (uint64_t)a->wire_bytes;

	return emu_time_scale(emu_time_add(w.base, p2p_ns(c, &w, S, &a->p2p)), links_slow(c, ch));
}

/* NCCL's correction of its tree's bandwidth for an all-reduce of S bytes by Simple,
 * "Trees are not perfectly sticking to the model for medium sizes" (tuning.cc,
 * treeCorrectionFactor, indexed by log2(S / 64) below 2^23), in tenths. */
static uint64_t tree_tenths(uint64_t S)
{
	static const uint8_t f[23] = {9, 9, 9, 9, 9, 9, 9, 8, 7, 6, 6, 5,
				      5, 5, 5, 6, 7, 8, 7, 7, 8, 9, 9};
	int lg = 0;

	if (S < 64)
		return 10;
	while ((S >> 6) >> (lg + 1))
		lg++;
	return lg < 23 ? f[lg] : 10;
}

/* a x p + b x q ns, at most EMU_TIME_MAX */
static int64_t hops_ns(uint64_t a, int64_t p, uint64_t b, int64_t q)
{
	double t = (double)a * (double)p + (double)b * (double)q;

	return t < (double)EMU_TIME_MAX ? (int64_t)(a * (uint64_t)p + b * (uint64_t)q)
					: EMU_TIME_MAX;
}

/* An all-reduce of S bytes over n members on 2 nodes, L on each, by NCCL's NVLSTree (its
 * tuning.cc's structure): each node's switch reduces (NVLink SHARP) and the two nodes
 * exchange their sums a NIC at a time, each NIC carrying 1/L of the message both ways at
 * once. A NIC's bus bandwidth is the lesser of NCCL's ceiling for NVLSTree on 2 nodes
 * (nvls_tree_bw) and twice the NIC's own; the algorithm bandwidth L of them times n / (2
 * (n - 1)), and at most the node's NVLink SHARP all-reduce's. The fixed cost: the ramp
 * nvls_tree (as NVLink SHARP's in a node, a line's intercept, not a latency) and the 2
 * levels of the exchange at the network's step (topo.c). */
static int64_t nvls_tree_time(const struct wire *in, const struct wire *net, int n, int L,
			      uint64_t S)
{
	uint64_t nic = net->nvls_tree_bw / 2 < net->bw ? net->nvls_tree_bw : 2 * net->bw;
	/* S / (L nic n / (2 (n - 1))) */
	int64_t by_net = bw_ns(2 * (uint64_t)(n - 1), S, (uint64_t)n * (uint64_t)L, nic);
	int64_t by_node = bw_ns(1, S, 1, in->nvls_bw);

	return emu_time_add(emu_time_add(hops_ns(2, net->hop, 0, 0), net->nvls_tree),
			    by_net > by_node ? by_net : by_node);
}

/* A ring collective (all-reduce twice = 1, else reduce-scatter or all-gather) of S bytes
 * in all over n members on k nodes, L on each, under the calibrated model, as NCCL runs it
 * (its tuning.cc's structure, the constants measured: emu/topo.c): the bus bytes at the
 * slower of the NVLink ring and the L NICs of a node side by side (one ring a NIC), B; the
 * latency of the hops a chunk takes, the node's at the intra link's step and the network's
 * at the inter link's: the ring's, n - k and k - 1; plus the network's fixed cost when
 * L > 1 (pxn). The faster of the two protocols, LL and the bulk one. An all-reduce has
 * NCCL's tree besides, 2 (L - 1) + 2 ceil(log2 k) hops, and NCCL runs the faster by its
 * model: by LL the tree's hops with the ring's bus bytes (small messages), by Simple the
 * ring (2 (n - k) + 2 (k - 1) hops, 2 (n - 1) / n S at B) or the tree (2 S at 0.92 B, times
 * NCCL's correction for medium sizes, tree_tenths); on 2 nodes of NVLink SHARP GPUs also
 * NVLSTree (nvls_tree_time), where it costs less still, which sets *nvls_tree. */
static int64_t multi_node_ns(const struct wire *in, const struct wire *net, int n, int k, int L,
			     uint64_t S, int twice, int *nvls_tree)
{
	uint64_t steps = (uint64_t)(n - 1) * (twice ? 2 : 1), lg = 0;
	uint64_t hi = (uint64_t)(n - k) * (twice ? 2 : 1), hx = (uint64_t)(k - 1) * (twice ? 2 : 1);
	uint64_t ti = hi, tx = hx; /* LL's hops: for all-reduce the tree's, as its Simple's */
	uint64_t B = min_u64(in->bw, times_sat(net->bw, L));
	int64_t ll, bulk;

	if (twice) {
		while ((1 << lg) < k)
			lg++;
		ti = 2 * (uint64_t)(L - 1);
		tx = 2 * lg;
	}
	ll = emu_time_add(
		hops_ns(ti, in->ll_hop, tx, net->ll_hop),
		bw_ns(steps, S, (uint64_t)n, min_u64(in->ll_bw, times_sat(net->ll_bw, L))));
	bulk = emu_time_add(hops_ns(hi, in->hop, hx, net->hop), bw_ns(steps, S, (uint64_t)n, B));
	if (twice) { /* 2 S / (0.92 x tenths / 10 x B) = 500 S / (23 x tenths x B) */
		int64_t tree = emu_time_add(hops_ns(ti, in->hop, tx, net->hop),
					    bw_ns(500, S, 23 * tree_tenths(S), B));

		bulk = tree < bulk ? tree : bulk;
	}
	bulk = emu_time_add(ll < bulk ? ll : bulk, L > 1 ? net->pxn : 0);
	if (twice && k == 2 && L > 1 && in->nvls_bw && net->nvls_tree_bw) {
		int64_t tree = nvls_tree_time(in, net, n, L, S);

		if (tree < bulk) {
			*nvls_tree = 1;
			return tree;
		}
	}
	return bulk;
}

/* A ring collective over nodes (or an all-reduce by NCCL's tree or NVLSTree, which sets
 * op->nvls_tree and its CTAs): evenly spread (chan.c found its nodes), or else taken as
 * one member a node, the slower case. */
static int64_t calibrated_across(const struct emu_cluster *c, struct op *op, const struct wire *net,
				 uint64_t S, int twice)
{
	const struct emu_group *ch = op->ch;
	const struct wire in = wire_of(c, &c->cfg.topo.link[TOPO_LINK_INTRA]);
	int k = ch->hier_nodes > 1 ? ch->hier_nodes : ch->n, nvls_tree = 0;
	int64_t t;

	op->nic_rings = ch->n / k;
	t = multi_node_ns(&in, net, ch->n, k, ch->n / k, S, twice, &nvls_tree);
	if (nvls_tree) {
		op->nvls_tree = op->nic_rings;
		op->nic_rings = 0;
		op->ctas = NVLS_CTAS;
	}
	return t;
}

/* An all-to-all(-v) over nodes under the calibrated model, as NCCL runs one (nccl-tests'
 * alltoall: a send and a receive with every other member, grouped, all at once): a
 * member's bytes for its own node's members go over the node's links while those for
 * other nodes go through its NIC, side by side. The time is the slower of the two, each
 * for the member that moves the most over it, sending or receiving, with the n - 1 steps
 * of a member's sends at that link's step; the network's is the group's slowest link.
 * Measured: 2 nodes x 8 H100 move 4 GiB a member in 43.9 ms, the 2 GiB for the other
 * node at 49 GB/s, one NIC's (xxrjun/nccl-tests-cluster pairwise; bench/fidelity). */
static int64_t a2a_across(const struct emu_cluster *c, const struct op *op, const struct wire *net)
{
	const struct wire in = wire_of(c, &c->cfg.topo.link[TOPO_LINK_INTRA]);
	uint64_t steps = (uint64_t)(op->ch->n - 1), local = 0, remote = 0;
	int64_t over_net, over_node;

	for (int m = 0; m < op->ch->n; m++)
		for (int recv = 0; recv < 2; recv++) {
			uint64_t l, r;

			coll_a2a_split(c, op, m, recv, &l, &r);
			local = l > local ? l : local;
			remote = r > remote ? r : remote;
		}
	over_net = proto_ns(net, steps, 1, remote, 1);
	over_node = proto_ns(&in, steps, 1, local, 1);
	return over_net > over_node ? over_net : over_node;
}

int coll_op_resolve(struct emu_cluster *c, struct op *op)
{
	const struct topo *t = &c->cfg.topo;
	const struct op_arg *a = &op->arg[0];
	const struct wire w = wire_of(c, &t->link[op->ch->link]), *l = &w;
	int n = op->ch->n;
	/* (an all-to-all inside a node: NCCL's grouped sends, on a communicator of its own) */
	const struct coll_p2p_comm in_node = {n, 1};
	uint64_t S = (uint64_t)a->count * (uint64_t)a->wire_bytes, work = 0;
	int64_t dur = 0;

	op->t_start = 0;
	op->nic_rings = 0;
	op->nvls_tree = 0;
	op->by_node = 0;
	op->ctas = 0;
	for (int i = 0; i < n; i++)
		if (op->arg[i].t_issue > op->t_start)
			op->t_start = op->arg[i].t_issue;
	if ((a->kind == OP_SEND || a->kind == OP_RECV) && !op->arg[0].rendezvous)
		op->t_start = op->arg[0].t_issue; /* eager: the sender (member 0) alone */
	op->link = op->ch->link;
	switch (a->kind) {
	case OP_BARRIER:
		break;
	case OP_SEND:
	case OP_RECV:
		dur = p2p_ns(c, l, S, &a->p2p); /* (the sender's, member 0) */
		work = a->count;
		break;
	case OP_BROADCAST:
	case OP_REDUCE:
		dur = proto_ns(l, (uint64_t)(n - 1), 1, S, 1);
		work = a->count;
		break;
	case OP_ALL_REDUCE:
		if (c->cfg.cost == EMU_COST_CALIBRATED && op->ch->link >= TOPO_LINK_INTER) {
			dur = calibrated_across(c, op, l, S, 1);
		} else if (op->ch->hier_nodes > 1) {
			int k = op->ch->hier_nodes, L = op->ch->hier_local;
			const struct wire wi = wire_of(c, &t->link[TOPO_LINK_INTRA]), *li = &wi;

			op->hier = 1;
			dur = emu_time_add(
				emu_time_add(ring_ns(li, L, S, 0, 0), ring_ns(li, L, S, 0, 0)),
				proto_ns(l, 2 * (uint64_t)(k - 1), 2 * (uint64_t)(k - 1), S,
					 (uint64_t)k * (uint64_t)L));
		} else {
			dur = ring_ns(l, n, S, 1, 1);
			if (l->nvls_bw && op->ch->link == TOPO_LINK_INTRA &&
			    n >= NCCL_NVLS_MIN_GPUS) {
				int64_t nvls = nvls_ns(l, S);

				if (nvls < dur) {
					dur = nvls;
					op->ctas = NVLS_CTAS;
				}
			}
		}
		work = a->count;
		break;
	case OP_REDUCE_SCATTER:
	case OP_ALL_GATHER:
	case OP_ALL_TO_ALL:
		S *= (uint64_t)n;
		if (c->cfg.cost == EMU_COST_CALIBRATED && op->ch->link >= TOPO_LINK_INTER &&
		    a->kind == OP_ALL_TO_ALL) {
			dur = a2a_across(c, op, l);
			op->by_node = 1;
		} else if (a->kind == OP_ALL_TO_ALL && l->p2p_ch_bw) {
			uint64_t b = S / (uint64_t)n;

			dur = p2p_peers_ns(c, l, b, b * (uint64_t)(n - 1), &in_node);
		} else if (c->cfg.cost == EMU_COST_CALIBRATED && op->ch->link >= TOPO_LINK_INTER)
			dur = calibrated_across(c, op, l, S, 0);
		else
			dur = ring_ns(l, n, S, 0, a->kind != OP_ALL_TO_ALL);
		work = (uint64_t)a->count * (uint64_t)n *
		       (a->kind == OP_ALL_TO_ALL ? (uint64_t)n : 1);
		break;
	case OP_ALL_TO_ALL_V: {
		uint64_t worst = 0;

		if (!a2av_consistent(op))
			return 1;
		/* S: what the member with the most to send sends in all. The time is set by
		 * the member that moves the most across links, sending or receiving. */
		S = 0;
		for (int i = 0; i < n; i++) {
			uint64_t all = (uint64_t)coll_sum_counts(op->arg[i].send_counts, n) *
				       (uint64_t)a->wire_bytes;
			uint64_t sent = coll_a2av_cross(op, i, 0), got = coll_a2av_cross(op, i, 1);

			S = all > S ? all : S;
			worst = sent > worst ? sent : worst;
			worst = got > worst ? got : worst;
		}
		if (c->cfg.cost == EMU_COST_CALIBRATED && op->ch->link >= TOPO_LINK_INTER) {
			dur = a2a_across(c, op, l);
			op->by_node = 1;
		} else if (l->p2p_ch_bw) {
			dur = p2p_peers_ns(c, l, a2av_largest(op), worst, &in_node);
		} else {
			dur = proto_ns(l, (uint64_t)(n - 1), 1, worst, 1);
		}
		break;
	}
	default:
		EMU_ASSERT(0);
	}
	if (n == 1)
		dur = 0; /* nothing crosses a link */
	else if (a->kind != OP_BARRIER)
		dur = emu_time_scale(emu_time_add(dur, l->base), /* (the roofline's base 0) */
				     links_slow(c, op->ch));
	op->bytes = S;
	op->t_end = emu_time_add(op->t_start, dur);
	if (c->cfg.cost == EMU_COST_CALIBRATED && n > 1 && a->kind != OP_BARRIER &&
	    a->kind != OP_SEND && a->kind != OP_RECV) /* the SM share (topo.c) */
		op->ctas = a->ctas ? a->ctas          /* (a library's kernels on so many SMs) */
				   : channels(op->ctas ? op->ctas : t->link[op->link].ctas, S);
	if (c->cfg.dry_run)
		op->ntasks = 0;
	else if (a->kind == OP_ALL_TO_ALL_V)
		op->ntasks = n;
	else
		op->ntasks = (int)task_count(work);
	return 0;
}

void coll_sm_share(struct emu_dev *d, const struct coll_req *req)
{
	const struct op *op = req->op;
	int64_t cur = d->stream[EMU_STREAM_COMPUTE].t, busy = d->compute_ns - req->post_busy;
	int64_t lo = op->t_start > req->post_t ? op->t_start : req->post_t;
	int64_t hi = op->t_end < cur ? op->t_end : cur, ov;
	int sms = d->c->cfg.topo.gpu.sms;

	/* posted under an SM margin: its kernels run on the SMs the GEMMs beside it left */
	if (op->ctas <= 0 || op->ctas >= sms || hi <= lo || busy <= 0 || req->margin > 0)
		return;
	ov = busy < hi - lo ? busy : hi - lo;
	clock_stretch(d, "sm share",
		      (int64_t)ceil((double)ov * op->ctas / (double)(sms - op->ctas)));
}
