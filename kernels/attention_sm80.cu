// Pass 1 of the decode attention on the tensor cores (sm_80+; the fp16
// cache, head_dim 64 or 128; AttentionArgs::tensor_cores). The same grid,
// pieces, partials and combine as kernel_attention_partial
// (attention_common.cuh), whose loop is bound by its instructions: per
// position and head a lane group of HD/8 lanes converts, multiplies, sums
// through shuffles and rescales, ~65 warp instructions for 512 bytes of
// cache at head_dim 128 (docs/PERFORMANCE-RUNS-18-20.md run 20).
//
// Here each warp takes the piece's cache blocks (16 positions) in turn,
// copying a block's K and V rows by cp.async into its own ring of 2 or 3
// stages (mma_plan), and runs, per block, with mma.sync m16n8k16 (fragment
// layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//   S = Q K^T   A = q, rows the group's heads; B = K from ldmatrix
//               (positions as n: two n8 tiles)
//   O += P V    A = the softmax weights P, which the S accumulators hold
//               exactly in A's layout; B = V from ldmatrix.trans
// with an online softmax over the blocks (rescaled only when a maximum
// grows by more than e^8, below). A group has at most 8 heads, so
// rows 8-15 of A would be idle: they carry the low parts of q and of P
// (x = hi + lo, both fp16, lo = x - hi rounded), and each result is the sum
// of its two rows. K and V are fp16 already, so the products keep about
// fp32 accuracy (the sums are fp32), where q or P rounded to fp16 alone
// would move an output by up to ~2e-4 of |v|.
// Rows are stored in shared memory with each 16-byte chunk's index XORed
// with the row's low 3 bits: ldmatrix's eight row reads then fall in
// different banks.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/attention.h"
#include "kernels/attention_common.cuh"
#include "kernels/attention_fp16.cuh"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels {

// Named, not anonymous: below sm_80 the kernel's body compiles to nothing,
// and its helpers would be unused internal names (an error with -Werror).
namespace attention80 {

using sm80::copy_async;
using sm80::copy_commit;
using sm80::copy_wait;
using sm80::load_matrices_x4;
using sm80::mma_16816;

constexpr int kMmaGroup = kAttentionMaxGroup;

// Shared memory of a block of W warps whose rings have S stages (mma_plan).
template <int HD, int S, int W>
struct MmaSmem {
  static_assert(HD == 64 || HD == 128, "head_dim 64 or 128");
  static constexpr int kChunks = HD / 8;                      // 16-byte chunks a row
  static constexpr int kTileBytes = kKvBlockTokens * HD * 2;  // a block's K (or V) rows
  static constexpr int kStageBytes = 2 * kTileBytes;          // K then V
  static constexpr int kWarpBytes = S * kStageBytes;
  static constexpr int kRingBytes = W * kWarpBytes;
  // After the loop the ring holds the warps' merge (finish_piece).
  static constexpr int kMergeBytes = int(sizeof(float)) * W * kMmaGroup * (2 + HD);
  static constexpr int kBytes = kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes;
  // Chunk c of row r within a tile.
  __device__ static int offset(int r, int c) { return r * (HD * 2) + ((c ^ (r & 7)) << 4); }
};

// fp16 high and low parts of (x0, x1): hi = x rounded, lo = x - hi rounded.
__device__ __forceinline__ void split_half2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x0, x1);
  const float2 hf = __half22float2(h);
  const __half2 l = __floats2half2_rn(x0 - hf.x, x1 - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// No minimum of blocks an SM in the bounds: ptxas then takes 166-168
// registers at head_dim 128 (3 blocks an SM fit by registers; shared memory
// decides), where a minimum of 1 gave 182 (2 blocks).
template <int HD, int S, bool kRope, int W>
__global__ void __launch_bounds__(W * 32)
    kernel_attention_mma(AttentionArgs a, Fp16KvReader cache) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = MmaSmem<HD, S, W>;
  constexpr int KSTEPS = HD / 16, NT = HD / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float rope_sin[kRope ? HD / 2 : 1], rope_cos[kRope ? HD / 2 : 1];
  __shared__ float q_ready[kRope ? kMmaGroup : 1][kRope ? HD : 1];
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;  // the MMA's group and thread in group
  const int group = a.n_heads / a.n_kv_heads;
  const int pos = a.positions[t];
  const int per = piece_tokens(pos, gridDim.z, a.least_piece);
  static_assert(kAttentionMinSplitTokens % kKvBlockTokens == 0, "pieces start cache blocks");
  const int begin = split * per;  // a multiple of 16: a piece starts a cache block
  const int end = min(pos + 1, begin + per);
  const int kv_dim = a.n_kv_heads * HD;
  const int32_t* table = a.block_tables + int64_t(a.token_tables[t]) * a.table_stride;
  // This warp's blocks: warp, warp + W, ... of the piece's.
  const int blocks = end > begin ? (end - begin + kKvBlockTokens - 1) / kKvBlockTokens : 0;
  const int mine = blocks > warp ? (blocks - warp + W - 1) / W : 0;
  uint8_t* ring = smem + warp * L::kWarpBytes;
  // The cache block of each of the warp's blocks, lane i holding the
  // (32k + i)-th, read 32 at a time (the first before the wait, also
  // without own_position_only: positions and tables are the step's inputs,
  // attention.h), so that no copy waits on a table load.
  const int32_t* my_table = table + begin / kKvBlockTokens + warp;
  int block_of = 0;
  auto fetch_blocks = [&](int n0) {
    const int n = n0 + lane;
    block_of = n < mine ? my_table[n * W] : 0;
  };
  // A lane copies chunk c of rows r0, r0 + kRowStep, ... of each block.
  constexpr int kRowStep = 32 / L::kChunks;
  const int r0 = lane / L::kChunks, c = lane % L::kChunks;
  const int64_t lane_at = int64_t(r0) * kv_dim + int64_t(kvh) * HD + c * 8;
  const int64_t v_minus_k = cache.v - cache.k;
  // The warp's n-th block into stage n % S (positions past `end`
  // zero-filled, not read); a commit group every call, empty past the last.
  // Called with n = 0, 1, 2, ... in turn by the whole warp.
  auto issue = [&](int n) {
    if (n < mine) {
      if (n % 32 == 0 && n > 0) fetch_blocks(n);
      const int blk = __shfl_sync(0xffffffffu, block_of, n % 32);
      const int p0 = begin + (warp + n * W) * kKvBlockTokens;
      const __half* k = cache.k + (int64_t(blk) * kKvBlockTokens * kv_dim + lane_at);
      uint8_t* stage = ring + (n % S) * L::kStageBytes;
#pragma unroll
      for (int i = 0; i < kKvBlockTokens / kRowStep; ++i) {
        const int r = r0 + kRowStep * i;
        const int bytes = p0 + r < end ? 16 : 0;
        const __half* src = k + int64_t(kRowStep * i) * kv_dim;
        copy_async<16>(stage + L::offset(r, c), src, bytes);
        copy_async<16>(stage + L::kTileBytes + L::offset(r, c), src + v_minus_k, bytes);
      }
    }
    copy_commit();
  };
  fetch_blocks(0);
  // Before the wait (own_position_only): the first blocks, the token's own
  // row included, which is loaded again after the wait (below).
  const bool early = a.own_position_only;
  if (early)
    for (int n = 0; n < S; ++n) issue(n);
  if constexpr (kRope) {
    for (int i = threadIdx.x; i < HD / 2; i += blockDim.x)
      sincosf(float(pos) * a.rope.inv_freq[i], &rope_sin[i], &rope_cos[i]);
  }
  wait_then_release_next();
  if (!early)
    for (int n = 0; n < S; ++n) issue(n);
  if constexpr (kRope) {
    // A piece past the token's position (begin > pos: end = pos + 1, but
    // no positions) needs no q, and must not store the own row: the
    // piece that holds it reads it back.
    if (begin <= pos) {  // the same for the whole block
      __syncthreads();   // the angles
      rope_items<HD>(a, cache, t, kvh, group, pos < end, W, rope_sin, rope_cos, q_ready);
      __syncthreads();  // q_ready, and the own row's stores
    }
  }

  // q as A: lane (g, t) holds head g's elements 2t, 2t+1 (+8) of each k
  // step, high parts in row g and low parts in row g + 8; heads past the
  // group are zeros.
  uint32_t qa[KSTEPS][4];
#pragma unroll
  for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int e = ks * 16 + h * 8 + 2 * tq;
      float x0 = 0.0f, x1 = 0.0f;
      if (g < group) {
        if constexpr (kRope) {
          x0 = q_ready[g][e], x1 = q_ready[g][e + 1];
        } else {
          const float* qr = a.q + int64_t(t) * a.ldq + int64_t(kvh * group + g) * HD;
          x0 = qr[e] * a.scale, x1 = qr[e + 1] * a.scale;
        }
      }
      split_half2(x0, x1, qa[ks][2 * h], qa[ks][2 * h + 1]);
    }

  // The online softmax of head g (the same in the 4 lanes of a group; l is
  // this lane's share), and O's accumulators: acc[nt] holds elements
  // 8nt + 2t, +1 of head g, [0..1] from the high parts of P, [2..3] from
  // the low.
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int own_block = (pos - begin) / kKvBlockTokens;  // in the piece, where pos < end
  for (int n = 0; n < mine; ++n) {
    copy_wait<S - 1>();
    __syncwarp();
    uint8_t* stage = ring + (n % S) * L::kStageBytes;
    const int p0 = begin + (warp + n * W) * kKvBlockTokens;
    if (early && n < S && pos < end && warp + n * W == own_block) {
      // The own row, written after its block was loaded (by the kernel
      // before, or by this block: kRope): again, through L2.
      const int r = pos - p0;
      if (lane < 2 * L::kChunks) {
        const bool v = lane >= L::kChunks;
        const int chunk = lane % L::kChunks;
        const int64_t at = (int64_t(table[p0 / kKvBlockTokens]) * kKvBlockTokens + r) * kv_dim +
                           int64_t(kvh) * HD + chunk * 8;
        *reinterpret_cast<uint4*>(stage + (v ? L::kTileBytes : 0) + L::offset(r, chunk)) =
            __ldcg(reinterpret_cast<const uint4*>((v ? cache.v : cache.k) + at));
      }
      __syncwarp();
    }
    // S: n8 tiles of positions 0-7 and 8-15; each k step's ldmatrix gives
    // both tiles' B (K's rows as stored: position, then element).
    float s[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const int mi = lane >> 3;
      uint32_t b[4];
      load_matrices_x4<false>(b, stage + L::offset((lane & 7) + 8 * (mi >> 1), 2 * ks + (mi & 1)));
      mma_16816(s[0], qa[ks], b[0], b[1]);
      mma_16816(s[1], qa[ks], b[2], b[3]);
    }
    // Lane (g, t) holds positions 8j + 2t + i (j, i = 0, 1) of head g.
    float p[2][2];
    float top = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float x = s[j][i] + s[j][2 + i];
        p[j][i] = p0 + 8 * j + 2 * tq + i < end ? x : -INFINITY;
        top = fmaxf(top, p[j][i]);
      }
    // m is a reference, not always the running maximum (rescale_reference).
    if (float correction; rescale_reference(top, m, l, correction)) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] *= correction;
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) sum += (p[j][i] = __expf(p[j][i] - m));
    l += sum;
    // P as A: positions 2t, 2t+1 (tile 0) and 8 + 2t, +1 (tile 1) of row g
    // (high parts) and g + 8 (low).
    uint32_t pa[4];
    split_half2(p[0][0], p[0][1], pa[0], pa[1]);
    split_half2(p[1][0], p[1][1], pa[2], pa[3]);
    // O += P V: an ldmatrix.trans gives two n8 tiles of elements their B
    // (positions 0-7 and 8-15 of each).
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      const int mi = lane >> 3;
      uint32_t b[4];
      load_matrices_x4<true>(
          b, stage + L::kTileBytes + L::offset((lane & 7) + 8 * (mi & 1), 2 * np + (mi >> 1)));
      mma_16816(acc[2 * np], pa, b[0], b[1]);
      mma_16816(acc[2 * np + 1], pa, b[2], b[3]);
    }
    __syncwarp();  // the stage is read: its next block may come in
    issue(n + S);
  }
  copy_wait<0>();
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // The warps' results into the ring's memory (every warp is done with its
  // ring after the barrier), then the portable kernel's end.
  auto& sm_m = *reinterpret_cast<float(*)[W][kMmaGroup]>(smem);
  auto& sm_l = *reinterpret_cast<float(*)[W][kMmaGroup]>(smem + sizeof(sm_m));
  auto& sm_acc = *reinterpret_cast<float(*)[W][kMmaGroup][HD]>(smem + 2 * sizeof(sm_m));
  __syncthreads();
  if (g < group) {
    if (tq == 0) sm_m[warp][g] = m, sm_l[warp][g] = l;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      sm_acc[warp][g][8 * nt + 2 * tq] = acc[nt][0] + acc[nt][2];
      sm_acc[warp][g][8 * nt + 2 * tq + 1] = acc[nt][1] + acc[nt][3];
    }
  }
  finish_piece<HD, kMmaGroup, W>(a, t, kvh, split, group, sm_m, sm_l, sm_acc,
                                 static_combine_scratch());
#endif
}

template <int HD, int S, bool kRope, int W>
int mma_wave_blocks() {
  static const int blocks = [] {
    auto kernel = kernel_attention_mma<HD, S, kRope, W>;
    // Above 48 KB of dynamic shared memory a kernel must opt in (once).
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    MmaSmem<HD, S, W>::kBytes));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, W * 32,
                                                             MmaSmem<HD, S, W>::kBytes));
    return device_sm_count() * std::max(per_sm, 1);
  }();
  return blocks;
}

// The shared memory a block may opt into on this device, less the kernel's
// largest static arrays (kRope); 0 where the kernel does not run here. Read
// once: one process serves one GPU. The kernel needs an sm_80+ device and
// this binary's code for it built for sm_80+ (else its body is empty).
int mma_room() {
  static const int room = [] {
    int dev = 0, major = 0, smem = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, kernel_attention_mma<128, 3, true, kAttentionWarps>) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    if (major < 8 || attr.ptxVersion < 80 || attr.binaryVersion < 80) return 0;
    return std::max(0, smem - int(attr.sharedSizeBytes));
  }();
  return room;
}

// The most stages a 4-warp block's rings may have on this device (2 or 3;
// 0: the kernel does not run here): 3 stages are 96 KB a block, which an
// sm_86's 99 KB cannot hold beside the static arrays.
int mma_max_stages() {
  const int room = mma_room();
  return MmaSmem<128, 3, kAttentionWarps>::kBytes <= room   ? 3
         : MmaSmem<128, 2, kAttentionWarps>::kBytes <= room ? 2
                                                            : 0;
}

// Blocks of kWideWarps warps (2-stage rings: 128 KB a block at head_dim
// 128, one block an SM on an H200) for the same pieces: each warp walks
// half as many of its piece's cache blocks (the longest warp of a
// 17-block piece 3 instead of 5), and that chain of a warp's blocks
// (wait, S = Q K^T, the softmax, O += P V, each step waiting on the last;
// with 4 warps, one a scheduler, ~8 cycles an instruction in Nsight
// Compute) sets the kernel's time. Where 2+ tokens' grid of them fits one
// wave and the longest piece gives each of the 8 warps two cache blocks
// or more. Measured on the H200 only, at head_dim 128 and 512 positions
// (docs/PERFORMANCE-RUNS-41.md): Llama-3-8B Q4_K_M 8 sequences +1.0-1.2%,
// 16 +4.0% (one piece a token there: the wave holds its 128 blocks),
// Qwen3-8B +1.0% and +3.0%; no change at 4,096 positions. Elsewhere the
// rule is untried: an A100 (108 SMs) takes one piece a token at batch 8,
// and head_dim 64 (64 KB a block) qualifies on more devices. Not taken:
// batch 32 (two waves of them; 30.6 us against 24.8 in
// kernels/dev/bench_attention.cu), 3-stage rings (192 KB: +0.7% and
// +1.0%), 12 warps (-0.6% against 8), one piece at 8 sequences (+0.4%,
// against +1.0% for two), and the S products' even and odd k steps summed
// apart (two MMA chains of 4: -0.2% at 8 sequences).
// VOLTAD_ATTENTION_WIDE=0 keeps 4 warps (a measurement switch).
constexpr int kWideWarps = 8;
bool wide_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("VOLTAD_ATTENTION_WIDE");
    return !(v && std::string(v) == "0");
  }();
  return allowed;
}

// A launch: the warps of a block, the stages of each warp's ring, the
// pieces per token and the fewest positions a piece holds
// (AttentionArgs::least_piece).
struct MmaPlan {
  int warps, stages, pieces, least;
};

// Pieces: as many as one wave of the kernel's blocks holds
// (attention_pieces_in_wave), at most kAttentionMmaMaxPieces (attention.h),
// and no more than give each of 4 warps a cache block (64 positions a
// piece): at batch 1 and 512 positions (H200,
// kernels/dev/bench_attention.cu), 8 pieces of 64 took 6.8 us where 33 of
// 16, most warps idle, took 8.1. Least: no piece of a token shorter than
// 64 positions, 256 from 4 tokens on (AttentionArgs::least_piece), also
// where the grid is planned for more positions than the tokens hold (a
// decode graph's max_context: a token at 512 of a 4,096-position plan took
// 33 pieces of 16 before). 256 from 4 tokens on: end to end on the H200 at
// 512 positions, VOLTAD_ATTENTION_MAX_SPLITS=2 (the same 2 pieces) against
// the wave's 4 (8 at 4 tokens): 8 sequences +0.8% and +1.6% in two calls
// (Llama-3-8B Q4_K_M; Qwen3-8B +1.0%), 4 +0.6%, where at 1 and 2 the
// longer pieces lost 4.2% and 2.1% (docs/PERFORMANCE-RUNS-28-30.md run
// 28). Stages: 3 (two blocks in flight while one computes; 2 blocks an SM)
// where the longest
// piece gives each warp two blocks or more: at 32 sequences and 512
// positions 24.8 us against 30.1 with 2, 8 sequences 11.3 against 12.1,
// one sequence at 4,096 positions 10.3 against 11.5; else 2 (3 blocks an
// SM).
template <int HD, bool kRope>
MmaPlan mma_plan(const AttentionArgs& a) {
  constexpr int kWarpBlock = kAttentionWarps * kKvBlockTokens;
  const int shortest = a.n_tokens >= 4 ? 4 * kWarpBlock : kWarpBlock;
  const int most = std::min(kAttentionMmaMaxPieces, std::max(1, (a.max_position + 1) / shortest));
  if (a.n_tokens >= 2 && wide_allowed() && MmaSmem<HD, 2, kWideWarps>::kBytes <= mma_room()) {
    const int wave = mma_wave_blocks<HD, 2, kRope, kWideWarps>();
    const int n = std::min(most, attention_pieces_in_wave(a, wave));
    if (int64_t(a.n_tokens) * a.n_kv_heads * n <= wave &&
        split_tokens(a.max_position, n) >= 2 * kWideWarps * kKvBlockTokens)
      return {kWideWarps, 2, n, shortest};
  }
  // 3 stages only where 2 blocks of them fit an SM (the H200's 228 KB,
  // not an A100's 164 KB, where 3 stages would leave 4 warps an SM).
  if (mma_max_stages() >= 3 &&
      mma_wave_blocks<HD, 3, kRope, kAttentionWarps>() >= 2 * device_sm_count()) {
    const int n = std::min(
        most, attention_pieces_in_wave(a, mma_wave_blocks<HD, 3, kRope, kAttentionWarps>()));
    if (split_tokens(a.max_position, n) >= 2 * kWarpBlock)  // the longest piece
      return {kAttentionWarps, 3, n, shortest};
  }
  return {
      kAttentionWarps, 2,
      std::min(most, attention_pieces_in_wave(a, mma_wave_blocks<HD, 2, kRope, kAttentionWarps>())),
      shortest};
}

}  // namespace attention80

using attention80::kernel_attention_mma;
using attention80::kWideWarps;
using attention80::mma_max_stages;
using attention80::mma_plan;
using attention80::MmaPlan;
using attention80::MmaSmem;

bool attention_mma_applies(const AttentionArgs& a) {
  return a.tensor_cores && (a.head_dim == 64 || a.head_dim == 128) && mma_max_stages() >= 2;
}

int attention_mma_pieces(const AttentionArgs& a) {
  return with_tensor_core_instance(a, [&](auto hd, auto rope) {
    return mma_plan<decltype(hd)::value, decltype(rope)::value>(a).pieces;
  });
}

int attention_mma_warps(const AttentionArgs& a) {
  return with_tensor_core_instance(a, [&](auto hd, auto rope) {
    return mma_plan<decltype(hd)::value, decltype(rope)::value>(a).warps;
  });
}

int attention_mma_least_piece(const AttentionArgs& a) {
  return with_tensor_core_instance(a, [&](auto hd, auto rope) {
    return mma_plan<decltype(hd)::value, decltype(rope)::value>(a).least;
  });
}

void launch_attention_mma(const AttentionArgs& args, const Fp16KvReader& cache,
                          cudaStream_t stream) {
  if (args.n_tokens == 0) return;
  check_attention_args(args, args.rope.inv_freq != nullptr);
  AttentionArgs a = args;  // with the plan's least piece, for pass 1 and the combine
  const int pieces = with_tensor_core_instance(a, [&](auto hd, auto rope) {
    constexpr int HD = decltype(hd)::value;
    constexpr bool kRope = decltype(rope)::value;
    const MmaPlan plan = mma_plan<HD, kRope>(a);
    a.least_piece = plan.least;
    const dim3 grid(unsigned(a.n_tokens), unsigned(a.n_kv_heads), unsigned(plan.pieces));
    if (plan.warps == kWideWarps)
      launch_kernel(kernel_attention_mma<HD, 2, kRope, kWideWarps>, grid, kWideWarps * 32,
                    MmaSmem<HD, 2, kWideWarps>::kBytes, stream, a, cache);
    else if (plan.stages == 3)
      launch_kernel(kernel_attention_mma<HD, 3, kRope, kAttentionWarps>, grid, kAttentionWarps * 32,
                    MmaSmem<HD, 3, kAttentionWarps>::kBytes, stream, a, cache);
    else
      launch_kernel(kernel_attention_mma<HD, 2, kRope, kAttentionWarps>, grid, kAttentionWarps * 32,
                    MmaSmem<HD, 2, kAttentionWarps>::kBytes, stream, a, cache);
    return plan.pieces;
  });
  CUDA_CHECK(cudaGetLastError());
  if (!a.arrivals) launch_attention_combine(a, pieces, stream);
}

}  // namespace voltad::kernels
