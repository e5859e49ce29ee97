// The sm_80 narrow GEMM's (kernels/gemm_narrow_sm80.cu) block sizes and
// shared memory, and its weight decoders: one row's chunk word to the four
// FP16 pairs a lane feeds mma.m16n8k16, for Int4Sym32 (Q4_0), Int4K256
// (Q4_K) and Int6K256 (Q6_K). The order of values along k, and why each
// conversion is exact, are told in gemm_narrow_sm80.cu's opening comment
// and beside each decoder.
#pragma once

#include <cuda_fp16.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gemm_decode.cuh"
#include "kernels/gemm_wmma.h"
#include "kernels/matvec_format.h"

namespace voltad::kernels::narrow80 {

constexpr int kRows = 32;                         // weight rows per block: two m16 tiles
constexpr int kStageChunks = 4;                   // chunks (32 values) per stage
constexpr int kQuantLd = kStageChunks * 16 + 16;  // bytes per row in a slot (80: the
                                                  // 8 rows a load reads hit distinct banks)
constexpr int kMaxTokens = 32;
// Warps per block W (they split k): 8, or 16 where the blocks would not
// fill the SMs once (a 4096-row matrix: 128 blocks). Blocks an SM B, the
// kernel's __launch_bounds__: 1 with 16 warps, else 2, or 3 for 5-8 tokens
// of 4-bit weights (NarrowOneTile, below: 80 registers a thread). Ring
// depth per warp S: 4 stages with 8 warps and 2 blocks of 4-bit weights,
// else 3 (shared memory: three blocks of 72 KiB share an H200 SM's 228
// KiB). A Q6_K slot is 4 KiB: its 8x2 ring has 3 stages (96 KiB) where two
// such blocks fit an SM, else 4 (128 KiB, one block an SM; q6k_ring).
template <PackedFormat F, int W, int B>
constexpr int stages_for() {
  return W == 8 && B == 2 && F != PackedFormat::Int6K256 ? 4 : 3;
}

// Extra bytes per row per stage besides the quants: Int4Sym32 4 fp16 d;
// Int4K256 the super-block's 16-byte header; Int6K256 4 x 8 bytes of
// crumbs, 4 x 2 int8 sc, and the 4-byte word holding the fp16 d.
template <PackedFormat F>
constexpr int extra_ld() {
  return F == PackedFormat::Int4Sym32 ? 8 : F == PackedFormat::Int4K256 ? 16 : 48;
}
template <PackedFormat F>
constexpr size_t slot_bytes() {
  return size_t(kRows) * (kQuantLd + extra_ld<F>());
}
// Where RW > 1 warps of a block split rows (kernel_narrow_sm80), each group
// of them that shares a range of k reads x once a stage into a ring of its
// own: the stage's fp16 fragments of x (4 chunks x n8 tokens x 64 bytes),
// then for Int4K256 their x sums (4 chunks of n8 tokens x 4 bytes, each
// chunk's padded by 8 words so that the lanes t = 0-3 reading chunk t's
// sums of 8 tokens hit 32 banks).
template <PackedFormat F, int NT>
constexpr int x_stage_bytes() {
  const int sums = F == PackedFormat::Int4K256 ? kStageChunks * (NT * 8 + 8) * 4 : 0;
  return kStageChunks * NT * 8 * 64 + sums;
}
template <PackedFormat F, int NT, int W, int B, int S = stages_for<F, W, B>(), int RW = 1>
constexpr size_t smem_bytes() {
  constexpr int kGroups = W / RW;  // warps that split k
  const size_t x_ring = RW > 1 ? size_t(kGroups) * S * x_stage_bytes<F, NT>() : 0;
  const size_t pipe = size_t(W) * S * slot_bytes<F>() + x_ring;
  const size_t red = size_t(kGroups) * NT * 8 * (kRows * RW + 4) * sizeof(float);  // partial sums
  return pipe > red ? pipe : red;
}

// Bit casts and packing: the portable decoders' own (gemm_decode.cuh).
using gemm_decode::half2_as_u32;
using gemm_decode::mask_or;
using gemm_decode::mask_or_reg;
using gemm_decode::mask_xor;
using gemm_decode::u32_as_half2;

// The low nibbles of bytes 0 and 2 of w as the FP16 pair 1024 + q (exponent
// 0x64: a unit in the last place of 1), and the high nibbles of the same
// bytes, where they lie, as 64 + q (exponent 0x54: a unit in the last place
// of 1/16, so bits 4-7 count whole units): no shift for either.
__device__ __forceinline__ uint32_t low_nibbles(uint32_t w) {
  return mask_or<0x000F000Fu, 0x64006400u>(w);
}
__device__ __forceinline__ uint32_t high_nibbles(uint32_t w) {
  return mask_or<0x00F000F0u, 0x54005400u>(w);
}

// The decoders below give the four FP16 pairs of one row and chunk a lane
// feeds the MMAs, from w, the chunk's word t: v[0] = values (4t, 4t+2),
// v[1] = (4t+1, 4t+3) for the first MMA (k 2t, 2t+1 and 2t+8, 2t+9), v[2]
// and v[3] the same 16 on for the second: the low nibbles of w's bytes 0
// and 2 are v[0], of bytes 1 and 3 (w >> 8) v[1]; the high nibbles v[2] and
// v[3]. `row_extra` the row's extra bytes in the slot; cc the chunk's index
// in the stage.

// Int4Sym32 (Q4_0), w = d * (q - 8): in FP16, exact for the portable
// decoder's values.
__device__ __forceinline__ void decode_q4_0(uint32_t w, const uint8_t* row_extra, int cc,
                                            uint32_t (&v)[4]) {
  const uint16_t d = reinterpret_cast<const uint16_t*>(row_extra)[cc];
  const __half2 d2 = __halves2half2(__ushort_as_half(d), __ushort_as_half(d));
  const __half2 low_off = u32_as_half2(0x64086408u);   // 1024 + 8
  const __half2 high_off = u32_as_half2(0x54805480u);  // 64 + 8
  const uint32_t w8 = w >> 8;
  auto scale = [&](uint32_t bits, __half2 off) {  // q - 8 exact, then one rounding
    return half2_as_u32(__hmul2(__hsub2(u32_as_half2(bits), off), d2));
  };
  v[0] = scale(low_nibbles(w), low_off);
  v[1] = scale(low_nibbles(w8), low_off);
  v[2] = scale(high_nibbles(w), high_off);
  v[3] = scale(high_nibbles(w8), high_off);
}

// Int4K256 (Q4_K), w = D*sc*q - M*mn with six-bit sc, mn per chunk (a
// sub-block of 32) and fp16 D, M per super-block of 8 chunks. The MMAs take
// sc*q, an integer below 1024 and so exact in FP16, and sum a stage's four
// chunks in FP32; the mins are a second product, sum over the stage's chunks
// of mn * (sum of the chunk's x), by one more MMA per tile with each chunk's
// x sum (scaled by 1/64, kernels/narrow_x.cuh) split into two FP16 halves
// (hi + lo, ~22 bits); then, once per stage, acc += D*(sc*q.x) -
// 64*M*(mn.xsum). No weight is rounded: the result
// is the reference's sum with x rounded to FP16, as for the other formats.
// From a row's header (16 bytes: D, M, 12 bytes of six-bit fields), the
// stage's four sc (with `mins`: mn) one per byte; `upper` says which half of
// the super-block the stage holds (chunks 0-3 or 4-7). As q4_k_scale_min:
// sub-block j < 4 takes the low six bits of byte 4 + j (mn: 8 + j); j >= 4
// the low (mn: high) nibble of byte 12 + j - 4 and the top two bits of byte
// j (mn: 4 + j).
__device__ __forceinline__ uint32_t k256_six_bits(const uint4& h, bool upper, bool mins) {
  const uint32_t lo = mins ? h.z : h.y;  // header bytes 8-11 : 4-7
  if (!upper) return lo & 0x3F3F3F3Fu;
  return ((mins ? h.w >> 4 : h.w) & 0x0F0F0F0Fu) | ((lo >> 2) & 0x30303030u);
}
__device__ __forceinline__ float k256_d(const uint4& h, bool mins) {
  return __half2float(__ushort_as_half((unsigned short)(mins ? h.x >> 16 : h.x & 0xFFFF)));
}
// Byte b of v, a small integer, as an exact FP16 pair: one byte permute
// puts it below the exponent byte 0x64 (the FP16 1024 + b), one HSUB2
// takes 1024 away.
__device__ __forceinline__ __half2 byte_as_half2(uint32_t v, int b) {
  const uint32_t two = __byte_perm(v, 0x64646464u, 0x4040u | uint32_t(b) | (uint32_t(b) << 8));
  return __hsub2(u32_as_half2(two), u32_as_half2(0x64006400u));
}
// The four pairs of sc*q a lane feeds the MMAs (order as in decode_q4_0):
// one fused (1024 + q)*sc - 1024*sc each; exact (the results are integers
// below 1024). kInPlace: the high nibbles as (64 + q)*sc - 64*sc, without a
// shift but with one more register (-64*sc) a row, which the kernels of 4
// token tiles cannot spare (284 bytes spilled at 8 warps; 3 tiles spill
// nothing since the chunk's word is read whole, run 22).
template <bool kInPlace>
__device__ __forceinline__ void decode_sc_q(uint32_t w, __half2 sc, uint32_t (&v)[4]) {
  const __half2 nsc = __hmul2(sc, u32_as_half2(0xE400E400u));  // -1024*sc, exact
  const uint32_t w8 = w >> 8;
  v[0] = half2_as_u32(__hfma2(u32_as_half2(low_nibbles(w)), sc, nsc));
  v[1] = half2_as_u32(__hfma2(u32_as_half2(low_nibbles(w8)), sc, nsc));
  if constexpr (kInPlace) {
    const __half2 nsc64 = __hmul2(sc, u32_as_half2(0xD400D400u));  // -64*sc, exact
    v[2] = half2_as_u32(__hfma2(u32_as_half2(high_nibbles(w)), sc, nsc64));
    v[3] = half2_as_u32(__hfma2(u32_as_half2(high_nibbles(w8)), sc, nsc64));
  } else {
    v[2] = half2_as_u32(__hfma2(u32_as_half2(low_nibbles(w >> 4)), sc, nsc));
    v[3] = half2_as_u32(__hfma2(u32_as_half2(low_nibbles(w8 >> 4)), sc, nsc));
  }
}

// Int6K256 (Q6_K), w = d*sc*(q - 32) with an int8 sc per half of 16 values
// and an fp16 d per super-block: each m16n8k16 MMA covers exactly one half,
// so the MMAs take q - 32 (exact in FP16) and the scale d*sc (exact in FP32)
// multiplies each MMA's result. The low nibbles are as in Int4 (of the six-
// bit two's complement of q - 32); the top two bits of value 4g+j of a half
// are bits 8j+2g of the half's crumb word, so values 4t, 4t+1, 4t+2, 4t+3
// of a half have theirs at bits 0, 8, 16, 24 of the word shifted right by
// 2t. The crumbs go above the nibbles, where those lie (low_nibbles, high_nibbles): bits 4-5
// for the first half (1024 + u), bits 8-9 for the second (64 + u), u the
// six-bit field; flipping its top bit (XOR with 0x6420 or 0x5600, which also
// sets the exponent) gives 1024 + q or 64 + q, q = u ^ 32 in 0..63, and one
// HSUB2 of the same constant (1056 or 96) gives q - 32.
// v in the order above (v[0], v[1]: the first half, k 0-15); scale[h] = d*sc of
// half h. d_half: which half of the copied 4-byte word holds d.
__device__ __forceinline__ void decode_q6(uint32_t w, const uint8_t* row_extra, int cc, int t,
                                          int d_half, uint32_t (&v)[4], float (&scale)[2]) {
  const uint2 crumbs = reinterpret_cast<const uint2*>(row_extra)[cc];
  const uint16_t sc = reinterpret_cast<const uint16_t*>(row_extra + 32)[cc];
  const uint32_t dword = *reinterpret_cast<const uint32_t*>(row_extra + 40);
  const float d = __half2float(__ushort_as_half((unsigned short)(dword >> (16 * d_half))));
  const uint32_t w8 = w >> 8;
  constexpr uint32_t kLow = 0x64206420u;   // FP16 pair 1056: 0x6400 | bit 5
  constexpr uint32_t kHigh = 0x56005600u;  // FP16 pair 96: 0x5400 | bit 9
  // The crumbs of values 4t+j of the first half at bits 8j, 8j+1 of z0, of
  // the second half of z1.
  const uint32_t z0 = crumbs.x >> (2 * t), z1 = crumbs.y >> (2 * t);
  auto q_minus_32 = [](uint32_t bits, uint32_t k) {
    return half2_as_u32(__hsub2(u32_as_half2(bits), u32_as_half2(k)));
  };
  v[0] = q_minus_32(mask_or_reg<0x000F000Fu>(w, mask_xor<0x00300030u, kLow>(z0 << 4)), kLow);
  v[1] = q_minus_32(mask_or_reg<0x000F000Fu>(w8, mask_xor<0x00300030u, kLow>(z0 >> 4)), kLow);
  v[2] = q_minus_32(mask_or_reg<0x00F000F0u>(w, mask_xor<0x03000300u, kHigh>(z1 << 8)), kHigh);
  v[3] = q_minus_32(mask_or_reg<0x00F000F0u>(w8, mask_xor<0x03000300u, kHigh>(z1)), kHigh);
  scale[0] = d * float(int8_t(sc));
  scale[1] = d * float(int8_t(sc >> 8));
}

// x (a.n rows of a.ldx, a.w.layout.cols columns) into the scratch at xp in
// the GEMM's layout (kernels/narrow_x_sm80.cu).
void launch_x_to_fragments(const GemmArgs& a, uint32_t* xp, cudaStream_t stream);

}  // namespace voltad::kernels::narrow80
