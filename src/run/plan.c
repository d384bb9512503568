/* run/plan: pemu plan's search over parallel layouts; see run/plan.h. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "run/plan.h"

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run/oases_plan.h"
#include "run/run.h"
#include "util.h"

/* ------------------------------------------------------------------------------------ */
/* The space                                                                            */

#define PLAN_MAX_POINTS 2000000 /* a larger space is refused: bound or fix some of it */
#define PLAN_MAX_VALUES 256     /* (no count up to 65536 has more divisors) */

static int fixed(const struct plan_space *s, enum plan_dim d)
{
	return (s->fixed >> d) & 1u;
}

/* The base's value of dimension d. */
static int base_value(const struct plan_space *s, enum plan_dim d)
{
	const struct run_cfg *b = &s->base;

	switch (d) {
	case PLAN_TP:
		return b->mesh.size[MESH_TP];
	case PLAN_PP:
		return b->mesh.size[MESH_PP];
	case PLAN_CP:
		return b->mesh.size[MESH_CP];
	case PLAN_EP:
		return b->ep;
	case PLAN_ETP:
		return b->etp;
	case PLAN_SCHEDULE:
		return b->schedule_set ? (int)b->schedule : -1;
	case PLAN_VPP:
		return b->vpp;
	case PLAN_MBS:
		return b->mbs;
	case PLAN_ZERO:
		return b->zero;
	case PLAN_OVERLAP:
		return (int)b->tp_overlap;
	case PLAN_RECOMPUTE:
		return (int)b->recompute;
	case PLAN_SP:
		return b->sp;
	case PLAN_FLASH:
		return b->flash;
	case PLAN_CP_COMM:
		return (int)b->cp_comm;
	default:
		return 0;
	}
}

/* The divisors of n up to max (0: n), into v. */
static int divisors(int n, int max, int *v)
{
	int k = 0;

	for (int x = 1; x <= n && k < PLAN_MAX_VALUES; x++)
		if (n % x == 0 && (!max || x <= max))
			v[k++] = x;
	return k;
}

/* The values dimension d may take given the dimensions before it in p. */
static int values(const struct plan_space *s, const struct plan_point *p, enum plan_dim d, int *v)
{
	static const int sched[] = {SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1, SCHED_ZBH2,
				    SCHED_HELIX};
	static const int vpps[] = {2, 3, 4, 6, 8};
	const struct gpt_config *m = &s->base.model;
	int tp = p->v[PLAN_TP], pp = p->v[PLAN_PP], cp = p->v[PLAN_CP], k = 0;

	if (fixed(s, d)) {
		/* a fixed schedule with one stage asks for none; a fixed vpp is the
		 * interleaved schedule's */
		if (d == PLAN_SCHEDULE && pp == 1)
			v[0] = -1;
		else if (d == PLAN_SP)
			v[0] = tp > 1 && s->base.sp;
		else if (d == PLAN_VPP && p->v[PLAN_SCHEDULE] != SCHED_INTERLEAVED)
			v[0] = 1;
		else
			v[0] = base_value(s, d);
		return 1;
	}
	switch (d) {
	case PLAN_TP:
		return divisors(s->gpus, s->max_tp, v);
	case PLAN_PP:
		return divisors(s->gpus / tp, s->max_pp ? s->max_pp : m->num_layers, v);
	case PLAN_CP: /* by default a rank keeps 2048 tokens or more: two chunks of 1024 */
		return divisors(s->gpus / tp / pp,
				s->max_cp            ? s->max_cp
				: m->seq_len >= 4096 ? m->seq_len / 2048
						     : 1,
				v);
	case PLAN_EP:
		if (m->num_experts <= 0) {
			v[0] = 1;
			return 1;
		}
		return divisors(s->gpus, s->max_ep ? s->max_ep : m->num_experts, v);
	case PLAN_ETP:
		v[k++] = 0;
		if (p->v[PLAN_EP] > 1 && tp > 1)
			v[k++] = tp;
		return k;
	case PLAN_SCHEDULE:
		if (fixed(s, PLAN_VPP) && s->base.vpp > 1) { /* chunks: the interleaved one */
			v[0] = SCHED_INTERLEAVED;
			return pp > 1;
		}
		if (pp == 1) {
			v[0] = -1;
			return 1;
		}
		memcpy(v, sched, sizeof sched);
		return (int)(sizeof sched / sizeof *sched);
	case PLAN_VPP:
		if (p->v[PLAN_SCHEDULE] != SCHED_INTERLEAVED) {
			v[0] = 1;
			return 1;
		}
		for (size_t i = 0; i < sizeof vpps / sizeof *vpps; i++)
			if ((long long)vpps[i] * pp <= m->num_layers)
				v[k++] = vpps[i];
		return k;
	case PLAN_MBS:
		for (int b = 1; b <= (s->max_mbs ? s->max_mbs : 8); b *= 2)
			v[k++] = b;
		return k;
	case PLAN_ZERO:
		for (int z = 0; z <= (p->dp * cp > 1 ? 3 : 0); z++)
			v[k++] = z;
		return k;
	case PLAN_OVERLAP:
		v[k++] = PAR_OVERLAP_NONE;
		if (tp > 1)
			v[k++] = PAR_OVERLAP_OASES;
		return k;
	case PLAN_RECOMPUTE:
		v[k++] = PAR_RECOMPUTE_NONE;
		v[k++] = PAR_RECOMPUTE_SELECTIVE;
		v[k++] = PAR_RECOMPUTE_FULL;
		if (tp > 1)
			v[k++] = PAR_RECOMPUTE_OASES;
		return k;
	case PLAN_SP:
		if (tp > 1 && s->both_sp)
			v[k++] = 0;
		v[k++] = tp > 1;
		return k;
	case PLAN_FLASH:
		/* flash attention keeps no scores, so selective recomputation (of the
		 * scores) would be no recomputation: that pair is left out */
		if (cp == 1)
			v[k++] = 0;
		if (p->v[PLAN_RECOMPUTE] != PAR_RECOMPUTE_SELECTIVE || fixed(s, PLAN_RECOMPUTE))
			v[k++] = 1;
		return k;
	case PLAN_CP_COMM:
		v[k++] = PAR_CP_P2P;
		if (cp > 1) {
			v[k++] = PAR_CP_ALL_GATHER;
			v[k++] = PAR_CP_A2A;
		}
		return k;
	case PLAN_TPF: /* Oases's search: its overlap and recomputation, no pipeline, no
			* experts, degrees that are powers of two (run/oases_plan.h) */
		v[k++] = 0;
		if (tp > 1 && !(tp & (tp - 1)) && pp == 1 && m->num_experts <= 0 &&
		    p->v[PLAN_OVERLAP] == PAR_OVERLAP_OASES &&
		    p->v[PLAN_RECOMPUTE] == PAR_RECOMPUTE_OASES)
			v[k++] = 1;
		return k;
	default:
		return 0;
	}
}

struct walk {
	const struct plan_space *s;
	struct plan_point *pts;
	int n, cap;
};

static void walk(struct walk *w, struct plan_point *p, int d)
{
	int v[PLAN_MAX_VALUES], k;

	if (w->n > PLAN_MAX_POINTS)
		return;
	if (d == PLAN_NDIM) {
		if (w->n == PLAN_MAX_POINTS) { /* one over, kept not: the space is too large */
			w->n++;
			return;
		}
		if (w->n == w->cap) {
			w->cap = w->cap ? 2 * w->cap : 1024;
			w->pts = emu_xrealloc(w->pts, (size_t)w->cap * sizeof *w->pts);
		}
		w->pts[w->n++] = *p;
		return;
	}
	k = values(w->s, p, (enum plan_dim)d, v);
	for (int i = 0; i < k; i++) {
		p->v[d] = v[i];
		if (d == PLAN_CP) { /* dp is what the other degrees leave */
			int rest = w->s->gpus / p->v[PLAN_TP] / p->v[PLAN_PP];

			if (rest % v[i])
				continue;
			p->dp = rest / v[i];
			if (w->s->dp_fixed && p->dp != w->s->dp_fixed)
				continue;
		}
		if ((d == PLAN_TP || d == PLAN_PP) &&
		    w->s->gpus % (p->v[PLAN_TP] * (d == PLAN_PP ? p->v[PLAN_PP] : 1)))
			continue;
		walk(w, p, d + 1);
	}
}

struct plan_point *plan_points(const struct plan_space *s, int *n)
{
	struct walk w = {s, NULL, 0, 0};
	struct plan_point p;

	memset(&p, 0, sizeof p);
	if (s->gpus > 0)
		walk(&w, &p, 0);
	*n = w.n;
	return w.pts;
}

int plan_cfg(const struct plan_space *s, const struct plan_point *p, struct run_cfg *cfg, char *err,
	     size_t n)
{
	const int *v = p->v;

	*cfg = s->base;
	mesh_init(&cfg->mesh, v[PLAN_TP], v[PLAN_CP], 1, p->dp, v[PLAN_PP]);
	cfg->ep = v[PLAN_EP];
	cfg->etp = v[PLAN_ETP];
	cfg->schedule_set = v[PLAN_SCHEDULE] >= 0;
	cfg->schedule = cfg->schedule_set ? (enum sched_kind)v[PLAN_SCHEDULE] : SCHED_1F1B;
	cfg->vpp = v[PLAN_VPP];
	cfg->vpp_layers = 0;
	cfg->mbs = v[PLAN_MBS];
	cfg->zero = v[PLAN_ZERO];
	/* --overlap-param-gather applies to the layouts with weights to gather */
	cfg->overlap_param_gather =
		s->base.overlap_param_gather && cfg->zero >= 1 && cfg->zero <= 2;
	cfg->tp_overlap = (enum par_overlap)v[PLAN_OVERLAP];
	cfg->recompute = (enum par_recompute)v[PLAN_RECOMPUTE];
	cfg->sp = v[PLAN_SP];
	/* --p2p-sync applies to the layouts that run 1F1B or the interleaved schedule over
	 * more than 2 stages (Megatron-LM's synchronous ones), but Oases's sub-batches
	 * (run_check) */
	cfg->p2p_sync = s->base.p2p_sync && v[PLAN_PP] > 1 && !cfg->tp_overlap &&
			(cfg->schedule == SCHED_1F1B ||
			 (cfg->schedule == SCHED_INTERLEAVED && v[PLAN_PP] > 2));
	/* --scatter-gather-tensors-in-pipeline to the pipelines with tp and no sp */
	cfg->pp_scatter = s->base.pp_scatter && v[PLAN_PP] > 1 && v[PLAN_TP] > 1 && !cfg->sp &&
			  cfg->schedule != SCHED_HELIX && !v[PLAN_TPF];
	/* --tp-comm-overlap applies to the layouts with sequence parallelism, not Oases's */
	cfg->tp_comm_overlap = s->base.tp_comm_overlap && cfg->sp && !cfg->tp_overlap &&
			       cfg->recompute != PAR_RECOMPUTE_OASES;
	if (!cfg->tp_comm_overlap) { /* (and its file with it) */
		cfg->tpo_cfg_set = 0;
		cfg->tpo_cfg_path = NULL;
	}
	cfg->flash = v[PLAN_FLASH];
	cfg->cp_comm = (enum par_cp_comm)v[PLAN_CP_COMM];
	cfg->tpf_layers = v[PLAN_TPF] ? p->tpf_layers : 0;
	cfg->tpf = v[PLAN_TPF] ? p->tpf : 0;
	cfg->steps = 1;
	cfg->log_every = 0;
	cfg->data = NULL;
	return run_cfg_finish(cfg, s->gpus, err, n);
}

/* ------------------------------------------------------------------------------------ */
/* The search                                                                           */

/* PLAN_TPF: Oases's search for the blocks' degrees on x's layout (cfg: tp throughout)
 * into x->p's K:T; the fate, if that decides the point (-1 if not). */
static int oases_degrees(const struct emu_config *ecfg, const struct run_cfg *cfg,
			 struct plan_entry *x)
{
	struct oases_result *r = emu_xcalloc(1, sizeof *r);
	char err[512];
	int rc = oases_plan(ecfg, cfg, r, err, sizeof err), fate = -1;

	if (rc == EMU_EINVAL) /* outside its space: a degree does not cut the heads, ... */
		fate = PLAN_RULE;
	else if (rc == EMU_EOOM)
		fate = PLAN_OOM;
	else if (rc)
		fate = PLAN_FAIL;
	else if (!r->K)
		fate = PLAN_SAME;
	x->e.err = rc;
	x->p.tpf_layers = r->K;
	x->p.tpf = r->T;
	free(r);
	return fate;
}

/* Point x through the three sieves into x (under PLAN_TPF, Oases's search between the
 * bound and the dry-run). */
static void decide(const struct plan_space *s, const struct emu_config *ecfg, struct plan_entry *x)
{
	struct run_cfg cfg;
	char err[512];
	uint64_t cap = ecfg->mem_cap ? ecfg->mem_cap : ecfg->topo.gpu.hbm_bytes, bound;

	if (plan_cfg(s, &x->p, &cfg, err, sizeof err)) {
		x->fate = PLAN_RULE;
		return;
	}
	x->e.bound = bound = plan_mem_bound(&cfg, s->gpus);
	if (bound > cap) {
		x->fate = PLAN_BOUND;
		return;
	}
	if (x->p.v[PLAN_TPF]) {
		int f = oases_degrees(ecfg, &cfg, x);

		if (f >= 0) {
			x->fate = (enum plan_fate)f;
			return;
		}
		if (plan_cfg(s, &x->p, &cfg, err, sizeof err)) { /* (its K:T is the checker's) */
			x->fate = PLAN_RULE;
			return;
		}
	}
	x->fate = plan_dry_run(ecfg, &cfg, &x->e);
	x->e.bound = bound;
}

/* The shared state of the worker processes: the next point to take, and each point's
 * state (0 not taken, 1 taken, 2 decided). */
struct plan_shared {
	atomic_int next, done;
	atomic_int state[];
};

/* The points to decide: all[0 .. n). */
struct batch {
	const struct plan_space *s;
	const struct emu_config *ecfg;
	struct plan_entry *all;
	int n;
};

static void work(const struct batch *b, struct plan_entry *all, struct plan_shared *sh)
{
	int i;

	while ((i = atomic_fetch_add(&sh->next, 1)) < b->n) {
		atomic_store(&sh->state[i], 1);
		decide(b->s, b->ecfg, &all[i]);
		atomic_store(&sh->state[i], 2);
		atomic_fetch_add(&sh->done, 1);
	}
}

static void *shared_map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Decides b's points in jobs processes (the entries and the counters in shared
 * memory); a point whose worker died is PLAN_FAIL. 0, or -1 if no process could be made
 * (the caller then decides them here). */
static int decide_forked(const struct batch *b, int jobs, plan_progress_fn progress, void *arg)
{
	struct plan_entry *all = b->all;
	int n = b->n;
	size_t eb = (size_t)n * sizeof *all,
	       sb = sizeof(struct plan_shared) + (size_t)n * sizeof(atomic_int);
	struct plan_entry *sall = shared_map(eb);
	struct plan_shared *sh = shared_map(sb);
	pid_t pid[64], parent = getpid();
	int started = 0, live, shown = -1;

	if (!sall || !sh) {
		if (sall)
			munmap(sall, eb);
		if (sh)
			munmap(sh, sb);
		return -1;
	}
	memcpy(sall, all, eb);
	fflush(NULL); /* nothing buffered is written twice */
	for (int j = 0; j < jobs && j < 64; j++) {
		pid[j] = fork();
		if (pid[j] == 0) {
			/* a worker ends with pemu (killed, say), not minutes later on its own
			 * (the death signal follows the forking thread: pemu plan's main one) */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
				_exit(1);
			work(b, sall, sh);
			_exit(0);
		}
		if (pid[j] < 0)
			break;
		started++;
	}
	if (!started) {
		munmap(sall, eb);
		munmap(sh, sb);
		return -1;
	}
	for (live = started; live > 0;) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		int d = atomic_load(&sh->done);

		if (progress && d != shown)
			progress(shown = d, n, arg);
		for (int j = 0; j < started; j++) {
			pid_t w;

			if (pid[j] <= 0) /* ended already */
				continue;
			w = waitpid(pid[j], NULL, WNOHANG);
			/* ended, or not ours to wait for (SIGCHLD ignored): gone either way */
			if (w == pid[j] || (w < 0 && errno == ECHILD)) {
				pid[j] = 0;
				live--;
			}
		}
		if (live)
			nanosleep(&ts, NULL);
	}
	for (int i = 0; i < n; i++)
		if (atomic_load(&sh->state[i]) != 2) { /* its worker died (or never ran) */
			sall[i].fate = PLAN_FAIL;
			sall[i].e.err = EMU_EABORTED;
		}
	if (progress)
		progress(n, n, arg);
	memcpy(all, sall, eb);
	munmap(sall, eb);
	munmap(sh, sb);
	return 0;
}

static const struct plan_entry *sort_base;

static int by_time(const void *a, const void *b)
{
	const struct plan_entry *x = &sort_base[*(const int *)a], *y = &sort_base[*(const int *)b];

	if (x->e.step_ns != y->e.step_ns)
		return x->e.step_ns < y->e.step_ns ? -1 : 1;
	return x->index - y->index;
}

/* b's points decided, in jobs processes if it can. */
static void decide_all(const struct batch *b, int jobs, plan_progress_fn progress, void *arg)
{
	/* Each dry-run allocates and frees the same large blocks as the one before it: keep
	 * them mapped rather than hand them back and fault them in again (gpt3-175b's
	 * layouts at tp 8 pp 8 on one process: 1.2 s of system time with glibc's defaults,
	 * 0.65 s so). */
	mallopt(M_MMAP_THRESHOLD, 256 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	if (jobs > 1 && !decide_forked(b, jobs, progress, arg))
		return;
	for (int i = 0; i < b->n; i++) {
		decide(b->s, b->ecfg, &b->all[i]);
		if (progress)
			progress(i + 1, b->n, arg);
	}
}

/* r's counts, its ranking of the fitting points and their front. */
static void rank_all(struct plan_result *r)
{
	uint64_t best = UINT64_MAX;

	free(r->rank);
	free(r->pareto);
	r->by_rule = r->by_bound = r->by_same = r->by_oom = r->failed = r->nok = r->npareto = 0;
	r->rank = emu_xcalloc((size_t)r->n, sizeof *r->rank);
	for (int i = 0; i < r->n; i++) {
		switch (r->all[i].fate) {
		case PLAN_RULE:
			r->by_rule++;
			break;
		case PLAN_BOUND:
			r->by_bound++;
			break;
		case PLAN_SAME:
			r->by_same++;
			break;
		case PLAN_OOM:
			r->by_oom++;
			break;
		case PLAN_FAIL:
			r->failed++;
			break;
		case PLAN_OK:
			r->rank[r->nok++] = i;
			break;
		}
	}
	sort_base = r->all;
	qsort(r->rank, (size_t)r->nok, sizeof *r->rank, by_time);
	/* the front: each layout that needs less memory than every faster one */
	r->pareto = emu_xcalloc((size_t)r->nok + 1, sizeof *r->pareto);
	for (int k = 0; k < r->nok; k++)
		if (r->all[r->rank[k]].e.peak < best) {
			best = r->all[r->rank[k]].e.peak;
			r->pareto[r->npareto++] = r->rank[k];
		}
}

int plan_search(const struct plan_space *s, const struct emu_config *ecfg, int jobs,
		plan_progress_fn progress, void *arg, struct plan_result *r, char *err, size_t n)
{
	struct plan_point *pts;
	struct timespec t0, t1;

	memset(r, 0, sizeof *r);
	if (ecfg->ndev != s->gpus) {
		snprintf(err, n, "pemu plan: the cluster has %d devices and the space %d",
			 ecfg->ndev, s->gpus);
		return EMU_EINVAL;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pts = plan_points(s, &r->n);
	if (r->n > PLAN_MAX_POINTS) {
		free(pts);
		r->n = 0;
		snprintf(err, n,
			 "pemu plan: the space has more than %d layouts; bound it (--max-tp, "
			 "--max-pp, --max-cp, --max-ep, --max-micro-batch-size) or fix some of "
			 "its options",
			 PLAN_MAX_POINTS);
		return EMU_EINVAL;
	}
	if (!r->n) {
		free(pts);
		snprintf(err, n,
			 "pemu plan: no layout of %d GPUs within the bounds (--max-tp, --max-pp, "
			 "--max-cp and the degrees given)",
			 s->gpus);
		return EMU_EINVAL;
	}
	r->all = emu_xcalloc((size_t)r->n, sizeof *r->all);
	for (int i = 0; i < r->n; i++) {
		r->all[i].p = pts[i];
		r->all[i].index = i;
	}
	free(pts);
	decide_all(&(struct batch){s, ecfg, r->all, r->n}, jobs, progress, arg);
	rank_all(r);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	r->wall_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	return 0;
}

void plan_result_free(struct plan_result *r)
{
	free(r->all);
	free(r->rank);
	free(r->pareto);
	memset(r, 0, sizeof *r);
}
