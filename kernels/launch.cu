// The per-thread kernel set and the programmatic-launch switch
// (kernels/launch.cuh, kernels/kernel_set.h).
#include "kernels/launch.cuh"

#include "kernels/cuda_check.h"

namespace voltad::kernels {

namespace {

thread_local KernelSet t_kernel_set = KernelSet::Portable;

__global__ void kernel_probe() {}

// The device is sm_90+ and the code loaded for it came from sm_90+ PTX (a
// build whose newest target is older runs kernels without the wait).
bool device_takes_programmatic_launch() {
  static const bool ok = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, kernel_probe) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9 && attr.ptxVersion >= 90 && attr.binaryVersion >= 90;
  }();
  return ok;
}

}  // namespace

KernelSetScope::KernelSetScope(KernelSet set) : previous_(t_kernel_set) {
  t_kernel_set = set;
}
KernelSetScope::~KernelSetScope() {
  t_kernel_set = previous_;
}
KernelSet current_kernel_set() {
  return t_kernel_set;
}

int device_sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

size_t device_smem_optin() {
  static const size_t bytes = [] {
    int device = 0, value = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return size_t(value);
  }();
  return bytes;
}

bool programmatic_launch_supported() {
  return device_takes_programmatic_launch();
}

bool programmatic_launch_enabled() {
  return t_kernel_set == KernelSet::Auto && device_takes_programmatic_launch();
}

}  // namespace voltad::kernels
