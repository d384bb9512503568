/* libFuzzer target: the schedule checker (pipe/schedule.h's sched_check) on action lists
 * made from the input: 4 bytes pick the kind, stages, micro-batches and chunks, then 5
 * bytes an action (its stage, op, micro-batch, block, message and peer, each one past its
 * range at most). The checker must answer 0 or -1 with a reason, never crash or hang. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipe/schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sched sc;
	char err[256];
	int p, m, v;

	if (size < 4)
		return 0;
	p = 1 + data[1] % 4;
	m = 1 + data[2] % 4;
	v = 1 + data[3] % 2;
	sched_init_empty(&sc, (enum sched_kind)(data[0] % 6), p, m, data[0] % 6 == 2 ? v : 1);
	for (size_t i = 4; i + 5 <= size; i += 5) {
		const uint8_t *b = data + i;
		int s = b[0] % p;
		struct sched_action a = {(enum sched_op)(b[1] % 6), b[2] % (m + 1) - (b[2] > 250),
					 b[3] % (sc.nb + 1), (enum sched_msg)(b[4] % 2),
					 (b[4] >> 1) % (p + 1)};

		if (sc.n[s] + 1 >= sc.cap)
			break;
		sched_push(&sc, s, a);
	}
	/* the checker answers 0, or -1 with the violation said */
	err[0] = 0;
	switch (sched_check(&sc, err, sizeof err)) {
	case 0:
		break;
	case -1:
		if (!err[0])
			abort();
		break;
	default:
		abort();
	}
	sched_free(&sc);
	return 0;
}
