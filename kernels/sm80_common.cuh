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

// D = A B + C on the tensor cores, m16n8k16, FP16 inputs, FP32 sums
// (fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16").
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The same with C = 0: the first product of a sum.
__device__ __forceinline__ void mma_16816_first(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
#endif
}

// Four 8x8 matrices of 16-bit elements from shared memory, lanes 8i..8i+7
// giving the addresses of matrix i's rows (16 bytes each): lane (g, t)
// receives in d[i] row g, elements 2t and 2t+1 of matrix i; with kTrans,
// rows 2t and 2t+1, element g (the transpose).
template <bool kTrans>
__device__ __forceinline__ void load_matrices_x4(uint32_t (&d)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(shared_address(row)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(shared_address(row)));
#endif
}

}  // namespace voltad::kernels::sm80
