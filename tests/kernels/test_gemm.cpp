// The tensor-core GEMM against a float64 CPU reference, for every weight type
// the CUDA backend runs, every tile shape, odd and even sizes (tokens and rows
// not multiples of the tile, k not a multiple of the 64-value stage, F16/F32
// row lengths not multiples of 8), x rows with and without 16-byte alignment,
// with and without bias and fused residual add.
//
// Two references: (1) the products the kernel is meant to form, W and x each
// rounded once to fp16 (W decoded by dequantize_packed_row, itself proven
// equal to the GGUF decoder by tests/engine/test_weight_repack.cpp), summed
// in float64: only fp32 accumulation separates the kernel from it, so the
// tolerance is tight and a single wrong element shows; (2) the fp32 matvec
// (unrounded W and x), whose distance is the price of fp16 operands
// (reported, and bounded loosely).
#include <doctest/doctest.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/weight_repack.h"
#include "kernels/gemm_wmma.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;
using kernels::GemmTile;

namespace {

double to_half(float v) {
  return double(__half2float(__float2half_rn(v)));
}

struct Case {
  int64_t rows, cols;
  int n;
  GemmTile tile;
  bool accumulate, with_bias, aligned_x;
};

// Returns the largest |y - y(fp32)| / sum |w x| (the cost of fp16 operands).
double run_case(GgmlType type, const Case& c) {
  std::mt19937& rng = test_rng();
  std::ostringstream name;
  name << ggml_type_name(type) << " " << c.rows << "x" << c.cols << " n " << c.n << " tile "
       << kernels::gemm_tile_name(c.tile) << (c.accumulate ? " +=" : "")
       << (c.with_bias ? " +bias" : "") << (c.aligned_x ? "" : " unaligned-x");
  CAPTURE(name.str());

  const std::vector<uint8_t> gguf = random_valid_tensor(type, c.rows, c.cols, rng, 15);
  auto packed = repack_matrix(type, gguf.data(), c.rows, c.cols);
  REQUIRE_MESSAGE(packed.ok(), (packed.ok() ? "" : packed.error().message));

  // Aligned: a row stride that is a multiple of 4 floats; unaligned: odd.
  const int64_t ldx = c.aligned_x ? (c.cols + 3) / 4 * 4 + 4 : c.cols + 1;
  std::vector<float> x = random_floats(size_t(c.n * ldx));
  for (int t = 0; t < c.n; ++t) x[size_t(t * ldx + int64_t(rng() % uint64_t(c.cols)))] *= 30.0f;
  const int64_t ldy = c.rows + 3;
  // One row past n: the kernel must leave it (and columns past rows) alone.
  const size_t y_size = size_t((c.n + 1) * ldy);
  std::vector<float> y0 = random_floats(y_size);
  std::vector<float> bias = random_floats(size_t(c.rows));

  DeviceBuffer<uint8_t> d_w(packed->bytes);
  DeviceBuffer<float> d_x(x), d_bias(bias), d_y(y_size);
  poison(d_y);
  if (c.accumulate) {
    std::vector<float> init(y_size, std::nanf(""));
    for (int t = 0; t < c.n; ++t)
      for (int64_t r = 0; r < c.rows; ++r) init[size_t(t * ldy + r)] = y0[size_t(t * ldy + r)];
    d_y.upload(init);
  }

  kernels::GemmArgs args;
  args.w = {packed->layout, d_w.get()};
  args.x = d_x.get();
  args.ldx = ldx;
  args.n = c.n;
  args.y = d_y.get();
  args.ldy = ldy;
  args.bias = c.with_bias ? d_bias.get() : nullptr;
  args.accumulate = c.accumulate;
  kernels::launch_gemm(args, c.tile, nullptr);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> got = d_y.download();

  std::vector<double> ref(y_size, 0.0), atol(y_size, 1e300);
  std::vector<float> w(size_t(c.cols));
  std::vector<double> xh(size_t(c.n * c.cols));
  for (int t = 0; t < c.n; ++t)
    for (int64_t k = 0; k < c.cols; ++k)
      xh[size_t(t * c.cols + k)] = to_half(x[size_t(t * ldx + k)]);
  double worst_vs_fp32 = 0.0;
  int stray = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    dequantize_packed_row(*packed, r, w.data());
    std::vector<double> wh(size_t(c.cols));
    for (int64_t k = 0; k < c.cols; ++k) wh[size_t(k)] = to_half(w[size_t(k)]);
    for (int t = 0; t < c.n; ++t) {
      double sum = 0.0, mag = 0.0, exact = 0.0, exact_mag = 0.0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double p = wh[size_t(k)] * xh[size_t(t * c.cols + k)];
        sum += p;
        mag += std::fabs(p);
        const double e = double(w[size_t(k)]) * double(x[size_t(t * ldx + k)]);
        exact += e;
        exact_mag += std::fabs(e);
      }
      double extra = 0.0;
      if (c.with_bias) extra += bias[size_t(r)];
      if (c.accumulate) extra += y0[size_t(t * ldy + r)];
      const size_t i = size_t(t * ldy + r);
      ref[i] = sum + extra;
      atol[i] = 1e-4 * (mag + std::fabs(extra)) + 1e-30;
      if (exact_mag > 0)
        worst_vs_fp32 =
            std::max(worst_vs_fp32, std::fabs(double(got[i]) - (exact + extra)) / exact_mag);
    }
  }
  // Everything outside [0, n) x [0, rows) must still be NaN.
  for (int t = 0; t <= c.n; ++t)
    for (int64_t r = 0; r < ldy; ++r) {
      const size_t i = size_t(t * ldy + r);
      if (t < c.n && r < c.rows) continue;
      if (!std::isnan(got[i])) ++stray;
      got[i] = 0.0f;  // skipped by the comparison (atol 1e300)
    }
  CHECK(stray == 0);
  CHECK(count_mismatches(name.str(), got, ref, atol, 1e-5) == 0);
  return worst_vs_fp32;
}

struct Shape {
  int64_t rows, cols;
};

std::vector<Shape> shapes_for(GgmlType type) {
  const int64_t block = ggml_type_info(type)->block_elems;
  if (block == 1) return {{7, 77}, {130, 1001}, {67, 4096}};
  if (block == 32) return {{7, 96}, {130, 1056}, {67, 4096}};
  return {{7, 768}, {130, 2560}, {67, 4096}};
}

}  // namespace

TEST_CASE("gemm matches the float64 reference for every weight type, tile and shape") {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_0,
                            GgmlType::Q5_1, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0,
                            GgmlType::F16,  GgmlType::BF16, GgmlType::F32};
  const GemmTile tiles[] = {GemmTile::T32x64, GemmTile::T64x128, GemmTile::T128x128,
                            GemmTile::T128x128Occ2, GemmTile::Auto};
  const int ns[] = {9, 37, 130, 64, 200, 17, 33, 129};
  int i = 0;
  for (GgmlType type : types) {
    double worst = 0.0;
    for (const Shape& s : shapes_for(type)) {
      for (GemmTile tile : tiles) {
        const Case c{s.rows, s.cols, ns[i % 8], tile, i % 2 == 0, i % 3 != 1, i % 4 != 3};
        ++i;
        const double e = run_case(type, c);
        if (s.cols == 4096) worst = std::max(worst, e);
      }
    }
    // fp16 operands against an fp32 matvec, relative to sum |w x|
    // (informational: docs/KERNEL-NOTES.md).
    MESSAGE(ggml_type_name(type) << ": max |y - y(fp32)| / sum|w x| at cols 4096 = " << worst);
    CHECK(worst < 2e-3);
  }
}

TEST_CASE("gemm: a prefill-sized case (512 tokens) with the automatic tile") {
  run_case(GgmlType::Q4_K, {300, 4096, 512, GemmTile::Auto, true, true, true});
  run_case(GgmlType::Q6_K, {1000, 512, 300, GemmTile::Auto, false, false, true});
}
