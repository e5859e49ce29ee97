// Dequantize-to-FP16 GEMM on tensor cores through wmma m16n16k16 (sm_70+).
// Contract in gemm_wmma.h; packed layouts in device_common.cuh and
// docs/FORMAT.md; measurements in docs/KERNEL-NOTES.md.
//
// A block computes a BM (tokens) x BN (weight rows) tile of y, walking k in
// stages of 64 (two 32-value chunks). Stage k+1 is loaded from global memory
// into registers while the tensor cores work on stage k in shared memory;
// then the registers are decoded to FP16 and stored into the other half of
// a double buffer (the V100 has no cp.async, so the copy goes through
// registers). One __syncthreads per stage.
//
//   weights: thread t decodes chunk (t & 1) of tile row t >> 1: 2*BN chunks,
//            one per thread (every tile shape has 2*BN threads). Its 16
//            bytes of nibbles (32 of int8, 64 of f16, 128 of f32) and its
//            scales become 32 halves, stored as 4 16-byte words.
//   x:       BM x 64 floats, float4 per thread per step, rounded to FP16.
//   shared:  both tiles k-contiguous with rows of 72 halves (144 bytes: the
//            8-half pad spreads the rows of a 16x16 fragment over the banks);
//            x is wmma's row-major A, W (rows x k) is its column-major B.
//   epilogue: accumulators -> shared memory (fp32) -> y with bias and the
//            residual add, rows of the tile coalesced.
//
// Decoding to FP16 rounds each weight exactly once from its exact value:
//   Int4Sym32/Int8Sym32: q (exact in fp16 via the 1024+q bit trick) times d
//     in one fp16 multiply; Int4Affine32/Int8Affine32: one fp16 fma q*d+m.
//   K256 formats: a = D*sc and b = -M*mn are exact in fp32 but not in fp16,
//     so w = fma(a, q, b) in fp32 (exact) and one rounding to fp16.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstring>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/gemm_wmma.h"

namespace voltad::kernels {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kStageK = 64;           // k per pipeline stage
constexpr int kTileLd = kStageK + 8;  // shared row stride, halves

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
// Exact for 0 <= i < 2^23: the integer in a float's mantissa, minus 2^23.
__device__ __forceinline__ float small_uint_to_float(uint32_t i) {
  return __uint_as_float(0x4B000000u | i) - 8388608.0f;
}
__device__ __forceinline__ float half_bits_to_float(uint32_t bits16) {
  return __half2float(__ushort_as_half((unsigned short)(bits16 & 0xFFFF)));
}

// ---- one chunk of 32 weights: global -> registers -> 16 half2 words --------
// Raw<F> holds what a thread loads for its chunk; decode() writes h[j] =
// (w[2j], w[2j+1]) as half2 in natural k order. A chunk past the matrix
// (row >= rows, k >= cols) is loaded as zeros, which decode to zeros.
template <PackedFormat F>
struct Chunk;

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

// Int4 nibbles as exact fp16 integers 1024 + q, in natural order. Byte i of
// the 16 holds value i (bits 0-3) and i+16 (bits 4-7); word t holds values
// 4t..4t+3 and 16+4t..16+4t+3. After swapping its middle bytes (b0 b2 b1
// b3), masking 0x000F000F picks two adjacent values into the two halves.
template <class Op>
__device__ __forceinline__ void int4_to_half2(const uint4& q, uint32_t (&h)[16], Op op) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const uint32_t w = __byte_perm(words[t], 0, 0x3120);
    h[2 * t] = op(((w >> 0) & 0x000F000Fu) | 0x64006400u);
    h[2 * t + 1] = op(((w >> 8) & 0x000F000Fu) | 0x64006400u);
    h[8 + 2 * t] = op(((w >> 4) & 0x000F000Fu) | 0x64006400u);
    h[8 + 2 * t + 1] = op(((w >> 12) & 0x000F000Fu) | 0x64006400u);
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

// Per value in fp32: w = fma(a, v, b), v an exact small integer.
__device__ __forceinline__ uint32_t affine_pair(float a, float b, uint32_t v0, uint32_t v1) {
  return pack_half2(fmaf(a, small_uint_to_float(v0), b), fmaf(a, small_uint_to_float(v1), b));
}

template <>
struct Chunk<PackedFormat::Int4Sym32> {
  uint4 q;
  uint32_t d;  // fp16 bits
  __device__ void load(const RowPointers& r, int64_t c) {
    q = load_weights_16(r.quants + c * 16);
    d = __ldg(reinterpret_cast<const unsigned short*>(r.scales) + c);
  }
  __device__ void zero() { q = make_uint4(0, 0, 0, 0), d = 0; }
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
    const __half2 d2 = __half2half2(__ushort_as_half((unsigned short)d));
    const __half2 off = u32_as_half2(0x64086408u);  // 1032 = 1024 + 8
    int4_to_half2(
        q, h, [&](uint32_t v) { return half2_as_u32(__hmul2(__hsub2(u32_as_half2(v), off), d2)); });
  }
};

template <>
struct Chunk<PackedFormat::Int4Affine32> {
  uint4 q;
  uint32_t dm;  // fp16 d (low), fp16 m (high)
  __device__ void load(const RowPointers& r, int64_t c) {
    q = load_weights_16(r.quants + c * 16);
    dm = __ldg(reinterpret_cast<const unsigned int*>(r.scales) + c);
  }
  __device__ void zero() { q = make_uint4(0, 0, 0, 0), dm = 0; }
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
    const __half2 d2 = __half2half2(__ushort_as_half((unsigned short)(dm & 0xFFFF)));
    const __half2 m2 = __half2half2(__ushort_as_half((unsigned short)(dm >> 16)));
    const __half2 off = u32_as_half2(0x64006400u);
    int4_to_half2(q, h, [&](uint32_t v) {
      return half2_as_u32(__hfma2(__hsub2(u32_as_half2(v), off), d2, m2));
    });
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
  __device__ void load(const RowPointers& r, int64_t c) {
    q = load_weights_16(r.quants + c * 16);
    hdr = __ldg(reinterpret_cast<const uint4*>(r.scales) + (c >> 3));
  }
  __device__ void zero() { q = hdr = make_uint4(0, 0, 0, 0); }
  __device__ void decode(int64_t c, uint32_t (&h)[16]) const {
    float a, b;
    k256_affine(hdr, c, a, b);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint32_t w = words[t];
      h[2 * t] = affine_pair(a, b, w & 0xF, (w >> 8) & 0xF);
      h[2 * t + 1] = affine_pair(a, b, (w >> 16) & 0xF, (w >> 24) & 0xF);
      h[8 + 2 * t] = affine_pair(a, b, (w >> 4) & 0xF, (w >> 12) & 0xF);
      h[8 + 2 * t + 1] = affine_pair(a, b, (w >> 20) & 0xF, w >> 28);
    }
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
  __device__ void load(const RowPointers& r, int64_t c) {
    q = load_weights_16(r.quants + c * 16);
    crumbs = load_weights_8(r.high + c * 8);
    sc = __ldg(reinterpret_cast<const unsigned short*>(r.scales) + c);
    d = __ldg(reinterpret_cast<const unsigned short*>(r.super_) + (c >> 3));
  }
  __device__ void zero() {
    q = make_uint4(0, 0, 0, 0);
    crumbs = make_uint2(0, 0);
    sc = d = 0;
  }
  template <int t>
  __device__ __forceinline__ void half_word(uint32_t nib, uint32_t cr, float a,
                                            uint32_t* out) const {
    const uint32_t u = int6_assemble<t>(nib, cr) ^ 0x80808080u;
    const float b = -128.0f * a;
    out[0] = pack_half2(fmaf(a, small_uint_to_float(u & 0xFF), b),
                        fmaf(a, small_uint_to_float((u >> 8) & 0xFF), b));
    out[1] = pack_half2(fmaf(a, small_uint_to_float((u >> 16) & 0xFF), b),
                        fmaf(a, small_uint_to_float(u >> 24), b));
  }
  __device__ void decode(int64_t, uint32_t (&h)[16]) const {
    const float dd = half_bits_to_float(d) * 0.25f;
    const float a0 = dd * float(int8_t(sc & 0xFF)), a1 = dd * float(int8_t((sc >> 8) & 0xFF));
    half_word<0>(q.x, crumbs.x, a0, h + 0);
    half_word<1>(q.y, crumbs.x, a0, h + 2);
    half_word<2>(q.z, crumbs.x, a0, h + 4);
    half_word<3>(q.w, crumbs.x, a0, h + 6);
    half_word<0>(q.x >> 4, crumbs.y, a1, h + 8);
    half_word<1>(q.y >> 4, crumbs.y, a1, h + 10);
    half_word<2>(q.z >> 4, crumbs.y, a1, h + 12);
    half_word<3>(q.w >> 4, crumbs.y, a1, h + 14);
  }
};

template <>
struct Chunk<PackedFormat::Int8Sym32> {
  uint4 q[2];
  uint32_t d;
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 32;
    q[0] = load_weights_16(p);
    q[1] = load_weights_16(p + 16);
    d = __ldg(reinterpret_cast<const unsigned short*>(r.scales) + c);
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
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 32;
    q[0] = load_weights_16(p);
    q[1] = load_weights_16(p + 16);
    dm = __ldg(reinterpret_cast<const unsigned int*>(r.scales) + c);
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
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 32;
    q[0] = load_weights_16(p);
    q[1] = load_weights_16(p + 16);
    hdr = __ldg(reinterpret_cast<const uint4*>(r.scales) + (c >> 3));
  }
  __device__ void zero() { q[0] = q[1] = hdr = make_uint4(0, 0, 0, 0); }
  __device__ void decode(int64_t c, uint32_t (&h)[16]) const {
    float a, b;
    k256_affine(hdr, c, a, b);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const uint32_t words[4] = {q[p].x, q[p].y, q[p].z, q[p].w};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        h[8 * p + 2 * t] = affine_pair(a, b, words[t] & 0xFF, (words[t] >> 8) & 0xFF);
        h[8 * p + 2 * t + 1] = affine_pair(a, b, (words[t] >> 16) & 0xFF, words[t] >> 24);
      }
    }
  }
};

// F16 and F32: rows padded to 16 bytes, so every 16-byte piece that starts
// before `cols` may be loaded; values at k >= cols are zeroed.
template <>
struct Chunk<PackedFormat::F16> {
  uint4 q[4];
  int valid;  // values of this chunk below cols (0..32)
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 64;
    valid = r.cols - c * 32 < 32 ? int(r.cols - c * 32) : 32;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      q[i] = 8 * i < valid ? load_weights_16(p + 16 * i) : make_uint4(0, 0, 0, 0);
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
  __device__ void load(const RowPointers& r, int64_t c) {
    const uint8_t* p = r.quants + c * 128;
    valid = r.cols - c * 32 < 32 ? int(r.cols - c * 32) : 32;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      q[i] = 4 * i < valid ? load_weights_16(p + 16 * i) : make_uint4(0, 0, 0, 0);
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

// ---- the kernel ------------------------------------------------------------
// BM x BN tile, WM x WN warps, each warp (BM/WM) x (BN/WN) = FM x FN
// fragments of 16x16. Threads = 2*BN (one weight chunk each). x: thread t
// stages 8 consecutive floats (k = 8*(t%8) of the stage) of tile rows t/8,
// t/8 + T/8, ...: a warp reads 4 rows x 256 contiguous bytes per pass.
template <int BM, int BN, int WM, int WN>
struct TileShape {
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kFragsM = BM / WM / 16, kFragsN = BN / WN / 16;
  static constexpr int kXRowsPerPass = kThreads / 8;
  static constexpr int kXPasses = BM / kXRowsPerPass;
  static constexpr int kLdc = BN + 4;
  static constexpr size_t kPipeBytes = size_t(2) * (BM + BN) * kTileLd * sizeof(__half);
  static constexpr size_t kEpilogueBytes = size_t(BM) * kLdc * sizeof(float);
  static constexpr size_t kSmemBytes = kPipeBytes > kEpilogueBytes ? kPipeBytes : kEpilogueBytes;
  static_assert(kThreads == 2 * BN, "one weight chunk per thread");
  static_assert(kFragsM * WM * 16 == BM && kFragsN * WN * 16 == BN, "tile splits into warps");
  static_assert(kXPasses * kXRowsPerPass == BM, "x tile splits into threads");
};

// 8 floats at p..p+7 of which those at k + i < cols exist (p 16-byte aligned
// when vec): the careful path for tiles at the edges of x.
__device__ __forceinline__ void load_x8_edge(const float* p, int64_t k, int64_t cols, bool vec,
                                             float4& lo, float4& hi) {
  float v[8];
  if (vec && k + 8 <= cols) {
    lo = __ldg(reinterpret_cast<const float4*>(p));
    hi = __ldg(reinterpret_cast<const float4*>(p + 4));
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = k + i < cols ? p[i] : 0.0f;
  lo = make_float4(v[0], v[1], v[2], v[3]);
  hi = make_float4(v[4], v[5], v[6], v[7]);
}

// MinBlocks 2 caps registers at 128 so that two 128x128 blocks share an SM
// where shared memory allows (sm_80+: 2 x 72 KB); the V100 holds one.
template <PackedFormat F, int BM, int BN, int WM, int WN, int MinBlocks>
__global__ void __launch_bounds__(WM* WN * 32, MinBlocks) kernel_gemm_wmma(GemmArgs a, bool x_vec) {
  using S = TileShape<BM, BN, WM, WN>;
  constexpr int T = S::kThreads, FM = S::kFragsM, FN = S::kFragsN;
  constexpr int XP = S::kXPasses, XR = S::kXRowsPerPass;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sx = reinterpret_cast<__half*>(smem);  // [2][BM][kTileLd]
  __half* sw = sx + 2 * BM * kTileLd;            // [2][BN][kTileLd]

  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int m0 = blockIdx.x * BM;
  const int64_t n0 = int64_t(blockIdx.y) * BN;
  const int64_t rows = a.w.layout.rows, cols = a.w.layout.cols;
  const int64_t chunks = (cols + 31) / 32;
  const int stages = int((cols + kStageK - 1) / kStageK);

  // This thread's weight chunk: tile row wr, chunk wc of each stage.
  const int wr = tid >> 1, wc = tid & 1;
  const bool row_ok = n0 + wr < rows;
  const RowPointers w_row = row_pointers(a.w, row_ok ? n0 + wr : 0);
  // This thread's x pieces: tile rows xr + j*XR, k = xk .. xk+7 of the stage.
  const int xr = tid >> 3, xk = (tid & 7) * 8;
  const float* x_base = a.x + int64_t(m0 + xr) * a.ldx + xk;
  const int64_t x_pass = int64_t(XR) * a.ldx;
  const bool x_rows_full = x_vec && m0 + BM <= a.n;
  Chunk<F> chunk;
  float4 xv[2 * XP];

  auto load_stage = [&](int s) {
    const int64_t c = int64_t(s) * 2 + wc;
    if (row_ok && c < chunks)
      chunk.load(w_row, c);
    else
      chunk.zero();
    const int64_t k0 = int64_t(s) * kStageK;
    if (x_rows_full && k0 + kStageK <= cols) {  // the common case: no checks
#pragma unroll
      for (int j = 0; j < XP; ++j) {
        const float4* p = reinterpret_cast<const float4*>(x_base + j * x_pass + k0);
        xv[2 * j] = __ldg(p);
        xv[2 * j + 1] = __ldg(p + 1);
      }
    } else {
#pragma unroll
      for (int j = 0; j < XP; ++j) {
        xv[2 * j] = xv[2 * j + 1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (m0 + xr + j * XR < a.n)
          load_x8_edge(x_base + j * x_pass + k0, k0 + xk, cols, x_vec, xv[2 * j], xv[2 * j + 1]);
      }
    }
  };
  auto store_stage = [&](int s, int buf) {
    uint32_t h[16];
    chunk.decode(int64_t(s) * 2 + wc, h);
    uint4* dst = reinterpret_cast<uint4*>(sw + (buf * BN + wr) * kTileLd + wc * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dst[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
#pragma unroll
    for (int j = 0; j < XP; ++j) {
      const float4 lo = xv[2 * j], hi = xv[2 * j + 1];
      *reinterpret_cast<uint4*>(sx + (buf * BM + xr + j * XR) * kTileLd + xk) =
          make_uint4(pack_half2(lo.x, lo.y), pack_half2(lo.z, lo.w), pack_half2(hi.x, hi.y),
                     pack_half2(hi.z, hi.w));
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  load_stage(0);
  store_stage(0, 0);
  __syncthreads();
  for (int s = 0; s < stages; ++s) {
    const int buf = s & 1;
    const bool more = s + 1 < stages;
    if (more) load_stage(s + 1);  // in flight while the tensor cores work
    const __half* x_tile = sx + (buf * BM + wm * FM * 16) * kTileLd;
    const __half* w_tile = sw + (buf * BN + wn * FN * 16) * kTileLd;
#pragma unroll
    for (int kk = 0; kk < kStageK / 16; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[FN];
#pragma unroll
      for (int j = 0; j < FN; ++j)
        wmma::load_matrix_sync(b[j], w_tile + j * 16 * kTileLd + kk * 16, kTileLd);
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> xa;
        wmma::load_matrix_sync(xa, x_tile + i * 16 * kTileLd + kk * 16, kTileLd);
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], xa, b[j], acc[i][j]);
      }
    }
    if (more) store_stage(s + 1, buf ^ 1);
    __syncthreads();
  }

  // Epilogue through shared memory (the pipeline buffers are free now).
  float* sc = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
      wmma::store_matrix_sync(sc + (wm * FM * 16 + i * 16) * S::kLdc + wn * FN * 16 + j * 16,
                              acc[i][j], S::kLdc, wmma::mem_row_major);
  __syncthreads();
  for (int i = tid; i < BM * BN; i += T) {
    const int tm = i / BN, tn = i % BN;
    const int token = m0 + tm;
    const int64_t row = n0 + tn;
    if (token < a.n && row < rows) {
      float v = sc[tm * S::kLdc + tn];
      if (a.bias) v += a.bias[row];
      float* dst = a.y + int64_t(token) * a.ldy + row;
      if (a.accumulate) v += *dst;
      *dst = v;
    }
  }
}

template <PackedFormat F, int BM, int BN, int WM, int WN, int MinBlocks = 1>
void launch_tile(const GemmArgs& a, cudaStream_t stream) {
  using S = TileShape<BM, BN, WM, WN>;
  auto kernel = kernel_gemm_wmma<F, BM, BN, WM, WN, MinBlocks>;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once).
  static const bool opted_in = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(S::kSmemBytes)));
    return true;
  }();
  (void)opted_in;
  const bool x_vec = a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const dim3 grid(unsigned((a.n + BM - 1) / BM), unsigned((a.w.layout.rows + BN - 1) / BN));
  kernel<<<grid, S::kThreads, S::kSmemBytes, stream>>>(a, x_vec);
  CUDA_CHECK(cudaGetLastError());
}

template <PackedFormat F>
void launch_format(const GemmArgs& a, GemmTile tile, cudaStream_t stream) {
  switch (tile) {
    case GemmTile::T32x64:
      return launch_tile<F, 32, 64, 1, 4>(a, stream);
    case GemmTile::T64x128:
      return launch_tile<F, 64, 128, 2, 4>(a, stream);
    case GemmTile::T128x128Occ2:
      return launch_tile<F, 128, 128, 2, 4, 2>(a, stream);
    case GemmTile::T128x128:
    case GemmTile::Auto:
      return launch_tile<F, 128, 128, 2, 4>(a, stream);
  }
}

int device_sm_count() {
  int device = 0, count = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

}  // namespace

GemmTile gemm_pick_tile(int n, int64_t rows) {
  static const int sms = device_sm_count();
  // Cost model: waves of blocks times the work of one block, over a
  // relative efficiency of the tile (smaller tiles re-read more and keep the
  // tensor cores less busy). One resident block per SM for the 8-warp
  // tiles, two for the 4-warp one.
  struct Option {
    GemmTile tile;
    int bm, bn, per_sm;
    double efficiency;
  };
  const Option options[] = {{GemmTile::T128x128, 128, 128, 1, 1.0},
                            {GemmTile::T64x128, 64, 128, 1, 0.8},
                            {GemmTile::T32x64, 32, 64, 2, 0.55}};
  GemmTile best = GemmTile::T128x128;
  double best_cost = 0.0;
  for (const Option& o : options) {
    const int64_t blocks = (n + o.bm - 1) / o.bm * ((rows + o.bn - 1) / o.bn);
    const int64_t waves = (blocks + int64_t(sms) * o.per_sm - 1) / (int64_t(sms) * o.per_sm);
    const double cost = double(waves) * o.bm * o.bn * o.per_sm / o.efficiency;
    if (best_cost == 0.0 || cost < best_cost) best = o.tile, best_cost = cost;
  }
  return best;
}

void launch_gemm(const GemmArgs& a, cudaStream_t stream) {
  launch_gemm(a, GemmTile::Auto, stream);
}

void launch_gemm(const GemmArgs& a, GemmTile tile, cudaStream_t stream) {
  const PackedLayout& l = a.w.layout;
  VOLTAD_KERNEL_REQUIRE(a.n >= 1 && a.x && a.y && a.w.data, "gemm: n >= 1 and buffers");
  VOLTAD_KERNEL_REQUIRE(l.rows >= 1 && l.cols >= 1 && l.cols % packed_block_elems(l.format) == 0,
                        "gemm: cols a multiple of the format's block");
  VOLTAD_KERNEL_REQUIRE(a.ldx >= l.cols && a.ldy >= l.rows, "gemm: row strides");
  VOLTAD_KERNEL_REQUIRE((l.rows + 63) / 64 <= 65535, "gemm: too many rows for the grid");
  if (tile == GemmTile::Auto) tile = gemm_pick_tile(a.n, l.rows);
  switch (l.format) {
    case PackedFormat::Int4Sym32:
      return launch_format<PackedFormat::Int4Sym32>(a, tile, stream);
    case PackedFormat::Int4Affine32:
      return launch_format<PackedFormat::Int4Affine32>(a, tile, stream);
    case PackedFormat::Int4K256:
      return launch_format<PackedFormat::Int4K256>(a, tile, stream);
    case PackedFormat::Int6K256:
      return launch_format<PackedFormat::Int6K256>(a, tile, stream);
    case PackedFormat::Int8Sym32:
      return launch_format<PackedFormat::Int8Sym32>(a, tile, stream);
    case PackedFormat::Int8Affine32:
      return launch_format<PackedFormat::Int8Affine32>(a, tile, stream);
    case PackedFormat::Int8K256:
      return launch_format<PackedFormat::Int8K256>(a, tile, stream);
    case PackedFormat::F16:
      return launch_format<PackedFormat::F16>(a, tile, stream);
    case PackedFormat::F32:
      return launch_format<PackedFormat::F32>(a, tile, stream);
  }
}

}  // namespace voltad::kernels
