// A random packed matrix on the device, and the gap measure the kernel
// tests compare outputs by. Test helpers, doctest included.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/weight_repack.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

namespace voltad::test {

// A valid random tensor of `type` (test_rng), repacked and uploaded.
struct DeviceMatrix {
  PackedMatrix m;
  DeviceBuffer<uint8_t> d;
  DeviceMatrix(GgmlType type, int64_t rows, int64_t cols)
      : m([&] {
          const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, test_rng(), 15);
          auto packed = repack_matrix(type, gguf.data(), rows, cols);
          REQUIRE(packed.ok());
          return std::move(*packed);
        }()),
        d(m.bytes) {}
  kernels::PackedMatrixView view() const { return {m.layout, d.get()}; }
};

// The largest |x - y| over the largest |y|; NaN where x is not finite.
inline double relative_gap(const std::vector<float>& x, const std::vector<float>& y) {
  REQUIRE(x.size() == y.size());
  double gap = 0.0, scale = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return std::nan("");
    gap = std::max(gap, std::fabs(double(x[i]) - double(y[i])));
    scale = std::max(scale, std::fabs(double(y[i])));
  }
  return gap / std::max(scale, 1e-30);
}

}  // namespace voltad::test
