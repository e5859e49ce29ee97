// The split-K decode attention shared by the fp16 and the int8 KV cache
// (kernels/attention.cu, kernels/attention_int8.cu): the piece rule, pass 1
// templated on a cache reader, and the launch of both passes. Pass 2 (the
// combine, with the optional quantized output) is one kernel for both caches,
// in attention.cu.
//
// Pass 1, kernel_attention_partial: grid (tokens, kv heads, splits), 4 warps.
// head_dim/8 lanes share a position (8 elements each: one 16-byte load of
// fp16 K and of V, or 8 bytes of int8), so a warp covers 32/(head_dim/8)
// positions per step, with the loads of the next 2 steps in flight while 2
// steps compute (a row's load goes out as the row it replaces is decoded):
// decode is a chain of dependent memory latencies otherwise (one position
// per warp step measured 52 us for 256 positions on the H200;
// docs/KERNEL-NOTES.md). A lane holds its 8 elements of each query head of
// the group, so a key row is read once for every head that shares it. Each
// lane group keeps an online softmax (running max m, sum l, weighted V
// sum); the groups merge through shuffles, the four warps through shared
// memory, and one partial per (token, head, split) is written:
// {m, l, acc[head_dim]}.
#pragma once

#include <algorithm>
#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/attention.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/quantize_warp.cuh"

namespace voltad::kernels {

constexpr int kAttentionWarps = 4;
constexpr int kAttentionLaneElements = 8;  // of a K or V row, per lane

// split_tokens, piece_tokens and pieces_used: kernels/attention_plan.h.

// The combine of a (token, KV head)'s pieces, for its `group` query heads,
// by the block of pass 1 that wrote the last of them (AttentionArgs::
// arrivals): out = sum_s acc_s e^(m_s - m) / sum_s l_s e^(m_s - m) over the
// pieces that hold positions, as kernel_attention_combine computes it, with
// the same quantized or narrow-GEMM outputs. One block does the work of
// `group` combine blocks, so it keeps many loads in flight: a warp takes a
// head's pieces (at most 64: two a lane) for the max and the sum; each
// thread then sums 4 elements (a float4) over the pieces, 8 pieces in
// flight, into `staging` (group * HD floats of shared memory); then a
// thread per element writes the outputs, whole warps per 32 values as the
// quantizers need. The partials are read through L2 (__ldcg): other blocks
// wrote them. The weights and sums go in `scratch`: shared memory the
// caller lends (the wmma pass 1: its loop's, dead by then, so that three
// blocks fit a V100's 96 KB) or static_combine_scratch().
struct CombineScratch {
  float weight[kAttentionMaxGroup][kAttentionMaxSplits];
  float sum_l[kAttentionMaxGroup];
};
__device__ __forceinline__ CombineScratch& static_combine_scratch() {
  __shared__ CombineScratch scratch;
  return scratch;
}
template <int HD>
__device__ __forceinline__ void combine_pieces(const AttentionArgs& a, int t, int kvh, int group,
                                               int splits, float* staging,
                                               CombineScratch& scratch) {
  static_assert(kAttentionMaxSplits <= 64, "two pieces a lane");
  static_assert(HD % 4 == 0 && kAttentionPartialHeader % 4 == 0, "float4 sums");
  auto& weight = scratch.weight;
  auto& sum_l = scratch.sum_l;
  constexpr int kStride = kAttentionPartialHeader + HD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pos = a.positions[t];
  const int used = pieces_used(pos, splits, a.least_piece);
  const float* parts = a.partials + (int64_t(t) * a.n_heads + int64_t(kvh) * group) * splits * kStride;
  for (int g = warp; g < group; g += int(blockDim.x) / 32) {
    const float* head = parts + int64_t(g) * splits * kStride;
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int s = lane + 32 * i;
      m[i] = s < used ? __ldcg(head + s * kStride) : -INFINITY;
      l[i] = s < used ? __ldcg(head + s * kStride + 1) : 0.0f;
    }
    float mm = fmaxf(m[0], m[1]);
    for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
    float ll = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float w = m[i] == -INFINITY ? 0.0f : __expf(m[i] - mm);
      if (lane + 32 * i < used) weight[g][lane + 32 * i] = w;
      ll = fmaf(l[i], w, ll);
    }
    for (int o = 16; o > 0; o >>= 1) ll += __shfl_xor_sync(0xffffffffu, ll, o);
    if (lane == 0) sum_l[g] = ll;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * HD / 4; i += blockDim.x) {
    const int g = i / (HD / 4), e = 4 * (i % (HD / 4));
    const float4* head =
        reinterpret_cast<const float4*>(parts + int64_t(g) * splits * kStride + kAttentionPartialHeader + e);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = 0; s < used; ++s) {
      const float4 p = __ldcg(head + s * (kStride / 4));
      const float w = weight[g][s];
      v.x = fmaf(p.x, w, v.x), v.y = fmaf(p.y, w, v.y), v.z = fmaf(p.z, w, v.z), v.w = fmaf(p.w, w, v.w);
    }
    const float l = sum_l[g];
    staging[g * HD + e] = v.x / l;
    staging[g * HD + e + 1] = v.y / l;
    staging[g * HD + e + 2] = v.z / l;
    staging[g * HD + e + 3] = v.w / l;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
    const int g = i / HD, e = i % HD;
    const float o = staging[i];
    const int h = kvh * group + g;
    a.out[int64_t(t) * a.ldo + h * HD + e] = o;
    if (a.out_q.q)
      quantize_block_warp(o, a.out_q, t, int64_t(a.n_heads) * HD, (int64_t(h) * HD + e) / kActivationBlock);
    if (a.narrow_x)
      write_narrow_x_warp(o, lane, (int64_t(h) * HD + e) / kActivationBlock, a.narrow_row0 + t,
                          a.narrow_n8, int64_t(a.n_heads) * HD / kActivationBlock, a.narrow_x);
  }
}

// The head RMSNorm and RoPE of pass 1 with AttentionArgs::rope, on one
// lane's 8 elements x of a head (elements sub*8 .. sub*8+7; the head's
// HD/8 lanes are consecutive lanes of the warp, and every lane of the warp
// takes part: the sums and the NeoX partners are shuffles). norm: the
// head_dim weights, null for none; sn, cs: sin and cos of each pair's angle
// (shared memory). The same expressions as kernel_head_rmsnorm and
// kernel_rope_qk_kv_write; the sum of squares goes in another order.
template <int HD>
__device__ __forceinline__ void norm_rope_lane(float (&x)[kAttentionLaneElements], int sub, const float* norm,
                                               float eps, const float* sn, const float* cs, bool neox) {
  constexpr int VEC = kAttentionLaneElements, kLanes = HD / VEC;
  if (norm) {  // the same for the whole warp (q_norm and k_norm come together)
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) ss = fmaf(x[e], x[e], ss);
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / float(HD) + eps);
#pragma unroll
    for (int e = 0; e < VEC; ++e) x[e] = x[e] * inv * norm[sub * VEC + e];
  }
  if (neox) {  // pairs (i, i + HD/2): the partner is in lane sub ^ kLanes/2
    const bool first = sub < kLanes / 2;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float p = __shfl_xor_sync(0xffffffffu, x[e], kLanes / 2);
      const int i = (sub * VEC + e) % (HD / 2);
      x[e] = first ? x[e] * cs[i] - p * sn[i] : p * sn[i] + x[e] * cs[i];
    }
  } else {  // pairs (2i, 2i+1): both in the lane
#pragma unroll
    for (int m = 0; m < VEC / 2; ++m) {
      const int i = sub * (VEC / 2) + m;
      const float a = x[2 * m], b = x[2 * m + 1];
      x[2 * m] = a * cs[i] - b * sn[i];
      x[2 * m + 1] = a * sn[i] + b * cs[i];
    }
  }
}

// kRope's preparation after the wait (kernel_attention_partial, and the
// tensor-core pass 1 of attention_sm80.cu): the first `active` warps, a lane
// group of HD/8 lanes an item, norm and rotate the block's `group` q heads
// into q_ready (scaled), and where the piece holds the token's own position
// (holds_own, the same for the whole block) make its k and v and store them
// in the cache. Every lane of those warps takes part (the shuffles); the
// caller's barrier over them follows.
template <int HD, int G, class Reader>
__device__ __forceinline__ void rope_items(const AttentionArgs& a, const Reader& cache, int t,
                                           int kvh, int group, bool holds_own, int active,
                                           const float* rope_sin, const float* rope_cos,
                                           float (&q_ready)[G][HD]) {
  constexpr int VEC = kAttentionLaneElements, kLanes = HD / VEC, kSlots = 32 / kLanes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % kLanes, lane_slot = lane / kLanes;
  const int kv_dim = a.n_kv_heads * HD;
  const int items = group + (holds_own ? 1 : 0);
  for (int i0 = 0; i0 < items; i0 += active * kSlots) {
    const int item = i0 + warp * kSlots + lane_slot;
    const bool is_k = holds_own && item == group;  // other pieces must not store
    const float* src = is_k ? a.rope.k + int64_t(t) * a.rope.ldkv + int64_t(kvh) * HD
                            : a.q + int64_t(t) * a.ldq + int64_t(kvh * group + item) * HD;
    float x[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) x[e] = item < items ? src[sub * VEC + e] : 0.0f;
    norm_rope_lane<HD>(x, sub, is_k ? a.rope.k_norm : a.rope.q_norm, a.rope.eps, rope_sin, rope_cos,
                       a.rope.neox);
    if (item < group) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) q_ready[item][sub * VEC + e] = x[e] * a.scale;
    } else if (is_k) {
      const float* vsrc = a.rope.v + int64_t(t) * a.rope.ldkv + int64_t(kvh) * HD + sub * VEC;
      float vf[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) vf[e] = vsrc[e];
      cache.store(int64_t(a.rope.slots[t]) * kv_dim + int64_t(kvh) * HD + sub * VEC,
                  Reader::pack(x, vf));
    }
  }
}

// The online softmax of the tensor-core pass 1s (attention_sm80.cu,
// attention_wmma.cu), a cache block at a time; a head's 16 scores are
// spread over 4 consecutive lanes, `top` the maximum of a lane's share. m
// is a reference, not always the running maximum: the sums are rescaled
// only when a head's maximum passes it by more than kRescaleSlack (every
// lane of the warp then takes part, the other heads' with a correction of
// 1). The weights exp(s - m) stay below e^kRescaleSlack, well inside
// FP16's range; the sums and the merges after the loop only need the sums
// and l relative to the same m. Returns whether the warp rescales (the same
// for every lane), with m, l and `correction` (for the sums) updated then;
// m = -inf (no block yet) always grows.
inline constexpr float kRescaleSlack = 8.0f;  // natural-log units: weights up to e^8 ~ 2981
__device__ __forceinline__ bool rescale_reference(float top, float& m, float& l,
                                                  float& correction) {
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
  const bool grow = top > m + kRescaleSlack;
  if (!__any_sync(0xffffffffu, grow)) return false;
  correction = grow ? __expf(m - top) : 1.0f;
  if (grow) m = top;
  l *= correction;
  return true;
}

// The end of pass 1 for both kernels (kernel_attention_partial and the
// tensor-core pass 1 of attention_sm80.cu): each warp's (m, l, acc) of the
// block's `group` heads are in sm_m, sm_l and sm_acc. Merges them, writes
// the piece's partial, and with AttentionArgs::arrivals the block that
// counts last combines the pieces of its (token, KV head), with `scratch`
// (combine_pieces).
template <int HD, int G, int W = kAttentionWarps>
__device__ __forceinline__ void finish_piece(const AttentionArgs& a, int t, int kvh, int split,
                                             int group, const float (&sm_m)[W][G],
                                             const float (&sm_l)[W][G], float (&sm_acc)[W][G][HD],
                                             CombineScratch& scratch) {
  __syncthreads();
  const int splits = gridDim.z;
  // Threads spread over (group head, element) pairs to finish the merge.
  for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
    const int g = i / HD, e = i % HD;
    float mm = -INFINITY;
    for (int w = 0; w < W; ++w) mm = fmaxf(mm, sm_m[w][g]);
    float ll = 0.0f, aa = 0.0f;
    for (int w = 0; w < W; ++w) {
      const float c = sm_m[w][g] == -INFINITY ? 0.0f : __expf(sm_m[w][g] - mm);
      ll += sm_l[w][g] * c;
      aa += sm_acc[w][g][e] * c;
    }
    const int head = kvh * group + g;
    float* part = a.partials + ((int64_t(t) * a.n_heads + head) * splits + split) *
                                   (kAttentionPartialHeader + HD);
    part[kAttentionPartialHeader + e] = aa;
    if (e == 0) part[0] = mm, part[1] = ll;
  }
  if (!a.arrivals) return;
  // Counted once every thread's partial is visible device-wide; the block
  // that counts last combines, and leaves the counter zero for the next launch.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    // atomicInc wraps to 0 as the last piece counts in.
    last = atomicInc(a.arrivals + int64_t(t) * a.n_kv_heads + kvh, unsigned(splits) - 1) ==
           unsigned(splits) - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  combine_pieces<HD>(a, t, kvh, group, splits, &sm_acc[0][0][0], scratch);
}

// A cache reader gives pass 1 one lane's 8 elements of a position's K and V
// rows, in two steps so that several positions' loads are in flight before
// the first is used:
//   struct Rows;  the raw loads in registers; Rows{} stands for a masked
//                 position (decodes to finite values)
//   Rows load(int64_t head_row, int64_t at) const;
//                 head_row = slot * n_kv_heads + kv head (per-row data such
//                 as a scale), at = slot * kv_dim + kv head * head_dim + the
//                 lane's first element
//   Rows load_fresh(int64_t head_row, int64_t at) const;
//                 the same through L2 only (__ldcg), for the token's own row
//                 after the wait (AttentionArgs::own_position_only)
//   static void decode(const Rows&, float (&k)[8], float (&v)[8],
//                      float& k_scale, float& v_scale);
//   static constexpr int kElementBytes;        bytes of one cached element
//   static constexpr bool kScalesShareLines;   per-slot data several slots share lines
// and, for AttentionArgs::rope (the fp16 cache only):
//   static Rows pack(const float (&k)[8], const float (&v)[8]);
//                 the rows as the cache holds them (rounded)
//   void store(int64_t at, const Rows&) const;
// The key is k_scale * k, the value v_scale * v: the scales multiply the dot
// product and the softmax weight, not every element (a reader without
// scales returns 1, which the compiler folds away).
//
// kRope (AttentionArgs::rope; own_position_only): q and the own k are the
// projections' raw rows. After the wait the warps that hold positions norm
// and rotate the block's `group` q heads, a lane group a head, into shared
// memory, and the piece that holds the own position makes its k and v and
// stores them in the cache; then the loop runs as without kRope, the own
// row loaded after the wait. Done in registers, lane by lane, q's
// preparation took 168 registers a thread against 128. Up to 4 heads a
// group the kernel is held to 128 registers (4 blocks an SM): at head_dim
// 128 it takes 127 on sm_90 and 128 with 8 bytes spilled on sm_70. A
// minimum of 0 blocks leaves ptxas its own choice: 122 on sm_90 and 128 on
// sm_70 for the kernel without kRope (a minimum of 1 gave it 147 in run 19).
template <int HD, int G, class Reader, bool kRope = false>
__global__ void __launch_bounds__(kAttentionWarps * 32, kRope && G <= 4 ? 4 : 0)
    kernel_attention_partial(AttentionArgs a, Reader cache) {
  // Before the wait: the step's inputs (positions, tables) and, with
  // own_position_only, the cache rows of the first pass but the token's own
  // (AttentionArgs). q, the own position's row and every later pass's rows
  // come after it.
  bool waited = !a.own_position_only;
  if (waited) wait_then_release_next();
  constexpr int VEC = kAttentionLaneElements;
  constexpr int kLanes = HD / VEC;                   // lanes per position
  constexpr int kSlots = 32 / kLanes;                // positions per warp step
  constexpr int kStride = kAttentionWarps * kSlots;  // positions per block step
  constexpr int U = 2;                               // block steps a pass
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % kLanes;  // this lane's 8 elements: sub*8 .. sub*8+7
  const int group = a.n_heads / a.n_kv_heads;
  const int pos = a.positions[t];
  const int per = piece_tokens(pos, gridDim.z, a.least_piece);
  const int begin = split * per;
  const int end = min(pos + 1, begin + per);
  const int kv_dim = a.n_kv_heads * HD;
  const int32_t* table = a.block_tables + int64_t(a.token_tables[t]) * a.table_stride;
  // kRope: the rotation angles (before the wait, a thread each; rope.h:
  // sincosf) and the prepared q (scaled).
  __shared__ float rope_sin[kRope ? HD / 2 : 1], rope_cos[kRope ? HD / 2 : 1];
  __shared__ float q_ready[kRope ? G : 1][kRope ? HD : 1];
  if constexpr (kRope) {
    for (int i = threadIdx.x; i < HD / 2; i += blockDim.x)
      sincosf(float(pos) * a.rope.inv_freq[i], &rope_sin[i], &rope_cos[i]);
    __syncthreads();
  }

  float q[G][VEC];
  float acc[G][VEC];
  float m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[g][e] = 0.0f;
  }
  auto load_q = [&] {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if constexpr (kRope) q[g][e] = g < group ? q_ready[g][sub * VEC + e] : 0.0f;
        else
          q[g][e] = g < group ? a.q[int64_t(t) * a.ldq + (kvh * group + g) * HD + sub * VEC + e] * a.scale
                              : 0.0f;
  };
  if (waited) load_q();
  // fresh: through L2 only (Reader::load_fresh), for the token's own row.
  auto load_row = [&](int p, bool fresh) {
    const int64_t slot = int64_t(table[p / kKvBlockTokens]) * kKvBlockTokens + p % kKvBlockTokens;
    const int64_t head_row = slot * a.n_kv_heads + kvh,
                  at = slot * kv_dim + int64_t(kvh) * HD + sub * VEC;
    return fresh ? cache.load_fresh(head_row, at) : cache.load(head_row, at);
  };

  // The loop bound is the same for every lane of the warp (the shuffles
  // below need all 32); positions past `end` are masked. Where the own
  // position comes in a later pass, its row is loaded through L2 too if it
  // shares cache lines with other slots or heads, which the loads before
  // the wait (this block's or another's on the SM) may have brought into
  // L1 before the row was written: rows under 128 bytes (fp16 heads under
  // 64, int8 under 128) and the int8 cache's per-slot scales.
  constexpr bool kSmallRows = Reader::kScalesShareLines || HD * Reader::kElementBytes < 128;
  // A pass of the loop takes U block steps. Its rows are loaded a pass
  // ahead: as row u of a pass is decoded, the load of row u of the next
  // pass (U block steps on) goes out into its registers, so the loads stay
  // in flight while the pass computes. Against U = 4 loaded at the top of
  // each pass and used in it: b32 +3.3%, 4,096 positions b1 +4.6%
  // (docs/PERFORMANCE-RUNS-18-20.md run 20). U = 4 a pass ahead took 151 registers.
  const int lane_slot = lane / kLanes;
  typename Reader::Rows rows[U];
  {
    const int p0 = begin + warp * kSlots + lane_slot;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + u * kStride;
      rows[u] = p < end && (waited || p != pos) ? load_row(p, kSmallRows && p == pos) : typename Reader::Rows{};
    }
  }
  for (int w0 = begin + warp * kSlots; w0 < end; w0 += U * kStride) {
    const int p0 = w0 + lane_slot;
    if (!waited) {  // the first loads are out
      wait_then_release_next();
      waited = true;
      if constexpr (kRope) {
        // The warps that hold positions (all those that get here) make the
        // items, a lane group each: q heads 0..group-1 into shared memory,
        // then, in the piece that holds the own position, its k and v into
        // the cache. Every lane takes part in the shuffles.
        const int active = min(kAttentionWarps, (end - begin + kSlots - 1) / kSlots);
        rope_items<HD>(a, cache, t, kvh, group, pos < end, active, rope_sin, rope_cos, q_ready);
        // Named barrier 1 over the active warps (the others never get here):
        // q_ready is written, and the own row's stores are performed for them.
        asm volatile("bar.sync 1, %0;" ::"r"(active * 32) : "memory");
      }
      load_q();
      // Through L2: a line of it may be in L1 from a neighbour's load above.
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (pos < end && p0 + u * kStride == pos) rows[u] = load_row(pos, true);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool valid = p0 + u * kStride < end;
      float kf[VEC], vf[VEC], k_scale, v_scale;
      Reader::decode(rows[u], kf, vf, k_scale, v_scale);
      const int next = p0 + (u + U) * kStride;
      if (w0 + U * kStride < end)  // the same for the warp
        rows[u] = next < end ? load_row(next, kSmallRows && next == pos) : typename Reader::Rows{};
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g >= group) break;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) s = fmaf(q[g][e], kf[e], s);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (!valid) continue;
        s *= k_scale;
        const float m_new = fmaxf(m[g], s);
        const float correction = __expf(m[g] - m_new);
        const float w = __expf(s - m_new);
        l[g] = l[g] * correction + w;
        const float wv = w * v_scale;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[g][e] = fmaf(acc[g][e], correction, wv * vf[e]);
        m[g] = m_new;
      }
    }
  }
  if (!waited) wait_then_release_next();  // no positions in this warp's slots
  // Merge the warp's position slots (lanes kLanes apart hold the same elements).
#pragma unroll
  for (int o = kLanes; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g >= group) break;
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mm = fmaxf(m[g], mo);
      const float c1 = m[g] == -INFINITY ? 0.0f : __expf(m[g] - mm);
      const float c2 = mo == -INFINITY ? 0.0f : __expf(mo - mm);
      l[g] = l[g] * c1 + lo * c2;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[g][e], o);
        acc[g][e] = acc[g][e] * c1 + ao * c2;
      }
      m[g] = mm;
    }
  }

  // Merge the warps: each writes its (m, l, acc) to shared memory, warp 0 combines.
  __shared__ float sm_m[kAttentionWarps][G], sm_l[kAttentionWarps][G];
  __shared__ float sm_acc[kAttentionWarps][G][HD];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= group) break;
    if (lane == 0) sm_m[warp][g] = m[g], sm_l[warp][g] = l[g];
    if (lane < kLanes) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) sm_acc[warp][g][sub * VEC + e] = acc[g][e];
    }
  }
  finish_piece<HD, G>(a, t, kvh, split, group, sm_m, sm_l, sm_acc, static_combine_scratch());
}

// Pass 2 (attention.cu): out = sum_s acc_s e^(m_s - m) / sum_s l_s e^(m_s - m)
// over the pieces that hold positions, quantized into args.out_q when set.
void launch_attention_combine(const AttentionArgs& args, int splits, cudaStream_t stream);

// Blocks of pass 1 the device runs at once (one wave): SMs x resident
// blocks per SM, for this instance (registers differ per cache reader and
// head size). Computed once per process: one process serves one GPU.
template <int HD, int G, class Reader, bool kRope = false>
int attention_wave_blocks() {
  static const int blocks = [] {
    int per_sm = 0;
    const int sms = device_sm_count();
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, kernel_attention_partial<HD, G, Reader, kRope>, kAttentionWarps * 32, 0));
    return sms * std::max(per_sm, 1);
  }();
  return blocks;
}

// Pieces per token of a launch: attention_splits(max_position), capped by
// max_splits and by one wave of blocks (n_tokens x n_kv_heads x pieces).
// Past one wave, more pieces only add blocks that each pay a block's fixed
// cost (loading q, the merges, writing a partial) while the SMs are full:
// 8 sequences of Llama-3-8B at 32 pieces were 2,048 blocks, ~5 waves of
// mostly empty or 16-position pieces, 49 us a layer (docs/PERFORMANCE.md,
// run 11).
// wave_blocks: the pass-1 kernel's blocks in one wave.
inline AttentionLaunchShape launch_shape(const AttentionArgs& a) {
  AttentionLaunchShape s;
  s.n_tokens = a.n_tokens;
  s.n_kv_heads = a.n_kv_heads;
  s.max_position = a.max_position;
  s.max_splits = a.max_splits;
  s.least_piece = a.least_piece;
  return s;
}
inline int attention_pieces_in_wave(const AttentionArgs& a, int wave_blocks) {
  return attention_pieces_in_wave(launch_shape(a), wave_blocks);
}
template <int HD, int G, class Reader, bool kRope = false>
int attention_pieces(const AttentionArgs& a) {
  return attention_pieces_in_wave(a, attention_wave_blocks<HD, G, Reader, kRope>());
}

// Calls fn(std::integral_constant<int, HD>) for the args' head_dim.
template <class Fn>
decltype(auto) with_head_dim(int head_dim, Fn&& fn) {
  switch (head_dim) {
    case 16:
      return fn(std::integral_constant<int, 16>{});
    case 32:
      return fn(std::integral_constant<int, 32>{});
    case 64:
      return fn(std::integral_constant<int, 64>{});
    case 128:
      return fn(std::integral_constant<int, 128>{});
    case 256:
      return fn(std::integral_constant<int, 256>{});
    default:
      VOLTAD_KERNEL_REQUIRE(false, "head_dim must be 16, 32, 64, 128 or 256");
      return fn(std::integral_constant<int, 128>{});  // not reached
  }
}

// Calls fn(HD, G) as std::integral_constants: the args' head_dim, and the
// smallest of 1, 2, 4, 8 that holds `group` query heads a KV head. Pass 1
// keeps q and the sums of G heads in registers: sized for 8 heads always,
// Llama-3-8B's 4 took 220 registers a thread, 2 blocks an SM, and so half
// the pieces a wave holds at batch 8 (docs/PERFORMANCE-RUNS-13-17.md run 16).
template <class Fn>
decltype(auto) with_head_dim_group(int head_dim, int group, Fn&& fn) {
  return with_head_dim(head_dim, [&](auto hd) {
    if (group <= 1) return fn(hd, std::integral_constant<int, 1>{});
    if (group <= 2) return fn(hd, std::integral_constant<int, 2>{});
    if (group <= 4) return fn(hd, std::integral_constant<int, 4>{});
    return fn(hd, std::integral_constant<int, 8>{});
  });
}

// The tensor-core pass 1s' instances (attention_sm80.cu, attention_wmma.cu:
// head_dim 64 or 128, with or without AttentionArgs::rope): calls
// fn(std::integral_constant<int, HD>, std::bool_constant<kRope>).
template <class Fn>
decltype(auto) with_tensor_core_instance(const AttentionArgs& a, Fn&& fn) {
  auto rope = [&](auto hd) {
    return a.rope.inv_freq ? fn(hd, std::true_type{}) : fn(hd, std::false_type{});
  };
  return a.head_dim == 64 ? rope(std::integral_constant<int, 64>{})
                          : rope(std::integral_constant<int, 128>{});
}

// What both pass-1 kernels require of the args (rope: AttentionArgs::rope
// is set).
inline void check_attention_args(const AttentionArgs& a, bool rope) {
  VOLTAD_KERNEL_REQUIRE(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0,
                        "heads must divide into KV heads");
  VOLTAD_KERNEL_REQUIRE(a.n_heads / a.n_kv_heads <= kAttentionMaxGroup,
                        "at most 8 query heads per KV head");
  VOLTAD_KERNEL_REQUIRE(a.least_piece >= 0 && a.least_piece % kKvBlockTokens == 0,
                        "the least piece is whole cache blocks (a multiple of 16 positions)");
  VOLTAD_KERNEL_REQUIRE(!a.out_q.q || a.head_dim % kActivationBlock == 0,
                        "a quantized attention output needs head_dim % 32 == 0");
  VOLTAD_KERNEL_REQUIRE(!a.narrow_x || a.head_dim % kActivationBlock == 0,
                        "an attention output in the narrow GEMM's layout needs head_dim % 32 == 0");
  VOLTAD_KERNEL_REQUIRE(!a.arrivals || reinterpret_cast<uintptr_t>(a.partials) % 16 == 0,
                        "the combine in pass 1 reads the partials as float4: 16-byte aligned");
  VOLTAD_KERNEL_REQUIRE(!rope || (a.own_position_only && a.rope.k && a.rope.v && a.rope.slots),
                        "RoPE in the attention needs own_position_only, the own k and v rows and their slots");
  VOLTAD_KERNEL_REQUIRE(!a.rope.q_norm == !a.rope.k_norm, "RoPE in the attention: q_norm and k_norm together");
}

// Both passes over the cache that `cache` reads. kRope: AttentionArgs::rope
// is set (the reader can store rows).
template <bool kRope, class Reader>
void launch_attention_split_k(const AttentionArgs& a, Reader cache, cudaStream_t stream) {
  if (a.n_tokens == 0) return;
  check_attention_args(a, kRope);
  const int splits = with_head_dim_group(a.head_dim, a.n_heads / a.n_kv_heads, [&](auto hd, auto g) {
    constexpr int HD = decltype(hd)::value, G = decltype(g)::value;
    const int pieces = attention_pieces<HD, G, Reader, kRope>(a);
    const dim3 grid(unsigned(a.n_tokens), unsigned(a.n_kv_heads), unsigned(pieces));
    launch_kernel(kernel_attention_partial<HD, G, Reader, kRope>, grid, kAttentionWarps * 32, 0, stream, a,
                  cache);
    return pieces;
  });
  CUDA_CHECK(cudaGetLastError());
  if (!a.arrivals) launch_attention_combine(a, splits, stream);
}

}  // namespace voltad::kernels
