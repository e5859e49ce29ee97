// Paged attention with split-K. See attention.h for the contract.
//
// Pass 1, kernel_attention_partial: grid (tokens, kv heads, splits), 4 warps.
// head_dim/8 lanes share a position (8 elements each, one 16-byte load of K
// and of V), so a warp covers 32/(head_dim/8) positions per step, with 4 steps'
// loads in flight. A lane holds its 8 elements of each query head of the
// group, so a key row is read once for every head that shares it. Each lane
// group keeps an online softmax (running max m, sum l, weighted V sum); the
// groups merge through shuffles, the four warps through shared memory, and
// one partial per (token, head, split) is written: {m, l, acc[head_dim]}.
// Pass 2, kernel_attention_combine: rescales the partials by exp(m_i - m)
// and divides by the total sum.
#include <cuda_fp16.h>

#include "kernels/attention.h"
#include "kernels/attention_common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/quantize_warp.cuh"

namespace voltad::kernels {

namespace {

constexpr int kWarps = 4;


__global__ void kernel_kv_write(const float* __restrict__ k, const float* __restrict__ v, int64_t ld,
                                int kv_dim, const int32_t* __restrict__ slots, __half* __restrict__ kc,
                                __half* __restrict__ vc) {
  const int t = blockIdx.x;
  const int64_t slot = slots[t];
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    kc[slot * kv_dim + i] = __float2half_rn(k[t * ld + i]);
    vc[slot * kv_dim + i] = __float2half_rn(v[t * ld + i]);
  }
}

// HD = head_dim. A position's key and value rows are spread over LANES =
// HD/8 lanes, 8 halves (one 16-byte load) each, so a warp works on 32/LANES
// positions at once, and each lane keeps U positions' loads in flight: decode
// is a chain of dependent memory latencies otherwise (one position per warp
// step measured 52 us for 256 positions on the H200; docs/KERNEL-NOTES.md).
template <int HD>
__global__ void __launch_bounds__(kWarps * 32)
    kernel_attention_partial(AttentionArgs a) {
  constexpr int kLanes = HD / 8;            // lanes per position
  constexpr int kSlots = 32 / kLanes;       // positions per warp step
  constexpr int kStride = kWarps * kSlots;  // positions per block step
  constexpr int U = 4;                      // block steps in flight
  constexpr int VEC = 8;
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % kLanes;  // this lane's 8 elements: sub*8 .. sub*8+7
  const int group = a.n_heads / a.n_kv_heads;
  const int pos = a.positions[t];
  const int per = split_tokens(pos, gridDim.z);
  const int begin = split * per;
  const int end = min(pos + 1, begin + per);
  const int kv_dim = a.n_kv_heads * HD;
  const int32_t* table = a.block_tables + int64_t(a.token_tables[t]) * a.table_stride;

  float q[kAttentionMaxGroup][VEC];
  float acc[kAttentionMaxGroup][VEC];
  float m[kAttentionMaxGroup], l[kAttentionMaxGroup];
#pragma unroll
  for (int g = 0; g < kAttentionMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      acc[g][e] = 0.0f;
      q[g][e] = g < group ? a.q[int64_t(t) * a.ldq + (kvh * group + g) * HD + sub * VEC + e] * a.scale : 0.0f;
    }
  }

  const __half* kc = reinterpret_cast<const __half*>(a.cache.k);
  const __half* vc = reinterpret_cast<const __half*>(a.cache.v);
  // The loop bound is the same for every lane of the warp (the shuffles
  // below need all 32); positions past `end` are masked.
  const int lane_slot = lane / kLanes;
  for (int w0 = begin + warp * kSlots; w0 < end; w0 += U * kStride) {
    const int p0 = w0 + lane_slot;
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + u * kStride;
      if (p < end) {
        const int64_t row = (int64_t(table[p / kKvBlockTokens]) * kKvBlockTokens + p % kKvBlockTokens) * kv_dim +
                            int64_t(kvh) * HD + sub * VEC;
        kr[u] = *reinterpret_cast<const uint4*>(kc + row);
        vr[u] = *reinterpret_cast<const uint4*>(vc + row);
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool valid = p0 + u * kStride < end;
      float kf[VEC], vf[VEC];
      const __half2* kh = reinterpret_cast<const __half2*>(&kr[u]);
      const __half2* vh = reinterpret_cast<const __half2*>(&vr[u]);
#pragma unroll
      for (int e = 0; e < VEC / 2; ++e) {
        const float2 kk = __half22float2(kh[e]), vv = __half22float2(vh[e]);
        kf[2 * e] = kk.x, kf[2 * e + 1] = kk.y;
        vf[2 * e] = vv.x, vf[2 * e + 1] = vv.y;
      }
#pragma unroll
      for (int g = 0; g < kAttentionMaxGroup; ++g) {
        if (g >= group) break;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) s = fmaf(q[g][e], kf[e], s);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (!valid) continue;
        const float m_new = fmaxf(m[g], s);
        const float correction = __expf(m[g] - m_new);
        const float w = __expf(s - m_new);
        l[g] = l[g] * correction + w;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[g][e] = fmaf(acc[g][e], correction, w * vf[e]);
        m[g] = m_new;
      }
    }
  }
  // Merge the warp's position slots (lanes kLanes apart hold the same elements).
#pragma unroll
  for (int o = kLanes; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < kAttentionMaxGroup; ++g) {
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
  __shared__ float sm_m[kWarps][kAttentionMaxGroup], sm_l[kWarps][kAttentionMaxGroup];
  __shared__ float sm_acc[kWarps][kAttentionMaxGroup][HD];
#pragma unroll
  for (int g = 0; g < kAttentionMaxGroup; ++g) {
    if (g >= group) break;
    if (lane == 0) sm_m[warp][g] = m[g], sm_l[warp][g] = l[g];
    if (lane < kLanes) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) sm_acc[warp][g][sub * VEC + e] = acc[g][e];
    }
  }
  __syncthreads();
  const int splits = gridDim.z;
  // Threads spread over (group head, element) pairs to finish the merge.
  for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
    const int g = i / HD, e = i % HD;
    float mm = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, sm_m[w][g]);
    float ll = 0.0f, aa = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float c = sm_m[w][g] == -INFINITY ? 0.0f : __expf(sm_m[w][g] - mm);
      ll += sm_l[w][g] * c;
      aa += sm_acc[w][g][e] * c;
    }
    const int head = kvh * group + g;
    float* part = a.partials + ((int64_t(t) * a.n_heads + head) * splits + split) * (HD + 2);
    part[2 + e] = aa;
    if (e == 0) part[0] = mm, part[1] = ll;
  }
}

__global__ void kernel_attention_combine(AttentionArgs a, int splits) {
  __shared__ float weight[kAttentionMaxSplits];  // exp(m_s - max m) of each piece
  const int t = blockIdx.x, head = blockIdx.y;
  const int stride = a.head_dim + 2;
  const float* parts = a.partials + (int64_t(t) * a.n_heads + head) * splits * stride;
  const int used = min(splits, a.positions[t] / split_tokens(a.positions[t], splits) + 1);
  float mm = -INFINITY;
  for (int s = 0; s < used; ++s) mm = fmaxf(mm, parts[s * stride]);
  for (int s = threadIdx.x; s < used; s += blockDim.x) {
    const float m = parts[s * stride];
    weight[s] = m == -INFINITY ? 0.0f : __expf(m - mm);
  }
  __syncthreads();
  float ll = 0.0f;
  for (int s = 0; s < used; ++s) ll += parts[s * stride + 1] * weight[s];
  for (int e = threadIdx.x; e < a.head_dim; e += blockDim.x) {
    float v = 0.0f;
#pragma unroll 8
    for (int s = 0; s < used; ++s) v += parts[s * stride + 2 + e] * weight[s];
    const float o = v / ll;
    a.out[int64_t(t) * a.ldo + head * a.head_dim + e] = o;
    // With out_q the block has head_dim threads: one pass, whole warps.
    if (a.out_q.q)
      quantize_block_warp(o, a.out_q, t, int64_t(a.n_heads) * a.head_dim,
                          (int64_t(head) * a.head_dim + e) / kActivationBlock);
  }
}

}  // namespace

void launch_kv_write(const float* k, const float* v, int64_t ld, int n_tokens, int kv_dim,
                     const int32_t* slots, KvLayerView cache, cudaStream_t stream) {
  if (n_tokens == 0) return;
  kernel_kv_write<<<n_tokens, 128, 0, stream>>>(k, v, ld, kv_dim, slots, reinterpret_cast<__half*>(cache.k),
                                                reinterpret_cast<__half*>(cache.v));
  CUDA_CHECK(cudaGetLastError());
}

void launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.n_tokens == 0) return;
  VOLTAD_KERNEL_REQUIRE(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "heads must divide into KV heads");
  VOLTAD_KERNEL_REQUIRE(a.n_heads / a.n_kv_heads <= kAttentionMaxGroup, "at most 8 query heads per KV head");
  const int splits = attention_splits(a.max_position);
  dim3 grid(unsigned(a.n_tokens), unsigned(a.n_kv_heads), unsigned(splits));
  switch (a.head_dim) {
    case 16: kernel_attention_partial<16><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case 32: kernel_attention_partial<32><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case 64: kernel_attention_partial<64><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case 128: kernel_attention_partial<128><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case 256: kernel_attention_partial<256><<<grid, kWarps * 32, 0, stream>>>(a); break;
    default: VOLTAD_KERNEL_REQUIRE(false, "head_dim must be 16, 32, 64, 128 or 256");
  }
  CUDA_CHECK(cudaGetLastError());
  VOLTAD_KERNEL_REQUIRE(!a.out_q.q || a.head_dim % kActivationBlock == 0,
                        "a quantized attention output needs head_dim % 32 == 0");
  const int threads = a.head_dim < 32 ? 32 : a.head_dim;
  kernel_attention_combine<<<dim3(unsigned(a.n_tokens), unsigned(a.n_heads)), threads, 0, stream>>>(a, splits);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
