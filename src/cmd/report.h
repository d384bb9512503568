/* report: the pieces of pemu's reports that more than one command prints: the cluster,
 * the configuration, memory per device, communication, the pipeline, each as text ("# "
 * lines) and as JSON fields (docs/architecture.md, The JSON report). Not a command's own lines (its
 * header, its per-step progress, verify's comparison): those stay in the command's file. Each
 * function writes to the FILE it is given and keeps nothing. */
#ifndef PEMU_REPORT_H
#define PEMU_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "cluster.h"
#include "run/run.h"

/* s as a JSON string, quoted and escaped. */
void report_json_string(FILE *f, const char *s);
/* x for JSON with prec significant digits, or null where it is not finite (JSON has no
 * infinity nor NaN): one of 16 rotating buffers, enough for one printf's arguments. */
const char *report_jnum(double x, int prec);

/* The cluster in one line (no newline): preset, nodes x GPUs, peak, cap, links. */
void report_cluster_line(FILE *f, const struct emu_config *cfg);
/* The same as a JSON object. */
void report_cluster_json(FILE *f, const struct emu_config *cfg);

/* "# vocabulary V padded to P, ..." when run_cfg_finish padded the vocabulary, else
 * nothing. */
void report_vocab_padding(FILE *f, const struct run_cfg *cfg);
/* "# " lines on the checkpoint the run starts from and the ones it saves, if any; on the
 * hidden dropout, if any. */
void report_checkpoint_line(FILE *f, const struct run_cfg *cfg);
void report_dropout_line(FILE *f, const struct run_cfg *cfg);

/* The field "config":{...} of a report: the model's sizes for pemu train; the mesh and
 * the strategies for pemu run and verify. Both end with the cluster. */
void report_config_json_train(FILE *f, const struct run_cfg *cfg, const struct emu_config *ecfg);
void report_config_json_run(FILE *f, const struct run_cfg *cfg, const struct emu_config *ecfg);

/* One device's peak memory by category on one line: "memory (peak) X of CAP: ...". */
void report_memory_line(FILE *f, struct emu_dev *d);
/* The peak memory of each of the first ndev devices of cl by category, a table of "# "
 * lines (past 16 devices, the first 8 and the last). */
void report_memory_table(FILE *f, struct emu_cluster *cl, int ndev);
/* The field "memory":[...], one object per device. */
void report_memory_json(FILE *f, struct emu_cluster *cl, int ndev);

/* The virtual time d spent in collectives over the run. */
int64_t report_comm_ns(const struct emu_dev *d);
/* Device 0's collectives (calls, bytes, time) and bytes by link class, as "# " lines. */
void report_comm_table(FILE *f, struct emu_cluster *cl);
/* The MoE layers' routing over the run: per layer, the choices each expert kept, and
 * those dropped at its capacity (execute mode; nothing without a histogram). */
void report_moe_table(FILE *f, const struct run_cfg *cfg, const struct run_out *o);
void report_moe_json(FILE *f, const struct run_cfg *cfg, const struct run_out *o);
/* The same as the field "comm":{...}. */
void report_comm_json(FILE *f, struct emu_cluster *cl);

/* The largest stage bubble of o's last step over the step time (0 without a pipeline). */
double report_bubble_fraction(const struct run_cfg *cfg, const struct run_out *o, int64_t step);
/* The pipeline (pp > 1) as "# " lines: schedule, bubble, each stage's bubble and peak
 * activations. */
void report_pipeline_table(FILE *f, struct emu_cluster *cl, const struct run_cfg *cfg,
			   const struct run_out *o, int64_t step);
/* The same as the field "pipeline":{...} followed by a comma. */
void report_pipeline_json(FILE *f, struct emu_cluster *cl, const struct run_cfg *cfg,
			  const struct run_out *o);

#endif
