// Pass 1 of the decode attention on the tensor cores through wmma (sm_70+:
// the V100's; the fp16 cache, head_dim 64 or 128; AttentionArgs::wmma).
// The same grid, pieces, partials and combine as kernel_attention_partial
// (attention_common.cuh), whose loop spends ~65 warp instructions on a
// position's 512 bytes of cache at head_dim 128 (converts, multiplies, sums
// through shuffles, rescales; docs/PERFORMANCE-RUNS-18-20.md run 20) and
// took 18.5 us a layer at batch 8 on the H200, where the sm_80 kernel
// (attention_sm80.cu, mma.sync and cp.async, neither on a V100) took ~12.
//
// Each warp takes the piece's cache blocks (16 positions) warp, warp + W,
// ... (W warps a block). A block's K and V rows come through the lane's registers (plain
// 16-byte loads through L2, issued while the block before computes; no
// cp.async below sm_80) into the warp's tile in shared memory, K first,
// then V in the same tile:
//   S = Q K^T   wmma m16n16k16: A = q, rows 0-7 the group's heads' fp16
//               high parts, rows 8-15 their low parts (x = hi + lo), so
//               each score is the sum of its two rows; B = K (col_major)
//   O += P V    wmma m8n32k16: A = the softmax weights P, high and low
//               parts as two MMAs into the same sums; B = V (row_major)
// K and V are fp16 already, so the products keep about fp32 accuracy, as
// in the sm_80 kernel. The online softmax rescales O only when a head's
// maximum passes its reference by more than e^8 (attention_sm80.cu); O's
// elements sit in the accumulators in an unspecified order, so the rows
// they belong to come from a fragment of the same type loaded from a
// matrix of row indices.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "kernels/attention.h"
#include "kernels/attention_common.cuh"
#include "kernels/attention_fp16.cuh"
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/wmma_scores.cuh"

namespace voltad::kernels {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRows = kAttentionMaxGroup;  // 8: the group's heads, rows of P and O
// Warps a block: kAttentionWarps (4, three blocks an SM) or kWmmaWideWarps (6,
// two an SM; kernels/attention_plan.h), the plan's choice (wmma_plan below).
// ptxas gives the kernel ~165 registers either way, so an SM holds
// kWmmaSmWarps of its warps.
constexpr int kWmmaSmWarps = 12;
static_assert(kWmmaWarps == kAttentionWarps, "the plan's 4 warps are the kernel's");

// Shared memory of a block of W warps. Every offset is a multiple of 32
// bytes (wmma's pointers); the row strides are padded by 16 bytes so that a
// fragment load's rows fall in different banks. The rotated q (kRope) is
// staged in the warps' tiles before the loop (4 KB at head_dim 128) and the
// combine's scratch (2 KB) put after the merge: in static shared memory
// they made a 4-warp block 37.8 KB, two to a V100's 96 KB instead of three.
template <int HD, int W>
struct WmmaSmem {
  static constexpr int kLd = HD + 8;            // halves a row of q, K or V
  static constexpr int kSLd = 16 + 4;           // floats a row of S
  static constexpr int kPLd = 16 + 8;           // halves a row of P
  static constexpr int kQBytes = 16 * kLd * 2;  // q: high parts, then low
  static constexpr int kRowIdBytes = kRows * 32 * 4;
  static constexpr int kTileBytes = kKvBlockTokens * kLd * 2;  // a cache block's K, then its V
  static constexpr int kSBytes = 16 * kSLd * 4;
  static constexpr int kPBytes = 2 * kRows * kPLd * 2;  // P's high parts, then its low
  static constexpr int kCorrBytes = 32;                 // a rescale's factor for each head
  static constexpr int kWarpBytes = kTileBytes + kSBytes + kPBytes + kCorrBytes;
  static constexpr int kWarpsAt = kQBytes + kRowIdBytes;  // the first warp's tile
  static constexpr int kLoopBytes = kWarpsAt + W * kWarpBytes;
  static constexpr int kQReadyBytes = int(sizeof(float)) * kRows * HD;  // at kWarpsAt
  // After the loop: finish_piece's (m, l, acc) of every warp, then the
  // combine's weights and sums (CombineScratch) where the loop's memory
  // holds them; three 4-warp blocks at head_dim 128 then take 31.7 KB each
  // with the static rest (RoPE's angles), inside a V100's 96 KB.
  static constexpr int kMergeBytes = int(sizeof(float)) * W * kRows * (2 + HD);
  static constexpr int kScratchAt = (kMergeBytes + 15) / 16 * 16;
  static constexpr int kMergeEnd = kScratchAt + int(sizeof(CombineScratch));
  static constexpr int kBytes = kLoopBytes > kMergeEnd ? kLoopBytes : kMergeEnd;
  static_assert(kQBytes % 32 == 0 && kTileBytes % 32 == 0 && kSBytes % 32 == 0 &&
                    kPBytes % 64 == 0 && kWarpBytes % 32 == 0,
                "wmma pointers are 32-byte aligned");
  static_assert(kQReadyBytes <= W * kWarpBytes, "the rotated q fits the warps' tiles");
};
// Blocks in a V100's 96 KB an SM (scripts/sm70-budgets.txt holds the static
// rest to these margins): three of 4 warps, two of 6.
static_assert(WmmaSmem<128, kAttentionWarps>::kBytes + 1664 <= 96 * 1024 / 3, "three blocks");
static_assert(WmmaSmem<128, kWmmaWideWarps>::kBytes + 5184 <= 96 * 1024 / 2, "two blocks");

// kWmmaSmWarps / W blocks an SM: at head_dim 128, 4 warps take ~31 KB of
// shared memory (a V100's 96 KB holds three), 6 warps ~43 KB (two).
template <int HD, bool kRope, int W>
__global__ void __launch_bounds__(W * 32, kWmmaSmWarps / W)
    kernel_attention_wmma(AttentionArgs a, Fp16KvReader cache) {
  constexpr int kWarps = W;
  using L = WmmaSmem<HD, W>;
  constexpr int kPieces = HD / 8;                    // 16-byte pieces of a row
  constexpr int kRowStep = 32 / kPieces;             // rows one load instruction covers
  constexpr int kLoads = kKvBlockTokens / kRowStep;  // a lane's loads of a block's K (or V)
  constexpr int NT = HD / 32;                        // m8n32 tiles of O
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float rope_sin[kRope ? HD / 2 : 1], rope_cos[kRope ? HD / 2 : 1];
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;  // the softmax's head and quarter of 16 positions
  const int group = a.n_heads / a.n_kv_heads;
  const int pos = a.positions[t];
  const int per = piece_tokens(pos, gridDim.z, a.least_piece);
  const int begin = split * per;  // a multiple of 16: a piece starts a cache block
  const int end = min(pos + 1, begin + per);
  const int kv_dim = a.n_kv_heads * HD;
  const int32_t* table = a.block_tables + int64_t(a.token_tables[t]) * a.table_stride;
  const int blocks = end > begin ? (end - begin + kKvBlockTokens - 1) / kKvBlockTokens : 0;
  const int mine = blocks > warp ? (blocks - warp + kWarps - 1) / kWarps : 0;

  __half* sq = reinterpret_cast<__half*>(smem);
  float* srow = reinterpret_cast<float*>(smem + L::kQBytes);
  uint8_t* wbase = smem + L::kWarpsAt + warp * L::kWarpBytes;
  // Before the loop (its first barrier below): the rotated q, in the tiles.
  auto& q_ready = *reinterpret_cast<float(*)[kRows][HD]>(smem + L::kWarpsAt);
  __half* tile = reinterpret_cast<__half*>(wbase);
  float* ss = reinterpret_cast<float*>(wbase + L::kTileBytes);
  __half* p_hi = reinterpret_cast<__half*>(wbase + L::kTileBytes + L::kSBytes);
  __half* p_lo = p_hi + kRows * L::kPLd;
  float* corr_of = reinterpret_cast<float*>(wbase + L::kTileBytes + L::kSBytes + L::kPBytes);

  if constexpr (kRope) {
    for (int i = threadIdx.x; i < HD / 2; i += blockDim.x)
      sincosf(float(pos) * a.rope.inv_freq[i], &rope_sin[i], &rope_cos[i]);
  }
  // The cache block of each of the warp's blocks: lane i holds the
  // (32k + i)-th, read 32 at a time.
  const int32_t* my_table = table + begin / kKvBlockTokens + warp;
  int block_of = 0;
  auto fetch_blocks = [&](int n0) {
    const int n = n0 + lane;
    block_of = n < mine ? my_table[n * kWarps] : 0;
  };
  auto block_at = [&](int n) {  // by the whole warp, n = 0, 1, 2, ... in turn
    if (n % 32 == 0 && n > 0) fetch_blocks(n);
    return __shfl_sync(0xffffffffu, block_of, n % 32);
  };
  // A lane loads piece c of rows r0, r0 + kRowStep, ... of a block's K or V
  // rows; rows past `end` are zeros (the cache there may hold anything).
  const int r0 = lane / kPieces, c = lane % kPieces;
  const int64_t lane_at = int64_t(r0) * kv_dim + int64_t(kvh) * HD + c * 8;
  auto load_rows = [&](uint4(&r)[kLoads], const __half* base, int blk, int p0) {
    const __half* src = base + (int64_t(blk) * kKvBlockTokens * kv_dim + lane_at);
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      r[i] = p0 + r0 + kRowStep * i < end
                 ? __ldcg(reinterpret_cast<const uint4*>(src + int64_t(kRowStep * i) * kv_dim))
                 : make_uint4(0, 0, 0, 0);
  };
  auto store_rows = [&](const uint4(&r)[kLoads]) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      *reinterpret_cast<uint4*>(tile + (r0 + kRowStep * i) * L::kLd + c * 8) = r[i];
  };
  // The warp's first cache block is loaded while q is made (the table's and
  // the block's loads had waited for q, RoPE and a barrier), unless it holds
  // the token's own row: that is written this step, by the RoPE below or,
  // under programmatic launch, by the kernel before, so it is loaded after
  // them. The block tables are the host's, written before the step. Run 58
  // (H100): the kernel alone without RoPE 7-11% shorter; in the decode graph
  // (RoPE inside) even, as the block that holds the own row, unchanged, ends
  // the launch.
  uint4 kr[kLoads], vr[kLoads];
  fetch_blocks(0);
  const int p_first = begin + warp * kKvBlockTokens;
  auto load_first = [&] {
    const int blk = block_at(0);
    load_rows(kr, cache.k, blk, p_first);
    load_rows(vr, cache.v, blk, p_first);
  };
  const bool early = mine > 0 && p_first + kKvBlockTokens <= pos;
  if (early) load_first();
  wait_then_release_next();
  if constexpr (kRope) {
    // A piece past the token's position holds no positions: no q, and it
    // must not store the own row (attention_sm80.cu).
    if (begin <= pos) {  // the same for the whole block
      __syncthreads();   // the angles
      rope_items<HD>(a, cache, t, kvh, group, pos < end, kWarps, rope_sin, rope_cos, q_ready);
      __syncthreads();  // q_ready, and the own row's stores
    }
  }
  // q's high and low parts (scaled; heads past the group zeros), and the
  // row index of each element of an 8 x 32 accumulator.
  for (int i = threadIdx.x; i < kRows * HD; i += blockDim.x) {
    const int h = i / HD, e = i % HD;
    float x = 0.0f;
    if (h < group) {
      if constexpr (kRope)
        x = q_ready[h][e];
      else
        x = a.q[int64_t(t) * a.ldq + int64_t(kvh * group + h) * HD + e] * a.scale;
    }
    const __half hi = __float2half_rn(x);
    sq[h * L::kLd + e] = hi;
    sq[(h + kRows) * L::kLd + e] = __float2half_rn(x - __half2float(hi));
  }
  for (int i = threadIdx.x; i < kRows * 32; i += blockDim.x) srow[i] = float(i / 32);
  __syncthreads();

  wmma::fragment<wmma::accumulator, 8, 32, 16, float> acc[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) wmma::fill_fragment(acc[nt], 0.0f);
  float m = -INFINITY, l = 0.0f;  // head g's reference maximum and this lane's share of its sum
  if (mine > 0 && !early) load_first();
  for (int n = 0; n < mine; ++n) {
    const int p0 = begin + (warp + n * kWarps) * kKvBlockTokens;
    const int p_next = p0 + kWarps * kKvBlockTokens;
    const bool more = n + 1 < mine;  // the same for the warp
    store_rows(kr);
    __syncwarp();
    const int next_blk = more ? block_at(n + 1) : 0;
    if (more) load_rows(kr, cache.k, next_blk, p_next);
    // S = Q K^T: a 16 x 16 tile, rows 8-15 the low parts' share.
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_acc;
    wmma::fill_fragment(s_acc, 0.0f);
    wmma_scores<HD>(s_acc, sq, tile, L::kLd);
    wmma::store_matrix_sync(ss, s_acc, L::kSLd, wmma::mem_row_major);
    __syncwarp();  // S is stored, and the K tile read: V takes its place
    store_rows(vr);
    if (more) load_rows(vr, cache.v, next_blk, p_next);

    // Lane (g, tq) takes positions 4tq..4tq+3 of head g.
    const float4 hi4 = *reinterpret_cast<const float4*>(ss + g * L::kSLd + 4 * tq);
    const float4 lo4 = *reinterpret_cast<const float4*>(ss + (g + kRows) * L::kSLd + 4 * tq);
    float p[4] = {hi4.x + lo4.x, hi4.y + lo4.y, hi4.z + lo4.z, hi4.w + lo4.w};
    float top = -INFINITY;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (p0 + 4 * tq + j >= end) p[j] = -INFINITY;
      top = fmaxf(top, p[j]);
    }
    if (float corr; rescale_reference(top, m, l, corr)) {
      if (tq == 0) corr_of[g] = corr;
      __syncwarp();
      wmma::fragment<wmma::accumulator, 8, 32, 16, float> row;
      wmma::load_matrix_sync(row, srow, 32, wmma::mem_row_major);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < row.num_elements; ++i) acc[nt].x[i] *= corr_of[int(row.x[i])];
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) sum += (p[j] = __expf(p[j] - m));
    l += sum;
    __half2 h01 = __floats2half2_rn(p[0], p[1]), h23 = __floats2half2_rn(p[2], p[3]);
    const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
    __half2 l01 = __floats2half2_rn(p[0] - f01.x, p[1] - f01.y),
            l23 = __floats2half2_rn(p[2] - f23.x, p[3] - f23.y);
    *reinterpret_cast<uint2*>(p_hi + g * L::kPLd + 4 * tq) =
        make_uint2(*reinterpret_cast<uint32_t*>(&h01), *reinterpret_cast<uint32_t*>(&h23));
    *reinterpret_cast<uint2*>(p_lo + g * L::kPLd + 4 * tq) =
        make_uint2(*reinterpret_cast<uint32_t*>(&l01), *reinterpret_cast<uint32_t*>(&l23));
    __syncwarp();  // P and the V tile
    // O += P V, the high parts then the low into the same sums.
    wmma::fragment<wmma::matrix_a, 8, 32, 16, __half, wmma::row_major> pa_hi, pa_lo;
    wmma::load_matrix_sync(pa_hi, p_hi, L::kPLd);
    wmma::load_matrix_sync(pa_lo, p_lo, L::kPLd);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      wmma::fragment<wmma::matrix_b, 8, 32, 16, __half, wmma::row_major> vb;
      wmma::load_matrix_sync(vb, tile + 32 * nt, L::kLd);
      wmma::mma_sync(acc[nt], pa_hi, vb, acc[nt]);
      wmma::mma_sync(acc[nt], pa_lo, vb, acc[nt]);
    }
    __syncwarp();  // the tile, S and P are rewritten for the next block
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // The warps' results into the loop's memory (every warp is done with it
  // after the barrier), then the portable kernel's end.
  float* merge = reinterpret_cast<float*>(smem);
  auto& sm_m = *reinterpret_cast<float(*)[kWarps][kRows]>(merge);
  auto& sm_l = *reinterpret_cast<float(*)[kWarps][kRows]>(merge + kWarps * kRows);
  auto& sm_acc = *reinterpret_cast<float(*)[kWarps][kRows][HD]>(merge + 2 * kWarps * kRows);
  __syncthreads();
  if (tq == 0) sm_m[warp][g] = m, sm_l[warp][g] = l;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    wmma::store_matrix_sync(&sm_acc[warp][0][32 * nt], acc[nt], HD, wmma::mem_row_major);
  finish_piece<HD, kRows, kWarps>(a, t, kvh, split, group, sm_m, sm_l, sm_acc,
                                  *reinterpret_cast<CombineScratch*>(smem + L::kScratchAt));
}

// Blocks of the kernel in one wave of the device (read once: one process
// serves one GPU).
template <int HD, bool kRope, int W>
int wmma_wave_blocks() {
  static const int blocks = [] {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, kernel_attention_wmma<HD, kRope, W>, W * 32, WmmaSmem<HD, W>::kBytes));
    return device_sm_count() * std::max(per_sm, 1);
  }();
  return blocks;
}

// The warps a block: 4 or 6, or kPlanWarps for the plan's choice (below).
// The plan is built and not yet measured on a GPU (docs/PERFORMANCE.md, run
// 55), so 4 warps stay the default until it is: VOLTAD_ATTENTION_WMMA_WARPS
// =plan turns it on, =4 or =6 fixes the size (comparisons). Tests force it.
constexpr int kPlanWarps = 0;
constexpr int kUnforced = -1;
std::atomic<int> g_warps_forced{kUnforced};
int forced_warps() {
  static const int env = [] {
    const char* v = std::getenv("VOLTAD_ATTENTION_WMMA_WARPS");
    if (v && std::string(v) == "plan") return kPlanWarps;
    const int w = v ? std::atoi(v) : 0;
    return w == kWmmaWideWarps ? w : kAttentionWarps;
  }();
  const int forced = g_warps_forced.load();
  return forced == kUnforced ? env : forced;
}

// The plan (kernels/attention_plan.h: choose_wmma_plan) for these args, or
// the forced size's.
template <int HD, bool kRope>
WmmaPlan wmma_plan(const AttentionArgs& a) {
  const AttentionLaunchShape shape = launch_shape(a);
  const int forced = forced_warps();
  if (forced == kWmmaWideWarps)
    return wmma_plan_for(shape, kWmmaWideWarps, wmma_wave_blocks<HD, kRope, kWmmaWideWarps>());
  if (forced != kPlanWarps)
    return wmma_plan_for(shape, kAttentionWarps, wmma_wave_blocks<HD, kRope, kAttentionWarps>());
  return choose_wmma_plan(shape, wmma_wave_blocks<HD, kRope, kAttentionWarps>(),
                          wmma_wave_blocks<HD, kRope, kWmmaWideWarps>());
}

}  // namespace

bool attention_wmma_applies(const AttentionArgs& a) {
  return a.wmma && (a.head_dim == 64 || a.head_dim == 128);
}

int attention_wmma_warps(const AttentionArgs& a) {
  return with_tensor_core_instance(a, [&](auto hd, auto rope) {
    return wmma_plan<decltype(hd)::value, decltype(rope)::value>(a).warps;
  });
}

int attention_wmma_least_piece(const AttentionArgs& a) {
  return std::max(a.least_piece, wmma_least_piece_of(attention_wmma_warps(a)));
}

int attention_wmma_pieces(const AttentionArgs& a) {
  return with_tensor_core_instance(a, [&](auto hd, auto rope) {
    return wmma_plan<decltype(hd)::value, decltype(rope)::value>(a).pieces;
  });
}

void attention_wmma_warps_force(std::optional<int> warps) {
  VOLTAD_KERNEL_REQUIRE(
      !warps || *warps == kPlanWarps || *warps == kAttentionWarps || *warps == kWmmaWideWarps,
      "the wmma attention's blocks are of 4 or 6 warps (0: the plan's)");
  g_warps_forced.store(warps ? *warps : kUnforced);
}

void launch_attention_wmma(const AttentionArgs& args, const Fp16KvReader& cache,
                           cudaStream_t stream) {
  if (args.n_tokens == 0) return;
  check_attention_args(args, args.rope.inv_freq != nullptr);
  AttentionArgs a = args;  // with the plan's least piece, for pass 1 and the combine
  const int pieces = with_tensor_core_instance(a, [&](auto hd, auto rope) {
    constexpr int HD = decltype(hd)::value;
    constexpr bool kRope = decltype(rope)::value;
    const WmmaPlan plan = wmma_plan<HD, kRope>(a);
    a.least_piece = std::max(a.least_piece, wmma_least_piece_of(plan.warps));
    const dim3 grid(unsigned(a.n_tokens), unsigned(a.n_kv_heads), unsigned(plan.pieces));
    if (plan.warps == kWmmaWideWarps)
      launch_kernel(kernel_attention_wmma<HD, kRope, kWmmaWideWarps>, grid, kWmmaWideWarps * 32,
                    WmmaSmem<HD, kWmmaWideWarps>::kBytes, stream, a, cache);
    else
      launch_kernel(kernel_attention_wmma<HD, kRope, kAttentionWarps>, grid, kAttentionWarps * 32,
                    WmmaSmem<HD, kAttentionWarps>::kBytes, stream, a, cache);
    return plan.pieces;
  });
  CUDA_CHECK(cudaGetLastError());
  if (!a.arrivals) launch_attention_combine(a, pieces, stream);
}

}  // namespace voltad::kernels
