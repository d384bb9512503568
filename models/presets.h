/* presets: named model sizes for --model. tiny is for tests, small for the demo (it
 * learns the built-in corpus in a few hundred steps on a laptop); the rest are the
 * published shapes, for dry-run sizing (GPT-2: Radford et al. 2019; GPT-3: Brown et al.
 * 2020, Table 2.1; llama-7b-shape: LLaMA-7B's layers, width and heads with GPT's MLP and
 * a 32000 vocabulary, Touvron et al. 2023). The GPT-2 and GPT-3 presets carry Megatron's
 * dropout, 0.1 hidden and attention; the others none. */
#ifndef MODELS_PRESETS_H
#define MODELS_PRESETS_H

#include "gpt.h"

struct model_preset {
	const char *name;
	struct gpt_config cfg;
	int micro_batch; /* default --micro-batch-size */
	const char *what;
};

/* The preset called name, or NULL. */
const struct model_preset *model_preset(const char *name);
/* All presets, ending with a NULL name. */
extern const struct model_preset model_presets[];

#endif
