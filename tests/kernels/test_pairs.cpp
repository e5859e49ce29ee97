// Two products of the same x in one launch: a Q4_K_M layer's Q4_K q|k and
// Q6_K v (kernels::launch_matvec_pair at one token, the streaming
// matvecs; kernels::launch_gemm_narrow_sm80_pair at 2-8 tokens, the sm_80
// narrow GEMM). Each output is checked against the same matrix launched
// alone: bit for bit where the pair's blocks sum in the same order as the
// single launch's, else to a tight tolerance; rows past each matrix must
// stay untouched.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <utility>

#include "engine/weight_repack.h"
#include "kernels/gemm_sm80.h"
#include "kernels/kernel_set.h"
#include "kernels/matvec.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;
using kernels::PackedFormat;

namespace {

PackedMatrix make_matrix(GgmlType type, int64_t rows, int64_t cols) {
  const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, test_rng(), 15);
  auto packed = repack_matrix(type, gguf.data(), rows, cols);
  REQUIRE(packed.ok());
  return std::move(*packed);
}

// A layer's q|k (Q4_K, rows_a) and v (Q6_K, rows_b), random, on the device.
struct QkV {
  PackedMatrix qk, v;
  DeviceBuffer<uint8_t> d_qk, d_v;
  QkV(int64_t rows_a, int64_t rows_b, int64_t cols)
      : qk(make_matrix(GgmlType::Q4_K, rows_a, cols)),
        v(make_matrix(GgmlType::Q6_K, rows_b, cols)),
        d_qk(qk.bytes),
        d_v(v.bytes) {}
};

// The largest |x - y| over the largest |y| (NaN where only one is NaN).
double relative_gap(const std::vector<float>& x, const std::vector<float>& y) {
  REQUIRE(x.size() == y.size());
  double gap = 0.0, scale = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return std::nan("");
    if (std::isnan(x[i])) continue;
    gap = std::max(gap, std::fabs(double(x[i]) - double(y[i])));
    scale = std::max(scale, std::fabs(double(y[i])));
  }
  return gap / std::max(scale, 1e-30);
}

}  // namespace

// The streaming matvecs' pair: each row group is summed by one block in the
// same order as alone, so the pair's outputs equal the two launches' bit
// for bit, whatever share of the grid each matrix gets. Shapes:
// Llama-3-8B's (5,120 and 1,024 rows of 4,096), blocks that walk several
// row groups, few rows, and each slice count forced. Other formats, a
// batch of 2, different x and a matrix the bulk kernel takes are not paired.
TEST_CASE("batch-1 matvec pair: a Q4_K and a Q6_K product in one launch") {
  struct Case {
    int64_t rows_a, rows_b, cols;
    int slices;
  };
  for (const Case& c :
       {Case{5120, 1024, 4096, 0}, Case{25001, 901, 2560, 0}, Case{7, 3, 256, 0},
        Case{4099, 1500, 1280, 1}, Case{4099, 1500, 1280, 2}, Case{33, 9000, 768, 0}}) {
    CAPTURE(c.rows_a);
    CAPTURE(c.rows_b);
    CAPTURE(c.cols);
    CAPTURE(c.slices);
    const QkV w(c.rows_a, c.rows_b, c.cols);
    DeviceBuffer<float> d_x(random_floats(size_t(c.cols)));
    DeviceBuffer<int8_t> d_q(kernels::quantized_activation_q_bytes(1, c.cols));
    DeviceBuffer<float> d_s(kernels::quantized_activation_scale_bytes(1, c.cols) / sizeof(float));
    const kernels::QuantizedActivations xq{d_q.get(), d_s.get()};
    kernels::launch_quantize_activations(d_x.get(), c.cols, 1, c.cols, xq, nullptr);
    // y: each matrix's rows, then 5 NaN entries that no launch may touch.
    const std::vector<float> y0a = random_floats(size_t(c.rows_a));
    std::vector<float> init_a = y0a, init_b(size_t(c.rows_b), 0.0f);
    init_a.resize(size_t(c.rows_a) + 5, std::nanf(""));
    init_b.resize(size_t(c.rows_b) + 5, std::nanf(""));
    const std::vector<float> bias_b = random_floats(size_t(c.rows_b));
    DeviceBuffer<float> d_ya(init_a), d_yb(init_b), d_bias(bias_b);
    kernels::MatvecArgs a, b;
    a.w = {w.qk.layout, w.d_qk.get()};
    b.w = {w.v.layout, w.d_v.get()};
    for (kernels::MatvecArgs* m : {&a, &b}) {
      m->batch = 1;
      m->xq = xq;
      m->slices = c.slices;
    }
    a.y = d_ya.get(), a.ldy = c.rows_a, a.accumulate = true;  // residual add
    b.y = d_yb.get(), b.ldy = c.rows_b, b.bias = d_bias.get();
    const bool paired = kernels::launch_matvec_pair(a, b, nullptr);
    CHECK(paired == (kernels::matvec_pair_enabled() && kernels::matvec_stream_enabled()));
    if (!paired) {
      MESSAGE("VOLTAD_MATVEC_PAIR=0 or VOLTAD_MATVEC_STREAM=0: nothing paired to check");
      continue;
    }
    const std::vector<float> pair_a = d_ya.download(), pair_b = d_yb.download();
    d_ya.upload(init_a);
    d_yb.upload(init_b);
    kernels::launch_matvec(a, nullptr);
    kernels::launch_matvec(b, nullptr);
    const std::vector<float> alone_a = d_ya.download(), alone_b = d_yb.download();
    CHECK(same_bits(pair_a, alone_a));
    CHECK(same_bits(pair_b, alone_b));
    for (int i = 0; i < 5; ++i) {
      CHECK(std::isnan(pair_a[size_t(c.rows_a) + size_t(i)]));
      CHECK(std::isnan(pair_b[size_t(c.rows_b) + size_t(i)]));
    }
    // The launches did work: a's rows moved from y0, b's from zero.
    CHECK(pair_a[0] != y0a[0]);
    CHECK(pair_b[0] != 0.0f);
  }
  // Not paired (nothing launched: no weights behind these): the formats
  // the other way round or both Q4_K, batch 2, x of different matrices,
  // and under `auto` on sm_90 a q|k the bulk-copy kernel takes.
  kernels::MatvecArgs p, q;
  int8_t xq8 = 0;
  float scale = 0.0f;
  for (kernels::MatvecArgs* m : {&p, &q}) {
    m->batch = 1;
    m->xq = {&xq8, &scale};
  }
  p.w.layout = kernels::make_packed_layout(PackedFormat::Int6K256, 1024, 4096);
  q.w.layout = kernels::make_packed_layout(PackedFormat::Int4K256, 5120, 4096);
  CHECK_FALSE(kernels::launch_matvec_pair(p, q, nullptr));
  p.w.layout = kernels::make_packed_layout(PackedFormat::Int4K256, 1024, 4096);
  CHECK_FALSE(kernels::launch_matvec_pair(p, q, nullptr));
  std::swap(p, q);
  q.w.layout = kernels::make_packed_layout(PackedFormat::Int6K256, 1024, 4096);
  q.batch = 2;
  CHECK_FALSE(kernels::launch_matvec_pair(p, q, nullptr));
  q.batch = 1;
  int8_t other = 0;
  q.xq.q = &other;
  CHECK_FALSE(kernels::launch_matvec_pair(p, q, nullptr));
  q.xq.q = &xq8;
  const kernels::KernelSetScope scope(kernels::KernelSet::Auto);
  const int64_t bulk_rows = kernels::matvec_bulk_min_rows(PackedFormat::Int4K256);
  if (bulk_rows > 0) {
    p.w.layout = kernels::make_packed_layout(PackedFormat::Int4K256, bulk_rows, 4096);
    REQUIRE(kernels::matvec_bulk_applies(p));
    CHECK_FALSE(kernels::launch_matvec_pair(p, q, nullptr));
  } else {
    MESSAGE("no bulk-copy kernel here (sm_90 under auto): its case not run");
  }
}

// The pair's split of a wave (host arithmetic). Llama-3-8B's and Qwen3-8B's
// q|k (640 groups of 8 Q4_K rows, 2,304 bytes a row) and v (256 groups of
// 4 Q6_K rows, 3,360 bytes) on the H200's wave of 528: every block at
// most 2 groups, v 128 blocks (the first rule gave it 88, some of 3
// groups: 40,320 bytes). Then the limits: a matrix of one group, a wave
// of 2, a that needs fewer blocks than the wave leaves it.
TEST_CASE("matvec pair split: the busiest block reads the fewest bytes") {
  auto busiest = [](const kernels::MatvecPairSplit& s, int64_t ga, int64_t ba, int64_t gb,
                    int64_t bb) {
    return std::max((ga + s.blocks_a - 1) / s.blocks_a * ba,
                    (gb + s.blocks_b - 1) / s.blocks_b * bb);
  };
  const kernels::MatvecPairSplit llama =
      kernels::matvec_pair_split(640, 8 * 2304, 256, 4 * 3360, 528);
  CHECK(llama.blocks_b == 128);
  CHECK(llama.blocks_a == 400);
  CHECK(busiest(llama, 640, 8 * 2304, 256, 4 * 3360) == 2 * 8 * 2304);
  // (The first rule's split, for the record: v's busiest block 40,320 bytes.)
  CHECK(busiest({440, 88}, 640, 8 * 2304, 256, 4 * 3360) == 3 * 4 * 3360);
  // No split of the wave does better, and each side's blocks are in range.
  struct Case {
    int64_t ga, ba, gb, bb, wave;
  };
  for (const Case& c :
       {Case{640, 18432, 256, 13440, 528}, Case{1, 100, 1, 100, 2}, Case{5, 100, 300, 10, 64},
        Case{300, 10, 5, 100, 64}, Case{7, 1000, 9, 10, 1000}, Case{4000, 50, 3, 5000, 80}}) {
    CAPTURE(c.ga);
    CAPTURE(c.gb);
    CAPTURE(c.wave);
    const kernels::MatvecPairSplit s = kernels::matvec_pair_split(c.ga, c.ba, c.gb, c.bb, c.wave);
    CHECK(s.blocks_b >= 1);
    CHECK(s.blocks_b <= std::min(c.gb, c.wave - 1));
    CHECK(s.blocks_a >= 1);
    CHECK(s.blocks_a <= c.ga);
    CHECK(s.blocks_a + s.blocks_b <= c.wave);
    const int64_t best = busiest(s, c.ga, c.ba, c.gb, c.bb);
    for (int64_t nb = 1; nb <= std::min(c.gb, c.wave - 1); ++nb) {
      const int64_t na = std::min(c.ga, c.wave - nb);
      CHECK(busiest({na, nb}, c.ga, c.ba, c.gb, c.bb) >= best);
    }
  }
  // a of few groups, b's groups light: every split of b ties on a's
  // busiest block, and the tie goes to the proportional split (12.7
  // blocks, so all 9 of b's groups get one).
  const kernels::MatvecPairSplit few = kernels::matvec_pair_split(7, 1000, 9, 10, 1000);
  CHECK(few.blocks_a == 7);
  CHECK(few.blocks_b == 9);
  // b's groups nearly weightless: the proportional split is below one block.
  CHECK(kernels::matvec_pair_split(7, 1000000, 9, 1, 1000).blocks_b == 1);
}

// The narrow GEMMs' pair (8x2 blocks for both): where each matrix alone
// also takes 8-warp blocks (more row blocks than SMs) the sums meet in the
// same order, so the bits are equal; where it takes 16 warps (Llama-3-8B's
// v: 32 row blocks) the order differs and the outputs agree to ~1e-6 of
// their scale. x converted by the pair, or (holds_x) already in the
// scratch as a norm leaves it. Not paired: other formats or token counts,
// different x.
TEST_CASE("gemm narrow sm80 pair: a Q4_K and a Q6_K product in one launch") {
  int device = 0, sms = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8 || !kernels::gemm_sm80_available()) {
    MESSAGE("not an sm_80+ device with the narrow GEMM built: skipped");
    return;
  }
  const int64_t many = 32 * int64_t(sms + 3) - 5;  // more row blocks than SMs, the last of 27 rows
  struct Case {
    int64_t rows_a, rows_b, cols;
    int n;
    bool holds_x;
  };
  for (const Case& c : {Case{5120, 1024, 4096, 8, true}, Case{5120, 1024, 4096, 2, false},
                        Case{many, many, 1792, 6, false}, Case{many, many + 64, 4096, 1, true},
                        Case{77, many, 256, 3, false}}) {
    CAPTURE(c.rows_a);
    CAPTURE(c.rows_b);
    CAPTURE(c.cols);
    CAPTURE(c.n);
    const QkV w(c.rows_a, c.rows_b, c.cols);
    const int64_t ldx = c.cols + 4;
    DeviceBuffer<float> d_x(random_floats(size_t(c.n * ldx)));
    // y: n rows of each matrix's rows and 3 NaN columns, then a NaN row.
    const int64_t lda = c.rows_a + 3, ldb = c.rows_b + 3;
    std::vector<float> init_a(size_t((c.n + 1) * lda), std::nanf(""));
    std::vector<float> init_b(size_t((c.n + 1) * ldb), std::nanf(""));
    const std::vector<float> y0 = random_floats(size_t(c.rows_a));
    for (int t = 0; t < c.n; ++t)
      for (int64_t r = 0; r < c.rows_a; ++r) init_a[size_t(t * lda + r)] = y0[size_t(r)];
    const std::vector<float> bias = random_floats(size_t(c.rows_b));
    DeviceBuffer<float> d_ya(init_a), d_yb(init_b), d_bias(bias);
    DeviceBuffer<uint8_t> scratch(kernels::gemm_narrow_sm80_scratch_bytes(c.n, c.cols) + 64);
    kernels::GemmScratch gs{scratch.get(), scratch.size()};
    kernels::GemmArgs a, b;
    a.w = {w.qk.layout, w.d_qk.get()};
    b.w = {w.v.layout, w.d_v.get()};
    for (kernels::GemmArgs* m : {&a, &b}) {
      m->x = d_x.get();
      m->ldx = ldx;
      m->n = c.n;
    }
    a.y = d_ya.get(), a.ldy = lda, a.accumulate = true;  // residual add
    b.y = d_yb.get(), b.ldy = ldb, b.bias = d_bias.get();
    auto fill_scratch = [&] {  // as a norm writing the GEMM's x leaves it
      CUDA_CHECK(cudaMemset(scratch.get(), 0xFF, scratch.size()));
      if (!c.holds_x) return;
      kernels::launch_gemm_narrow_sm80(a, gs, nullptr);  // converts x, then runs a
      gs.holds_x = d_x.get();
      d_ya.upload(init_a);
    };
    // Q6_K's 8-warp blocks need 96-128 KiB of shared memory a block: not on
    // sm_86/89/120's 99 KiB.
    if (!kernels::gemm_narrow_sm80_pair_enabled() || !kernels::gemm_narrow_sm80_supports(a, gs) ||
        !kernels::gemm_narrow_sm80_supports(b, gs)) {
      MESSAGE("the narrow GEMM takes not both here, or VOLTAD_NARROW_PAIR=0: skipped");
      return;
    }
    fill_scratch();
    REQUIRE(kernels::launch_gemm_narrow_sm80_pair(a, b, gs, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> pair_a = d_ya.download(), pair_b = d_yb.download();
    d_ya.upload(init_a);
    d_yb.upload(init_b);
    gs.holds_x = nullptr;
    kernels::launch_gemm_narrow_sm80(a, gs, nullptr);
    kernels::launch_gemm_narrow_sm80(b, gs, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> alone_a = d_ya.download(), alone_b = d_yb.download();
    auto eight_warps = [](const kernels::GemmArgs& m) {
      return kernels::gemm_narrow_sm80_one_tile_taken(m) != kernels::NarrowOneTile::Default;
    };
    if (eight_warps(a))
      CHECK(same_bits(pair_a, alone_a));
    else
      CHECK(relative_gap(pair_a, alone_a) < 1e-5);
    if (eight_warps(b))
      CHECK(same_bits(pair_b, alone_b));
    else
      CHECK(relative_gap(pair_b, alone_b) < 1e-5);
    MESSAGE("a " << (eight_warps(a) ? "8-warp" : "16-warp") << " alone, b "
                 << (eight_warps(b) ? "8-warp" : "16-warp") << " alone");
    // The NaN entries stayed NaN (relative_gap and same_bits see them too),
    // and the products did work: a moved from y0, b from NaN.
    CHECK(std::isnan(pair_a[size_t(c.rows_a)]));
    CHECK(std::isnan(pair_b[size_t(c.n * ldb)]));
    CHECK(pair_a[0] != y0[0]);
    CHECK(std::isfinite(pair_b[0]));
    gs.holds_x = nullptr;
  }
  // Not paired (nothing launched: no weights behind these).
  kernels::GemmArgs p, q;
  p.w.layout = kernels::make_packed_layout(PackedFormat::Int4K256, 5120, 4096);
  q.w.layout = kernels::make_packed_layout(PackedFormat::Int6K256, 1024, 4096);
  DeviceBuffer<uint8_t> scratch(kernels::gemm_narrow_sm80_scratch_bytes(32, 4096) + 64);
  const kernels::GemmScratch gs{scratch.get(), scratch.size()};
  for (kernels::GemmArgs* m : {&p, &q}) {
    m->n = 8;
    m->x = reinterpret_cast<const float*>(scratch.get());
    m->ldx = 4096;
    m->ldy = 5120;
  }
  CHECK_FALSE(kernels::launch_gemm_narrow_sm80_pair(q, p, gs, nullptr));  // formats swapped
  p.n = q.n = 9;                                                          // two token tiles
  CHECK_FALSE(kernels::launch_gemm_narrow_sm80_pair(p, q, gs, nullptr));
  p.n = q.n = 8;
  q.x = nullptr;  // another x
  CHECK_FALSE(kernels::launch_gemm_narrow_sm80_pair(p, q, gs, nullptr));
}
