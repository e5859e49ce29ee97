// The sm_80+ narrow GEMM's block body (kernels/gemm_narrow_sm80.cu, whose
// header describes the design): a block's row block, its warps' rings of
// weight stages, the MMAs per format, the partial sums' meeting and, where
// gridDim.y blocks split k, the last block's sums. Included by that file
// only; the kernels that call it (one matrix, or a pair) live there.
#pragma once

#include <cuda_fp16.h>

#include "kernels/device_common.cuh"
#include "kernels/gemm_decode.cuh"
#include "kernels/gemm_sm80.h"
#include "kernels/launch.cuh"
#include "kernels/narrow_sm80.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels::narrow80 {

using sm80::copy_async;
using sm80::copy_commit;
using sm80::copy_wait;

// Block sizes, shared memory and the weight decoders: kernels/narrow_sm80.cuh.

using sm80::mma_16816;
using sm80::mma_16816_first;

// Where gridDim.y blocks split k (kSplit; gemm_narrow_sm80_split_bytes): an
// arrival counter per row block (zero between launches), then each block's
// sums, kMaxTokens x kRows floats at (row block * gridDim.y + split).
struct NarrowSplit {
  uint32_t* arrivals = nullptr;
  float* sums = nullptr;
};
constexpr size_t kSplitSums = size_t(kMaxTokens) * kRows;  // floats a block

// NT = n8 / 8 token tiles; W warps a block, built for B blocks an SM; S
// stages a warp's ring; kSplit: gridDim.y blocks split k (only the kernels
// launch_warps splits take it: the others stay as they were, register for
// register). RW: warps that split the block's rows, 32 each (the block has
// 32 * RW rows; the W / RW groups of them split k). With RW > 1 a group's
// x comes through a ring in shared memory, copied once a stage for all its
// warps (x_stage_bytes), instead of each warp reading it from L2 itself;
// the group's warps then keep in step, a named barrier a stage.
// bx: the block's row block (blockIdx.x, or its place in a pair's part).
template <PackedFormat F, int NT, int W, int B, int S, bool kSplit, int RW>
__device__ __forceinline__ void narrow_blocks(const GemmArgs& a, const uint32_t* xp,
                                              const NarrowSplit& split, int64_t bx) {
  static_assert(W % RW == 0 && (RW == 1 || !kSplit), "row warps: a whole group, no split");
  constexpr int kN8 = NT * 8;
  constexpr int kExtra = extra_ld<F>();
  constexpr int kGroups = W / RW;  // warps, or groups of RW warps, that split k
  constexpr bool kSharedX = RW > 1;
  constexpr int kBlockRows = kRows * RW;
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int rg = warp % RW, kg = warp / RW;  // the warp's rows, its share of k
  const PackedLayout& l = a.w.layout;
  const int64_t rows = l.rows;
  const int64_t chunks = l.cols / 32;
  const int64_t block_r0 = bx * kBlockRows;
  const int64_t r0 = block_r0 + rg * kRows;  // the warp's first row

  // This warp's chunks: whole stages, an equal share in order of its
  // block's (kSplit: an equal share of all, split blockIdx.y of gridDim.y).
  int64_t k_begin = 0, k_end = chunks / kStageChunks;
  if constexpr (kSplit) {
    const int64_t per_split = (k_end + gridDim.y - 1) / gridDim.y;
    k_begin = min(int64_t(blockIdx.y) * per_split, k_end);
    k_end = min(k_begin + per_split, k_end);
  }
  const int64_t share = (k_end - k_begin + kGroups - 1) / kGroups;
  const int64_t s_begin = k_begin + kg * share;
  const int64_t s_end = s_begin + share < k_end ? s_begin + share : k_end;
  const int n_stages = s_end > s_begin ? int(s_end - s_begin) : 0;

  constexpr int kStages = S;
  uint8_t* ring = smem + size_t(warp) * kStages * slot_bytes<F>();
  auto slot = [&](int i) { return ring + size_t(i % kStages) * slot_bytes<F>(); };
  constexpr int kXStage = x_stage_bytes<F, NT>();
  uint8_t* x_ring = smem + size_t(W) * kStages * slot_bytes<F>() + size_t(kg) * kStages * kXStage;
  auto x_slot = [&](int i) { return x_ring + size_t(i % kStages) * kXStage; };
  const uint32_t* xs = xp + size_t(kN8) * size_t(chunks) * 16;  // x sums (Int4K256)

  // Issues the copies of stage i (of this warp's) into its slot, its
  // weights and (kSharedX) its part of the group's x as asked; a commit
  // group per call, empty past the end so that the wait counts hold.
  // Int6K256: the byte offset of row's fp16 d for the super-block of chunk c.
  auto d_offset = [&](int64_t row, int64_t c) -> uint64_t {
    return l.super_offset + uint64_t(row) * l.super_row_bytes + uint64_t(c >> 3) * 2;
  };
  auto issue = [&](int i, bool weights = true, bool x = true) {
    if (i < n_stages) {
      const int64_t c0 = (s_begin + i) * kStageChunks;
      uint8_t* q = slot(i);
      if (weights) {
        uint8_t* extras = q + kRows * kQuantLd;
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // quants: 8 rows x 64 bytes per copy
          const int r = 8 * j + (lane >> 2), part = lane & 3;
          const bool ok = r0 + r < rows;
          const uint8_t* src =
              a.w.data + l.quants_offset + (ok ? r0 + r : 0) * l.quant_row_bytes + (c0 + part) * 16;
          copy_async<16>(q + r * kQuantLd + part * 16, src, ok ? 16 : 0);
        }
        const int r = lane;
        const bool ok = r0 + r < rows;
        const int64_t row = ok ? r0 + r : 0;
        uint8_t* e = extras + r * kExtra;
        if constexpr (F == PackedFormat::Int4Sym32) {
          copy_async<8>(e, a.w.data + l.scales_offset + row * l.scale_row_bytes + c0 * 2,
                        ok ? 8 : 0);
        } else if constexpr (F == PackedFormat::Int4K256) {
          copy_async<16>(e, a.w.data + l.scales_offset + row * l.scale_row_bytes + (c0 >> 3) * 16,
                         ok ? 16 : 0);
        } else {
          const uint8_t* high = a.w.data + l.high_offset + row * l.high_row_bytes + c0 * 8;
          copy_async<16>(e, high, ok ? 16 : 0);
          copy_async<16>(e + 16, high + 16, ok ? 16 : 0);
          copy_async<8>(e + 32, a.w.data + l.scales_offset + row * l.scale_row_bytes + c0 * 2,
                        ok ? 8 : 0);
          // d's 4-byte word (cp.async's smallest copy); d_half says which half.
          copy_async<4>(e + 40, a.w.data + (d_offset(row, c0) & ~uint64_t(3)), ok ? 4 : 0);
        }
      }
      if (kSharedX && x) {  // the stage's x, 16 bytes a thread of the group at a time
        const auto* src = reinterpret_cast<const uint8_t*>(xp + c0 * kN8 * 16);
        uint8_t* dst = x_slot(i);
        constexpr int kFragPieces = kStageChunks * kN8 * 4;
        for (int p = rg * 32 + lane; p < kFragPieces; p += RW * 32)
          copy_async<16>(dst + 16 * p, src + 16 * p, 16);
        if constexpr (F == PackedFormat::Int4K256) {
          // Chunk cc's n8 sums at word cc * (n8 + 8) (x_stage_bytes).
          const auto* sums = reinterpret_cast<const uint8_t*>(xs + c0 * kN8);
          for (int p = rg * 32 + lane; p < kN8; p += RW * 32) {
            const int word = 4 * p, cc = word / kN8;
            copy_async<16>(dst + 16 * kFragPieces + 4 * (cc * (kN8 + 8) + word % kN8),
                           sums + 16 * p, 16);
          }
        }
      }
    }
    copy_commit();
  };

  float acc[2][NT][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[m][j][k] = 0.0f;

        // Only the weights are read before the wait (no kernel writes them):
        // their first stages are on their way while the kernel before this one
        // drains. x (kSharedX) after it, a group of its own a stage: stage i's
        // copies are still in by the time the loop's wait counts say so.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i, true, !kSharedX);
  wait_then_release_next();
  if constexpr (kSharedX) {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(i, false, true);
  }

  const uint4* xw = reinterpret_cast<const uint4*>(xp) + g * 4 + t;  // token g, lane t's words
  for (int i = 0; i < n_stages; ++i) {
    if constexpr (kSharedX) {
      // Stage i in (this thread's copies, then the group's, by the
      // barrier), and every warp of the group done with stage i - 1, whose
      // slots the issue refills.
      copy_wait<kStages - 2>();
      asm volatile("bar.sync %0, %1;" ::"r"(1 + kg), "r"(RW * 32) : "memory");
      issue(i + kStages - 1);
    } else {
      issue(i + kStages - 1);
      copy_wait<kStages - 1>();
      __syncwarp();
    }
    const uint8_t* q = slot(i);
    const uint4* x_here = reinterpret_cast<const uint4*>(x_slot(i)) + g * 4 + t;
    const uint8_t* extra = q + kRows * kQuantLd;
    const int64_t c0 = (s_begin + i) * kStageChunks;
    // This lane's B words of chunk c for each token tile, and the quant
    // word it feeds the MMAs from `row` of the slot for the stage's chunk cc.
    auto load_x = [&](int64_t c, uint4(&xb)[NT]) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if constexpr (kSharedX)
          xb[j] = x_here[((c - c0) * kN8 + 8 * j) * 4];
        else
          xb[j] = load_activation(xw + (c * kN8 + 8 * j) * 4);
      }
    };
    auto quant_word = [&](int row, int cc) {
      return *reinterpret_cast<const uint32_t*>(q + row * kQuantLd + cc * 16 + 4 * t);
    };
    if constexpr (F == PackedFormat::Int4K256) {
      // Rows 16m + g and 16m + g + 8: their headers, and this stage's sc.
      const bool upper = ((s_begin + i) & 1) != 0;
      auto header = [&](int m, int h) {
        return *reinterpret_cast<const uint4*>(extra + (16 * m + g + 8 * h) * kExtra);
      };
      uint32_t scw[2][2];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) scw[m][h] = k256_six_bits(header(m, h), upper, false);
      float sq[2][NT][4];  // sum over the stage of (sc*q) . x
#pragma unroll
      for (int cc = 0; cc < kStageChunks; ++cc) {
        const int64_t c = c0 + cc;
        uint4 xb[NT];
        load_x(c, xb);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          uint32_t lo[4], hi[4];
          const int ra = 16 * m + g, rb = ra + 8;
          decode_sc_q<NT <= 3>(quant_word(ra, cc), byte_as_half2(scw[m][0], cc), lo);
          decode_sc_q<NT <= 3>(quant_word(rb, cc), byte_as_half2(scw[m][1], cc), hi);
          const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]};
          const uint32_t a1[4] = {lo[2], hi[2], lo[3], hi[3]};
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            if (cc == 0)
              mma_16816_first(sq[m][j], a0, xb[j].x, xb[j].y);
            else
              mma_16816(sq[m][j], a0, xb[j].x, xb[j].y);
            mma_16816(sq[m][j], a1, xb[j].z, xb[j].w);
          }
        }
      }
      // The mins: A row r, k = 2cc + {0, 1} holds (mn of chunk cc, same); B
      // k = 2cc + {0, 1}, token: the chunk's x sum (hi, lo). Lane t holds
      // chunk t; k 8-15 are zero.
      uint32_t bs[NT];
      // (kSharedX: the stage's sums, after its fragments; x_stage_bytes.)
      const auto* x_sums = reinterpret_cast<const uint32_t*>(x_slot(i) + kStageChunks * kN8 * 64);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if constexpr (kSharedX)
          bs[j] = x_sums[t * (kN8 + 8) + 8 * j + g];
        else
          bs[j] = load_activation(xs + (c0 + t) * kN8 + 8 * j + g);
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint4 ha = header(m, 0), hb = header(m, 1);
        const uint32_t amin[4] = {half2_as_u32(byte_as_half2(k256_six_bits(ha, upper, true), t)),
                                  half2_as_u32(byte_as_half2(k256_six_bits(hb, upper, true), t)),
                                  0u, 0u};
        const float d[2] = {k256_d(ha, false), k256_d(hb, false)};
        // -M, times 64 for the x sums' scale (kNarrowXSumScale): exact.
        const float nm[2] = {-k256_d(ha, true) / kNarrowXSumScale,
                             -k256_d(hb, true) / kNarrowXSumScale};
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          float sm[4];
          mma_16816_first(sm, amin, bs[j], 0u);
#pragma unroll
          for (int e = 0; e < 4; ++e)  // e 0, 1: row 16m + g; 2, 3: row 16m + g + 8
            acc[m][j][e] = fmaf(d[e >> 1], sq[m][j][e], fmaf(nm[e >> 1], sm[e], acc[m][j][e]));
        }
      }
    } else if constexpr (F == PackedFormat::Int6K256) {
#pragma unroll
      for (int cc = 0; cc < kStageChunks; ++cc) {
        const int64_t c = c0 + cc;
        uint4 xb[NT];
        load_x(c, xb);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          uint32_t lo[4], hi[4];  // rows 16m + g and 16m + g + 8
          float sa[2], sb[2];     // their d*sc for k 0-15 and 16-31
          const int ra = 16 * m + g, rb = ra + 8;
          decode_q6(quant_word(ra, cc), extra + ra * kExtra, cc, t,
                    int(d_offset(r0 + ra, c) >> 1) & 1, lo, sa);
          decode_q6(quant_word(rb, cc), extra + rb * kExtra, cc, t,
                    int(d_offset(r0 + rb, c) >> 1) & 1, hi, sb);
          const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]};  // k 0-15
          const uint32_t a1[4] = {lo[2], hi[2], lo[3], hi[3]};  // k 16-31
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            float p[4];  // e 0, 1: row ra; 2, 3: row rb
            mma_16816_first(p, a0, xb[j].x, xb[j].y);
#pragma unroll
            for (int e = 0; e < 4; ++e)
              acc[m][j][e] = fmaf(e < 2 ? sa[0] : sb[0], p[e], acc[m][j][e]);
            mma_16816_first(p, a1, xb[j].z, xb[j].w);
#pragma unroll
            for (int e = 0; e < 4; ++e)
              acc[m][j][e] = fmaf(e < 2 ? sa[1] : sb[1], p[e], acc[m][j][e]);
          }
        }
      }
    } else {
#pragma unroll
      for (int cc = 0; cc < kStageChunks; ++cc) {
        const int64_t c = c0 + cc;
        uint4 xb[NT];
        load_x(c, xb);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          uint32_t lo[4], hi[4];  // rows 16m + g and 16m + g + 8
          const int ra = 16 * m + g, rb = ra + 8;
          decode_q4_0(quant_word(ra, cc), extra + ra * kExtra, cc, lo);
          decode_q4_0(quant_word(rb, cc), extra + rb * kExtra, cc, hi);
          const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]};  // k 0-15
          const uint32_t a1[4] = {lo[2], hi[2], lo[3], hi[3]};  // k 16-31
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            mma_16816(acc[m][j], a0, xb[j].x, xb[j].y);
            mma_16816(acc[m][j], a1, xb[j].z, xb[j].w);
          }
        }
      }
    }
    __syncwarp();  // the slot is refilled by the next iteration's issue
  }
  copy_wait<0>();

  // Partial sums through shared memory: red[group][token][row] (a group:
  // the warps of one k range, one warp unless RW > 1), then the groups'
  // sums added in group order.
  __syncthreads();
  constexpr int kRedLd = kBlockRows + 4;
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int row = rg * kRows + 16 * m + g, token = 8 * j + 2 * t;
      float* base = red + (size_t(kg) * kN8 + token) * kRedLd;
      base[row] = acc[m][j][0];
      base[kRedLd + row] = acc[m][j][1];
      base[row + 8] = acc[m][j][2];
      base[kRedLd + row + 8] = acc[m][j][3];
    }
  __syncthreads();
  auto block_sum = [&](int token, int rn) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kGroups; ++w) v += red[(size_t(w) * kN8 + token) * kRedLd + rn];
    return v;
  };
  if constexpr (kSplit) {
    // This block's sums out (past L1), then the row block's last to arrive
    // goes on (the threadFenceReduction pattern of the CUDA samples).
    float* mine = split.sums + (size_t(bx) * gridDim.y + blockIdx.y) * kSplitSums;
    for (int o = threadIdx.x; o < kN8 * kRows; o += W * 32) {
      const int token = o / kRows, rn = o % kRows;
      if (token < a.n) __stcg(mine + o, block_sum(token, rn));
    }
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0) last = atomicAdd(split.arrivals + bx, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
  }
  for (int o = threadIdx.x; o < kN8 * kBlockRows; o += W * 32) {
    const int token = o / kBlockRows, rn = o % kBlockRows;
    const int64_t row = block_r0 + rn;
    if (token >= a.n || row >= rows) continue;
    float v = 0.0f;
    if constexpr (kSplit) {  // in split order, whichever block arrived last
      for (unsigned s = 0; s < gridDim.y; ++s)
        v += __ldcg(split.sums + (size_t(bx) * gridDim.y + s) * kSplitSums + o);
    } else {
      v = block_sum(token, rn);
    }
    if (a.bias) v += a.bias[row];
    float* dst = a.y + int64_t(token) * a.ldy + row;
    if (a.accumulate) v += *dst;
    *dst = v;
  }
  if (kSplit && threadIdx.x == 0) split.arrivals[bx] = 0;  // for the next launch
}

}  // namespace voltad::kernels::narrow80
