// x in kernels/narrow_x.cuh's fp16 layout, written on the host from that
// layout's description: what the kernels that make x (RMSNorm, SwiGLU, the
// attention combine) write, for the GEMM tests (tests/kernels/test_gemm.cpp,
// test_gemm_pairs.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "tests/kernels/gpu_test_util.h"

namespace voltad::test {

// x (n rows of ldx) in kernels/narrow_x.cuh's layout, written from its
// description: for chunk c and token t, 16 words at (c * n8 + t) * 16, value
// v (bit 1 clear) and v + 2 as the fp16 pair at word 4 * (v / 4 % 4) + 2 *
// (v / 16) + v % 2; rows n..n8-1 zeros; the x sums after (poison: the
// portable kernel does not read them).
inline std::vector<uint32_t> pack_narrow_x(const std::vector<float>& x, int n, int64_t ldx,
                                           int64_t cols) {
  const int n8 = (n + 7) / 8 * 8;
  const int64_t chunks = cols / 32;
  std::vector<uint32_t> out(size_t(n8 * chunks * 17), 0u);
  for (size_t i = size_t(n8 * chunks * 16); i < out.size(); ++i) out[i] = 0xFFFFFFFFu;
  for (int t = 0; t < n; ++t)
    for (int64_t c = 0; c < chunks; ++c)
      for (int v = 0; v < 32; ++v) {
        if (v & 2) continue;
        const float* xc = x.data() + t * ldx + c * 32;
        const uint32_t lo = float_to_half_bits(xc[v]), hi = float_to_half_bits(xc[v + 2]);
        out[size_t((c * n8 + t) * 16 + 4 * (v / 4 % 4) + 2 * (v / 16) + v % 2)] = lo | hi << 16;
      }
  return out;
}

}  // namespace voltad::test
