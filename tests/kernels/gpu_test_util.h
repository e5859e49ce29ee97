// Helpers of the kernel tests: device buffers, fresh random inputs (the seed
// is printed so a failure can be replayed with VOLTAD_TEST_SEED), poisoning,
// the |out - ref| <= atol + rtol*|ref| comparison that prints the first
// mismatches, and the bitwise comparisons of fused kernels against the
// separate ones they replace.
#pragma once

#include <doctest/doctest.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/fill.h"
#include "kernels/kernel_set.h"
#include "kernels/matvec.h"

namespace voltad::test {

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), (n ? n : 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(n_);
    CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// NaN everywhere: an element the kernel fails to write stays NaN and fails.
inline void poison(DeviceBuffer<float>& b) {
  kernels::launch_fill_f32(b.get(), b.size(), std::nanf(""), nullptr);
  CUDA_CHECK(cudaGetLastError());
}

inline std::mt19937& test_rng() {
  static std::mt19937 rng = [] {
    const char* env = std::getenv("VOLTAD_TEST_SEED");
    const uint32_t seed = env ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
    std::printf("random seed %u (VOLTAD_TEST_SEED=%u replays it)\n", seed, seed);
    return std::mt19937(seed);
  }();
  return rng;
}

// fp16 bits <-> float (the fp16 KV cache's elements).
inline float half_bits_to_float(uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}
inline uint16_t float_to_half_bits(float f) {
  return __half_raw(__float2half_rn(f)).x;
}

inline std::vector<float> random_floats(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(test_rng());
  return v;
}

// Counts elements outside atol[i] + rtol*|ref| (atol per element: the
// accumulation error of a sum grows with the sum of its absolute terms) and
// prints the first few. NaN never passes.
inline int count_mismatches(const std::string& what, const std::vector<float>& got,
                            const std::vector<double>& ref, const std::vector<double>& atol,
                            double rtol, int show = 5) {
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    const bool ok = std::isfinite(got[i]) && err <= atol[i] + rtol * std::fabs(ref[i]);
    if (!ok && ++bad <= show)
      MESSAGE(what << " [" << i << "]: got " << got[i] << ", want " << ref[i] << " (|err| " << err
                   << " > " << atol[i] + rtol * std::fabs(ref[i]) << ")");
  }
  return bad;
}

inline int count_mismatches(const std::string& what, const std::vector<float>& got,
                            const std::vector<double>& ref, double atol, double rtol) {
  return count_mismatches(what, got, ref, std::vector<double>(ref.size(), atol), rtol);
}

// Bitwise equality of float vectors (NaN payloads included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two-level int8 activations (kernels/matvec.h) of `rows` rows of `cols`,
// poisoned: bytes 0x55, scales NaN.
struct QuantBuffers {
  DeviceBuffer<int8_t> q;
  DeviceBuffer<float> scales;
  QuantBuffers(int rows, int64_t cols)
      : q(kernels::quantized_activation_q_bytes(rows, cols)),
        scales(kernels::quantized_activation_scale_bytes(rows, cols) / sizeof(float)) {
    CUDA_CHECK(cudaMemset(q.get(), 0x55, q.size()));
    poison(scales);
  }
  kernels::QuantizedActivations view() const { return {q.get(), scales.get()}; }
};

inline void check_same_quantization(const QuantBuffers& fused, const QuantBuffers& separate) {
  CHECK(fused.q.download() == separate.q.download());
  CHECK(same_bits(fused.scales.download(), separate.scales.download()));
}

// The paging of a decode step: one token a sequence at positions[t], each
// sequence with blocks_per_seq blocks of 16 slots drawn shuffled from one
// pool (tables: sequence t's blocks at t * blocks_per_seq); slots[t] is
// the token's own slot, token_tables[t] = t.
struct DecodePaging {
  std::vector<int32_t> tables, slots, token_tables;
};
inline DecodePaging decode_paging(const std::vector<int32_t>& positions, int blocks_per_seq) {
  DecodePaging d;
  const int n = int(positions.size());
  d.tables.resize(size_t(n) * size_t(blocks_per_seq));
  std::iota(d.tables.begin(), d.tables.end(), 0);
  std::shuffle(d.tables.begin(), d.tables.end(), test_rng());
  for (int t = 0; t < n; ++t) {
    const int p = positions[size_t(t)];
    d.slots.push_back(d.tables[size_t(t * blocks_per_seq + p / 16)] * 16 + p % 16);
    d.token_tables.push_back(t);
  }
  return d;
}

// Under programmatic dependent launch (engine.kernels auto on sm_90) a
// kernel may start before the one it reads from has finished; under
// portable every launch is plain. Runs `rounds` rounds of `refresh` (fresh
// inputs) and then `step` (launches on the stream it is given and returns
// the output) under both kernel sets, and counts the rounds whose outputs
// differ in any bit: a read that raced its producer shows as a difference.
// With `settled` (for launches that take another kernel under auto than
// under portable), the second run is under auto too, with settled = true:
// the step then lets the producer finish before the reader is launched.
inline int rounds_auto_differs(int rounds, const std::function<void()>& refresh,
                               const std::function<std::vector<float>(cudaStream_t)>& step,
                               bool* settled = nullptr) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  int differing = 0;
  for (int round = 0; round < rounds; ++round) {
    refresh();
    std::vector<float> out[2];
    const kernels::KernelSet sets[2] = {
        kernels::KernelSet::Auto, settled ? kernels::KernelSet::Auto : kernels::KernelSet::Portable};
    for (int i = 0; i < 2; ++i) {
      kernels::KernelSetScope scope(sets[i]);
      if (settled) *settled = i == 1;
      out[i] = step(stream);
    }
    differing += !same_bits(out[0], out[1]);
  }
  if (settled) *settled = false;
  CUDA_CHECK(cudaStreamDestroy(stream));
  return differing;
}

}  // namespace voltad::test
