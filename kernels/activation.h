// Pointwise kernels of the feed-forward and attention blocks. fp32; host
// declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec.h"

namespace voltad::kernels {

// out[b][i] = silu(gate[b][i]) * up[b][i], silu(g) = g / (1 + exp(-g)).
// Each operand has its own row stride, so gate and up may be the two halves
// of one fused matvec output.
void launch_swiglu(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* out,
                   int64_t ld_out, int rows, int n, cudaStream_t stream);

// launch_swiglu, and the output also quantized into xq (rows x n, the layout
// of kernels/matvec.h) for the down projection. n % 32 == 0.
void launch_swiglu_quantize(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* out,
                            int64_t ld_out, int rows, int n, QuantizedActivations xq, cudaStream_t stream);

// launch_swiglu, and the output also written as the sm_80 narrow GEMM's x
// (kernels/narrow_x.cuh) into `narrow_x`, for the down projection to skip its
// conversion (GemmScratch::holds_x = out). n % 32 == 0.
void launch_swiglu_narrow_x(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* out,
                            int64_t ld_out, int rows, int n, void* narrow_x, cudaStream_t stream);

// y[b][i] += bias[i] (Qwen2's q/k/v biases when not fused into the matvec).
void launch_add_bias(float* y, int64_t ldy, const float* bias, int rows, int n,
                     cudaStream_t stream);

}  // namespace voltad::kernels
