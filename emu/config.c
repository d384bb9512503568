/* config: a cluster's configuration (cluster.h): a preset's defaults, and the check that
 * names what is wrong with one before a cluster is built from it. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#include "topo.h"

int emu_config_default(struct emu_config *cfg, const char *topo_name)
{
	memset(cfg, 0, sizeof *cfg);
	if (topo_preset(topo_name, &cfg->topo))
		return -1;
	cfg->ndev = topo_ndev(&cfg->topo);
	cfg->cost = EMU_COST_CALIBRATED;
	return 0;
}

int emu_config_check(const struct emu_config *cfg, char *buf, size_t n)
{
	const struct topo *t = &cfg->topo;

	if (t->nodes < 1 || t->gpus_per_node < 1) {
		snprintf(buf, n,
			 "the cluster needs at least 1 node of at least 1 GPU (got %d x %d)",
			 t->nodes, t->gpus_per_node);
		return -1;
	}
	if (cfg->ndev < 1 || cfg->ndev > topo_ndev(t)) {
		snprintf(buf, n, "%d devices do not fit a cluster of %d node%s x %d GPUs = %d",
			 cfg->ndev, t->nodes, t->nodes == 1 ? "" : "s", t->gpus_per_node,
			 topo_ndev(t));
		return -1;
	}
	if (cfg->workers < -1) {
		snprintf(buf, n,
			 "workers must be -1 (a thread a device), 0 (a core each) or more, got %d",
			 cfg->workers);
		return -1;
	}
	if (cfg->pace < 0) {
		snprintf(buf, n, "pace must be 0 (off) or positive, got %g", cfg->pace);
		return -1;
	}
	for (int k = TOPO_LINK_INTRA; k < TOPO_LINK_NCLASS; k++) {
		if (t->link[k].bw_bytes == 0 || t->link[k].lat_ns < 0 ||
		    t->link[k].lat_ns > EMU_LAT_MAX) {
			snprintf(buf, n,
				 "the %s link needs a positive bandwidth and a latency from 0 to "
				 "1000 s (got %lld ns)",
				 topo_link_class_name(k), (long long)t->link[k].lat_ns);
			return -1;
		}
	}
	if (t->gpu.peak_flops <= 0 || t->gpu.efficiency <= 0 || t->gpu.efficiency > 1 ||
	    t->gpu.hbm_bw <= 0) {
		snprintf(buf, n,
			 "the GPU needs positive peak FLOP/s, HBM bandwidth, and an "
			 "efficiency in (0, 1]");
		return -1;
	}
	if (cfg->nslow < 0 || cfg->nslow > EMU_MAX_SLOW) {
		snprintf(buf, n, "at most %d slowdowns can be injected, not %d", EMU_MAX_SLOW,
			 cfg->nslow);
		return -1;
	}
	for (int i = 0; i < cfg->nslow; i++) {
		const struct emu_slow *s = &cfg->slow[i];

		if (!(s->x >= 1 && s->x <= 1e6) ||
		    (s->dev >= 0 ? s->dev >= cfg->ndev : s->node < 0 || s->node >= t->nodes)) {
			snprintf(buf, n,
				 "a slowdown needs a device below %d or a node below %d and a "
				 "factor "
				 "from 1 to 1e6 (got device %d, node %d, %g)",
				 cfg->ndev, t->nodes, s->dev, s->node, s->x);
			return -1;
		}
	}
	return 0;
}
