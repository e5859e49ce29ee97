// The next RMSNorm made by the batch-1 product that writes the residual row
// (kernels::launch_matvec_norm_units), and the matvecs that read its
// unscaled x (QuantizedActivations::sumsq). The product's y must keep the
// plain streaming kernel's bits; its x must be launch_quantize_activations'
// bytes of g * h and its sums of squares h's; a reader of that x must give
// what it gives after launch_rmsnorm_quantize, to the quantizer's accuracy,
// for every batch-1 kernel that can read it (streaming, the pair, the
// dp4a kernels, the bulk-copy kernel where the device takes it).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <utility>

#include "engine/weight_repack.h"
#include "kernels/matvec.h"
#include "kernels/norm.h"
#include "tests/kernels/device_matrix.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;
using kernels::PackedFormat;

namespace {

bool units_on() {
  const char* s = std::getenv("VOLTAD_MATVEC_STREAM");
  return !(s && s[0] == '0');
}

bool q6k_units() {
  const char* v = std::getenv("VOLTAD_NORM_UNITS_Q6K");
  return v && v[0] && v[0] != '0';
}

// A unit's x: one row of `cols` values, its records and sums of squares.
struct NormX {
  QuantBuffers qb;
  DeviceBuffer<float> sumsq;
  NormX(int64_t cols) : qb(1, cols), sumsq(size_t(cols / 32)) { poison(sumsq); }
  kernels::QuantizedActivations view(float eps) const {
    kernels::QuantizedActivations v = qb.view();
    v.sumsq = const_cast<float*>(sumsq.get());
    v.eps = eps;
    return v;
  }
};

}  // namespace

// The product: y keeps launch_matvec's bits (2 slices, the units' shape),
// the unit blocks equal the quantizer's of g * h, and the sums of squares
// are h's. Shapes: o (4,096 x 4,096) and down (4,096 x 14,336) of
// Llama-3-8B, more units than a wave (blocks that walk two), a few units;
// Q6_K's where VOLTAD_NORM_UNITS_Q6K=1 turns them on.
TEST_CASE("norm units: the product's residual row, its quantized g * h and sums of squares") {
  if (!units_on()) {
    MESSAGE("VOLTAD_MATVEC_STREAM=0: nothing to check");
    return;
  }
  struct Case {
    GgmlType type;
    int64_t rows, cols;
  };
  std::vector<Case> cases = {{GgmlType::Q4_K, 4096, 4096},
                             {GgmlType::Q4_K, 16384, 512},
                             {GgmlType::Q4_0, 4096, 14336},
                             {GgmlType::Q4_0, 96, 256}};
  if (q6k_units())
    for (Case c : {Case{GgmlType::Q6_K, 4096, 14336}, Case{GgmlType::Q6_K, 32, 256},
                   Case{GgmlType::Q6_K, 8224, 768}})
      cases.push_back(c);
  for (const Case& c : cases) {
    CAPTURE(int(c.type));
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    const DeviceMatrix w(c.type, c.rows, c.cols);
    QuantBuffers xq(1, c.cols);
    DeviceBuffer<float> d_x(random_floats(size_t(c.cols)));
    kernels::launch_quantize_activations(d_x.get(), c.cols, 1, c.cols, xq.view(), nullptr);
    const std::vector<float> h0 = random_floats(size_t(c.rows), 4.0f);
    const std::vector<float> g = random_floats(size_t(c.rows));
    DeviceBuffer<float> d_y(h0), d_g(g);
    kernels::MatvecArgs a;
    a.w = w.view();
    a.batch = 1;
    a.xq = xq.view();
    a.y = d_y.get();
    a.ldy = c.rows;
    a.accumulate = true;
    a.slices = 2;
    REQUIRE(kernels::matvec_norm_units_apply(a));
    NormX out(c.rows);
    REQUIRE(kernels::launch_matvec_norm_units(a, d_g.get(), out.view(1e-5f), nullptr));
    const std::vector<float> h = d_y.download();
    d_y.upload(h0);
    kernels::launch_matvec(a, nullptr);
    // Q4_0's plain kernel is the dp4a one, whose sums may round otherwise.
    if (c.type == GgmlType::Q4_0)
      CHECK(relative_gap(h, d_y.download()) < 1e-6);
    else
      CHECK(same_bits(h, d_y.download()));
    CHECK(h[0] != h0[0]);  // the product ran

    std::vector<float> gh(h.size());
    for (size_t i = 0; i < h.size(); ++i) gh[i] = h[i] * g[i];
    DeviceBuffer<float> d_gh(gh);
    QuantBuffers ref(1, c.rows);
    kernels::launch_quantize_activations(d_gh.get(), c.rows, 1, c.rows, ref.view(), nullptr);
    check_same_quantization(out.qb, ref);
    const std::vector<float> ss = out.sumsq.download();
    int bad = 0;
    for (size_t u = 0; u < ss.size(); ++u) {
      double want = 0.0;
      for (size_t i = 32 * u; i < 32 * u + 32; ++i) want += double(h[i]) * double(h[i]);
      bad += !(std::fabs(ss[u] - want) <= 1e-5 * want);
    }
    CHECK(bad == 0);
  }
}

// The readers: each batch-1 kernel that reads the norm's x, from the unit
// product's output (with sumsq) against launch_rmsnorm_quantize's of the
// same h. The two quantize differently scaled values, so they agree to the
// quantizer's accuracy (~1e-5 of the largest output), not bit for bit.
TEST_CASE("norm units: batch-1 readers of an unscaled norm input") {
  if (!units_on()) {
    MESSAGE("VOLTAD_MATVEC_STREAM=0: nothing to check");
    return;
  }
  constexpr int64_t kDim = 4096;
  constexpr float kEps = 1e-5f;
  const DeviceMatrix o(GgmlType::Q4_K, kDim, 1024);
  QuantBuffers xq(1, 1024);
  DeviceBuffer<float> d_x(random_floats(1024));
  kernels::launch_quantize_activations(d_x.get(), 1024, 1, 1024, xq.view(), nullptr);
  const std::vector<float> g = random_floats(size_t(kDim));
  DeviceBuffer<float> d_h(random_floats(size_t(kDim), 3.0f)), d_g(g);
  kernels::MatvecArgs p;
  p.w = o.view();
  p.batch = 1;
  p.xq = xq.view();
  p.y = d_h.get();
  p.ldy = kDim;
  p.accumulate = true;
  NormX unscaled(kDim);
  REQUIRE(kernels::launch_matvec_norm_units(p, d_g.get(), unscaled.view(kEps), nullptr));
  QuantBuffers normed(1, kDim);
  DeviceBuffer<float> d_xn{size_t(kDim)};
  kernels::launch_rmsnorm_quantize(d_h.get(), kDim, d_g.get(), d_xn.get(), kDim, 1, kDim, kEps,
                                   normed.view(), nullptr);

  struct Reader {
    GgmlType type;
    int64_t rows;
    int slices;
  };
  // Q4_K and Q6_K stream; Q4_0 runs the dp4a kernel (or the bulk one under
  // `auto` on sm_90, as Q4_K's 28,672 rows do there); Q8_0 the int8 kernel.
  for (const Reader& r : {Reader{GgmlType::Q4_K, 6144, 0}, Reader{GgmlType::Q6_K, 1024, 0},
                          Reader{GgmlType::Q4_0, 6144, 1}, Reader{GgmlType::Q4_0, 6144, 2},
                          Reader{GgmlType::Q8_0, 1000, 0}, Reader{GgmlType::Q4_K, 28672, 0},
                          Reader{GgmlType::Q4_0, 28672, 0}}) {
    CAPTURE(int(r.type));
    CAPTURE(r.rows);
    const DeviceMatrix w(r.type, r.rows, kDim);
    const std::vector<float> bias = random_floats(size_t(r.rows));
    DeviceBuffer<float> d_y(size_t(r.rows)), d_bias(bias);
    kernels::MatvecArgs a;
    a.w = w.view();
    a.batch = 1;
    a.y = d_y.get();
    a.ldy = r.rows;
    a.bias = d_bias.get();
    a.slices = r.slices;
    a.xq = unscaled.view(kEps);
    kernels::launch_matvec(a, nullptr);
    const std::vector<float> got = d_y.download();
    a.xq = normed.view();
    kernels::launch_matvec(a, nullptr);
    const std::vector<float> want = d_y.download();
    CHECK(relative_gap(got, want) < 2e-5);
    // Without the factor the outputs are off by rms(h) (about 3 here).
    a.xq = unscaled.view(kEps);
    a.xq.sumsq = nullptr;
    kernels::launch_matvec(a, nullptr);
    CHECK(relative_gap(d_y.download(), want) > 0.1);
  }

  // The pair (Q4_K q|k beside Q6_K v) reads it too.
  const DeviceMatrix qk(GgmlType::Q4_K, 5120, kDim), v(GgmlType::Q6_K, 1024, kDim);
  DeviceBuffer<float> d_a(5120), d_b(1024);
  kernels::MatvecArgs a, b;
  a.w = qk.view(), b.w = v.view();
  a.y = d_a.get(), a.ldy = 5120, b.y = d_b.get(), b.ldy = 1024;
  for (kernels::MatvecArgs* m : {&a, &b}) {
    m->batch = 1;
    m->xq = unscaled.view(kEps);
  }
  if (!kernels::launch_matvec_pair(a, b, nullptr)) {
    MESSAGE("the pair does not apply here (bulk kernel or VOLTAD_MATVEC_PAIR=0)");
    return;
  }
  const std::vector<float> pair_a = d_a.download(), pair_b = d_b.download();
  a.xq = b.xq = normed.view();
  kernels::launch_matvec(a, nullptr);
  kernels::launch_matvec(b, nullptr);
  CHECK(relative_gap(pair_a, d_a.download()) < 2e-5);
  CHECK(relative_gap(pair_b, d_b.download()) < 2e-5);
}

// Where the unit kernel does not apply: nothing is launched (no weights
// behind these layouts).
TEST_CASE("norm units: what the unit kernel refuses") {
  int8_t q = 0;
  float s = 0.0f;
  kernels::MatvecArgs a;
  a.batch = 1;
  a.xq = {&q, &s};
  a.accumulate = true;
  a.w.layout = kernels::make_packed_layout(PackedFormat::Int4K256, 4096, 4096);
  CHECK(kernels::matvec_norm_units_apply(a) == units_on());
  a.accumulate = false;  // h is y + W x
  CHECK_FALSE(kernels::matvec_norm_units_apply(a));
  a.accumulate = true;
  a.batch = 2;
  CHECK_FALSE(kernels::matvec_norm_units_apply(a));
  a.batch = 1;
  a.w.layout = kernels::make_packed_layout(PackedFormat::Int4K256, 4112, 4096);  // not whole units
  CHECK_FALSE(kernels::matvec_norm_units_apply(a));
  a.w.layout =
      kernels::make_packed_layout(PackedFormat::Int8Sym32, 4096, 4096);  // no streaming kernel
  CHECK_FALSE(kernels::matvec_norm_units_apply(a));
  a.w.layout = kernels::make_packed_layout(PackedFormat::Int4Sym32, 4096, 4096);
  CHECK(kernels::matvec_norm_units_apply(a) == units_on());
  a.w.layout = kernels::make_packed_layout(PackedFormat::Int6K256, 4096, 4096);
  CHECK(kernels::matvec_norm_units_apply(a) == (units_on() && q6k_units()));
  a.xq.sumsq = &s;  // its own x already a norm's
  CHECK_FALSE(kernels::matvec_norm_units_apply(a));
}
