// The two-level activation quantizer of kernels/matvec.h done by one warp on
// one block of 32 values (lane i holds value i), for kernels that produce a
// matvec's input and can quantize it on the way out (RMSNorm, SwiGLU, the
// attention combine) instead of a separate launch. Same IEEE operations as
// kernel_quantize_activations, so the bytes and records are identical.
#pragma once

#include "kernels/device_common.cuh"
#include "kernels/matvec.h"

namespace voltad::kernels {

__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Quantizes the warp's 32 values (v, one per lane) as block `block` of row
// `row` of xq, a matrix of `cols` columns. Every lane of the warp must call it.
__device__ __forceinline__ void quantize_block_warp(float v, QuantizedActivations xq, int64_t row,
                                                    int64_t cols, int64_t block) {
  const int lane = threadIdx.x & 31;
  const bool finite = __all_sync(kFullMask, isfinite(v));
  const float nan = __int_as_float(0x7fc00000);
  const float d1 = finite ? warp_max(fabsf(v)) / 127.0f : nan;
  const float s1 = finite ? d1 : 0.0f;
  const int q1 = max(-127, min(127, __float2int_rn(v * (s1 != 0.0f ? 1.0f / s1 : 0.0f))));
  const float r = __fmaf_rn(-d1, float(q1), v);
  const float d2 = finite ? warp_max(fabsf(r)) / 127.0f : nan;
  const float s2 = finite ? d2 : 0.0f;
  const int q2 = max(-127, min(127, __float2int_rn(r * (s2 != 0.0f ? 1.0f / s2 : 0.0f))));
  const int sum1 = warp_sum_int(q1), sum2 = warp_sum_int(q2);
  // Row strides of kernels/matvec.h: 2 bytes per value, one record per 32.
  int8_t* q = xq.q + row * 2 * cols + block * 2 * kActivationBlock;
  q[lane] = int8_t(q1);
  q[kActivationBlock + lane] = int8_t(q2);
  if (lane == 0) {
    const float sum_x = __fmaf_rn(d2, float(sum2), __fmul_rn(d1, float(sum1)));
    *reinterpret_cast<float4*>(xq.scales + (row * (cols / kActivationBlock) + block) *
                                               kActivationRecordFloats) =
        make_float4(d1, d2, sum_x, 0.0f);
  }
}

}  // namespace voltad::kernels
