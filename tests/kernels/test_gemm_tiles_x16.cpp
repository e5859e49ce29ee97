// The 32-token tiles (32x64, 32x128) on x already in fp16 in the narrow
// GEMMs' layout (launch_gemm_tiles_x16): the same fp16 operands as the
// tiles on fp32 x, which round x when they stage it, so the same bits of y.
// The fp32 x the x16 launches see is zeros: a kernel that read it instead
// of the fp16 copy would give bias and y0 alone.
#include <doctest/doctest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "engine/weight_repack.h"
#include "kernels/gemm_sm80.h"
#include "kernels/gemm_wmma.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/narrow_x_pack.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;
using kernels::GemmTile;

namespace {

struct TileCase {
  GgmlType type;
  int64_t rows, cols;
  int n;
  GemmTile tile;  // Auto: by way of launch_gemm_for, as the backend calls it
  bool accumulate, with_bias;
};

// Runs the case on fp32 x (launch_gemm with the tile, or the automatic
// choice) and on its fp16 copy; both outputs, n + 1 rows of ldy (the last
// row must stay as it was).
void run_tile_case(const TileCase& c) {
  std::ostringstream name;
  name << ggml_type_name(c.type) << " " << c.rows << "x" << c.cols << " n=" << c.n << " tile "
       << kernels::gemm_tile_name(c.tile) << (c.accumulate ? " +=" : "")
       << (c.with_bias ? " bias" : "");
  CAPTURE(name.str());
  std::mt19937& rng = test_rng();
  const std::vector<uint8_t> gguf = random_valid_tensor(c.type, c.rows, c.cols, rng, 15);
  auto packed = repack_matrix(c.type, gguf.data(), c.rows, c.cols);
  REQUIRE_MESSAGE(packed.ok(), (packed.ok() ? "" : packed.error().message));

  const int64_t ldx = c.cols + 5, ldy = c.rows + 3;  // x rows not 16-byte aligned
  const std::vector<float> x = random_floats(size_t(c.n * ldx));
  const std::vector<float> y0 = random_floats(size_t((c.n + 1) * ldy));
  const std::vector<float> bias = random_floats(size_t(c.rows));
  DeviceBuffer<uint8_t> d_w(packed->bytes);
  DeviceBuffer<float> d_x(x), d_zeros(std::vector<float>(x.size(), 0.0f)), d_bias(bias),
      d_y(y0.size());

  const std::vector<uint32_t> x16 = pack_narrow_x(x, c.n, ldx, c.cols);
  DeviceBuffer<uint8_t> scratch(
      std::max(x16.size() * 4, kernels::gemm_narrow_sm80_scratch_bytes(c.n, c.cols)) + 64);
  CUDA_CHECK(cudaMemset(scratch.get(), 0xFF, scratch.size()));
  CUDA_CHECK(cudaMemcpy(scratch.get(), x16.data(), x16.size() * 4, cudaMemcpyHostToDevice));

  kernels::GemmArgs args;
  args.w = {packed->layout, d_w.get()};
  args.ldx = ldx;
  args.n = c.n;
  args.y = d_y.get();
  args.ldy = ldy;
  args.bias = c.with_bias ? d_bias.get() : nullptr;
  args.accumulate = c.accumulate;
  auto run = [&](const float* xin, auto&& launch) {
    d_y.upload(y0);
    args.x = xin;
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    return d_y.download();
  };
  const std::vector<float> want = run(d_x.get(), [&] {
    if (c.tile == GemmTile::Auto)
      kernels::launch_gemm(args, nullptr);
    else
      kernels::launch_gemm(args, c.tile, nullptr);
  });
  const std::vector<float> got = run(d_zeros.get(), [&] {
    if (c.tile != GemmTile::Auto)
      return kernels::launch_gemm_tiles_x16(args, c.tile, scratch.get(), nullptr);
    kernels::GemmScratch gs{scratch.get(), scratch.size()};
    gs.holds_x = args.x;
    REQUIRE(kernels::gemm_tiles_take_x16(args));
    REQUIRE(kernels::gemm_for_reads_narrow_x(kernels::KernelSet::Portable, args, gs));
    kernels::launch_gemm_for(kernels::KernelSet::Portable, args, gs, nullptr);
  });
  CHECK(same_bits(got, want));
  // The row past n untouched, and y changed where it was written.
  CHECK(std::memcmp(got.data() + c.n * ldy, y0.data() + c.n * ldy, size_t(ldy) * 4) == 0);
  CHECK(std::memcmp(got.data(), y0.data(), size_t(c.rows) * 4) != 0);
}

}  // namespace

TEST_CASE("gemm 32-token tiles on fp16 x give the bits of the tiles on fp32 x") {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0,
                            GgmlType::F16};
  int i = 0;
  for (GgmlType type : types)
    for (GemmTile tile : {GemmTile::T32x64, GemmTile::T32x128})
      for (const auto& [rows, cols] :
           {std::pair<int64_t, int64_t>{7, 512}, {130, 1024}, {300, 256}})
        // One token, 8-row x, n8 past n, a whole tile, two tiles (m0 > 0).
        for (int n : {1, 8, 13, 32, 45}) {
          run_tile_case({type, rows, cols, n, tile, i % 2 == 0, i % 3 != 1});
          ++i;
        }
}

TEST_CASE("an lm head at 9-32 tokens reads the fp16 x its norm writes (portable)") {
  // Head-sized rows take the 32x128 tiles from 9 tokens (gemm_pick_tile);
  // 256 columns keep the case small.
  const int64_t rows = kernels::kGemmHeadRows + 77;
  for (int n : {9, 16, 32}) {
    kernels::GemmArgs probe;
    probe.w.layout = {kernels::PackedFormat::Int6K256, rows, 256};
    probe.w.data = reinterpret_cast<const uint8_t*>(uintptr_t(256));
    probe.n = n;
    REQUIRE(kernels::gemm_pick_tile(n, rows) == GemmTile::T32x128);
    CHECK(kernels::gemm_tiles_take_x16(probe));
    CHECK_FALSE(kernels::gemm_narrow_takes_x16(probe));
    run_tile_case({GgmlType::Q6_K, rows, 256, n, GemmTile::Auto, false, false});
  }
  // Not taken: 33 tokens (prefill tiles), the narrow kernel's shapes, k not
  // whole stages of 64.
  kernels::GemmArgs a;
  a.w.layout = {kernels::PackedFormat::Int6K256, rows, 256};
  a.w.data = reinterpret_cast<const uint8_t*>(uintptr_t(256));
  a.n = 33;
  CHECK_FALSE(kernels::gemm_tiles_take_x16(a));
  a.n = 8;  // the narrow kernel up to 8 tokens
  CHECK(kernels::gemm_pick_tile(8, rows) == GemmTile::N16);
  CHECK_FALSE(kernels::gemm_tiles_take_x16(a));
  a.n = 16;
  a.w.layout = {kernels::PackedFormat::F32, rows, 96};
  CHECK_FALSE(kernels::gemm_tiles_take_x16(a));
}
