/* internal: the structures the emu/ modules share with each other and with nobody else.
 * Code above emu/ sees struct emu_dev, struct emu_cluster and struct emu_group only as
 * opaque types through cluster.h, mem.h, clock.h, coll.h and trace.h.
 *
 * How devices meet. Every communication is an "op" on a "channel": a group's collective,
 * or one direction of a point-to-point pair. The k-th call a member makes on a channel
 * is matched with the k-th call of every other member (as NCCL matches calls on a
 * communicator). The last member to arrive fixes the op's virtual start and end time,
 * then the op's data movement is cut into tasks that any member waiting on the op helps
 * to run, so completion never depends on a member that is busy elsewhere.
 *
 * How devices wait. A waiting device registers as blocked and parks: its context is put
 * aside and its worker runs another device (fiber.c), until the arrival that completes
 * what it waits for queues it again. (With an OS thread a device, it first yields its
 * core a few times, then sleeps on its own condition variable.) All arrivals and
 * registrations happen under the cluster lock, so the lock holder always knows how many
 * live devices are blocked: when that is all of them, no device can make progress, and
 * that is a deadlock, reported at once. */
#ifndef EMU_INTERNAL_H
#define EMU_INTERNAL_H

#include <pthread.h>
#include <ucontext.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cluster.h"
#include "coll.h"
#include "mem.h"
#include "topo.h"
#include "trace.h"
#include "util.h"

enum op_kind {
	OP_BARRIER, /* host-only rendezvous: no data, no virtual time */
	OP_SEND,
	OP_RECV,
	OP_BROADCAST,
	OP_REDUCE,
	OP_ALL_REDUCE,
	OP_REDUCE_SCATTER,
	OP_ALL_GATHER,
	OP_ALL_TO_ALL,
	OP_ALL_TO_ALL_V,
	OP_NKIND
};

enum chan_kind { CHAN_GROUP, CHAN_P2P };

/* What one member passed to a communication call. */
struct op_arg {
	enum op_kind kind;
	enum coll_redop redop;
	int root;            /* group rank of the root (broadcast, reduce) */
	size_t count;        /* elements, in the call's own convention (see coll.h) */
	const float *send;   /* NULL in dry-run */
	float *recv;         /* NULL in dry-run */
	size_t *send_counts; /* all-to-all-v: n entries, owned by the op */
	size_t *recv_counts; /* all-to-all-v: n entries, owned by the op */
	int wire_bytes;      /* bytes per element on the wire */
	int ctas;            /* the SMs its kernels take (coll_set_ctas), 0: NCCL's channels */
	int64_t t_issue;     /* virtual time at which this member's stream could start it */
	float *owned;        /* an eager send's copy of its data, owned by the op */
	int rendezvous;      /* a send that waits for its receiver (coll_set_rendezvous) */
	int grouped;         /* a send or receive of group number grouped (coll_set_group), or 0 */
	struct coll_p2p_comm p2p; /* a send's or receive's communicator (coll_set_p2p_comm) */
};

struct op {
	struct emu_group *ch; /* the channel it runs on */
	uint64_t seq;         /* the how-many-th op of the channel */
	int arrived;          /* members arrived so far (under cluster lock) */
	int mismatch;         /* members disagreed: can never complete */
	int refs;             /* members still holding it (under cluster lock) */
	struct op_arg *arg;   /* [ch->n]: arg[i] valid once has[i] */
	unsigned char *has;   /* [ch->n]: member i has arrived */
	atomic_int ready;     /* 1 once all arrived and the times below are set */
	int64_t t_start;      /* virtual start: the last member's issue time */
	int64_t t_end;        /* t_start + modelled duration */
	uint64_t bytes;       /* S of docs/formulas.md: the message size the time is for */
	int link;             /* enum topo_link_class the time was charged at */
	int hier;             /* 1 if run as the hierarchical (node-aware) algorithm */
	int nic_rings;        /* >0: run as NCCL's rings over the nodes, one per NIC, this
			       * many members a node (the calibrated model's; coll_time.c) */
	int nvls_tree;        /* >0: an all-reduce over 2 nodes run as NCCL's NVLSTree, this
			       * many members a node (the calibrated model's; coll_time.c) */
	int by_node;          /* 1: an all-to-all(-v) over nodes timed as NCCL runs it, a
			       * member's bytes for its own node on the node's links, the rest
			       * through its NIC (the calibrated model's; coll_time.c) */
	int ctas;             /* the SMs it takes from the compute beside it (the calibrated
			       * model's SM share, coll.h; 0: none) */
	int ntasks;           /* data-movement tasks (0 in dry-run) */
	atomic_int next_task; /* next task to hand out */
	atomic_int tasks_done;
	struct op *next; /* in ch->pending, ordered by seq */
};

/* A channel: a group of devices (collectives) or one direction of a pair (send/recv). */
struct emu_group {
	enum chan_kind kind;
	int n;              /* members */
	int *devs;          /* [n] global device ids, in group-rank order */
	uint64_t *seq;      /* [n] calls made so far by each member */
	struct op *pending; /* ops not yet complete in arrivals, by seq */
	int link;           /* enum topo_link_class: slowest link among members */
	int hier_nodes;     /* >1: spans this many nodes with hier_local members each ... */
	int hier_local;     /* ... evenly: the hierarchical all-reduce applies */
	int *hier_order;    /* [n]: member indices node by node, local rank order */
	/* Dry-run folding (fold.c): members that run, and for each member that does not the
	 * member index of its representative (NULL: every member runs); a member whose
	 * representative is not in the group, -1 if none. */
	int nlive;
	int *rep_member;
	int fold_bad;
	uint64_t hash;
	struct emu_group *hnext; /* hash chain */
	struct op *spare;        /* ops done with, kept for the next call (their arg and has
				  * arrays are n long): under the cluster lock */
};

/* A posted communication on one member, until waited. */
struct coll_req {
	struct op *op;
	int member;                   /* index of the device in op->ch */
	int stream;                   /* enum emu_stream the op runs on */
	int resolved;                 /* times read into the stream and the trace */
	int waited;                   /* data movement finished */
	int64_t eager_end;            /* an eager send: when its data has left (else -1) */
	int lane;                     /* the device's trace lane when it was posted */
	int tag;                      /* the device's traffic tag then (coll_set_tag) */
	int blocking;                 /* a blocking call's: waited for as soon as posted */
	int64_t post_t, post_busy;    /* the compute stream's cursor and busy time at the post
				       * (the SM share, coll_wait) */
	int margin;                   /* the device's SM margin then (emu_set_sm_margin) */
	int grouped;                  /* its group's number, until resolved (coll_set_group) */
	struct coll_req *next, *prev; /* the device's outstanding requests, in post order */
};

struct emu_stream_state {
	int64_t t;                /* virtual time cursor, ns */
	struct coll_req *pending; /* op issued on this stream whose end is not known yet */
	int grouped;              /* ops of a group on it whose end is not known yet */
	int64_t group_t;          /* a group's next op here starts no earlier (coll_set_group) */
};

struct dev_stats {
	uint64_t ops[OP_NKIND];                /* calls */
	uint64_t bytes[OP_NKIND];              /* message bytes S, summed */
	int64_t time_ns[OP_NKIND];             /* modelled duration, summed */
	uint64_t link_bytes[TOPO_LINK_NCLASS]; /* bytes this device put on each link class */
	struct {                               /* the same by traffic tag (coll_set_tag) */
		uint64_t ops, bytes;
		int64_t time_ns;
	} tagged[COLL_NTAGS][OP_NKIND];
	uint64_t tagged_link[COLL_NTAGS]; /* bytes on links (every class) by traffic tag */
	int64_t exposed_ns; /* the compute stream idle while an op it waits for moves data */
};

struct mem_state {
	uint64_t cap;                 /* bytes */
	uint64_t cur[MEM_NCAT];       /* in use now, by category */
	uint64_t peak[MEM_NCAT];      /* highest cur[cat] so far */
	uint64_t cur_total;           /* sum of cur */
	uint64_t peak_total;          /* highest cur_total so far */
	uint64_t host_cur, host_peak; /* host bytes the blocks hold (execute) or would */
	struct mem_block *live;       /* live blocks, newest first */
	struct mem_block *spare;      /* freed block records, for reuse (not under ASan) */
};

/* One op on one stream, in virtual time. */
struct trace_ev {
	int64_t t0, t1;   /* start and end, ns */
	uint64_t bytes;   /* message bytes (communication), or the HBM bytes of a kernel */
	double flops;     /* a kernel's FLOPs (compute), else 0 */
	uint64_t flow;    /* send->recv flow id, 0 if none */
	char name[32];    /* "all-reduce", "matmul", ... */
	uint8_t stream;   /* enum emu_stream */
	uint8_t flow_end; /* 1: this is the receiving end of flow */
	uint8_t lane;     /* the device's lane (trace_set_lane) when it ran or was posted */
	uint8_t posted;   /* communication: a posted call's (coll_i*), not a blocking one's */
	uint8_t tag;      /* communication: its traffic tag (coll_set_tag) */
	char sym;         /* letter for the ASCII timeline */
};

/* The memory of a device at one moment, for the counter tracks. */
struct trace_mem {
	int64_t t;
	uint64_t cur[MEM_NCAT];
};

struct trace_buf {
	struct trace_ev *ev;
	size_t nev, capev;
	struct trace_mem *mem;
	size_t nmem, capmem;
};

/* A device as a user-level context (fiber.c), when the cluster runs a pool of workers. */
struct dev_fiber {
	ucontext_t ctx; /* without fiber.c's ASM_SWITCH */
	void *sp;       /* with it: the saved stack pointer */
	void *stack;    /* its lowest address (fiber.c maps them all at once) */
	size_t stack_size;
	int state;            /* fiber.c's FB_*, under c->lock */
	struct emu_dev *next; /* in the run queue */
	struct worker *w;     /* the worker running it */
	void *fake, *tsan;    /* the sanitizers' handles */
};

struct emu_dev {
	struct emu_cluster *c;
	int id;
	pthread_t thread;    /* one OS thread a device (workers -1) */
	pthread_cond_t cond; /* signalled under c->lock when this device may go on */
	struct dev_fiber fb; /* else its context on the pool */

	/* Waiting state, under c->lock. */
	int blocked;        /* counted in c->nblocked */
	int finished;       /* the device function has returned */
	struct op *wait_op; /* what the blocked device waits for */
	int wait_member;    /* its index in wait_op->ch */

	struct emu_stream_state stream[EMU_NSTREAMS];
	struct coll_req *reqs; /* outstanding requests, oldest first */
	struct coll_req *reqs_tail;
	struct coll_req *req_spare;  /* requests waited, kept for the next post */
	int wire_bytes;              /* bytes per element charged on the wire (default 4) */
	enum emu_stream coll_stream; /* where group collectives run (coll_use_stream) */
	double flops;                /* FLOPs charged by emu_compute this run */
	int64_t compute_ns;          /* virtual time charged by emu_compute this run */

	struct mem_state mem;
	struct trace_buf trace;
	int lane;         /* whose ops the device records now (trace_set_lane), 0 each run */
	int tag;          /* the traffic tag of its calls now (coll_set_tag), 0 each run */
	int clock_failed; /* it passed the clock's horizon (emu_time_check), 0 each run */
	struct dev_stats stats;

	int err;                     /* this device's own error (enum emu_err), 0 if none */
	char *err_report;            /* its report, malloc'd */
	const char *err_kind;        /* its name where the failure gave one (emu_dev_fail_as) */
	int64_t wall_t0;             /* wall clock at the start of the run, for pacing */
	int fault_calls;             /* calls of the fault plan's collective so far this run */
	char *dead;                  /* why it died (emu_dev_die), malloc'd, or NULL */
	double slow;                 /* its kernels' slowdown (emu_config.slow), 1 if none */
	struct gemm_memo *gemm_memo; /* [GEMM_MEMO] clock.c's GEMM times, or NULL; each run */
	int sm_margin; /* the SMs its GEMMs leave to communication (emu_set_sm_margin), 0
			* each run */
	int p2p_rdv;   /* its sends wait for their receivers (coll_set_rendezvous) */
	int p2p_group; /* the number of the group its sends and receives run in (coll_set_group),
			* 0: none; 0 each run */
	int groups;    /* groups so far this run */
	int p2p_ce;    /* its sends and receives on the copy engines' streams
			* (coll_use_copy_engines), 0 each run */
	int coll_ctas; /* the SMs its collectives take (coll_set_ctas), 0 each run */
	struct coll_p2p_comm p2p_comm; /* its sends' communicator (coll_set_p2p_comm), none each
					* run */
};

struct emu_cluster {
	struct emu_config cfg;
	struct emu_dev *devs; /* [cfg.ndev] */

	pthread_mutex_t lock; /* arrivals, channels, waiting state, errors */
	int nlive;            /* devices whose function has not returned */
	int nblocked;         /* live devices registered as blocked */
	atomic_int failed;    /* an error stopped the run: every wait returns */
	int err;              /* the run's error (enum emu_err) */
	char *err_report;     /* its report */
	const char *err_kind; /* its name where the failure gave one, else NULL */
	int err_dev;          /* device whose own error it is, -1 for cluster-level */
	double *node_slow;    /* [nodes] the links' slowdown of each node (emu_config.slow) */

	struct emu_group **chan_tab; /* hash table of channels */
	size_t chan_nbuckets;
	size_t nchans;
	struct emu_group *world;

	emu_dev_fn fn;
	void *fn_arg;
	int64_t wall_ns; /* wall time of the last run */
	int fault_kind;  /* the fault plan (emu_cluster_set_fault): enum op_kind, -1 none */
	int fault_nth;   /* the call each device leaves out */
	int *rep;        /* dry-run folding: [cfg.ndev] each device's representative, or NULL */
	int nrun;        /* devices whose function runs */

	/* The pool (fiber.c), under lock: the shared queue of ready devices (each worker has
	 * its own too), idle workers, devices finished. */
	int pool; /* this run's devices are contexts on workers */
	struct emu_dev *rq_head, *rq_tail;
	atomic_int rq_n; /* its length, also read without the lock */
	pthread_cond_t rq_cond;
	int rq_idle;
	atomic_int nexited;
	struct worker *workers;
	int nworkers;
};

/* chan.c: channels. The channel of kind over devs, made on first use (under c->lock);
 * the one from src to dst. */
struct emu_group *chan_get_locked(struct emu_cluster *c, enum chan_kind kind, const int *devs,
				  int n);
struct emu_group *chan_p2p(struct emu_dev *d, int src, int dst);
/* "{0..7}" or "{2,0,1}" (the first 16 members, then the count). */
void chan_describe(struct emu_str *s, const struct emu_group *ch);

/* cluster.c: rendezvous and waiting. */
/* Adds d's call arg as member of the next op on ch; sets *out (with a reference). */
int rdv_arrive(struct emu_dev *d, struct emu_group *ch, int member, const struct op_arg *arg,
	       struct op **out);
void rdv_release(struct emu_dev *d, struct op *op);
int dev_wait_ready(struct emu_dev *d, struct op *op, int member);
void dev_wait_tasks(struct emu_dev *d, struct op *op);
/* Lets a blocked device go on: its thread's condition, or back on a run queue (that of
 * the worker running device by, which woke it, if any). */
void dev_wake_locked(struct emu_cluster *c, struct emu_dev *d, const struct emu_dev *by);
/* Runs d's function and what follows it (a thread's or a context's body). */
void *dev_main(void *d);

/* fail.c: errors and their reports. */
/* Records err (report is taken over) and wakes every device (the lock held). */
void cluster_fail_locked(struct emu_cluster *c, int err, int dev, char *report);
/* Fails d with err and a report (printf format, prefixed "device N: "); returns err. */
int dev_fail(struct emu_dev *d, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* dev_fail, the failure named kind (a static string) rather than emu_err_name(err). */
int dev_fail_as(struct emu_dev *d, int err, const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* EMU_EABORTED once any device has failed, else 0. */
int dev_check_failed(struct emu_dev *d);
/* "collective mismatch: ..." for op, its members' calls side by side (malloc'd). */
char *fail_mismatch_report(const struct op *op);
/* Whether a device died (emu_dev_die); appends "device D died: why" for each. */
int fail_any_dead(const struct emu_cluster *c);
int fail_describe_dead(struct emu_str *s, const struct emu_cluster *c);
/* With every live device blocked, fails the run with the mismatch or deadlock report. */
void fail_check_deadlock_locked(struct emu_cluster *c);

/* coll_wait, under the calibrated model (coll_time.c; coll.h, "the SM share"): the
 * compute d ran beside req's op, since it was posted and while the op moved data, had
 * ctas of the SMs fewer, and takes sms / (sms - ctas) as long. Known only now, it is
 * charged now: the cursor moves on by the stretch, as if those kernels had ended later
 * (the wait may absorb it). The overlap is min(the compute since the post, the part of
 * the op's span before the cursor): exact when the compute since the post ran back to
 * back through the span. None for an op posted under an SM margin (emu_set_sm_margin):
 * its kernels took the SMs the GEMMs left. */
void coll_sm_share(struct emu_dev *d, const struct coll_req *req);

/* clock.c: charges dur ns to d's compute stream as compute that ran slower than charged
 * (the SM share, coll_wait): no FLOPs, and the injected slowdown not again. */
void clock_stretch(struct emu_dev *d, const char *name, int64_t dur);
/* Fails d once if t reached the clock's horizon (clock.h) in what. 0 or the error. */
int emu_time_check(struct emu_dev *d, int64_t t, const char *what);

/* fiber.c: the run on a pool of workers; parking a device (under c->lock, which it
 * holds again when woken) and waking one (onto the queue of the worker running device
 * by, or the shared one); the workers a run gets. */
void fiber_run(struct emu_cluster *c);
void fiber_park_locked(struct emu_dev *d);
void fiber_wake_locked(struct emu_cluster *c, struct emu_dev *d, const struct emu_dev *by);
int fiber_workers(const struct emu_cluster *c);

/* Elements per data task: big enough that handing out a task costs nothing, small enough
 * that two cores share a 64 MiB all-reduce evenly. */
#define TASK_ELEMS (1u << 16)

static inline size_t coll_sum_counts(const size_t *v, int n)
{
	size_t s = 0;

	for (int i = 0; i < n; i++)
		s += v[i];
	return s;
}

/* coll_time.c: what the last arrival does (nonzero: the members' calls do not fit
 * together), and a send's time, its fixed cost and slowdown included. */
int coll_op_resolve(struct emu_cluster *c, struct op *op);
int64_t coll_send_ns(const struct emu_cluster *c, const struct emu_group *ch,
		     const struct op_arg *a);
/* coll_arg.c: bytes member m of an all-to-all-v sends to (recv: receives from) the
 * other members. */
uint64_t coll_a2av_cross(const struct op *op, int m, int recv);
/* Bytes member m of an all-to-all(-v) sends to (recv: receives from) the other members of
 * its node, *local, and the members on other nodes, *remote. */
void coll_a2a_split(const struct emu_cluster *c, const struct op *op, int m, int recv,
		    uint64_t *local, uint64_t *remote);
/* coll.c: reading a finished op's times into a stream; an op kind's name. */
int coll_req_resolve(struct emu_dev *d, struct coll_req *r);
/* Resolves every op on d's stream s whose end is not known yet (its pending op, and a
 * group's) but those of group number keep (0: none), so that its cursor is past them
 * (stream order). 0 or an error. */
int coll_stream_settle(struct emu_dev *d, int s, int keep);
/* A request done with: kept on d for its next post (freed under ASan, which then sees a
 * use after free). */
void coll_req_put(struct emu_dev *d, struct coll_req *r);
const char *coll_op_name(enum op_kind k);

/* coll_arg.c: whether two members' calls differ, and a call described for a report. */
int coll_mismatch(const struct op_arg *a, const struct op_arg *b);
void coll_describe_arg(struct emu_str *s, const struct emu_group *ch, const struct op_arg *a);

/* coll_data.c: runs task number task of op's data movement. */
void coll_op_run_task(struct op *op, int task);

/* stats.c: counts a completed op of kind k on d, its bytes and modelled time, under
 * traffic tag. */
void stats_add(struct emu_dev *d, enum op_kind k, int tag, uint64_t bytes, int64_t ns);

/* fold.c: a channel's folding from the cluster's plan; the members that do not run
 * filled in from their representatives once the others have arrived; after a run, their
 * results copied from their representatives. */
void fold_chan_init(const struct emu_cluster *c, struct emu_group *ch);
void fold_fill_mirrors(struct op *op);
void fold_copy_results(struct emu_cluster *c);

/* mem.c */
void mem_release_all(struct emu_dev *d);

/* trace.c: recording (no-ops when the config has trace off). */
void trace_add_op(struct emu_dev *d, const struct trace_ev *ev);
void trace_add_mem(struct emu_dev *d);
void trace_reset(struct emu_dev *d);

#endif
