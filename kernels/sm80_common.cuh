// What the sm_80+ kernels (gemm_sm80.cu, gemm_narrow_sm80.cu) share: the
// device's limits and whether this binary holds sm_80+ code for them, and
// the cp.async helpers (under __CUDA_ARCH__ >= 800 only: elsewhere they
// compile to nothing). No portable kernel includes this file.
#pragma once

#include <cstdint>

namespace voltad::kernels::sm80 {

// The current device, read once (defined in gemm_sm80.cu).
struct Device {
  int major = 0;
  int sms = 0;
  int max_smem = 0;  // opt-in shared memory per block
  int smem_per_sm = 0;
  bool code = false;  // this binary has sm_80+ code for the variants
};
const Device& device();

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
// Copies `Bytes` (4, 8 or 16) from global to shared; only the first
// src_bytes (Bytes or 0) are read, the rest zero-filled.
template <int Bytes>
__device__ __forceinline__ void copy_async(void* dst, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (Bytes == 16)  // .cg: weights and x are read once per block; keep L1 for others
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(src_bytes));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared_address(dst)),
                 "l"(src), "n"(Bytes), "r"(src_bytes));
#endif
}
__device__ __forceinline__ void copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int Pending>
__device__ __forceinline__ void copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
#endif
}

}  // namespace voltad::kernels::sm80
