// Device helpers shared by the split-K decode attention kernels (fp16 and
// int8 KV caches).
#pragma once

#include "kernels/attention.h"

namespace voltad::kernels {

// Positions per piece for a token at `pos` in a grid of `splits` pieces:
// ceil((pos + 1) / splits) rounded up to a multiple of 16 (a KV block), so
// every piece but the last has the same length and the first
// ceil((pos + 1) / per) pieces cover [0, pos].
__device__ __forceinline__ int split_tokens(int pos, int splits) {
  const int per = (pos + splits) / splits;
  return (per + kAttentionMinSplitTokens - 1) / kAttentionMinSplitTokens * kAttentionMinSplitTokens;
}

}  // namespace voltad::kernels
