/* pipe/stage: one device's pipeline stage, the model side of sched_exec (pipe/schedule.h):
 * a list's actions run as a rank's model parts (par/layer.h's plain executor over a
 * block's layers, or pipe/helix.c's blocks), their activations kept per (micro-batch,
 * block), what crosses to the neighbouring stages sent and received. What this module
 * knows of the model is par/layer.h's stage interface; what it knows of the run (where
 * batches come from, what is recorded) comes through pipe_io. */
#ifndef PEMU_PIPE_STAGE_H
#define PEMU_PIPE_STAGE_H

#include <stdint.h>

#include "par/layer.h"
#include "pipe/schedule.h"

/* What the stage asks of the run. */
struct pipe_io {
	/* Micro-batch mb (0 .. local - 1 of this step)'s tokens and targets (B, T) into tok
	 * and tgt when need (a stage with the embeddings or the loss); returns the
	 * micro-batch's index among the whole run's. */
	uint64_t (*batch)(void *ctx, int mb, int need, int *tok, int *tgt);
	/* Micro-batch g's forward through a->la is done (the run records its routing). */
	void (*forwarded)(void *ctx, uint64_t g, const struct par_acts *a);
	/* Told on (1) before this stage's last action of a step that makes a block's
	 * weight gradients final (W or BW; the schedule's last micro-batch through the
	 * block, which HelixPipe's rotation may not make micro-batch m - 1), and off (0)
	 * after it: the run's data-parallel buckets may then be posted as that backward
	 * finishes them (Megatron's --overlap-grad-reduce with a pipeline, whose gradient
	 * sync is on in each model chunk's last micro-batch alone). Or NULL. */
	void (*last_backward)(void *ctx, int on);
	void *ctx;
};

struct pipe_stage {
	const struct sched *sc;
	int stage;           /* this stage, 0 .. sc->p - 1 */
	struct par_model *m; /* this rank's part of the model */
	struct emu_dev *d;
	const int *dev;   /* [p]: the device of each stage of this pipeline */
	int local, accum; /* micro-batches a step here, and in the global batch */
	int Lb;           /* layers a block (not helix) */
	struct pipe_io io;
	double loss;    /* this step's share of the loss, so far */
	int *tok, *tgt; /* (B, T): the batch being loaded */
	/* [nacts = local nb'] each (micro-batch, block)'s activations, from the first action
	 * that needs them to pipe_stage_acts_free, else NULL (a step of many micro-batches
	 * holds few at a time) */
	struct par_acts **acts;
	int nacts;
	/* [local v nsub]: per chunk and sub-batch (par/overlap.h; nsub = 1 without): */
	struct coll_req **act_req;  /* the send of its output */
	struct tensor *din;         /* the gradient of its input, until sent */
	struct coll_req **grad_req; /* that send */
	struct coll_req **reqs;     /* helix: the sends to wait for */
	int nreq, maxreq;
	int *last_mb; /* [nb] the micro-batch of this stage's last action that makes block j's
		       * weight gradients final (W or BW), or -1 */
	/* Megatron-LM's scatter/gather of 2021 (not helix): each of the t tensor-parallel
	 * ranks, whose messages are the same (no sequence parallelism), sends only its 1/t
	 * of each, and the receivers all-gather them over tp (where t divides the message;
	 * set after pipe_stage_init) */
	int scatter;
	/* with p2p_sync on the interleaved schedule: the receives of the batch open, posted
	 * (chunk_post_recv) and completed by its sync, with scatter into this rank's part
	 * to all-gather into dst then; [2 nsub] */
	struct pipe_recv {
		struct coll_req *req;
		struct tensor part;
		float *dst;
	} * pend;
	int npend;
};

/* The NCCL communicator (emu/coll.h) of ps's sends to stage peer. */
struct coll_p2p_comm pipe_stage_comm(const struct pipe_stage *ps, int peer);

/* The part of the model stage s of sc holds: the layers of its blocks (pipe_stage_part
 * fills held[L]) and whether it has the embeddings and the output layer. */
void pipe_stage_part(const struct sched *sc, int s, int L, unsigned char *held,
		     struct par_part *part);

/* Sets up stage s of sc on d for m (whose part is pipe_stage_part's). pipe_stage_free
 * releases it, and every activation still held. */
void pipe_stage_init(struct pipe_stage *ps, const struct sched *sc, int s, struct par_model *m,
		     struct emu_dev *d, const int *dev, int local, int accum,
		     const struct pipe_io *io);
void pipe_stage_free(struct pipe_stage *ps);

/* Entry x of ps->acts, made (empty) if it was not; and the entry freed, its activations
 * with it. */
struct par_acts *pipe_stage_acts(struct pipe_stage *ps, int x);
void pipe_stage_acts_free(struct pipe_stage *ps, int x);

/* One step's micro-batches through this stage's list; then the tied embedding's gradient
 * is summed over emb (the first and last stage: Megatron's embedding group), if not
 * NULL. ps->loss gets this stage's share of the step's loss; span as sched_exec's.
 * 0 or the first error. */
int pipe_stage_step(struct pipe_stage *ps, struct emu_group *emb, long long *span);

/* HelixPipe's callbacks (pipe/helix.c), which pipe_stage_step runs for its schedule. */
extern const struct sched_ops pipe_helix_ops;

#endif
