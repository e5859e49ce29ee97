// The sm_80+ narrow GEMM: batched decode (1..32 tokens) on mma.sync
// m16n8k16 with the weights decoded straight into the A fragments.
// Contract in gemm_sm80.h; measurements in docs/KERNEL-NOTES.md ("Narrow
// GEMM").
//
// Why not the portable narrow kernel (gemm_narrow.cu) here: wmma's fragment
// layout is opaque, so it decodes a chunk to FP16 in shared memory and reads
// it back, 4 KB of shared-memory traffic per 512 bytes of Int4 weights, and
// on the H200 that, not DRAM, sets its pace (Nsight: L1/TEX 83% busy, DRAM
// 14%). mma.sync's layout is documented (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"): lane (g = lane/4, t = lane%4) holds A's rows g and g+8 at
// k = 2t, 2t+1, 2t+8, 2t+9, and x's token g at the same k. Any order of a
// chunk's 32 values along k will do if x takes the same one, so the MMAs
// take the order in which the Int4 layout (byte i = value i | value i+16
// << 4) gives lane t its values from the chunk's word t alone (bytes 4t to
// 4t+3): k 2t, 2t+1, 2t+8, 2t+9 of the first MMA are values 4t, 4t+2,
// 4t+1, 4t+3 (the low nibbles of bytes 0 and 2, then 1 and 3), and of the
// second MMA 16 more (the high nibbles). Each MMA still covers 16 values
// (0-15, 16-31), one Q6_K sub-block. So:
//   - each warp copies raw weight bytes (quants and scales) of its 32 rows
//     by cp.async into its own ring of 2-4 stages of 4 chunks;
//   - per chunk and 16-row tile a lane reads its word of the two rows it
//     needs, turns nibbles into FP16 with the 1024+q bit trick (64+q
//     for the high nibbles, which then need no shift, except in the Q4_K
//     kernels of 4 token tiles, which cannot spare the register;
//     low_nibbles), and
//     scales them: Q4_0 in FP16, as the portable decoder does; Q4_K as the
//     exact integers sc*q, with D, M and the mins applied once per stage
//     after the MMAs (k256_six_bits); Q6_K as the exact integers q - 32,
//     with d*sc applied to each MMA's result (one MMA is one sub-block);
//   - x is rounded to FP16 once per call into scratch, each chunk's values
//     in that order so that lane t's B fragments for both MMAs are one
//     16-byte load (kernels/narrow_x.cuh), plus each chunk's x sum (the
//     Q4_K mins);
//   - every weight is decoded once for all tokens (up to 4 n8 tiles), and
//     the 8 or 16 warps of a block split k; their partial sums meet in shared
//     memory and are added in warp order; or (shared x, NarrowSharedX) RW
//     warps split a block's 32 * RW rows, two groups of them split k, and
//     each group's x comes through shared memory, copied once a stage;
//   - where 8-warp blocks would not fill the SMs (Q4_K at 25-32 tokens on a
//     4096-row matrix: one block an SM where two fit), gridDim.y blocks
//     split k as well (kSplit); each writes its sums to the lent split
//     memory and the last of a row block's to arrive adds them in split
//     order (NarrowSplit, kernels/narrow_blocks_sm80.cuh).
// Formats: Int4Sym32 (Q4_0), Int4K256 (Q4_K), Int6K256 (Q6_K): the ones of
// the Q4_0 and Q4_K_M models; others go to the portable kernels.
// On sm_90, gate|up-sized Q4_K and Q4_0 products at 1-8 tokens go to the
// streaming blocks instead (kernels/narrow_bulk_sm90.cu), once x is in
// scratch (launch_gemm_narrow_sm80).
#include <cuda_fp16.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/gemm_decode.cuh"
#include "kernels/gemm_sm80.h"
#include "kernels/launch.cuh"
#include "kernels/narrow_blocks_sm80.cuh"
#include "kernels/narrow_sm80.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels {

namespace narrow80 {

// A block's body: kernels/narrow_blocks_sm80.cuh (narrow_blocks).
template <PackedFormat F, int NT, int W, int B, int S = stages_for<F, W, B>(), bool kSplit = false,
          int RW = 1>
__global__ void __launch_bounds__(W * 32, B)
    kernel_narrow_sm80(GemmArgs a, const uint32_t* xp, NarrowSplit split) {
  narrow_blocks<F, NT, W, B, S, kSplit, RW>(a, xp, split, blockIdx.x);
}

// Two products of the same x in one launch (launch_gemm_narrow_sm80_pair):
// the first blocks_a blocks take a's row blocks, the rest b's; 8x2 blocks,
// one token tile, no split.
template <PackedFormat FA, int SA, PackedFormat FB, int SB>
__global__ void __launch_bounds__(8 * 32, 2)
    kernel_narrow_sm80_pair(GemmArgs a, GemmArgs b, const uint32_t* xp, int blocks_a) {
  if (int(blockIdx.x) < blocks_a)
    narrow_blocks<FA, 1, 8, 2, SA, false, 1>(a, xp, NarrowSplit{}, blockIdx.x);
  else
    narrow_blocks<FB, 1, 8, 2, SB, false, 1>(b, xp, NarrowSplit{}, blockIdx.x - blocks_a);
}

bool format_supported(PackedFormat f) {
  return f == PackedFormat::Int4Sym32 || f == PackedFormat::Int4K256 || f == PackedFormat::Int6K256;
}

using sm80::device;

constexpr size_t kReservedPerBlock = 1024;  // the runtime's own shared memory a block

// The stages of Q6_K's 8x2 ring on this device: 3 where two such blocks
// fit an SM (the H100/H200's 228 KiB: 16 warps an SM, where 4 stages left
// one block and 8 warps; PERFORMANCE-RUNS-27.md), else 4, as before (an
// A100's 164 KiB holds one block either way; a 99 KiB block limit, sm_86/89,
// holds neither, and Q6_K stays with the portable kernels there).
int q6k_ring() {
  constexpr size_t three = smem_bytes<PackedFormat::Int6K256, 1, 8, 2, 3>() + kReservedPerBlock;
  return 2 * three <= size_t(device().smem_per_sm) ? 3 : 4;
}

// The most shared memory an 8-warp kernel of format f takes here.
size_t smem_for(PackedFormat f) {
  switch (f) {
    case PackedFormat::Int4Sym32:
      return smem_bytes<PackedFormat::Int4Sym32, 4, 8, 2>();
    case PackedFormat::Int4K256:
      return smem_bytes<PackedFormat::Int4K256, 4, 8, 2>();
    default:
      return q6k_ring() == 3 ? smem_bytes<PackedFormat::Int6K256, 4, 8, 2, 3>()
                             : smem_bytes<PackedFormat::Int6K256, 4, 8, 2, 4>();
  }
}

template <PackedFormat F, int NT, int W, int B, int S = stages_for<F, W, B>(), bool kSplit = false,
          int RW = 1>
void launch(const GemmArgs& a, const uint32_t* xp, const NarrowSplit& split, dim3 blocks,
            cudaStream_t stream) {
  auto kernel = kernel_narrow_sm80<F, NT, W, B, S, kSplit, RW>;
  constexpr size_t kSmem = smem_bytes<F, NT, W, B, S, RW>();
  static const bool opted_in = [&] {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return true;
  }();
  (void)opted_in;
  launch_kernel(kernel, blocks, W * 32, kSmem, stream, a, xp, split);
  CUDA_CHECK(cudaGetLastError());
}

// The blocks for one token tile of 4-bit weights (gemm_sm80.h): set by the
// tests, else VOLTAD_NARROW_ONE_TILE=8x2|8x3, else by the token count.
std::atomic<NarrowOneTile> g_one_tile{NarrowOneTile::Default};
NarrowOneTile one_tile(int n) {
  static const NarrowOneTile from_env = [] {
    const char* v = std::getenv("VOLTAD_NARROW_ONE_TILE");
    const std::string s = v ? v : "";
    return s == "8x2"   ? NarrowOneTile::W8B2
           : s == "8x3" ? NarrowOneTile::W8B3
                        : NarrowOneTile::Default;
  }();
  const NarrowOneTile set = g_one_tile.load(std::memory_order_relaxed);
  const NarrowOneTile t = set != NarrowOneTile::Default ? set : from_env;
  if (t != NarrowOneTile::Default) return t;
  return n > 4 ? NarrowOneTile::W8B3 : NarrowOneTile::W8B2;
}

// Blocks whose warps share x (kSharedX; gemm_sm80.h, NarrowSharedX):
// Pair: 8 warps, 4 a k range of 128 rows, rings of 2 stages, two blocks an
// SM; Wide: one block an SM of two groups of RW warps, RW the least of 4-6
// whose blocks do not outnumber the SMs, as many stages (2-4) as fit 226
// KiB. Built where the rule may take them: Q4_K and Q6_K at 25-32 tokens,
// Q4_0 at 1-8.
constexpr int kPairRowWarps = 4, kPairStages = 2, kWideMaxRowWarps = 6;
template <PackedFormat F, int NT>
constexpr bool shared_built() {
  return F == PackedFormat::Int4Sym32 ? NT == 1 : NT == 4;
}
template <PackedFormat F, int NT, int RW>
constexpr int wide_stages() {
  constexpr size_t stage = size_t(2 * RW) * slot_bytes<F>() + 2 * size_t(x_stage_bytes<F, NT>());
  constexpr size_t budget = 226 * 1024;
  return budget / stage >= 4 ? 4 : budget / stage >= 3 ? 3 : 2;
}
template <PackedFormat F, int NT, int RW>
constexpr size_t wide_smem() {
  return smem_bytes<F, NT, 2 * RW, 1, wide_stages<F, NT, RW>(), RW>();
}
// Wide's RW for `rows`: the least whose blocks do not outnumber the SMs
// (at 4,096-256 rows a block over a multiple of 32 * RW SMs, a wave of
// 106-132 blocks on 132 SMs); 0 where more than kWideMaxRowWarps would be
// needed, or where the 32-row blocks number fewer than 4 an SM.
int wide_rw(int64_t rows) {
  if ((rows + kRows - 1) / kRows < 4 * int64_t(device().sms)) return 0;
  for (int rw = 4; rw <= kWideMaxRowWarps; ++rw)
    if ((rows + kRows * rw - 1) / (kRows * rw) <= device().sms) return rw;
  return 0;
}

// Set by the tests, else VOLTAD_NARROW_SHARED_X: 0 (never), q4 (the rule
// for the 4-bit formats only), pair or wide (wherever built and fitting),
// anything else the rule.
std::atomic<NarrowSharedX> g_shared_x{NarrowSharedX::Rule};
enum class SharedEnv { Rule, Never, FourBit, Pair, Wide };
SharedEnv shared_env() {
  static const SharedEnv e = [] {
    const char* v = std::getenv("VOLTAD_NARROW_SHARED_X");
    const std::string s = v ? v : "";
    return s == "0"      ? SharedEnv::Never
           : s == "q4"   ? SharedEnv::FourBit
           : s == "pair" ? SharedEnv::Pair
           : s == "wide" ? SharedEnv::Wide
                         : SharedEnv::Rule;
  }();
  return e;
}

// The shared-x blocks a launch of F at NT token tiles takes: the rule, as
// measured on the H200 (docs/PERFORMANCE-RUNS-31-33.md run 31), is Wide where it fits
// (Qwen3-8B's gate|up: 6 row warps, 128 blocks), else Pair (Llama-3-8B's:
// Wide would need 7 row warps, whose 14-warp blocks are held to 128
// registers and spill) for Q4_K and Q6_K at 25-32 tokens; Pair for Q4_0 at
// 1-8 (batch 8 +3.7%). Not at 9-24 tokens, nor at 1-8 for Q4_K (batch 8
// -1 to -3%): there the 32-row blocks' x is short enough to stay in L1/L2
// at little cost.
template <PackedFormat F, int NT>
NarrowSharedX shared_x(const GemmArgs& a) {
  if constexpr (!shared_built<F, NT>()) {
    return NarrowSharedX::Never;
  } else {
    NarrowSharedX how = g_shared_x.load(std::memory_order_relaxed);
    // The rule as measured: on the H100/H200's 228 KiB an SM.
    const bool measured = device().smem_per_sm >= 228 * 1024;
    if (how == NarrowSharedX::Rule) {
      switch (shared_env()) {
        case SharedEnv::Never:
          return NarrowSharedX::Never;
        case SharedEnv::FourBit:
          if (F == PackedFormat::Int6K256) return NarrowSharedX::Never;
          break;
        case SharedEnv::Pair:
          how = NarrowSharedX::Pair;
          break;
        case SharedEnv::Wide:
          how = NarrowSharedX::Wide;
          break;
        case SharedEnv::Rule:
          break;
      }
    }
    if (how == NarrowSharedX::Never) return how;
    const int64_t rows = a.w.layout.rows;
    const int rw = wide_rw(rows);
    size_t wide = 0;
    switch (rw) {
      case 4:
        wide = wide_smem<F, NT, 4>();
        break;
      case 5:
        wide = wide_smem<F, NT, 5>();
        break;
      case 6:
        wide = wide_smem<F, NT, 6>();
        break;
      default:
        break;
    }
    const bool wide_fits = wide && wide <= size_t(device().max_smem);
    const int64_t pair_blocks = (rows + kRows * kPairRowWarps - 1) / (kRows * kPairRowWarps);
    const bool pair_fits =
        pair_blocks >= device().sms &&
        2 * (smem_bytes<F, NT, 8, 2, kPairStages, kPairRowWarps>() + kReservedPerBlock) <=
            size_t(device().smem_per_sm);
    if (how == NarrowSharedX::Wide) return wide_fits ? how : NarrowSharedX::Never;
    if (how == NarrowSharedX::Pair) return pair_fits ? how : NarrowSharedX::Never;
    if (!measured) return NarrowSharedX::Never;
    if (F != PackedFormat::Int4Sym32 && wide_fits) return NarrowSharedX::Wide;
    return pair_fits ? NarrowSharedX::Pair : NarrowSharedX::Never;
  }
}

// The blocks a launch takes: 16 warps (one an SM), or 8 warps, two or three
// an SM (shared-x blocks: shared_x, above).
enum class Pick { Sixteen, Eight, EightThree };
template <PackedFormat F, int NT>
Pick pick(const GemmArgs& a) {
  const int64_t blocks = (a.w.layout.rows + kRows - 1) / kRows;
  // 16 warps where the blocks would not fill the SMs once, except for
  // Int4K256 at 25-32 tokens: under the 128-register cap both kernels spill
  // there (56 bytes at 16 warps, 12 at 8 since run 22), and 16 warps
  // measured slower than 8 (docs/KERNEL-NOTES.md). Int6K256 at 17-32
  // tokens takes 16 warps always: the 8-warp kernels spill 20-44 bytes
  // there, the 16-warp ones 0-24 (b32 +1.1%, PERFORMANCE-RUNS-18-20.md run 19).
  const bool spills = F == PackedFormat::Int4K256 && NT == 4;
  const bool wide = F == PackedFormat::Int6K256 && NT >= 3;
  if ((wide || (!spills && blocks <= device().sms)) &&
      smem_bytes<F, NT, 16, 1>() <= size_t(device().max_smem))
    return Pick::Sixteen;
  if constexpr (NT == 1 && F != PackedFormat::Int6K256) {
    // 8x3 only where three blocks fit an SM (the H100/H200's 228 KiB). An
    // A100's 164 KiB holds one 8x2 block or two 8x3 ones: not measured,
    // so it keeps 8x2.
    const bool three_fit =
        3 * (smem_bytes<F, 1, 8, 3>() + kReservedPerBlock) <= size_t(device().smem_per_sm);
    if (three_fit && one_tile(a.n) == NarrowOneTile::W8B3) return Pick::EightThree;
  }
  return Pick::Eight;
}

// Blocks that split k (gemm_sm80.h), for the one launch shape that has them
// (Int4K256, 4 token tiles, 8x2 blocks): set by the tests, else
// VOLTAD_NARROW_SPLITS=N (comparisons; 1: none), else kNarrowSplits where
// the blocks would leave SMs with one (a split per block an SM holds); 1
// where the scratch lends no room for them.
std::atomic<int> g_splits{0};
int splits_from_env() {
  static const int n = [] {
    const char* v = std::getenv("VOLTAD_NARROW_SPLITS");
    const int k = v ? std::atoi(v) : 0;
    return k < 0 ? 0 : k > kNarrowMaxSplits ? kNarrowMaxSplits : k;
  }();
  return n;
}
int row_blocks(const GemmArgs& a) {
  return int((a.w.layout.rows + kRows - 1) / kRows);
}
template <PackedFormat F, int NT>
int splits_for(const GemmArgs& a, const GemmScratch& scratch, Pick p) {
  if (F != PackedFormat::Int4K256 || NT != 4 || p != Pick::Eight) return 1;
  const int tests = g_splits.load(std::memory_order_relaxed);
  int want = tests > 0 ? tests : splits_from_env();
  if (want == 0) {
    // Two such blocks must fit an SM (the H100/H200's 228 KiB; an A100's
    // 164 KiB holds one, and its splits would only run in two waves).
    const bool two_fit = 2 * (smem_bytes<F, NT, 8, 2>() + kReservedPerBlock) <=
                         size_t(device().smem_per_sm);
    want = two_fit && row_blocks(a) <= device().sms ? kNarrowSplits : 1;
  }
  if (want > 1 && (!scratch.split || reinterpret_cast<uintptr_t>(scratch.split) % 256 != 0 ||
                   a.w.layout.rows > scratch.split_rows ||
                   scratch.split_bytes < gemm_narrow_sm80_split_bytes(scratch.split_rows, want)))
    return 1;
  return want;
}
// The counters, then the sums, where the memory's split_rows put them: the
// same places for every launch that shares it, whatever its rows.
NarrowSplit split_at(const GemmScratch& scratch) {
  auto* base = static_cast<uint8_t*>(scratch.split);
  return {reinterpret_cast<uint32_t*>(base),
          reinterpret_cast<float*>(base + gemm_narrow_sm80_split_bytes(scratch.split_rows, 0))};
}

// Blocks of RW row warps (shared x): their grid.
template <PackedFormat F, int NT, int W, int B, int S, int RW>
void launch_rows(const GemmArgs& a, const uint32_t* xp, cudaStream_t stream) {
  const dim3 blocks(unsigned((a.w.layout.rows + kRows * RW - 1) / (kRows * RW)));
  launch<F, NT, W, B, S, false, RW>(a, xp, NarrowSplit{}, blocks, stream);
}
// `how`: Pair or Wide, as shared_x gave it (Wide: wide_rw is 4-6).
template <PackedFormat F, int NT>
void launch_shared(const GemmArgs& a, const uint32_t* xp, NarrowSharedX how, cudaStream_t stream) {
  if (how == NarrowSharedX::Pair)
    return launch_rows<F, NT, 8, 2, kPairStages, kPairRowWarps>(a, xp, stream);
  switch (wide_rw(a.w.layout.rows)) {
    case 4:
      return launch_rows<F, NT, 8, 1, wide_stages<F, NT, 4>(), 4>(a, xp, stream);
    case 5:
      return launch_rows<F, NT, 10, 1, wide_stages<F, NT, 5>(), 5>(a, xp, stream);
    case 6:
      return launch_rows<F, NT, 12, 1, wide_stages<F, NT, 6>(), 6>(a, xp, stream);
    default:
      VOLTAD_KERNEL_REQUIRE(false, "gemm narrow sm80: wide shared-x blocks of 4-6 row warps");
  }
}

template <PackedFormat F, int NT>
void launch_warps(const GemmArgs& a, const uint32_t* xp, const GemmScratch& scratch,
                  cudaStream_t stream) {
  if constexpr (shared_built<F, NT>()) {
    const NarrowSharedX how = shared_x<F, NT>(a);
    if (how != NarrowSharedX::Never) return launch_shared<F, NT>(a, xp, how, stream);
  }
  const Pick p = pick<F, NT>(a);
  const int splits = splits_for<F, NT>(a, scratch, p);
  const NarrowSplit split = splits > 1 ? split_at(scratch) : NarrowSplit{};
  const dim3 blocks(unsigned(row_blocks(a)), unsigned(splits));
  switch (p) {
    case Pick::Sixteen:
      return launch<F, NT, 16, 1>(a, xp, split, blocks, stream);
    case Pick::EightThree:
      if constexpr (NT == 1 && F != PackedFormat::Int6K256)
        return launch<F, 1, 8, 3>(a, xp, split, blocks, stream);
      break;
    case Pick::Eight:
      break;
  }
  if constexpr (F == PackedFormat::Int6K256) {
    if (q6k_ring() == 4) return launch<F, NT, 8, 2, 4>(a, xp, split, blocks, stream);
  }
  if constexpr (F == PackedFormat::Int4K256 && NT == 4) {
    constexpr int kRing = stages_for<F, 8, 2>();
    if (splits > 1) return launch<F, NT, 8, 2, kRing, true>(a, xp, split, blocks, stream);
  }
  launch<F, NT, 8, 2>(a, xp, split, blocks, stream);
}

// pick() at one token tile, as the header's NarrowOneTile.
template <PackedFormat F>
NarrowOneTile one_tile_taken(const GemmArgs& a) {
  switch (pick<F, 1>(a)) {
    case Pick::EightThree:
      return NarrowOneTile::W8B3;
    case Pick::Eight:
      return NarrowOneTile::W8B2;
    default:
      return NarrowOneTile::Default;
  }
}

template <PackedFormat F>
void launch_format(const GemmArgs& a, const uint32_t* xp, const GemmScratch& scratch,
                   cudaStream_t stream) {
  switch ((a.n + 7) / 8) {
    case 1:
      return launch_warps<F, 1>(a, xp, scratch, stream);
    case 2:
      return launch_warps<F, 2>(a, xp, scratch, stream);
    case 3:
      return launch_warps<F, 3>(a, xp, scratch, stream);
    default:
      return launch_warps<F, 4>(a, xp, scratch, stream);
  }
}

// The pair's blocks: 8x2 for both, each format's ring as its own 8x2
// launch has it, the larger shared memory of the two.
template <PackedFormat FA, int SA, PackedFormat FB, int SB>
void launch_pair(const GemmArgs& a, const GemmArgs& b, const uint32_t* xp, cudaStream_t stream) {
  auto kernel = kernel_narrow_sm80_pair<FA, SA, FB, SB>;
  constexpr size_t kA = smem_bytes<FA, 1, 8, 2, SA>(), kB = smem_bytes<FB, 1, 8, 2, SB>();
  constexpr size_t kSmem = kA > kB ? kA : kB;
  static const bool opted_in = [&] {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return true;
  }();
  (void)opted_in;
  const int blocks_a = row_blocks(a), blocks_b = row_blocks(b);
  launch_kernel(kernel, dim3(unsigned(blocks_a + blocks_b)), 8 * 32, kSmem, stream, a, b, xp,
                blocks_a);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace narrow80

bool gemm_narrow_sm80_pair_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_NARROW_PAIR");
    return !(v && v[0] == '0');
  }();
  return on;
}

namespace narrow80 {

// shared_x() at a's token tiles.
template <PackedFormat F>
NarrowSharedX shared_x_at(const GemmArgs& a) {
  switch ((a.n + 7) / 8) {
    case 1:
      return shared_x<F, 1>(a);
    case 2:
      return shared_x<F, 2>(a);
    case 3:
      return shared_x<F, 3>(a);
    default:
      return shared_x<F, 4>(a);
  }
}

// The split count launch_warps takes, by format and token tiles.
template <PackedFormat F>
int splits_taken(const GemmArgs& a, const GemmScratch& scratch) {
  switch ((a.n + 7) / 8) {
    case 1:
      return splits_for<F, 1>(a, scratch, pick<F, 1>(a));
    case 2:
      return splits_for<F, 2>(a, scratch, pick<F, 2>(a));
    case 3:
      return splits_for<F, 3>(a, scratch, pick<F, 3>(a));
    default:
      return splits_for<F, 4>(a, scratch, pick<F, 4>(a));
  }
}

}  // namespace narrow80

void gemm_narrow_sm80_set_shared_x(NarrowSharedX how) {
  narrow80::g_shared_x.store(how, std::memory_order_relaxed);
}

NarrowSharedX gemm_narrow_sm80_shared_x_taken(const GemmArgs& a) {
  if (a.n < 1 || a.n > narrow80::kMaxTokens) return NarrowSharedX::Never;
  if (gemm_narrow_sm80_bulk_taken(a)) return NarrowSharedX::Never;
  switch (a.w.layout.format) {
    case PackedFormat::Int4Sym32:
      return narrow80::shared_x_at<PackedFormat::Int4Sym32>(a);
    case PackedFormat::Int4K256:
      return narrow80::shared_x_at<PackedFormat::Int4K256>(a);
    case PackedFormat::Int6K256:
      return narrow80::shared_x_at<PackedFormat::Int6K256>(a);
    default:
      return NarrowSharedX::Never;
  }
}

void gemm_narrow_sm80_set_one_tile(NarrowOneTile shape) {
  narrow80::g_one_tile.store(shape, std::memory_order_relaxed);
}

size_t gemm_narrow_sm80_split_bytes(int64_t rows, int splits) {
  const size_t blocks = size_t((rows + narrow80::kRows - 1) / narrow80::kRows);
  const size_t arrivals = (blocks * 4 + 255) / 256 * 256;
  return arrivals + blocks * size_t(splits) * narrow80::kSplitSums * sizeof(float);
}

void gemm_narrow_sm80_set_splits(int splits) {
  narrow80::g_splits.store(splits < 0 ? 0 : splits > kNarrowMaxSplits ? kNarrowMaxSplits : splits,
                           std::memory_order_relaxed);
}

int gemm_narrow_sm80_splits_taken(const GemmArgs& a, const GemmScratch& scratch) {
  if (a.n < 1 || a.n > narrow80::kMaxTokens) return 1;
  if (gemm_narrow_sm80_shared_x_taken(a) != NarrowSharedX::Never) return 1;
  switch (a.w.layout.format) {
    case PackedFormat::Int4Sym32:
      return narrow80::splits_taken<PackedFormat::Int4Sym32>(a, scratch);
    case PackedFormat::Int4K256:
      return narrow80::splits_taken<PackedFormat::Int4K256>(a, scratch);
    case PackedFormat::Int6K256:
      return narrow80::splits_taken<PackedFormat::Int6K256>(a, scratch);
    default:
      return 1;
  }
}

NarrowOneTile gemm_narrow_sm80_one_tile_taken(const GemmArgs& a) {
  if (a.n < 1 || a.n > 8) return NarrowOneTile::Default;
  if (gemm_narrow_sm80_shared_x_taken(a) != NarrowSharedX::Never) return NarrowOneTile::Default;
  if (gemm_narrow_sm80_bulk_taken(a)) return NarrowOneTile::Default;
  switch (a.w.layout.format) {
    case PackedFormat::Int4Sym32:
      return narrow80::one_tile_taken<PackedFormat::Int4Sym32>(a);
    case PackedFormat::Int4K256:
      return narrow80::one_tile_taken<PackedFormat::Int4K256>(a);
    case PackedFormat::Int6K256:
      return narrow80::one_tile_taken<PackedFormat::Int6K256>(a);
    default:
      return NarrowOneTile::Default;
  }
}

size_t gemm_narrow_sm80_scratch_bytes(int n, int64_t cols) {
  // n8 rows of cols fp16 values, then a 4-byte x sum per row and chunk.
  return size_t((n + 7) / 8 * 8) * (size_t(cols) * 2 + size_t(cols) / 32 * 4);
}

bool gemm_narrow_sm80_supports(const GemmArgs& a, const GemmScratch& scratch) {
  const sm80::Device& d = sm80::device();
  const PackedLayout& l = a.w.layout;
  // Stages of 4 chunks, whose scales are 8 aligned bytes for Int4Sym32
  // (cols % 128); the K256 formats come in rows of whole super-blocks.
  const int64_t cols_multiple = l.format == PackedFormat::Int4Sym32 ? 128 : 256;
  return d.major >= 8 && d.code && narrow80::format_supported(l.format) && a.n >= 1 &&
         a.n <= narrow80::kMaxTokens && l.cols % cols_multiple == 0 &&
         reinterpret_cast<uintptr_t>(a.w.data) % 16 == 0 && scratch.data &&
         reinterpret_cast<uintptr_t>(scratch.data) % 16 == 0 &&
         scratch.bytes >= gemm_narrow_sm80_scratch_bytes(a.n, l.cols) &&
         narrow80::smem_for(l.format) <= size_t(d.max_smem) && (l.rows + 31) / 32 <= 0x7FFFFFFF;
}

bool launch_gemm_narrow_sm80_pair(const GemmArgs& a, const GemmArgs& b, const GemmScratch& scratch,
                                  cudaStream_t stream) {
  const PackedLayout &la = a.w.layout, &lb = b.w.layout;
  if (gemm_has_fused_epilogue(a) || gemm_has_fused_epilogue(b)) return false;
  if (!gemm_narrow_sm80_pair_enabled() || la.format != PackedFormat::Int4K256 ||
      lb.format != PackedFormat::Int6K256 || a.n != b.n || a.n < 1 || a.n > 8 || a.x != b.x ||
      a.ldx != b.ldx || la.cols != lb.cols || la.rows == 0 || lb.rows == 0 ||
      !gemm_narrow_sm80_supports(a, scratch) || !gemm_narrow_sm80_supports(b, scratch))
    return false;
  VOLTAD_KERNEL_REQUIRE(a.ldx >= la.cols && a.ldy >= la.rows && b.ldy >= lb.rows,
                        "gemm narrow sm80 pair: row strides");
  auto* xp = static_cast<uint32_t*>(scratch.data);
  if (scratch.holds_x != a.x) narrow80::launch_x_to_fragments(a, xp, stream);
  constexpr PackedFormat kA = PackedFormat::Int4K256, kB = PackedFormat::Int6K256;
  constexpr int kStagesA = narrow80::stages_for<kA, 8, 2>();
  if (narrow80::q6k_ring() == 4)
    narrow80::launch_pair<kA, kStagesA, kB, 4>(a, b, xp, stream);
  else
    narrow80::launch_pair<kA, kStagesA, kB, narrow80::stages_for<kB, 8, 2>()>(a, b, xp, stream);
  return true;
}

void launch_gemm_narrow_sm80(const GemmArgs& a, const GemmScratch& scratch, cudaStream_t stream) {
  VOLTAD_KERNEL_REQUIRE(gemm_narrow_sm80_supports(a, scratch),
                        "gemm narrow sm80: arguments it takes (gemm_narrow_sm80_supports)");
  VOLTAD_KERNEL_REQUIRE(a.ldx >= a.w.layout.cols && a.ldy >= a.w.layout.rows,
                        "gemm narrow sm80: row strides");
  VOLTAD_KERNEL_REQUIRE(!gemm_has_fused_epilogue(a),
                        "gemm narrow sm80: a norm's pieces and SwiGLU are the portable "
                        "kernel's");
  auto* xp = static_cast<uint32_t*>(scratch.data);
  if (scratch.holds_x != a.x)  // else written by its producer (kernels/narrow_x.cuh)
    narrow80::launch_x_to_fragments(a, xp, stream);
  if (launch_narrow_bulk_sm90(a, xp, stream)) return;
  switch (a.w.layout.format) {
    case PackedFormat::Int4Sym32:
      return narrow80::launch_format<PackedFormat::Int4Sym32>(a, xp, scratch, stream);
    case PackedFormat::Int4K256:
      return narrow80::launch_format<PackedFormat::Int4K256>(a, xp, scratch, stream);
    default:
      return narrow80::launch_format<PackedFormat::Int6K256>(a, xp, scratch, stream);
  }
}

}  // namespace voltad::kernels
