// The narrow GEMM: batched decode (2..32 tokens) on FP16 tensor cores
// through wmma m16n16k16, or m8n32k16 for 8 tokens or fewer and for paired
// B (sm_70+).
// Contract in gemm_wmma.h (GemmTile::N16);
// measurements in docs/KERNEL-NOTES.md ("Narrow GEMM").
//
// At a few tokens a GEMM is a matvec: the weights must stream at the
// memory's bandwidth, and the arithmetic hides behind them. The prefill
// tiles do the opposite (one 64-value stage of loads in flight per block,
// few blocks): a 4096-row matrix gives the 32x64 tile 64 blocks, and each
// waits on memory once per stage. Here:
//   - a block owns 32 weight rows (one per lane) and 16 tokens (32 for
//     17-32 tokens of paired B unless VOLTAD_NARROW_TOKENS32=0; 8 where
//     a launch has 8 or fewer: no padding tokens' x, one MMA a k step,
//     and room in the registers: Q4_K's 48-56 bytes of spills gone; b8
//     +15% Q4_K_M, +11% Q4_0 under `portable`, run 44), and splits
//     k over its warps (16 where the blocks fit the SMs once over, else 8,
//     two blocks per SM; 12 or 6 in 32-token blocks), so even a 4096-row
//     matrix keeps ~16 warps per SM streaming;
//   - the 4-bit formats' nibbles (Q6_K's too at 8 tokens) come a stage of
//     4 chunks ahead through shared memory, 8 rows' contiguous bytes a
//     load, and the rest of the stage (scales) in one to three vector
//     loads a lane (StageSide); the other formats keep kDepth chunks (32
//     values, 16+ bytes each) of the lane's row in flight, refilling a slot
//     as soon as it is decoded. The kernel is bound by its L1, paid per
//     cache line a load touches (run 46);
//   - a warp decodes one chunk per lane into its own shared tile (32 rows x
//     32 k), stages the matching 32 k of x (the block's tokens, loaded two
//     chunks ahead) as FP16 beside it, and runs 2 x 2 wmma (2 x 1 at 8
//     tokens); no block-wide barrier
//     until the end. The 4-bit formats on fp16 x build the weights' B
//     fragments in registers instead where a probe found the device's
//     wmma order (paired B: paired_chunk below, kernels/wmma_pairs.h);
//   - the warps' partial sums meet in shared memory, are added in warp
//     order (deterministic), and go out with the bias and the residual add.
// Weights decode with kernels/gemm_decode.cuh, the prefill GEMM's own code,
// so both see the same FP16 weights; x is rounded to FP16 as there.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/gemm_decode.cuh"
#include "kernels/gemm_narrow_pairs.h"
#include "kernels/gemm_wmma.h"
#include "kernels/launch.cuh"
#include "kernels/narrow_plan.h"
#include "kernels/narrow_stage_side.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/norm_pieces.cuh"
#include "kernels/swiglu_fused.cuh"
#include "kernels/wmma_pairs.h"

namespace voltad::kernels {

namespace {

namespace wmma = nvcuda::wmma;
using namespace gemm_decode;
using narrow_stage::SideMemory;
using narrow_stage::StageSide;

constexpr int kNarrowTokens = 16;  // tokens a block: one wmma fragment (or kNarrowTokens8)
constexpr int kNarrowTokens8 = 8;  // at 8 tokens or fewer: m8n32k16 fragments
// 17-32 tokens in one block (paired B only; VOLTAD_NARROW_TOKENS32=0 off): each
// chunk's B decoded once for four 8-token MMAs, not once in each of two
// 16-token blocks. ptxas gives it 155-162 registers (sm_70 and sm_90), so
// 12 warps an SM: blocks of kNarrowWarps32 warps, or half that two an SM.
constexpr int kNarrowTokens32 = 32;
constexpr int kNarrowWarps32 = 12;
static_assert(kNarrowWarps32 == 12, "narrow_warps32_for (kernels/narrow_plan.h) answers 12 or 6");
constexpr int kNarrowRows = 32;                // weight rows per block: one per lane
constexpr int kNarrowLd = 32 + 8;              // shared row stride in halves (80 bytes:
                                               // 8 lanes' 16-byte stores hit distinct banks)
constexpr int kNarrowRedLd = kNarrowRows + 4;  // fp32 partial sums, floats per row

// Chunks per lane in flight: ~64 bytes of weights per lane within 128
// registers (two 8-warp blocks share an SM). Even, so that x's two slots
// (below) line up with the unrolled loop.
template <PackedFormat F>
constexpr int depth_for() {
  switch (F) {
    case PackedFormat::Int4Sym32:
    case PackedFormat::Int4Affine32:
    case PackedFormat::Int4K256:
      return 4;
    default:
      return 2;
  }
}

// Formats whose 16-byte chunks of nibbles (`quants`) a warp stages through
// shared memory, kStageChunks chunks of its 32 rows at a time: lane l
// loads 16 bytes at row 8i + l/4, chunk l%4 (i = 0..3), so that one load
// instruction touches 8 rows' 64 contiguous bytes, where lane = row
// touched 32 rows (32 cache lines a load). Nsight Compute on the H200 had
// the kernel bound by the L1 (85-88% busy, DRAM 11-16%) at 16 tokens.
// The rest of a chunk (scales) is still read by the lane of its row, a
// stage ahead: once a stage as vector loads where the rows are whole
// stages (StageSide, below), else a chunk at a time. Q6_K's
// nibbles (its crumbs, scales and d stay the lane's) are staged in the
// 8-token blocks, and in the 16-token ones where x comes in fp16 (kHalfX):
// there they fit the registers (109-126 under ptxas for sm_90, no spills).
// Batch 8 +6.6% (Llama-3-8B Q4_K_M) and +6.4% (Qwen3-8B) under `portable`
// (run 46 in docs/PERFORMANCE.md); at 16 tokens with fp16 x batch 16
// +4.4-4.8%, batch 32 +6.7-7.1% (run 47). With fp32 x in the 16-token
// blocks they spilled and lost 3.1-3.4% at 8-32 tokens
// (docs/PERFORMANCE-RUNS-43.md).
template <PackedFormat F, int T, bool kHalfX>
constexpr bool staged_quants() {
  return F == PackedFormat::Int4Sym32 || F == PackedFormat::Int4Affine32 ||
         F == PackedFormat::Int4K256 ||
         (F == PackedFormat::Int6K256 && (T == kNarrowTokens8 || kHalfX));
}
constexpr int kStageChunks = 4;
constexpr int kStageRowBytes = kStageChunks * 16;
constexpr int kStageWarpBytes = kNarrowRows * kStageRowBytes;

// Byte offset of row r's piece j in a warp's stage. The piece index is
// XORed with bits 1-2 of the row, so that both the copy (8 lanes: rows
// 2m, 2m+1, pieces 0-3) and the reads (8 lanes: 8 rows, one piece) fall in
// 8 different 16-byte bank groups. Paired B's RowPerLane reads rows
// b..b+3 and b+8..b+11 a quarter warp (kernels/wmma_pairs.h), whose bits
// 1-2 repeat: there the key is bits 1 and 3 (kRowPerLane), which the copy
// keeps conflict-free too (rows 2m and 2m+1 share a key).
template <bool kRowPerLane = false>
__device__ __forceinline__ int stage_offset(int r, int j) {
  const int key = kRowPerLane ? ((r >> 1) & 1) | ((r >> 2) & 2) : (r >> 1) & 3;
  return r * kStageRowBytes + ((j ^ key) << 4);
}

// Where a launch's x comes from:
//   Fp32: fp32 rows of any length and alignment, each load checked;
//   Fp32Whole (kWholeX below): fp32 rows 16-byte aligned, `cols` whole
//     stages of chunks and the weights' sections 16-byte aligned;
//   Fp16: as Fp32Whole, but x already rounded to fp16 by the kernel that
//     made it, in kernels/narrow_x.cuh's layout (launch_gemm_narrow_x16),
//     and the weights decoded in that layout's k order (decode<true>): a
//     lane's x a chunk is one 16-byte load at 8 tokens, not two, and no
//     conversions.
enum class NarrowX : uint8_t { Fp32, Fp32Whole, Fp16 };

// What a block does past its sums (gemm_narrow_body): writes y (Plain), and
// makes or reads a norm's pieces (Pieces), or makes SwiGLU (Swiglu).
enum class NarrowEpilogue : uint8_t { Plain, Pieces, Swiglu };

// Chunk c of the lane's row as 16 half2 words: in natural k order, or
// with kXOrder in narrow_x.cuh's (the formats of decodes_in_x_order).
template <bool kXOrder, PackedFormat F>
__device__ __forceinline__ void decode_chunk(const Chunk<F>& ch, int64_t c, uint32_t (&h)[16]) {
  if constexpr (kXOrder)
    ch.template decode<true>(c, h);
  else
    ch.decode(c, h);
}

// T: the block's tokens (kNarrowTokens, kNarrowTokens8 for 8 or fewer, or
// kNarrowTokens32).
template <PackedFormat F, int W, int T, NarrowX kX>
struct NarrowShape {
  static constexpr size_t kTileBytes = size_t(W) * (kNarrowRows + T) * kNarrowLd * sizeof(__half);
  static constexpr size_t kPipeBytes =
      kTileBytes + (staged_quants<F, T, kX == NarrowX::Fp16>() ? size_t(W) * kStageWarpBytes : 0);
  // The warps' partial sums, within the pipeline's bytes in every shape
  // built; in the kernels of a norm's pieces each token's scale
  // (GemmArgs::norm_scale) past them, written before the main loop.
  static constexpr size_t kRedBytes = size_t(W) * T * kNarrowRedLd * sizeof(float);
  // A block's shared memory is kPipeBytes, kPiecesSmemBytes with the scales.
  static_assert(kPipeBytes >= kRedBytes, "the sums lie over the pipeline");
  static constexpr size_t kPiecesSmemBytes = kPipeBytes + size_t(T) * sizeof(float);
  static_assert(kPiecesSmemBytes <= 96 * 1024, "fits the V100's shared memory");
};

// W warps split k. Block (blockIdx.x, blockIdx.y) computes tokens
// T*x .. T*x+T-1 for rows 32*y .. 32*y+31: the blocks of one row range are
// consecutive, so they run side by side and all but the first mostly find
// the weights in L2. T = 16: 2 x 2 m16n16k16 MMAs a chunk; T = 8 (a
// launch of 8 tokens or fewer): 2 m8n32k16, half the x and no padding
// tokens.
//
// kWholeX (NarrowX::Fp32Whole and Fp16): x's rows are 16-byte aligned and
// `cols` is whole stages of chunks (every model's products; launch_narrow):
// x comes as one 16-byte load a token a chunk (half a token's chunk: Fp16)
// with no checks, lanes past the last token reading the last one's. Any
// lane's sums past the last row or token are never written, so nothing is
// zeroed for them, and loads past a warp's last chunk are skipped (never
// decoded): the chunk loop keeps only the checks that end it. xh: the fp16
// x (NarrowX::Fp16), else unused.
// RowPerLane's kernels off sm_70 (tests only: gemm_narrow_pairs_force)
// emulate its fragments through the weight tile: true in device code for
// sm_75 and later, where RowPerLane is not native (pairs_built_natively).
__host__ __device__ constexpr bool pairs_emulated() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  return true;
#else
  return false;
#endif
}

// One chunk of paired B (see gemm_narrow_body): chunk d of the stage (c in
// the row), its x pieces xv (kGroups tokens' 8-value pieces a lane, in
// narrow_x.cuh's order) into x's A fragments (Quads) or the x tile in
// natural order, the B fragments from the stage, and the MMAs into
// acc[g][0] (tokens 8g..8g+7).
template <PackedFormat F, WmmaPairs kP, int kGroups>
__device__ __forceinline__ void paired_chunk(
    const StageSide<F>& side, int d, int c, const uint8_t* stage, int lane,
    const uint4 (&xv)[kGroups], __half* sw, __half* sx, int xt,
    wmma::fragment<wmma::accumulator, 8, 32, 16, float> (&acc)[kGroups][1]) {
  // x: lane's words 4i..4i+3 (i = lane % 4) hold values (4i, 4i+2),
  // (4i+1, 4i+3), (16+4i, 18+4i), (17+4i, 19+4i); natural pairs by PRMT:
  // Quads' A fragments (kQuadsX below) or the tile.
  constexpr bool kQuadsX = kP == WmmaPairs::Quads;
  uint32_t xp[kGroups][4];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const uint4 v = xv[g];
    xp[g][0] = __byte_perm(v.x, v.y, 0x5410);
    xp[g][1] = __byte_perm(v.x, v.y, 0x7632);
    xp[g][2] = __byte_perm(v.z, v.w, 0x5410);
    xp[g][3] = __byte_perm(v.z, v.w, 0x7632);
    if constexpr (!kQuadsX) {
      const int i4 = 4 * (lane & 3);
      __half* row = sx + (xt + 8 * g) * kNarrowLd;
      *reinterpret_cast<uint2*>(row + i4) = make_uint2(xp[g][0], xp[g][1]);
      *reinterpret_cast<uint2*>(row + 16 + i4) = make_uint2(xp[g][2], xp[g][3]);
    }
  }
  Chunk<F> ch;
  side.fill(ch, d);
  const uint32_t word = ch.factor_word(c);
  // Register r: bytes k, k + 1 of row n's chunk (k = pair_lane_k +
  // pair_reg_dk) as (byte k, 0, byte k + 1, 0); lo: values k, k + 1 (first
  // MMA), hi: k + 16, k + 17 (second).
  uint32_t lo[kPairRegisters], hi[kPairRegisters];
  if constexpr (kP == WmmaPairs::RowPerLane) {
    const Factors f = Chunk<F>::factors(word);
    const int n = pair_lane_row(kP, lane);
    const uint4 q = *reinterpret_cast<const uint4*>(stage + stage_offset<true>(n, d));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int r = 0; r < kPairRegisters; ++r) {
      const uint32_t w = __byte_perm(words[r >> 1], 0, (r & 1) ? 0x4342 : 0x4140);
      lo[r] = Chunk<F>::apply(f, mask_or<0x000F000Fu, 0x64006400u>(w));
      hi[r] = Chunk<F>::template apply<true>(f, high_nibbles_to_half2(w));
    }
  } else {
    // Rows lane / 4 + 8j: their factors from lanes lane / 4 + 8j; their
    // chunks at one swizzle (stage_offset's, bits 1-2 of the row: the
    // same for the four). k is relabelled (x's A fragments the same way):
    // the fragment's k, k + 1 and k + 8, k + 9 (k = 2i, i = lane % 4) are
    // values 4i, 4i + 1 and 4i + 2, 4i + 3, bytes 4i..4i+3 of the row's
    // chunk, one word of the stage: 4 shared loads a chunk.
    Factors f[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      f[j] = Chunk<F>::factors(__shfl_sync(0xFFFFFFFFu, word, (lane >> 2) + 8 * j));
    const int n = pair_lane_row(kP, lane);
    static_assert(pair_lane_k(WmmaPairs::Quads, 3) == 6 && pair_reg_dk(WmmaPairs::Quads, 2) == 8,
                  "a Quads lane's k, k + 1, k + 8, k + 9: word k / 2 of the row's chunk");
    const uint8_t* base = stage + stage_offset(n, d) + 2 * pair_lane_k(kP, lane);
    uint32_t v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      v[j] = *reinterpret_cast<const uint32_t*>(base + 8 * j * kStageRowBytes);
#pragma unroll
    for (int r = 0; r < kPairRegisters; ++r) {
      const int j = pair_reg_drow(kP, r) / 8;
      const uint32_t w = __byte_perm(v[j], 0, pair_reg_dk(kP, r) ? 0x4342 : 0x4140);
      lo[r] = Chunk<F>::apply(f[j], mask_or<0x000F000Fu, 0x64006400u>(w));
      hi[r] = Chunk<F>::template apply<true>(f[j], high_nibbles_to_half2(w));
    }
  }
  constexpr bool kEmulated = kP == WmmaPairs::RowPerLane && pairs_emulated();
  if constexpr (kEmulated) {
    // RowPerLane off the V100 (tests): the lane's row into the weight tile,
    // in natural k order, for load_matrix_sync to read in this device's order.
    uint4* row = reinterpret_cast<uint4*>(sw + pair_lane_row(kP, lane) * kNarrowLd);
    row[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    row[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
    row[2] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    row[3] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
  }
  if constexpr (!kQuadsX) __syncwarp();  // x's tile (and the emulation's weight tile) written
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    wmma::fragment<wmma::matrix_b, 8, 32, 16, __half, wmma::col_major> b;
    static_assert(decltype(b)::num_elements == 2 * kPairRegisters, "m8n32k16's B: 16 a lane");
    if constexpr (kEmulated) {
      wmma::load_matrix_sync(b, sw + kk * 16, kNarrowLd);
    } else {
#pragma unroll
      for (int r = 0; r < kPairRegisters; ++r) memcpy(&b.x[2 * r], kk ? &hi[r] : &lo[r], 4);
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      wmma::fragment<wmma::matrix_a, 8, 32, 16, __half, wmma::row_major> xa;
      if constexpr (kQuadsX) {
        // Quads' A order (x_frag_is_quads): 4 elements of token lane / 4,
        // k = 2i, 2i + 1, 2i + 8, 2i + 9, repeated through the fragment.
        static_assert(decltype(xa)::num_elements % 4 == 0, "m8n32k16's A: whole fours");
#pragma unroll
        for (int e = 0; e < decltype(xa)::num_elements; e += 2)
          memcpy(&xa.x[e], &xp[g][2 * kk + (e >> 1 & 1)], 4);
      } else {
        wmma::load_matrix_sync(xa, sx + 8 * g * kNarrowLd + kk * 16, kNarrowLd);
      }
      wmma::mma_sync(acc[g][0], xa, b, acc[g][0]);
    }
  }
  if constexpr (!kQuadsX) __syncwarp();  // x's tile is rewritten for the next chunk
}

// Paired B (kP not None; kernels/wmma_pairs.h): the 4-bit formats on fp16 x
// (kX Fp16, the nibbles staged). No weight tile: each lane reads its
// fragment's nibble bytes from the stage (Quads: a 4-byte read a row, 4 a
// chunk, each row's factors shuffled from the lane of that row;
// RowPerLane: the lane's own row, one 16-byte read) and decodes them into
// the two B fragments of the chunk (low nibbles: the first k step, high
// nibbles: the second). RowPerLane's x goes through its tile in natural k
// order (the fp16 pairs re-paired with PRMTs), so the MMAs see the
// operands of the tile path on fp32 x in the same order: the same sums, bit
// for bit. Quads relabels k (paired_chunk) and fills x's A fragments from
// the lane's own loads (token lane / 4): no x tile, no __syncwarp a chunk
// (run 68: batch 8 +6-10%, batch 32 +14-24% on the H100). 16-token blocks
// run two m8n32k16 MMAs a k step on the same B (8 tokens each).
//
// kE: the kernels that make or read a norm's pieces (NormPieces;
// kernels/norm_pieces.cuh) or make SwiGLU (SwigluOut), built apart so that
// the others compile as they did without them (run 63: their code's
// registers had moved). SwiGLU's blocks take gate's rows 16y..16y+15 as
// their lanes 0-15 and up's same rows as lanes 16-31 (up's nibbles
// SwigluOut::up_bytes further, read from the kernel's parameters).
template <PackedFormat F, int W, int T, NarrowX kX, WmmaPairs kP, NarrowEpilogue kE>
__device__ __forceinline__ void gemm_narrow_body(const GemmArgs& a, bool x_vec,
                                                 const uint32_t* xh) {
  using S = NarrowShape<F, W, T, kX>;
  constexpr bool kPieces = kE == NarrowEpilogue::Pieces, kSwiglu = kE == NarrowEpilogue::Swiglu;
  static_assert(!kSwiglu || kX == NarrowX::Fp16, "SwiGLU made on fp16 x only");
  static_assert(T == kNarrowTokens || T == kNarrowTokens8 || T == kNarrowTokens32,
                "8, 16 or 32 tokens a block");
  constexpr bool kWholeX = kX != NarrowX::Fp32, kHalfX = kX == NarrowX::Fp16;
  static_assert(!kHalfX || decodes_in_x_order<F>(), "weights in the fp16 x's k order");
  constexpr int kXPerLane = kHalfX ? T / 8 : T / 4;  // 16-byte loads of x a lane a chunk
  using XPiece = std::conditional_t<kHalfX, uint4, float4>;
  constexpr bool kStaged = staged_quants<F, T, kHalfX>();
  constexpr int kDepth = kStaged ? kStageChunks : depth_for<F>();
  constexpr bool kPaired = kP != WmmaPairs::None;
  static_assert(!kPaired || (kHalfX && kStaged && F != PackedFormat::Int6K256),
                "paired B: the 4-bit formats on fp16 x");
  static_assert(T != kNarrowTokens32 || kPaired, "32-token blocks: paired B only");
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t rows = a.w.layout.rows, cols = a.w.layout.cols;
  // Chunks of a row: ints (a row of 2^31 chunks would be 2^36 values).
  const int chunks = int((cols + 31) / 32);
  const int64_t r0 = int64_t(blockIdx.y) * kNarrowRows;
  const int t0 = int(blockIdx.x) * T;

  // This warp's chunks: an equal share of the row, in order (whole stages
  // where the quants are staged: a stage then lies in one Q4_K header's 8).
  int share = (chunks + W - 1) / W;
  if (kStaged) share = (share + kStageChunks - 1) / kStageChunks * kStageChunks;
  const int c_begin = warp * share < chunks ? warp * share : chunks;
  const int c_end = c_begin + share < chunks ? c_begin + share : chunks;
  // The row whose factors this lane reads (its own but in RowPerLane).
  const int own = kPaired ? pair_owned_row(kP, lane) : lane;
  // SwiGLU's blocks: lane row i < 16 is gate's row g0 + i, else up's g0 + i - 16.
  const int64_t g0 = int64_t(blockIdx.y) * (kNarrowRows / 2);
  const int64_t up_skip = kSwiglu ? a.swiglu_out.half - kNarrowRows / 2 : 0;
  const int64_t own_row = kSwiglu           ? g0 + own + (own >= kNarrowRows / 2 ? up_skip : 0)
                          : r0 + own < rows ? r0 + own
                                            : rows - 1;
  const RowPointers wrow = row_pointers(a.w, own_row);

  __half* sw = reinterpret_cast<__half*>(smem) + warp * (kNarrowRows + T) * kNarrowLd;
  __half* sx = sw + kNarrowRows * kNarrowLd;

  // x: lane reads 4 floats (k = xk..xk+3 of the chunk) of tokens
  // xt, xt + 4, ...: 8 lanes cover a token's 128 contiguous bytes.
  // Fp16: 8 fp16 (piece xk / 8 of the chunk's 4) of tokens xt, xt + 8, with
  // the 8 lanes of a quarter warp on tokens m and m + 4 (m = lane / 8),
  // whose rows of sx fall in distinct banks (80-byte rows: tokens m and
  // m + 1 would share one).
  // Quads (paired_chunk's A fragments, no tile): token lane / 4.
  const int xt = kP == WmmaPairs::Quads ? lane >> 2
                 : kHalfX               ? (lane >> 3) + 4 * ((lane >> 2) & 1)
                                        : lane >> 3;
  const int xk = kHalfX ? (lane & 3) * 8 : (lane & 7) * 4;
  // kWholeX: each token's x at k = xk, past the last token the last one's.
  const float* xrow[kWholeX && !kHalfX ? kXPerLane : 1];
  const uint32_t* xhrow[kHalfX ? kXPerLane : 1];
  const int64_t xh_chunk = int64_t((a.n + 7) / 8 * 8) * 16;  // words a chunk of every token
  if constexpr (kHalfX) {
#pragma unroll
    for (int j = 0; j < kXPerLane; ++j) {
      const int t = t0 + xt + 8 * j;
      xhrow[j] = xh + int64_t(t < a.n ? t : a.n - 1) * 16 + xk / 2;
    }
  } else if constexpr (kWholeX) {
#pragma unroll
    for (int j = 0; j < kXPerLane; ++j) {
      const int t = t0 + xt + 4 * j;
      xrow[j] = a.x + int64_t(t < a.n ? t : a.n - 1) * a.ldx + xk;
    }
  }
  // Loads for a chunk past the warp's last are skipped: never used.
  auto load_x = [&](XPiece(&v)[kXPerLane], int c) {
    if (c >= c_end) return;
    if constexpr (kHalfX) {
#pragma unroll
      for (int j = 0; j < kXPerLane; ++j)
        v[j] = load_activation(reinterpret_cast<const uint4*>(xhrow[j] + c * xh_chunk));
    } else if constexpr (kWholeX) {
#pragma unroll
      for (int j = 0; j < kXPerLane; ++j)
        v[j] = load_activation(reinterpret_cast<const float4*>(xrow[j] + 32 * c));
    } else {
      // Zeros past the last token and past `cols` (the weights there are
      // zeros, and 0 * x must not meet an infinite x).
      const int64_t k = int64_t(c) * 32 + xk;
#pragma unroll
      for (int j = 0; j < kXPerLane; ++j) {
        const int t = t0 + xt + 4 * j;
        v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t >= a.n) continue;
        const float* p = a.x + int64_t(t) * a.ldx + k;
        if (x_vec && k + 4 <= cols) {
          v[j] = load_activation(reinterpret_cast<const float4*>(p));
        } else {
          v[j].x = k < cols ? p[0] : 0.0f;
          v[j].y = k + 1 < cols ? p[1] : 0.0f;
          v[j].z = k + 2 < cols ? p[2] : 0.0f;
          v[j].w = k + 3 < cols ? p[3] : 0.0f;
        }
      }
    }
  };
  // A lane past the last row reads the last row: its sums are never written.
  auto load_w = [&](Chunk<F>& ch, int c) {
    if (c >= c_end) return;
    if constexpr (kStaged)
      ch.template load<SideMemory>(wrow, c);
    else
      ch.template load<GlobalMemory>(wrow, c);
  };
  // The staged quants: piece i of this lane is row 8i + lane/4, chunk
  // stage + lane%4, loaded a stage ahead; Q4_K's header for the lane's row.
  uint8_t* stage = smem + S::kTileBytes * (kStaged ? 1 : 0) + warp * kStageWarpBytes;
  const int prow = lane >> 2, pj = lane & 3;
  const uint8_t* qrow = a.w.data + a.w.layout.quants_offset +
                        ((kSwiglu ? g0 : r0) + prow) * a.w.layout.quant_row_bytes;
  // Pieces 2 and 3 (rows 16-31) of SwiGLU's blocks: up's rows,
  // SwigluOut::up_bytes on, read from the kernel's parameters where used
  // (held in registers, the distance made sm_70's 32-token Q4_K blocks
  // spill 16-24 bytes).
  unsigned pieces_in_rows = 0;  // bit i: row 8i + prow is a row of the matrix
#pragma unroll
  for (int i = 0; i < 4; ++i) pieces_in_rows |= unsigned(kSwiglu || r0 + 8 * i + prow < rows) << i;
  uint4 piece[kStaged ? 4 : 1] = {};
  // kSideStaged: the rest of the stage's chunks (StageSide), a stage ahead;
  // else (rows not whole stages) a chunk at a time in `ring` (below), but
  // Q4_K's header, once a stage either way.
  constexpr bool kSideStaged = kStaged && (kWholeX || F == PackedFormat::Int4K256);
  StageSide<F> side_next{}, side{};
  // Pieces past the last row or the warp's last chunk are not loaded (a
  // row's pieces are only read by that row's lane).
  auto load_stage = [&](int cs) {
    if constexpr (kStaged) {
      if (cs >= c_end) return;
      const int c = cs + pj;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if ((pieces_in_rows >> i & 1) && c < c_end)
          piece[i] = load_weights_16((kSwiglu && i >= 2 ? qrow + a.swiglu_out.up_bytes : qrow) +
                                     8 * i * a.w.layout.quant_row_bytes + 16 * c);
      // A super-block's data (Q4_K's header, Q6_K's d) once for its two
      // stages: kept from the stage before within one.
      if constexpr (kSideStaged) side_next.load(wrow, cs, cs == c_begin || cs % 8 == 0);
    }
  };

  // The accumulators: tokens x rows, two 16 x 16 or one 8 x 32 (paired B:
  // one 8 x 32 for each 8 tokens).
  constexpr int kM = T == kNarrowTokens && !kPaired ? 16 : 8, kN = kM == 16 ? 16 : 32;
  constexpr int kFrags = kNarrowRows / kN, kGroups = T / kM;
  wmma::fragment<wmma::accumulator, kM, kN, 16, float> acc[kGroups][kFrags];
#pragma unroll
  for (int g = 0; g < kGroups; ++g)
#pragma unroll
    for (int j = 0; j < kFrags; ++j) wmma::fill_fragment(acc[g][j], 0.0f);

  // Weights kDepth chunks ahead, x two (x comes from L2, the weights from
  // DRAM); slot d of each ring holds the chunks c with (c - c_begin) % depth == d.
  Chunk<F> ring[kSideStaged ? 1 : kDepth];
  if constexpr (!kSideStaged) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) load_w(ring[d], c_begin + d);
  }
  load_stage(c_begin);
  XPiece xv[2][kXPerLane];
  load_x(xv[0], c_begin);
  load_x(xv[1], c_begin + 1);
  // x made of a norm's pieces (GemmArgs::norm_scale): each token's scale,
  // copied to shared memory past the pipeline's while the first chunks'
  // loads are in flight (no register held through the main loop: sm_70's
  // 16-token Q6_K block has none to spare).
  float* piece_scale = reinterpret_cast<float*>(smem + S::kPipeBytes);  // [T]
  if constexpr (kPieces || kSwiglu)
    if (a.norm_scale && threadIdx.x < T)
      piece_scale[threadIdx.x] =
          t0 + int(threadIdx.x) < a.n ? __ldg(a.norm_scale + t0 + threadIdx.x) : 1.0f;

  for (int c0 = c_begin; c0 < c_end; c0 += kDepth) {
    if constexpr (kStaged) {
      // The stage's quants into shared memory (the last stage's reads were
      // before the chunk loop's final __syncwarp), then the next stage's loads.
#pragma unroll
      for (int i = 0; i < 4; ++i)
        *reinterpret_cast<uint4*>(
            stage + stage_offset<kP == WmmaPairs::RowPerLane>(8 * i + prow, pj)) = piece[i];
      if constexpr (kSideStaged) side = side_next;
      __syncwarp();
      load_stage(c0 + kStageChunks);
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int c = c0 + d;
      if (c >= c_end) break;  // the same for every lane of the warp
      if constexpr (kPaired) {
        paired_chunk<F, kP, kXPerLane>(side, d, c, stage, lane, xv[d & 1], sw, sx, xt, acc);
        load_x(xv[d & 1], c + 2);
        continue;
      }
      uint32_t h[16];
      if constexpr (kStaged) {
        Chunk<F> ch;
        if constexpr (kSideStaged)
          side.fill(ch, d);
        else
          ch = ring[d];
        ch.q = *reinterpret_cast<const uint4*>(stage + stage_offset(lane, d));
        decode_chunk<kHalfX>(ch, c, h);
      } else {
        decode_chunk<kHalfX>(ring[d], c, h);
      }
      if constexpr (!kSideStaged) load_w(ring[d], c + kDepth);
      uint4* dst = reinterpret_cast<uint4*>(sw + lane * kNarrowLd);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        dst[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
#pragma unroll
      for (int j = 0; j < kXPerLane; ++j) {
        if constexpr (kHalfX) {
          *reinterpret_cast<uint4*>(sx + (xt + 8 * j) * kNarrowLd + xk) = xv[d & 1][j];
        } else {
          const float4 v = xv[d & 1][j];
          *reinterpret_cast<uint2*>(sx + (xt + 4 * j) * kNarrowLd + xk) =
              make_uint2(pack_half2(v.x, v.y), pack_half2(v.z, v.w));
        }
      }
      load_x(xv[d & 1], c + 2);  // in flight during the next two chunks
      __syncwarp();
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        wmma::fragment<wmma::matrix_a, kM, kN, 16, __half, wmma::row_major> xa;
        wmma::load_matrix_sync(xa, sx + kk * 16, kNarrowLd);
#pragma unroll
        for (int j = 0; j < kFrags; ++j) {
          wmma::fragment<wmma::matrix_b, kM, kN, 16, __half, wmma::col_major> b;
          wmma::load_matrix_sync(b, sw + j * kN * kNarrowLd + kk * 16, kNarrowLd);
          wmma::mma_sync(acc[0][j], xa, b, acc[0][j]);
        }
      }
      __syncwarp();  // the tiles are rewritten for the next chunk
    }
  }

  // The warps' partial sums, added in warp order.
  __syncthreads();                              // every warp is done with its pipeline tiles
  float* red = reinterpret_cast<float*>(smem);  // [warp][token][kNarrowRedLd]
#pragma unroll
  for (int g = 0; g < kGroups; ++g)
#pragma unroll
    for (int j = 0; j < kFrags; ++j)
      wmma::store_matrix_sync(red + (warp * T + g * kM) * kNarrowRedLd + j * kN, acc[g][j],
                              kNarrowRedLd, wmma::mem_row_major);
  __syncthreads();
  // A warp's 32 threads here are one token's 32 rows (o's stride is whole
  // warps), so the pieces' shuffles see one token; with pieces the rows are
  // whole blocks of 32 (launch_gemm_narrow_x16 checks), and a warp skips
  // only as a whole.
  static_assert(kNarrowRows == 32, "a warp a token's rows");
  if constexpr (kSwiglu) {
    finish_swiglu<W, T, kNarrowRedLd>(a, red, piece_scale, t0);
  } else {
    for (int o = threadIdx.x; o < T * kNarrowRows; o += W * 32) {
      const int tm = o / kNarrowRows, rn = o % kNarrowRows;
      const int t = t0 + tm;
      const int64_t row = r0 + rn;
      if (t >= a.n || row >= rows) continue;
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < W; ++w) v += red[(w * T + tm) * kNarrowRedLd + rn];
      if constexpr (kPieces)
        if (a.norm_scale) v *= piece_scale[tm];
      if (a.bias) v += a.bias[row];
      float* dst = a.y + int64_t(t) * a.ldy + row;
      if (a.accumulate) v += *dst;
      *dst = v;
      if (kPieces && a.norm_out.weight)  // v is h: the next norm's pieces of chunk r0 / 32
        write_norm_piece_warp(a.norm_out, v, row, lane, r0 / kNarrowRows, t, a.n, rows);
    }
    if constexpr (kPieces)
      if (a.norm_out.weight) finish_norm_pieces<W>(a.norm_out, a.n, rows, smem);
  }
}

// The last launch's block shape (gemm_narrow_last_launch, for tests).
std::atomic<uint32_t> g_last_launch{0};

// Warps an SM the register budget is set for: 16 (128 registers), 12 in
// 32-token blocks.
constexpr int narrow_warps_per_sm(int tokens) {
  return tokens == kNarrowTokens32 ? kNarrowWarps32 : 16;
}

// Paired kernels are built where their order is native
// (pairs_built_natively), and RowPerLane's from sm_75 too, emulated
// (paired_chunk), for tests only (gemm_narrow_pairs_force).
template <PackedFormat F, int W, int T, NarrowX kX, WmmaPairs kP, NarrowEpilogue kE>
__global__ void __launch_bounds__(W * 32, narrow_warps_per_sm(T) / W)
    kernel_gemm_narrow(GemmArgs a, bool x_vec, const uint32_t* xh) {
  wait_for_previous_kernel();
#if defined(__CUDA_ARCH__)
  if constexpr (pairs_built_natively(kP, __CUDA_ARCH__) || kP == WmmaPairs::RowPerLane)
    gemm_narrow_body<F, W, T, kX, kP, kE>(a, x_vec, xh);
  else
    __trap();
#endif
}

template <PackedFormat F, int W, int T, NarrowX kX, WmmaPairs kP, NarrowEpilogue kE>
void launch_narrow_kernel(const GemmArgs& a, dim3 grid, bool x_vec, const uint32_t* xh,
                          cudaStream_t stream) {
  using S = NarrowShape<F, W, T, kX>;
  static_assert(narrow_warps_per_sm(T) % W == 0, "whole blocks an SM");
  auto kernel = kernel_gemm_narrow<F, W, T, kX, kP, kE>;
  constexpr size_t bytes = kE != NarrowEpilogue::Plain ? S::kPiecesSmemBytes : S::kPipeBytes;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once).
  static const bool opted_in = [&] {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    return true;
  }();
  (void)opted_in;
  launch_kernel(kernel, grid, W * 32, bytes, stream, a, x_vec, xh);
  CUDA_CHECK(cudaGetLastError());
  g_last_launch.store(NarrowLaunch{kP, T, W}.code());
}

// A norm's pieces only in blocks of 8 or 16 tokens (kNormPiecesMaxTokens;
// check_fused_epilogue holds the launch to that), SwiGLU in any, on fp16 x.
template <PackedFormat F, int W, int T, NarrowX kX, WmmaPairs kP = WmmaPairs::None>
void launch_narrow_x(const GemmArgs& a, dim3 grid, bool x_vec, const uint32_t* xh,
                     cudaStream_t stream) {
  using E = NarrowEpilogue;
  if constexpr (kX == NarrowX::Fp16)
    if (a.swiglu_out.half)
      return launch_narrow_kernel<F, W, T, kX, kP, E::Swiglu>(a, grid, x_vec, xh, stream);
  if constexpr (T != kNarrowTokens32)
    if (gemm_has_norm_pieces(a))
      return launch_narrow_kernel<F, W, T, kX, kP, E::Pieces>(a, grid, x_vec, xh, stream);
  launch_narrow_kernel<F, W, T, kX, kP, E::Plain>(a, grid, x_vec, xh, stream);
}

// Whole stages of whole chunks (kStageChunks x 32 values: every model's
// products), the weights' sections 16-byte aligned: the stage's scales
// and crumbs are vector loads (StageSide), and x may come in fp16.
bool whole_stages(const GemmArgs& a) {
  return a.w.layout.cols % (32 * kStageChunks) == 0 &&
         reinterpret_cast<uintptr_t>(a.w.data) % 16 == 0;
}

// xh: x in fp16 (launch_gemm_narrow_x16, which checked the rest), or null.
template <PackedFormat F, int W, int T>
void launch_narrow(const GemmArgs& a, dim3 grid, const uint32_t* xh, cudaStream_t stream) {
  if constexpr (decodes_in_x_order<F>()) {
    if constexpr (F != PackedFormat::Int6K256) {
      if (xh) switch (narrow_pairs_for(T == kNarrowTokens8, stream)) {
          case WmmaPairs::Quads:
            return launch_narrow_x<F, W, T, NarrowX::Fp16, WmmaPairs::Quads>(a, grid, true, xh,
                                                                             stream);
          case WmmaPairs::RowPerLane:
            return launch_narrow_x<F, W, T, NarrowX::Fp16, WmmaPairs::RowPerLane>(a, grid, true, xh,
                                                                                  stream);
          case WmmaPairs::None:
            break;
        }
    }
    if (xh) return launch_narrow_x<F, W, T, NarrowX::Fp16>(a, grid, true, xh, stream);
  }
  const bool x_vec = a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  if (x_vec && whole_stages(a))
    launch_narrow_x<F, W, T, NarrowX::Fp32Whole>(a, grid, x_vec, nullptr, stream);
  else
    launch_narrow_x<F, W, T, NarrowX::Fp32>(a, grid, x_vec, nullptr, stream);
}

// Whether W-warp blocks of T tokens fit the shared memory a block may have
// here, whatever x they take (16 warps at 16 tokens need 92 KB: not on
// Turing, 64 KB a block).
template <PackedFormat F, int W, int T>
bool narrow_smem_fits() {
  constexpr size_t bytes = std::max({NarrowShape<F, W, T, NarrowX::Fp32>::kPiecesSmemBytes,
                                     NarrowShape<F, W, T, NarrowX::Fp32Whole>::kPiecesSmemBytes,
                                     NarrowShape<F, W, T, NarrowX::Fp16>::kPiecesSmemBytes});
  return bytes <= device_smem_optin();
}

// VOLTAD_NARROW_WARPS32=12 or 6 fixes the 32-token blocks' size (and
// VOLTAD_NARROW_WARPS16=16 or 8 the smaller blocks'), for comparisons; 0
// where it is not set.
int forced_warps(const char* name, int whole) {
  const char* v = std::getenv(name);
  const int n = v ? std::atoi(v) : 0;
  return n == whole || n == whole / 2 ? n : 0;
}

// Warps a block of 8 or 16 tokens: narrow_warps16_for (kernels/narrow_plan.h:
// 16 where the grid fits the SMs once over, else 8, two an SM), or the
// size VOLTAD_NARROW_WARPS16 forces.
int narrow_warps16(int64_t blocks, int sms) {
  static const int forced = forced_warps("VOLTAD_NARROW_WARPS16", 16);
  return forced > 0 ? forced : narrow_warps16_for(blocks, sms);
}

// 16 warps a block where narrow_warps16 says and the shared memory allows,
// else 8.
template <PackedFormat F, int T>
void launch_narrow_tokens(const GemmArgs& a, int sms, const uint32_t* xh, cudaStream_t stream) {
  const dim3 grid(unsigned((a.n + T - 1) / T),
                  unsigned((a.w.layout.rows + kNarrowRows - 1) / kNarrowRows));
  if (narrow_warps16(int64_t(grid.x) * grid.y, sms) == 16 && narrow_smem_fits<F, 16, T>())
    launch_narrow<F, 16, T>(a, grid, xh, stream);
  else
    launch_narrow<F, 8, T>(a, grid, xh, stream);
}

// Blocks of 8 tokens for launches of 8 or fewer (VOLTAD_NARROW_TOKENS8=0
// in the environment: 16 always; comparisons).
bool narrow_tokens8() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_NARROW_TOKENS8");
    return !(v && v[0] == '0');
  }();
  return on;
}

// One block a row range for all its tokens: 12 warps a block where
// narrow_warps32_for says and the shared memory allows, else 6 (two an
// SM). Blocks of 4 (three an SM; 8 of a 4,096-column row's 32 stages a
// warp where 6 warps take 6, 6, 6, 6, 6, 2) lost: run 54, H100, portable,
// batch 24 / 32, Llama-3-8B Q4_K_M -2.0% / -1.2%, Q4_0 even / +0.7%.
template <PackedFormat F, WmmaPairs kP>
void launch_narrow_tokens32(const GemmArgs& a, int sms, const uint32_t* xh, cudaStream_t stream) {
  const dim3 grid(unsigned((a.n + kNarrowTokens32 - 1) / kNarrowTokens32),
                  unsigned((a.w.layout.rows + kNarrowRows - 1) / kNarrowRows));
  static const int forced = forced_warps("VOLTAD_NARROW_WARPS32", kNarrowWarps32);
  const int warps = forced ? forced : narrow_warps32_for(int64_t(grid.x) * grid.y, sms);
  if (warps == kNarrowWarps32 && narrow_smem_fits<F, kNarrowWarps32, kNarrowTokens32>())
    launch_narrow_x<F, kNarrowWarps32, kNarrowTokens32, NarrowX::Fp16, kP>(a, grid, true, xh,
                                                                           stream);
  else
    launch_narrow_x<F, kNarrowWarps32 / 2, kNarrowTokens32, NarrowX::Fp16, kP>(a, grid, true, xh,
                                                                               stream);
}

template <PackedFormat F>
void launch_narrow_format(const GemmArgs& a, int sms, const uint32_t* xh, cudaStream_t stream) {
  if constexpr (decodes_in_x_order<F>() && F != PackedFormat::Int6K256) {
    if (xh && a.n > kNarrowTokens && narrow_tokens32_switch()) {
      switch (narrow_pairs_for(false, stream)) {
        case WmmaPairs::Quads:
          return launch_narrow_tokens32<F, WmmaPairs::Quads>(a, sms, xh, stream);
        case WmmaPairs::RowPerLane:
          return launch_narrow_tokens32<F, WmmaPairs::RowPerLane>(a, sms, xh, stream);
        case WmmaPairs::None:
          break;
      }
    }
  }
  if (a.n <= kNarrowTokens8 && narrow_tokens8())
    launch_narrow_tokens<F, kNarrowTokens8>(a, sms, xh, stream);
  else
    launch_narrow_tokens<F, kNarrowTokens>(a, sms, xh, stream);
}

void launch_narrow_any(const GemmArgs& a, const uint32_t* xh, cudaStream_t stream) {
  VOLTAD_KERNEL_REQUIRE((a.w.layout.rows + kNarrowRows - 1) / kNarrowRows <= 65535,
                        "gemm narrow: too many rows for the grid");
  const int sms = device_sm_count();
  with_packed_format(a.w.layout.format,
                     [&](auto f) { launch_narrow_format<decltype(f)::value>(a, sms, xh, stream); });
}

// x in fp16 from the kernel that made it (VOLTAD_NARROW_X16=0 in the
// environment: never; comparisons).
bool narrow_x16_on() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_NARROW_X16");
    return !(v && v[0] == '0');
  }();
  return on;
}

}  // namespace

NarrowLaunch gemm_narrow_last_launch() {
  return NarrowLaunch::decode(g_last_launch.load());
}

int gemm_narrow_warps16(int64_t blocks) {
  return narrow_warps16(blocks, device_sm_count());
}

namespace {
std::atomic<uint64_t> swiglu_launches{0};

// The norm's pieces (GemmArgs::norm_out, norm_scale) and SwiGLU
// (swiglu_out): whole blocks of 32 rows a warp's token (the epilogue's
// shuffles), and what they point at; counts the launches that make SwiGLU.
void check_fused_epilogue(const GemmArgs& a, const void* x16) {
  const SwigluOut& p = a.swiglu_out;
  if (p.half) {
    VOLTAD_KERNEL_REQUIRE(p.half > 0 && p.half % kNarrowRows == 0 &&
                              a.w.layout.rows == 2 * p.half && a.n <= kGemmNarrowMaxTokens && x16 &&
                              p.x && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.x != x16 &&
                              !a.norm_out.weight && !a.accumulate && !a.bias &&
                              gemm_swiglu_up_fits(a),
                          "gemm narrow: SwiGLU needs gate|up's 2 x half rows (half a multiple "
                          "of 32, gate's bytes within 4 GiB), up to 32 tokens, fp16 x and its "
                          "own x for w_down, no norm's pieces made, no accumulate and no bias");
    ++swiglu_launches;
  }
  if (gemm_has_norm_pieces(a))
    VOLTAD_KERNEL_REQUIRE(a.n <= kNormPiecesMaxTokens,
                          "gemm narrow: a norm's pieces in steps of up to 16 tokens");
  if (a.norm_out.weight)
    VOLTAD_KERNEL_REQUIRE(a.w.layout.rows % kNarrowRows == 0 && a.norm_out.x && a.norm_out.sumsq &&
                              a.norm_out.scale && a.norm_out.arrivals &&
                              reinterpret_cast<uintptr_t>(a.norm_out.x) % 16 == 0,
                          "gemm narrow: a norm's pieces need rows a multiple of 32 and their "
                          "buffers");
  if (a.norm_scale)
    VOLTAD_KERNEL_REQUIRE(x16 && a.w.layout.cols % 32 == 0,
                          "gemm narrow: x made of a norm's pieces is read as fp16 x "
                          "(launch_gemm_narrow_x16)");
}
}  // namespace

uint64_t gemm_narrow_swiglu_launches() {
  return swiglu_launches.load();
}

void launch_gemm_narrow(const GemmArgs& a, cudaStream_t stream) {
  check_fused_epilogue(a, nullptr);
  launch_narrow_any(a, nullptr, stream);
}

bool gemm_narrow_takes_x16(const GemmArgs& a) {
  bool format = false;
  with_packed_format(a.w.layout.format,
                     [&](auto f) { format = decodes_in_x_order<decltype(f)::value>(); });
  return format && narrow_x16_on() && a.n >= 1 && a.w.data && whole_stages(a) &&
         gemm_pick_tile(a.n, a.w.layout.rows) == GemmTile::N16;
}

void launch_gemm_narrow_x16(const GemmArgs& args, const void* x16, cudaStream_t stream) {
  GemmArgs a = args;
  if (a.swiglu_out.half)
    a.swiglu_out.up_bytes = uint32_t((a.swiglu_out.half - 16) * a.w.layout.quant_row_bytes);
  VOLTAD_KERNEL_REQUIRE(
      gemm_narrow_takes_x16(a) && x16 && reinterpret_cast<uintptr_t>(x16) % 16 == 0,
      "gemm narrow x16: a shape it takes (gemm_narrow_takes_x16), aligned x");
  VOLTAD_KERNEL_REQUIRE(a.y && a.ldy >= a.w.layout.rows, "gemm narrow x16: y and its row stride");
  check_fused_epilogue(a, x16);
  launch_narrow_any(a, static_cast<const uint32_t*>(x16), stream);
}

}  // namespace voltad::kernels
