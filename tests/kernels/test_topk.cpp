// GPU top-k against a CPU selection: one pass (rows of at most 4096 values)
// and two (longer rows, vocabulary sizes of real models), every k shape,
// rows with repeated values (ties to the lower index), -inf and NaN; rows
// ranked by Gumbel keys (kernels/gumbel.h); and the rows' normalizers
// beside them (kernels/log_sum_exp.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "kernels/gumbel.h"
#include "kernels/log_sum_exp.h"
#include "kernels/topk.h"
#include "tests/kernels/gpu_test_util.h"

using namespace voltad;
using namespace voltad::test;

namespace {

// The kernel's order: NaN below everything, then by value, ties to the
// lower index (+0 above -0: the order of their bits).
uint32_t order_key(float f) {
  if (std::isnan(f)) return 0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void check_topk(int rows, int64_t n, int k, bool many_ties) {
  std::ostringstream name;
  name << "rows " << rows << " n " << n << " k " << k << (many_ties ? " ties" : "");
  CAPTURE(name.str());
  std::mt19937& rng = test_rng();
  const int64_t ld = n + 3;
  std::vector<float> logits = random_floats(size_t(rows * ld), 4.0f);
  for (float& v : logits) {
    if (many_ties) v = std::round(v);  // a few dozen distinct values
    const uint32_t r = rng() % 1000;
    if (r == 0) v = -INFINITY;
    if (r == 1) v = std::nanf("");
  }
  // Row 0 of each case: all equal, so ties decide everything.
  for (int64_t i = 0; i < n; ++i) logits[size_t(i)] = 1.5f;

  DeviceBuffer<float> d_logits(logits), d_vals(size_t(rows * k));
  DeviceBuffer<int32_t> d_ids(size_t(rows * k));
  DeviceBuffer<uint8_t> d_scratch(std::max<size_t>(1, kernels::topk_scratch_bytes(rows, n, k)));
  poison(d_vals);
  kernels::launch_topk(d_logits.get(), ld, rows, n, k, d_ids.get(), d_vals.get(), d_scratch.get(),
                       nullptr);
  CUDA_CHECK(cudaGetLastError());
  const std::vector<int32_t> ids = d_ids.download();
  const std::vector<float> vals = d_vals.download();

  int bad = 0;
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + size_t(r) * size_t(ld);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = order_key(row[a]), kb = order_key(row[b]);
      return ka != kb ? ka > kb : a < b;
    });
    for (int s = 0; s < k; ++s) {
      const int32_t want = order[size_t(s)], got = ids[size_t(r * k + s)];
      const float want_v = row[want], got_v = vals[size_t(r * k + s)];
      const bool same_v = std::isnan(want_v) ? std::isnan(got_v) : got_v == want_v;
      if ((got != want || !same_v) && ++bad <= 5)
        MESSAGE(name.str() << " row " << r << " rank " << s << ": got index " << got << " ("
                           << got_v << "), want " << want << " (" << want_v << ")");
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("topk: rows of one chunk (one pass)") {
  check_topk(3, 1, 1, false);
  check_topk(3, 4096, 1, true);
  check_topk(2, 7, 7, false);
  check_topk(5, 100, 5, false);
  check_topk(4, 4096, 64, false);
  check_topk(4, 4096, 40, true);
  check_topk(1, 63, 64 - 1, true);
}

TEST_CASE("topk: vocabulary-sized rows (two passes)") {
  check_topk(3, 4097, 64, false);
  check_topk(2, 32000, 1, false);    // argmax
  check_topk(32, 128256, 1, true);   // greedy, a decode batch of 32, many ties
  check_topk(8, 128256, 40, false);  // Llama 3, a decode batch of 8
  check_topk(2, 151936, 64, true);   // Qwen, many ties
  check_topk(1, 262144, 64, false);  // the limit at k = 64
}

namespace {

// Rows ranked by their Gumbel keys (kernels/gumbel.h) against the host's
// keys: every other row noisy, the others plain; the values are the
// logits. The host's logf may differ from the GPU's by an ulp, so a rank
// whose keys lie within 1e-5 of the next may swap (counted, not failed).
void check_noisy_topk(int rows, int64_t n, int k) {
  std::ostringstream name;
  name << "noisy rows " << rows << " n " << n << " k " << k;
  CAPTURE(name.str());
  const int64_t ld = n + 5;
  std::vector<float> logits = random_floats(size_t(rows * ld), 3.0f);
  logits[7] = std::nanf("");
  logits[8] = -INFINITY;
  std::vector<kernels::RowNoise> noise(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r)
    noise[size_t(r)] = {uint64_t(1000 + r), uint64_t(3 * r), 0.5f + 0.25f * float(r), r % 2 == 0};
  DeviceBuffer<float> d_logits(logits), d_vals(size_t(rows * k));
  DeviceBuffer<int32_t> d_ids(size_t(rows * k));
  DeviceBuffer<uint8_t> d_scratch(std::max<size_t>(1, kernels::topk_scratch_bytes(rows, n, k)));
  std::vector<uint8_t> noise_bytes(noise.size() * sizeof(kernels::RowNoise));
  std::memcpy(noise_bytes.data(), noise.data(), noise_bytes.size());
  DeviceBuffer<uint8_t> d_noise(noise_bytes);
  poison(d_vals);
  kernels::launch_topk(d_logits.get(), ld, rows, n, k, d_ids.get(), d_vals.get(), d_scratch.get(),
                       nullptr, reinterpret_cast<const kernels::RowNoise*>(d_noise.get()));
  CUDA_CHECK(cudaGetLastError());
  const std::vector<int32_t> ids = d_ids.download();
  const std::vector<float> vals = d_vals.download();
  int bad = 0, near_ties = 0, not_best = 0;
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::vector<float> keys(static_cast<size_t>(n));
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + size_t(r) * size_t(ld);
    const kernels::RowNoise& rn = noise[size_t(r)];
    const uint64_t base = kernels::noise_base(rn);
    for (int64_t i = 0; i < n; ++i)
      keys[size_t(i)] = rn.on ? kernels::noise_key(row[i], rn.temperature, base, i) : row[i];
    std::iota(order.begin(), order.end(), 0);
    const auto ranked = order.begin() + std::min<int64_t>(k + 1, n);
    std::partial_sort(order.begin(), ranked, order.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = order_key(keys[size_t(a)]), kb = order_key(keys[size_t(b)]);
      return ka != kb ? ka > kb : a < b;
    });
    for (int s = 0; s < k; ++s) {
      const int32_t want = order[size_t(s)], got = ids[size_t(r * k + s)];
      if (got >= 0 && got < n && vals[size_t(r * k + s)] != row[got] && !std::isnan(row[got]) &&
          ++bad <= 5)
        MESSAGE(name.str() << " row " << r << " rank " << s << ": value " << vals[size_t(r * k + s)]
                           << " is not the logit " << row[got]);
      if (got == want) continue;
      const bool near = std::abs(keys[size_t(got)] - keys[size_t(want)]) <=
                        1e-5f * std::max(1.0f, std::abs(keys[size_t(want)]));
      near_ties += near;
      if (!near && ++bad <= 5)
        MESSAGE(name.str() << " row " << r << " rank " << s << ": got index " << got << ", want "
                           << want);
    }
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (order_key(row[i]) > order_key(row[best])) best = int32_t(i);
    not_best += rn.on && ids[size_t(r * k)] != best;
  }
  CHECK(bad == 0);
  CHECK(near_ties <= 1);
  CHECK(not_best > 0);  // the noisy rows' first is a draw, not the best logit
}

}  // namespace

TEST_CASE("topk: rows ranked by Gumbel keys, one pass and two") {
  check_noisy_topk(6, 4096, 1);
  check_noisy_topk(8, 128256, 1);  // a decode batch drawing its tokens
  check_noisy_topk(4, 151936, 8);
  // A logit 40 above the rest of a 128k row is always the draw (no key is
  // infinite): 8 rows, 8 seeds.
  const int rows = 8;
  const int64_t n = 128256;
  std::vector<float> logits(size_t(rows * n), 0.0f);
  std::vector<kernels::RowNoise> noise(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    logits[size_t(r * n + 1000 * r + 7)] = 40.0f;
    noise[size_t(r)] = {uint64_t(r), uint64_t(r * r), 1.0f, 1};
  }
  std::vector<uint8_t> noise_bytes(noise.size() * sizeof(kernels::RowNoise));
  std::memcpy(noise_bytes.data(), noise.data(), noise_bytes.size());
  DeviceBuffer<float> d_logits(logits), d_vals{size_t(rows)};
  DeviceBuffer<int32_t> d_ids{size_t(rows)};
  DeviceBuffer<uint8_t> d_scratch(kernels::topk_scratch_bytes(rows, n, 1));
  DeviceBuffer<uint8_t> d_noise(noise_bytes);
  kernels::launch_topk(d_logits.get(), n, rows, n, 1, d_ids.get(), d_vals.get(), d_scratch.get(),
                       nullptr, reinterpret_cast<const kernels::RowNoise*>(d_noise.get()));
  CUDA_CHECK(cudaGetLastError());
  const std::vector<int32_t> ids = d_ids.download();
  for (int r = 0; r < rows; ++r) CHECK(ids[size_t(r)] == 1000 * r + 7);
}

// The normalizer that comes with the candidates (kernels/log_sum_exp.h),
// against the host's double sum: large values (the max must come out),
// vocabulary-sized rows, a row stride beyond n, -inf among the values, a
// row of -inf only.
TEST_CASE("row_log_sum_exp: log(sum(exp(x))) of each row") {
  for (int64_t n : {int64_t(1), int64_t(300), int64_t(128256), int64_t(151936)}) {
    CAPTURE(n);
    const int rows = 4;
    const int64_t ld = n + 5;
    std::vector<float> x = random_floats(size_t(rows * ld), 6.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 97 == 3) x[i] = -INFINITY;
      if (i / size_t(ld) == 1) x[i] += 60.0f;  // row 1 large
    }
    for (int64_t i = 0; i < n; ++i) x[size_t(2 * ld + i)] = -INFINITY;  // row 2: -inf only
    x[size_t(3 * ld)] = 5.0f;  // row 3 starts with a number, whatever row 0's first is
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<double> d_out{size_t(rows)};
    CUDA_CHECK(cudaMemset(d_out.get(), 0xff, size_t(rows) * sizeof(double)));  // NaN
    kernels::launch_row_log_sum_exp(d_x.get(), ld, rows, n, d_out.get(), nullptr);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<double> got = d_out.download();
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      const float* row = x.data() + size_t(r) * size_t(ld);
      double max = -INFINITY;
      for (int64_t i = 0; i < n; ++i) max = std::max(max, double(row[i]));
      if (max == -INFINITY) {
        CHECK(got[size_t(r)] == -INFINITY);
        continue;
      }
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(double(row[i]) - max);
      CHECK(got[size_t(r)] == doctest::Approx(max + std::log(sum)).epsilon(1e-7));
    }
  }
}
