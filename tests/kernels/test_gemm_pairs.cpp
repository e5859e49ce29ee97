// Paired B (kernels/wmma_pairs.h, kernels/gemm_narrow.cu): the probe finds
// the device's wmma order, and the narrow GEMM with its B fragments built in
// registers gives, bit for bit, what the tile path gives on fp32 x (the same
// fp16 operands; Quads relabels k alike in its B and its x fragments, filled
// from registers, and the MMAs' sums came out the same bits on the H100, run
// 68): launches of 8 tokens or fewer against the same launch on fp32 x,
// 16-token blocks (two 8-token MMAs a k step) against 8-token launches of
// the tile path on each 8 tokens; the V100's order too, emulated where the
// device has another. The whole y
// is compared, rows and tokens past the ends included (neither may write
// there). The fp16 x through the tile (paired B not allowed) multiplies in
// another k order: it must differ somewhere, or the comparison proves
// nothing. The float64 reference for both paths: tests/kernels/test_gemm.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "engine/weight_repack.h"
#include "kernels/gemm_wmma.h"
#include "kernels/narrow_plan.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/narrow_overrides.h"
#include "tests/kernels/narrow_x_pack.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;
using kernels::GemmTile;
using kernels::WmmaPairs;

namespace {

int device_major() {
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

int smem_optin() {
  int device = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

int sm_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

bool pairs_off_by_environment() {
  const char* v = std::getenv("VOLTAD_NARROW_PAIRS");
  return v && (v[0] == '0' || v[0] == '8');
}

struct Outputs {
  std::vector<float> paired, tile32, tile16;  // tile16: fp16 x, pairs not allowed
  std::vector<float> paired32;                // 32-token blocks (17-32 tokens), else empty
  kernels::NarrowLaunch paired_launch, paired32_launch;  // what they ran
};

// One matrix and n tokens of x; y starts as random values (the sums are
// added to them where `accumulate`), the same for each path.
Outputs run_paths(WmmaPairs order, GgmlType type, int64_t rows, int64_t cols, int n,
                  bool accumulate, bool bias_on) {
  std::mt19937& rng = test_rng();
  const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, rng, 15);
  auto packed = repack_matrix(type, gguf.data(), rows, cols);
  REQUIRE_MESSAGE(packed.ok(), (packed.ok() ? "" : packed.error().message));
  const int64_t ldx = cols + 4, ldy = rows + 3;
  std::vector<float> x = random_floats(size_t(n * ldx));
  const size_t y_size = size_t((n + 1) * ldy);
  const std::vector<float> y0 = random_floats(y_size), bias = random_floats(size_t(rows));
  DeviceBuffer<uint8_t> d_w(packed->bytes);
  DeviceBuffer<float> d_x(x), d_bias(bias), d_y(y_size);
  const std::vector<uint32_t> x16 = pack_narrow_x(x, n, ldx, cols);
  DeviceBuffer<uint32_t> d_x16(x16);

  kernels::GemmArgs a;
  a.w = {packed->layout, d_w.get()};
  a.x = d_x.get();
  a.ldx = ldx;
  a.n = n;
  a.y = d_y.get();
  a.ldy = ldy;
  a.bias = bias_on ? d_bias.get() : nullptr;
  a.accumulate = accumulate;
  REQUIRE(kernels::gemm_narrow_takes_x16(a));

  Outputs out;
  auto run = [&](auto launch) {
    d_y.upload(y0);
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    return d_y.download();
  };
  {
    NarrowOverrides overrides;
    overrides.pairs(order);
    overrides.tokens32(false);
    out.paired = run([&] { kernels::launch_gemm_narrow_x16(a, d_x16.get(), nullptr); });
    out.paired_launch = kernels::gemm_narrow_last_launch();
    if (n > 16) {
      overrides.tokens32(true);
      out.paired32 = run([&] { kernels::launch_gemm_narrow_x16(a, d_x16.get(), nullptr); });
      out.paired32_launch = kernels::gemm_narrow_last_launch();
    }
    overrides.tokens32(std::nullopt);
    overrides.pairs(WmmaPairs::None);
    out.tile16 = run([&] { kernels::launch_gemm_narrow_x16(a, d_x16.get(), nullptr); });
  }
  // The tile on fp32 x, in launches of 8 tokens or fewer.
  out.tile32 = run([&] {
    for (int t0 = 0; t0 < n; t0 += 8) {
      kernels::GemmArgs s = a;
      s.x = a.x + t0 * ldx;
      s.y = a.y + t0 * ldy;
      s.n = n - t0 < 8 ? n - t0 : 8;
      kernels::launch_gemm_narrow(s, nullptr);
    }
  });
  return out;
}

}  // namespace

TEST_CASE("paired B: the probe finds the device's wmma order") {
  const WmmaPairs o = kernels::gemm_narrow_pairs();
  MESSAGE("wmma order for paired B: " << std::string(kernels::wmma_pairs_name(o)));
  if (kernels::gemm_narrow_pairs() != o) FAIL("the probe's answer changed");
  if (std::getenv("VOLTAD_NARROW_PAIRS") && std::getenv("VOLTAD_NARROW_PAIRS")[0] == '0') {
    CHECK(o == WmmaPairs::None);
    return;
  }
  // sm_80 and later: mma.m16n8k16 underneath, the Quads order (seen on the
  // H200); sm_70: the order read from the V100's machine code.
  if (device_major() >= 8) CHECK(o == WmmaPairs::Quads);
  if (device_major() == 7) MESSAGE("sm_7x: " << std::string(kernels::wmma_pairs_name(o)));
}

// Each order this device runs: its own (the probe's), and the V100's
// RowPerLane, emulated off sm_70 (its fragments through the weight tile and
// load_matrix_sync: its nibble reads, swizzle and decode checked here).
struct Shape {
  int64_t rows, cols;
};
// 67 rows: 3 row blocks, 16-warp blocks either way (12 in 32-token
// blocks); 4300 and 8200: more blocks than SMs, 8-warp blocks either way
// (in 32-token blocks 6 where narrow_warps32_for says: 4300 on cards of
// 68-134 SMs, 8200 on 129-256 and on 80); 512 x 14336: long rows (k shares
// of many stages).
constexpr Shape kShapes[] = {{67, 4096}, {4300, 512}, {512, 14336}, {130, 1024}, {8200, 1024}};
constexpr GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K};

// What a failure prints: the case.
std::string describe(WmmaPairs order, GgmlType type, const Shape& s, int n) {
  return std::string(kernels::wmma_pairs_name(order)) + " " + ggml_type_name(type) + " " +
         std::to_string(s.rows) + " x " + std::to_string(s.cols) + ", " + std::to_string(n) +
         " tokens";
}

std::vector<WmmaPairs> orders_to_compare() {
  std::vector<WmmaPairs> orders;
  if (kernels::gemm_narrow_pairs() != WmmaPairs::None && !pairs_off_by_environment())
    orders.push_back(kernels::gemm_narrow_pairs());
  if (kernels::gemm_narrow_pairs_runs(WmmaPairs::RowPerLane) &&
      (orders.empty() || orders[0] != WmmaPairs::RowPerLane))
    orders.push_back(WmmaPairs::RowPerLane);
  return orders;
}

TEST_CASE("paired B: bit for bit the tile path on fp32 x, at 1-32 tokens") {
  const std::vector<WmmaPairs> orders = orders_to_compare();
  if (pairs_off_by_environment()) MESSAGE("the probe's order off by the environment");
  if (device_major() >= 8) CHECK(orders.size() == (pairs_off_by_environment() ? 1u : 2u));
  if (orders.empty()) {
    MESSAGE("no order of paired B runs here: nothing to compare");
    return;
  }
  int compared = 0, differed16 = 0, i = 0;
  for (WmmaPairs order : orders)
    for (GgmlType type : kTypes)
      for (const Shape& s : kShapes)
        for (int n : {1, 3, 8, 9, 16, 24, 32}) {
          // The tile launches take 8 tokens; the warps a block (16 or 8,
          // gemm_narrow_warps16) must match, or k splits differently.
          const int64_t row_blocks = (s.rows + 31) / 32;
          const int64_t blocks = (n <= 8 ? 1 : (n + 15) / 16) * row_blocks;
          if (kernels::gemm_narrow_warps16(blocks) != kernels::gemm_narrow_warps16(row_blocks))
            continue;
          const std::string what = describe(order, type, s, n);
          CAPTURE(what);
          const Outputs o = run_paths(order, type, s.rows, s.cols, n, i % 2 == 0, i % 3 != 1);
          ++i;
          CHECK(o.paired_launch.order == order);  // the forced order ran
          CHECK(o.paired_launch.tokens != 32);
          CHECK(std::memcmp(o.paired.data(), o.tile32.data(), o.paired.size() * sizeof(float)) ==
                0);
          size_t first = 0;
          while (first < o.paired.size() &&
                 std::memcmp(&o.paired[first], &o.tile32[first], sizeof(float)) == 0)
            ++first;
          if (first < o.paired.size())
            MESSAGE("first difference at " << first << ": " << o.paired[first] << " against "
                                           << o.tile32[first]);
          ++compared;
          differed16 += std::memcmp(o.tile16.data(), o.tile32.data(), o.tile16.size() * 4) != 0;
        }
  CHECK(compared >= 60 * int(orders.size()));
  CHECK(differed16 > 0);
}

// 32-token blocks (17-32 tokens, gemm_narrow_tokens32_force) decode each
// chunk once for four 8-token MMAs. Their blocks have other warp counts (12
// or 6) than the 16-token blocks (16 or 8), so k may be split into other
// shares and the fp32 sums added in another order: equal to rounding. The
// launch records say they ran, in the forced order, with both warp counts;
// and each order's sums must differ from the 16-token blocks' somewhere.
TEST_CASE("paired B in 32-token blocks: the 16-token blocks' sums to rounding") {
  const std::vector<WmmaPairs> orders = orders_to_compare();
  if (orders.empty()) {
    MESSAGE("no order of paired B runs here: nothing to compare");
    return;
  }
  int compared = 0, i = 0;
  for (WmmaPairs order : orders) {
    int differed = 0;
    bool warps12 = false, warps6 = false;
    for (GgmlType type : kTypes)
      for (const Shape& s : kShapes)
        for (int n : {17, 24, 32}) {
          const std::string what = describe(order, type, s, n);
          CAPTURE(what);
          const Outputs o = run_paths(order, type, s.rows, s.cols, n, i % 2 == 0, i % 3 != 1);
          ++i;
          REQUIRE(o.paired32.size() == o.paired.size());
          CHECK(o.paired32_launch.order == order);
          CHECK(o.paired32_launch.tokens == 32);
          // The block size narrow_warps32_for (kernels/narrow_plan.h) gives
          // this grid, or 6 where 12 warps' shared memory does not fit.
          const int want = kernels::narrow_warps32_for((s.rows + 31) / 32, sm_count());
          CHECK((o.paired32_launch.warps == want ||
                 (want == 12 && o.paired32_launch.warps == 6 && smem_optin() < 84 * 1024)));
          warps12 |= o.paired32_launch.warps == 12;
          warps6 |= o.paired32_launch.warps == 6;
          float scale = 0.0f;
          for (float v : o.paired) scale = std::max(scale, std::fabs(v));
          size_t off = 0;  // NaN counts as off
          for (size_t e = 0; e < o.paired.size(); ++e)
            off += !(std::fabs(o.paired32[e] - o.paired[e]) <= 1e-4f * scale);
          CHECK(off == 0);
          ++compared;
          differed +=
              std::memcmp(o.paired32.data(), o.paired.data(), o.paired.size() * sizeof(float)) != 0;
        }
    CAPTURE(std::string(kernels::wmma_pairs_name(order)));
    CHECK(differed > 0);
    CHECK(warps6);
    CHECK((warps12 || smem_optin() < 84 * 1024));  // 12-warp blocks need 84 KB
  }
  CHECK(compared == 45 * int(orders.size()));
}

// Which kernel takes the wide products (gemm_pick_tile, runs 53-54, 59):
// gate|up's rows (two waves of 32x64 tiles) stay narrow where the 32-token
// blocks run and take the tiles from 17 tokens where they do not; an lm
// head's take the 32x128 tiles at 9-32 tokens either way.
TEST_CASE("32-token blocks: gate|up narrow to 32 tokens, an lm head in the tiles from 9") {
  NarrowOverrides overrides;
  for (bool blocks32 : {false, true}) {
    overrides.tokens32(blocks32);
    CAPTURE(blocks32);
    if (blocks32 && !kernels::gemm_narrow_tokens32()) {
      MESSAGE("no order of paired B runs here: the 32-token blocks do not");
      continue;
    }
    CHECK(kernels::gemm_narrow_tokens32() == blocks32);
    CHECK((kernels::gemm_pick_tile(17, 28672) == GemmTile::N16) == blocks32);
    CHECK((kernels::gemm_pick_tile(32, 28672) == GemmTile::N16) == blocks32);
    CHECK(kernels::gemm_pick_tile(8, 128256) == GemmTile::N16);
    // The head's tiles are 32x128 (run 59), Qwen3's 151,936 rows too.
    CHECK(kernels::gemm_pick_tile(9, 128256) == GemmTile::T32x128);
    CHECK(kernels::gemm_pick_tile(16, 128256) == GemmTile::T32x128);
    CHECK(kernels::gemm_pick_tile(16, 65536) == GemmTile::T32x128);
    CHECK(kernels::gemm_pick_tile(16, 57344) == GemmTile::N16);
    CHECK(kernels::gemm_pick_tile(32, 128256) == GemmTile::T32x128);
    CHECK(kernels::gemm_pick_tile(32, 151936) == GemmTile::T32x128);
    CHECK(kernels::gemm_pick_tile(33, 128256) != GemmTile::T32x128);
  }
}
