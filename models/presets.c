#include "presets.h"

#include <string.h>

#define DENSE(L, h, a, V, s, f)                                                                    \
	{                                                                                          \
		L, h, a, V, s, f, 0, 0, 0, 0.0f, 0.0f, 0.0f, 0.0f                                  \
	}
/* A dense model as Megatron-LM's GPT trains it: hidden and attention dropout 0.1, the
 * defaults of its --hidden-dropout and --attention-dropout (megatron/training/arguments.py)
 * and GPT-2's own (resid, embd and attn pdrop 0.1, Radford et al. 2019's released
 * hyperparameters). */
#define MEGATRON_GPT(L, h, a, V, s, f)                                                             \
	{                                                                                          \
		L, h, a, V, s, f, 0, 0, 0, 0.0f, 0.0f, 0.1f, 0.1f                                  \
	}
/* E experts, top-k, every Nth layer; capacity factor 1.25 and aux coefficient 0.01 (the
 * Switch Transformer's defaults). */
#define MOE(L, h, a, V, s, f, E, k, every)                                                         \
	{                                                                                          \
		L, h, a, V, s, f, E, k, every, 1.25f, 0.01f, 0.0f, 0.0f                            \
	}

/* layers, hidden, heads, vocab, seq_len, ffn [, experts, top-k, every]. The GPT-2 and GPT-3
 * presets drop out as Megatron does; tiny, small and the MoE presets are pemu's own and
 * llama-7b-shape is LLaMA's, trained without dropout (Touvron et al. 2023): 0. */
const struct model_preset model_presets[] = {
	{"tiny", DENSE(2, 64, 4, 256, 32, 256), 4, "2 layers, hidden 64: for tests"},
	{"small", DENSE(4, 128, 4, 256, 64, 512), 16,
	 "4 layers, hidden 128: the demo, learns in minutes"},
	{"moe-tiny", MOE(2, 64, 4, 256, 32, 256, 4, 2, 2), 4,
	 "tiny with 4 experts, top-2, in layer 2"},
	{"moe-small", MOE(4, 128, 4, 256, 64, 512, 8, 2, 2), 16,
	 "small with 8 experts, top-2, every 2nd layer"},
	{"gpt2-124m", MEGATRON_GPT(12, 768, 12, 50257, 1024, 3072), 4, "GPT-2 small"},
	{"gpt2-1.5b", MEGATRON_GPT(48, 1600, 25, 50257, 1024, 6400), 1, "GPT-2 XL"},
	{"llama-7b-shape", DENSE(32, 4096, 32, 32000, 4096, 16384), 1,
	 "7B sizes with GPT math, for dry-run"},
	{"gpt3-175b", MEGATRON_GPT(96, 12288, 96, 50257, 2048, 49152), 1,
	 "GPT-3 175B, for dry-run"},
	{NULL, DENSE(0, 0, 0, 0, 0, 0), 0, NULL},
};

const struct model_preset *model_preset(const char *name)
{
	for (const struct model_preset *p = model_presets; p->name; p++)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}
