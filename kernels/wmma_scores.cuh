// Attention scores on the tensor cores through wmma (sm_70+), for the
// prefill attention (attention_prefill.cu) and the decode pass 1 of
// attention_wmma.cu: S += Q K^T for one 16 x 16 tile.
#pragma once

#include <cuda_fp16.h>
#include <mma.h>

namespace voltad::kernels {

// q: 16 rows of D halves (row stride ld); k: 16 key rows of D halves, the
// tile's columns (row stride ld). D a multiple of 16; both 32-byte aligned.
template <int D>
__device__ __forceinline__ void wmma_scores(
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>& s, const __half* q,
    const __half* k, int ld) {
  namespace wmma = nvcuda::wmma;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> qa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kb;
    wmma::load_matrix_sync(qa, q + kk * 16, ld);
    wmma::load_matrix_sync(kb, k + kk * 16, ld);
    wmma::mma_sync(s, qa, kb, s);
  }
}

}  // namespace voltad::kernels
