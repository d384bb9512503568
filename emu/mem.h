/* mem: each device's memory, capped and accounted by category, as a GPU's would be.
 * In execute mode an allocation holds real (zeroed, 64-byte aligned) host memory; in
 * dry-run it holds none (data is NULL) but is accounted exactly the same, so caps, OOM
 * and peaks do not depend on the mode. Going over the cap is a device OOM: mem_alloc
 * returns NULL and the device is failed with a report naming the device, the
 * allocation, the cap and the bytes in use by category (docs/architecture.md, Errors).
 *
 * Ownership: a block belongs to its device; mem_free returns it, and whatever is still
 * allocated when the device function returns is released by the cluster. */
#ifndef EMU_MEM_H
#define EMU_MEM_H

#include <stddef.h>
#include <stdint.h>

struct emu_dev;

enum mem_cat { MEM_PARAM, MEM_GRAD, MEM_OPTIM, MEM_ACT, MEM_COMM, MEM_WORK, MEM_NCAT };

struct mem_block {
	void *data;                    /* bytes of host memory; NULL in dry-run */
	uint64_t bytes;                /* accounted size */
	uint64_t host;                 /* host bytes it holds in execute mode (counted in
					* dry-run too, for mem_host_peak) */
	enum mem_cat cat;              /* what it is for */
	char name[48];                 /* for the OOM report and the trace */
	struct mem_block *prev, *next; /* the device's live blocks */
};

/* Allocates bytes for name in category cat on device d. NULL on OOM (the device is then
 * failed: return EMU_EOOM from the device function). */
struct mem_block *mem_alloc(struct emu_dev *d, enum mem_cat cat, uint64_t bytes, const char *name);
/* The same, accounting bytes but holding host_bytes of real memory in execute mode: for
 * a tensor accounted at 16 bits that the host computes on in fp32. */
struct mem_block *mem_alloc_host(struct emu_dev *d, enum mem_cat cat, uint64_t bytes,
				 uint64_t host_bytes, const char *name);
void mem_free(struct emu_dev *d, struct mem_block *b);

uint64_t mem_cap_bytes(const struct emu_dev *d);
uint64_t mem_cur_bytes(const struct emu_dev *d, enum mem_cat cat);
uint64_t mem_cur_total(const struct emu_dev *d);
/* Highest bytes in use in cat at any moment of the run. */
uint64_t mem_peak_bytes(const struct emu_dev *d, enum mem_cat cat);
/* Highest total in use at any moment (not the sum of the per-category peaks). */
uint64_t mem_peak_total(const struct emu_dev *d);
/* Highest host memory its blocks held (execute) or would hold (dry-run, where nothing
 * is allocated): what an execute run of the same code needs of the host. */
uint64_t mem_host_peak(const struct emu_dev *d);

const char *mem_cat_name(enum mem_cat cat);

#endif
