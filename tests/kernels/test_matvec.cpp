// The decode matvecs against a float64 CPU reference, for every weight type
// the CUDA backend runs, odd and even shapes (fewer chunks than lanes, more
// than one round of lanes, rows not a multiple of the rows per warp), batch
// 1..8 and 11 (two chunks of x), with and without bias and fused residual
// add.
//
// Reference: W decoded by dequantize_packed_row (itself proven equal to the
// GGUF decoder by tests/engine/test_weight_repack.cpp) times the x the kernel
// multiplies: for the Int* formats that is the two-level int8-quantized x
// (d1*q1 + d2*q2), whose quantization is checked bit for bit against a CPU
// copy first; and the error against the fp32 x is bounded for every type.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "engine/weight_repack.h"
#include "kernels/kernel_set.h"
#include "kernels/matvec.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;
using kernels::PackedFormat;

namespace {

struct HostQuantized {
  std::vector<int8_t> q;      // (batch, cols/32, 2, 32): q1 then q2 per block
  std::vector<float> scales;  // (batch, cols/32, 4): {d1, d2, sum x, 0}
  int64_t cols = 0;
  // The x the kernels multiply: d1*q1 + d2*q2, in float64.
  double value(int b, int64_t k) const {
    const int64_t blk = k / 32, j = k % 32;
    const int8_t* qb = q.data() + b * 2 * cols + blk * 64;
    const float* s = scales.data() + (b * (cols / 32) + blk) * 4;
    return double(s[0]) * double(qb[j]) + double(s[1]) * double(qb[32 + j]);
  }
};

// One level of the CPU quantizer: q = clamp(rint(v * (1/d)), +-127).
int quantize_level(const float* v, float d, int8_t* q) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int qj = std::clamp(int(std::nearbyint(v[j] * id)), -127, 127);
    q[j] = int8_t(qj);
    sum += qj;
  }
  return sum;
}

// The CPU copy of kernel_quantize_activations: same operations, same order.
HostQuantized quantize_reference(const std::vector<float>& x, int64_t ldx, int batch,
                                 int64_t cols) {
  HostQuantized h;
  h.cols = cols;
  h.q.resize(size_t(batch * cols * 2));
  h.scales.resize(size_t(batch * cols / 32 * 4));
  for (int b = 0; b < batch; ++b) {
    for (int64_t blk = 0; blk < cols / 32; ++blk) {
      float v[32];
      std::copy_n(x.data() + b * ldx + blk * 32, 32, v);
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      int8_t* q1 = h.q.data() + b * 2 * cols + blk * 64;
      int8_t* q2 = q1 + 32;
      const float d1 = amax / 127.0f;
      const int sum1 = quantize_level(v, d1, q1);
      float ramax = 0.0f;
      for (int j = 0; j < 32; ++j) {
        v[j] = std::fma(-d1, float(q1[j]), v[j]);
        ramax = std::max(ramax, std::fabs(v[j]));
      }
      const float d2 = ramax / 127.0f;
      const int sum2 = quantize_level(v, d2, q2);
      float* s = h.scales.data() + (b * (cols / 32) + blk) * 4;
      s[0] = d1;
      s[1] = d2;
      s[2] = std::fma(d2, float(sum2), d1 * float(sum1));
      s[3] = 0.0f;
    }
  }
  return h;
}

bool is_quantized(PackedFormat f) {
  return f != PackedFormat::F16 && f != PackedFormat::F32;
}

// One matvec case; returns the largest error of the kernel against an fp32-x
// matvec, relative to sum |w x| (the price of int8 activations), for notes.
// classic: the format's own launcher (launch_matvec_int4/int8), past
// launch_matvec's choice of the streaming kernel at batch 1.
double run_case(GgmlType type, int64_t rows, int64_t cols, int batch, bool accumulate,
                bool with_bias, int slices = 0, bool classic = false) {
  std::mt19937& rng = test_rng();
  std::ostringstream name;
  name << ggml_type_name(type) << " " << rows << "x" << cols << " batch " << batch
       << (accumulate ? " +=" : "") << (with_bias ? " +bias" : "") << " slices " << slices
       << (classic ? " classic" : "");
  CAPTURE(name.str());

  const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, rng, 15);
  auto packed = repack_matrix(type, gguf.data(), rows, cols);
  REQUIRE_MESSAGE(packed.ok(), (packed.ok() ? "" : packed.error().message));
  const PackedFormat format = packed->layout.format;

  // x with a row stride beyond cols and a few outliers, as activations have.
  const int64_t ldx = (cols + 3) / 4 * 4 + 4;
  std::vector<float> x = random_floats(size_t(batch * ldx));
  for (int b = 0; b < batch; ++b) x[size_t(b * ldx + int64_t(rng() % uint64_t(cols)))] *= 30.0f;
  const int64_t ldy = rows + 3;
  std::vector<float> y0 = random_floats(size_t(batch * ldy));
  std::vector<float> bias = random_floats(size_t(rows));

  DeviceBuffer<uint8_t> d_w(packed->bytes);
  DeviceBuffer<float> d_x(x), d_bias(bias), d_y(size_t(batch * ldy));
  poison(d_y);
  if (accumulate) {
    // y0 in the rows, NaN beyond: the kernel must write exactly rows per row.
    std::vector<float> init = y0;
    for (int b = 0; b < batch; ++b)
      for (int64_t r = rows; r < ldy; ++r) init[size_t(b * ldy + r)] = std::nanf("");
    d_y.upload(init);
  }

  kernels::MatvecArgs args;
  args.w = {packed->layout, d_w.get()};
  args.batch = batch;
  args.y = d_y.get();
  args.ldy = ldy;
  args.bias = with_bias ? d_bias.get() : nullptr;
  args.accumulate = accumulate;
  args.slices = slices;

  // The x the kernel multiplies, as doubles.
  std::vector<double> x_eff(size_t(batch * cols));
  DeviceBuffer<int8_t> d_q(kernels::quantized_activation_q_bytes(batch, cols));
  DeviceBuffer<float> d_scales(
      kernels::quantized_activation_scale_bytes(batch, cols) / sizeof(float) + 4);
  if (is_quantized(format)) {
    kernels::QuantizedActivations xq{d_q.get(), d_scales.get()};
    kernels::launch_quantize_activations(d_x.get(), ldx, batch, cols, xq, nullptr);
    const HostQuantized want = quantize_reference(x, ldx, batch, cols);
    const std::vector<int8_t> got_q = d_q.download();
    std::vector<float> got_s = d_scales.download();
    got_s.resize(want.scales.size());
    CHECK_MESSAGE(got_q == want.q, "int8 activations differ from the CPU quantizer");
    CHECK_MESSAGE(got_s == want.scales, "activation scales differ from the CPU quantizer");
    for (int b = 0; b < batch; ++b)
      for (int64_t k = 0; k < cols; ++k) x_eff[size_t(b * cols + k)] = want.value(b, k);
    args.xq = xq;
  } else {
    for (int b = 0; b < batch; ++b)
      for (int64_t k = 0; k < cols; ++k) x_eff[size_t(b * cols + k)] = x[size_t(b * ldx + k)];
    args.x = d_x.get();
    args.ldx = ldx;
  }
  if (!classic)
    kernels::launch_matvec(args, nullptr);
  else if (format == PackedFormat::Int4K256)
    kernels::launch_matvec_int4(args, nullptr);
  else
    kernels::launch_matvec_int8(args, nullptr);
  const std::vector<float> got = d_y.download();

  std::vector<double> ref(got.size()), atol(got.size());
  std::vector<float> w(static_cast<size_t>(cols));
  double worst_vs_fp32 = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_packed_row(*packed, r, w.data());
    for (int b = 0; b < batch; ++b) {
      double sum = 0.0, mag = 0.0, exact = 0.0, exact_mag = 0.0;
      for (int64_t k = 0; k < cols; ++k) {
        const double t = double(w[size_t(k)]) * x_eff[size_t(b * cols + k)];
        sum += t;
        mag += std::fabs(t);
        const double e = double(w[size_t(k)]) * double(x[size_t(b * ldx + k)]);
        exact += e;
        exact_mag += std::fabs(e);
      }
      if (with_bias) {
        sum += bias[size_t(r)];
        exact += bias[size_t(r)];
        mag += std::fabs(bias[size_t(r)]);
      }
      if (accumulate) {
        sum += y0[size_t(b * ldy + r)];
        exact += y0[size_t(b * ldy + r)];
        mag += std::fabs(y0[size_t(b * ldy + r)]);
      }
      const size_t i = size_t(b * ldy + r);
      ref[i] = sum;
      atol[i] = 2e-5 * mag;
      if (exact_mag > 0)
        worst_vs_fp32 = std::max(worst_vs_fp32, std::fabs(double(got[i]) - exact) / exact_mag);
    }
  }
  // Entries past `rows` in each batch row must be untouched (still NaN).
  int stray = 0;
  for (int b = 0; b < batch; ++b)
    for (int64_t r = rows; r < ldy; ++r) {
      const size_t i = size_t(b * ldy + r);
      if (!std::isnan(got[i])) ++stray;
      ref[i] = 0.0;
      atol[i] = 1e300;  // skipped by the comparison below
    }
  std::vector<float> got_checked = got;
  for (int b = 0; b < batch; ++b)
    for (int64_t r = rows; r < ldy; ++r) got_checked[size_t(b * ldy + r)] = 0.0f;
  CHECK(stray == 0);
  CHECK(count_mismatches(name.str(), got_checked, ref, atol, 1e-5) == 0);
  return worst_vs_fp32;
}

struct Shape {
  int64_t rows, cols;
};

std::vector<Shape> shapes_for(GgmlType type) {
  const int64_t block = ggml_type_info(type)->block_elems;
  if (block == 1) return {{1, 1}, {7, 77}, {69, 1001}, {33, 4096}};
  if (block == 32) return {{1, 32}, {7, 96}, {69, 1056}, {33, 4096}};
  return {{1, 256}, {7, 768}, {69, 2560}, {33, 4096}};
}

}  // namespace

TEST_CASE("matvec matches the float64 reference for every weight type, shape and batch") {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_0,
                            GgmlType::Q5_1, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0,
                            GgmlType::F16,  GgmlType::BF16, GgmlType::F32};
  for (GgmlType type : types) {
    double worst = 0.0;
    for (const Shape& s : shapes_for(type)) {
      for (int batch : {1, 2, 3, 4, 5, 6, 7, 8, 11}) {
        const double e = run_case(type, s.rows, s.cols, batch, batch % 2 == 0, batch % 3 != 1);
        if (s.cols == 4096) worst = std::max(worst, e);
      }
    }
    // What two-level int8 activations cost against an fp32-x matvec,
    // relative to sum |w x| (docs/KERNEL-NOTES.md): one level cost 3e-3-7e-3,
    // two levels measure 0.9e-5-2.5e-5 (H200); the bound leaves 8x margin.
    MESSAGE(ggml_type_name(type) << ": max |y - y(fp32 x)| / sum|w x| at cols 4096 = " << worst);
    CHECK(worst < 2e-4);
  }
}

// The Int4 formats and Q6_K at batch 1, Q4_0/Q4_1 at batch 2 split the columns of each row
// group over 1 or 2 warps (MatvecArgs::slices; chosen from the rows and the
// SMs when 0, which the test above leaves to the launcher: its small
// matrices get 2). Each must match the reference, rows past the end of the
// last block included (69 rows), and columns that leave a slice no chunks
// (256 columns: one group of 32 chunks is 1024 values). The other formats
// and batches ignore the field: the same cases run them once more.
TEST_CASE("sliced matvecs: every slice count matches the reference") {
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K})
    for (int slices : {1, 2})
      for (int batch : {1, 2})
        for (const Shape& s : {Shape{69, 256}, Shape{33, 4096}, Shape{300, 5120}})
          for (bool accumulate : {false, true})
            run_case(type, s.rows, s.cols, batch, accumulate, !accumulate, slices);
}

// At batch 1, Q4_K and Q6_K run the streaming kernels (matvec_stream.cu),
// whose grid is one wave: with 17,001 and 25,001 rows every block walks
// several row groups, at 1 step a group (256 columns) and 2-3 (2,560). A
// wave of the H200 holds 528 blocks of 16 Q4_K rows (8 sliced), 924-1,056
// of 8 Q6_K rows (4 sliced); the V100's waves are smaller. The loads of a
// block's next group go out while it finishes the last. 1,280 columns leave
// the second slice's lanes 8-31 without a chunk. The kernels they replaced
// (launch_matvec_int4/int8, which VOLTAD_MATVEC_STREAM=0 brings back) must
// still match too.
TEST_CASE("batch-1 streaming matvecs: blocks that walk several row groups") {
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K})
    for (int slices : {1, 2})
      for (const Shape& s : {Shape{25001, 256}, Shape{17001, 2560}, Shape{4099, 1280}}) {
        run_case(type, s.rows, s.cols, 1, slices == 2, slices == 1, slices);
        run_case(type, s.rows, s.cols, 1, slices == 1, slices == 2, slices, true);
      }
}

// Under `auto` on sm_90+, batch-1 Q4_K and Q4_0 products of 4,096 columns
// and at least 6 row groups of 8 rows for every block of the wave take the
// bulk-copy kernel (matvec_bulk_sm90.cu; kernels::matvec_bulk_min_rows, 25,344
// rows on the H100 and H200). One row more than that leaves a last stage of one row:
// it must be what launch_matvec takes there, and match the reference with
// bias and with accumulation. Not taken: one group fewer, o's shape, Q6_K,
// other columns.
TEST_CASE("batch-1 bulk-copy matvec (sm_90, auto)") {
  const kernels::KernelSetScope scope(kernels::KernelSet::Auto);
  const bool sm90 = kernels::programmatic_launch_supported();
  if (!sm90) MESSAGE("no sm_90 code or device: the bulk-copy kernel does not apply");
  const int64_t least = kernels::matvec_bulk_min_rows(PackedFormat::Int4K256);
  CHECK(least == kernels::matvec_bulk_min_rows(PackedFormat::Int4Sym32));
  CHECK((least > 0) == sm90);
  CHECK(kernels::matvec_bulk_min_rows(PackedFormat::Int6K256) == 0);
  const int64_t rows = sm90 ? least + 1 : 20001;
  struct Case {
    GgmlType type;
    int64_t rows, cols;
    bool takes;
  };
  for (const Case& c : {Case{GgmlType::Q4_K, rows, 4096, true},
                        Case{GgmlType::Q4_0, rows, 4096, true},
                        Case{GgmlType::Q4_K, sm90 ? least - 8 : 4096, 4096, false},
                        Case{GgmlType::Q4_K, 4096, 4096, false},
                        Case{GgmlType::Q6_K, rows, 4096, false},
                        Case{GgmlType::Q4_K, 4001, 14336, false}}) {
    CAPTURE(ggml_type_name(c.type));
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    kernels::MatvecArgs probe;
    const PackedFormat format = c.type == GgmlType::Q4_K   ? PackedFormat::Int4K256
                                : c.type == GgmlType::Q4_0 ? PackedFormat::Int4Sym32
                                                           : PackedFormat::Int6K256;
    probe.w.layout = kernels::make_packed_layout(format, c.rows, c.cols);
    probe.batch = 1;
    int8_t q = 0;
    float scale = 0.0f;
    probe.xq = {&q, &scale};
    CHECK(kernels::matvec_bulk_applies(probe) == (c.takes && sm90));
    if (!c.takes) continue;
    run_case(c.type, c.rows, c.cols, 1, false, true);
    run_case(c.type, c.rows, c.cols, 1, true, false);
  }
}

TEST_CASE("quantized activations: NaN in x makes the block's scale NaN") {
  std::vector<float> x = random_floats(64);
  x[5] = std::nanf("");
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<int8_t> d_q(kernels::quantized_activation_q_bytes(1, 64));
  DeviceBuffer<float> d_s(kernels::quantized_activation_scale_bytes(1, 64) / sizeof(float));
  kernels::launch_quantize_activations(d_x.get(), 64, 1, 64, {d_q.get(), d_s.get()}, nullptr);
  const std::vector<float> s = d_s.download();
  CHECK(std::isnan(s[0]));  // d1, d2 and sum x of block 0
  CHECK(std::isnan(s[1]));
  CHECK(std::isnan(s[2]));
  CHECK(std::isfinite(s[4]));  // block 1
  CHECK(std::isfinite(s[5]));
  CHECK(std::isfinite(s[6]));
}

// Under programmatic dependent launch (`auto` on sm_90) a matvec issues its
// first weight loads before its wait and lets its successor start after its
// main loop; x (quantized by the kernel just before, on the same stream)
// and the y it accumulates into must still be read after the wait. Fresh
// x and y every round: a read before the quantizer finished would see the
// previous round's values, and `auto` would differ from `portable` (plain
// launches, the same kernels). Every kernel family (Int4, Int6, Int8, one
// batch of each unrolling), at batch 1 and 2 with one and two warps a row
// group (MatvecArgs::slices), 256 columns, where a second slice has no
// chunks and waits after its empty loop, and 20,000 x 1,280, where the
// batch-1 streaming kernels' blocks walk several row groups. The first run on the H200 caught
// ptxas moving the int8 kernel's x loads (then __ldg) above the wait: Q8_0
// at batch 3, one round in ten.
// The PDL test's row counts for a type and width (see below).
static std::vector<int64_t> pdl_rows(GgmlType type, int64_t cols) {
  if (cols == 1280) return {20000};
  if (cols != 4096 || (type != GgmlType::Q4_K && type != GgmlType::Q4_0)) return {4096};
  const kernels::KernelSetScope scope(kernels::KernelSet::Auto);
  const int64_t least = kernels::matvec_bulk_min_rows(PackedFormat::Int4K256);
  return {4096, least > 0 ? least + 1000 : 20000};
}

TEST_CASE("decode matvecs under PDL: x quantized by the kernel just before") {
  if (!kernels::programmatic_launch_supported())
    MESSAGE(
        "no programmatic dependent launch on this device or build: both runs are plain launches");
  std::mt19937& rng = test_rng();
  struct Case {
    int batch, slices;
  };
  const Case cases[] = {{1, 1}, {1, 2}, {2, 1}, {2, 2}, {3, 0}, {8, 0}};
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_K,
                        GgmlType::Q6_K, GgmlType::Q8_0})
    for (int64_t cols : {4096, 1280, 256})
      for (const Case& c : cases)
        // 20,000 rows: the batch-1 streaming kernels' blocks walk several
        // row groups of 2 steps (Q4_K, Q6_K; matvec_stream.cu). Q4_K and
        // Q4_0 at 4,096 columns also run with the rows from which `auto`
        // takes the bulk-copy kernel (and 1,000 more).
        for (int64_t rows : pdl_rows(type, cols)) {
          const bool bulk = cols == 4096 && rows != 4096;
          const int batch = c.batch;
          CAPTURE(ggml_type_name(type));
          CAPTURE(cols);
          CAPTURE(batch);
          CAPTURE(c.slices);
          const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, rng, 15);
          auto packed = repack_matrix(type, gguf.data(), rows, cols);
          REQUIRE(packed.ok());
          DeviceBuffer<uint8_t> d_w(packed->bytes);
          DeviceBuffer<float> d_x(size_t(batch * cols)), d_y(size_t(batch * rows));
          DeviceBuffer<int8_t> d_q(kernels::quantized_activation_q_bytes(batch, cols));
          DeviceBuffer<float> d_s(kernels::quantized_activation_scale_bytes(batch, cols) /
                                  sizeof(float));
          kernels::MatvecArgs args;
          args.w = {packed->layout, d_w.get()};
          args.batch = batch;
          args.xq = {d_q.get(), d_s.get()};
          args.y = d_y.get();
          args.ldy = rows;
          args.accumulate = true;
          args.slices = c.slices;
          // The bulk-copy kernel sums in another order than the streaming
          // one: its reference is `auto` with the quantizer finished first.
          bool takes_bulk = false;
          {
            const kernels::KernelSetScope scope(kernels::KernelSet::Auto);
            takes_bulk = kernels::matvec_bulk_applies(args);
          }
          CHECK(takes_bulk == (bulk && batch == 1 && kernels::programmatic_launch_supported()));
          bool settled = false;
          std::vector<float> y0;
          const int differing_rounds = rounds_auto_differs(
              20,
              [&] {
                d_x.upload(random_floats(size_t(batch * cols)));
                y0 = random_floats(size_t(batch * rows));
              },
              [&](cudaStream_t stream) {
                d_y.upload(y0);
                kernels::launch_quantize_activations(d_x.get(), cols, batch, cols, args.xq, stream);
                if (settled) CUDA_CHECK(cudaStreamSynchronize(stream));
                kernels::launch_matvec(args, stream);
                CUDA_CHECK(cudaStreamSynchronize(stream));
                return d_y.download();
              },
              takes_bulk ? &settled : nullptr);
          CHECK(differing_rounds == 0);
        }
}
