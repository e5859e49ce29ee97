// The decode step of the attention tests under PDL (test_attention.cpp,
// test_attention_int8.cpp): one token a sequence, its q, output and own k
// and v rows on the device, and the AttentionArgs over them. The cache is
// the caller's (fp16 or int8).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/attention.h"
#include "tests/kernels/gpu_test_util.h"

namespace voltad::test {

// The fp16 cache's three pass-1 kernels: the portable one, the sm_80+ one
// (AttentionArgs::tensor_cores, where it applies) and the wmma one
// (AttentionArgs::wmma, sm_70+).
enum class Pass1 { Portable, Mma, Wmma };
inline const Pass1 kEveryPass1[] = {Pass1::Portable, Pass1::Mma, Pass1::Wmma};
inline void set_pass1(kernels::AttentionArgs& a, Pass1 p) {
  a.tensor_cores = p == Pass1::Mma;
  a.wmma = p == Pass1::Wmma;
}
inline const char* pass1_name(Pass1 p) {
  return p == Pass1::Portable ? "portable" : p == Pass1::Mma ? "sm_80 mma" : "wmma";
}

// The wmma pass 1's warps a block fixed (4 or 6; 0: its plan's choice) for
// the scope's life, the default again after it, whatever a check throws.
// Not nested: the inner scope's end would restore the default, not the
// outer scope's size.
struct WmmaWarpsScope {
  explicit WmmaWarpsScope(int warps) { kernels::attention_wmma_warps_force(warps); }
  ~WmmaWarpsScope() { kernels::attention_wmma_warps_force(std::nullopt); }
  WmmaWarpsScope(const WmmaWarpsScope&) = delete;
  WmmaWarpsScope& operator=(const WmmaWarpsScope&) = delete;
};

struct PdlDecodeStep {
  static constexpr int kBlocksPerSeq = 33;  // 528 positions a sequence
  int n, kv_dim, q_dim;
  DecodePaging paging;
  DeviceBuffer<int32_t> positions, token_tables, tables, slots;
  DeviceBuffer<float> q, out, k, v, partials;
  kernels::AttentionArgs args;  // own_position_only; args.cache unset

  PdlDecodeStep(int n_heads, int n_kv_heads, int head_dim, const std::vector<int32_t>& pos,
                int max_splits)
      : n(int(pos.size())),
        kv_dim(n_kv_heads * head_dim),
        q_dim(n_heads * head_dim),
        paging(decode_paging(pos, kBlocksPerSeq)),
        positions(pos),
        token_tables(paging.token_tables),
        tables(paging.tables),
        slots(paging.slots),
        q(size_t(n) * size_t(q_dim)),
        out(size_t(n) * size_t(q_dim)),
        k(size_t(n) * size_t(kv_dim)),
        v(size_t(n) * size_t(kv_dim)),
        partials(kernels::attention_partial_floats(n, n_heads, head_dim, max_position(pos))) {
    args.q = q.get();
    args.ldq = q_dim;
    args.out = out.get();
    args.ldo = q_dim;
    args.positions = positions.get();
    args.token_tables = token_tables.get();
    args.block_tables = tables.get();
    args.table_stride = kBlocksPerSeq;
    args.n_tokens = n;
    args.n_heads = n_heads;
    args.n_kv_heads = n_kv_heads;
    args.head_dim = head_dim;
    args.max_position = max_position(pos);
    args.max_splits = max_splits;
    args.scale = 1.0f / std::sqrt(float(head_dim));
    args.partials = partials.get();
    args.own_position_only = true;
  }
  // Cache slots the tables span.
  size_t cache_slots() const { return paging.tables.size() * 16; }
  // Fresh q and own k, v rows (a round of rounds_auto_differs).
  void refresh() {
    k.upload(random_floats(size_t(n) * size_t(kv_dim)));
    v.upload(random_floats(size_t(n) * size_t(kv_dim)));
    q.upload(random_floats(size_t(n) * size_t(q_dim)));
  }

 private:
  static int max_position(const std::vector<int32_t>& pos) {
    return *std::max_element(pos.begin(), pos.end());
  }
};

}  // namespace voltad::test
