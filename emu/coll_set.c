/* coll_set: a device's settings for its later calls (emu/coll.h): the CTAs, stream,
 * wire width and engines its collectives and sends run with, and whether its sends wait
 * for their receivers or run as a group (the communicator they run on: coll_p2p.c). */
#include "internal.h"
#include "util.h"

int coll_set_ctas(struct emu_dev *d, int ctas)
{
	int was = d->coll_ctas, sms = d->c->cfg.topo.gpu.sms;

	d->coll_ctas = ctas <= 0 ? 0 : ctas < sms ? ctas : sms - 1;
	return was;
}

int coll_use_copy_engines(struct emu_dev *d, int on)
{
	int was = d->p2p_ce;

	d->p2p_ce = on != 0;
	return was;
}

int coll_set_rendezvous(struct emu_dev *d, int on)
{
	int was = d->p2p_rdv;

	d->p2p_rdv = on != 0;
	return was;
}

int coll_set_group(struct emu_dev *d, int on)
{
	int was = d->p2p_group != 0;

	if (on && !was) { /* a new group */
		d->p2p_group = ++d->groups;
		for (int s = 0; s < EMU_NSTREAMS; s++)
			d->stream[s].group_t = 0;
	} else if (!on) {
		d->p2p_group = 0;
	}
	return was;
}

enum emu_stream coll_use_stream(struct emu_dev *d, enum emu_stream s)
{
	enum emu_stream old = d->coll_stream;

	EMU_ASSERT(s == EMU_STREAM_COMM || s == EMU_STREAM_COMM2);
	d->coll_stream = s;
	return old;
}

int coll_set_wire_bytes(struct emu_dev *d, int bytes)
{
	int was = d->wire_bytes;

	EMU_ASSERT(bytes > 0 && bytes <= 8);
	d->wire_bytes = bytes;
	return was;
}
