// The decode attention with the head norms, RoPE and the KV write inside
// (AttentionArgs::rope) against the separate kernels it replaces:
// launch_head_rmsnorm of q and k, launch_rope_qk_kv_write, then the
// attention. The head norm's sum of squares goes in another order inside, so
// values compare within a tolerance; the cache rows it did not write must
// keep their bits.
#include <cuda_fp16.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernel_set.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/gpu_test_util.h"

using namespace voltad;
using namespace voltad::test;

namespace {

struct Case {
  int n_heads, n_kv_heads, head_dim;
  kernels::RopeOrdering ordering;
  bool norms;
  int max_splits;  // 0: as many pieces as the launch takes; small: long pieces
  float eps = 1e-6f;
};

// One decode step's tables: sequences of one token each at `positions`,
// their blocks shuffled, q | k | v of a token in one row (as the backend
// lays them out), a cache of K then V halves.
struct DecodeStep {
  int n, n_heads, n_kv_heads, head_dim, kv_dim, q_dim, max_position, blocks_per_seq;
  int64_t ld;
  std::vector<int32_t> positions, tables, slots, token_tables;
  size_t half_elems;  // halves of K (then as many of V)
  DeviceBuffer<int32_t> d_pos, d_tt, d_tab, d_slots;
  DeviceBuffer<float> d_inv, parts;

  DecodeStep(int heads, int kv_heads, int hd, std::vector<int32_t> pos)
      : n(int(pos.size())),
        n_heads(heads),
        n_kv_heads(kv_heads),
        head_dim(hd),
        kv_dim(kv_heads * hd),
        q_dim(heads * hd),
        max_position(*std::max_element(pos.begin(), pos.end())),
        blocks_per_seq(max_position / kernels::kKvBlockTokens + 1),
        ld(q_dim + 2 * kv_dim),
        positions(std::move(pos)),
        tables(size_t(n * blocks_per_seq)),
        slots(make_slots()),
        token_tables(make_token_tables()),
        half_elems(tables.size() * 16 * size_t(kv_dim)),
        d_pos(positions),
        d_tt(token_tables),
        d_tab(tables),
        d_slots(slots),
        d_inv(kernels::rope_inverse_frequencies(hd, 1e6)),
        parts(kernels::attention_partial_floats(n, heads, hd, max_position)) {}

  std::vector<int32_t> make_slots() {
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), test_rng());
    std::vector<int32_t> s;
    for (int t = 0; t < n; ++t) {
      const int p = positions[size_t(t)];
      s.push_back(tables[size_t(t * blocks_per_seq + p / 16)] * 16 + p % 16);
    }
    return s;
  }
  std::vector<int32_t> make_token_tables() const {
    std::vector<int32_t> tt(static_cast<size_t>(n));
    std::iota(tt.begin(), tt.end(), 0);
    return tt;
  }

  // The attention of this step over `cache`, q from `qkv` (rotated or raw).
  kernels::AttentionArgs args(float* qkv, uint16_t* cache, float* out, int max_splits = 0) {
    kernels::AttentionArgs a;
    a.q = qkv;
    a.ldq = ld;
    a.out = out;
    a.ldo = q_dim;
    a.cache = {cache, cache + half_elems};
    a.positions = d_pos.get();
    a.token_tables = d_tt.get();
    a.block_tables = d_tab.get();
    a.table_stride = blocks_per_seq;
    a.n_tokens = n;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.max_position = max_position;
    a.max_splits = max_splits;
    a.scale = 1.0f / std::sqrt(float(head_dim));
    a.partials = parts.get();
    a.own_position_only = true;
    return a;
  }
  // The same with the norms and RoPE inside: q, k and v raw in `qkv`.
  kernels::AttentionArgs rope_args(float* qkv, uint16_t* cache, float* out,
                                   kernels::RopeOrdering ordering, const float* q_norm,
                                   const float* k_norm, float eps, int max_splits = 0) {
    kernels::AttentionArgs a = args(qkv, cache, out, max_splits);
    a.rope.inv_freq = d_inv.get();
    a.rope.neox = ordering == kernels::RopeOrdering::NeoX;
    a.rope.k = qkv + q_dim;
    a.rope.v = qkv + q_dim + kv_dim;
    a.rope.ldkv = ld;
    a.rope.slots = d_slots.get();
    a.rope.q_norm = q_norm;
    a.rope.k_norm = k_norm;
    a.rope.eps = eps;
    return a;
  }
};

// Both ways from the same cache contents (random rows, fp16).
void check_rope_in_attention(const Case& c, const std::vector<int32_t>& positions) {
  DecodeStep st(c.n_heads, c.n_kv_heads, c.head_dim, positions);
  const int n = st.n, kv_dim = st.kv_dim, q_dim = st.q_dim;
  const int64_t ldqkv = st.ld;
  const size_t half_elems = st.half_elems;
  const std::vector<int32_t>& slots = st.slots;
  const std::vector<float> cache_values = random_floats(2 * half_elems);
  std::vector<uint16_t> cache_bits(cache_values.size());
  for (size_t i = 0; i < cache_bits.size(); ++i)
    cache_bits[i] = float_to_half_bits(cache_values[i]);
  const std::vector<float> qkv = random_floats(size_t(n) * size_t(ldqkv), 2.0f);
  std::vector<float> q_norm = random_floats(size_t(c.head_dim)),
                     k_norm = random_floats(size_t(c.head_dim));

  DeviceBuffer<uint16_t> cache_sep(cache_bits), cache_in(cache_bits);
  DeviceBuffer<float> qkv_sep(qkv), qkv_in(qkv), d_qn(q_norm), d_kn(k_norm);
  DeviceBuffer<float> out_sep(size_t(n * q_dim)), out_in(size_t(n * q_dim));
  DeviceBuffer<uint32_t> arrivals(std::vector<uint32_t>(size_t(n * c.n_kv_heads), 0u));
  const float eps = c.eps;

  // Separate: the norms and RoPE in place, the KV write, then the attention.
  float* q_sep = qkv_sep.get();
  float* k_sep = q_sep + q_dim;
  if (c.norms) {
    kernels::launch_head_rmsnorm(q_sep, ldqkv, n, c.n_heads, c.head_dim, d_qn.get(), eps, nullptr);
    kernels::launch_head_rmsnorm(k_sep, ldqkv, n, c.n_kv_heads, c.head_dim, d_kn.get(), eps,
                                 nullptr);
  }
  kernels::launch_rope_qk_kv_write(q_sep, ldqkv, k_sep, k_sep + kv_dim, ldqkv, n, c.n_heads,
                                   c.n_kv_heads, c.head_dim, st.d_pos.get(), st.d_inv.get(),
                                   c.ordering, st.d_slots.get(),
                                   {cache_sep.get(), cache_sep.get() + half_elems}, nullptr);
  kernels::launch_attention(st.args(qkv_sep.get(), cache_sep.get(), out_sep.get(), c.max_splits),
                            nullptr);
  const std::vector<float> want = out_sep.download();
  const std::vector<uint16_t> want_cache = cache_sep.download();

  // Inside: raw q, k and v; with and without the combine in pass 1.
  kernels::AttentionArgs a = st.rope_args(qkv_in.get(), cache_in.get(), out_in.get(), c.ordering,
                                          c.norms ? d_qn.get() : nullptr,
                                          c.norms ? d_kn.get() : nullptr, eps, c.max_splits);
  // [pass-1 kernel][combine in pass 1]: every pass-1 kernel
  // (attention_test_util.h; the sm_80+ one where it applies), then the wmma
  // one in blocks of 6 warps (its default is 4).
  constexpr int kVariants = 4;
  std::vector<float> got[kVariants][2];
  for (int k = 0; k < kVariants; ++k)
    for (int combine_in_pass1 = 0; combine_in_pass1 < 2; ++combine_in_pass1) {
      const WmmaWarpsScope warps(k == 3 ? 6 : 4);
      set_pass1(a, k >= 3 ? Pass1::Wmma : kEveryPass1[k]);
      a.arrivals = combine_in_pass1 ? arrivals.get() : nullptr;
      cache_in.upload(cache_bits);  // the own rows unwritten: each launch must write and use them
      poison(out_in);
      kernels::launch_attention(a, nullptr);
      got[k][combine_in_pass1] = out_in.download();
    }
  // The raw rows stay as they were (q and k are not rotated in place).
  CHECK(same_bits(qkv_in.download(), qkv));

  // Values: where the norm's fp32 result differs in its last bit an fp16
  // element of the own row may round the other way (2^-11 relative), which
  // moves the outputs by ~1e-5; a wrong angle, pair or norm moves them by
  // ~0.1 and more.
  std::vector<double> ref(want.begin(), want.end());
  for (int k = 0; k < kVariants; ++k) {
    CAPTURE(k == 3 ? "wmma, 6 warps" : pass1_name(kEveryPass1[k]));
    CHECK(count_mismatches("attention, RoPE inside", got[k][0], ref, 2e-4, 1e-3) == 0);
    CHECK(count_mismatches("attention, RoPE inside, combine in pass 1", got[k][1], ref, 2e-4,
                           1e-3) == 0);
  }
  const std::vector<uint16_t> got_cache = cache_in.download();
  int changed_elsewhere = 0, own_off = 0;
  std::vector<bool> own(got_cache.size(), false);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < kv_dim; ++i)
      for (size_t half : {size_t(0), half_elems})
        own[half + size_t(slots[size_t(t)]) * size_t(kv_dim) + size_t(i)] = true;
  for (size_t i = 0; i < got_cache.size(); ++i) {
    if (!own[i]) {
      changed_elsewhere += got_cache[i] != want_cache[i];
      continue;
    }
    const float g = half_bits_to_float(got_cache[i]), w = half_bits_to_float(want_cache[i]);
    const bool off = !(std::fabs(g - w) <= 1e-3f * std::fabs(w) + 1e-6f);
    if (off && ++own_off <= 8) {
      const size_t e = i % half_elems;
      const auto tok =
          std::find(slots.begin(), slots.end(), int32_t(e / size_t(kv_dim))) - slots.begin();
      MESSAGE((i < half_elems ? "K" : "V")
              << " token " << tok << " kv head " << e % size_t(kv_dim) / size_t(c.head_dim)
              << " element " << e % size_t(c.head_dim) << ": got " << g << ", want " << w);
    }
  }
  CHECK(changed_elsewhere == 0);
  CHECK(own_off == 0);
  for (uint32_t v : arrivals.download()) CHECK(v == 0u);
}

}  // namespace

TEST_CASE("attention with RoPE inside = head norms, rope_qk_kv_write, attention") {
  using kernels::RopeOrdering;
  const std::vector<Case> cases = {
      {32, 8, 128, RopeOrdering::Normal, false, 0},  // Llama-3-8B
      {32, 8, 128, RopeOrdering::NeoX, true, 0},     // Qwen3-8B
      {32, 8, 128, RopeOrdering::NeoX, true, 2},    // long pieces: the own row past the first loads
      {16, 2, 128, RopeOrdering::Normal, true, 0},  // 8 heads a group (no register cap)
      {8, 8, 64, RopeOrdering::NeoX, false, 3},     // one head a group
      {9, 3, 64, RopeOrdering::Normal, true, 0},    // SmolLM2's groups of 3
      {16, 4, 64, RopeOrdering::Normal, false, 2},  // long pieces again
      {4, 2, 16, RopeOrdering::NeoX, true, 0},      // slots share cache lines
      {4, 1, 16, RopeOrdering::Normal, true, 1},    // ... and the own row past the first loads
      {8, 2, 256, RopeOrdering::NeoX, true, 0},     // a lane group is the whole warp
      {16, 2, 256, RopeOrdering::Normal, true, 0},  // ... 8 heads a group: 44 KB shared
      {8, 4, 32, RopeOrdering::NeoX, true, 2},      // fp16 rows of 64 bytes
      {8, 2, 64, RopeOrdering::NeoX, true, 0, 0.5f},  // an eps that matters
  };
  for (const Case& c : cases) {
    CAPTURE(c.n_heads);
    CAPTURE(c.n_kv_heads);
    CAPTURE(c.head_dim);
    CAPTURE(c.norms);
    CAPTURE(c.max_splits);
    CAPTURE(int(c.ordering));
    CAPTURE(c.eps);
    check_rope_in_attention(c, {0, 37, 511, 1500, 16});
  }
}

namespace {

// Under programmatic dependent launch the angles are computed before the
// wait and q, k and v read after it. Here the kernel just before rewrites
// q and k (a head RMSNorm in place) with fresh rows each round: were they
// read before it completed, `auto` would differ from `portable`.
void check_rope_under_pdl(Pass1 pass1) {
  const int n_heads = 32, n_kv_heads = 8, head_dim = 128;
  DecodeStep st(n_heads, n_kv_heads, head_dim, {700, 5, 64});
  const int n = st.n;
  const int64_t ld = st.ld;
  DeviceBuffer<uint16_t> cache(2 * st.half_elems);
  CUDA_CHECK(
      cudaMemset(cache.get(), 0x2e, cache.size() * sizeof(uint16_t)));  // small finite halves
  DeviceBuffer<float> qkv(size_t(n) * size_t(ld)), d_w(random_floats(head_dim)),
      out(size_t(n * st.q_dim));
  kernels::AttentionArgs a = st.rope_args(qkv.get(), cache.get(), out.get(),
                                          kernels::RopeOrdering::NeoX, nullptr, nullptr, 0.0f);
  set_pass1(a, pass1);
  std::vector<float> rows;
  const int differing_rounds = rounds_auto_differs(
      20, [&] { rows = random_floats(size_t(n) * size_t(ld)); },
      [&](cudaStream_t stream) {
        qkv.upload(rows);
        poison(out);
        // q and k normed in place, then read by the attention.
        kernels::launch_head_rmsnorm(qkv.get(), ld, n, n_heads + n_kv_heads, head_dim, d_w.get(),
                                     1e-6f, stream);
        kernels::launch_attention(a, stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return out.download();
      });
  CHECK(differing_rounds == 0);
}

}  // namespace

TEST_CASE("attention with RoPE inside under PDL: q and k written by the kernel just before") {
  for (Pass1 pass1 : kEveryPass1) {
    CAPTURE(pass1_name(pass1));
    check_rope_under_pdl(pass1);
  }
}
