// The GEMM tests' reference weights: a packed row as the kernels' FP16
// operands hold it, value by value (tests/kernels/test_gemm.cpp).
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/dequantize.h"
#include "engine/ggml_types.h"
#include "engine/weight_repack.h"

namespace voltad::test {

inline double to_half(float v) {
  return double(__half2float(__float2half_rn(v)));
}

// A weight row as the kernels' fp16 operands hold it. The affine formats
// (Q4_1, Q5_1) decode by one fp16 fma of d*q + m, a single rounding of the
// exact value (kernels/gemm_decode.cuh);
// dequantize_packed_row gives fp32 (d*q + m rounded there), and a value a
// hair off an fp16 midpoint lands on it and then rounds to even: with
// VOLTAD_TEST_SEED=4164304209 three weights of one Q5_1 row (-20.0390625
// twice, -15.36328125) did, 0.0998 against the row's outlier x.
//
// The K formats decode in fp16 arithmetic from the fp16 roundings of their
// factors (kernels/gemm_decode.cuh): Q4_K and Q5_K fma(a_h, q, b_h) with
// a = D*sc, b = -M*mn; Q6_K a_h * 4(q - 32) with a = d*sc/4; each a single
// rounding of that exact value, modelled here value by value.
inline double half_of(double v) {
  return double(__half2float(__double2half(v)));
}

inline void half_k_weights_row(const PackedMatrix& m, int64_t r, const std::vector<float>& w,
                               std::vector<double>& wh) {
  const kernels::PackedLayout& l = m.layout;
  const uint8_t* quants = m.bytes.data() + l.quants_offset + r * l.quant_row_bytes;
  const uint8_t* scales = m.bytes.data() + l.scales_offset + r * l.scale_row_bytes;
  if (l.format == kernels::PackedFormat::Int6K256) {
    const uint8_t* super = m.bytes.data() + l.super_offset + r * l.super_row_bytes;
    for (size_t k = 0; k < w.size(); ++k) {
      uint16_t d;
      std::memcpy(&d, super + 2 * (k / 256), 2);
      const float a = fp16_to_fp32(d) * 0.25f * float(int8_t(scales[k / 16]));
      // w = 4a (q - 32) exactly in fp32 (24 bits at most).
      const double q32 = a == 0.0f ? 0.0 : std::nearbyint(double(w[k]) / (4.0 * double(a)));
      wh[k] = half_of(double(__half2float(__float2half_rn(a))) * 4.0 * q32);
    }
    return;
  }
  const bool int4 = l.format == kernels::PackedFormat::Int4K256;
  for (size_t k = 0; k < w.size(); ++k) {
    const uint8_t* hdr = scales + 16 * (k / 256);
    uint16_t dm[2];
    std::memcpy(dm, hdr, 4);
    int sc = 0, mn = 0;
    q4_k_scale_min(hdr + 4, int(k / 32 % 8), sc, mn);
    const float a = fp16_to_fp32(dm[0]) * float(sc), b = -fp16_to_fp32(dm[1]) * float(mn);
    const uint8_t byte = int4 ? quants[(k / 32) * 16 + (k % 16)] : quants[k];
    const int q = int4 ? ((k % 32) < 16 ? byte & 0x0F : byte >> 4) : int(byte);
    wh[k] = half_of(double(q) * double(__half2float(__float2half_rn(a))) +
                    double(__half2float(__float2half_rn(b))));
  }
}

inline void half_weights_row(const PackedMatrix& m, int64_t r, const std::vector<float>& w,
                             std::vector<double>& wh) {
  const kernels::PackedLayout& l = m.layout;
  if (l.format == kernels::PackedFormat::Int4K256 || l.format == kernels::PackedFormat::Int8K256 ||
      l.format == kernels::PackedFormat::Int6K256)
    return half_k_weights_row(m, r, w, wh);
  for (size_t k = 0; k < w.size(); ++k) wh[k] = to_half(w[k]);
  const bool int4 = l.format == kernels::PackedFormat::Int4Affine32;
  if (!int4 && l.format != kernels::PackedFormat::Int8Affine32) return;
  const uint8_t* quants = m.bytes.data() + l.quants_offset + r * l.quant_row_bytes;
  const uint8_t* scales = m.bytes.data() + l.scales_offset + r * l.scale_row_bytes;
  for (size_t k = 0; k < w.size(); ++k) {
    uint16_t dm[2];
    std::memcpy(dm, scales + 4 * (k / 32), 4);
    // Int4: the nibbles of 32 values in 16 bytes, the first 16 low.
    const uint8_t byte = int4 ? quants[(k / 32) * 16 + (k % 16)] : quants[k];
    const int q = int4 ? ((k % 32) < 16 ? byte & 0x0F : byte >> 4) : int(byte);
    const double exact = double(q) * double(fp16_to_fp32(dm[0])) + double(fp16_to_fp32(dm[1]));
    wh[k] = double(__half2float(__double2half(exact)));
  }
}

}  // namespace voltad::test
