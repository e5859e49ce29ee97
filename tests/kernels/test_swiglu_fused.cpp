// SwiGLU made by the portable narrow GEMM of gate|up (GemmArgs::swiglu_out,
// kernels/swiglu_fused.cuh) instead of by its own launch: each block takes
// 16 rows of gate and up's same 16, and w_down's fp16 x must be the bits
// that the product and launch_swiglu_narrow_x give, in 8-, 16- and
// 32-token blocks, on fp16 x from the norm (as in a decode step) and on x
// made of a norm's pieces (GemmArgs::norm_scale).
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

namespace {
// gate|up's product of n tokens of the norm's x (xn, its fp16 copy in
// norm_x), gate and up side by side in y's rows.
struct GateUpCall {
  kernels::GemmArgs args;
  kernels::GemmScratch scratch;
};
GateUpCall gate_up_call(const DeviceMatrix& gate_up, float* xn, void* norm_x, size_t x_bytes,
                        int64_t dim, int n) {
  GateUpCall c;
  c.scratch = {norm_x, x_bytes};
  c.scratch.holds_x = xn;
  c.args.w = gate_up.view();
  c.args.x = xn;
  c.args.ldx = dim;
  c.args.n = n;
  c.args.ldy = gate_up.view().layout.rows;
  return c;
}
}  // namespace

TEST_CASE("gate|up makes SwiGLU in its blocks: the bits of the product and SwiGLU's launch") {
  const kernels::KernelSet portable = kernels::KernelSet::Portable;
  const int64_t dim = 512, half = 1024, ldy = 2 * half;  // gate and up side by side
  const float eps = 1e-5f;
  DeviceBuffer<float> d_g(random_floats(size_t(dim)));
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q4_0, GgmlType::Q6_K}) {
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
      // Each token's scale where x is a norm's pieces (up to 16 tokens).
      DeviceBuffer<float> scale(random_floats(size_t(n8), 1.0f));
      for (bool pieces : {false, true}) {
        if (pieces && n > kernels::kNormPiecesMaxTokens) continue;
        CAPTURE(pieces);
        auto [g, scratch] = gate_up_call(gate_up, xn.get(), norm_x.get(), x_bytes, dim, n);
        if (pieces) g.norm_scale = scale.get();
        // The product, then SwiGLU's launch over gate with w_down's x.
        const size_t down_bytes = kernels::gemm_narrow_sm80_scratch_bytes(n, half);
        const size_t values_bytes = size_t(n8) * size_t(half) * 2;  // before the x sums
        DeviceBuffer<float> y_ref(size_t(n * ldy)), y_fused(size_t(n * ldy));
        DeviceBuffer<uint8_t> x_ref(down_bytes), x_fused(down_bytes);
        CUDA_CHECK(cudaMemset(x_ref.get(), 0xFF, down_bytes));
        CUDA_CHECK(cudaMemset(x_fused.get(), 0xFF, down_bytes));  // rows n..n8 must be zeroed
        g.y = y_ref.get();
        kernels::launch_gemm_for(portable, g, scratch, nullptr);
        kernels::launch_swiglu_narrow_x(y_ref.get(), ldy, y_ref.get() + half, ldy, y_ref.get(), ldy,
                                        n, int(half), x_ref.get(), nullptr);
        g.y = y_fused.get();
        g.swiglu_out = {half, reinterpret_cast<uint32_t*>(x_fused.get())};
        REQUIRE(kernels::gemm_for_takes_swiglu(portable, g, scratch));
        const uint64_t before = kernels::gemm_narrow_swiglu_launches();
        kernels::launch_gemm_for(portable, g, scratch, nullptr);
        CHECK(kernels::gemm_narrow_swiglu_launches() == before + 1);
        // The shapes meant: 8-token blocks to 8, 16 to 16, then 32 (4-bit).
        const kernels::NarrowLaunch l = kernels::gemm_narrow_last_launch();
        CHECK(l.tokens == (n <= 8 ? 8 : n <= 16 || type == GgmlType::Q6_K ? 16 : 32));
        const std::vector<uint8_t> a = x_ref.download(), b = x_fused.download();
        CHECK(std::memcmp(a.data(), b.data(), values_bytes) == 0);
        // The x sums are not made (no portable reader takes them): untouched.
        int sums_written = 0;
        for (size_t i = values_bytes; i < down_bytes; ++i) sums_written += b[i] != 0xFF;
        CHECK(sums_written == 0);
      }
    }
  }
}

TEST_CASE("SwiGLU made by gate|up: only its shape, up to 32 tokens, fp16 x, portable narrow") {
  const kernels::KernelSet portable = kernels::KernelSet::Portable;
  const int64_t dim = 512, half = 1024;
  const DeviceMatrix gate_up(GgmlType::Q4_K, 2 * half, dim);
  const int n_most = kernels::kGemmNarrowMaxTokens;
  DeviceBuffer<float> xn(size_t(n_most * dim));
  const size_t x_bytes = kernels::gemm_narrow_sm80_scratch_bytes(n_most, dim);
  DeviceBuffer<uint8_t> norm_x(x_bytes);
  DeviceBuffer<uint32_t> x(size_t(n_most * half));
  auto [g, scratch] = gate_up_call(gate_up, xn.get(), norm_x.get(), x_bytes, dim, n_most);
  g.swiglu_out = {half, x.get()};
  CHECK(kernels::gemm_for_takes_swiglu(portable, g, scratch));
  CHECK_FALSE(kernels::gemm_for_takes_swiglu(portable, g, kernels::GemmScratch{}));  // fp32 x
  g.n = n_most + 1;  // the prefill tiles' steps
  CHECK_FALSE(kernels::gemm_for_takes_swiglu(portable, g, scratch));
  g.n = 8;
  g.swiglu_out.half = half / 2;  // not half of the rows
  CHECK_FALSE(kernels::gemm_for_takes_swiglu(portable, g, scratch));
  g.swiglu_out.half = half + 16;  // not whole chunks
  CHECK_FALSE(kernels::gemm_for_takes_swiglu(portable, g, scratch));
  g.swiglu_out.half = half;
  g.accumulate = true;
  CHECK_FALSE(kernels::gemm_for_takes_swiglu(portable, g, scratch));
  g.accumulate = false;
  CHECK(kernels::gemm_for_takes_swiglu(portable, g, scratch));
}
