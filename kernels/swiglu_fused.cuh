// SwiGLU made by the portable narrow GEMM of gate|up (kernels/gemm_wmma.h,
// SwigluOut): the epilogue of a block whose lanes 0-15 hold gate's rows
// g0..g0+15 (g0 = 16 blockIdx.y) and lanes 16-31 up's same rows.
// Plain CUDA (shuffles): builds for sm_70 too.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/gemm_wmma.h"

namespace voltad::kernels {

// The block of W warps and T tokens from t0, its warps' partial sums in
// `red` ([warp][token][kRedLd] floats, added in warp order as the plain
// epilogue adds them), makes silu(g) * u for its 16 values of each token, a
// warp a token, with launch_swiglu_narrow_x's arithmetic on the values
// gate|up's y would hold (times the norm's piece scale where x is made of
// pieces): the same bits. They are half of chunk g0 / 32 of w_down's fp16
// x (kernels/narrow_x.cuh: value v and v + 2 paired in word 4 (v / 4 % 4) +
// 2 (v / 16) + v % 2); tokens from n to n rounded up to 8 get zeros.
template <int W, int T, int kRedLd>
__device__ __forceinline__ void finish_swiglu(const GemmArgs& a, const float* red,
                                              const float* piece_scale, int t0) {
  const int lane = threadIdx.x & 31;
  const int n8 = (a.n + 7) / 8 * 8;
  const int half16 = int(blockIdx.y & 1);  // which half of the chunk
  uint32_t* x = a.swiglu_out.x + (int64_t(blockIdx.y >> 1) * n8) * 16 + 4 * ((lane >> 2) & 3) +
                2 * half16 + (lane & 1);
  for (int tm = threadIdx.x >> 5; tm < T; tm += W) {  // whole warps
    const int t = t0 + tm;
    if (t >= n8) break;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) v += red[(w * T + tm) * kRedLd + lane];
    if (a.norm_scale) v *= piece_scale[tm];
    const float u = __shfl_down_sync(0xFFFFFFFFu, v, 16);
    const float s = t < a.n ? v / (1.0f + expf(-v)) * u : 0.0f;
    const uint32_t bits = __half_as_ushort(__float2half_rn(s));
    const uint32_t next = __shfl_down_sync(0xFFFFFFFFu, bits, 2);
    if (lane < 16 && (lane & 2) == 0) x[int64_t(t) * 16] = bits | (next << 16);
  }
}

}  // namespace voltad::kernels
