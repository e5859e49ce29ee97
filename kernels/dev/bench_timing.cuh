// CUDA-event timing shared by the dev benches (kernels/dev/bench_*.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda_check.h"

namespace bench_timing {

inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds a call of `body`: one warm-up call, then `rounds` rounds of
// `reps` calls between two events on `stream`; the median of the rounds'
// means.
template <class F>
float time_ms(F&& body, cudaStream_t stream = nullptr, int reps = 1, int rounds = 7) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  body();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> t;
  for (int r = 0; r < rounds; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < reps; ++i) body();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(ms / float(reps));
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return median(t);
}

}  // namespace bench_timing
