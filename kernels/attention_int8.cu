// INT8 KV cache: the per-head quantizing KV write, and paged attention over
// it. Contract in attention_int8.h.
//
// The attention is the split-K decode attention of kernels/attention_common.cuh
// (the fp16 cache's, same lanes, pieces, partials and combine pass, so the
// combine can also quantize the output for the next matvec); Int8KvReader
// is what differs: 8 int8 values (one 8-byte load) of K and of V per lane
// plus the row's two fp16 scales (one address for the lanes of a position),
// so a position costs head_dim bytes of K and of V instead of 2*head_dim.
#include <cuda_fp16.h>

#include "kernels/attention_common.cuh"
#include "kernels/attention_int8.h"
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"

namespace voltad::kernels {

namespace {

// One warp per (token, KV head): amax over the head, then the int8 values.
// k and v are written by the kernel just before: no __restrict__ (read-only
// loads may be moved above the PDL wait; device_common.cuh, load_activation).
__global__ void kernel_kv_write_int8(const float* k, const float* v, int64_t ld, int n_kv_heads,
                                     int head_dim, const int32_t* __restrict__ slots,
                                     KvInt8LayerView c) {
  wait_then_release_next();
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

// 8 int8 values as floats without I2F (a quarter of the FP32 rate or less,
// and the partial pass converts 2*head_dim values per position): flipping each byte's sign bit
// gives b + 128 in 0..255; as the low mantissa byte of 2^23 (bits 0x4B000000) that is the float
// 2^23 + b + 128, and subtracting 2^23 + 128 leaves b exactly. A byte
// permute and an add per value.
__device__ __forceinline__ void int8x8_to_float(uint2 w, float (&out)[8]) {
  const uint32_t lo = w.x ^ 0x80808080u, hi = w.y ^ 0x80808080u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Selector 0x744i: byte i of lo, then bytes 0, 0, 3 of 0x4B000000.
    out[i] = __uint_as_float(__byte_perm(lo, 0x4B000000u, 0x7440u + unsigned(i))) - 8388736.0f;
    out[4 + i] = __uint_as_float(__byte_perm(hi, 0x4B000000u, 0x7440u + unsigned(i))) - 8388736.0f;
  }
}

// The int8 cache as pass 1 reads it (attention_common.cuh): a lane's 8
// values of K and of V (8-byte loads: `at` is a multiple of 8) and the
// position's two scales.
struct Int8KvReader {
  // What a slot's row of one head shares its cache lines with
  // (kernel_attention_partial: the own row's loads).
  static constexpr int kElementBytes = 1;
  static constexpr bool kScalesShareLines = true;  // 2 bytes a slot and head
  const int8_t* k;
  const int8_t* v;
  const uint16_t* k_scale;
  const uint16_t* v_scale;
  struct Rows {
    uint2 k, v;
    uint16_t k_scale, v_scale;
  };
  __device__ __forceinline__ Rows load(int64_t head_row, int64_t at) const {
    return {*reinterpret_cast<const uint2*>(k + at), *reinterpret_cast<const uint2*>(v + at),
            k_scale[head_row], v_scale[head_row]};
  }
  // The token's own row and scales, written by the kernel just before: from
  // L2 (neighbouring slots' scales share a line that a load before the wait
  // may have brought into L1; kernel_attention_partial).
  __device__ __forceinline__ Rows load_fresh(int64_t head_row, int64_t at) const {
    return {__ldcg(reinterpret_cast<const uint2*>(k + at)),
            __ldcg(reinterpret_cast<const uint2*>(v + at)), __ldcg(k_scale + head_row),
            __ldcg(v_scale + head_row)};
  }
  __device__ __forceinline__ static void decode(const Rows& r, float (&kf)[8], float (&vf)[8],
                                                float& ks, float& vs) {
    int8x8_to_float(r.k, kf);
    int8x8_to_float(r.v, vf);
    ks = __half2float(__ushort_as_half(r.k_scale));
    vs = __half2float(__ushort_as_half(r.v_scale));
  }
};

}  // namespace

void launch_kv_write_int8(const float* k, const float* v, int64_t ld, int n_tokens, int n_kv_heads,
                          int head_dim, const int32_t* slots, KvInt8LayerView cache,
                          cudaStream_t stream) {
  if (n_tokens == 0) return;
  VOLTAD_KERNEL_REQUIRE(n_kv_heads > 0 && head_dim > 0, "kv_write_int8: heads and head_dim");
  const int warps = n_kv_heads < 8 ? n_kv_heads : 8;
  launch_kernel(kernel_kv_write_int8, n_tokens, warps * 32, 0, stream, k, v, ld, n_kv_heads,
                head_dim, slots, cache);
  CUDA_CHECK(cudaGetLastError());
}

void launch_attention_int8(const AttentionArgs& a, KvInt8LayerView cache, cudaStream_t stream) {
  VOLTAD_KERNEL_REQUIRE(!a.rope.inv_freq, "RoPE in the attention: the fp16 cache only");
  launch_attention_split_k<false>(a, Int8KvReader{cache.k, cache.v, cache.k_scale, cache.v_scale}, stream);
}

}  // namespace voltad::kernels
