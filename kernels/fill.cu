#include "kernels/cuda_check.h"
#include "kernels/fill.h"
#include "kernels/launch.cuh"

namespace voltad::kernels {

template <class T>
__global__ void kernel_fill(T* out, size_t n, T value) {
  wait_for_previous_kernel();
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class T>
static void launch_fill(T* out, size_t n, T value, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const size_t blocks = (n + threads - 1) / threads;
  const int grid = blocks > 4096 ? 4096 : int(blocks);
  launch_kernel(kernel_fill<T>, grid, threads, 0, stream, out, n, value);
  CUDA_CHECK(cudaGetLastError());
}

void launch_fill_f32(float* out, size_t n, float value, cudaStream_t stream) {
  launch_fill(out, n, value, stream);
}

void launch_fill_u16(uint16_t* out, size_t n, uint16_t bits, cudaStream_t stream) {
  launch_fill(out, n, bits, stream);
}

}  // namespace voltad::kernels
