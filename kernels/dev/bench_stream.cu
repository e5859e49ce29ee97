// The batch-1 streaming matvecs alone (not part of the build): a driver that
// compiles in seconds, for Nsight Compute and quick timing on the GPU
// machine. It includes only the streaming kernels (kernels/matvec_stream.cu)
// and the dispatch's helpers; bench_matvec.cu times every variant but takes
// a minute or more to compile.
//
//   nvcc -std=c++17 -O3 -I. -arch=sm_90 --expt-relaxed-constexpr -lineinfo \
//     kernels/dev/bench_stream.cu -o /tmp/bench_stream && /tmp/bench_stream
//   ncu --section WarpStateStats --section SourceCounters -k regex:kernel_matvec_stream \
//     --launch-skip 8 --launch-count 2 -o /tmp/stream /tmp/bench_stream
//
// Llama-3-8B's gate|up, q|k|v and o (Q4_K) and down (Q6_K, 4,096 x 14,336)
// matrices, each one of several copies used in turn so that no
// launch finds its weights in L2. Weight bytes are a fixed pattern (timing
// does not depend on them); the output is not checked (test_matvec does).
#include <cstdio>
#include <vector>

#include "kernels/dev/bench_timing.cuh"
#include "kernels/launch.cu"
#include "kernels/matvec_dispatch.cu"
#include "kernels/matvec_stream.cu"

// launch_matvec's other launchers: never called here (batch 1, Q4_K/Q6_K).
namespace voltad::kernels {
void launch_matvec_int4(const MatvecArgs&, cudaStream_t) {
  std::abort();
}
void launch_matvec_int8(const MatvecArgs&, cudaStream_t) {
  std::abort();
}
void launch_matvec_float(const MatvecArgs&, cudaStream_t) {
  std::abort();
}
}  // namespace voltad::kernels

namespace {

using namespace voltad::kernels;

struct Matrices {
  PackedLayout layout;
  std::vector<uint8_t*> copies;
};

Matrices make(PackedFormat format, int64_t rows, int64_t cols, int n) {
  Matrices m{make_packed_layout(format, rows, cols), {}};
  for (int i = 0; i < n; ++i) {
    uint8_t* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, packed_payload_bytes(m.layout)));
    CUDA_CHECK(cudaMemset(p, 0x11, packed_payload_bytes(m.layout)));  // finite fp16 scales
    m.copies.push_back(p);
  }
  return m;
}

}  // namespace

int main() {
  const int64_t max_cols = 14336;
  int8_t* q = nullptr;
  float *scales = nullptr, *y = nullptr;
  CUDA_CHECK(cudaMalloc(&q, quantized_activation_q_bytes(1, max_cols)));
  CUDA_CHECK(cudaMalloc(&scales, quantized_activation_scale_bytes(1, max_cols)));
  CUDA_CHECK(cudaMalloc(&y, 28672 * sizeof(float)));
  CUDA_CHECK(cudaMemset(q, 0, quantized_activation_q_bytes(1, max_cols)));
  CUDA_CHECK(cudaMemset(scales, 0, quantized_activation_scale_bytes(1, max_cols)));
  const Matrices mats[] = {
      make(PackedFormat::Int4K256, 28672, 4096, 6), make(PackedFormat::Int4K256, 6144, 4096, 12),
      make(PackedFormat::Int4K256, 4096, 4096, 16), make(PackedFormat::Int6K256, 4096, 14336, 6)};
  const char* names[] = {"Q4_K 28672x4096 (gate|up)", "Q4_K 6144x4096 (q|k|v)",
                         "Q4_K 4096x4096 (o)", "Q6_K 4096x14336 (down)"};
  // Each under `portable` (plain launches) and `auto` (programmatic
  // dependent launch on sm_90: a launch's first loads overlap the last's
  // end, as in the decode graph; run 22: 7-22% less time a matrix).
  for (int k = 0; k < 4; ++k)
    for (KernelSet set : {KernelSet::Portable, KernelSet::Auto}) {
      const KernelSetScope scope(set);
      const Matrices& m = mats[k];
      MatvecArgs a;
      a.xq = {q, scales};
      a.y = y;
      a.ldy = m.layout.rows;
      const int n = int(m.copies.size()), iters = 8 * n;
      const float ms = bench_timing::time_ms([&] {
        for (int i = 0; i < iters; ++i) {
          a.w = {m.layout, m.copies[size_t(i % n)]};
          launch_matvec(a, nullptr);
        }
      });
      const double us = ms * 1e3 / iters, bytes = double(packed_payload_bytes(m.layout));
      std::printf("%-28s %-8s %8.2f us  %6.0f GB/s\n", names[k], kernel_set_name(set), us,
                  bytes / (us * 1e-6) / 1e9);
    }
  return 0;
}
