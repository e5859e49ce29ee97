// Argmax per row: one block per row; each thread scans a strided slice, then
// (value, index) pairs reduce by warp shuffles and once more across warps.
// Order: larger value wins, equal values go to the lower index; NaN counts
// as -inf, and a row with nothing better than -inf yields its first -inf or,
// for all-NaN rows, 0.
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/sampling_argmax.h"

namespace voltad::kernels {

namespace {
__device__ __forceinline__ bool better(float v, int64_t i, float best_v, int64_t best_i) {
  return v > best_v || (v == best_v && i < best_i);
}
}  // namespace

__global__ void kernel_argmax(const float* logits, int64_t ld, int64_t n, int32_t* out) {
  wait_for_previous_kernel();
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const float* row = logits + blockIdx.x * ld;
  float best_v = -INFINITY;
  int64_t best_i = n;  // sentinel: nothing seen yet
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    float v = row[k];
    if (isnan(v)) v = -INFINITY;
    if (better(v, k, best_v, best_i)) {
      best_v = v;
      best_i = k;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, best_v, o);
    const int64_t i = __shfl_xor_sync(kFullMask, best_i, o);
    if (better(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = best_v;
    si[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    const int n_warps = blockDim.x >> 5;
    best_v = lane < n_warps ? sv[lane] : -INFINITY;
    best_i = lane < n_warps ? si[lane] : n;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(kFullMask, best_v, o);
      const int64_t i = __shfl_xor_sync(kFullMask, best_i, o);
      if (better(v, i, best_v, best_i)) {
        best_v = v;
        best_i = i;
      }
    }
    if (lane == 0) out[blockIdx.x] = best_i == n ? 0 : int32_t(best_i);
  }
}

void launch_argmax(const float* logits, int64_t ld, int rows, int64_t n, int32_t* out,
                   cudaStream_t stream) {
  if (rows < 0 || n <= 0 || ld < n || n > INT32_MAX) {
    std::fprintf(stderr, "launch_argmax: bad shape rows=%d n=%lld ld=%lld\n", rows, (long long)n,
                 (long long)ld);
    std::abort();
  }
  if (rows == 0) return;
  launch_kernel(kernel_argmax, rows, 1024, 0, stream, logits, ld, n, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
