// The fp16 KV cache as both pass-1 kernels read it: the portable one
// (kernel_attention_partial of attention_common.cuh, launched from
// attention.cu) and the tensor-core one of attention_sm80.cu (sm_80+,
// AttentionArgs::tensor_cores), which attention.cu launches where it applies.
#pragma once

#include <cuda_fp16.h>

#include "kernels/attention.h"

namespace voltad::kernels {

// The fp16 cache as pass 1 reads it (attention_common.cuh): 8 halves, one
// 16-byte load, of K and of V per lane; no scales.
struct Fp16KvReader {
  static constexpr int kElementBytes = 2;  // see Int8KvReader
  static constexpr bool kScalesShareLines = false;
  const __half* k;
  const __half* v;
  struct Rows {
    uint4 k, v;
  };
  __device__ __forceinline__ Rows load(int64_t /*head_row*/, int64_t at) const {
    return {*reinterpret_cast<const uint4*>(k + at), *reinterpret_cast<const uint4*>(v + at)};
  }
  // The token's own row, written by the kernel just before: from L2 (the
  // line may be in L1 from a load before the wait; kernel_attention_partial).
  __device__ __forceinline__ Rows load_fresh(int64_t /*head_row*/, int64_t at) const {
    return {__ldcg(reinterpret_cast<const uint4*>(k + at)),
            __ldcg(reinterpret_cast<const uint4*>(v + at))};
  }
  __device__ __forceinline__ static void decode(const Rows& r, float (&kf)[8], float (&vf)[8],
                                                float& k_scale, float& v_scale) {
    const __half2* kh = reinterpret_cast<const __half2*>(&r.k);
    const __half2* vh = reinterpret_cast<const __half2*>(&r.v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 kk = __half22float2(kh[e]), vv = __half22float2(vh[e]);
      kf[2 * e] = kk.x, kf[2 * e + 1] = kk.y;
      vf[2 * e] = vv.x, vf[2 * e + 1] = vv.y;
    }
    k_scale = v_scale = 1.0f;
  }
  // AttentionArgs::rope: the own row, rounded as kernel_rope_qk_kv_write
  // rounds it, and its store (the reader's pointers are the cache's).
  __device__ __forceinline__ static Rows pack(const float (&kf)[8], const float (&vf)[8]) {
    Rows r;
    __half2* kh = reinterpret_cast<__half2*>(&r.k);
    __half2* vh = reinterpret_cast<__half2*>(&r.v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      kh[e] = __halves2half2(__float2half_rn(kf[2 * e]), __float2half_rn(kf[2 * e + 1]));
      vh[e] = __halves2half2(__float2half_rn(vf[2 * e]), __float2half_rn(vf[2 * e + 1]));
    }
    return r;
  }
  __device__ __forceinline__ void store(int64_t at, const Rows& r) const {
    *reinterpret_cast<uint4*>(const_cast<__half*>(k) + at) = r.k;
    *reinterpret_cast<uint4*>(const_cast<__half*>(v) + at) = r.v;
  }
};

// The tensor-core pass 1 (attention_sm80.cu) for these args: the fp16 cache
// through launch_attention, head_dim 64 or 128, and a device and build with
// sm_80+ code. launch_attention_mma launches it and, without
// AttentionArgs::arrivals, the combine; attention_mma_pieces is its
// attention_launch_pieces.
void launch_attention_mma(const AttentionArgs& args, const Fp16KvReader& cache,
                          cudaStream_t stream);
int attention_mma_pieces(const AttentionArgs& args);
int attention_mma_least_piece(const AttentionArgs& args);
int attention_mma_warps(const AttentionArgs& args);

// The wmma pass 1 (attention_wmma.cu; sm_70+, AttentionArgs::wmma): as
// above, where attention_wmma_applies and the sm_80+ one does not.
void launch_attention_wmma(const AttentionArgs& args, const Fp16KvReader& cache,
                           cudaStream_t stream);
int attention_wmma_pieces(const AttentionArgs& args);
int attention_wmma_least_piece(const AttentionArgs& args);
int attention_wmma_warps(const AttentionArgs& args);

}  // namespace voltad::kernels
