// The x operand of the sm_80 narrow GEMM (kernels/gemm_narrow_sm80.cu),
// written by a warp that holds one 32-value chunk of one token, a value per
// lane: for kernels that produce x (RMSNorm, SwiGLU, the attention combine)
// to write it in the GEMM's
// layout themselves, so that the GEMMs skip their conversion launch
// (GemmScratch::holds_x). The layout, for n8 token rows (n rounded up to 8)
// and `chunks` chunks per row, in 32-bit words:
//   - at (c * n8 + t) * 16: the chunk's 32 values as 16 fp16 pairs, lane
//     i's four B operands at words 4i..4i+3: the pairs (4i, 4i+2),
//     (4i+1, 4i+3), (16+4i, 18+4i), (17+4i, 19+4i) (value v, v+2 at word
//     4 * (v / 4 % 4) + 2 * (v / 16) + v % 2): the values whose weights
//     are the nibbles of the chunk's word i (kernels/gemm_narrow_sm80.cu);
//   - at n8 * chunks * 16 + c * n8 + t: the sum of the chunk's 32 fp16
//     values times kNarrowXSumScale as an fp16 pair (hi, lo = the rest),
//     for the Int4K256 mins (pack_x_sum).
// Plain CUDA (fp16 conversions and shuffles): builds for sm_70 too.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace voltad::kernels {

// 32 fp16 values sum to at most 32 x 65504 in magnitude; scaled by 1/64 the
// sum stays within fp16 (an unscaled sum past 65504 made hi and lo infinite
// and the whole row NaN). A power of two: exact, undone exactly in the GEMM.
constexpr float kNarrowXSumScale = 1.0f / 64.0f;

// A chunk's x sum as the GEMM reads it: (hi, lo) fp16 of sum * kNarrowXSumScale.
__device__ __forceinline__ uint32_t pack_x_sum(float sum) {
  const float scaled = sum * kNarrowXSumScale;
  const __half hi = __float2half_rn(scaled);
  const __half lo = __float2half_rn(scaled - __half2float(hi));
  return uint32_t(__half_as_ushort(hi)) | (uint32_t(__half_as_ushort(lo)) << 16);
}

__device__ __forceinline__ void write_narrow_x_warp(float v, int lane, int64_t c, int t, int n8,
                                                    int64_t chunks, uint32_t* xp) {
  const __half h = __float2half_rn(v);
  const uint32_t bits = __half_as_ushort(h);
  const uint32_t next = __shfl_down_sync(0xFFFFFFFFu, bits, 2);
  if ((lane & 2) == 0)
    xp[(c * n8 + t) * 16 + 4 * ((lane >> 2) & 3) + 2 * (lane >> 4) + (lane & 1)] =
        bits | (next << 16);
  float sum = __half2float(h);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  if (lane == 0) xp[int64_t(n8) * chunks * 16 + c * n8 + t] = pack_x_sum(sum);
}

}  // namespace voltad::kernels
