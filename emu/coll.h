/* coll: communication between devices, on any group: send/recv, broadcast, reduce,
 * all-reduce, reduce-scatter, all-gather, all-to-all and all-to-all-v, each blocking or
 * posted (coll_i*: returns a request to coll_wait on, like MPI_Isend / NCCL on a side
 * stream).
 *
 * Data. In execute mode the data really moves between the devices' buffers. A reduction
 * adds in the order of the ring algorithm, so the rounding is the algorithm's:
 *   - the buffer is cut into n chunks, chunk c = [c*count/n, (c+1)*count/n) in exact
 *     integer arithmetic; chunk c is summed in group-rank order c+1, c+2, ..., c+n
 *     (mod n), left to right: it starts at the member after c and ends at c, which is
 *     where a ring reduce-scatter leaves it.
 *   - reduce-scatter: member r receives chunk r (recv_count elements each), summed as
 *     above; reduce: the whole buffer, summed root+1, ..., root.
 *   - the hierarchical all-reduce (a group spanning several nodes with the same number
 *     L > 1 of members on each): element j lies in local chunk q of L (same rule);
 *     each node sums its members in local order q+1, ..., q (mod L); j lies in
 *     sub-chunk r of k (k nodes) of chunk q; the node sums add in node order r+1, ...,
 *     r (mod k). Nodes are ordered by their first member's group rank, and members in
 *     a node by group rank.
 *   Every member gets the same bits.
 *
 * Time. An op starts when the last member arrives (the latest issue time) and lasts
 * the ring formula of docs/formulas.md for the group's slowest link (alpha, beta)
 * and message size S = count * wire bytes (4 by default), each bandwidth term rounded up
 * to whole nanoseconds:
 *   all-reduce           2(n-1) alpha + 2(n-1)/n S/beta
 *   reduce-scatter       (n-1) alpha + (n-1)/n S/beta     S: the whole (n * recv_count)
 *   all-gather           (n-1) alpha + (n-1)/n S/beta     S: the whole (n * send_count)
 *   all-to-all           (n-1) alpha + (n-1)/n S/beta     S: what each member sends in all
 *   all-to-all-v         (n-1) alpha + max over members of max(sent, received) / beta,
 *                        counting only what crosses to another member
 *   broadcast, reduce    (n-1) alpha + S/beta             (pipelined chain)
 *   send/recv            alpha + S/beta
 * A group of one moves nothing and takes no time. The hierarchical all-reduce takes a
 * reduce-scatter inside the node, an all-reduce of S/L between nodes, and an all-gather
 * inside the node, each by the formulas above on its own link.
 *
 * Sends are eager: a send starts when its sender posts it (after the previous send on
 * its stream) whether or not the receiver is there yet, and its data is copied out as
 * it is posted, so the sender's buffer is free again at once and waiting on the send
 * returns when the data has left, never waiting for the peer. The recv completes at the
 * send's end or when it is posted, whichever is later: an eager protocol, the message
 * landing in a buffer on the receiver (the host holds the copy; no device is charged).
 * A pipeline stage can so post its activations and go on.
 * coll_set_rendezvous makes a device's sends wait for their receivers instead.
 *
 * Under the calibrated cost model a posted collective also takes SMs from the compute
 * beside it (its CTAs, emu/topo.c): coll_wait charges the compute stream the stretch of
 * what ran beside it (docs/formulas.md, "the SM share"); sends and receives take none.
 *
 * A posted op starts no earlier than the compute stream's cursor at the call (the data it
 * sends was produced there) and no earlier than the end of the previous op on its
 * stream; coll_wait makes the compute stream wait for its end (max(compute, comm), not
 * the sum). As with NCCL and MPI, the buffers of a posted call belong to it until
 * coll_wait: the caller must not touch them, nor let them go (a stack buffer, a
 * mem_free) before that. A device function that returns without waiting has its
 * requests waited for it, when it returns 0.
 *
 * Errors: members that call different things (op, count, root, reduction, element
 * size) fail the run with a mismatch report naming each device and its call; waits that
 * can never finish fail it with a deadlock report naming every blocked device, its op
 * and the peers it waits for. */
#ifndef EMU_COLL_H
#define EMU_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"

struct emu_dev;
struct emu_group;
struct coll_req;

enum coll_redop { COLL_SUM, COLL_MAX };

/* Blocking calls: 0, or a negative enum emu_err. In dry-run, buffers may be NULL. */
int coll_send(struct emu_dev *d, int peer, const float *buf, size_t count);
int coll_recv(struct emu_dev *d, int peer, float *buf, size_t count);
int coll_broadcast(struct emu_dev *d, struct emu_group *g, float *buf, size_t count, int root);
int coll_reduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		size_t count, enum coll_redop op, int root);
int coll_all_reduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		    size_t count, enum coll_redop op);
/* send holds n * recv_count elements; member r receives chunk r. */
int coll_reduce_scatter(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
			size_t recv_count, enum coll_redop op);
/* recv holds n * send_count elements: member i's send at offset i * send_count. */
int coll_all_gather(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		    size_t send_count);
/* send and recv hold n blocks of count: block j of send goes to member j, and arrives as
 * block i (the sender's rank) of its recv. */
int coll_all_to_all(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		    size_t count);
/* send_counts[j] elements go to member j, packed in rank order in send;
 * recv_counts[i] elements come from member i, packed in rank order in recv. */
int coll_all_to_all_v(struct emu_dev *d, struct emu_group *g, const float *send,
		      const size_t *send_counts, float *recv, const size_t *recv_counts);

/* Posted forms: *req is set on success and must be passed to coll_wait exactly once. */
int coll_isend(struct emu_dev *d, int peer, const float *buf, size_t count, struct coll_req **req);
int coll_irecv(struct emu_dev *d, int peer, float *buf, size_t count, struct coll_req **req);
int coll_iall_reduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		     size_t count, enum coll_redop op, struct coll_req **req);
int coll_ireduce_scatter(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
			 size_t recv_count, enum coll_redop op, struct coll_req **req);
int coll_iall_gather(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		     size_t send_count, struct coll_req **req);
int coll_iall_to_all(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		     size_t count, struct coll_req **req);

int coll_ibroadcast(struct emu_dev *d, struct emu_group *g, float *buf, size_t count, int root,
		    struct coll_req **req);
int coll_ireduce(struct emu_dev *d, struct emu_group *g, const float *send, float *recv,
		 size_t count, enum coll_redop op, int root, struct coll_req **req);
int coll_iall_to_all_v(struct emu_dev *d, struct emu_group *g, const float *send,
		       const size_t *send_counts, float *recv, const size_t *recv_counts,
		       struct coll_req **req);

/* Waits for req's data, makes the compute stream wait for its end, and frees req. */
int coll_wait(struct emu_dev *d, struct coll_req *req);

/* The stream d's later collectives run on: EMU_STREAM_COMM (the default) or
 * EMU_STREAM_COMM2. Returns the previous one. */
enum emu_stream coll_use_stream(struct emu_dev *d, enum emu_stream s);

/* The SMs d's later collectives take from the compute beside them (the SM share, under
 * the calibrated model), as a library that runs its kernels on a set number of SMs does
 * (Transformer Engine's userbuffers, num_sm); 0, each run's start: NCCL's channels (see
 * coll_channels); at most the preset's SMs less one. Only the compute beside feels it:
 * the collective's time is the link's whatever its SMs. Every member of a collective must
 * give the same. Returns the previous number. */
int coll_set_ctas(struct emu_dev *d, int ctas);

/* Whether d's later sends and receives run on its copy engines' streams (CE_SEND, CE_RECV)
 * rather than SEND and RECV: transfers beside NCCL's, as Transformer Engine's userbuffers
 * rings copy (cudaMemcpy by the copy engines), the same link's time; no SM share either
 * way. 0 at each run's start. Returns the previous setting. */
int coll_use_copy_engines(struct emu_dev *d, int on);

/* Whether d's later sends wait for their receivers (a rendezvous) rather than leave at
 * once (eager, the default; see above): such a send starts when both its sender and its
 * receiver have posted it, the later of the two, and lasts alpha + S/beta; the sender's
 * wait returns at its end, as the receiver's does. So a sender that waits on its send at
 * once waits for the peer to get there and for the transfer: NCCL's send of a message
 * larger than its buffers, and what Megatron-LM's pipeline P2P makes of every send
 * (batch_isend_irecv, the requests waited, then torch.cuda.synchronize). The data still
 * leaves as it is posted. 0 at each run's start. Returns the previous setting. */
int coll_set_rendezvous(struct emu_dev *d, int on);

/* Whether d's later sends and receives are one group (NCCL's ncclGroupStart and
 * ncclGroupEnd, as PyTorch's batch_isend_irecv posts a batch): a post returns without
 * waiting for the end of the op before it on its stream, so a group's sends to two peers
 * (or receives) wait for neither peer before the other, and each starts no earlier than
 * the group's previous op on its stream would have ended from its own start (the
 * device's way out, or in, shared one transfer after another). Outside its group stream
 * order holds: the group's first op on a stream starts after the ops before it there,
 * an op after the group after all of the group's; the stream's time read in the group is
 * before the group's ops (NCCL launches a group at its end), read after it past them
 * all. 0 at each run's start. Returns the previous setting. */
int coll_set_group(struct emu_dev *d, int on);

/* The NCCL communicator d's later sends and receives run on, by its size: ranks members
 * over nodes nodes. Under the calibrated model a link that models NCCL's send channels
 * (topo.h, p2p_ch_bw) carries a send at most at the bandwidth of the channels NCCL
 * splits it over, which the communicator's size and the message's decide
 * (coll_p2p_channels): among 8 GPUs of an H100 node a send of 64 MiB runs on 4 of its 32
 * channels, at most 84 GB/s; on a communicator over nodes every send on 4 at most. ranks 0,
 * each run's start: none, a copy at the link's rate (as Transformer Engine's
 * userbuffers). A send's time is its sender's; a grouped receive's turn in its group
 * (coll_set_group) its own: set it for both. Returns the previous one. */
struct coll_p2p_comm {
	int ranks, nodes;
};
struct coll_p2p_comm coll_set_p2p_comm(struct emu_dev *d, struct coll_p2p_comm comm);
/* The communicator of the n devices devs (global ids; a pair's: d's own and its peer's). */
struct coll_p2p_comm coll_comm_of(const struct emu_dev *d, const int *devs, int n);
/* The communicator of g's members. */
struct coll_p2p_comm coll_comm_of_group(const struct emu_dev *d, const struct emu_group *g);
/* The channels NCCL splits a send of S bytes over on comm, whose nodes' NICs run at
 * nic_bw bytes a second each, and the chunk a channel moves it in (emu/coll_p2p.c). */
int coll_p2p_channels(const struct coll_p2p_comm *comm, uint64_t S, uint64_t nic_bw);
uint64_t coll_p2p_chunk(const struct coll_p2p_comm *comm);

/* Bytes per element charged on the wire for d's later calls (default 4: fp32; 2 models
 * 16-bit communication). Data still moves as float. Returns the previous setting. */
int coll_set_wire_bytes(struct emu_dev *d, int bytes);

/* Statistics of d's last run, by op name ("all-reduce", ...): calls, message bytes and
 * modelled time; and the bytes d put on each link class (enum topo_link_class). */
struct coll_stats {
	uint64_t calls;
	uint64_t bytes;
	int64_t time_ns;
};
int coll_stats_get(const struct emu_dev *d, const char *op_name, struct coll_stats *out);
uint64_t coll_link_bytes(const struct emu_dev *d, int link_class);

/* A traffic tag: the caller's label of whose traffic d's later calls are (a strategy's),
 * 0 to COLL_NTAGS - 1, 0 at the start of each run. The statistics above count every call;
 * coll_stats_tag_get counts those posted under tag. coll_set_tag returns the previous
 * tag. */
#define COLL_NTAGS 4
int coll_set_tag(struct emu_dev *d, int tag);
int coll_stats_tag_get(const struct emu_dev *d, int tag, const char *op_name,
		       struct coll_stats *out);
/* Exposed communication of d's run: the time its compute stream waited in coll_wait (or
 * a blocking call) while the op waited for moved data, from the op's start (when its last
 * member arrived: waiting for peers is not counted) to its end. */
int64_t coll_exposed_ns(const struct emu_dev *d);

/* The bytes d put on links (every class) in calls posted under tag. */
uint64_t coll_link_bytes_tag(const struct emu_dev *d, int tag);

/* The channels (CTAs, an SM each) NCCL runs a collective of bytes in all on over link l,
 * the SM share's (emu/topo.c): the link's ctas, fewer below ctas x 32 KiB, one a 32 KiB
 * (NCCL's enqueue.cc: a channel for every 512 threads x 64 bytes of the message). */
int coll_channels(const struct topo_link *l, uint64_t bytes);

#endif
