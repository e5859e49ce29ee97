// Tensor-core prefill attention against a float64 reference over the same
// fp16 cache contents: chunks that start at position 0 and after cached
// positions, chunk lengths around the 64-token tiles, GQA shapes of real
// models, head_dim 64 and 128.
#include <doctest/doctest.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "kernels/attention_prefill.h"
#include "tests/kernels/gpu_test_util.h"

using namespace voltad;
using namespace voltad::test;

namespace {

struct Shape {
  int n_heads, n_kv_heads, head_dim;
};

// Query tokens at positions start .. start+n-1 of one sequence whose cache
// holds positions 0 .. start+n-1.
void check_prefill(Shape sh, int start, int n) {
  std::ostringstream name;
  name << "heads " << sh.n_heads << "/" << sh.n_kv_heads << " head_dim " << sh.head_dim << " start "
       << start << " n " << n;
  CAPTURE(name.str());
  const int kv_dim = sh.n_kv_heads * sh.head_dim, q_dim = sh.n_heads * sh.head_dim;
  const int len = start + n;
  const int n_table = (len + 15) / 16;
  const int n_blocks = n_table + 5;

  std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), test_rng());
  std::vector<int32_t> table(blocks.begin(), blocks.begin() + n_table);

  // Cache contents (fp16); a few large keys so that the softmax is peaked
  // somewhere and the running max moves between tiles.
  std::vector<float> k_all = random_floats(size_t(n_blocks) * 16 * size_t(kv_dim));
  std::vector<float> v_all = random_floats(size_t(n_blocks) * 16 * size_t(kv_dim));
  for (size_t i = 0; i < k_all.size(); i += 997) k_all[i] *= 6.0f;
  std::vector<uint16_t> k_bits(k_all.size()), v_bits(v_all.size());
  for (size_t i = 0; i < k_all.size(); ++i) {
    const __half hk = __float2half_rn(k_all[i]), hv = __float2half_rn(v_all[i]);
    k_all[i] = __half2float(hk);
    v_all[i] = __half2float(hv);
    k_bits[i] = __half_raw(hk).x;
    v_bits[i] = __half_raw(hv).x;
  }
  const int64_t ldq = q_dim + 3, ldo = q_dim + 5;
  std::vector<float> q = random_floats(size_t(n) * size_t(ldq));
  const float scale = 1.0f / std::sqrt(float(sh.head_dim));

  DeviceBuffer<uint16_t> dk(k_bits), dv(v_bits);
  DeviceBuffer<int32_t> dtab(table);
  DeviceBuffer<float> dq(q), dout(size_t(n) * size_t(ldo));
  poison(dout);
  kernels::PrefillAttentionArgs a;
  a.q = dq.get();
  a.ldq = ldq;
  a.out = dout.get();
  a.ldo = ldo;
  a.cache = {dk.get(), dv.get()};
  a.block_table = dtab.get();
  a.start = start;
  a.n = n;
  a.n_heads = sh.n_heads;
  a.n_kv_heads = sh.n_kv_heads;
  a.head_dim = sh.head_dim;
  a.scale = scale;
  kernels::launch_attention_prefill(a, nullptr);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> got = dout.download();

  std::vector<double> ref(got.size(), 0.0), atol(got.size(), 1e300);
  const int group = sh.n_heads / sh.n_kv_heads;
  auto row = [&](int p, int kvh) {
    return (size_t(table[size_t(p / 16)]) * 16 + size_t(p % 16)) * size_t(kv_dim) +
           size_t(kvh * sh.head_dim);
  };
  int stray = 0;
  for (int t = 0; t < n; ++t) {
    const int pos = start + t;
    for (int h = 0; h < sh.n_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> scores(size_t(pos) + 1);
      double mx = -1e300;
      for (int p = 0; p <= pos; ++p) {
        double s = 0;
        for (int e = 0; e < sh.head_dim; ++e)
          s += double(q[size_t(t * ldq + h * sh.head_dim + e)]) * k_all[row(p, kvh) + size_t(e)];
        scores[size_t(p)] = s * scale;
        mx = std::max(mx, scores[size_t(p)]);
      }
      double sum = 0;
      for (auto& s : scores) sum += (s = std::exp(s - mx));
      for (int e = 0; e < sh.head_dim; ++e) {
        double acc = 0, mag = 0;
        for (int p = 0; p <= pos; ++p) {
          const double w = scores[size_t(p)] / sum;
          acc += w * v_all[row(p, kvh) + size_t(e)];
          mag += w * std::fabs(v_all[row(p, kvh) + size_t(e)]);
        }
        const size_t i = size_t(t * ldo + h * sh.head_dim + e);
        ref[i] = acc;
        atol[i] = 4e-3 * mag + 1e-4;  // fp16 Q and P: a few 2^-11 of the weighted |V|
      }
    }
    for (int64_t c = q_dim; c < ldo; ++c) {
      const size_t i = size_t(t * ldo + c);
      stray += !std::isnan(got[i]);
      got[i] = 0.0f;
    }
  }
  CHECK(stray == 0);
  CHECK(count_mismatches("prefill attention", got, ref, atol, 2e-3) == 0);
}

}  // namespace

TEST_CASE("prefill attention: whole prompts from position 0") {
  check_prefill({32, 8, 128}, 0, 130);  // Llama-3-8B heads, three query tiles
  check_prefill({9, 3, 64}, 0, 64);     // SmolLM2, exactly one tile
  check_prefill({4, 4, 128}, 0, 1);     // one token
  check_prefill({8, 1, 64}, 0, 17);     // 8 query heads per KV head
}

TEST_CASE("prefill attention: chunks after cached positions, tile edges") {
  check_prefill({8, 2, 128}, 300, 77);
  check_prefill({8, 2, 64}, 63, 130);
  check_prefill({16, 4, 128}, 1000, 65);
  check_prefill({6, 2, 64}, 16, 200);
}
