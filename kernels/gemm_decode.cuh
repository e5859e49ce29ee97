// Decoding packed weight chunks to FP16 for the tensor-core GEMMs: the
// portable one (gemm_wmma.cu, loads straight from global memory) and the
// sm_80+ one (gemm_sm80.cu, loads from a shared-memory copy made by
// cp.async). One chunk is 32 consecutive values of one row; decode() gives
// them as 16 half2 words in natural k order. Layouts: docs/FORMAT.md and
// kernels/matvec_format.h.
//
// Decoding to FP16: q is exact in fp16 (the 1024+q bit trick, 1024 taken
// off exactly), then
//   Int4Sym32/Int8Sym32: times d in one fp16 multiply; Int4Affine32/
//     Int8Affine32: one fp16 fma q*d+m: each weight rounded once from its
//     exact value.
//   K256 formats: a = D*sc and b = -M*mn (Q6_K: a = d*sc/4, b = 0) are
//     exact in fp32 but not in fp16: w = fma(a_h, q, b_h) in fp16 with a_h
//     and b_h the fp16 roundings of a and b, one rounding more each than
//     the exact value's, |w - exact| <= 2^-12 (|a q| + |b|) + 2^-11 |w|
//     (against a/2 of quantization error). An fp32 fma cost 3.5
//     instructions a weight to this path's ~1.5 (run 45,
//     docs/PERFORMANCE-RUNS-45.md); tests/kernels/test_gemm.cpp's reference
//     rounds the same way.
// Every GEMM decodes with this code, so they see bit-identical FP16 weights.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/device_common.cuh"
#include "kernels/matvec_format.h"

namespace voltad::kernels::gemm_decode {

// Where a chunk's bytes are read from: Chunk<F>::load<M> takes one of these.
// u128 streams weights (global: not kept in L1); u128i is a header read by
// several chunks (global: through the read-only cache).
struct GlobalMemory {
  static __device__ __forceinline__ uint4 u128(const uint8_t* p) { return load_weights_16(p); }
  static __device__ __forceinline__ uint2 u64(const uint8_t* p) { return load_weights_8(p); }
  static __device__ __forceinline__ uint4 u128i(const uint8_t* p, int64_t i) {
    return __ldg(reinterpret_cast<const uint4*>(p) + i);
  }
  static __device__ __forceinline__ uint32_t u32(const uint8_t* p, int64_t i) {
    return __ldg(reinterpret_cast<const unsigned int*>(p) + i);
  }
  static __device__ __forceinline__ uint32_t u16(const uint8_t* p, int64_t i) {
    return __ldg(reinterpret_cast<const unsigned short*>(p) + i);
  }
};
struct SharedMemory {
  static __device__ __forceinline__ uint4 u128(const uint8_t* p) {
    return *reinterpret_cast<const uint4*>(p);
  }
  static __device__ __forceinline__ uint2 u64(const uint8_t* p) {
    return *reinterpret_cast<const uint2*>(p);
  }
  static __device__ __forceinline__ uint4 u128i(const uint8_t* p, int64_t i) {
    return reinterpret_cast<const uint4*>(p)[i];
  }
  static __device__ __forceinline__ uint32_t u32(const uint8_t* p, int64_t i) {
    return reinterpret_cast<const unsigned int*>(p)[i];
  }
  static __device__ __forceinline__ uint32_t u16(const uint8_t* p, int64_t i) {
    return reinterpret_cast<const unsigned short*>(p)[i];
  }
};

__device__ __forceinline__ __half2 u32_as_half2(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t half2_as_u32(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return half2_as_u32(__floats2half2_rn(lo, hi));
}
__device__ __forceinline__ float half_bits_to_float(uint32_t bits16) {
  return __half2float(__ushort_as_half((unsigned short)(bits16 & 0xFFFF)));
}

// ---- one chunk of 32 weights: memory -> registers -> 16 half2 words --------
// Raw<F> holds what a thread loads for its chunk; decode() writes h[j] =
// (w[2j], w[2j+1]) as half2 in natural k order. A chunk past the matrix
// (row >= rows, k >= cols) is loaded as zeros, which decode to zeros.
// decode<true>() (the 4-bit formats and Q6_K: decodes_in_x_order) writes
// them in the order of kernels/narrow_x.cuh's fp16 x instead, the nibbles'
// own: h[4i + j] = (w[v], w[v + 2]) for v = 4i, 4i + 1, 16 + 4i, 17 + 4i
// (j = 0..3), one PRMT a word fewer; a GEMM whose x comes in that order
// multiplies the pairs as they are.
template <PackedFormat F>
struct Chunk;
// A 4-bit chunk's per-row factors as half2 (Int4Sym32: a = d; Int4Affine32:
// a = d, b = m; Int4K256: a = D*sc, b = -M*mn, each rounded to fp16).
struct Factors {
  __half2 a, b;
};
template <PackedFormat F>
constexpr bool decodes_in_x_order() {
  return F == PackedFormat::Int4Sym32 || F == PackedFormat::Int4Affine32 ||
         F == PackedFormat::Int4K256 || F == PackedFormat::Int6K256;
}

// Where one row's sub-arrays start: computed once per thread, so a stage's
// loads are a pointer plus the chunk offset.
struct RowPointers {
  const uint8_t* quants;
  const uint8_t* high;
  const uint8_t* scales;
  const uint8_t* super_;
  int64_t cols;
};
__device__ __forceinline__ RowPointers row_pointers(const PackedMatrixView& m, int64_t row) {
  const PackedLayout& l = m.layout;
  return {m.data + l.quants_offset + row * l.quant_row_bytes,
          m.data + l.high_offset + row * l.high_row_bytes,
          m.data + l.scales_offset + row * l.scale_row_bytes,
          m.data + l.super_offset + row * l.super_row_bytes, l.cols};
}

// (a & kMask) | kOr, and (a & kMask) ^ kXor, in one LOP3 each: written as
// C++, ptxas splits a mask and an OR with two immediates into two
// instructions (an SASS LOP3 holds one).
template <uint32_t kMask, uint32_t kOr>
__device__ __forceinline__ uint32_t mask_or(uint32_t a) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "n"(kMask), "n"(kOr));
  return d;
}
template <uint32_t kMask, uint32_t kXor>
__device__ __forceinline__ uint32_t mask_xor(uint32_t a) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;\n" : "=r"(d) : "r"(a), "n"(kMask), "n"(kXor));
  return d;
}
// (a & kMask) | b in one LOP3.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t mask_or_reg(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "n"(kMask), "r"(b));
  return d;
}

// Two bytes' high nibbles, at bits 4-7 and 20-23 of v, as the exact fp16
// integers 64 + q in one LOP3 (64's ulp is 1/16: the nibble lands in the
// mantissa's bits 4-7), with no shift down to bits 0-3 first;
// Chunk::apply<true> takes them (it subtracts 64, not 1024: the same
// values, bit for bit).
__device__ __forceinline__ uint32_t high_nibbles_to_half2(uint32_t v) {
  return mask_or<0x00F000F0u, 0x54005400u>(v);
}

// Int4 nibbles as exact fp16 integers 1024 + q, in natural order. Byte i of
// the 16 holds value i (bits 0-3) and i+16 (bits 4-7); word t holds values
// 4t..4t+3 and 16+4t..16+4t+3. After swapping its middle bytes (b0 b2 b1
// b3), masking 0x000F000F picks two adjacent values into the two halves;
// kXOrder: unswapped, it picks values v and v + 2 (narrow_x.cuh's order).
template <bool kXOrder = false, class Op>
__device__ __forceinline__ void int4_to_half2(const uint4& q, uint32_t (&h)[16], Op op) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const uint32_t w = kXOrder ? words[t] : __byte_perm(words[t], 0, 0x3120);
    const int lo = kXOrder ? 4 * t : 2 * t, hi = kXOrder ? 4 * t + 2 : 8 + 2 * t;
    h[lo] = op(mask_or<0x000F000Fu, 0x64006400u>(w));
    h[lo + 1] = op(mask_or<0x000F000Fu, 0x64006400u>(w >> 8));
    h[hi] = op(mask_or<0x000F000Fu, 0x64006400u>(w >> 4));
    h[hi + 1] = op(mask_or<0x000F000Fu, 0x64006400u>(w >> 12));
  }
}

// Int8 bytes (values 4t..4t+3 in word t, natural order) as fp16 1024 + u,
// u the unsigned byte.
template <class Op>
__device__ __forceinline__ void int8_to_half2(const uint4 (&q)[2], uint32_t flip, uint32_t (&h)[16],
                                              Op op) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const uint32_t words[4] = {q[p].x, q[p].y, q[p].z, q[p].w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint32_t w = words[t] ^ flip;
      h[8 * p + 2 * t] = op(__byte_perm(w, 0x64646464u, 0x5150));
      h[8 * p + 2 * t + 1] = op(__byte_perm(w, 0x64646464u, 0x5352));
    }
  }
}

template <>
struct Chunk<PackedFormat::Int4Sym32> {
  uint4 q;
  uint32_t d;  // fp16 bits
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    q = M::u128(r.quants + c * 16);
    d = M::u16(r.scales, c);
  }
  __device__ void zero() { q = make_uint4(0, 0, 0, 0), d = 0; }
  // The row's factors for the chunk as one word (what paired B shuffles
  // between lanes: kernels/wmma_pairs.h), unpacked, and a half2 of 1024 + q
  // decoded with them: decode()'s own arithmetic.
  __device__ uint32_t factor_word(int64_t) const { return d; }
  static __device__ Factors factors(uint32_t word) {
    return {__half2half2(__ushort_as_half((unsigned short)word)), {}};
  }
  // kHigh: v holds 64 + q (high nibbles in place: kHighNibbles).
  template <bool kHigh = false>
  static __device__ uint32_t apply(const Factors& f, uint32_t v) {
    // 1032 = 1024 + 8, or 72 = 64 + 8
    const __half2 off = u32_as_half2(kHigh ? 0x54805480u : 0x64086408u);
    return half2_as_u32(__hmul2(__hsub2(u32_as_half2(v), off), f.a));
  }
  template <bool kXOrder = false>
  __device__ void decode(int64_t c, uint32_t (&h)[16]) const {
    const Factors f = factors(factor_word(c));
    int4_to_half2<kXOrder>(q, h, [&](uint32_t v) { return apply(f, v); });
  }
};

template <>
struct Chunk<PackedFormat::Int4Affine32> {
  uint4 q;
  uint32_t dm;  // fp16 d (low), fp16 m (high)
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    q = M::u128(r.quants + c * 16);
    dm = M::u32(r.scales, c);
  }
  __device__ void zero() { q = make_uint4(0, 0, 0, 0), dm = 0; }
  __device__ uint32_t factor_word(int64_t) const { return dm; }
  static __device__ Factors factors(uint32_t word) {
    return {__half2half2(__ushort_as_half((unsigned short)(word & 0xFFFF))),
            __half2half2(__ushort_as_half((unsigned short)(word >> 16)))};
  }
  template <bool kHigh = false>
  static __device__ uint32_t apply(const Factors& f, uint32_t v) {
    const __half2 off = u32_as_half2(kHigh ? 0x54005400u : 0x64006400u);  // 1024 or 64
    return half2_as_u32(__hfma2(__hsub2(u32_as_half2(v), off), f.a, f.b));
  }
  template <bool kXOrder = false>
  __device__ void decode(int64_t c, uint32_t (&h)[16]) const {
    const Factors f = factors(factor_word(c));
    int4_to_half2<kXOrder>(q, h, [&](uint32_t v) { return apply(f, v); });
  }
};

// Q4_K's 16-byte header of the chunk's super-block: fp16 D, fp16 M, 12 bytes
// of six-bit (sc, mn); sub-block c % 8. a = D*sc, b = -M*mn (exact in fp32).
__device__ __forceinline__ void k256_affine(const uint4& hdr, int64_t c, float& a, float& b) {
  int sc, mn;
  q4_k_scale_min(hdr.y, hdr.z, hdr.w, int(c & 7), sc, mn);
  a = half_bits_to_float(hdr.x) * float(sc);
  b = -half_bits_to_float(hdr.x >> 16) * float(mn);
}

template <>
struct Chunk<PackedFormat::Int4K256> {
  uint4 q, hdr;
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    q = M::u128(r.quants + c * 16);
    hdr = M::u128i(r.scales, (c >> 3));
  }
  __device__ void zero() { q = hdr = make_uint4(0, 0, 0, 0); }
  // (a, b) rounded to fp16, as one word.
  __device__ uint32_t factor_word(int64_t c) const {
    float a, b;
    k256_affine(hdr, c, a, b);
    return pack_half2(a, b);
  }
  static __device__ Factors factors(uint32_t word) {
    const __half2 w = u32_as_half2(word);
    return {__low2half2(w), __high2half2(w)};
  }
  template <bool kHigh = false>
  static __device__ uint32_t apply(const Factors& f, uint32_t v) {
    const __half2 off = u32_as_half2(kHigh ? 0x54005400u : 0x64006400u);  // 1024 or 64
    return half2_as_u32(__hfma2(__hsub2(u32_as_half2(v), off), f.a, f.b));
  }
  template <bool kXOrder = false>
  __device__ void decode(int64_t c, uint32_t (&h)[16]) const {
    const Factors f = factors(factor_word(c));
    int4_to_half2<kXOrder>(q, h, [&](uint32_t v) { return apply(f, v); });
  }
};

// Q6_K: nibbles in the Int4 order, crumbs in `high` (8 bytes per chunk, a
// word per half), int8 sc per 16 values, fp16 d per 256. int6_assemble gives
// bytes holding 4(q-32); XOR 0x80 makes them u = 4q in 0..252, and
// w = d*sc*(q-32) = a*u - 128a with a = d*sc/4 (all exact in fp32).
template <>
struct Chunk<PackedFormat::Int6K256> {
  uint4 q;
  uint2 crumbs;
  uint32_t sc;  // two int8 sub-scales (values 0-15, 16-31)
  uint32_t d;   // fp16 bits
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    q = M::u128(r.quants + c * 16);
    crumbs = M::u64(r.high + c * 8);
    sc = M::u16(r.scales, c);
    d = M::u16(r.super_, (c >> 3));
  }
  __device__ void zero() {
    q = make_uint4(0, 0, 0, 0);
    crumbs = make_uint2(0, 0);
    sc = d = 0;
  }
  // Bytes u = 4(q-32) + 128 as fp16 1024 + u, less 1152: 4(q-32) exactly,
  // times a_h (a = d*sc/4). The pairs of bytes (0, 1) and (2, 3), or with
  // kXOrder (0, 2) and (1, 3).
  template <int t, bool kXOrder>
  __device__ __forceinline__ void half_word(uint32_t nib, uint32_t cr, __half2 a,
                                            uint32_t* out) const {
    const uint32_t u = int6_assemble<t>(nib, cr) ^ 0x80808080u;
    const __half2 off = u32_as_half2(0x64806480u);  // 1152 = 1024 + 128
    constexpr uint32_t kFirst = kXOrder ? 0x5250 : 0x5150, kSecond = kXOrder ? 0x5351 : 0x5352;
    out[0] =
        half2_as_u32(__hmul2(__hsub2(u32_as_half2(__byte_perm(u, 0x64646464u, kFirst)), off), a));
    out[1] =
        half2_as_u32(__hmul2(__hsub2(u32_as_half2(__byte_perm(u, 0x64646464u, kSecond)), off), a));
  }
  // Values 4t..4t+3 at words 2t (natural) or 4t (kXOrder), 16+4t.. at
  // 8 + 2t or 4t + 2.
  template <bool kXOrder = false>
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
    const float dd = half_bits_to_float(d) * 0.25f;
    const __half2 a0 = __float2half2_rn(dd * float(int8_t(sc & 0xFF))),
                  a1 = __float2half2_rn(dd * float(int8_t((sc >> 8) & 0xFF)));
    constexpr int kLo = kXOrder ? 4 : 2, kHi = kXOrder ? 2 : 8;
    half_word<0, kXOrder>(q.x, crumbs.x, a0, h + 0 * kLo);
    half_word<1, kXOrder>(q.y, crumbs.x, a0, h + 1 * kLo);
    half_word<2, kXOrder>(q.z, crumbs.x, a0, h + 2 * kLo);
    half_word<3, kXOrder>(q.w, crumbs.x, a0, h + 3 * kLo);
    half_word<0, kXOrder>(q.x >> 4, crumbs.y, a1, h + kHi + 0 * kLo);
    half_word<1, kXOrder>(q.y >> 4, crumbs.y, a1, h + kHi + 1 * kLo);
    half_word<2, kXOrder>(q.z >> 4, crumbs.y, a1, h + kHi + 2 * kLo);
    half_word<3, kXOrder>(q.w >> 4, crumbs.y, a1, h + kHi + 3 * kLo);
  }
};

template <>
struct Chunk<PackedFormat::Int8Sym32> {
  uint4 q[2];
  uint32_t d;
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 32;
    q[0] = M::u128(p);
    q[1] = M::u128(p + 16);
    d = M::u16(r.scales, c);
  }
  __device__ void zero() { q[0] = q[1] = make_uint4(0, 0, 0, 0), d = 0; }
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
    // Signed bytes: XOR 0x80 gives q + 128; 1024 + 128 = 1152 comes off.
    const __half2 d2 = __half2half2(__ushort_as_half((unsigned short)d));
    const __half2 off = u32_as_half2(0x64806480u);
    int8_to_half2(q, 0x80808080u, h, [&](uint32_t v) {
      return half2_as_u32(__hmul2(__hsub2(u32_as_half2(v), off), d2));
    });
  }
};

template <>
struct Chunk<PackedFormat::Int8Affine32> {
  uint4 q[2];
  uint32_t dm;
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 32;
    q[0] = M::u128(p);
    q[1] = M::u128(p + 16);
    dm = M::u32(r.scales, c);
  }
  __device__ void zero() { q[0] = q[1] = make_uint4(0, 0, 0, 0), dm = 0; }
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
    const __half2 d2 = __half2half2(__ushort_as_half((unsigned short)(dm & 0xFFFF)));
    const __half2 m2 = __half2half2(__ushort_as_half((unsigned short)(dm >> 16)));
    const __half2 off = u32_as_half2(0x64006400u);
    int8_to_half2(q, 0u, h, [&](uint32_t v) {
      return half2_as_u32(__hfma2(__hsub2(u32_as_half2(v), off), d2, m2));
    });
  }
};

template <>
struct Chunk<PackedFormat::Int8K256> {
  uint4 q[2], hdr;
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 32;
    q[0] = M::u128(p);
    q[1] = M::u128(p + 16);
    hdr = M::u128i(r.scales, (c >> 3));
  }
  __device__ void zero() { q[0] = q[1] = hdr = make_uint4(0, 0, 0, 0); }
  __device__ void decode(int64_t c, uint32_t (&h)[16]) const {
    float a, b;
    k256_affine(hdr, c, a, b);
    const __half2 a2 = __float2half2_rn(a), b2 = __float2half2_rn(b);
    const __half2 off = u32_as_half2(0x64006400u);
    int8_to_half2(q, 0u, h, [&](uint32_t v) {
      return half2_as_u32(__hfma2(__hsub2(u32_as_half2(v), off), a2, b2));
    });
  }
};

// F16 and F32: rows padded to 16 bytes, so every 16-byte piece that starts
// before `cols` may be loaded; values at k >= cols are zeroed.
template <>
struct Chunk<PackedFormat::F16> {
  uint4 q[4];
  int valid;  // values of this chunk below cols (0..32)
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 64;
    valid = r.cols - c * 32 < 32 ? int(r.cols - c * 32) : 32;
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = 8 * i < valid ? M::u128(p + 16 * i) : make_uint4(0, 0, 0, 0);
  }
  __device__ void zero() {
    q[0] = q[1] = q[2] = q[3] = make_uint4(0, 0, 0, 0);
    valid = 0;
  }
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      h[4 * i] = q[i].x, h[4 * i + 1] = q[i].y, h[4 * i + 2] = q[i].z, h[4 * i + 3] = q[i].w;
    }
    if (valid < 32) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        if (2 * j >= valid)
          h[j] = 0;
        else if (2 * j + 1 >= valid)
          h[j] &= 0xFFFFu;
      }
    }
  }
};

template <>
struct Chunk<PackedFormat::F32> {
  uint4 q[8];
  int valid;
  template <class M>
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 128;
    valid = r.cols - c * 32 < 32 ? int(r.cols - c * 32) : 32;
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = 4 * i < valid ? M::u128(p + 16 * i) : make_uint4(0, 0, 0, 0);
  }
  __device__ void zero() {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = make_uint4(0, 0, 0, 0);
    valid = 0;
  }
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float f0 = 4 * i + 0 < valid ? __uint_as_float(q[i].x) : 0.0f;
      const float f1 = 4 * i + 1 < valid ? __uint_as_float(q[i].y) : 0.0f;
      const float f2 = 4 * i + 2 < valid ? __uint_as_float(q[i].z) : 0.0f;
      const float f3 = 4 * i + 3 < valid ? __uint_as_float(q[i].w) : 0.0f;
      h[2 * i] = pack_half2(f0, f1);
      h[2 * i + 1] = pack_half2(f2, f3);
    }
  }
};

}  // namespace voltad::kernels::gemm_decode
