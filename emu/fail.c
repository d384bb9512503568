/* fail: how a run fails and what it says: a device's error, a dead device, a collective
 * called differently by its members, a deadlock (no device can make progress). The first
 * error recorded is the run's; the reports name the devices, the group and the calls. */
#include "internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Devices listed in a deadlock report before the rest are counted. */
#define REPORT_MAX_DEVS 32

const char *emu_err_name(int err)
{
	switch (err) {
	case EMU_OK:
		return "ok";
	case EMU_EOOM:
		return "device out of memory";
	case EMU_EMISMATCH:
		return "collective mismatch";
	case EMU_EDEADLOCK:
		return "deadlock";
	case EMU_EABORTED:
		return "aborted";
	case EMU_EDEVICE:
		return "device failure";
	case EMU_EINVAL:
		return "invalid argument";
	default:
		return "unknown error";
	}
}

/* Records err (report is taken over) and wakes every device. The run's error is the
 * first one recorded; a device's own error is also kept on the device so that the run
 * can report the lowest device's, whatever order the threads failed in. */
void cluster_fail_locked(struct emu_cluster *c, int err, int dev, char *report)
{
	if (dev >= 0 && !c->devs[dev].err) {
		c->devs[dev].err = err;
		c->devs[dev].err_report = strdup(report);
	}
	if (!c->err) {
		c->err = err;
		c->err_dev = dev;
		c->err_report = report;
	} else {
		free(report);
	}
	atomic_store(&c->failed, 1);
	for (int i = 0; i < c->cfg.ndev; i++)
		dev_wake_locked(c, &c->devs[i], NULL);
}

static int dev_vfail(struct emu_dev *d, int err, const char *kind, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

static int dev_vfail(struct emu_dev *d, int err, const char *kind, const char *fmt, va_list ap)
{
	struct emu_str s = {0};

	emu_str_addf(&s, "device %d: ", d->id);
	emu_str_vaddf(&s, fmt, ap);
	pthread_mutex_lock(&d->c->lock);
	/* (the kind goes with the error cluster_fail_locked keeps: the first) */
	if (!d->err)
		d->err_kind = kind;
	if (!d->c->err)
		d->c->err_kind = kind;
	cluster_fail_locked(d->c, err, d->id, s.s);
	pthread_mutex_unlock(&d->c->lock);
	return err;
}

int dev_fail(struct emu_dev *d, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = dev_vfail(d, err, NULL, fmt, ap);
	va_end(ap);
	return err;
}

int dev_fail_as(struct emu_dev *d, int err, const char *kind, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = dev_vfail(d, err, kind, fmt, ap);
	va_end(ap);
	return err;
}

int emu_dev_die(struct emu_dev *d, const char *fmt, ...)
{
	struct emu_str why = {0};
	va_list ap;

	va_start(ap, fmt);
	emu_str_vaddf(&why, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&d->c->lock);
	free(d->dead);
	d->dead = why.s;
	pthread_mutex_unlock(&d->c->lock);
	return 0;
}

int emu_dev_fail(struct emu_dev *d, const char *fmt, ...)
{
	va_list ap;
	int err;

	va_start(ap, fmt);
	err = dev_vfail(d, EMU_EDEVICE, NULL, fmt, ap);
	va_end(ap);
	return err;
}

int emu_dev_fail_as(struct emu_dev *d, const char *kind, const char *fmt, ...)
{
	va_list ap;
	int err;

	va_start(ap, fmt);
	err = dev_vfail(d, EMU_EDEVICE, kind, fmt, ap);
	va_end(ap);
	return err;
}

int dev_check_failed(struct emu_dev *d)
{
	return atomic_load_explicit(&d->c->failed, memory_order_acquire) ? EMU_EABORTED : 0;
}

int emu_dev_check(struct emu_dev *d)
{
	return dev_check_failed(d);
}

/* ------------------------------------------------------------------------------------ */
/* Mismatch and deadlock                                                                */

char *fail_mismatch_report(const struct op *op)
{
	struct emu_str s = {0};

	emu_str_addf(&s, "collective mismatch: call #%llu on group ", (unsigned long long)op->seq);
	chan_describe(&s, op->ch);
	emu_str_addf(&s, " was not the same on every member:");
	for (int i = 0; i < op->ch->n; i++) {
		emu_str_addf(&s, "\n  device %d: ", op->ch->devs[i]);
		if (op->has[i])
			coll_describe_arg(&s, op->ch, &op->arg[i]);
		else
			emu_str_addf(&s, "has not called it");
	}
	return s.s;
}

static void describe_wait(struct emu_str *s, struct emu_cluster *c, const struct emu_dev *d)
{
	const struct op *op = d->wait_op;
	int first = 1;

	coll_describe_arg(s, op->ch, &op->arg[d->wait_member]);
	emu_str_addf(s, " waits for");
	for (int i = 0; i < op->ch->n; i++) {
		const struct emu_dev *p;

		if (op->has[i] || (op->ch->rep_member && op->ch->rep_member[i] >= 0))
			continue;
		p = &c->devs[op->ch->devs[i]];
		emu_str_addf(s, "%s device %d", first ? "" : ",", p->id);
		first = 0;
		if (p->finished)
			emu_str_addf(s, p->dead ? " (dead)" : " (returned)");
		else if (p->blocked)
			emu_str_addf(s, " (blocked in %s)",
				     coll_op_name(p->wait_op->arg[p->wait_member].kind));
	}
}

/* Two blocked devices, each in the other's group, waiting on different groups: they
 * called the same collective step on different member lists. */
static char *group_mismatch_report(struct emu_cluster *c)
{
	for (int a = 0; a < c->cfg.ndev; a++) {
		struct emu_dev *da = &c->devs[a];

		if (!da->blocked || da->wait_op->ch->kind != CHAN_GROUP)
			continue;
		for (int b = a + 1; b < c->cfg.ndev; b++) {
			struct emu_dev *db = &c->devs[b];
			struct emu_str s = {0};

			if (!db->blocked || db->wait_op->ch->kind != CHAN_GROUP ||
			    db->wait_op->ch == da->wait_op->ch ||
			    emu_group_rank(da->wait_op->ch, db) < 0 ||
			    emu_group_rank(db->wait_op->ch, da) < 0)
				continue;
			emu_str_addf(
				&s,
				"collective mismatch: devices %d and %d called a collective on "
				"different groups:",
				a, b);
			emu_str_addf(&s, "\n  device %d: ", a);
			coll_describe_arg(&s, da->wait_op->ch, &da->wait_op->arg[da->wait_member]);
			emu_str_addf(&s, "\n  device %d: ", b);
			coll_describe_arg(&s, db->wait_op->ch, &db->wait_op->arg[db->wait_member]);
			return s.s;
		}
	}
	return NULL;
}

int fail_any_dead(const struct emu_cluster *c)
{
	for (int i = 0; i < c->cfg.ndev; i++)
		if (c->devs[i].dead)
			return 1;
	return 0;
}

/* "device D died: why" for each dead device (the first few); whether there is one. */
int fail_describe_dead(struct emu_str *s, const struct emu_cluster *c)
{
	int n = 0;

	for (int i = 0; i < c->cfg.ndev; i++) {
		if (!c->devs[i].dead)
			continue;
		if (n++ < REPORT_MAX_DEVS)
			emu_str_addf(s, "%sdevice %d died: %s", n > 1 ? "; " : "", i,
				     c->devs[i].dead);
	}
	return n > 0;
}

void fail_check_deadlock_locked(struct emu_cluster *c)
{
	struct emu_str s = {0};
	char *mm;
	int listed = 0, nfinished = 0;

	if (atomic_load(&c->failed) || c->nlive == 0 || c->nblocked < c->nlive)
		return;
	for (int i = 0; i < c->cfg.ndev; i++) {
		struct emu_dev *d = &c->devs[i];

		if (d->blocked && d->wait_op->mismatch) {
			cluster_fail_locked(c, EMU_EMISMATCH, -1, fail_mismatch_report(d->wait_op));
			return;
		}
	}
	mm = group_mismatch_report(c);
	if (mm) {
		cluster_fail_locked(c, EMU_EMISMATCH, -1, mm);
		return;
	}
	for (int i = 0; i < c->cfg.ndev; i++)
		nfinished += c->devs[i].finished;
	if (fail_describe_dead(&s, c))
		emu_str_addf(&s, "; the devices that need it wait (%d blocked, %d returned):",
			     c->nblocked, nfinished);
	else
		emu_str_addf(&s, "deadlock: no device can make progress (%d blocked, %d returned)",
			     c->nblocked, nfinished);
	for (int i = 0; i < c->cfg.ndev; i++) {
		struct emu_dev *d = &c->devs[i];

		if (!d->blocked)
			continue;
		if (listed++ == REPORT_MAX_DEVS) {
			emu_str_addf(&s, "\n  ... and %d more blocked devices",
				     c->nblocked - REPORT_MAX_DEVS);
			break;
		}
		emu_str_addf(&s, "\n  device %d: ", d->id);
		describe_wait(&s, c, d);
	}
	cluster_fail_locked(c, fail_any_dead(c) ? EMU_EDEVICE : EMU_EDEADLOCK, -1, s.s);
}
