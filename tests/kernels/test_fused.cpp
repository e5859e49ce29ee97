// The decode step's fused kernels against the separate kernels they replace:
// RMSNorm + quantize, SwiGLU + quantize, the attention combine + quantize,
// and RoPE of q and k + the KV write. The fused ones must give the same bytes
// (the same IEEE operations in the same order), so the comparisons are exact.
#include <cuda_fp16.h>
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/matvec.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "tests/kernels/gpu_test_util.h"

using namespace voltad;
using namespace voltad::test;

namespace {

uint16_t half_bits(float x) {
  __half h = __float2half_rn(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

std::vector<float> with_outliers(size_t n) {
  std::vector<float> v = random_floats(n);
  for (size_t i = 0; i < n; i += 97) v[i] *= 40.0f;  // blocks whose max is far above the rest
  return v;
}

}  // namespace

TEST_CASE("rmsnorm_quantize = rmsnorm, then quantize_activations") {
  for (int dim : {64, 576, 4096, 8192, 12288}) {  // 2 to 12 blocks a row
    CAPTURE(dim);
    const int rows = 3;
    const int64_t ld = dim + 32;
    std::vector<float> x = with_outliers(size_t(rows * ld)), w = random_floats(size_t(dim));
    DeviceBuffer<float> d_x(x), d_w(w), out_a(size_t(rows * ld)), out_b(size_t(rows * ld));
    poison(out_a);
    poison(out_b);
    QuantBuffers qa(rows, dim), qb(rows, dim);
    kernels::launch_rmsnorm_quantize(d_x.get(), ld, d_w.get(), out_a.get(), ld, rows, dim, 1e-5f,
                                     qa.view(), nullptr);
    kernels::launch_rmsnorm(d_x.get(), ld, d_w.get(), out_b.get(), ld, rows, dim, 1e-5f, nullptr);
    kernels::launch_quantize_activations(out_b.get(), ld, rows, dim, qb.view(), nullptr);
    CHECK(same_bits(out_a.download(), out_b.download()));
    check_same_quantization(qa, qb);
  }
}

TEST_CASE("swiglu_quantize = swiglu, then quantize_activations") {
  for (int n : {32, 1536, 14336}) {
    CAPTURE(n);
    const int rows = 5;
    std::vector<float> g = with_outliers(size_t(rows * n)), u = with_outliers(size_t(rows * n));
    DeviceBuffer<float> d_g(g), d_u(u), out_a(size_t(rows * n)), out_b(size_t(rows * n));
    poison(out_a);
    poison(out_b);
    QuantBuffers qa(rows, n), qb(rows, n);
    kernels::launch_swiglu_quantize(d_g.get(), n, d_u.get(), n, out_a.get(), n, rows, n, qa.view(),
                                    nullptr);
    kernels::launch_swiglu(d_g.get(), n, d_u.get(), n, out_b.get(), n, rows, n, nullptr);
    kernels::launch_quantize_activations(out_b.get(), n, rows, n, qb.view(), nullptr);
    CHECK(same_bits(out_a.download(), out_b.download()));
    check_same_quantization(qa, qb);
  }
}

TEST_CASE("a non-finite value makes its block's scales NaN in the fused quantizers too") {
  const int rows = 1, n = 64;
  std::vector<float> g = random_floats(size_t(n)), u = random_floats(size_t(n));
  u[5] = INFINITY;
  DeviceBuffer<float> d_g(g), d_u(u), out(static_cast<size_t>(n));
  QuantBuffers qa(rows, n), qb(rows, n);
  kernels::launch_swiglu_quantize(d_g.get(), n, d_u.get(), n, out.get(), n, rows, n, qa.view(),
                                  nullptr);
  kernels::launch_quantize_activations(out.get(), n, rows, n, qb.view(), nullptr);
  check_same_quantization(qa, qb);
  const std::vector<float> s = qa.scales.download();
  CHECK(std::isnan(s[0]));
  CHECK(std::isfinite(s[4]));  // the second block is untouched
}

TEST_CASE("rope_qk_kv_write = rope(q), rope(k), kv_write") {
  for (auto ordering : {kernels::RopeOrdering::Normal, kernels::RopeOrdering::NeoX}) {
    for (int head_dim : {64, 128}) {
      CAPTURE(head_dim);
      const int rows = 3, n_heads = 8, n_kv_heads = 2, n_blocks = 4;
      const int64_t ldq = n_heads * head_dim, ldkv = n_kv_heads * head_dim, kv_dim = ldkv;
      std::vector<float> q = random_floats(size_t(rows * ldq)),
                         k = random_floats(size_t(rows * ldkv)),
                         v = random_floats(size_t(rows * ldkv));
      std::vector<int32_t> pos = {0, 33, 4000}, slots = {5, 17, 62};
      const std::vector<float> inv = kernels::rope_inverse_frequencies(head_dim, 1e6);
      DeviceBuffer<float> qa(q), ka(k), qb(q), kb(k), d_v(v), d_inv(inv);
      DeviceBuffer<int32_t> d_pos(pos), d_slots(slots);
      const size_t cache_elems = size_t(n_blocks) * kernels::kKvBlockTokens * size_t(kv_dim);
      DeviceBuffer<uint16_t> kc_a(cache_elems), vc_a(cache_elems), kc_b(cache_elems),
          vc_b(cache_elems);
      for (auto* b : {&kc_a, &vc_a, &kc_b, &vc_b})
        CUDA_CHECK(cudaMemset(b->get(), 0x7e, cache_elems * 2));
      kernels::launch_rope_qk_kv_write(qa.get(), ldq, ka.get(), d_v.get(), ldkv, rows, n_heads,
                                       n_kv_heads, head_dim, d_pos.get(), d_inv.get(), ordering,
                                       d_slots.get(), {kc_a.get(), vc_a.get()}, nullptr);
      kernels::launch_rope(qb.get(), ldq, rows, n_heads, head_dim, head_dim, d_pos.get(),
                           d_inv.get(), ordering, nullptr);
      kernels::launch_rope(kb.get(), ldkv, rows, n_kv_heads, head_dim, head_dim, d_pos.get(),
                           d_inv.get(), ordering, nullptr);
      kernels::launch_kv_write(kb.get(), d_v.get(), ldkv, rows, int(kv_dim), d_slots.get(),
                               {kc_b.get(), vc_b.get()}, nullptr);
      CHECK(same_bits(qa.download(), qb.download()));
      CHECK(same_bits(ka.download(), kb.download()));
      CHECK(kc_a.download() == kc_b.download());
      CHECK(vc_a.download() == vc_b.download());
    }
  }
}

TEST_CASE("attention with a quantized output = attention, then quantize_activations") {
  const int n_heads = 8, n_kv_heads = 2, head_dim = 128, n_tokens = 2, blocks_per_seq = 40;
  const int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim;
  const size_t cache_elems = size_t(2 * blocks_per_seq) * kernels::kKvBlockTokens * size_t(kv_dim);
  std::vector<uint16_t> kh(cache_elems), vh(cache_elems);
  std::vector<float> kf = random_floats(cache_elems), vf = random_floats(cache_elems);
  for (size_t i = 0; i < cache_elems; ++i) {
    kh[i] = half_bits(kf[i]);
    vh[i] = half_bits(vf[i]);
  }
  std::vector<int32_t> tables(size_t(2 * blocks_per_seq));
  for (int i = 0; i < 2 * blocks_per_seq; ++i) tables[size_t(i)] = (i * 37) % (2 * blocks_per_seq);
  std::vector<int32_t> pos = {600, 17}, token_tables = {0, 1};
  DeviceBuffer<uint16_t> d_k(kh), d_v(vh);
  DeviceBuffer<int32_t> d_tables(tables), d_pos(pos), d_tt(token_tables);
  DeviceBuffer<float> d_q(random_floats(size_t(n_tokens * q_dim)));
  const int max_position = 600;
  DeviceBuffer<float> parts(
      kernels::attention_partial_floats(n_tokens, n_heads, head_dim, max_position));
  DeviceBuffer<float> out_a(size_t(n_tokens * q_dim)), out_b(size_t(n_tokens * q_dim));
  QuantBuffers qa(n_tokens, q_dim), qb(n_tokens, q_dim);
  kernels::AttentionArgs a;
  a.q = d_q.get();
  a.ldq = q_dim;
  a.ldo = q_dim;
  a.cache = {d_k.get(), d_v.get()};
  a.positions = d_pos.get();
  a.token_tables = d_tt.get();
  a.block_tables = d_tables.get();
  a.table_stride = blocks_per_seq;
  a.n_tokens = n_tokens;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.max_position = max_position;
  a.scale = 0.088f;
  a.partials = parts.get();
  a.out = out_a.get();
  a.out_q = qa.view();
  kernels::launch_attention(a, nullptr);
  a.out = out_b.get();
  a.out_q = {};
  kernels::launch_attention(a, nullptr);
  kernels::launch_quantize_activations(out_b.get(), q_dim, n_tokens, q_dim, qb.view(), nullptr);
  CHECK(same_bits(out_a.download(), out_b.download()));
  check_same_quantization(qa, qb);
}
