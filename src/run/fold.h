/* run/fold: the dry-run folding plan of a run (see run/fold.c for why it is exact). */
#ifndef PEMU_RUN_FOLD_H
#define PEMU_RUN_FOLD_H

#include "run/cfg.h"
#include "topo.h"

/* Fills rep[cfg->mesh.world] with each device's representative under the largest fold
 * of cfg's mesh that the hardware t keeps exact (rep[i] == i: device i runs), and returns
 * the number of devices that run: mesh.world when nothing folds. */
int run_fold_plan(const struct run_cfg *cfg, const struct topo *t, int *rep);

#endif
