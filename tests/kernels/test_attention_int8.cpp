// INT8 KV cache: the quantizing KV write bit for bit against a CPU copy, and
// the paged attention over int8 values against a float64 reference computed
// from the dequantized cache (d * q), for decode and prefill shapes, GQA,
// split-K and every head_dim; its output quantized on the way (out_q) must be
// bit for bit what launch_quantize_activations makes of the plain output.
#include <doctest/doctest.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <sstream>

#include "kernels/attention_int8.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/gpu_test_util.h"

using namespace voltad;
using namespace voltad::test;

namespace {

struct Shape {
  int n_heads, n_kv_heads, head_dim;
};

// Runs one step over a random int8 cache: `seqs` sequences with cached[s]
// positions already there plus new_tokens[s] in the step.
void check_attention_int8(Shape sh, const std::vector<int>& cached,
                          const std::vector<int>& new_tokens, int max_splits = 0) {
  std::ostringstream name;
  name << "heads " << sh.n_heads << "/" << sh.n_kv_heads << " head_dim " << sh.head_dim
       << " max_splits " << max_splits;
  CAPTURE(name.str());
  const int kv_dim = sh.n_kv_heads * sh.head_dim, q_dim = sh.n_heads * sh.head_dim;
  const int n_seqs = int(cached.size());
  int max_len = 0, n_tokens = 0;
  for (int s = 0; s < n_seqs; ++s)
    max_len = std::max(max_len, cached[s] + new_tokens[s]), n_tokens += new_tokens[s];
  const int blocks_per_seq = (max_len + 15) / 16;
  const int n_blocks = blocks_per_seq * n_seqs + 3;
  std::mt19937& rng = test_rng();

  std::vector<int32_t> free_blocks(static_cast<size_t>(n_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<int32_t> tables(size_t(n_seqs * blocks_per_seq));
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = free_blocks[i];

  // Random int8 values (full range, -128 too: the kernel must not assume the
  // quantizer's clamp) and positive fp16 scales of varied size.
  const size_t slots = size_t(n_blocks) * 16;
  std::vector<int8_t> kq(slots * size_t(kv_dim)), vq(slots * size_t(kv_dim));
  for (auto& x : kq) x = int8_t(rng());
  for (auto& x : vq) x = int8_t(rng());
  std::vector<uint16_t> ks(slots * size_t(sh.n_kv_heads)), vs(ks.size());
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (auto& s : ks) s = float_to_half_bits(unit(rng) / 127.0f);
  for (auto& s : vs) s = float_to_half_bits(unit(rng) * 4.0f / 127.0f);

  std::vector<int32_t> positions, token_tables;
  for (int s = 0; s < n_seqs; ++s)
    for (int i = 0; i < new_tokens[s]; ++i)
      positions.push_back(cached[s] + i), token_tables.push_back(s);
  std::vector<float> q = random_floats(size_t(n_tokens) * size_t(q_dim));
  const float scale = 1.0f / std::sqrt(float(sh.head_dim));

  DeviceBuffer<int8_t> dk(kq), dv(vq);
  DeviceBuffer<uint16_t> dks(ks), dvs(vs);
  DeviceBuffer<int32_t> dpos(positions), dtt(token_tables), dtab(tables);
  DeviceBuffer<float> dq(q), dout(size_t(n_tokens) * size_t(q_dim));
  poison(dout);
  DeviceBuffer<float> dpart(
      kernels::attention_partial_floats(n_tokens, sh.n_heads, sh.head_dim, max_len - 1));
  kernels::AttentionArgs a;
  a.q = dq.get();
  a.ldq = q_dim;
  a.out = dout.get();
  a.ldo = q_dim;
  a.positions = dpos.get();
  a.token_tables = dtt.get();
  a.block_tables = dtab.get();
  a.table_stride = blocks_per_seq;
  a.n_tokens = n_tokens;
  a.n_heads = sh.n_heads;
  a.n_kv_heads = sh.n_kv_heads;
  a.head_dim = sh.head_dim;
  a.max_position = max_len - 1;
  a.max_splits = max_splits;
  a.scale = scale;
  a.partials = dpart.get();
  const kernels::KvInt8LayerView cache{dk.get(), dv.get(), dks.get(), dvs.get()};
  kernels::launch_attention_int8(a, cache, nullptr);
  std::vector<float> got = dout.download();
  // Decode tokens (one a sequence): every row but the token's own may be
  // loaded before the wait (AttentionArgs::own_position_only), the own row
  // after it, through L2 (the scales share cache lines). Same bits.
  if (std::all_of(new_tokens.begin(), new_tokens.end(), [](int n) { return n == 1; })) {
    kernels::AttentionArgs ao = a;
    ao.own_position_only = true;
    poison(dout);
    kernels::launch_attention_int8(ao, cache, nullptr);
    CHECK(same_bits(dout.download(), got));
  }

  if (sh.head_dim % kernels::kActivationBlock == 0) {
    DeviceBuffer<float> dout_fused(dout.size());
    poison(dout_fused);
    QuantBuffers fused(n_tokens, q_dim), separate(n_tokens, q_dim);
    kernels::AttentionArgs af = a;
    af.out = dout_fused.get();
    af.out_q = fused.view();
    kernels::launch_attention_int8(af, cache, nullptr);
    kernels::launch_quantize_activations(dout.get(), q_dim, n_tokens, q_dim, separate.view(),
                                         nullptr);
    CHECK(same_bits(dout_fused.download(), got));
    check_same_quantization(fused, separate);
  }

  // The combine in the last block of pass 1 (AttentionArgs::arrivals), with
  // the quantized output where there is one: the counters are left zero,
  // and the quantized output is that of the block's own fp32 output.
  DeviceBuffer<uint32_t> arrivals(std::vector<uint32_t>(size_t(n_tokens) * size_t(sh.n_kv_heads), 0u));
  DeviceBuffer<float> dout_combined(dout.size());
  poison(dout_combined);
  kernels::AttentionArgs ac = a;
  ac.out = dout_combined.get();
  ac.arrivals = arrivals.get();
  std::optional<QuantBuffers> qc, qs;
  if (sh.head_dim % kernels::kActivationBlock == 0) {
    qc.emplace(n_tokens, q_dim);
    qs.emplace(n_tokens, q_dim);
    ac.out_q = qc->view();
  }
  kernels::launch_attention_int8(ac, cache, nullptr);
  const std::vector<float> combined = dout_combined.download();
  for (uint32_t c : arrivals.download()) REQUIRE(c == 0u);
  if (qc) {
    kernels::launch_quantize_activations(dout_combined.get(), q_dim, n_tokens, q_dim, qs->view(), nullptr);
    check_same_quantization(*qc, *qs);
  }

  auto value = [&](const std::vector<int8_t>& vals, const std::vector<uint16_t>& sc, size_t slot,
                   int kvh, int e) {
    return double(half_bits_to_float(sc[slot * size_t(sh.n_kv_heads) + size_t(kvh)])) *
           double(vals[slot * size_t(kv_dim) + size_t(kvh * sh.head_dim + e)]);
  };
  std::vector<double> ref(got.size());
  const int group = sh.n_heads / sh.n_kv_heads;
  for (int t = 0; t < n_tokens; ++t) {
    const int seq = token_tables[size_t(t)], pos = positions[size_t(t)];
    for (int h = 0; h < sh.n_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> scores(size_t(pos) + 1);
      double mx = -1e300;
      for (int p = 0; p <= pos; ++p) {
        const size_t slot =
            size_t(tables[size_t(seq * blocks_per_seq + p / 16)]) * 16 + size_t(p % 16);
        double s = 0;
        for (int e = 0; e < sh.head_dim; ++e)
          s += double(q[size_t(t * q_dim + h * sh.head_dim + e)]) * value(kq, ks, slot, kvh, e);
        scores[size_t(p)] = s * scale;
        mx = std::max(mx, scores[size_t(p)]);
      }
      double sum = 0;
      for (auto& s : scores) sum += (s = std::exp(s - mx));
      for (int e = 0; e < sh.head_dim; ++e) {
        double acc = 0;
        for (int p = 0; p <= pos; ++p) {
          const size_t slot =
              size_t(tables[size_t(seq * blocks_per_seq + p / 16)]) * 16 + size_t(p % 16);
          acc += scores[size_t(p)] / sum * value(vq, vs, slot, kvh, e);
        }
        ref[size_t(t * q_dim + h * sh.head_dim + e)] = acc;
      }
    }
  }
  CHECK(count_mismatches("attention int8", got, ref, 1e-3, 2e-3) == 0);
  CHECK(count_mismatches("attention int8, combined in pass 1", combined, ref, 1e-3, 2e-3) == 0);
}

}  // namespace

TEST_CASE("int8 kv_write: per-head scales and values match a CPU copy bit for bit") {
  for (const Shape sh : {Shape{0, 8, 128}, Shape{0, 3, 64}, Shape{0, 2, 16}, Shape{0, 1, 256}}) {
    const int n = 9, kv_dim = sh.n_kv_heads * sh.head_dim, ld = kv_dim + 5;
    std::vector<float> k = random_floats(size_t(n * ld)), v = random_floats(size_t(n * ld), 3.0f);
    // A head of zeros (scale 0) and an outlier.
    for (int e = 0; e < sh.head_dim; ++e) k[size_t(2 * ld + e)] = 0.0f;
    v[size_t(ld + 1)] = 250.0f;
    const int n_slots = 64;
    std::vector<int32_t> slots = {5, 0, 63, 16, 2, 47, 9, 33, 17};
    DeviceBuffer<float> dk(k), dv(v);
    DeviceBuffer<int32_t> ds(slots);
    DeviceBuffer<int8_t> ck(size_t(n_slots * kv_dim)), cv(size_t(n_slots * kv_dim));
    DeviceBuffer<uint16_t> cks(size_t(n_slots * sh.n_kv_heads)),
        cvs(size_t(n_slots * sh.n_kv_heads));
    kernels::launch_fill_u16(cks.get(), cks.size(), 0x7E00, nullptr);
    kernels::launch_fill_u16(cvs.get(), cvs.size(), 0x7E00, nullptr);
    kernels::launch_kv_write_int8(dk.get(), dv.get(), ld, n, sh.n_kv_heads, sh.head_dim, ds.get(),
                                  {ck.get(), cv.get(), cks.get(), cvs.get()}, nullptr);
    CUDA_CHECK(cudaGetLastError());
    const auto hk = ck.download(), hv = cv.download();
    const auto hks = cks.download(), hvs = cvs.download();
    int bad = 0;
    double worst = 0.0;
    for (int which = 0; which < 2; ++which) {
      const auto& src = which == 0 ? k : v;
      const auto& vals = which == 0 ? hk : hv;
      const auto& scales = which == 0 ? hks : hvs;
      for (int t = 0; t < n; ++t) {
        const size_t slot = size_t(slots[size_t(t)]);
        for (int h = 0; h < sh.n_kv_heads; ++h) {
          float amax = 0.0f;
          for (int e = 0; e < sh.head_dim; ++e)
            amax = std::max(amax, std::fabs(src[size_t(t * ld + h * sh.head_dim + e)]));
          const uint16_t d_bits = float_to_half_bits(amax / 127.0f);
          const float d = half_bits_to_float(d_bits);
          bad += scales[slot * size_t(sh.n_kv_heads) + size_t(h)] != d_bits;
          for (int e = 0; e < sh.head_dim; ++e) {
            const float x = src[size_t(t * ld + h * sh.head_dim + e)];
            int qv = d > 0.0f ? int(std::nearbyint(x / d)) : 0;
            qv = std::max(-127, std::min(127, qv));
            const int8_t got = vals[slot * size_t(kv_dim) + size_t(h * sh.head_dim + e)];
            bad += got != qv;
            if (amax > 0) worst = std::max(worst, double(std::fabs(d * float(got) - x) / amax));
          }
        }
      }
    }
    CHECK(bad == 0);
    // Rounding error of the stored value, relative to the head's max |x|.
    CHECK(worst <= 0.5 / 127.0 * 1.01);
  }
}

TEST_CASE("int8 kv_write: a non-finite value makes the head's scale NaN") {
  std::vector<float> k = random_floats(64), v = random_floats(64);
  k[3] = INFINITY;
  DeviceBuffer<float> dk(k), dv(v);
  DeviceBuffer<int32_t> ds(std::vector<int32_t>{0});
  DeviceBuffer<int8_t> ck(64), cv(64);
  DeviceBuffer<uint16_t> cks(2), cvs(2);
  kernels::launch_kv_write_int8(dk.get(), dv.get(), 64, 1, 2, 32, ds.get(),
                                {ck.get(), cv.get(), cks.get(), cvs.get()}, nullptr);
  const auto s = cks.download();
  CHECK(std::isnan(half_bits_to_float(s[0])));
  CHECK(std::isfinite(half_bits_to_float(s[1])));
}

TEST_CASE("int8 attention: decode, GQA shapes of real models, split-K") {
  check_attention_int8({32, 8, 128}, {511, 37, 4095}, {1, 1, 1});
  check_attention_int8({9, 3, 64}, {100, 1}, {1, 1});
  check_attention_int8({64, 8, 128}, {700}, {1});
  check_attention_int8({4, 4, 32}, {0, 16, 17}, {1, 1, 1});
  check_attention_int8({4, 2, 16}, {40}, {1});
  check_attention_int8({8, 4, 256}, {300}, {1});
}

TEST_CASE("int8 attention: batched decode past one wave of blocks (fewer pieces)") {
  std::vector<int> cached, one;
  for (int s = 0; s < 64; ++s) cached.push_back((s * 389) % 1200), one.push_back(1);
  check_attention_int8({32, 8, 128}, cached, one);
}

TEST_CASE("int8 attention: prefill tokens attend causally, also after cached ones") {
  check_attention_int8({8, 2, 64}, {0}, {77});
  check_attention_int8({8, 2, 128}, {300}, {33});
  check_attention_int8({16, 4, 256}, {5, 0}, {20, 9});
}

TEST_CASE("int8 attention: contexts off the 16-position grid, one position, every GQA ratio") {
  check_attention_int8({8, 2, 64}, {0}, {1});  // a single position
  check_attention_int8({8, 2, 128}, {0, 14, 30, 46, 99}, {1, 1, 1, 1, 1});
  check_attention_int8({8, 8, 128}, {129}, {1});    // 1 query head per KV head
  check_attention_int8({6, 2, 128}, {333}, {1});    // 3
  check_attention_int8({10, 2, 64}, {77}, {1});     // 5
  check_attention_int8({12, 2, 32}, {60}, {1});     // 6
  check_attention_int8({7, 1, 64}, {200}, {1});     // 7
  check_attention_int8({16, 2, 128}, {1500}, {1});  // 8
}

TEST_CASE("int8 attention: capped piece counts (a prompt chunk in one launch)") {
  // The backend caps the pieces when a long run of prompt tokens would not
  // fit the scratch at full split: one piece walks every position.
  check_attention_int8({8, 2, 128}, {0}, {300}, 1);
  check_attention_int8({8, 2, 128}, {200}, {100}, 3);
  check_attention_int8({32, 8, 128}, {0, 40}, {77, 5}, 2);
  check_attention_int8({4, 1, 64}, {1500}, {3}, 7);
}

TEST_CASE("int8 attention: piece counts at the split boundaries, short tokens in long steps") {
  // attention_splits: 63 pieces up to max_position 1007, 64 from 1008;
  // pieces of 32 positions from position 1024 (the last one holding 1 or 2).
  check_attention_int8({8, 2, 128}, {1007}, {1});
  check_attention_int8({8, 2, 64}, {1008}, {1});
  check_attention_int8({4, 1, 128}, {1023, 1024, 1025}, {1, 1, 1});
  // Tokens of 1, 6 and 1009 positions in a grid sized for 4096: most of
  // their pieces are empty.
  check_attention_int8({8, 2, 128}, {4095, 0, 5, 1008}, {1, 1, 1, 1});
  // 128 positions a piece: each warp goes round its loop several times.
  check_attention_int8({4, 1, 128}, {8191}, {1});
  check_attention_int8({4, 1, 256}, {2000}, {1});
}

TEST_CASE("int8 attention: one long piece, the own position around a pass boundary") {
  // As test_attention's case of the same name: passes of 128 (HD 16) to 8
  // (HD 256) positions, the own position around the first boundary, deep
  // in a later pass, and in a piece shorter than a block step.
  check_attention_int8({4, 2, 16}, {127, 128, 129, 1500, 5}, {1, 1, 1, 1, 1}, 1);
  check_attention_int8({4, 4, 32}, {63, 64, 65, 700, 5}, {1, 1, 1, 1, 1}, 1);
  check_attention_int8({9, 3, 64}, {31, 32, 33, 333, 2}, {1, 1, 1, 1, 1}, 1);
  check_attention_int8({32, 8, 128}, {15, 16, 17, 511, 1}, {1, 1, 1, 1, 1}, 1);
  check_attention_int8({8, 4, 256}, {7, 8, 9, 300, 0}, {1, 1, 1, 1, 1}, 1);
}

// The int8 cache under programmatic dependent launch, as test_attention's
// PDL case: launch_kv_write_int8 writes each token's own row and scales
// just before the attention, on one stream, fresh each round; `auto` must
// give the bits of `portable`. Every own-row load goes through L2 here (the
// per-slot scales share cache lines), in the first pass and in later ones.
TEST_CASE("int8 attention under PDL: each token's own row written by the kernel just before") {
  if (!kernels::programmatic_launch_supported())
    MESSAGE(
        "no programmatic dependent launch on this device or build: both runs are plain launches");
  for (int max_splits : {0, 1}) {
    for (Shape sh : {Shape{32, 8, 128}, Shape{4, 2, 16}, Shape{8, 2, 64}}) {
      CAPTURE(sh.head_dim);
      CAPTURE(max_splits);
      PdlDecodeStep st(sh.n_heads, sh.n_kv_heads, sh.head_dim, {511, 37, 200, 16, 128}, max_splits);
      std::mt19937& rng = test_rng();
      std::vector<int8_t> vals(st.cache_slots() * size_t(st.kv_dim));
      for (auto& x : vals) x = int8_t(rng());
      std::vector<uint16_t> scales(st.cache_slots() * size_t(sh.n_kv_heads));
      std::uniform_real_distribution<float> unit(0.25f, 1.0f);
      for (auto& sc : scales) sc = float_to_half_bits(unit(rng) / 127.0f);
      DeviceBuffer<int8_t> ck(vals), cv(vals);
      DeviceBuffer<uint16_t> cks(scales), cvs(scales);
      const kernels::KvInt8LayerView cache{ck.get(), cv.get(), cks.get(), cvs.get()};
      const int differing_rounds = rounds_auto_differs(
          20, [&] { st.refresh(); },
          [&](cudaStream_t stream) {
            poison(st.out);
            kernels::launch_kv_write_int8(st.k.get(), st.v.get(), st.kv_dim, st.n, sh.n_kv_heads,
                                          sh.head_dim, st.slots.get(), cache, stream);
            kernels::launch_attention_int8(st.args, cache, stream);
            CUDA_CHECK(cudaStreamSynchronize(stream));
            return st.out.download();
          });
      CHECK(differing_rounds == 0);
    }
  }
}
