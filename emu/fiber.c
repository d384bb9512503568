/* fiber: devices as user-level contexts on a pool of host threads (emu_config.workers).
 *
 * Each device that runs gets a context with its own stack. A worker thread takes a ready
 * device off the run queue and switches to it; the device runs until it must wait (an op
 * whose members have not all arrived) or its function returns, and switches back. A
 * device that waits is parked, and the arrival that completes its op puts it back on the
 * queue: waiting costs two context switches and no system call, whatever the number of
 * devices, and no device spins or yields its core to other processes.
 *
 * Where a woken device goes. Onto the queue of the worker whose device woke it: a worker
 * runs its own queue, then the shared one (devices not yet started, wakes after a
 * failure), and takes from another worker's only when that one has not switched for
 * STEAL_NS (it is busy in a long stretch of math, and its queue waits). So devices that
 * mostly talk stay on one worker and do not fight over the cluster lock, and devices that
 * compute spread over every core.
 *
 * The hand-over, under c->lock. A device parks by marking itself PARKING, unlocking and
 * switching to its worker; the worker, back on its own stack, locks again and turns
 * PARKING into PARKED, or, if a wake came in between (WOKEN), queues the device at once.
 * So a device is only queued once its context is saved, and no lock is ever held across
 * a switch (both sanitizers follow the switches: ASan's fiber stack annotations, TSan's
 * fibers). Deadlock detection is unchanged: cluster.c counts blocked devices under the
 * lock, and a parked device is a blocked one. */
#define _GNU_SOURCE /* pthread_getattr_np, MAP_ANONYMOUS, MAP_STACK */

#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

#define FIBER_STACK_BYTES (2u << 20)
/* An idle worker looks at the queues this many times (a pause each) before it sleeps for
 * IDLE_SLEEP_NS at most: in a pipeline most devices wait at once, and the queues are
 * often empty for a moment. */
#define IDLE_SPINS    2000
#define IDLE_SLEEP_NS 200000
/* A worker that has run the same device this long has its queue taken from. */
#define STEAL_NS 20000

/* The switch itself. On x86-64, a few instructions: push the callee-saved registers,
 * swap stack pointers, pop (no system call, unlike swapcontext's signal mask); a new
 * context's stack is laid out so that the first switch "returns" into pemu_ctx_start,
 * which calls pemu_fiber_entry(d). MXCSR and the x87 control word, callee-saved too, are
 * not switched: nothing in pemu changes them. Elsewhere, ucontext. */
#if defined(__x86_64__)
#define ASM_SWITCH 1
void pemu_ctx_switch(void **from_sp, void *to_sp);
void pemu_ctx_start(void);
__asm__(".text\n"
	".globl pemu_ctx_switch\n"
	".type pemu_ctx_switch,@function\n"
	"pemu_ctx_switch:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tmovq %rsp, (%rdi)\n"
	"\tmovq %rsi, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
	"\tret\n"
	".size pemu_ctx_switch, .-pemu_ctx_switch\n"
	".globl pemu_ctx_start\n"
	".type pemu_ctx_start,@function\n"
	"pemu_ctx_start:\n"
	"\tmovq %r12, %rdi\n"
	"\tcallq *%r13\n"
	"\tud2\n"
	".size pemu_ctx_start, .-pemu_ctx_start\n");
#else
#define ASM_SWITCH 0
#endif

enum { FB_READY, FB_RUNNING, FB_PARKING, FB_WOKEN, FB_PARKED, FB_EXITED };

struct worker {
	struct emu_cluster *c;
	pthread_t thread;
	struct emu_dev *head, *tail; /* its queue, under c->lock */
	atomic_int n;                /* its length, also read without the lock */
	atomic_llong since;          /* wall time it last switched to a device */
	ucontext_t ctx;              /* without ASM_SWITCH */
	void *sp;                    /* with it */
	const void *stack_lo;        /* its own stack, for ASan's switch annotations */
	size_t stack_size;
	void *tsan; /* its TSan fiber */
};

/* ---------------------------------------------------------------------------------- */
/* Switching, with the sanitizers told                                                */

static void switch_ctx(ucontext_t *from, ucontext_t *to, void **from_sp, void *to_sp, void **fake,
		       const void *to_lo, size_t to_size, void *to_tsan, int dying)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(dying ? NULL : fake, to_lo, to_size);
#else
	(void)fake;
	(void)to_lo;
	(void)to_size;
	(void)dying;
#endif
#ifdef __SANITIZE_THREAD__
	__tsan_switch_to_fiber(to_tsan, 0);
#else
	(void)to_tsan;
#endif
#if ASM_SWITCH
	(void)from;
	(void)to;
	pemu_ctx_switch(from_sp, to_sp);
#else
	(void)from_sp;
	(void)to_sp;
	if (swapcontext(from, to))
		emu_die("swapcontext failed");
#endif
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(*fake, NULL, NULL);
#endif
}

static void to_device(struct worker *w, struct emu_dev *d)
{
	void *fake = NULL;

	d->fb.w = w;
	switch_ctx(&w->ctx, &d->fb.ctx, &w->sp, d->fb.sp, &fake, d->fb.stack, d->fb.stack_size,
		   d->fb.tsan, 0);
}

static void to_worker(struct emu_dev *d, int dying)
{
	struct worker *w = d->fb.w;

	switch_ctx(&d->fb.ctx, &w->ctx, &d->fb.sp, w->sp, &d->fb.fake, w->stack_lo, w->stack_size,
		   w->tsan, dying);
}

/* ---------------------------------------------------------------------------------- */
/* The run queue, under c->lock                                                        */

static void push_locked(struct emu_cluster *c, struct emu_dev *d, struct worker *w)
{
	struct emu_dev **head = w ? &w->head : &c->rq_head, **tail = w ? &w->tail : &c->rq_tail;

	d->fb.state = FB_READY;
	d->fb.next = NULL;
	if (*tail)
		(*tail)->fb.next = d;
	else
		*head = d;
	*tail = d;
	atomic_fetch_add_explicit(w ? &w->n : &c->rq_n, 1, memory_order_relaxed);
	if (!w && c->rq_idle)
		pthread_cond_signal(&c->rq_cond);
}

static struct emu_dev *pop_locked(struct emu_cluster *c, struct worker *w)
{
	struct emu_dev **head = w ? &w->head : &c->rq_head, **tail = w ? &w->tail : &c->rq_tail;
	struct emu_dev *d = *head;

	if (!d)
		return NULL;
	*head = d->fb.next;
	if (!*head)
		*tail = NULL;
	atomic_fetch_sub_explicit(w ? &w->n : &c->rq_n, 1, memory_order_relaxed);
	return d;
}

/* A worker other than w whose queue has waited STEAL_NS, or NULL. */
static struct worker *victim(struct emu_cluster *c, const struct worker *w)
{
	int64_t now = emu_wall_ns();

	for (int i = 0; i < c->nworkers; i++) {
		struct worker *v = &c->workers[i];

		if (v != w && atomic_load_explicit(&v->n, memory_order_relaxed) &&
		    now - atomic_load_explicit(&v->since, memory_order_relaxed) > STEAL_NS)
			return v;
	}
	return NULL;
}

void fiber_wake_locked(struct emu_cluster *c, struct emu_dev *d, const struct emu_dev *by)
{
	if (d->fb.state == FB_PARKED)
		push_locked(c, d, by ? by->fb.w : NULL);
	else if (d->fb.state == FB_PARKING)
		d->fb.state = FB_WOKEN;
}

void fiber_park_locked(struct emu_dev *d)
{
	d->fb.state = FB_PARKING;
	pthread_mutex_unlock(&d->c->lock);
	to_worker(d, 0);
	pthread_mutex_lock(&d->c->lock);
}

/* ---------------------------------------------------------------------------------- */
/* Devices and workers                                                                */

static void fiber_run_device(struct emu_dev *d)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
	dev_main(d);
	pthread_mutex_lock(&d->c->lock);
	d->fb.state = FB_EXITED;
	pthread_mutex_unlock(&d->c->lock);
	to_worker(d, 1);
	emu_die("a finished device was resumed");
}

#if ASM_SWITCH
void pemu_fiber_entry(struct emu_dev *d);
void pemu_fiber_entry(struct emu_dev *d)
{
	fiber_run_device(d);
}
#else
static void fiber_entry(unsigned hi, unsigned lo)
{
	fiber_run_device((struct emu_dev *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

/* Nothing to run: look at the queues for a while, then sleep a little (a wake onto the
 * shared queue ends the sleep; one onto another worker's queue is for that worker). */
static void idle(struct emu_cluster *c, struct worker *w)
{
	struct timespec until;
	int64_t t;

	for (int i = 0; i < IDLE_SPINS; i++) {
		if (atomic_load_explicit(&w->n, memory_order_relaxed) ||
		    atomic_load_explicit(&c->rq_n, memory_order_relaxed) ||
		    atomic_load(&c->nexited) == c->nrun || ((i & 63) == 63 && victim(c, w)))
			return;
		emu_cpu_relax();
	}
	clock_gettime(CLOCK_REALTIME, &until);
	t = (int64_t)until.tv_sec * 1000000000 + until.tv_nsec + IDLE_SLEEP_NS;
	until.tv_sec = t / 1000000000;
	until.tv_nsec = t % 1000000000;
	pthread_mutex_lock(&c->lock);
	if (!c->rq_head && atomic_load(&c->nexited) < c->nrun) {
		c->rq_idle++;
		pthread_cond_timedwait(&c->rq_cond, &c->lock, &until);
		c->rq_idle--;
	}
	pthread_mutex_unlock(&c->lock);
}

static void *worker_main(void *p)
{
	struct worker *w = p;
	struct emu_cluster *c = w->c;
	pthread_attr_t attr;
	void *lo;

	if (pthread_getattr_np(pthread_self(), &attr) ||
	    pthread_attr_getstack(&attr, &lo, &w->stack_size))
		emu_die("pthread_getattr_np failed");
	pthread_attr_destroy(&attr);
	w->stack_lo = lo;
#ifdef __SANITIZE_THREAD__
	w->tsan = __tsan_get_current_fiber();
#endif
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct emu_dev *d = pop_locked(c, w);
		struct worker *v;

		if (!d)
			d = pop_locked(c, NULL);
		if (!d && (v = victim(c, w)))
			d = pop_locked(c, v);
		if (!d) {
			if (atomic_load(&c->nexited) == c->nrun)
				break;
			pthread_mutex_unlock(&c->lock);
			idle(c, w);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		d->fb.state = FB_RUNNING;
		atomic_store_explicit(&w->since, emu_wall_ns(), memory_order_relaxed);
		pthread_mutex_unlock(&c->lock);
		to_device(w, d);
		pthread_mutex_lock(&c->lock);
		if (d->fb.state == FB_PARKING) {
			d->fb.state = FB_PARKED;
		} else if (d->fb.state == FB_WOKEN) {
			push_locked(c, d, w);
		} else {
			EMU_ASSERT(d->fb.state == FB_EXITED);
			if (atomic_fetch_add(&c->nexited, 1) + 1 == c->nrun)
				pthread_cond_broadcast(&c->rq_cond);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Device d's context, on the stack at stack (FIBER_STACK_BYTES). */
static void fiber_init(struct emu_dev *d, void *stack)
{
	struct dev_fiber *f = &d->fb;
	uintptr_t p = (uintptr_t)d;

	f->stack_size = FIBER_STACK_BYTES;
	f->stack = stack;
#if ASM_SWITCH
	{
		/* What pemu_ctx_switch pops: r15 r14 r13 (the function) r12 (its argument)
		 * rbx rbp, then the address it returns to; 16-byte aligned after that. */
		uintptr_t top = ((uintptr_t)f->stack + f->stack_size - 16) & ~(uintptr_t)15;
		uintptr_t *sp = (uintptr_t *)(top - 56);

		sp[0] = sp[1] = sp[4] = sp[5] = 0;
		sp[2] = (uintptr_t)pemu_fiber_entry;
		sp[3] = p;
		sp[6] = (uintptr_t)pemu_ctx_start;
		f->sp = sp;
	}
#else
	if (getcontext(&f->ctx))
		emu_die("getcontext failed");
	f->ctx.uc_stack.ss_sp = f->stack;
	f->ctx.uc_stack.ss_size = f->stack_size;
	f->ctx.uc_link = NULL;
	makecontext(&f->ctx, (void (*)(void))fiber_entry, 2, (unsigned)(p >> 32),
		    (unsigned)(p & 0xffffffffu));
#endif
	f->fake = NULL;
#ifdef __SANITIZE_THREAD__
	f->tsan = __tsan_create_fiber(0);
#else
	f->tsan = NULL;
#endif
}

static void fiber_free(struct emu_dev *d)
{
	struct dev_fiber *f = &d->fb;

#ifdef __SANITIZE_THREAD__
	__tsan_destroy_fiber(f->tsan);
#endif
	f->stack = NULL;
}

/* The stacks of n devices in one mapping (address space is reserved, memory is taken
 * as touched), each with a guard page below it, so that an overflow faults instead of
 * corrupting, while they fit the kernel's count of mappings (each guard splits the
 * mapping in two; the default limit is 65530): beyond GUARDS_MAX devices, none. */
#define GUARDS_MAX 16384

static char *stacks_map(int n, size_t *slot, size_t *len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	char *map;

	*slot = FIBER_STACK_BYTES + page;
	*len = *slot * (size_t)n;
	map = mmap(NULL, *len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (map == MAP_FAILED)
		emu_die("out of host address space: stacks for %d devices", n);
	for (int i = 0; n <= GUARDS_MAX && i < n; i++)
		if (mprotect(map + (size_t)i * *slot, page, PROT_NONE))
			emu_die("mprotect failed");
	return map;
}

/* By default one worker a core in execute mode, where devices do real math in parallel;
 * one in dry-run, where a device's work between two waits is bookkeeping under the
 * cluster lock, and a second worker would mostly contend for it (gpt3-175b on 128
 * devices unfolded: 0.98 s on one worker, 2.5 s on two). */
int fiber_workers(const struct emu_cluster *c)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int n = c->cfg.workers > 0 ? c->cfg.workers
		: c->cfg.dry_run   ? 1
		: cores > 0        ? (int)cores
				   : 1;

	return n < c->nrun ? n : c->nrun;
}

void fiber_run(struct emu_cluster *c)
{
	int nw = fiber_workers(c), k = 0;
	struct worker *w = emu_xcalloc((size_t)nw, sizeof *w);
	size_t page = (size_t)sysconf(_SC_PAGESIZE), slot, len;
	char *stacks = stacks_map(c->nrun, &slot, &len);

	c->rq_head = c->rq_tail = NULL;
	c->rq_idle = 0;
	atomic_store(&c->nexited, 0);
	c->workers = w;
	c->nworkers = nw;

	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < c->cfg.ndev; i++) {
		if (c->rep && c->rep[i] != i)
			continue;
		fiber_init(&c->devs[i], stacks + (size_t)k++ * slot + page);
		push_locked(c, &c->devs[i], NULL);
	}
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < nw; i++) {
		w[i].c = c;
		if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]))
			emu_die("pthread_create failed for worker %d of %d", i, nw);
	}
	for (int i = 0; i < nw; i++)
		if (pthread_join(w[i].thread, NULL))
			emu_die("pthread_join failed");
	for (int i = 0; i < c->cfg.ndev; i++)
		if (c->devs[i].fb.stack)
			fiber_free(&c->devs[i]);
	munmap(stacks, len);
	c->workers = NULL;
	c->nworkers = 0;
	free(w);
}
