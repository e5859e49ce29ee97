// CUDA_CHECK: driver and launch failures are bugs or a dead device, not user
// input: report file:line and the CUDA error, then abort. (Host code only.)
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    cudaError_t cuda_check_err_ = (call);                                           \
    if (cuda_check_err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: CUDA error %s: %s (in %s)\n", __FILE__, __LINE__, \
                   cudaGetErrorName(cuda_check_err_),                               \
                   cudaGetErrorString(cuda_check_err_), #call);                     \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

// Launcher preconditions: a caller bug, reported with file:line.
#define VOLTAD_KERNEL_REQUIRE(cond, what)                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: kernel precondition failed: %s (%s)\n", __FILE__, \
                   __LINE__, what, #cond);                                             \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
