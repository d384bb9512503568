/* schedule: pipeline schedules as data (docs/architecture.md). A schedule is, for each of p stages,
 * the ordered list of what that stage does in one optimizer step; generators build the
 * lists of the classic schedules, sched_check proves a list valid before anything runs,
 * and sched_exec walks one stage's list on its device through callbacks, so one executor
 * serves the real model and the unit-cost model of the tests alike.
 *
 * The model is cut into p v blocks of consecutive layers. Block j lives on stage j % p as
 * that stage's model chunk j / p (v = 1 but for interleaved 1F1B), so chunk c of stage s
 * is block c p + s, as in Megatron-LM's interleaved schedule.
 *
 * Actions:
 *   F  (mb, block)        forward of the block for micro-batch mb
 *   B  (mb, block)        backward for the inputs only (zero-bubble's B)
 *   W  (mb, block)        backward for the weights only (zero-bubble's W); needs B
 *   BW (mb, block)        the whole backward, B and W in one
 *   SEND (mb, block, what, peer)   posts the block's output activations (ACT, to the
 *                        next block's stage) or the gradient of its input (GRAD, to the
 *                        previous block's stage); a send never blocks
 *   RECV (mb, block, what, peer)   waits for the block's input activations (ACT) or the
 *                        gradient of its output (GRAD)
 * Consecutive blocks on the same stage pass their data without a message.
 *
 * Sources of the orders: GPipe (Huang et al. 2019, arXiv 1811.06965): every forward, then
 * every backward, last micro-batch first. 1F1B and its interleaved form (Narayanan et
 * al. 2021, arXiv 2104.04473): stage s warms up with p - 1 - s forwards (interleaved:
 * 2 (p - 1 - s) + (v - 1) p chunk forwards), then alternates one forward and one
 * backward. ZB-H1 (Qi et al. 2024, arXiv 2401.10241): 1F1B's order with the backward
 * split in B and W, stage s deferring its first s W, so that every stage keeps p
 * micro-batches in flight (1F1B's peak) and the deferred W fill the cool-down. ZB-H2
 * (same paper) is built by a greedy list scheduler on unit costs, as the paper's own
 * scheduler builds schedules from profiled costs: each stage, whenever it is free, runs
 * a ready B first, else a ready F while fewer than 2p - 1 micro-batches are in flight
 * (from F until W), else its oldest pending W. That fills the warm-up with extra F and
 * the cool-down with W: no bubble once m >= 2p (with fewer micro-batches there is not
 * enough work to fill it, and the bubble is ZB-H1's).
 *
 * HelixPipe (Zhang et al. 2025, arXiv 2507.00394) cuts each layer at its attention and
 * places the attention by micro-batch: its lists, its blocks and its stage are
 * pipe/helix.c's.
 *
 * A stage's bubble is its idle time between its first and its last action, as the ZB
 * paper counts it: the last stage starting (p - 1) forwards after the first is a skew
 * between stages that consecutive steps overlap, not idle time inside a stage. */
#ifndef PEMU_SCHEDULE_H
#define PEMU_SCHEDULE_H

#include <stddef.h>

struct emu_dev;

enum sched_op { SCHED_F, SCHED_B, SCHED_W, SCHED_BW, SCHED_SEND, SCHED_RECV };
enum sched_msg { SCHED_ACT, SCHED_GRAD };
enum sched_kind { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1, SCHED_ZBH2, SCHED_HELIX };

struct sched_action {
	enum sched_op op;
	int mb, block;      /* the micro-batch, and the block of the model (0 .. nb-1) */
	enum sched_msg msg; /* SEND, RECV */
	int peer;           /* SEND, RECV: the other stage */
};

struct sched {
	enum sched_kind kind;
	int p, m, v;             /* stages, micro-batches, chunks a stage */
	int nb;                  /* blocks a micro-batch goes through: p v (helix: 2 p v + 1) */
	double attn_cost;        /* helix: an attention's forward against a unit's */
	int *n;                  /* [p] actions of each stage */
	int cap;                 /* room for actions in each list */
	struct sched_action **a; /* [p][n[s]] */
	int p2p_sync;            /* sched_exec runs the sends and receives as Megatron-LM's
				  * 1F1B and interleaved schedules do without overlapping
				  * them (sched_exec); 0 after sched_build */
};

/* The stage that runs block j of micro-batch mb: j % p; for helix, unit c (block 2c) on
 * stage c % p and the attention of layer l (block 2l + 1) on stage (l + 1 + mb) % p. */
int sched_stage(const struct sched *sc, int mb, int j);

/* The schedule's name as --schedule spells it, and the kind a name spells (-1 if none). */
const char *sched_name(enum sched_kind k);
int sched_kind_of(const char *name);

/* Why kind cannot run p stages, m micro-batches, v chunks a stage over L layers (one
 * line, naming the constraint), or 0. */
int sched_constraints(enum sched_kind kind, int p, int m, int v, int L, char *err, size_t n);

/* Builds the schedule (the constraints must hold). sched_free releases it. For helix
 * (built by pipe/helix.c, with HelixPipe's stage), v is the layers a stage holds (L / p)
 * and attn_cost the modelled time of an attention's forward against a parameter unit's,
 * which orders the lists. */
void sched_build(struct sched *sc, enum sched_kind kind, int p, int m, int v);
void sched_build_helix(struct sched *sc, int p, int m, int v, double attn_cost);
void sched_free(struct sched *sc);

/* An empty schedule of p stages for hand-made lists: sched_push appends to stage s.
 * sched_push_fwd appends the forward of block j of micro-batch mb to its stage's list,
 * with its input's recv and its output's send where the neighbouring block is on another
 * stage; sched_push_bwd a backward (op B or BW), with its gradient's recv and send. */
void sched_init_empty(struct sched *sc, enum sched_kind kind, int p, int m, int v);
void sched_push(struct sched *sc, int s, struct sched_action a);
void sched_push_fwd(struct sched *sc, int mb, int j);
void sched_push_bwd(struct sched *sc, int mb, int j, enum sched_op op);

/* The forwards stage s of a 1F1B, ZB-H1 or interleaved schedule runs before its first
 * backward: p - 1 - s, interleaved's 2 (p - 1 - s) + (v - 1) p chunk forwards (as
 * Megatron-Core counts them), at most all of them. */
int sched_warmup(const struct sched *sc, int s);

/* Proves sc valid: every action well formed; each (micro-batch, block) forwarded and
 * backwarded exactly once per stage that holds it, with W after its B; every send
 * matched by one recv on its peer and the reverse; every dependency (a forward's input,
 * a backward's forward and output gradient) met; and no cycle of waits, by running the
 * lists with sends that never block. 0, or -1 with the first violation in err. */
int sched_check(const struct sched *sc, char *err, size_t n);

/* Peak micro-batches in flight on stage s (forwarded, weights not yet back), in units
 * of whole micro-batches (a block counts p / nb, 1/v for interleaved). */
double sched_peak_inflight(const struct sched *sc, int s);

/* What sched_exec calls; each returns 0 or a negative enum emu_err. send posts and
 * returns; the executor calls wait_sends once the list is done, and sync, with p2p_sync,
 * after each batch of sends and receives: it waits for every send posted so far and
 * every receive posted by post_recv (which, unlike recv, returns at once: the
 * interleaved schedule's batches post theirs together). */
struct sched_ops {
	int (*fwd)(void *ctx, int mb, int block);
	int (*bwd)(void *ctx, int mb, int block, int input, int weight);
	int (*send)(void *ctx, int mb, int block, enum sched_msg what, int peer);
	int (*recv)(void *ctx, int mb, int block, enum sched_msg what, int peer);
	int (*wait_sends)(void *ctx);
	int (*sync)(void *ctx);
	int (*post_recv)(void *ctx, int mb, int block, enum sched_msg what, int peer);
};

/* Runs stage s's list on d through ops. Messages between two devices match in the order
 * they are posted, so a RECV first takes in (through ops->recv) whatever its peer's list
 * sends to this stage before the message it wants. With sc->p2p_sync (for 1F1B: ops->send
 * then posting sends that wait for their receivers, coll_set_rendezvous) each send or
 * receive is a batch of its own, but a send followed by the receive of the other kind
 * from the same peer, which are one, as Megatron-LM's 1F1B calls them
 * (p2p_communication.py: send_forward, recv_forward, send_forward_recv_backward and the
 * like, each a batch_isend_irecv, its requests waited for, then torch.cuda.synchronize):
 * a batch's send posted first, then its receive, then ops->sync, so the stage goes on
 * once its sends are over. On the interleaved schedule (p > 2) with p2p_sync, Megatron-LM's
 * batches of forward_backward_pipelining_with_interleaving without overlap_p2p_comm:
 * the first input received alone (recv_forward); after each warm-up forward its output
 * sent and the next input received (send_forward_recv_forward; the last warm-up one
 * receives the first gradient too); after each steady-state forward and backward both
 * sent and both received (send_forward_backward_recv_forward_backward); after each
 * cool-down backward its gradient sent and the next received (send_backward_recv_backward).
 * A batch receives what its peers send in theirs (Megatron's recv_prev and recv_next: the
 * first stage runs p - 1 iterations ahead of the last), ahead of the action that needs
 * it, whose RECV is then already met; its sends and receives are posted together (the
 * gradient's send, the receive from the previous stage, the output's send, the receive
 * from the next, as Megatron's _batched_p2p_ops), then ops->sync. span, if not NULL, gets [2 n[s]]:
 * each action's start and end on d's compute stream (virtual ns). 0 or the first
 * error. */
int sched_exec(const struct sched *sc, int s, struct emu_dev *d, const struct sched_ops *ops,
	       void *ctx, long long *span);

/* Draws a run of sc as the pipeline diagram on f (a FILE *): one row per stage, time
 * running right in cells of the shortest compute action, each cell F, B or W (BW is B;
 * for helix, A and a for an attention's forward and backward) with the micro-batch (and
 * chunk, for interleaved), '.' where the stage idles. span[s] is stage s's record from
 * sched_exec. At most width characters a row: a longer run is drawn in bands of rows, one
 * under another, each headed by its span of time, and every compute action shows; past
 * six bands the cell grows to fit six, and the header says that an action shorter than
 * a cell may then not show. */
void sched_draw(const struct sched *sc, long long *const *span, int width, void *f);

#endif
