// Rotary position embedding, in place on rows of n_heads * head_dim fp32
// values (q or k of a batch of tokens). Host declarations only.
//
// The rotation angle of pair i at position p is p * inv_freq[i]. The table
// (rot_dims/2 floats, on the device) folds in everything model-specific:
// the base, linear scaling and Llama 3's per-dimension frequency factors;
// rope_inverse_frequencies builds it once at load.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace voltad::kernels {

enum class RopeOrdering {
  Normal,  // pairs (2i, 2i+1): llama-family GGUFs (the converter un-permutes Q/K)
  NeoX,    // pairs (i, i + rot_dims/2): Qwen2/Qwen3, GPT-NeoX
};

// inv_freq[i] = freq_scale * base^(-2i/rot_dims) / freq_factors[i], computed
// in double and rounded once. freq_factors (rot_dims/2 values) may be null.
inline std::vector<float> rope_inverse_frequencies(int rot_dims, double base,
                                                   double freq_scale = 1.0,
                                                   const float* freq_factors = nullptr) {
  std::vector<float> inv(size_t(rot_dims / 2));
  for (int i = 0; i < rot_dims / 2; ++i) {
    double f = freq_scale * std::pow(base, -2.0 * i / rot_dims);
    if (freq_factors) f /= double(freq_factors[i]);
    inv[size_t(i)] = float(f);
  }
  return inv;
}

// x: rows (tokens) of n_heads * head_dim values, stride ld; positions: one
// int32 per row (device); the first rot_dims (even, <= head_dim) values of
// each head rotate, the rest pass through. positions and inv_freq (and the
// slots below) must not be the output of the kernel just before on the
// stream: under programmatic dependent launch (kernels/launch.cuh) they are
// read, and the angles computed, before the wait for it. In the backend
// they are the step's inputs, copied from the host, and a table made at
// load.
void launch_rope(float* x, int64_t ld, int rows, int n_heads, int head_dim, int rot_dims,
                 const int32_t* positions, const float* inv_freq, RopeOrdering ordering,
                 cudaStream_t stream);

// The decode step's RoPE in one launch: q (n_heads per row, stride ldq) and
// k (n_kv_heads, stride ldkv) rotate over the whole head_dim, and each
// token's rotated k and its v (stride ldkv) go into its fp16 cache slot
// (slots[t], as launch_kv_write). Replaces two launch_rope and one
// launch_kv_write.
void launch_rope_qk_kv_write(float* q, int64_t ldq, float* k, const float* v, int64_t ldkv, int rows,
                             int n_heads, int n_kv_heads, int head_dim, const int32_t* positions,
                             const float* inv_freq, RopeOrdering ordering, const int32_t* slots,
                             KvLayerView cache, cudaStream_t stream);

}  // namespace voltad::kernels
