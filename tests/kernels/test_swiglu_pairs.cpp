// SwiGLU made by the portable narrow GEMM of gate|up in pairs of blocks
// (GemmArgs::swiglu_out, kernels/swiglu_pairs.cuh) instead of by its own
// launch: gate's y and w_down's fp16 x must be the bits that the product
// and launch_swiglu_narrow_x give, for 8-, 16- and 32-token blocks, on
// fp16 x from the norm (as in a decode step) and on fp32 x, and the pairs'
// counters must be left zero for the next launch.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "engine/weight_repack.h"
#include "kernels/activation.h"
#include "kernels/gemm_sm80.h"
#include "kernels/norm.h"
#include "tests/kernels/device_matrix.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;

TEST_CASE("gate|up makes SwiGLU in pairs of blocks: the bits of the product and SwiGLU's launch") {
  const kernels::KernelSet portable = kernels::KernelSet::Portable;
  const int64_t dim = 512, half = 1024, ldy = 2 * half;  // gate and up side by side
  const float eps = 1e-5f;
  DeviceBuffer<float> d_g(random_floats(size_t(dim)));
  const size_t arrival_count = size_t(kernels::kSwigluPairTiles * half / 32);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q4_0}) {
    CAPTURE(ggml_type_name(type));
    const DeviceMatrix gate_up(type, 2 * half, dim);
    for (int n : {4, 8, 13, 16, 17, 32}) {
      CAPTURE(n);
      const int n8 = (n + 7) / 8 * 8;
      DeviceBuffer<float> h(random_floats(size_t(n * dim), 2.0f));
      DeviceBuffer<float> xn(size_t(n * dim));
      const size_t x_bytes = kernels::gemm_narrow_sm80_scratch_bytes(n, dim);
      DeviceBuffer<uint8_t> norm_x(x_bytes);
      REQUIRE(kernels::launch_rmsnorm_narrow_x(h.get(), dim, d_g.get(), xn.get(), dim, n, int(dim),
                                               eps, norm_x.get(), nullptr));
      for (bool x16 : {true, false}) {
        CAPTURE(x16);
        kernels::GemmScratch scratch{};
        if (x16) {
          scratch = {norm_x.get(), x_bytes};
          scratch.holds_x = xn.get();
        }
        kernels::GemmArgs g;
        g.w = gate_up.view();
        g.x = xn.get();
        g.ldx = dim;
        g.n = n;
        g.ldy = ldy;
        // The product, then SwiGLU's launch over gate with w_down's x.
        const size_t down_bytes = kernels::gemm_narrow_sm80_scratch_bytes(n, half);
        DeviceBuffer<float> y_ref(size_t(n * ldy)), y_pairs(size_t(n * ldy));
        DeviceBuffer<uint8_t> x_ref(down_bytes), x_pairs(down_bytes);
        CUDA_CHECK(cudaMemset(x_ref.get(), 0xFF, down_bytes));
        CUDA_CHECK(cudaMemset(x_pairs.get(), 0xFF, down_bytes));  // rows n..n8 must be zeroed
        g.y = y_ref.get();
        kernels::launch_gemm_for(portable, g, scratch, nullptr);
        kernels::launch_swiglu_narrow_x(y_ref.get(), ldy, y_ref.get() + half, ldy, y_ref.get(), ldy,
                                        n, int(half), x_ref.get(), nullptr);
        // The same in pairs of blocks, twice (the counters left zero by the first).
        DeviceBuffer<uint32_t> arrivals(std::vector<uint32_t>(arrival_count, 0u));
        g.y = y_pairs.get();
        g.swiglu_out = {half, reinterpret_cast<uint32_t*>(x_pairs.get()), arrivals.get()};
        REQUIRE(kernels::gemm_for_takes_swiglu_pairs(portable, g, scratch));
        for (int run = 0; run < 2; ++run) {
          CAPTURE(run);
          const uint64_t before = kernels::gemm_narrow_swiglu_launches();
          poison(y_pairs);
          kernels::launch_gemm_for(portable, g, scratch, nullptr);
          CHECK(kernels::gemm_narrow_swiglu_launches() == before + 1);
          if (x16) {  // the shapes meant: 8-token blocks to 8, 16 to 16, then 32
            const kernels::NarrowLaunch l = kernels::gemm_narrow_last_launch();
            CHECK(l.tokens == (n <= 8 ? 8 : n <= 16 ? 16 : 32));
          }
          CHECK(same_bits(y_ref.download(), y_pairs.download()));
          const std::vector<uint8_t> a = x_ref.download(), b = x_pairs.download();
          CHECK(std::memcmp(a.data(), b.data(), down_bytes) == 0);
          int left = 0;
          for (uint32_t v : arrivals.download()) left += v != 0;
          CHECK(left == 0);
        }
        CHECK(n8 * (half * 2 + half / 32 * 4) == int64_t(down_bytes));  // all of x compared
      }
    }
  }
}

TEST_CASE("SwiGLU's pairs: only gate|up's shape, up to 32 tokens, on the portable narrow GEMM") {
  const kernels::KernelSet portable = kernels::KernelSet::Portable;
  const int64_t dim = 512, half = 1024;
  const DeviceMatrix gate_up(GgmlType::Q4_K, 2 * half, dim);
  DeviceBuffer<uint32_t> x(size_t(32 * half)),
      arrivals(size_t(kernels::kSwigluPairTiles * half / 32));
  const kernels::GemmScratch none{};
  kernels::GemmArgs g;
  g.w = gate_up.view();
  g.n = kernels::kGemmNarrowMaxTokens;
  g.swiglu_out = {half, x.get(), arrivals.get()};
  CHECK(kernels::gemm_for_takes_swiglu_pairs(portable, g, none));
  g.n = kernels::kGemmNarrowMaxTokens + 1;  // the prefill tiles' steps
  CHECK_FALSE(kernels::gemm_for_takes_swiglu_pairs(portable, g, none));
  g.n = 8;
  g.swiglu_out.half = half / 2;  // not half of the rows
  CHECK_FALSE(kernels::gemm_for_takes_swiglu_pairs(portable, g, none));
  g.swiglu_out.half = half + 16;  // not whole chunks
  CHECK_FALSE(kernels::gemm_for_takes_swiglu_pairs(portable, g, none));
  g.swiglu_out.half = half;
  g.accumulate = true;
  CHECK_FALSE(kernels::gemm_for_takes_swiglu_pairs(portable, g, none));
  g.accumulate = false;
  CHECK(kernels::gemm_for_takes_swiglu_pairs(portable, g, none));
}
