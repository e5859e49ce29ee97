// SwiGLU and bias add: grid-stride over rows x n, one value per thread.
#include <cstdio>
#include <cstdlib>

#include "kernels/activation.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/quantize_warp.cuh"

namespace voltad::kernels {

__global__ void kernel_swiglu(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                              float* out, int64_t ld_out, int rows, int n) {
  wait_then_release_next();
  const int64_t total = int64_t(rows) * n;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / n, i = idx % n;
    const float g = gate[r * ld_gate + i];
    out[r * ld_out + i] = g / (1.0f + expf(-g)) * up[r * ld_up + i];
  }
}

// SwiGLU with the output also quantized: one warp per block of 32 values.
// n % 32 == 0. The warp count is exact (no grid-stride), so every lane of a
// warp reaches the quantizer's shuffles.
__global__ void kernel_swiglu_quantize(const float* gate, int64_t ld_gate, const float* up,
                                       int64_t ld_up, float* out, int64_t ld_out, int rows, int n,
                                       QuantizedActivations xq) {
  wait_then_release_next();
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t blocks_per_row = n / kActivationBlock;
  if (warp >= int64_t(rows) * blocks_per_row) return;  // whole warps only
  const int64_t r = warp / blocks_per_row, b = warp % blocks_per_row;
  const int64_t i = b * kActivationBlock + (threadIdx.x & 31);
  const float g = gate[r * ld_gate + i];
  const float v = g / (1.0f + expf(-g)) * up[r * ld_up + i];
  out[r * ld_out + i] = v;
  quantize_block_warp(v, xq, r, n, b);
}

// SwiGLU with the output also written as the sm_80 narrow GEMM's x
// (kernels/narrow_x.cuh): one warp per 32 values, rows up to n8 (the rows
// from `rows` on as zeros). n % 32 == 0.
__global__ void kernel_swiglu_narrow_x(const float* gate, int64_t ld_gate, const float* up,
                                       int64_t ld_up, float* out, int64_t ld_out, int rows, int n8,
                                       int n, uint32_t* xp) {
  wait_then_release_next();
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t blocks_per_row = n / kActivationBlock;
  if (warp >= int64_t(n8) * blocks_per_row) return;  // whole warps only
  const int64_t r = warp / blocks_per_row, b = warp % blocks_per_row;
  const int lane = int(threadIdx.x & 31);
  const int64_t i = b * kActivationBlock + lane;
  float v = 0.0f;
  if (r < rows) {
    const float g = gate[r * ld_gate + i];
    v = g / (1.0f + expf(-g)) * up[r * ld_up + i];
    out[r * ld_out + i] = v;
  }
  write_narrow_x_warp(v, lane, b, int(r), n8, blocks_per_row, xp);
}

__global__ void kernel_add_bias(float* y, int64_t ldy, const float* bias, int rows, int n) {
  wait_then_release_next();
  const int64_t total = int64_t(rows) * n;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / n, i = idx % n;
    y[r * ldy + i] += bias[i];
  }
}

namespace {
unsigned grid_for(int64_t total, int threads) {
  const int64_t blocks = (total + threads - 1) / threads;
  return unsigned(blocks > 65535 ? 65535 : blocks);
}
}  // namespace

void launch_swiglu(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* out,
                   int64_t ld_out, int rows, int n, cudaStream_t stream) {
  if (rows < 0 || n < 0 || ld_gate < n || ld_up < n || ld_out < n) {
    std::fprintf(stderr, "launch_swiglu: bad shape rows=%d n=%d\n", rows, n);
    std::abort();
  }
  if (int64_t(rows) * n == 0) return;
  launch_kernel(kernel_swiglu, grid_for(int64_t(rows) * n, 256), 256, 0, stream, gate, ld_gate, up,
                ld_up, out, ld_out, rows, n);
  CUDA_CHECK(cudaGetLastError());
}

void launch_swiglu_quantize(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                            float* out, int64_t ld_out, int rows, int n, QuantizedActivations xq,
                            cudaStream_t stream) {
  if (rows < 0 || n < 0 || n % kActivationBlock != 0 || ld_gate < n || ld_up < n || ld_out < n) {
    std::fprintf(stderr, "launch_swiglu_quantize: bad shape rows=%d n=%d\n", rows, n);
    std::abort();
  }
  const int64_t threads = int64_t(rows) * n;  // one lane per value
  if (threads == 0) return;
  launch_kernel(kernel_swiglu_quantize, unsigned((threads + 255) / 256), 256, 0, stream, gate,
                ld_gate, up, ld_up, out, ld_out, rows, n, xq);
  CUDA_CHECK(cudaGetLastError());
}

void launch_swiglu_narrow_x(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                            float* out, int64_t ld_out, int rows, int n, void* narrow_x,
                            cudaStream_t stream) {
  if (rows < 0 || n < 0 || n % kActivationBlock != 0 || ld_gate < n || ld_up < n || ld_out < n) {
    std::fprintf(stderr, "launch_swiglu_narrow_x: bad shape rows=%d n=%d\n", rows, n);
    std::abort();
  }
  const int n8 = (rows + 7) / 8 * 8;
  const int64_t threads = int64_t(n8) * n;  // one lane per value
  if (threads == 0) return;
  launch_kernel(kernel_swiglu_narrow_x, unsigned((threads + 255) / 256), 256, 0, stream, gate,
                ld_gate, up, ld_up, out, ld_out, rows, n8, n, static_cast<uint32_t*>(narrow_x));
  CUDA_CHECK(cudaGetLastError());
}

void launch_add_bias(float* y, int64_t ldy, const float* bias, int rows, int n,
                     cudaStream_t stream) {
  if (rows < 0 || n < 0 || ldy < n) {
    std::fprintf(stderr, "launch_add_bias: bad shape rows=%d n=%d\n", rows, n);
    std::abort();
  }
  if (int64_t(rows) * n == 0) return;
  launch_kernel(kernel_add_bias, grid_for(int64_t(rows) * n, 256), 256, 0, stream, y, ldy, bias,
                rows, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
