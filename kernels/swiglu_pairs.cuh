// SwiGLU made by the portable narrow GEMM of gate|up in pairs of blocks
// (kernels/gemm_wmma.h, SwigluPairs): what a block does once its y is
// written.
// Plain CUDA (shuffles, fences, an atomic): builds for sm_70 too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemm_wmma.h"
#include "kernels/narrow_x.cuh"

namespace voltad::kernels {

// The block of W warps, T tokens from t0 and gate|up's rows r0..r0+31
// counts itself in on its pair's counter (the same token tile, gate's and
// up's same 32 rows) once its y is visible device-wide. The second to
// count makes the pair's silu(g) * u, a warp a token: over gate's y and as
// w_down's fp16 x (one chunk of its k; tokens n to n rounded up to 8 as
// zeros), with launch_swiglu_narrow_x's arithmetic, so the same bits. It
// leaves the counter zero for the next launch (atomicInc wraps). Every
// thread of every block calls it; `smem` is free shared memory (a word).
template <int W, int T>
__device__ __forceinline__ void finish_swiglu_pair(const GemmArgs& a, int64_t r0, int t0,
                                                   unsigned char* smem) {
  const SwigluPairs& p = a.swiglu_out;
  const int64_t chunks = p.half / 32, g0 = r0 % p.half;
  __threadfence();
  __syncthreads();  // the caller is done with shared memory too
  unsigned* second = reinterpret_cast<unsigned*>(smem);
  if (threadIdx.x == 0) *second = atomicInc(p.arrivals + blockIdx.x * chunks + g0 / 32, 1) == 1;
  __syncthreads();
  if (!*second) return;
  __threadfence();
  const int lane = threadIdx.x & 31;
  const int n8 = (a.n + 7) / 8 * 8;
  for (int tm = threadIdx.x >> 5; tm < T && t0 + tm < n8; tm += W) {  // whole warps
    const int t = t0 + tm;
    float v = 0.0f;
    if (t < a.n) {
      float* gate = a.y + int64_t(t) * a.ldy + g0 + lane;
      const float g = __ldcg(gate), u = __ldcg(gate + p.half);
      v = g / (1.0f + expf(-g)) * u;
      *gate = v;
    }
    write_narrow_x_warp(v, lane, g0 / 32, t, n8, chunks, p.x);
  }
}

}  // namespace voltad::kernels
