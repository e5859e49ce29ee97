// The next RMSNorm made in pieces by the portable narrow GEMM that writes
// the residual stream (kernels/gemm_wmma.h, NormPieces; runs 62-63): what
// its epilogue does, a warp holding one token's 32 rows of h (one chunk
// of the readers' k), and what its last block does.
// Plain CUDA (shuffles, fences, an atomic): builds for sm_70 too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_common.cuh"
#include "kernels/gemm_wmma.h"
#include "kernels/narrow_x.cuh"

namespace voltad::kernels {

// Lane `lane` holds h = v at `row` of chunk c for token t (of n, `rows`
// rows in all): g * h * kNormPieceScale goes to the readers' fp16 x, the
// chunk's sum of h^2 to sumsq, token-major.
__device__ __forceinline__ void write_norm_piece_warp(const NormPieces& p, float v, int64_t row,
                                                      int lane, int64_t c, int t, int n,
                                                      int64_t rows) {
  const int64_t chunks = rows / 32;
  write_narrow_x_warp(v * p.weight[row] * kNormPieceScale, lane, c, t, (n + 7) / 8 * 8, chunks,
                      p.x);
  const float squares = warp_sum(v * v);
  if (lane == 0) p.sumsq[t * chunks + c] = squares;
}

// The block (of W warps) that counts in last, once every block's sums of
// squares are visible device-wide, adds each token's (a warp a token, in
// chunk order then the warp's fixed shuffle order: the same sum in every
// run) and writes its scale, 1 / (rms * kNormPieceScale). It leaves the
// counter zero for the next launch (atomicInc wraps). Every thread of
// every block calls it; `smem` is free shared memory (a word).
template <int W>
__device__ __forceinline__ void finish_norm_pieces(const NormPieces& p, int n, int64_t rows,
                                                   unsigned char* smem) {
  __threadfence();
  __syncthreads();  // the caller is done with shared memory too
  unsigned* last = reinterpret_cast<unsigned*>(smem);
  if (threadIdx.x == 0) {
    const unsigned blocks = gridDim.x * gridDim.y;
    *last = atomicInc(p.arrivals, blocks - 1) == blocks - 1;
  }
  __syncthreads();
  if (!*last) return;
  __threadfence();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunks = int(rows / 32);
  for (int t = warp; t < n; t += W) {
    float s = 0.0f;
    for (int c = lane; c < chunks; c += 32) s += __ldcg(p.sumsq + int64_t(t) * chunks + c);
    s = warp_sum(s);
    if (lane == 0) p.scale[t] = rsqrtf(s / float(rows) + p.eps) * (1.0f / kNormPieceScale);
  }
}

}  // namespace voltad::kernels
