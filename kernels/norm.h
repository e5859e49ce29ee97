// RMSNorm over rows: out = x * rsqrt(mean(x^2) + eps) * weight, with the
// residual add fused in front where the residual stream is updated anyway.
// fp32 in and out; in place (out == x) is allowed. Host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec.h"

namespace voltad::kernels {

// rows x dim, row strides ldx / ldo (elements).
void launch_rmsnorm(const float* x, int64_t ldx, const float* weight, float* out, int64_t ldo,
                    int rows, int dim, float eps, cudaStream_t stream);

// launch_rmsnorm, and the output also quantized into xq (rows x dim, the
// layout of kernels/matvec.h) for the matvec that reads it: one launch
// instead of two. dim % 32 == 0; out must not overlap x (several blocks
// share a row, and each reads all of it).
void launch_rmsnorm_quantize(const float* x, int64_t ldx, const float* weight, float* out, int64_t ldo,
                             int rows, int dim, float eps, QuantizedActivations xq, cudaStream_t stream);

// launch_rmsnorm, and the output also written as the sm_80 narrow GEMM's x
// (kernels/narrow_x.cuh: rows rounded up to 8, the extra rows zeros) into
// `narrow_x`, so that the GEMMs that read `out` next skip their conversion
// (GemmScratch::holds_x in kernels/gemm_sm80.h). dim % 32 == 0; out must not
// overlap x. Returns
// false where nothing was launched (rows == 0).
bool launch_rmsnorm_narrow_x(const float* x, int64_t ldx, const float* weight, float* out,
                             int64_t ldo, int rows, int dim, float eps, void* narrow_x,
                             cudaStream_t stream);

// residual += delta, then out = rmsnorm(residual) * weight. residual and
// delta share the stride ld; out has ldo.
void launch_add_rmsnorm(float* residual, const float* delta, int64_t ld, const float* weight,
                        float* out, int64_t ldo, int rows, int dim, float eps, cudaStream_t stream);

// Per-head RMSNorm (Qwen3's q_norm/k_norm), in place: x holds rows of
// n_heads * head_dim (stride ld), each head normalized with the same
// weight (head_dim).
void launch_head_rmsnorm(float* x, int64_t ld, int rows, int n_heads, int head_dim,
                         const float* weight, float eps, cudaStream_t stream);

}  // namespace voltad::kernels
