/* cluster: a GPU cluster inside one process. Each virtual GPU ("device") is a line of
 * execution of its own: a user-level context on a pool of host threads (a thread a core),
 * or an OS thread (emu_config.workers). emu_cluster_run() runs the same function on each
 * (SPMD, as torchrun does), waits for them all and returns the first error with a
 * report.
 *
 *     struct emu_config cfg;
 *     emu_config_default(&cfg, "dgx-a100");   // 1 node x 8 A100, NVLink, IB
 *     struct emu_cluster *c = emu_cluster_new(&cfg);
 *     if (emu_cluster_run(c, my_device_fn, my_arg))
 *             fputs(emu_cluster_report(c), stderr);
 *     emu_cluster_free(c);
 *
 * A device function receives its struct emu_dev and calls mem_* (memory accounting),
 * emu_compute (virtual time for math) and coll_* (communication) on it. Those calls
 * return 0 or a negative enum emu_err; on an error the device function should return
 * it. Nothing here reads the wall clock to decide anything: the same function and
 * config give the same results, virtual times and traces on every run. */
#ifndef EMU_CLUSTER_H
#define EMU_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "topo.h"

struct emu_cluster;
struct emu_dev;
struct emu_group;

enum emu_err {
	EMU_OK = 0,
	EMU_EOOM = -1,      /* a device went over its memory cap */
	EMU_EMISMATCH = -2, /* members of a collective called different things */
	EMU_EDEADLOCK = -3, /* every live device waits on another */
	EMU_EABORTED = -4,  /* another device failed first: stop and return */
	EMU_EDEVICE = -5,   /* the device function reported a failure (emu_dev_fail) */
	EMU_EINVAL = -6,    /* a device called an emu function with a bad argument */
};

/* The streams of a device, each with its own virtual time cursor. Collectives run on
 * COMM, or on COMM2 for a second process group that should not queue behind the first
 * (data-parallel gradient buckets beside tensor-parallel all-reduces, as frameworks give
 * each NCCL communicator its own stream; coll_use_stream); sends run on SEND and receives
 * on RECV, so a send never waits behind a receive, or on CE_SEND and CE_RECV, the copy
 * engines' (coll_use_copy_engines), beside NCCL's. */
enum emu_stream {
	EMU_STREAM_COMPUTE,
	EMU_STREAM_COMM,
	EMU_STREAM_SEND,
	EMU_STREAM_RECV,
	EMU_STREAM_COMM2,
	EMU_STREAM_CE_SEND,
	EMU_STREAM_CE_RECV,
	EMU_NSTREAMS
};

/* How virtual time is charged (clock.h): the roofline of the data sheets, or the model
 * calibrated against measurements (emu_config_default's). */
enum emu_cost { EMU_COST_ROOFLINE, EMU_COST_CALIBRATED };

/* A slowdown injected into a run (pemu's --inject-fault): device dev's kernels last x
 * times as long, or (dev -1) every collective and message of a group with a member on
 * node lasts x times as long (the largest factor of its members' nodes). */
struct emu_slow {
	int dev, node;
	double x;
};
#define EMU_MAX_SLOW 16

struct emu_config {
	struct topo topo;   /* the hardware */
	enum emu_cost cost; /* the cost model */
	int nslow;          /* slowdowns injected */
	struct emu_slow slow[EMU_MAX_SLOW];
	int ndev;          /* devices to start: the first ndev of the topology */
	int dry_run;       /* 1: no data, only shapes, time and memory accounting */
	uint64_t mem_cap;  /* bytes per device; 0: the GPU's HBM size */
	double pace;       /* >0: wall clock follows virtual clock * pace (a demo aid) */
	int trace;         /* 1: record every op for trace_write_json / trace_timeline */
	int trace_devices; /* >0: the trace keeps devices 0 .. trace_devices - 1 (a folded
			    * dry-run copies its representatives' ops to those only, and
			    * trace_write_json writes those); 0: every device */
	/* Host threads that run the devices, each device a user-level context on them: 0
	 * (the default) one per online core in execute mode and one in dry-run, N > 0 that
	 * many (never more than the devices that run); -1 one OS thread per device
	 * instead, as pemu ran before (for comparisons). Host speed only: results are the
	 * same whatever it is. */
	int workers;
};

/* A config for preset topo_name (see topo.h) with every device of one node, the
 * calibrated cost model, execute mode, the GPU's memory as cap, no pacing, no trace. -1
 * if the preset is unknown. */
int emu_config_default(struct emu_config *cfg, const char *topo_name);

/* A new cluster. cfg is copied. Dies on host failure; config errors are the caller's to
 * check first (emu_config_check). */
struct emu_cluster *emu_cluster_new(const struct emu_config *cfg);
void emu_cluster_free(struct emu_cluster *c);

/* Why cfg cannot run, as one line into buf, or 0 if it can. */
int emu_config_check(const struct emu_config *cfg, char *buf, size_t n);

/* The longest link latency a configuration may give (emu_config_check), so that (n - 1)
 * latencies of a collective stay far inside the clock's horizon: 1000 s. */
#define EMU_LAT_MAX INT64_C(1000000000000)

typedef int (*emu_dev_fn)(struct emu_dev *d, void *arg);

/* Runs fn on every device (as emu_config.workers says) and waits for them all. Returns 0, or the
 * run's error (enum emu_err) with its report in emu_cluster_report(). Every device's
 * memory is released before it returns, error or not; statistics and the trace stay
 * until the next run or emu_cluster_free. */
int emu_cluster_run(struct emu_cluster *c, emu_dev_fn fn, void *arg);

/* A fault plan, for tests that verification catches a broken strategy: in the runs that
 * follow, every device leaves out its nth call (counted from 0 on each device, over all
 * its groups, posted or blocking) of the group collective named op ("all-reduce",
 * "all-gather", ... as coll.h and the reports name them): nothing moves and no time
 * passes, as if the strategy had forgotten the call; a posted one gives a NULL request,
 * which coll_wait takes. op "send" loses the data of every device's nth send instead: it
 * takes its time and its receive completes, but the receiver's buffer keeps what it
 * held. Set it between runs, never during one; a fault that a group's
 * members must agree on needs them to make the same calls. op NULL clears the plan. 0, or
 * -1 if op names no collective or nth < 0. */
int emu_cluster_set_fault(struct emu_cluster *c, const char *op, int nth);

/* Dry-run folding: devices that would do exactly what another device does are not run.
 * rep[i] is the device whose run stands for device i (rep[i] == i: device i runs; a
 * representative represents itself). In a collective on a group some of whose members
 * run, a member that does not makes its representative's call on that group at the same
 * virtual time, so its representative must be a member too (else the call fails with
 * EMU_EINVAL); groups none of whose members run are never called. When the run ends, a
 * device that did not run takes its representative's statistics, stream times, FLOPs,
 * memory peaks and trace (with point-to-point flows shifted by the difference of their
 * ids, the two ends alike, as a mesh fold shifts them). That is exact only when the
 * devices are symmetric: the same calls on the same shapes, over groups of the same
 * topology; proving it is the caller's part. Set it between runs; rep NULL clears it.
 * 0, or -1 in execute mode or if rep is not a plan (an id out of range, or a
 * representative that does not represent itself). */
int emu_cluster_set_fold(struct emu_cluster *c, const int *rep);
/* The devices whose function runs under the plan: every device without one. */
int emu_cluster_devices_run(const struct emu_cluster *c);

/* The last run's error report ("" if none). Owned by the cluster. */
const char *emu_cluster_report(const struct emu_cluster *c);
/* The last run's error's name: the kind its device gave (emu_dev_fail_as; the clock's
 * horizon is "clock horizon"), else emu_err_name of it ("ok" if none). */
const char *emu_cluster_err_kind(const struct emu_cluster *c);
int64_t emu_cluster_wall_ns(const struct emu_cluster *c);
const struct emu_config *emu_cluster_config(const struct emu_cluster *c);
struct emu_dev *emu_cluster_dev(struct emu_cluster *c, int id);

/* The device's global id (0..ndev-1), and the device count. */
int emu_dev_id(const struct emu_dev *d);
int emu_dev_count(const struct emu_dev *d);
int emu_dev_dry_run(const struct emu_dev *d);
const struct topo *emu_dev_topo(const struct emu_dev *d);

/* The device dies (a fault injected): it takes no further part, and its function must
 * return right after (its posted requests are dropped). The peers that need it block,
 * and the run fails with EMU_EDEVICE and a report naming it, why (printf format) and
 * what every blocked device waits for; a run whose other devices finish without it
 * fails too. 0. */
int emu_dev_die(struct emu_dev *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Fails this device with a report (printf format); returns EMU_EDEVICE for the device
 * function to return. Wakes every device that waits. */
int emu_dev_fail(struct emu_dev *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* emu_dev_fail, the failure named kind ("training diverged": a string that outlives the
 * cluster) where emu_cluster_err_kind names the run's error. */
int emu_dev_fail_as(struct emu_dev *d, const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* 0, or EMU_EABORTED once a device of the run has failed, this one included (a kernel
 * that took the clock past its horizon, say: kernels are charged without an error to
 * return). Collectives check it at every call; a device function that may run a step of
 * compute alone checks it after each step, and returns what it says. */
int emu_dev_check(struct emu_dev *d);

/* The group of the n devices devs (global ids, in group-rank order), shared by every
 * member that asks for the same list. NULL (and the device failed with EMU_EINVAL) if
 * d is not a member, an id is out of range or repeated. Valid until emu_cluster_free. */
struct emu_group *emu_group_get(struct emu_dev *d, const int *devs, int n);
/* All devices, in id order. */
struct emu_group *emu_world(struct emu_dev *d);
int emu_group_size(const struct emu_group *g);
/* The device id of group rank i (0 <= i < size). */
int emu_group_dev(const struct emu_group *g, int i);
/* The group rank of device d in g, or -1 if not a member. */
int emu_group_rank(const struct emu_group *g, const struct emu_dev *d);

/* Waits until every device has reached a barrier: host-side only, no virtual time. For
 * benchmarks that time the host. */
int emu_barrier(struct emu_dev *d);

const char *emu_err_name(int err);

#endif
