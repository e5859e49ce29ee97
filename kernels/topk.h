// Top-k of logits on the GPU, so that sampling needs k values per sequence
// across PCIe instead of the whole vocabulary. Host declarations only.
//
// For each row: the k largest of logits[row][0..n), sorted from largest,
// ties to the lower index; NaN ranks below every number (-inf included), so
// it appears only when a row has fewer than k numbers. k = 1 is argmax with
// the tie rule of kernels/sampling_argmax.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace voltad::kernels {

constexpr int kTopKMax = 64;
constexpr int kTopKChunk = 4096;  // values per block of the first pass

// Bytes of scratch launch_topk needs (0 when n <= kTopKChunk).
inline size_t topk_scratch_bytes(int rows, int64_t n, int k) {
  const int64_t chunks = (n + kTopKChunk - 1) / kTopKChunk;
  return chunks > 1 ? size_t(rows) * size_t(chunks) * size_t(k) * 8 : 0;
}

// Limits: 1 <= k <= min(kTopKMax, n) and ceil(n / kTopKChunk) * k <= 4096
// (n <= 262144 at k = 64). out_ids and out_vals: rows x k, row-major.
// noise: null, or one RowNoise a row (device memory, kernels/gumbel.h):
// a row whose noise is on is ranked by its keys logit / T + G instead of its
// logits (its first id is then a draw at temperature T), and out_vals still
// holds its logits.
struct RowNoise;
void launch_topk(const float* logits, int64_t ld, int rows, int64_t n, int k, int32_t* out_ids,
                 float* out_vals, void* scratch, cudaStream_t stream,
                 const RowNoise* noise = nullptr);

}  // namespace voltad::kernels
