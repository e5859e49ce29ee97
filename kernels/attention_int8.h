// INT8 KV cache: each token's K and V are stored per KV head as int8 values
// with one fp16 scale (the memory saver on the V100, which has no FP8), and
// the paged attention that reads them. Same paging, block tables, positions,
// GQA and split-K as kernels/attention.h, whose AttentionArgs it takes (its
// `cache` field is unused here). Host declarations only.
//
// Quantization, per token and KV head (head_dim values x):
//   d = fp16(max|x| / 127), q = clamp(rint(x / d), -127, 127) (q = 0 when
//   d = 0); the value is d * q. A non-finite x makes d NaN.
// Layout of one layer: values [n_blocks][16][kv_dim] int8 (kv_dim =
// n_kv_heads * head_dim), scales [n_blocks][16][n_kv_heads] fp16; the same
// slot numbering (block * 16 + position % 16) as the fp16 cache.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"

namespace voltad::kernels {

struct KvInt8LayerView {
  int8_t* k = nullptr;  // [n_blocks][16][kv_dim]
  int8_t* v = nullptr;
  uint16_t* k_scale = nullptr;  // [n_blocks][16][n_kv_heads], fp16 bits
  uint16_t* v_scale = nullptr;
};

// Bytes of one layer's K (or V) values, and of its K (or V) scales.
inline size_t kv_int8_value_bytes(int64_t n_blocks, int kv_dim) {
  return size_t(n_blocks) * kKvBlockTokens * size_t(kv_dim);
}
inline size_t kv_int8_scale_bytes(int64_t n_blocks, int n_kv_heads) {
  return size_t(n_blocks) * kKvBlockTokens * size_t(n_kv_heads) * 2;
}

// Quantizes each token's K and V (fp32 rows of n_kv_heads * head_dim, stride
// ld) into its slot: slots[t] = block * 16 + position % 16.
void launch_kv_write_int8(const float* k, const float* v, int64_t ld, int n_tokens, int n_kv_heads,
                          int head_dim, const int32_t* slots, KvInt8LayerView cache,
                          cudaStream_t stream);

// launch_attention over the INT8 cache: args as in attention.h (partials
// sized by attention_partial_floats, out_q honoured), args.cache ignored.
void launch_attention_int8(const AttentionArgs& args, KvInt8LayerView cache, cudaStream_t stream);

}  // namespace voltad::kernels
