// Prefill and large-batch GEMM on FP16 tensor cores (wmma m16n16k16, which
// the V100 has): y[t][r] = bias[r] + sum_c W[r][c] * x[t][c] (+ y[t][r]) for
// n tokens at once, W in any packed format (kernels/matvec_format.h).
// Host declarations only (plain C++).
//
// Numerics: each weight tile is dequantized to FP16 in shared memory (the
// value rounded once to FP16 from the exact decoded value; the K formats'
// from their factors rounded to FP16 first, kernels/gemm_decode.cuh), x is rounded to
// FP16 when staged (so |x| must stay below 65504), products are exact and
// accumulate in FP32. Against an FP32 matvec the difference is about
// 2^-11 * sum |w x| at most (docs/KERNEL-NOTES.md has the measured error).
//
// Small n: up to kGemmNarrowMaxTokens the narrow tile (kernels/gemm_narrow.cu)
// streams the weights once per 16 tokens with many loads in flight; the
// prefill tiles are bound by memory latency per k-stage there (~54 us for
// 4096x4096 Q4_K at n = 24..32 on the H200, narrow 33-35 us). Below
// kGemmMinTokens the dp4a matvecs (kernels/matvec.h) are faster: their
// work grows with the tokens (two dp4a passes a token), the narrow tile's
// does not below its 8 or 16 tokens. With 8-token blocks the narrow GEMM
// won from 5 tokens on the H200 (`portable`, Llama-3-8B Q4_K_M b5 +2.6%,
// b6 +9.6%; Q4_0 +12.5%, +27.5%; docs/PERFORMANCE.md run 44; 7 with
// 16-token blocks, run 43), and from 4 with x in fp16 from the kernel
// before (run 47: b4 +30.7% and +20.0%; at 3 tokens +9.5% Q4_K_M but
// -1.7% Q4_0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "kernels/matvec_format.h"
#include "kernels/wmma_pairs.h"

namespace voltad::kernels {

constexpr int kGemmMinTokens = 4;         // below this, launch_matvec is faster (H200, portable)
constexpr int kGemmNarrowMaxTokens = 32;  // up to this, launch_gemm picks the narrow kernel
// Products of this many rows or more (an lm head: 128,256 rows for Llama-3,
// 151,936 for Qwen3; the widest gate|up, Llama-3-70B's, has 57,344) take
// the tiles from 17 tokens (gemm_pick_tile).
constexpr int64_t kGemmHeadRows = 65536;

// The next RMSNorm made in pieces by the portable narrow GEMM that writes
// the residual stream h (runs 62-63), as the batch-1 matvecs make it in
// units (kernels/matvec.h): each block, for its 32 rows and each token,
// writes g * h * kNormPieceScale in the narrow GEMMs' fp16 x layout
// (kernels/narrow_x.cuh; the 32 rows are one chunk of the readers' k) and
// the sum of h^2; the block that finishes last adds each token's sums (in
// a fixed order) and writes its scale 1 / (rms * kNormPieceScale). A narrow
// GEMM reading that x (GemmArgs::norm_scale) scales its outputs by it:
// W (g * h) / rms is what it would give on the norm's x. The norm's launch
// is left out. The scale keeps g * h within fp16 for residuals up to ~1e6
// (a power of two: exact).
constexpr float kNormPieceScale = 1.0f / 16.0f;
// Up to this many tokens (blocks of 8 or 16; at 17-32 the pieces lost:
// run 63).
constexpr int kNormPiecesMaxTokens = 16;
struct NormPieces {
  const float* weight = nullptr;  // the norm's g (rows values); null: no pieces
  uint32_t* x = nullptr;          // the readers' x: n8 x rows fp16 and the x sums
  float* sumsq = nullptr;         // [n][rows / 32]: a chunk's sum of h^2 a token
  float* scale = nullptr;         // [n]: each token's 1 / (rms * kNormPieceScale)
  uint32_t* arrivals = nullptr;   // blocks counted in; zero before, left zero
  float eps = 0.0f;               // the norm's epsilon
};

// SwiGLU made by the portable narrow GEMM of gate|up (rows [0, half) gate,
// [half, 2 half) up, the layer's one stack), in place of its own launch.
// Each block takes 16 rows of gate and up's same 16 (its 32 lanes' rows:
// gate's 16b..16b+15, then up's), so it holds both halves of its outputs:
// its epilogue writes silu(g) * u as w_down's fp16 x (kernels/narrow_x.cuh,
// half of one chunk of w_down's k; tokens from n to n rounded up to 8 as
// zeros) with launch_swiglu_narrow_x's arithmetic, the same bits, and
// writes neither y nor the x sums, which only the sm_80 narrow kernel
// reads: w_down must be read by a portable kernel. x is not gate|up's own
// x: its other blocks still read that. fp16 x only (launch_gemm_narrow_x16).
struct SwigluOut {
  int64_t half = 0;       // gate's rows (up's too), a multiple of 32; 0: none
  uint32_t* x = nullptr;  // w_down's x: n8 x half fp16 (the x sums' place left alone)
  uint32_t up_bytes = 0;  // set by the launch: from gate's row i to up's row i - 16
};

struct GemmArgs {
  PackedMatrixView w;        // (rows, cols), on the device
  const float* x = nullptr;  // (n, ldx) fp32; 16-byte aligned rows read faster
  int64_t ldx = 0;
  int n = 0;           // tokens (rows of x and y), >= 1
  float* y = nullptr;  // (n, ldy): y[t][0..rows) written, nothing else
  int64_t ldy = 0;
  const float* bias = nullptr;  // (rows) or null
  bool accumulate = false;      // y += W x (fused residual add)
  // Portable narrow GEMM only (launch_gemm_for refuses them elsewhere):
  NormPieces norm_out{};              // this product makes the next norm's pieces
  const float* norm_scale = nullptr;  // x is such pieces: NormPieces::scale
  SwigluOut swiglu_out{};             // this product (gate|up) makes SwiGLU
};
// Whether SwiGLU's blocks reach up's nibbles from gate's within 32 bits
// (SwigluOut::up_bytes).
inline bool gemm_swiglu_up_fits(const GemmArgs& a) {
  return a.swiglu_out.half >= 16 &&
         uint64_t(a.swiglu_out.half - 16) * a.w.layout.quant_row_bytes <= 0xFFFFFFFFull;
}
inline bool gemm_has_norm_pieces(const GemmArgs& a) {
  return a.norm_out.weight != nullptr || a.norm_scale != nullptr;
}
// Whether the product's epilogue makes a norm's pieces or SwiGLU: the
// portable narrow kernel's alone.
inline bool gemm_has_fused_epilogue(const GemmArgs& a) {
  return gemm_has_norm_pieces(a) || a.swiglu_out.half != 0;
}

// Block tile shapes (tokens x weight rows). launch_gemm picks one from n,
// rows and the device's SM count; the tests and the bench name one.
enum class GemmTile : uint8_t {
  Auto,
  T32x64,        // 4 warps: small n (batched decode) or few rows
  T32x128,       // 8 warps: an lm head at 9-32 tokens, x staged once per
                 // 128 rows instead of 64 (gemm_pick_tile; run 59)
  T64x128,       // 8 warps
  T128x128,      // 8 warps: prefill
  T128x128Occ2,  // the same capped at 128 registers: two blocks per SM where
                 // shared memory allows (sm_80+), one on the V100. Measured
                 // +10-15% for Q4_0/Q6_K/Q8_0 at 14336x4096, worse for Q4_K
                 // (spills) and F16: Auto does not pick it.
  N16,           // narrow (kernels/gemm_narrow.cu): 16 tokens (8 where n <= 8)
                 // x 32 rows per block, k split over its warps, the weights
                 // streamed with several chunks in flight per lane: batched
                 // decode
};

inline const char* gemm_tile_name(GemmTile t) {
  switch (t) {
    case GemmTile::Auto:
      return "auto";
    case GemmTile::T32x64:
      return "32x64";
    case GemmTile::T32x128:
      return "32x128";
    case GemmTile::T64x128:
      return "64x128";
    case GemmTile::T128x128:
      return "128x128";
    case GemmTile::T128x128Occ2:
      return "128x128/2";
    case GemmTile::N16:
      return "narrow16";
  }
  return "?";
}

// Every PackedFormat is supported. No scratch memory; graph-capturable.
void launch_gemm(const GemmArgs& args, cudaStream_t stream);
void launch_gemm(const GemmArgs& args, GemmTile tile, cudaStream_t stream);

// The tile launch_gemm(args, stream) uses for this shape on the current device.
GemmTile gemm_pick_tile(int n, int64_t rows);

// The narrow kernel itself (GemmTile::N16).
void launch_gemm_narrow(const GemmArgs& args, cudaStream_t stream);

// The narrow kernel with x already rounded to fp16 in kernels/narrow_x.cuh's
// layout (n rounded up to 8 rows; the x sums unused) by the kernel that made
// it (RMSNorm, SwiGLU, the attention combine: GemmScratch::holds_x in
// kernels/gemm_sm80.h), in place of args.x: half the bytes of x a chunk
// and none of its conversions. The same fp16 operands as
// launch_gemm_narrow; the MMAs take each 32 values of k in another order.
// Takes what launch_gemm would run on the narrow kernel, for the 4-bit
// formats and Q6_K, `cols` a multiple of 128, the weights 16-byte aligned
// (every model's products); off with VOLTAD_NARROW_X16=0 (comparisons).
bool gemm_narrow_takes_x16(const GemmArgs& args);
void launch_gemm_narrow_x16(const GemmArgs& args, const void* x16, cudaStream_t stream);
// The 32-token tiles (32x64, 32x128: an lm head at 9-32 tokens, other
// products where the narrow kernel does not take them) on the same fp16 x:
// each stage's x one 16-byte load a thread, 4 KB for 32 tokens against the
// 8 KB of fp32 it converts otherwise. Takes up to kGemmNarrowMaxTokens
// tokens where gemm_pick_tile picks those tiles, `cols` whole stages of 64,
// any format; off with VOLTAD_GEMM_TILES_X16=0 (comparisons). Same fp16
// operands as launch_gemm on those tiles: the same results, bit for bit.
bool gemm_tiles_take_x16(const GemmArgs& args);
void launch_gemm_tiles_x16(const GemmArgs& args, const void* x16, cudaStream_t stream);
// Tests: the tile named (T32x64 or T32x128) for any n >= 1, x16 holding n
// rounded up to 8 rows.
void launch_gemm_tiles_x16(const GemmArgs& args, GemmTile tile, const void* x16,
                           cudaStream_t stream);
// Tests: the tiles' launches on fp16 x in this process so far (a graph's
// counted once, as it is captured).
uint64_t gemm_tiles_x16_launches();
// Tests: the narrow kernel's launches that made SwiGLU
// (GemmArgs::swiglu_out) in this process so far (a graph's counted once).
uint64_t gemm_narrow_swiglu_launches();

// Paired B (kernels/wmma_pairs.h): the order in which the narrow kernel on
// fp16 x builds the 4-bit formats' B fragments in registers, from a probe
// of the device's wmma order run at the first call (synchronously: call it
// before capturing a graph; the backend does at start), or None: the
// weights through the shared tile (no known order, or VOLTAD_NARROW_PAIRS=0
// in the environment; =8 keeps it to launches of 8 tokens or fewer).
WmmaPairs gemm_narrow_pairs();
// Tests: the order the launches that follow build B in, whatever the probe
// found; nullopt: the probe's again. None: the shared tile. RowPerLane runs
// on sm_70 where the probe found it and from sm_75 everywhere (its
// fragments through the weight tile and load_matrix_sync there: its decode
// checked on any card, not its fragment order, which only a V100's probe
// sees); Quads only where the probe found it.
void gemm_narrow_pairs_force(std::optional<WmmaPairs> order);
// Whether gemm_narrow_pairs_force may take `order` on this device.
bool gemm_narrow_pairs_runs(WmmaPairs order);
// Tests: 32-token blocks for launches of 17-32 tokens on fp16 x where paired
// B runs (true), never (false), or as VOLTAD_NARROW_TOKENS32 says (nullopt;
// on unless it is 0).
void gemm_narrow_tokens32_force(std::optional<bool> on);
// Whether launches of 17-32 tokens on fp16 x take 32-token blocks: switched
// on (the default since run 52, docs/PERFORMANCE.md: batch 24 +2.6% and
// +5.6%, batch 32 +1.8% and +5.1% under `portable` on the H200;
// VOLTAD_NARROW_TOKENS32=0 turns them off; or a test's
// gemm_narrow_tokens32_force) and paired B running at that size.
bool gemm_narrow_tokens32();

// Tests: the block shape of the narrow GEMM's last launch (what a forced
// order or block size really ran).
struct NarrowLaunch {
  WmmaPairs order = WmmaPairs::None;
  int tokens = 0, warps = 0;  // a block's
  uint32_t code() const { return uint32_t(order) << 16 | uint32_t(tokens) << 8 | uint32_t(warps); }
  static NarrowLaunch decode(uint32_t c) {
    return {WmmaPairs(c >> 16), int(c >> 8 & 0xFF), int(c & 0xFF)};
  }
};
NarrowLaunch gemm_narrow_last_launch();

// The warps a block of 8 or 16 tokens takes in a grid of `blocks` blocks
// on this device (VOLTAD_NARROW_WARPS16 included; the shared memory may
// then still cut 16 to 8): for tests.
int gemm_narrow_warps16(int64_t blocks);

}  // namespace voltad::kernels
