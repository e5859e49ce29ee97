// Queries about the card that are not the backend's compute: its memory and
// its PCI address (engine/backend_cuda.h). Built only with CUDA.
#include <cuda_runtime.h>

#include <cstdlib>

#include "engine/backend_cuda.h"

namespace voltad {

namespace {
Error cuda_error(const std::string& what, cudaError_t e) {
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

}  // namespace voltad
