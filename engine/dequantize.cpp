#include "engine/dequantize.h"

#include <bit>
#include <cstring>

#include "engine/cpu_clones.h"
#include "engine/gguf_file.h"
#include "engine/result.h"

namespace voltad {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF blocks are little-endian; a big-endian host needs byte swaps here");

VOLTAD_CPU_INLINE float load_fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// Arithmetic below follows the order ggml's reference decoders use (scale
// products first, then times the quant, then the min), so results are
// bit-identical to ggml's and to the gguf Python package's. The pointers are
// __restrict: a store through float* could otherwise change the bytes read
// (char types alias everything), and the loops would not vectorize. Every
// product that a sum follows is exact in a float (an fp16 scale's 11-bit
// mantissa times a 6-bit scale and a quant of at most 5 bits), so the
// x86-64-v3 clone (cpu_clones.h), which may fuse a product and its sum
// into one FMA, gives the same bits.

// F32: plain little-endian floats.
VOLTAD_CPU_INLINE void decode_f32(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

// F16: IEEE half floats.
VOLTAD_CPU_INLINE void decode_f16(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_fp16(src + 2 * i);
}

// BF16: the top 16 bits of a float.
VOLTAD_CPU_INLINE void decode_bf16(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}

// Q8_0, 34 bytes per 32 values:
//   [0..2)   d   fp16 scale
//   [2..34)  qs  int8 quants;  value[i] = d * qs[i]
VOLTAD_CPU_INLINE void decode_q8_0(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
    const float d = load_fp16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int i = 0; i < 32; ++i) dst[i] = qs[i] * d;
  }
}

// Q4_0, 18 bytes per 32 values:
//   [0..2)   d   fp16 scale
//   [2..18)  qs  nibbles: byte j holds value j (low nibble) and value j+16
//                (high nibble);  value = d * (q - 8)
VOLTAD_CPU_INLINE void decode_q4_0(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const float d = load_fp16(src);
    const uint8_t* qs = src + 2;
    // Two loops, one store stream each: they vectorize (one loop storing
    // to j and j + 16 does not).
    for (int j = 0; j < 16; ++j) dst[j] = ((qs[j] & 0x0f) - 8) * d;
    for (int j = 0; j < 16; ++j) dst[j + 16] = ((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1, 20 bytes per 32 values:
//   [0..2)   d   fp16 scale
//   [2..4)   m   fp16 min
//   [4..20)  qs  nibbles as in Q4_0;  value = d * q + m
VOLTAD_CPU_INLINE void decode_q4_1(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) dst[j] = (qs[j] & 0x0f) * d + m;
    for (int j = 0; j < 16; ++j) dst[j + 16] = (qs[j] >> 4) * d + m;
  }
}

// The fifth bit of a Q5_0/Q5_1 value: bit i of the 32-bit word qh.
VOLTAD_CPU_INLINE int fifth_bit(uint32_t qh, int i) {
  return static_cast<int>((qh >> i) & 1u) << 4;
}

// Q5_0, 22 bytes per 32 values:
//   [0..2)   d   fp16 scale
//   [2..6)   qh  u32, bit i = high bit of value i
//   [6..22)  qs  low nibbles as in Q4_0;  value = d * (q - 16)
VOLTAD_CPU_INLINE void decode_q5_0(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 22, dst += 32) {
    const float d = load_fp16(src);
    uint32_t qh;
    std::memcpy(&qh, src + 2, 4);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) dst[j] = (((qs[j] & 0x0f) | fifth_bit(qh, j)) - 16) * d;
    for (int j = 0; j < 16; ++j) dst[j + 16] = (((qs[j] >> 4) | fifth_bit(qh, j + 16)) - 16) * d;
  }
}

// Q5_1, 24 bytes per 32 values:
//   [0..2)   d   fp16 scale
//   [2..4)   m   fp16 min
//   [4..8)   qh  u32, bit i = high bit of value i
//   [8..24)  qs  low nibbles as in Q4_0;  value = d * q + m
VOLTAD_CPU_INLINE void decode_q5_1(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 24, dst += 32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    uint32_t qh;
    std::memcpy(&qh, src + 4, 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) dst[j] = ((qs[j] & 0x0f) | fifth_bit(qh, j)) * d + m;
    for (int j = 0; j < 16; ++j) dst[j + 16] = ((qs[j] >> 4) | fifth_bit(qh, j + 16)) * d + m;
  }
}

// Q4_K, 144 bytes per 256 values (8 sub-blocks of 32):
//   [0..2)     d       fp16 super-block scale of the scales
//   [2..4)     dmin    fp16 super-block scale of the mins
//   [4..16)    scales  6-bit scale and min per sub-block (q4_k_scale_min, dequantize.h)
//   [16..144)  qs      nibbles: each 32-byte chunk c holds sub-block 2c in its
//                      low nibbles and sub-block 2c+1 in its high nibbles
//   value = (d * scale) * q - (dmin * min)
VOLTAD_CPU_INLINE void decode_q4_k(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 144) {
    const float d = load_fp16(src);
    const float dmin = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    for (int chunk = 0; chunk < 4; ++chunk, qs += 32) {
      int sc, m;
      q4_k_scale_min(scales, 2 * chunk, sc, m);
      const float d_lo = d * sc, m_lo = dmin * m;
      q4_k_scale_min(scales, 2 * chunk + 1, sc, m);
      const float d_hi = d * sc, m_hi = dmin * m;
      for (int l = 0; l < 32; ++l) *dst++ = d_lo * (qs[l] & 0x0f) - m_lo;
      for (int l = 0; l < 32; ++l) *dst++ = d_hi * (qs[l] >> 4) - m_hi;
    }
  }
}

// Q5_K, 176 bytes per 256 values (8 sub-blocks of 32):
//   [0..2)     d       fp16 scale of the scales
//   [2..4)     dmin    fp16 scale of the mins
//   [4..16)    scales  as in Q4_K
//   [16..48)   qh      fifth bits: bit s of qh[l] belongs to value l of sub-block s
//   [48..176)  qs      low nibbles laid out as in Q4_K
//   value = (d * scale) * (q + 16*high) - (dmin * min)
VOLTAD_CPU_INLINE void decode_q5_k(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 176) {
    const float d = load_fp16(src);
    const float dmin = load_fp16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int chunk = 0; chunk < 4; ++chunk, qs += 32) {
      int sc, m;
      q4_k_scale_min(scales, 2 * chunk, sc, m);
      const float d_lo = d * sc, m_lo = dmin * m;
      q4_k_scale_min(scales, 2 * chunk + 1, sc, m);
      const float d_hi = d * sc, m_hi = dmin * m;
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * chunk));
      const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * chunk));
      for (int l = 0; l < 32; ++l)
        *dst++ = d_lo * ((qs[l] & 0x0f) + ((qh[l] & bit_lo) ? 16 : 0)) - m_lo;
      for (int l = 0; l < 32; ++l)
        *dst++ = d_hi * ((qs[l] >> 4) + ((qh[l] & bit_hi) ? 16 : 0)) - m_hi;
    }
  }
}

// Q6_K, 210 bytes per 256 values (16 sub-blocks of 16), in two halves of 128:
//   [0..128)    ql      low 4 bits: half h uses ql[64h .. 64h+64)
//   [128..192)  qh      high 2 bits: half h uses qh[32h .. 32h+32)
//   [192..208)  scales  int8, one per sub-block of 16
//   [208..210)  d       fp16 super-block scale
// Within a half, for l in 0..31 the byte pair (ql[l], ql[l+32]) and qh[l]
// give values l, l+32, l+64, l+96:
//   l:    ql[l] low  | qh[l] bits 0-1      l+64: ql[l] high    | qh[l] bits 4-5
//   l+32: ql[l+32] low | qh[l] bits 2-3    l+96: ql[l+32] high | qh[l] bits 6-7
//   value = (d * scale) * (q - 32)
VOLTAD_CPU_INLINE void decode_q6_k(const uint8_t* __restrict src, float* __restrict dst,
                                   int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_fp16(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      // A loop per output run of 16 (one scale, one store stream): they
      // vectorize.
      for (int s = 0; s < 2; ++s) {
        const int l0 = 16 * s;
        const float d0 = d * sc[s], d1 = d * sc[s + 2], d2 = d * sc[s + 4], d3 = d * sc[s + 6];
        for (int l = l0; l < l0 + 16; ++l)
          dst[l] = d0 * (((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
        for (int l = l0; l < l0 + 16; ++l)
          dst[l + 32] = d1 * (((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
        for (int l = l0; l < l0 + 16; ++l)
          dst[l + 64] = d2 * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        for (int l = l0; l < l0 + 16; ++l)
          dst[l + 96] = d3 * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
  }
}

}  // namespace

uint64_t ggml_row_bytes(GgmlType type, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  VOLTAD_CHECK(info != nullptr);
  VOLTAD_CHECK(n >= 0 && n % info->block_elems == 0);
  return static_cast<uint64_t>(n) / info->block_elems * info->block_bytes;
}

VOLTAD_CPU_CLONES VOLTAD_CPU_NO_TSAN void dequantize_row(GgmlType type, const uint8_t* src,
                                                         float* dst, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  VOLTAD_CHECK(info != nullptr && info->supported);
  VOLTAD_CHECK(n >= 0 && n % info->block_elems == 0);
  switch (type) {
    case GgmlType::F32:
      return decode_f32(src, dst, n);
    case GgmlType::F16:
      return decode_f16(src, dst, n);
    case GgmlType::BF16:
      return decode_bf16(src, dst, n);
    case GgmlType::Q8_0:
      return decode_q8_0(src, dst, n);
    case GgmlType::Q4_0:
      return decode_q4_0(src, dst, n);
    case GgmlType::Q4_1:
      return decode_q4_1(src, dst, n);
    case GgmlType::Q5_0:
      return decode_q5_0(src, dst, n);
    case GgmlType::Q5_1:
      return decode_q5_1(src, dst, n);
    case GgmlType::Q4_K:
      return decode_q4_k(src, dst, n);
    case GgmlType::Q5_K:
      return decode_q5_k(src, dst, n);
    case GgmlType::Q6_K:
      return decode_q6_k(src, dst, n);
    default:
      break;
  }
  VOLTAD_CHECK(!"type marked supported has no decoder");
}

void dequantize_rows(const GgufTensor& tensor, uint64_t first_row, uint64_t n_rows, float* dst) {
  VOLTAD_CHECK(first_row <= tensor.n_rows() && n_rows <= tensor.n_rows() - first_row);
  const int64_t row_len = static_cast<int64_t>(tensor.ne[0]);
  const uint64_t row_bytes = ggml_row_bytes(tensor.type, row_len);
  for (uint64_t r = 0; r < n_rows; ++r) {
    dequantize_row(tensor.type, tensor.data + (first_row + r) * row_bytes,
                   dst + r * static_cast<uint64_t>(row_len), row_len);
  }
}

std::vector<float> dequantize_tensor(const GgufTensor& tensor) {
  std::vector<float> out(tensor.n_elements);
  dequantize_rows(tensor, 0, tensor.n_rows(), out.data());
  return out;
}

}  // namespace voltad
