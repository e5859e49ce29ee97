#include "kernels/cuda_check.h"
#include "kernels/gather.h"
#include "kernels/launch.cuh"

namespace voltad::kernels {

__global__ void kernel_gather_rows(const float* src, int64_t ld_src,
                                   const int32_t* __restrict__ rows, int width,
                                   float* __restrict__ dst, int64_t ld_dst) {
  wait_then_release_next();
  const float* s = src + int64_t(rows[blockIdx.x]) * ld_src;
  float* d = dst + int64_t(blockIdx.x) * ld_dst;
  for (int i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

void launch_gather_rows(const float* src, int64_t ld_src, const int32_t* rows, int n_rows,
                        int width, float* dst, int64_t ld_dst, cudaStream_t stream) {
  if (n_rows == 0) return;
  launch_kernel(kernel_gather_rows, unsigned(n_rows), 256, 0, stream, src, ld_src, rows, width, dst,
                ld_dst);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
