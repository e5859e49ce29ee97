// Norms, RoPE, SwiGLU, bias, embedding gather and argmax against scalar
// float64 references on fresh random inputs, odd and even sizes, outputs
// poisoned with NaN first.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine/weight_repack.h"
#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/sampling_argmax.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;

namespace {

std::vector<double> rmsnorm_reference(const std::vector<float>& x, int64_t ld,
                                      const std::vector<float>& w, int64_t ldo, int rows, int dim,
                                      float eps) {
  std::vector<double> out(size_t(rows * ldo), 0.0);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int k = 0; k < dim; ++k) ss += double(x[size_t(r * ld + k)]) * x[size_t(r * ld + k)];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int k = 0; k < dim; ++k)
      out[size_t(r * ldo + k)] = x[size_t(r * ld + k)] * inv * w[size_t(k)];
  }
  return out;
}

// Only the first `dim` of each row are compared; the padding is ignored.
void mask_padding(std::vector<float>& got, std::vector<double>& ref, int rows, int64_t ld,
                  int dim) {
  for (int r = 0; r < rows; ++r)
    for (int64_t k = dim; k < ld; ++k) {
      got[size_t(r * ld + k)] = 0.0f;
      ref[size_t(r * ld + k)] = 0.0;
    }
}

}  // namespace

TEST_CASE("rmsnorm and add_rmsnorm") {
  for (int dim : {1, 77, 128, 576, 4096, 4097}) {
    for (int rows : {1, 3, 8}) {
      CAPTURE(dim);
      CAPTURE(rows);
      const int64_t ld = dim + 5, ldo = dim + 2;
      const float eps = 1e-5f;
      std::vector<float> x = random_floats(size_t(rows * ld), 3.0f);
      std::vector<float> delta = random_floats(size_t(rows * ld));
      std::vector<float> w = random_floats(size_t(dim));
      DeviceBuffer<float> d_x(x), d_delta(delta), d_w(w), d_out(size_t(rows * ldo));

      poison(d_out);
      kernels::launch_rmsnorm(d_x.get(), ld, d_w.get(), d_out.get(), ldo, rows, dim, eps, nullptr);
      std::vector<float> got = d_out.download();
      std::vector<double> ref = rmsnorm_reference(x, ld, w, ldo, rows, dim, eps);
      mask_padding(got, ref, rows, ldo, dim);
      CHECK(count_mismatches("rmsnorm", got, ref, 1e-5, 1e-5) == 0);

      // Fused: residual += delta (written back), out = norm(residual).
      poison(d_out);
      kernels::launch_add_rmsnorm(d_x.get(), d_delta.get(), ld, d_w.get(), d_out.get(), ldo, rows,
                                  dim, eps, nullptr);
      std::vector<float> sum(x.size());
      for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + delta[i];
      std::vector<float> got_res = d_x.download();
      std::vector<double> ref_res(sum.begin(), sum.end());
      mask_padding(got_res, ref_res, rows, ld, dim);
      CHECK(count_mismatches("residual", got_res, ref_res, 0.0, 0.0) == 0);
      got = d_out.download();
      ref = rmsnorm_reference(sum, ld, w, ldo, rows, dim, eps);
      mask_padding(got, ref, rows, ldo, dim);
      CHECK(count_mismatches("add_rmsnorm", got, ref, 1e-5, 1e-5) == 0);
    }
  }
}

TEST_CASE("rmsnorm in place and per head (Qwen3 q/k norm)") {
  const int rows = 3, n_heads = 5, head_dim = 128;
  const int64_t ld = n_heads * head_dim + 7;
  std::vector<float> x = random_floats(size_t(rows * ld), 2.0f);
  std::vector<float> w = random_floats(size_t(head_dim));
  DeviceBuffer<float> d_x(x), d_w(w);
  kernels::launch_head_rmsnorm(d_x.get(), ld, rows, n_heads, head_dim, d_w.get(), 1e-6f, nullptr);
  const std::vector<float> got = d_x.download();
  std::vector<double> ref(x.begin(), x.end());
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < n_heads; ++h) {
      const size_t base = size_t(r * ld + h * head_dim);
      double ss = 0;
      for (int k = 0; k < head_dim; ++k) ss += double(x[base + k]) * x[base + k];
      const double inv = 1.0 / std::sqrt(ss / head_dim + 1e-6);
      for (int k = 0; k < head_dim; ++k) ref[base + k] = x[base + k] * inv * w[size_t(k)];
    }
  CHECK(count_mismatches("head_rmsnorm", got, ref, 1e-5, 1e-5) == 0);

  // Whole-row in place (out == x).
  DeviceBuffer<float> d_y(x);
  DeviceBuffer<float> d_w2(random_floats(size_t(ld)));
  const std::vector<float> w2 = d_w2.download();
  kernels::launch_rmsnorm(d_y.get(), ld, d_w2.get(), d_y.get(), ld, rows, int(ld), 1e-5f, nullptr);
  CHECK(count_mismatches("rmsnorm in place", d_y.download(),
                         rmsnorm_reference(x, ld, w2, ld, rows, int(ld), 1e-5f), 1e-5, 1e-5) == 0);
}

TEST_CASE("rope: normal and NeoX orderings, partial rotation, frequency factors") {
  for (auto ordering : {kernels::RopeOrdering::Normal, kernels::RopeOrdering::NeoX}) {
    for (int rot_dims : {128, 64, 2}) {
      const bool neox = ordering == kernels::RopeOrdering::NeoX;
      CAPTURE(neox);
      CAPTURE(rot_dims);
      const int rows = 5, n_heads = 3, head_dim = 128;
      const int64_t ld = n_heads * head_dim + 1;
      std::vector<float> x = random_floats(size_t(rows * ld));
      std::vector<int32_t> pos = {0, 1, 17, 4095, 31999};
      std::vector<float> factors(size_t(rot_dims / 2));
      for (float& f : factors) f = 1.0f + float(test_rng()() % 8);  // Llama-3-like factors
      const std::vector<float> inv =
          kernels::rope_inverse_frequencies(rot_dims, 500000.0, 1.0, factors.data());
      DeviceBuffer<float> d_x(x), d_inv(inv);
      DeviceBuffer<int32_t> d_pos(pos);
      kernels::launch_rope(d_x.get(), ld, rows, n_heads, head_dim, rot_dims, d_pos.get(),
                           d_inv.get(), ordering, nullptr);
      const std::vector<float> got = d_x.download();
      std::vector<double> ref(x.begin(), x.end()), atol(x.size(), 1e-6);
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < n_heads; ++h)
          for (int i = 0; i < rot_dims / 2; ++i) {
            const size_t base = size_t(r * ld + h * head_dim);
            const size_t i0 = base + size_t(neox ? i : 2 * i);
            const size_t i1 = base + size_t(neox ? i + rot_dims / 2 : 2 * i + 1);
            // The angle in float64 from the same fp32 table entry; the
            // kernel's fp32 product p * inv_freq is off by up to half an ulp
            // of the angle, hence the position-scaled tolerance.
            const double theta = double(pos[size_t(r)]) * double(inv[size_t(i)]);
            const double c = std::cos(theta), s = std::sin(theta);
            ref[i0] = x[i0] * c - x[i1] * s;
            ref[i1] = x[i0] * s + x[i1] * c;
            const double slack =
                1e-6 + 4e-7 * std::fabs(theta) * (std::fabs(x[i0]) + std::fabs(x[i1]));
            atol[i0] = slack;
            atol[i1] = slack;
          }
      CHECK(count_mismatches("rope", got, ref, atol, 1e-6) == 0);
    }
  }
}

TEST_CASE("swiglu and bias add") {
  for (int n : {1, 77, 14336}) {
    const int rows = 3;
    CAPTURE(n);
    // gate and up as the two halves of one fused (rows, 2n) output.
    const int64_t ld_in = 2 * int64_t(n) + 1, ld_out = n + 3;
    std::vector<float> in = random_floats(size_t(rows * ld_in), 4.0f);
    DeviceBuffer<float> d_in(in), d_out(size_t(rows * ld_out));
    poison(d_out);
    kernels::launch_swiglu(d_in.get(), ld_in, d_in.get() + n, ld_in, d_out.get(), ld_out, rows, n,
                           nullptr);
    std::vector<float> got = d_out.download();
    std::vector<double> ref(got.size(), 0.0);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i) {
        const double g = in[size_t(r * ld_in + i)], u = in[size_t(r * ld_in + n + i)];
        ref[size_t(r * ld_out + i)] = g / (1.0 + std::exp(-g)) * u;
      }
    mask_padding(got, ref, rows, ld_out, n);
    CHECK(count_mismatches("swiglu", got, ref, 1e-6, 1e-5) == 0);

    std::vector<float> y = random_floats(size_t(rows * ld_out)), bias = random_floats(size_t(n));
    DeviceBuffer<float> d_y(y), d_b(bias);
    kernels::launch_add_bias(d_y.get(), ld_out, d_b.get(), rows, n, nullptr);
    got = d_y.download();
    ref.assign(y.begin(), y.end());
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i) ref[size_t(r * ld_out + i)] += bias[size_t(i)];
    CHECK(count_mismatches("add_bias", got, ref, 1e-6, 1e-6) == 0);
  }
}

TEST_CASE("embedding gather decodes every packed format exactly") {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_0,
                            GgmlType::Q5_1, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0,
                            GgmlType::F16,  GgmlType::BF16, GgmlType::F32};
  for (GgmlType type : types) {
    CAPTURE(ggml_type_name(type));
    const int64_t block = ggml_type_info(type)->block_elems;
    const int64_t vocab = 37, dim = block == 1 ? 75 : (block == 32 ? 96 : 512);
    const std::vector<uint8_t> gguf = random_valid_tensor(type, vocab, dim, test_rng());
    auto packed = repack_matrix(type, gguf.data(), vocab, dim);
    REQUIRE(packed.ok());
    const std::vector<int32_t> tokens = {0, 36, 5, 5, 17, -1, 37};  // last two invalid
    const int batch = int(tokens.size());
    const int64_t ldo = dim + 1;
    DeviceBuffer<uint8_t> d_table(packed->bytes);
    DeviceBuffer<int32_t> d_tokens(tokens);
    DeviceBuffer<float> d_out(size_t(batch * ldo));
    poison(d_out);
    kernels::launch_embedding_gather({packed->layout, d_table.get()}, d_tokens.get(), batch,
                                     d_out.get(), ldo, nullptr);
    std::vector<float> got = d_out.download();
    std::vector<double> ref(got.size(), 0.0);
    std::vector<float> row(static_cast<size_t>(dim));
    for (int b = 0; b < batch - 2; ++b) {
      dequantize_packed_row(*packed, tokens[size_t(b)], row.data());
      for (int64_t k = 0; k < dim; ++k) ref[size_t(b * ldo + k)] = row[size_t(k)];
    }
    int invalid_not_nan = 0;
    for (int b = batch - 2; b < batch; ++b)
      for (int64_t k = 0; k < dim; ++k) {
        invalid_not_nan += !std::isnan(got[size_t(b * ldo + k)]);
        got[size_t(b * ldo + k)] = 0.0f;
      }
    CHECK(invalid_not_nan == 0);
    mask_padding(got, ref, batch, ldo, int(dim));
    CHECK(count_mismatches("embedding", got, ref, 0.0, 0.0) == 0);
  }
}

TEST_CASE("argmax: ties to the lowest index, NaN never wins") {
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(1000), int64_t(128256)}) {
    CAPTURE(n);
    const int rows = 6;
    const int64_t ld = n + 2;
    std::vector<float> logits = random_floats(size_t(rows * ld), 5.0f);
    std::mt19937& rng = test_rng();
    // Row 1: a tie between two positions; row 2: NaNs beside the maximum;
    // row 3: all -inf; row 4: all NaN; row 5: the maximum in the last slot.
    if (n > 2) {
      const int64_t a = int64_t(rng() % uint64_t(n / 2)), b = n / 2 + a;
      logits[size_t(ld + a)] = logits[size_t(ld + b)] = 100.0f;
      logits[size_t(2 * ld + a)] = std::nanf("");
      logits[size_t(2 * ld + b)] = 50.0f;
    }
    for (int64_t k = 0; k < n; ++k) {
      logits[size_t(3 * ld + k)] = -std::numeric_limits<float>::infinity();
      logits[size_t(4 * ld + k)] = std::nanf("");
    }
    logits[size_t(5 * ld + n - 1)] = 1e30f;
    DeviceBuffer<float> d_logits(logits);
    DeviceBuffer<int32_t> d_out(static_cast<size_t>(rows));
    kernels::launch_argmax(d_logits.get(), ld, rows, n, d_out.get(), nullptr);
    const std::vector<int32_t> got = d_out.download();
    for (int r = 0; r < rows; ++r) {
      int32_t best = 0;
      float best_v = -std::numeric_limits<float>::infinity();
      bool seen = false;
      for (int64_t k = 0; k < n; ++k) {
        float v = logits[size_t(r * ld + k)];
        if (std::isnan(v)) v = -std::numeric_limits<float>::infinity();
        if (!seen || v > best_v) {
          best_v = v;
          best = int32_t(k);
          seen = true;
        }
      }
      CAPTURE(r);
      CHECK(got[size_t(r)] == best);
    }
  }
}
