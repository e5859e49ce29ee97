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
// tolerance is tight and a single wrong element shows. The narrow sm_80
// kernel keeps the K formats' W exact (Q4_K: sc * q exact, d and the mins
// applied after the MMAs; Q6_K: q - 32, d * sc after each MMA), so for it
// any sum between that one and the one with W unrounded (x still fp16) is
// right, measured from the nearer end; (2) the fp32 matvec
// (unrounded W and x), whose distance is the price of fp16 operands
// (reported, and bounded loosely).
//
// The sm_80+ variant (kernels/gemm_sm80.h) runs the same cases where it
// takes them, and must give bit-identical results to the portable kernel
// (same fp16 operands, same k order of the fp32 accumulation).
#include <doctest/doctest.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <utility>

#include "engine/weight_repack.h"
#include "kernels/gemm_sm80.h"
#include "kernels/gemm_wmma.h"
#include "tests/kernels/gemm_reference_weights.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/narrow_overrides.h"
#include "tests/kernels/narrow_x_pack.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;
using kernels::GemmTile;

namespace {

// With VOLTAD_TEST_DUMP=FILE, the inputs of a mismatched output (its
// weight row dequantized, the token's x, what the kernel gave, the
// reference and the bias plus y0 added to it) are appended to FILE as text,
// for a replay (VOLTAD_TEST_SEED) to be studied offline.
void dump_mismatch(const std::string& name, const PackedMatrix& packed, const std::vector<float>& x,
                   int64_t ldx, size_t i, int64_t ldy, float got, double want, float extra) {
  const char* path = std::getenv("VOLTAD_TEST_DUMP");
  if (!path || !*path) return;
  const int64_t t = int64_t(i) / ldy, r = int64_t(i) % ldy, cols = packed.layout.cols;
  std::vector<float> w(static_cast<size_t>(cols));
  dequantize_packed_row(packed, r, w.data());
  std::FILE* f = std::fopen(path, "a");
  if (!f) return;
  std::fprintf(f, "case %s\nrow %lld token %lld cols %lld got %.9g want %.17g extra %.9g\nw",
               name.c_str(), (long long)r, (long long)t, (long long)cols, double(got), want,
               double(extra));
  for (int64_t k = 0; k < cols; ++k) std::fprintf(f, " %.9g", double(w[size_t(k)]));
  std::fprintf(f, "\nx");
  for (int64_t k = 0; k < cols; ++k) std::fprintf(f, " %.9g", double(x[size_t(t * ldx + k)]));
  std::fprintf(f, "\n");
  std::fclose(f);
}

// Which kernel a case launches. PortableX16: the portable narrow kernel on
// x in fp16 in the scratch (kernels/narrow_x.cuh's layout, written here by
// pack_narrow_x), the fp32 x zeroed.
enum class Path { Portable, Sm80, AutoSet, Narrow80, PortableX16 };

struct Case {
  int64_t rows, cols;
  int n;
  GemmTile tile;
  bool accumulate, with_bias, aligned_x;
  Path path = Path::Portable;
  bool scratch_short = false;  // lend the variant too little scratch
  // Narrow80: lend split memory (room for kNarrowMaxSplits); `splits` then
  // says how many the launch must take. Twice: launch again on the same
  // input and require the same bits.
  bool split_memory = false;
  int splits = 1;
  bool twice = false;
};

bool device_is_sm80_plus() {
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

// Returns the largest |y - y(fp32)| / sum |w x| (the cost of fp16 operands);
// the output (n + 1 rows of ldy) in *out when given.
// shared_split: split memory lent by the caller (Narrow80 with
// split_memory), e.g. one memory for launches of several row counts.
double run_case(GgmlType type, const Case& c, std::vector<float>* out = nullptr,
                const kernels::GemmScratch* shared_split = nullptr) {
  std::mt19937& rng = test_rng();
  std::ostringstream name;
  name << ggml_type_name(type) << " " << c.rows << "x" << c.cols << " n " << c.n << " tile "
       << kernels::gemm_tile_name(c.tile) << (c.accumulate ? " +=" : "")
       << (c.with_bias ? " +bias" : "") << (c.aligned_x ? "" : " unaligned-x")
       << (c.path == Path::Sm80          ? " sm80"
           : c.path == Path::AutoSet     ? " kernels=auto"
           : c.path == Path::Narrow80    ? " narrow-sm80"
           : c.path == Path::PortableX16 ? " portable-x16"
                                         : "");
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
  // The variant's fp16 copy of x; poisoned, so that a read of a row it did
  // not write shows.
  DeviceBuffer<uint8_t> scratch(std::max(kernels::gemm_sm80_scratch_bytes(c.n, c.cols),
                                         kernels::gemm_narrow_sm80_scratch_bytes(c.n, c.cols)) +
                                64);
  CUDA_CHECK(cudaMemset(scratch.get(), 0xFF, scratch.size()));
  kernels::GemmScratch gs{scratch.get(), c.scratch_short ? size_t(16) : scratch.size()};
  // Split memory of its own: counters zero, the sums poisoned (0xFF), so
  // that the launch's sums can be told from none.
  DeviceBuffer<uint8_t> split(
      c.split_memory ? kernels::gemm_narrow_sm80_split_bytes(c.rows, kernels::kNarrowMaxSplits)
                     : 1);
  const size_t sums_at = kernels::gemm_narrow_sm80_split_bytes(c.rows, 0);
  CUDA_CHECK(cudaMemset(split.get(), 0, split.size()));
  if (c.split_memory && shared_split) {
    gs.split = shared_split->split;
    gs.split_bytes = shared_split->split_bytes;
    gs.split_rows = shared_split->split_rows;
  } else if (c.split_memory) {
    CUDA_CHECK(cudaMemset(split.get() + sums_at, 0xFF, split.size() - sums_at));
    gs.split = split.get();
    gs.split_bytes = split.size();
    gs.split_rows = c.rows;
  }
  auto launch = [&] {
    switch (c.path) {
    case Path::Portable:
      kernels::launch_gemm(args, c.tile, nullptr);
      break;
    case Path::Sm80:
      REQUIRE(kernels::gemm_sm80_supports(args, gs));
      kernels::launch_gemm_sm80(args, gs, nullptr);
      break;
    case Path::AutoSet:
      kernels::launch_gemm_for(kernels::KernelSet::Auto, args, gs, nullptr);
      break;
    case Path::Narrow80:
      REQUIRE(kernels::gemm_narrow_sm80_supports(args, gs));
      REQUIRE(kernels::gemm_narrow_sm80_splits_taken(args, gs) == c.splits);
      kernels::launch_gemm_narrow_sm80(args, gs, nullptr);
      break;
    case Path::PortableX16:
      REQUIRE(kernels::gemm_for_reads_narrow_x(kernels::KernelSet::Portable, args, gs));
      kernels::launch_gemm_for(kernels::KernelSet::Portable, args, gs, nullptr);
      break;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  };
  if (c.path == Path::PortableX16) {  // the fp16 x only
    const std::vector<uint32_t> packed_x = pack_narrow_x(x, c.n, ldx, c.cols);
    REQUIRE(packed_x.size() * 4 <= scratch.size());
    CUDA_CHECK(
        cudaMemcpy(scratch.get(), packed_x.data(), packed_x.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_x.get(), 0, d_x.size() * sizeof(float)));
    gs.holds_x = args.x;
  }
  const std::vector<float> y_before = d_y.download();
  launch();
  std::vector<float> got = d_y.download();
  if (out) *out = got;
  if (c.split_memory) {  // every row block's arrival counter back at zero
    std::vector<uint32_t> counters(size_t((c.rows + 31) / 32));
    CUDA_CHECK(cudaMemcpy(counters.data(), gs.split, counters.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(std::count(counters.begin(), counters.end(), 0u) == int64_t(counters.size()));
  }
  if (c.split_memory && !shared_split) {
    // The splits ran: row block 0's sums of token 0 written by each split
    // (at (block * splits + split) x 32 x 32 floats), or none at all.
    std::vector<uint32_t> sums((split.size() - sums_at) / 4);
    CUDA_CHECK(
        cudaMemcpy(sums.data(), split.get() + sums_at, sums.size() * 4, cudaMemcpyDeviceToHost));
    if (c.splits > 1) {
      for (int sp = 0; sp < c.splits; ++sp) CHECK(sums[size_t(sp) * 32 * 32] != 0xFFFFFFFFu);
    } else {
      CHECK(std::count(sums.begin(), sums.end(), 0xFFFFFFFFu) == int64_t(sums.size()));
    }
  }
  // (With 2 splits the order cannot show: s0 + s1 == s1 + s0. With 3-4 it
  // could, where the blocks arrive in another order the second time.)
  if (c.twice) {
    d_y.upload(y_before);
    launch();
    const std::vector<float> again = d_y.download();
    CHECK(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)) == 0);
  }

  std::vector<double> ref(y_size, 0.0), atol(y_size, 1e300);
  // Per output, for a failure's message: the products' magnitude, the
  // largest product, the sum with W unrounded (x fp16) and the one with
  // both unrounded (fp32).
  std::vector<double> mags(y_size), largests(y_size), wides(y_size), exacts(y_size);
  // The narrow sm_80 kernel (Narrow80, and AutoSet where it takes the call)
  // keeps Q4_K's and Q6_K's weights exact (the header).
  const bool exact_w = (c.path == Path::Narrow80 || c.path == Path::AutoSet) &&
                       (type == GgmlType::Q4_K || type == GgmlType::Q6_K);
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
    half_weights_row(*packed, r, w, wh);
    for (int t = 0; t < c.n; ++t) {
      double sum = 0.0, wide_sum = 0.0, mag = 0.0, exact = 0.0, exact_mag = 0.0, largest = 0.0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double p = wh[size_t(k)] * xh[size_t(t * c.cols + k)];
        sum += p;
        mag += std::fabs(p);
        largest = std::max(largest, std::fabs(p));
        wide_sum += double(w[size_t(k)]) * xh[size_t(t * c.cols + k)];
        const double e = double(w[size_t(k)]) * double(x[size_t(t * ldx + k)]);
        exact += e;
        exact_mag += std::fabs(e);
      }
      double extra = 0.0;
      if (c.with_bias) extra += bias[size_t(r)];
      if (c.accumulate) extra += y0[size_t(t * ldy + r)];
      const size_t i = size_t(t * ldy + r);
      // With exact_w, between the sums with W rounded and unrounded (the
      // header): with VOLTAD_TEST_SEED=3898582723 the narrow kernel's Q4_K
      // sum (25 tokens, Wide blocks) was 0.0253 from the rounded one, past
      // its bound of 0.0245, and 0.0043 from the one with x and W
      // unrounded. A non-finite output is measured from the rounded sum.
      double want = sum;
      if (exact_w && std::isfinite(got[i]))
        want = std::clamp(double(got[i]) - extra, std::min(sum, wide_sum), std::max(sum, wide_sum));
      ref[i] = want + extra;
      mags[i] = mag;
      wides[i] = wide_sum + extra;
      largests[i] = largest;
      exacts[i] = exact + extra;
      // Plus one fp16 ulp of the largest product: a margin kept from when
      // the reference rounded the affine formats' d*q + m to fp32 and then
      // to fp16 (now once from the exact value, as the kernels do:
      // half_weights_row).
      atol[i] = 1e-4 * (mag + std::fabs(extra)) + largest / 1024.0 + 1e-30;
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
  const int bad = count_mismatches(name.str(), got, ref, atol, 1e-5);
  CHECK(bad == 0);
  for (size_t i = 0, shown = 0; bad && i < y_size && shown < 3; ++i)
    if (!(std::isfinite(got[i]) &&
          std::fabs(double(got[i]) - ref[i]) <= atol[i] + 1e-5 * std::fabs(ref[i]))) {
      MESSAGE("[" << i << "]: sum of |products| " << mags[i] << ", largest " << largests[i]
                  << ", sum with W unrounded " << wides[i] << ", with W and x unrounded "
                  << exacts[i]
                  << std::string(exact_w ? " (either of the first two ends is right)" : ""));
      if (shown == 0)
        dump_mismatch(
            name.str(), *packed, x, ldx, i, ldy, got[i], ref[i],
            (c.with_bias ? bias[size_t(i % size_t(ldy))] : 0.0f) + (c.accumulate ? y0[i] : 0.0f));
      ++shown;
    }
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
  const GemmTile tiles[] = {GemmTile::T32x64,   GemmTile::T32x128,      GemmTile::T64x128,
                            GemmTile::T128x128, GemmTile::T128x128Occ2, GemmTile::Auto};
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

// The narrow tiles (batched decode): k split over 8 warps, so also row
// lengths of fewer chunks than warps, and token counts on both sides of a
// 16-token fragment; several blocks of tokens where n > the tile.
TEST_CASE("gemm narrow tile matches the float64 reference for every weight type and shape") {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_0,
                            GgmlType::Q5_1, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0,
                            GgmlType::F16,  GgmlType::BF16, GgmlType::F32};
  const int ns[] = {2, 8, 16, 17, 31, 32, 1, 40, 5};
  int i = 0;
  for (GgmlType type : types) {
    double worst = 0.0;
    for (const Shape& s : shapes_for(type)) {
      for (int rep = 0; rep < 2; ++rep) {
        const Case c{s.rows, s.cols, ns[i % 9], GemmTile::N16, i % 2 == 0, i % 3 != 1, i % 4 != 3};
        ++i;
        const double e = run_case(type, c);
        if (s.cols == 4096) worst = std::max(worst, e);
      }
    }
    // Rows for more blocks than an H200 has SMs (132): 8 warps per block,
    // two blocks per SM (the shapes above take 16 warps).
    run_case(type, {4300, 256, 12, GemmTile::N16, i % 2 == 0, true, true});
    MESSAGE(ggml_type_name(type) << " narrow: max |y - y(fp32)| / sum|w x| at cols 4096 = "
                                 << worst);
    CHECK(worst < 2e-3);
  }
  // The automatic choice at decode sizes is the narrow kernel.
  CHECK(kernels::gemm_pick_tile(8, 4096) == GemmTile::N16);
  CHECK(kernels::gemm_pick_tile(16, 28672) == GemmTile::N16);
  CHECK(kernels::gemm_pick_tile(32, 4096) == GemmTile::N16);
  CHECK(kernels::gemm_pick_tile(33, 4096) != GemmTile::N16);
  // Gate|up's and an lm head's rows from 17 tokens: tests/kernels/test_gemm_pairs.cpp.
}

// The portable narrow kernel on x already in fp16 (launch_gemm_narrow_x16,
// by way of launch_gemm_for with the scratch holding x): the formats it
// takes, 8- and 16-token blocks (n8 not a multiple of 16 among them: 17,
// 24), 8- and 16-warp blocks, rows not a multiple of 32, k shares that leave
// warps idle. The fp32 x is zeros, so a kernel that read it would fail.
// The 4-bit formats with their B in registers where the device's order
// allows (paired B, kernels/wmma_pairs.h) and through the tile.
TEST_CASE("gemm narrow on fp16 x (portable) matches the float64 reference") {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K};
  const Shape shapes[] = {{7, 512}, {130, 1024}, {67, 4096}, {300, 256}};
  int i = 0;
  // The probe's order, the V100's (emulated off sm_70), each in 32-token
  // blocks too at 17-32 tokens; the tile.
  struct Mode {
    std::optional<kernels::WmmaPairs> order;
    bool tokens32;
  };
  const Mode modes[] = {{std::nullopt, false},
                        {std::nullopt, true},
                        {kernels::WmmaPairs::RowPerLane, false},
                        {kernels::WmmaPairs::RowPerLane, true},
                        {kernels::WmmaPairs::None, false}};
  NarrowOverrides overrides;
  for (const Mode& mode : modes)
    for (GgmlType type : types) {
      CAPTURE(std::string(mode.order ? kernels::wmma_pairs_name(*mode.order) : "probed"));
      CAPTURE(mode.tokens32);
      if (mode.order && !kernels::gemm_narrow_pairs_runs(*mode.order)) {
        MESSAGE("an sm_70 device without the RowPerLane order: not forced");
        continue;
      }
      overrides.pairs(mode.order);
      overrides.tokens32(mode.tokens32);
      for (const Shape& s : shapes)
        for (int n : {1, 2, 5, 8, 9, 16, 17, 24, 31, 32}) {
          run_case(type, {s.rows, s.cols, n, GemmTile::Auto, i % 2 == 0, i % 3 != 1, true,
                          Path::PortableX16});
          ++i;
        }
      run_case(type, {67, 14336, 9, GemmTile::Auto, true, true, true, Path::PortableX16});
      run_case(type, {4300, 6144, 20, GemmTile::Auto, false, true, true, Path::PortableX16});
    }
}

// The sm_80+ narrow kernel: the same FP16 weights, but its own order of
// the FP32 sums, so the reference, not bit-identity with the portable
// kernels. Rows not a multiple of the block; token counts in each of the
// four token tiles, among them 2 and 3, the smallest steps the backend
// gives it (kGemmMinTokensNarrowSm80); k shares that leave some warps idle
// (512 columns = 4 stages for 8 warps).
TEST_CASE("gemm narrow sm80 variant matches the float64 reference") {
  if (!device_is_sm80_plus() || !kernels::gemm_sm80_available()) {
    MESSAGE("not an sm_80+ device with the variant built: skipped");
    return;
  }
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K};
  const Shape shapes[] = {{7, 512}, {130, 768}, {67, 4096}, {300, 256}};
  int i = 0;
  for (GgmlType type : types) {
    double worst = 0.0;
    for (const Shape& s : shapes) {
      for (int n : {1, 2, 3, 5, 8, 9, 16, 17, 24, 31, 32}) {
        const Case c{s.rows,     s.cols,     n,          GemmTile::Auto,
                     i % 2 == 0, i % 3 != 1, i % 4 != 3, Path::Narrow80};
        ++i;
        const double e = run_case(type, c);
        if (s.cols == 4096) worst = std::max(worst, e);
      }
    }
    MESSAGE(ggml_type_name(type) << " narrow sm80: max |y - y(fp32)| / sum|w x| at cols 4096 = "
                                 << worst);
    CHECK(worst < 2e-3);
    // Long rows, so that each warp's ring of stages wraps around: 16 warps
    // (3 stages) at 67 rows, 8 warps (4 stages) at 4300 rows (more blocks
    // than an H200 has SMs).
    run_case(type, {67, 14336, 9, GemmTile::Auto, true, true, true, Path::Narrow80});
    run_case(type, {4300, 6144, 20, GemmTile::Auto, false, true, false, Path::Narrow80});
  }
  // kernels=auto takes it for a decode-sized batch (results as above).
  run_case(GgmlType::Q4_K, {130, 1024, 8, GemmTile::Auto, true, true, true, Path::AutoSet});
}

// The blocks of one token tile (1-8 tokens) of Q4_0 and Q4_K where they
// outnumber the SMs: 8 warps, two blocks an SM with a ring of 4 stages, or
// three with a ring of 3 where three fit an SM (from 5 tokens by default).
// Each shape against the reference, and the shape taken checked. Then
// Q6_K, whose 8x2 ring is 3 stages deep where two such blocks fit an SM.
// The current device's SMs and shared memory an SM (bytes).
std::pair<int, int> sm_count_and_shared_memory() {
  int device = 0, sms = 0, smem_per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  return {sms, smem_per_sm};
}

struct OneTileScope {
  explicit OneTileScope(kernels::NarrowOneTile shape) {
    kernels::gemm_narrow_sm80_set_one_tile(shape);
  }
  ~OneTileScope() { kernels::gemm_narrow_sm80_set_one_tile(kernels::NarrowOneTile::Default); }
};

TEST_CASE("gemm narrow sm80 at one token tile: 8x2 and 8x3 blocks, each as taken") {
  if (!device_is_sm80_plus() || !kernels::gemm_sm80_available()) {
    MESSAGE("not an sm_80+ device with the variant built: skipped");
    return;
  }
  const auto [sms, smem_per_sm] = sm_count_and_shared_memory();
  // The H100/H200's 228 KiB holds three 8x3 blocks of Q4_K (72 KiB each).
  const bool three_fit = smem_per_sm >= 228 * 1024;
  // Three blocks more than the SMs, the last one 27 rows.
  const int64_t rows = 32 * int64_t(sms + 3) - 5;
  using kernels::NarrowOneTile;
  const std::pair<GgmlType, kernels::PackedFormat> types[] = {
      {GgmlType::Q4_0, kernels::PackedFormat::Int4Sym32},
      {GgmlType::Q4_K, kernels::PackedFormat::Int4K256}};
  for (const auto& [type, format] : types) {
    kernels::GemmArgs probe;
    probe.w.layout.rows = rows;
    probe.w.layout.format = format;
    auto taken = [&](int n) {
      probe.n = n;
      return kernels::gemm_narrow_sm80_one_tile_taken(probe);
    };
    CHECK(taken(2) == NarrowOneTile::W8B2);
    CHECK(taken(4) == NarrowOneTile::W8B2);
    CHECK(taken(8) == (three_fit ? NarrowOneTile::W8B3 : NarrowOneTile::W8B2));
    CHECK(taken(9) == NarrowOneTile::Default);  // two token tiles
    for (NarrowOneTile shape : {NarrowOneTile::W8B2, NarrowOneTile::W8B3}) {
      const OneTileScope scope(shape);
      const NarrowOneTile expected = three_fit ? shape : NarrowOneTile::W8B2;
      for (int n : {1, 6, 8}) CHECK(taken(n) == expected);
      if (expected != shape) MESSAGE("8x3 not taken here: three blocks do not fit an SM");
      // 1,792 columns: 14 stages for 8 warps, so one warp gets none.
      for (int n : {1, 8})
        run_case(type, {rows, 4096, n, GemmTile::Auto, n == 8, true, true, Path::Narrow80});
      run_case(type, {rows, 1792, 6, GemmTile::Auto, false, false, true, Path::Narrow80});
    }
  }
  // Q6_K (in these models the output matrix is the only Q6_K one with more
  // blocks than SMs) takes 8x2 there at one and two token tiles: checked at
  // 1, 6 and 8 tokens, run at 1, 6, 8 and 16.
  kernels::GemmArgs probe;
  probe.w.layout.rows = rows;
  probe.w.layout.format = kernels::PackedFormat::Int6K256;
  for (int n : {1, 6, 8}) {
    probe.n = n;
    CHECK(kernels::gemm_narrow_sm80_one_tile_taken(probe) == NarrowOneTile::W8B2);
  }
  for (int n : {1, 8, 16})
    run_case(GgmlType::Q6_K, {rows, 4096, n, GemmTile::Auto, n == 8, true, true, Path::Narrow80});
  run_case(GgmlType::Q6_K, {rows, 1792, 6, GemmTile::Auto, false, false, true, Path::Narrow80});
}

// Blocks that split k (GemmScratch::split), which only Q4_K's 8x2 blocks
// at 25-32 tokens have: where the rule takes them (no more 32-row blocks
// than SMs) and where it does not; then 2-4 splits forced, against the
// reference, the same bits on a second launch, the counters left zero.
// Shapes: 2,048 columns (16 stages, 8 a split at 2), 1,792 (14: uneven
// splits, idle warps), 256 (2 stages: with 3-4 splits some blocks have
// none), rows not a multiple of 32, and more blocks than SMs.
struct SplitScope {
  explicit SplitScope(int splits) { kernels::gemm_narrow_sm80_set_splits(splits); }
  ~SplitScope() { kernels::gemm_narrow_sm80_set_splits(0); }
};

TEST_CASE("gemm narrow sm80 splits k across blocks where they would not fill the SMs") {
  if (!device_is_sm80_plus() || !kernels::gemm_sm80_available()) {
    MESSAGE("not an sm_80+ device with the variant built: skipped");
    return;
  }
  const auto [sms, smem_per_sm] = sm_count_and_shared_memory();
  // The rule splits where two of these blocks (96 KiB of ring and 1 KiB the
  // runtime's) fit an SM: an H100/H200, not an A100. (VOLTAD_NARROW_SPLITS,
  // if set, overrides the rule: leave it unset here.)
  const int rule = smem_per_sm >= 2 * (96 + 1) * 1024 ? 2 : 1;
  const int64_t fill = 32 * int64_t(sms);  // rows: one 32-row block an SM
  std::vector<uint8_t> room(kernels::gemm_narrow_sm80_split_bytes(fill + 32, 4));
  // Only the pointer's value and alignment matter to the rule.
  void* aligned = reinterpret_cast<void*>(uintptr_t(0x100000));
  // Memory of `bytes` for launches of up to `capacity` rows.
  auto taken = [&](kernels::PackedFormat f, int64_t rows, int n, size_t bytes,
                   int64_t capacity) {
    kernels::GemmArgs a;
    a.w.layout.format = f;
    a.w.layout.rows = rows;
    a.n = n;
    kernels::GemmScratch gs;
    gs.split = bytes ? aligned : nullptr;
    gs.split_bytes = bytes;
    gs.split_rows = capacity;
    return kernels::gemm_narrow_sm80_splits_taken(a, gs);
  };
  using kernels::PackedFormat;
  const size_t two = kernels::gemm_narrow_sm80_split_bytes(fill, kernels::kNarrowSplits);
  CHECK(kernels::kNarrowSplits == 2);
  const int64_t wide = fill + 32;  // the capacity of `room`
  CHECK(taken(PackedFormat::Int4K256, fill, 32, two, fill) == rule);
  CHECK(taken(PackedFormat::Int4K256, fill - 40, 25, two, fill) == rule);
  CHECK(taken(PackedFormat::Int4K256, 1024, 32, two, fill) == rule);     // a shorter launch
  CHECK(taken(PackedFormat::Int4K256, fill, 32, two - 1, fill) == 1);    // no room
  CHECK(taken(PackedFormat::Int4K256, fill, 32, 0, fill) == 1);          // none lent
  CHECK(taken(PackedFormat::Int4K256, fill, 32, two, fill - 32) == 1);   // rows past the capacity
  CHECK(taken(PackedFormat::Int4K256, fill + 1, 32, room.size(), wide) == 1);  // blocks > SMs
  CHECK(taken(PackedFormat::Int4K256, fill, 24, two, fill) == 1);  // 16-warp blocks
  CHECK(taken(PackedFormat::Int4Sym32, fill, 32, two, fill) == 1);
  CHECK(taken(PackedFormat::Int6K256, fill, 32, two, fill) == 1);
  {
    const SplitScope scope(3);
    CHECK(taken(PackedFormat::Int4K256, fill + 1, 32, room.size(), wide) == 3);
    CHECK(taken(PackedFormat::Int4K256, fill, 32, two, fill) == 1);  // no room for 3
    CHECK(taken(PackedFormat::Int4K256, fill, 16, room.size(), wide) == 1);
    CHECK(taken(PackedFormat::Int4Sym32, fill + 1, 32, room.size(), wide) == 1);
  }
  // As the rule takes them: o of a 4096-wide model, here one block an SM.
  const Path narrow = Path::Narrow80;
  run_case(GgmlType::Q4_K, {fill, 2048, 32, GemmTile::Auto, true, false, true, narrow, false, true,
                            rule, true});
  run_case(GgmlType::Q4_K, {fill - 7, 1792, 27, GemmTile::Auto, false, true, false, narrow, false,
                            true, rule});
  // One memory for launches of several row counts (as the engine lends
  // it): each launch's counters and sums where the memory puts them, so a
  // shorter launch leaves the longer one's counters alone. Two splits
  // forced, so that they run where the rule would take none (an A100).
  {
    const SplitScope scope(2);
    DeviceBuffer<uint8_t> shared(
        kernels::gemm_narrow_sm80_split_bytes(fill, kernels::kNarrowSplits));
    CUDA_CHECK(cudaMemset(shared.get(), 0, shared.size()));
    kernels::GemmScratch lent;
    lent.split = shared.get();
    lent.split_bytes = shared.size();
    lent.split_rows = fill;
    for (int64_t rows : {fill, int64_t(1024), int64_t(100), fill - 5})
      run_case(GgmlType::Q4_K,
               {rows, 1024, 32, GemmTile::Auto, true, false, true, narrow, false, true, 2},
               nullptr, &lent);
  }
  // Without split memory the same launch takes one block a row block.
  run_case(GgmlType::Q4_K, {fill, 2048, 32, GemmTile::Auto, true, false, true, Path::Narrow80});
  const Shape shapes[] = {{100, 2048}, {67, 1792}, {45, 256}, {fill + 37, 512}};
  int i = 0;
  for (int splits : {2, 3, 4}) {
    const SplitScope scope(splits);
    for (const Shape& sh : shapes)
      for (int n : {25, 32}) {
        run_case(GgmlType::Q4_K, {sh.rows, sh.cols, n, GemmTile::Auto, i % 2 == 0, i % 3 != 1,
                                  i % 4 != 3, narrow, false, true, splits, i % 5 == 0});
        ++i;
      }
    // Other shapes keep one block a row block, forced or not.
    for (const auto& [type, n] : {std::pair{GgmlType::Q4_K, 24}, std::pair{GgmlType::Q4_0, 32}})
      run_case(type, {100, 2048, n, GemmTile::Auto, true, true, true, narrow, false, true});
  }
}

// Blocks whose warps share x (gemm_narrow_sm80_set_shared_x): which the rule
// takes, and where none is taken; then each shape forced, against the
// reference. Row counts: not a multiple of 128 (a last block of 27 rows,
// one whose last row warps are past the end), and for Wide the counts that
// take 4, 5 and 6 row warps. Columns: 1,792 (14 stages: 7 a group of
// warps) and 256 (Q4_0 128: one stage, so the second group has none).
struct SharedXScope {
  explicit SharedXScope(kernels::NarrowSharedX how) { kernels::gemm_narrow_sm80_set_shared_x(how); }
  ~SharedXScope() { kernels::gemm_narrow_sm80_set_shared_x(kernels::NarrowSharedX::Rule); }
};

TEST_CASE("gemm narrow sm80 with warps that share x: as taken, and against the reference") {
  if (!device_is_sm80_plus() || !kernels::gemm_sm80_available()) {
    MESSAGE("not an sm_80+ device with the variant built: skipped");
    return;
  }
  const auto [sms, smem_per_sm] = sm_count_and_shared_memory();
  const int64_t s = sms;
  // The rule takes them on an H100/H200 only (228 KiB an SM, where it was
  // measured): there two Pair blocks (at most 96 KiB each) and one Wide
  // (at most 226 KiB) fit an SM. (VOLTAD_NARROW_SHARED_X, if set,
  // overrides the rule: leave it unset here.)
  const bool fits = smem_per_sm >= 228 * 1024;
  using kernels::NarrowSharedX;
  using kernels::PackedFormat;
  auto taken = [&](PackedFormat f, int64_t rows, int n) {
    kernels::GemmArgs a;
    a.w.layout.format = f;
    a.w.layout.rows = rows;
    a.n = n;
    return kernels::gemm_narrow_sm80_shared_x_taken(a);
  };
  const NarrowSharedX pair = fits ? NarrowSharedX::Pair : NarrowSharedX::Never;
  const NarrowSharedX wide = fits ? NarrowSharedX::Wide : NarrowSharedX::Never;
  for (PackedFormat f : {PackedFormat::Int4K256, PackedFormat::Int6K256}) {
    CHECK(taken(f, 192 * s, 32) == wide);                        // 6 row warps fill the SMs once
    CHECK(taken(f, 160 * s - 9, 25) == wide);                    // 5
    CHECK(taken(f, 224 * s - 64, 32) == pair);                   // 7 would be needed
    CHECK(taken(f, 128 * s - 100, 32) == pair);                  // as many 128-row blocks as SMs
    CHECK(taken(f, 128 * s - 128, 32) == NarrowSharedX::Never);  // fewer
    CHECK(taken(f, 192 * s, 24) == NarrowSharedX::Never);        // 17-24 tokens
    CHECK(taken(f, 192 * s, 8) == NarrowSharedX::Never);
    CHECK(taken(f, 192 * s, 33) == NarrowSharedX::Never);
  }
  CHECK(taken(PackedFormat::Int4Sym32, 192 * s, 8) == pair);  // never Wide
  CHECK(taken(PackedFormat::Int4Sym32, 192 * s, 1) == pair);
  CHECK(taken(PackedFormat::Int4Sym32, 128 * s - 128, 8) == NarrowSharedX::Never);
  CHECK(taken(PackedFormat::Int4Sym32, 192 * s, 9) == NarrowSharedX::Never);
  {
    const SharedXScope never(NarrowSharedX::Never);
    CHECK(taken(PackedFormat::Int4K256, 192 * s, 32) == NarrowSharedX::Never);
  }
  if (!fits) {
    MESSAGE("not an H100/H200: the rule takes none, and the forced shapes are not run");
    return;
  }
  {
    const SharedXScope forced(NarrowSharedX::Wide);
    CHECK(taken(PackedFormat::Int4Sym32, 192 * s, 8) == NarrowSharedX::Wide);
    CHECK(taken(PackedFormat::Int4K256, 224 * s - 64, 32) == NarrowSharedX::Never);  // no 7
  }
  const Path narrow = Path::Narrow80;
  int i = 0;
  for (NarrowSharedX how : {NarrowSharedX::Pair, NarrowSharedX::Wide}) {
    const SharedXScope scope(how);
    const std::vector<int64_t> row_counts =
        how == NarrowSharedX::Pair ? std::vector<int64_t>{128 * s - 101, 128 * s + 27}
                                   : std::vector<int64_t>{128 * s - 5, 160 * s - 9, 192 * s - 70};
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
      const int64_t short_cols = type == GgmlType::Q4_0 ? 128 : 256;
      const std::vector<int> counts =
          type == GgmlType::Q4_0 ? std::vector<int>{1, 5, 8} : std::vector<int>{25, 32};
      for (int64_t rows : row_counts)
        for (int n : counts) {
          CAPTURE(int(how));
          REQUIRE(taken(type == GgmlType::Q4_0   ? PackedFormat::Int4Sym32
                        : type == GgmlType::Q4_K ? PackedFormat::Int4K256
                                                 : PackedFormat::Int6K256,
                        rows, n) == how);
          const int64_t cols = i % 2 == 0 ? 1792 : short_cols;
          run_case(type,
                   {rows, cols, n, GemmTile::Auto, i % 3 == 0, i % 2 == 1, i % 4 != 3, narrow});
          ++i;
        }
    }
  }
}

// The streaming blocks fed by bulk copies (sm_90 under `auto`;
// kernels/narrow_bulk_sm90.cu): Q4_K and Q4_0 rows of 4,096 columns at 1-8
// tokens.
// Where the rule takes them (4+ row groups of 16 for every block of one
// wave: one block an SM) and where not; then forced on row counts that
// give 5 blocks one group each (67 rows: the rest of the wave has none),
// every block one or two (the ring of 3 stages not yet wrapped), five with
// a last group of 7 rows (it wraps once) and eight with a last group of 11
// (twice: every barrier phase back to its first parity), against the
// reference, twice for the same bits in two cases. A device whose blocks
// get less shared memory than they need (an sm_120 card) takes none.
struct BulkScope {
  explicit BulkScope(kernels::NarrowBulk how) { kernels::gemm_narrow_sm80_set_bulk(how); }
  ~BulkScope() { kernels::gemm_narrow_sm80_set_bulk(kernels::NarrowBulk::Rule); }
};

TEST_CASE("gemm narrow sm80 streaming blocks (sm_90, auto): as taken, and against the reference") {
  const kernels::KernelSetScope auto_set(kernels::KernelSet::Auto);
  if (!device_is_sm80_plus() || !kernels::gemm_sm80_available() ||
      !kernels::programmatic_launch_supported()) {
    MESSAGE("no sm_90 code or device: the streaming blocks do not apply");
    return;
  }
  const int64_t s = sm_count_and_shared_memory().first;
  using kernels::NarrowBulk;
  using kernels::PackedFormat;
  auto taken = [&](PackedFormat f, int64_t rows, int64_t cols, int n) {
    kernels::GemmArgs a;
    a.w.layout.format = f;
    a.w.layout.rows = rows;
    a.w.layout.cols = cols;
    a.w.layout.quant_row_bytes = cols / 2;
    a.w.layout.scale_row_bytes = cols / 256 * 16;
    a.n = n;
    return kernels::gemm_narrow_sm80_bulk_taken(a);
  };
  // (VOLTAD_NARROW_BULK=0 or q4k, if set, keeps the rule from taking some:
  // leave it unset here.)
  int device = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (size_t(optin) < kernels::gemm_narrow_sm80_bulk_smem_bytes()) {
    const BulkScope always(NarrowBulk::Always);
    CHECK_FALSE(taken(PackedFormat::Int4K256, 64 * s, 4096, 8));
    MESSAGE("the streaming blocks do not fit this device's shared memory: none taken");
    return;
  }
  for (int n : {1, 2, 8}) CHECK(taken(PackedFormat::Int4K256, 64 * s, 4096, n));
  CHECK(taken(PackedFormat::Int4K256, 28672, 4096, 8) == (28672 >= 64 * s));
  CHECK_FALSE(taken(PackedFormat::Int4K256, 64 * s - 16, 4096, 8));  // a group short
  CHECK_FALSE(taken(PackedFormat::Int4K256, 64 * s, 4096, 9));
  CHECK_FALSE(taken(PackedFormat::Int4K256, 64 * s, 2048, 8));
  CHECK_FALSE(taken(PackedFormat::Int6K256, 64 * s, 4096, 8));
  CHECK(taken(PackedFormat::Int4Sym32, 64 * s, 4096, 8));  // its scales: as many bytes
  {
    // Ahead of the shared-x blocks the rule would take for Q4_0 otherwise.
    kernels::GemmArgs a;
    a.w.layout.format = PackedFormat::Int4Sym32;
    a.w.layout.rows = 64 * s;
    a.w.layout.cols = 4096;
    a.w.layout.quant_row_bytes = 2048;
    a.w.layout.scale_row_bytes = 256;
    a.n = 8;
    CHECK(kernels::gemm_narrow_sm80_shared_x_taken(a) == kernels::NarrowSharedX::Never);
  }
  {
    const BulkScope never(NarrowBulk::Never);
    CHECK_FALSE(taken(PackedFormat::Int4K256, 64 * s, 4096, 8));
  }
  {
    const BulkScope always(NarrowBulk::Always);
    CHECK(taken(PackedFormat::Int4K256, 67, 4096, 8));
    CHECK_FALSE(taken(PackedFormat::Int4K256, 67, 4096, 9));
    const kernels::KernelSetScope portable(kernels::KernelSet::Portable);
    CHECK_FALSE(taken(PackedFormat::Int4K256, 64 * s, 4096, 8));  // plain launches: no
  }
  {
    // The rule's own pick, against the reference.
    REQUIRE(taken(PackedFormat::Int4K256, 64 * s + 7, 4096, 8));
    run_case(GgmlType::Q4_K,
             {64 * s + 7, 4096, 8, GemmTile::Auto, true, true, true, Path::Narrow80});
    REQUIRE(taken(PackedFormat::Int4Sym32, 64 * s + 7, 4096, 5));
    run_case(GgmlType::Q4_0,
             {64 * s + 7, 4096, 5, GemmTile::Auto, false, true, true, Path::Narrow80});
  }
  const BulkScope always(NarrowBulk::Always);
  int i = 0;
  for (int64_t rows : {int64_t(67), 16 * s - 3, 32 * s, 80 * s - 9}) {
    for (int n : {1, 2, 5, 8}) {
      Case c{rows, 4096, n, GemmTile::Auto, i % 2 == 0, i % 3 != 1, i % 4 != 3, Path::Narrow80};
      c.twice = i == 5 || i == 13;
      for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q4_0}) run_case(type, c);
      ++i;
    }
  }
  for (int n : {3, 8})
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q4_0})
      run_case(type, {128 * s - 5, 4096, n, GemmTile::Auto, n == 8, n == 3, true, Path::Narrow80});
}

TEST_CASE("gemm: a prefill-sized case (512 tokens) with the automatic tile") {
  run_case(GgmlType::Q4_K, {300, 4096, 512, GemmTile::Auto, true, true, true});
  run_case(GgmlType::Q6_K, {1000, 512, 300, GemmTile::Auto, false, false, true});
}

// Shapes the variant takes: cols a multiple of 64 (512 for Q6_K).
TEST_CASE("gemm sm80 variant: the reference, and bit-identical to the portable kernel") {
  if (!device_is_sm80_plus()) {
    MESSAGE("device below sm_80: the variant does not run here");
    return;
  }
  REQUIRE_MESSAGE(kernels::gemm_sm80_available(),
                  "an sm_80+ device, but this build has no sm_80+ code for the variant "
                  "(CMAKE_CUDA_ARCHITECTURES)");
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_0,
                            GgmlType::Q5_1, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0,
                            GgmlType::F16,  GgmlType::BF16};
  const Shape shapes[] = {{7, 512}, {130, 1536}, {300, 4096}};
  const int ns[] = {9, 37, 130, 64, 200, 17, 33, 129, 512};
  int i = 0;
  for (GgmlType type : types) {
    for (const Shape& s : shapes) {
      Case c{s.rows,     s.cols,     ns[i % 9],  GemmTile::T128x128,
             i % 2 == 0, i % 3 != 1, i % 4 != 3, Path::Sm80};
      ++i;
      // The same inputs (test_rng is reseeded per case by the seed below).
      test_rng().seed(1000 + uint32_t(i));
      std::vector<float> variant, portable;
      run_case(type, c, &variant);
      test_rng().seed(1000 + uint32_t(i));
      c.path = Path::Portable;
      run_case(type, c, &portable);
      size_t differ = 0;
      for (size_t k = 0; k < variant.size(); ++k)
        if (std::memcmp(&variant[k], &portable[k], sizeof(float)) != 0 &&
            !(std::isnan(variant[k]) && std::isnan(portable[k])))
          ++differ;
      CAPTURE(ggml_type_name(type));
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("gemm with kernels=auto: shapes the variant refuses fall back to the portable kernel") {
  // cols 96 (not a multiple of 64), 768 for Q6_K (not of 512), scratch too
  // small for x in fp16: the portable kernel, still right.
  run_case(GgmlType::Q4_0, {130, 96, 37, GemmTile::Auto, true, true, true, Path::AutoSet});
  run_case(GgmlType::Q6_K, {67, 768, 64, GemmTile::Auto, false, true, true, Path::AutoSet});
  run_case(GgmlType::Q4_K, {67, 512, 33, GemmTile::Auto, true, false, true, Path::AutoSet, true});
  // The variant's own shapes through the same entry point, x unaligned (its
  // fp16 conversion's scalar path) and aligned, F32 where its ring fits.
  run_case(GgmlType::Q4_K, {67, 512, 33, GemmTile::Auto, true, false, false, Path::AutoSet});
  run_case(GgmlType::F32, {67, 512, 33, GemmTile::Auto, true, false, true, Path::AutoSet});
  run_case(GgmlType::Q4_K, {300, 4096, 512, GemmTile::Auto, true, true, true, Path::AutoSet});
}
