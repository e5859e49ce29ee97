// log(sum(exp(x))) of rows of logits. Contract in log_sum_exp.h.
//
// One block a row: its max, then the sum of exp(x - max). Each term is a
// float in (0, 1]; a thread sums its share (n / 256 terms, ~500 for a
// vocabulary of 128k) in float and the block sums the threads' partial sums
// in double, and the result is a double (max + log(sum)): a near-certain
// token's log-probability, a tiny difference from log_z, keeps its digits.
// A row of 128k floats is 512 KB read once more after the lm head wrote it,
// by one block: a few microseconds a step.
#include <cmath>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/log_sum_exp.h"

namespace voltad::kernels {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    kernel_row_log_sum_exp(const float* x, int64_t ld, int64_t n, double* out) {
  wait_for_previous_kernel();  // the row is the step's (launch.cuh)
  __shared__ float max_of_warp[kThreads / 32];
  __shared__ double sum_of_warp[kThreads / 32];
  const float* row = x + int64_t(blockIdx.x) * ld;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, row[i]);
  m = warp_max(m);
  if (lane == 0) max_of_warp[warp] = m;
  __syncthreads();
  m = max_of_warp[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, max_of_warp[w]);
  if (m == -INFINITY) {  // every value -inf: the normalizer is 0
    if (threadIdx.x == 0) out[blockIdx.x] = -double(INFINITY);
    return;
  }

  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += expf(row[i] - m);
  double total = warp_sum_double(double(s));
  if (lane == 0) sum_of_warp[warp] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    total = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) total += sum_of_warp[w];
    out[blockIdx.x] = double(m) + log(total);
  }
}

}  // namespace

void launch_row_log_sum_exp(const float* x, int64_t ld, int rows, int64_t n, double* out,
                            cudaStream_t stream) {
  if (rows == 0) return;
  VOLTAD_KERNEL_REQUIRE(rows > 0, "log_sum_exp: rows >= 0 (none: nothing to do)");
  VOLTAD_KERNEL_REQUIRE(x && out && n >= 1 && ld >= n, "log_sum_exp: buffers, n >= 1, ld >= n");
  launch_kernel(kernel_row_log_sum_exp, unsigned(rows), kThreads, 0, stream, x, ld, n, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
