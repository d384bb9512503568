#include "presets.h"

#include <string.h>

/* {layers, hidden, heads, vocab, seq_len, ffn} */
const struct model_preset model_presets[] = {
	{"tiny", {2, 64, 4, 256, 32, 256}, 4, "2 layers, hidden 64: for tests"},
	{"small",
	 {4, 128, 4, 256, 64, 512},
	 16,
	 "4 layers, hidden 128: the demo, learns in minutes"},
	{"gpt2-124m", {12, 768, 12, 50257, 1024, 3072}, 4, "GPT-2 small"},
	{"gpt2-1.5b", {48, 1600, 25, 50257, 1024, 6400}, 1, "GPT-2 XL"},
	{"llama-7b-shape",
	 {32, 4096, 32, 32000, 4096, 16384},
	 1,
	 "7B sizes with GPT math, for dry-run"},
	{"gpt3-175b", {96, 12288, 96, 50257, 2048, 49152}, 1, "GPT-3 175B, for dry-run"},
	{NULL, {0, 0, 0, 0, 0, 0}, 0, NULL},
};

const struct model_preset *model_preset(const char *name)
{
	for (const struct model_preset *p = model_presets; p->name; p++)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}
