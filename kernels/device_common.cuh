// Device helpers shared by every kernel family: reductions, vector loads, and
// the decoders of the packed weight formats (kernels/matvec_format.h,
// docs/FORMAT.md). Only what sm_70 has: shuffles, dp4a, 16-byte loads.
#pragma once

#include <cuda_fp16.h>
#include <cstdint>

#include "kernels/matvec_format.h"

namespace voltad::kernels {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- reductions ----------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the total. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x >> 5;
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

// ---- loads ---------------------------------------------------------------

// Weights are read once per step: 16 (or 8) bytes per lane and no L1
// allocation, so the activations, which every warp of the SM re-reads, stay
// in L1 (measured on the H200: 3-15% faster matvecs; docs/KERNEL-NOTES.md).
// Plain (weak) loads, not the read-only path (.nc), and volatile: a matvec
// issues its first weight loads before its PDL wait (launch.cuh), and ptxas
// moves .nc loads freely across griddepcontrol.wait, which had sunk them
// below the wait in the int8 matvecs; a weak load stays on its side of it.
// VOLTAD_WEIGHTS_NC=1 brings back ld.global.nc, VOLTAD_WEIGHTS_VIA_L1=1 plain
// __ldg, for comparison. L1::no_allocate is PTX ISA 7.4 and sm_70+.
#if defined(VOLTAD_WEIGHTS_NC) && VOLTAD_WEIGHTS_NC
#define VOLTAD_WEIGHT_LOAD "ld.global.nc.L1::no_allocate"
#else
#define VOLTAD_WEIGHT_LOAD "ld.global.L1::no_allocate"
#endif
__device__ __forceinline__ uint4 load_weights_16(const uint8_t* p) {
#if defined(VOLTAD_WEIGHTS_VIA_L1) && VOLTAD_WEIGHTS_VIA_L1
  return __ldg(reinterpret_cast<const uint4*>(p));
#else
  uint4 v;
  asm volatile(VOLTAD_WEIGHT_LOAD ".v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}
__device__ __forceinline__ uint2 load_weights_8(const uint8_t* p) {
#if defined(VOLTAD_WEIGHTS_VIA_L1) && VOLTAD_WEIGHTS_VIA_L1
  return __ldg(reinterpret_cast<const uint2*>(p));
#else
  uint2 v;
  asm volatile(VOLTAD_WEIGHT_LOAD ".v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
#endif
}
#undef VOLTAD_WEIGHT_LOAD
__device__ __forceinline__ float load_half(const uint8_t* p) {
  return __half2float(__ldg(reinterpret_cast<const __half*>(p)));
}
__device__ __forceinline__ float2 load_half2(const uint8_t* p) {
  return __half22float2(__ldg(reinterpret_cast<const __half2*>(p)));
}

// Activations and caches: data the kernel just before this one writes, which
// under programmatic dependent launch may still be running when this one
// starts. They are read with plain loads (ld.global: weak, cached in L1),
// never through the read-only path: ptxas takes ld.global.nc data as
// constant for the kernel's whole life and moves such loads above
// griddepcontrol.wait (seen in the int8 and int6 matvecs at batch >= 3,
// where x was read before the quantizer had written it;
// tests/kernels/test_matvec.cpp "decode matvecs under PDL"). __ldg is for
// data no kernel writes: weights, scales, tables.
template <class T>
__device__ __forceinline__ T load_activation(const T* p) {
  return *p;
}

// ---- integer dot products to float ---------------------------------------
// I2F runs at a quarter of the FP32 rate or less; for |i| < 2^22 adding i to
// the bits of 1.5*2^23 and subtracting 1.5*2^23 again is exact and costs an
// integer add and a float add (full rate). dp4a sums of one 32-value chunk
// stay far below: |sum| <= 32 * 128 * 127 < 2^20.
__device__ __forceinline__ float small_int_to_float(int i) {
  return __int_as_float(0x4B400000 + i) - 12582912.0f;
}

// ---- Int4 decode (Int4Sym32, Int4Affine32, Int4K256) ----------------------
// quants: 16 bytes per chunk of 32 values; byte i = value i (bits 0-3) |
// value i+16 (bits 4-7), q in 0..15. As 32-bit words t = 0..3:
//   w_t & 0x0F0F0F0F        -> values 4t..4t+3 as bytes (first half)
//   (w_t >> 4) & 0x0F0F0F0F -> values 16+4t..16+4t+3      (second half)
// which is the byte order of the int8 activations, ready for dp4a.
// The value is a*q + b with (a, b) per chunk:
//   Int4Sym32    scales: fp16 d per chunk         a = d,      b = -8d
//   Int4Affine32 scales: fp16 {d, m} per chunk    a = d,      b = m
//   Int4K256     scales: 16 bytes per 8 chunks, Q4_K's header verbatim:
//                fp16 D, fp16 M, 12 bytes of six-bit (sc, mn) pairs
//                                                  a = D*sc,   b = -M*mn
__device__ __forceinline__ void int4_unpack(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = w & 0x0F0F0F0Fu;
  hi = (w >> 4) & 0x0F0F0F0Fu;
}

// Six-bit scale and min of sub-block j (0..7) from Q4_K's packed bytes, held
// as three little-endian words s0 = bytes 0-3, s1 = 4-7, s2 = 8-11:
//   j < 4:  sc = byte j of s0 & 63, mn = byte j of s1 & 63
//   j >= 4: sc = (byte j-4 of s2 & 15) | (byte j-4 of s0 >> 6) << 4
//           mn = (byte j-4 of s2 >> 4) | (byte j-4 of s1 >> 6) << 4
__device__ __forceinline__ void q4_k_scale_min(uint32_t s0, uint32_t s1, uint32_t s2, int j,
                                               int& sc, int& mn) {
  const int shift = 8 * (j & 3);
  const int b0 = (s0 >> shift) & 0xFF, b1 = (s1 >> shift) & 0xFF, b2 = (s2 >> shift) & 0xFF;
  if (j < 4) {
    sc = b0 & 63;
    mn = b1 & 63;
  } else {
    sc = (b2 & 0x0F) | ((b0 >> 6) << 4);
    mn = (b2 >> 4) | ((b1 >> 6) << 4);
  }
}

// ---- Int8 decode (Int8Sym32, Int8Affine32, Int8K256) ----------------------
// quants: one byte per value in natural order, 16 values per 16-byte piece,
// read by dp4a as they are. value = a*q + b per group of 32:
//   Int8Sym32    q int8 (Q8_0's q, Q5_0's q-16); fp16 d     a = d,    b = 0
//   Int8Affine32 q in 0..31 (Q5_1);        fp16 {d, m}      a = d,    b = m
//   Int8K256     q in 0..31 (Q5_K); Q4_K's 16-byte header   a = D*sc, b = -M*mn
//                per 256 (see Int4K256)

// ---- Int6 decode (Int6K256, from Q6_K) -------------------------------------
// quants: the low nibbles of v = (q-32) as a six-bit two's complement, in the
// Int4 order. high: 8 bytes per chunk of 32, a word per half of 16 values;
// the top two bits of value 4g+j of a half sit at bits 8j+2g. Assembled in
// registers into int8 bytes holding 4*(q-32) (nibble at bits 2-5, crumb at
// bits 6-7: the sign lands in the sign bit), so dp4a yields 4x the integer
// dot product and the scale carries the 1/4. scales: int8 sc per 16 values;
// super: fp16 d per 256; w = d*sc*(q-32).
// Word t (values 4t..4t+3 of the half) from a nibble word (already shifted so
// the wanted nibbles sit in bits 0-3 of each byte) and the half's crumb word:
template <int t>
__device__ __forceinline__ uint32_t int6_assemble(uint32_t nibbles, uint32_t crumbs) {
  return ((nibbles << 2) & 0x3C3C3C3Cu) | ((crumbs << (6 - 2 * t)) & 0xC0C0C0C0u);
}

// ---- two-level activations (kernels/matvec.h) ------------------------------
// The Int* matvecs take x ~= d1*q1 + d2*q2 per block of 32: a second set of
// dp4a against q2. VOLTAD_MATVEC_ONE_LEVEL=1 (kernels/dev/bench_matvec.cu
// only: the result is then wrong by the first level's error) skips the q2
// loads and dp4a, to time what the second level costs.
#ifndef VOLTAD_MATVEC_ONE_LEVEL
#define VOLTAD_MATVEC_ONE_LEVEL 0
#endif
// VOLTAD_MATVEC_X_LANE_MAJOR=1 (kernels/dev/bench_stream.cu only: the
// result is then wrong) reads x's 64 bytes a chunk from a layout in which
// each of a warp's four 16-byte loads is 512 contiguous bytes (chunk c's
// piece p at 2048 (c / 32) + 512 p + 16 (c % 32)), where the real layout
// has each lane's 64 bytes together (16 cache lines a load): the same
// bytes, a quarter of the L1 wavefronts, to time what the pattern costs.
#ifndef VOLTAD_MATVEC_X_LANE_MAJOR
#define VOLTAD_MATVEC_X_LANE_MAJOR 0
#endif

// ---- matvec launch shape and epilogue -------------------------------------
// Every matvec runs blocks of 4 warps, each warp owning R consecutive rows,
// or, sliced (S = 2), S warps sharing R rows, each over every S-th
// group of 32 chunks of the columns (MatvecArgs::slices).
constexpr int kMatvecWarpsPerBlock = 4;

inline unsigned matvec_grid(int64_t rows, int rows_per_warp, int slices = 1) {
  const int64_t groups = (rows + rows_per_warp - 1) / rows_per_warp;
  const int64_t per_block = kMatvecWarpsPerBlock / slices;
  return unsigned((groups + per_block - 1) / per_block);
}

// Asks L2 for the 128-byte lines of [p, p + bytes), lane by lane: no
// register waits for them, so a warp issues them and goes on.
__device__ __forceinline__ void prefetch_l2(const uint8_t* p, int64_t bytes, int lane) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes);
  for (uintptr_t line = (reinterpret_cast<uintptr_t>(p) & ~uintptr_t(127)) + 128u * lane;
       line < end; line += 32u * 128u)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
}

// One 128-byte line of L2, asked for by one lane.
__device__ __forceinline__ void prefetch_l2_line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Each lane of a warp holds partial sums acc[r][b] for rows row0+r and batch
// row b; the warp reduces them and one lane per value writes
// y[b][row] = sum + bias[row] (+ y[b][row] when accumulating).
template <int R, int B>
__device__ __forceinline__ void matvec_store(float (&acc)[R][B], int64_t row0, int64_t rows,
                                             float* y, int64_t ldy, const float* bias,
                                             bool accumulate) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const float v = warp_sum(acc[r][b]);
      const int64_t row = row0 + r;
      if (lane == (r * B + b) % 32 && row < rows) {
        float out = v;
        if (bias) out += bias[row];
        float* dst = y + b * ldy + row;
        if (accumulate) out += *dst;
        *dst = out;
      }
    }
  }
}

// matvec_store for S warps sharing rows (S = 1: the same). Each warp sums
// its lanes, the block meets in shared memory, and the first warp of each
// group adds the S partial sums in slice order (the same bits every run).
// Every warp of the block must call it: it synchronizes the block. kAgain:
// the block calls it again (a kernel that walks several row groups), so it
// synchronizes once more before it returns. W: the block's warps.
template <int R, int B, int S, bool kAgain = false, int W = kMatvecWarpsPerBlock>
__device__ __forceinline__ void matvec_store_sliced(float (&acc)[R][B], int64_t row0, int64_t rows,
                                                    float* y, int64_t ldy, const float* bias,
                                                    bool accumulate) {
  if constexpr (S == 1) {
    matvec_store<R, B>(acc, row0, rows, y, ldy, bias, accumulate);
  } else {
    static_assert(W % S == 0 && R * B <= 32, "slices or outputs per warp");
    __shared__ float part[W][R * B];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const float v = warp_sum(acc[r][b]);
        if (lane == 0) part[warp][r * B + b] = v;
      }
    __syncthreads();
    if (warp % S == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < B; ++b) {
          const int64_t row = row0 + r;
          if (lane != r * B + b || row >= rows) continue;
          float out = part[warp][r * B + b];
#pragma unroll
          for (int k = 1; k < S; ++k) out += part[warp + k][r * B + b];
          if (bias) out += bias[row];
          float* dst = y + b * ldy + row;
          if (accumulate) out += *dst;
          *dst = out;
        }
    }
    if constexpr (kAgain) __syncthreads();  // `part` is written again next
  }
}

// ---- one value of any packed format (embedding gather, tests) ------------
// Scalar and slow: the reference shape of each decode above, used where a
// row is decoded once (token embeddings), not in the matvecs.
__device__ __forceinline__ float packed_value(const PackedMatrixView& m, int64_t row, int64_t k) {
  const PackedLayout& l = m.layout;
  const uint8_t* q = m.data + l.quants_offset + row * l.quant_row_bytes;
  const uint8_t* s = m.data + l.scales_offset + row * l.scale_row_bytes;
  const int i = int(k & 31);
  const int nib = (q[(k >> 5) * 16 + (i & 15)] >> (i < 16 ? 0 : 4)) & 0x0F;
  switch (l.format) {
    case PackedFormat::Int4Sym32:
      return float(nib - 8) * load_half(s + 2 * (k >> 5));
    case PackedFormat::Int4Affine32: {
      const float2 dm = load_half2(s + 4 * (k >> 5));
      return float(nib) * dm.x + dm.y;
    }
    case PackedFormat::Int4K256: {
      const uint8_t* h = s + 16 * (k >> 8);
      int sc, mn;
      q4_k_scale_min(*reinterpret_cast<const uint32_t*>(h + 4),
                     *reinterpret_cast<const uint32_t*>(h + 8),
                     *reinterpret_cast<const uint32_t*>(h + 12), int(k >> 5) & 7, sc, mn);
      return load_half(h) * float(sc) * float(nib) - load_half(h + 2) * float(mn);
    }
    case PackedFormat::Int6K256: {
      const uint8_t* hi = m.data + l.high_offset + row * l.high_row_bytes;
      const uint8_t* sup = m.data + l.super_offset + row * l.super_row_bytes;
      const uint32_t h = *reinterpret_cast<const uint32_t*>(hi + (k >> 5) * 8 + 4 * (i >> 4));
      const int crumb = int(h >> (8 * (i & 3) + 2 * ((i & 15) >> 2))) & 3;
      const int v6 = nib | (crumb << 4);
      const int value = v6 >= 32 ? v6 - 64 : v6;
      return (load_half(sup + 2 * (k >> 8)) * float(int8_t(s[k >> 4]))) * float(value);
    }
    case PackedFormat::Int8Sym32:
      return float(int8_t(q[k])) * load_half(s + 2 * (k >> 5));
    case PackedFormat::Int8Affine32: {
      const float2 dm = load_half2(s + 4 * (k >> 5));
      return float(int8_t(q[k])) * dm.x + dm.y;
    }
    case PackedFormat::Int8K256: {
      const uint8_t* h = s + 16 * (k >> 8);
      int sc, mn;
      q4_k_scale_min(*reinterpret_cast<const uint32_t*>(h + 4),
                     *reinterpret_cast<const uint32_t*>(h + 8),
                     *reinterpret_cast<const uint32_t*>(h + 12), int(k >> 5) & 7, sc, mn);
      return load_half(h) * float(sc) * float(q[k]) - load_half(h + 2) * float(mn);
    }
    case PackedFormat::F16:
      return load_half(q + 2 * k);
    case PackedFormat::F32:
      return reinterpret_cast<const float*>(q)[k];
  }
  return 0.0f;
}

}  // namespace voltad::kernels
