// Bulk copies and mbarriers (sm_90: cp.async.bulk), shared by the kernels
// whose producer warp fills a ring of stages in shared memory for consumer
// warps: the batch-1 matvecs (matvec_bulk_sm90.cu) and the narrow GEMM's
// streaming blocks (narrow_bulk_sm90.cu). Below sm_90 each is empty: the
// hosts launch those kernels only where programmatic_launch_enabled() says
// the binary holds sm_90 code for the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels::bulk {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define VOLTAD_BULK_SM90 1
#else
#define VOLTAD_BULK_SM90 0
#endif

using sm80::shared_address;

__device__ __forceinline__ void barrier_init(uint64_t* b, int count) {
#if VOLTAD_BULK_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(b)), "r"(count)
               : "memory");
#endif
}
// Makes the initialized barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void barrier_init_fence() {
#if VOLTAD_BULK_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// The producer's arrival, announcing `bytes` of copies to come.
__device__ __forceinline__ void barrier_expect(uint64_t* b, uint32_t bytes) {
#if VOLTAD_BULK_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(b)),
               "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void barrier_arrive(uint64_t* b) {
#if VOLTAD_BULK_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(b)) : "memory");
#endif
}
// Until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(uint64_t* b, uint32_t parity) {
#if VOLTAD_BULK_SM90
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(b)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}
__device__ __forceinline__ void fence_proxy_async() {
#if VOLTAD_BULK_SM90
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to
// shared memory, completing on barrier b.
__device__ __forceinline__ void copy_bulk(void* dst, const void* src, uint32_t bytes, uint64_t* b) {
#if VOLTAD_BULK_SM90
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(b))
      : "memory");
#endif
}

// A ring's barriers, set up by thread 0 before the block meets: full[d]
// waits for the producer's one arrival and its bytes, empty[d] for each
// consumer warp's release.
__device__ __forceinline__ void init_ring(uint64_t* full, uint64_t* empty, int stages,
                                          int consumer_warps) {
  if (threadIdx.x == 0) {
    for (int d = 0; d < stages; ++d) {
      barrier_init(&full[d], 1);
      barrier_init(&empty[d], consumer_warps);
    }
    barrier_init_fence();
  }
  __syncthreads();
}

// How many of `groups` row groups this block walks (b, b + gridDim.x, ...).
__device__ __forceinline__ int groups_of_block(int64_t groups) {
  return int((groups - blockIdx.x + gridDim.x - 1) / gridDim.x);
}

// Host: blocks an SM of `kernel` with `threads` threads and `smem` bytes of
// dynamic shared memory, 0 where the device gives a block less than that
// (an sm_120 card: ~99 KB), after opting the kernel in to that much.
template <class Kernel>
int blocks_per_sm_with(Kernel kernel, int threads, int smem) {
  if (size_t(smem) > size_t(sm80::device().max_smem)) return 0;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  return blocks;
}

}  // namespace voltad::kernels::bulk
