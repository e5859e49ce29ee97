// Queries about the card that are not the backend's compute: its memory, its
// PCI address and its copy bandwidth (engine/backend_cuda.h). Built only
// with CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "engine/backend_cuda.h"
#include "kernels/cuda_check.h"

namespace voltad {

namespace {
Error cuda_error(const std::string& what, cudaError_t e) {
  (void)cudaGetLastError();  // as in backend_cuda_impl.h: no stale error for a later check
  return make_error(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
}  // namespace

void prefer_eager_kernel_loading() {
  setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
}

Result<CudaDeviceMemory> cuda_device_memory(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_error("cudaSetDevice(" + std::to_string(device) + ")", e);
  size_t free_bytes = 0, total_bytes = 0;
  e = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (e != cudaSuccess) return cuda_error("cudaMemGetInfo", e);
  return CudaDeviceMemory{uint64_t(free_bytes), uint64_t(total_bytes)};
}

Result<std::string> cuda_pci_bus_id(int device) {
  char id[32] = {};
  cudaError_t e = cudaDeviceGetPCIBusId(id, int(sizeof id), device);
  if (e != cudaSuccess)
    return cuda_error("cudaDeviceGetPCIBusId(" + std::to_string(device) + ")", e);
  return std::string(id);
}

Result<double> measure_copy_bandwidth(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_error("cudaSetDevice", e);
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  if ((e = cudaMalloc(&a, bytes)) != cudaSuccess) return cuda_error("allocating 1 GiB for the copy benchmark", e);
  if ((e = cudaMalloc(&b, bytes)) != cudaSuccess) {
    cudaFree(a);
    return cuda_error("allocating 1 GiB for the copy benchmark", e);
  }
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaMemset(a, 1, bytes));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 2) ms.push_back(t);  // the first copies warm up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(bytes) / (double(ms[ms.size() / 2]) * 1e-3);
}

}  // namespace voltad
