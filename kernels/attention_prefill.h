// Prefill attention on tensor cores (wmma m16n16k16, sm_70+): a chunk of n
// query tokens of ONE sequence, at positions start .. start+n-1, attends
// causally to positions [0, its own] in the paged FP16 KV cache
// (kernels/attention.h: 16-token blocks, the sequence's block table). The
// chunk's own keys and values must be in the cache already (launch_kv_write
// first). Flash-attention style: tiles of 64 queries x 64 keys, Q K^T and
// P V on tensor cores (fp16 operands, fp32 accumulation), online softmax in
// fp32. Grouped-query attention: query head h reads KV head h / (n_heads /
// n_kv_heads). head_dim 64 or 128 (others: launch_attention).
// Host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"

namespace voltad::kernels {

struct PrefillAttentionArgs {
  const float* q = nullptr;  // (n, n_heads * head_dim), stride ldq
  int64_t ldq = 0;
  float* out = nullptr;  // (n, n_heads * head_dim), stride ldo
  int64_t ldo = 0;
  KvLayerView cache;
  const int32_t* block_table = nullptr;  // the sequence's blocks: ceil((start+n)/16) of them
  int start = 0;                         // position of the first query token
  int n = 0;                             // query tokens
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;    // 64 or 128
  float scale = 1.0f;  // 1/sqrt(head_dim)
};

inline bool prefill_attention_supported(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

void launch_attention_prefill(const PrefillAttentionArgs& args, cudaStream_t stream);

}  // namespace voltad::kernels
