/* attention: causal multi-head self-attention (Vaswani et al. 2017; GPT-2's masking),
 * over a range of heads so that a tensor-parallel rank can run its own.
 *
 * qkv (B, T, 3, NH, hs) holds, for each token, the queries of NH heads, then their keys,
 * then their values (row stride 3 * NH * hs). The kernel computes heads [h0, h1) only:
 *   att (B, h1-h0, T, T)  softmax(Q K^T / sqrt(hs)), masked so token i sees j <= i
 *   out (B, T, NH, hs)    att V, written for heads [h0, h1) (row stride NH * hs)
 * The scores use full T x T GEMMs (as Megatron does), so the FLOPs charged are
 * 4 B T^2 hs per head forward, the figure of REFERENCES.md. Backward accumulates into
 * dqkv; scratch holds T * T floats. */
#ifndef MODELS_ATTENTION_H
#define MODELS_ATTENTION_H

#include "tensor.h"

void attention_fwd(const struct kctx *k, float *out, float *att, const float *qkv, int B, int T,
		   int NH, int h0, int h1, int hs);
void attention_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
		   const float *att, const float *qkv, int B, int T, int NH, int h0, int h1,
		   int hs);

#endif
