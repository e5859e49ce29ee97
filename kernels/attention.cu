// Paged attention with split-K. See attention.h for the contract.
//
// Pass 1, kernel_attention_partial: grid (tokens, kv heads, splits), 4 warps.
// Each warp walks positions warp, warp+4, ... of its split; a lane holds
// head_dim/32 elements of each query head of the group, so a key row is read
// once (as half2 pairs) for every head that shares it. Each warp keeps an
// online softmax (running max m, sum l, weighted V sum); the four warps merge
// through shared memory and write one partial per (token, head, split):
// {m, l, acc[head_dim]}.
// Pass 2, kernel_attention_combine: rescales the partials by exp(m_i - m)
// and divides by the total sum.
#include <cuda_fp16.h>

#include "kernels/attention.h"
#include "kernels/cuda_check.h"

namespace voltad::kernels {

namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

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

// VEC = head_dim / 32 values per lane (1, 2, 4 or 8).
template <int VEC>
__global__ void __launch_bounds__(kWarps * 32)
    kernel_attention_partial(AttentionArgs a) {
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = a.n_heads / a.n_kv_heads;
  const int pos = a.positions[t];
  const int begin = split * kAttentionSplitTokens;
  const int end = min(pos + 1, begin + kAttentionSplitTokens);
  const int splits = gridDim.z;
  const int kv_dim = a.n_kv_heads * a.head_dim;
  const int32_t* table = a.block_tables + int64_t(a.token_tables[t]) * a.table_stride;
  // head_dim 16 leaves half the lanes idle (VEC = 1).
  const bool active = lane * VEC < a.head_dim;

  // This lane's slice of each query head: elements lane*VEC .. lane*VEC+VEC-1.
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
      q[g][e] = g < group && active ? a.q[int64_t(t) * a.ldq + (kvh * group + g) * a.head_dim + lane * VEC + e] * a.scale
                          : 0.0f;
    }
  }

  for (int p = begin + warp; p < end; p += kWarps) {
    const int64_t row = (int64_t(table[p / kKvBlockTokens]) * kKvBlockTokens + p % kKvBlockTokens) * kv_dim +
                        int64_t(kvh) * a.head_dim + lane * VEC;
    float kf[VEC], vf[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      kf[e] = active ? __half2float(reinterpret_cast<const __half*>(a.cache.k)[row + e]) : 0.0f;
      vf[e] = active ? __half2float(reinterpret_cast<const __half*>(a.cache.v)[row + e]) : 0.0f;
    }
#pragma unroll
    for (int g = 0; g < kAttentionMaxGroup; ++g) {
      if (g >= group) break;
      float s = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += q[g][e] * kf[e];
      s = warp_reduce_sum(s);
      const float m_new = fmaxf(m[g], s);
      const float correction = __expf(m[g] - m_new);
      const float w = __expf(s - m_new);
      l[g] = l[g] * correction + w;
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[g][e] = acc[g][e] * correction + w * vf[e];
      m[g] = m_new;
    }
  }

  // Merge the warps: each writes its (m, l, acc) to shared memory, warp 0 combines.
  __shared__ float sm_m[kWarps][kAttentionMaxGroup], sm_l[kWarps][kAttentionMaxGroup];
  __shared__ float sm_acc[kWarps][kAttentionMaxGroup][VEC * 32];
#pragma unroll
  for (int g = 0; g < kAttentionMaxGroup; ++g) {
    if (g >= group) break;
    if (lane == 0) sm_m[warp][g] = m[g], sm_l[warp][g] = l[g];
#pragma unroll
    for (int e = 0; e < VEC; ++e) sm_acc[warp][g][lane * VEC + e] = acc[g][e];
  }
  __syncthreads();
  // Threads spread over (group head, element) pairs to finish the merge.
  for (int i = threadIdx.x; i < group * a.head_dim; i += blockDim.x) {
    const int g = i / a.head_dim, e = i % a.head_dim;
    float mm = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, sm_m[w][g]);
    float ll = 0.0f, aa = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float c = sm_m[w][g] == -INFINITY ? 0.0f : __expf(sm_m[w][g] - mm);
      ll += sm_l[w][g] * c;
      aa += sm_acc[w][g][e] * c;
    }
    const int head = kvh * group + g;
    float* part = a.partials + ((int64_t(t) * a.n_heads + head) * splits + split) * (a.head_dim + 2);
    part[2 + e] = aa;
    if (e == 0) part[0] = mm, part[1] = ll;
  }
}

__global__ void kernel_attention_combine(AttentionArgs a, int splits) {
  const int t = blockIdx.x, head = blockIdx.y;
  const float* parts = a.partials + (int64_t(t) * a.n_heads + head) * splits * (a.head_dim + 2);
  const int used = min(splits, a.positions[t] / kAttentionSplitTokens + 1);
  float mm = -INFINITY;
  for (int s = 0; s < used; ++s) mm = fmaxf(mm, parts[s * (a.head_dim + 2)]);
  float ll = 0.0f;
  for (int s = 0; s < used; ++s) {
    const float* p = parts + s * (a.head_dim + 2);
    if (p[0] != -INFINITY) ll += p[1] * __expf(p[0] - mm);
  }
  for (int e = threadIdx.x; e < a.head_dim; e += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < used; ++s) {
      const float* p = parts + s * (a.head_dim + 2);
      if (p[0] != -INFINITY) v += p[2 + e] * __expf(p[0] - mm);
    }
    a.out[int64_t(t) * a.ldo + head * a.head_dim + e] = v / ll;
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
  const int splits = (a.max_position + kAttentionSplitTokens) / kAttentionSplitTokens;
  dim3 grid(unsigned(a.n_tokens), unsigned(a.n_kv_heads), unsigned(splits));
  switch (a.head_dim) {
    case 16:
    case 32: kernel_attention_partial<1><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case 64: kernel_attention_partial<2><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case 128: kernel_attention_partial<4><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case 256: kernel_attention_partial<8><<<grid, kWarps * 32, 0, stream>>>(a); break;
    default: VOLTAD_KERNEL_REQUIRE(false, "head_dim must be 16, 32, 64, 128 or 256");
  }
  CUDA_CHECK(cudaGetLastError());
  kernel_attention_combine<<<dim3(unsigned(a.n_tokens), unsigned(a.n_heads)), 64, 0, stream>>>(a, splits);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
