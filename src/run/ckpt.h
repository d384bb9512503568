/* run/ckpt: checkpoints, under Megatron-LM's names (--save DIR, --save-interval N,
 * --load DIR). A checkpoint is the serial model's full tensors by name (gpt_tensor_name),
 * each with Adam's two moments, the iteration reached and the settings of the run that
 * wrote it: whatever layout saved it, any other loads it, each rank cutting its shard
 * from the full tensors as it cuts them from the initial weights (par/model.h's
 * par_source). docs/architecture.md (Checkpoints) has the format byte by byte.
 *
 *   DIR/iter_0000010.pemu                  the checkpoint of iteration 10
 *   DIR/latest_checkpointed_iteration.txt  "10": the one --load takes (Megatron's tracker)
 *
 * Saving is atomic: the file is written under a temporary name in DIR, flushed to the
 * disk (fsync) and renamed over its final name, then the tracker the same way, so a crash
 * at any point leaves the tracker naming a whole checkpoint. Loading checks every byte
 * before anything runs: the magic, the version, the header's sizes, each tensor's name
 * and size, the file's length and a 64-bit FNV-1a checksum of all of it. */
#ifndef PEMU_RUN_CKPT_H
#define PEMU_RUN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "run/cfg.h"

#define CKPT_VERSION 1
#define CKPT_TRACKER "latest_checkpointed_iteration.txt"

struct ckpt {
	struct gpt_config model; /* the saved model (vocab: its padded vocabulary) */
	int vocab_orig;          /* the vocabulary before padding */
	int vocab_saved;         /* the padded vocabulary as saved (ckpt_fit may change vocab) */
	int iter;                /* optimizer steps taken */
	int train_iters;         /* where the saving run meant to end (its --train-iters) */
	uint64_t seed;
	int mbs, gbs;
	struct optim_cfg opt;
	char layout[128]; /* the layout that saved it, for people ("tp 2, pp 2, dp 2, ZeRO 1") */
	int np;
	float **w, **m, **v; /* [np] full tensors: the weights, Adam's m and v */
};

/* A checkpoint of cfg's model at iteration iter (the tensors allocated, zeroed, for the
 * run to fill), its settings and layout from cfg. */
void ckpt_alloc(struct ckpt *c, const struct run_cfg *cfg, int iter);
void ckpt_free(struct ckpt *c);

/* The host memory a checkpoint of model takes: its tensors and Adam's two moments, fp32. */
uint64_t ckpt_bytes(const struct gpt_config *model);

/* Whether the run saves after iteration it (1-based): every --save-interval, and at the
 * run's last iteration, as Megatron does. */
int ckpt_saves_at(const struct run_cfg *cfg, int it);

/* Before a run: that --save's directory exists (made, with its parents, if not) and
 * takes a file. 0, or -1 with the reason in err. */
int ckpt_check_dir(const char *dir, char *err, size_t n);

/* Writes c as DIR/iter_NNNNNNN.pemu and points the tracker at it, atomically (above).
 * 0, or -1 with the reason in err (the previous checkpoint left as it was). */
int ckpt_save(const char *dir, const struct ckpt *c, char *err, size_t n);

/* A run's save at iteration it, from device d: c (filled) written to cfg->save, a line
 * saying so (unless the run is quiet); 0, or the device failed with the reason. */
int ckpt_save_at(struct emu_dev *d, const struct run_cfg *cfg, struct ckpt *c, int it);

/* The iteration DIR's tracker names: 1 and *iter, 0 if DIR holds no tracker (no
 * checkpoint yet), -1 with the reason in err if it holds one that is not an iteration. */
int ckpt_latest(const char *dir, int *iter, char *err, size_t n);

/* Reads the checkpoint DIR's tracker names into c, every byte checked (above). 0, or -1
 * with the reason in err: the file and what is wrong with it. */
int ckpt_load(const char *dir, struct ckpt *c, char *err, size_t n);

/* The file of iteration iter in dir; one such file read into c (allocated; every byte
 * checked, as ckpt_load does). 0, or -1 with the reason in err. */
void ckpt_path(char *buf, size_t n, const char *dir, int iter);
int ckpt_read(const char *path, struct ckpt *c, char *err, size_t n);

/* Whether c can start cfg's model: the shapes must be the same (layers, hidden size,
 * heads, MLP width, sequence length, vocabulary before padding, experts and which layers
 * have them); the padding of the vocabulary may differ, and c is then cut or grown to
 * cfg's (added rows as a fresh run of the seed has them, with no Adam state). 0, or -1
 * with the first difference named in err. */
int ckpt_fit(struct ckpt *c, const struct run_cfg *cfg, char *err, size_t n);

/* The training settings of c that cfg changes (seed, batches, optimizer), as one line
 * into buf (empty if none): the resumed run is then not the saving run continued. */
void ckpt_differences(const struct ckpt *c, const struct run_cfg *cfg, char *buf, size_t n);

/* The serial model's weights and Adam state into c, or from c (models/gpt.h). */
void ckpt_from_gpt(struct ckpt *c, const struct gpt *m);
void ckpt_to_gpt(const struct ckpt *c, struct gpt *m);

/* For run/ckpt.c and ckpt_file.c: c's tensors, zeroed, for the model it names; the file
 * at path written (not atomically: ckpt_save is), 0 or -1 with errno's value in *e. */
void ckpt_alloc_tensors(struct ckpt *c);
int ckpt_write_file(const char *path, const struct ckpt *c, int *e);

/* Tests only: called as the checkpoint file grows, with the bytes written so far (a test
 * stops the process there to see that a crash mid-save loses nothing). */
extern void (*ckpt_write_hook)(uint64_t written);

#endif
