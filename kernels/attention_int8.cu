// INT8 KV cache: the per-head quantizing KV write, and paged attention over
// it. Contract in attention_int8.h.
//
// The attention has the structure of kernels/attention.cu (split-K over
// pieces (kernels/attention_common.cuh), GQA: one block per token, KV
// head and piece, 4 warps walking positions warp, warp+4, ..., a lane holding
// head_dim/32 elements of every query head of the group); what differs is
// the row read: VEC int8 values per lane (1 to 8 bytes) plus the row's fp16
// scale (one address for the whole warp), so a position costs head_dim bytes
// of K and of V instead of 2*head_dim. The scale multiplies the dot product
// (K) and the softmax weight (V), not every element.
#include <cuda_fp16.h>

#include "kernels/attention_int8.h"
#include "kernels/attention_common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"

namespace voltad::kernels {

namespace {

constexpr int kWarps = 4;

// One warp per (token, KV head): amax over the head, then the int8 values.
__global__ void kernel_kv_write_int8(const float* __restrict__ k, const float* __restrict__ v,
                                     int64_t ld, int n_kv_heads, int head_dim,
                                     const int32_t* __restrict__ slots, KvInt8LayerView c) {
  const int t = blockIdx.x, lane = threadIdx.x & 31;
  const int64_t slot = slots[t];
  const int kv_dim = n_kv_heads * head_dim;
  for (int h = threadIdx.x >> 5; h < n_kv_heads; h += blockDim.x >> 5) {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const float* src = (which == 0 ? k : v) + int64_t(t) * ld + h * head_dim;
      int8_t* dst = (which == 0 ? c.k : c.v) + slot * kv_dim + h * head_dim;
      uint16_t* scale = (which == 0 ? c.k_scale : c.v_scale) + slot * n_kv_heads + h;
      float amax = 0.0f;
      bool finite = true;
      for (int e = lane; e < head_dim; e += 32) {
        const float x = src[e];
        amax = fmaxf(amax, fabsf(x));
        finite = finite && isfinite(x);
      }
      amax = warp_max(amax);
      finite = __all_sync(kFullMask, finite);
      const __half d16 = __float2half_rn(finite ? amax / 127.0f : __int_as_float(0x7fc00000));
      const float d = __half2float(d16);
      for (int e = lane; e < head_dim; e += 32) {
        const int q = d > 0.0f ? __float2int_rn(src[e] / d) : 0;
        dst[e] = int8_t(max(-127, min(127, q)));
      }
      if (lane == 0) *scale = __half_as_ushort(d16);
    }
  }
}

// VEC consecutive int8 values as floats (VEC = 1, 2, 4, 8; p aligned to VEC).
template <int VEC>
__device__ __forceinline__ void load_int8(const int8_t* p, float (&out)[VEC]) {
  if constexpr (VEC == 1) {
    out[0] = float(*p);
  } else if constexpr (VEC == 2) {
    const char2 c = *reinterpret_cast<const char2*>(p);
    out[0] = float(c.x), out[1] = float(c.y);
  } else if constexpr (VEC == 4) {
    const char4 c = *reinterpret_cast<const char4*>(p);
    out[0] = float(c.x), out[1] = float(c.y), out[2] = float(c.z), out[3] = float(c.w);
  } else {
    const int2 w = *reinterpret_cast<const int2*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = float(int8_t(w.x >> (8 * i)));
      out[4 + i] = float(int8_t(w.y >> (8 * i)));
    }
  }
}

template <int VEC>
__global__ void __launch_bounds__(kWarps * 32)
    kernel_attention_int8_partial(AttentionArgs a, KvInt8LayerView c) {
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = a.n_heads / a.n_kv_heads;
  const int pos = a.positions[t];
  const int per = split_tokens(pos, gridDim.z);
  const int begin = split * per;
  const int end = min(pos + 1, begin + per);
  const int kv_dim = a.n_kv_heads * a.head_dim;
  const int32_t* table = a.block_tables + int64_t(a.token_tables[t]) * a.table_stride;
  const bool active = lane * VEC < a.head_dim;  // head_dim 16: half the lanes idle

  float q[kAttentionMaxGroup][VEC], acc[kAttentionMaxGroup][VEC];
  float m[kAttentionMaxGroup], l[kAttentionMaxGroup];
#pragma unroll
  for (int g = 0; g < kAttentionMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      acc[g][e] = 0.0f;
      q[g][e] =
          g < group && active
              ? a.q[int64_t(t) * a.ldq + (kvh * group + g) * a.head_dim + lane * VEC + e] * a.scale
              : 0.0f;
    }
  }

  for (int p = begin + warp; p < end; p += kWarps) {
    const int64_t slot = int64_t(table[p / kKvBlockTokens]) * kKvBlockTokens + p % kKvBlockTokens;
    const int64_t at = slot * kv_dim + int64_t(kvh) * a.head_dim + lane * VEC;
    const float dk = __half2float(__ushort_as_half(c.k_scale[slot * a.n_kv_heads + kvh]));
    const float dv = __half2float(__ushort_as_half(c.v_scale[slot * a.n_kv_heads + kvh]));
    float kf[VEC], vf[VEC];
    if (active) {
      load_int8<VEC>(c.k + at, kf);
      load_int8<VEC>(c.v + at, vf);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) kf[e] = vf[e] = 0.0f;
    }
#pragma unroll
    for (int g = 0; g < kAttentionMaxGroup; ++g) {
      if (g >= group) break;
      float s = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += q[g][e] * kf[e];
      s = warp_sum(s) * dk;
      const float m_new = fmaxf(m[g], s);
      const float correction = __expf(m[g] - m_new);
      const float w = __expf(s - m_new);
      l[g] = l[g] * correction + w;
      const float wv = w * dv;
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[g][e] = acc[g][e] * correction + wv * vf[e];
      m[g] = m_new;
    }
  }

  // The four warps' (m, l, acc) meet in shared memory; threads spread over
  // (head of the group, element) finish the merge and write the partial
  // {m, l, acc[head_dim]} of this split.
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
  const int splits = gridDim.z;
  for (int i = threadIdx.x; i < group * a.head_dim; i += blockDim.x) {
    const int g = i / a.head_dim, e = i % a.head_dim;
    float mm = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, sm_m[w][g]);
    float ll = 0.0f, aa = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = sm_m[w][g] == -INFINITY ? 0.0f : __expf(sm_m[w][g] - mm);
      ll += sm_l[w][g] * f;
      aa += sm_acc[w][g][e] * f;
    }
    float* part = a.partials +
                  ((int64_t(t) * a.n_heads + kvh * group + g) * splits + split) * (a.head_dim + 2);
    part[2 + e] = aa;
    if (e == 0) part[0] = mm, part[1] = ll;
  }
}

// Pass 2: out = sum_s acc_s e^(m_s - m) / sum_s l_s e^(m_s - m).
__global__ void kernel_attention_int8_combine(AttentionArgs a, int splits) {
  const int t = blockIdx.x, head = blockIdx.y;
  const int stride = a.head_dim + 2;
  const float* parts = a.partials + (int64_t(t) * a.n_heads + head) * splits * stride;
  const int used = min(splits, a.positions[t] / split_tokens(a.positions[t], splits) + 1);
  float mm = -INFINITY;
  for (int s = 0; s < used; ++s) mm = fmaxf(mm, parts[s * stride]);
  float ll = 0.0f;
  for (int s = 0; s < used; ++s)
    if (parts[s * stride] != -INFINITY)
      ll += parts[s * stride + 1] * __expf(parts[s * stride] - mm);
  const float inv = 1.0f / ll;
  for (int e = threadIdx.x; e < a.head_dim; e += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < used; ++s)
      if (parts[s * stride] != -INFINITY)
        o += parts[s * stride + 2 + e] * __expf(parts[s * stride] - mm);
    a.out[int64_t(t) * a.ldo + head * a.head_dim + e] = o * inv;
  }
}

}  // namespace

void launch_kv_write_int8(const float* k, const float* v, int64_t ld, int n_tokens, int n_kv_heads,
                          int head_dim, const int32_t* slots, KvInt8LayerView cache,
                          cudaStream_t stream) {
  if (n_tokens == 0) return;
  VOLTAD_KERNEL_REQUIRE(n_kv_heads > 0 && head_dim > 0, "kv_write_int8: heads and head_dim");
  const int warps = n_kv_heads < 8 ? n_kv_heads : 8;
  kernel_kv_write_int8<<<n_tokens, warps * 32, 0, stream>>>(k, v, ld, n_kv_heads, head_dim, slots,
                                                            cache);
  CUDA_CHECK(cudaGetLastError());
}

void launch_attention_int8(const AttentionArgs& a, KvInt8LayerView cache, cudaStream_t stream) {
  if (a.n_tokens == 0) return;
  VOLTAD_KERNEL_REQUIRE(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0,
                        "heads must divide into KV heads");
  VOLTAD_KERNEL_REQUIRE(a.n_heads / a.n_kv_heads <= kAttentionMaxGroup,
                        "at most 8 query heads per KV head");
  const int splits = attention_splits(a.max_position);
  const dim3 grid(unsigned(a.n_tokens), unsigned(a.n_kv_heads), unsigned(splits));
  switch (a.head_dim) {
    case 16:
    case 32:
      kernel_attention_int8_partial<1><<<grid, kWarps * 32, 0, stream>>>(a, cache);
      break;
    case 64:
      kernel_attention_int8_partial<2><<<grid, kWarps * 32, 0, stream>>>(a, cache);
      break;
    case 128:
      kernel_attention_int8_partial<4><<<grid, kWarps * 32, 0, stream>>>(a, cache);
      break;
    case 256:
      kernel_attention_int8_partial<8><<<grid, kWarps * 32, 0, stream>>>(a, cache);
      break;
    default:
      VOLTAD_KERNEL_REQUIRE(false, "head_dim must be 16, 32, 64, 128 or 256");
  }
  CUDA_CHECK(cudaGetLastError());
  kernel_attention_int8_combine<<<dim3(unsigned(a.n_tokens), unsigned(a.n_heads)), 64, 0, stream>>>(
      a, splits);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
