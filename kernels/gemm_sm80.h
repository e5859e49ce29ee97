// The sm_80+ variant of the prefill GEMM (kernels/gemm_wmma.h): the same
// contract and the same numerics (weights decoded by the same code, x
// rounded to FP16 the same way, FP32 accumulation in the same k order), but
// x is rounded to fp16 once into scratch memory, and every tile load goes
// through cp.async into a ring of stages in shared memory, so that several
// stages of weights and activations are in flight while the tensor cores
// work. The V100 has no cp.async: this file is not part of the portable path
// (scripts/ci-sm70.sh skips *_sm80.cu), and the backend uses it only with
// `engine.kernels: auto` on an sm_80+ card (kernels/kernel_set.h).
// Host declarations only (plain C++).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gemm_wmma.h"
#include "kernels/kernel_set.h"

namespace voltad::kernels {

// Device memory the variants round x into: n rows of cols fp16 values (the
// narrow one: n rounded up to 8), 16-byte aligned. The CUDA backend lends
// its quantized-activation buffer, which steps that run the GEMMs (of its
// gemm_min_tokens or more tokens) do not use until the final norm.
struct GemmScratch {
  void* data = nullptr;
  size_t bytes = 0;
  // When equal to GemmArgs::x: `data` already holds that x (args.n rows,
  // args.w.layout.cols columns) in the narrow sm_80 GEMM's layout, fp16
  // fragments and x sums (kernels/narrow_x.cuh), written by the kernel that
  // made x (launch_rmsnorm_narrow_x, launch_swiglu_narrow_x, the attention
  // combine with AttentionArgs::narrow_x), and launch_gemm_narrow_sm80 skips
  // its conversion. A pointer match only: the caller keeps it true. The
  // other paths ignore it (and may overwrite `data`).
  const float* holds_x = nullptr;
  // Where the narrow sm_80 GEMM may split k across blocks: 256-byte aligned,
  // split_bytes from gemm_narrow_sm80_split_bytes(split_rows, splits), and
  // zeroed before its first use (it starts with a counter per 32 of
  // split_rows, which every launch leaves zero). Launches of up to
  // split_rows rows may share it, one at a time: a launch on another
  // stream needs its own or none. Null: no split.
  void* split = nullptr;
  size_t split_bytes = 0;
  int64_t split_rows = 0;
};
inline size_t gemm_sm80_scratch_bytes(int n, int64_t cols) {
  return size_t(n) * size_t(cols) * 2;
}

// True when the current device is sm_80+ and this binary holds the
// variant's code for it (a build without sm_80+ targets running on a newer
// card through PTX does not).
bool gemm_sm80_available();

// True when the variant takes these arguments on the current device: it is
// available, the format's shared-memory ring fits the device, cols is a
// multiple of 64 (of 512 for Int6K256), and the scratch holds x in fp16.
bool gemm_sm80_supports(const GemmArgs& args, const GemmScratch& scratch);

// The variant: rounds x into the scratch, then the GEMM (two launches on
// the stream). Requires gemm_sm80_supports. Graph-capturable.
void launch_gemm_sm80(const GemmArgs& args, const GemmScratch& scratch, cudaStream_t stream);

// True when the variant is the faster of the two for this shape on the
// current device (enough 128x128 tiles to fill the SMs).
bool gemm_sm80_preferred(const GemmArgs& args);

// The sm_80+ narrow GEMM (kernels/gemm_narrow_sm80.cu): batched decode, 1..32
// tokens, Int4Sym32 / Int4K256 / Int6K256 weights, on mma.sync with the
// weights decoded straight into the MMA operands and every weight decoded
// once for all tokens. Rounds x into the scratch (n rounded up to 8 rows of
// cols fp16 values, reordered, and an x sum per row and 32 values), then the
// GEMM: two launches. Q4_0 weights are the portable decoder's FP16 values;
// Q4_K and Q6_K weights are not rounded at all (sc*q and q - 32 exact in
// FP16, the scales applied in FP32 after the MMAs). The order of the FP32
// sums differs.
size_t gemm_narrow_sm80_scratch_bytes(int n, int64_t cols);
// From this many tokens on it beats the dp4a matvecs on the H200, where it
// takes all of a model's matrices: 4 since run 12 (end to end at 4
// sequences: Llama-3-8B Q4_0 858 -> 1,056 tok/s, Q4_K_M 782 -> 851;
// docs/PERFORMANCE-RUNS-1-12.md), 2 since run 18, when its shorter decode
// made a step of 4 tokens cheaper than the matvecs' step of 2
// (docs/PERFORMANCE.md).
constexpr int kGemmMinTokensNarrowSm80 = 2;
bool gemm_narrow_sm80_supports(const GemmArgs& args, const GemmScratch& scratch);
// Its blocks for one token tile (1-8 tokens) of Int4Sym32 / Int4K256 weights
// where they outnumber the SMs, warps a block x blocks an SM: 8x2 (a ring of
// 4 stages a warp) up to 4 tokens, 8x3 (3 stages, 80 registers) from 5 where
// three blocks fit an SM, as measured on the H200 (docs/PERFORMANCE.md run
// 26: 8x3 lost 0.8-3.4% at 2 and 4 tokens, gained 0.9-2.0% at 8).
// VOLTAD_NARROW_ONE_TILE=8x2|8x3 takes one for every count (comparisons);
// gemm_narrow_sm80_set_one_tile (tests) overrides both, Default undoes it.
enum class NarrowOneTile { Default, W8B2, W8B3 };
void gemm_narrow_sm80_set_one_tile(NarrowOneTile shape);
// The blocks launch_gemm_narrow_sm80 would take for `args` on this device:
// W8B2 or W8B3 for 8-warp blocks at 1-8 tokens (Int6K256: always W8B2),
// Default where it takes 16 warps, shared-x blocks, the streaming blocks
// (gemm_narrow_sm80_bulk_taken) or more than 8 tokens.
NarrowOneTile gemm_narrow_sm80_one_tile_taken(const GemmArgs& args);
// Blocks that split k. Where 8-warp blocks (built for two an SM, and two
// fit) would not outnumber the SMs, one block an SM leaves half its warps'
// slots empty:
// Int4K256 at 25-32 tokens on a 4,096-row matrix (o and the Q4_K downs of
// Llama-3-8B; 16-warp blocks spill there). There kNarrowSplits blocks split
// k, each writes its sums to GemmScratch::split, and the last of them to
// arrive adds them in split order, so the result does not depend on which
// arrives last (batch 32 +3.0% Llama-3-8B Q4_K_M, +2.8% Qwen3-8B;
// docs/PERFORMANCE-RUNS-28-30.md run 29).
// The split memory for launches of up to `rows` rows and up to `splits`
// splits: a counter per 32 rows (the region rounded up to 256 bytes), then
// each block's sums (32 tokens x 32 rows in fp32). A launch needs memory
// for `splits` at the memory's split_rows, or it does not split.
constexpr int kNarrowSplits = 2;
constexpr int kNarrowMaxSplits = 4;
size_t gemm_narrow_sm80_split_bytes(int64_t rows, int splits);
// Tests: 1..kNarrowMaxSplits splits for every launch of that shape (Int4K256
// at 25-32 tokens in 8-warp blocks, however many) the split memory has room
// for; 0 undoes it. VOLTAD_NARROW_SPLITS=N does the same for a whole
// process (comparisons; 1: no split anywhere; the engine's memory has room
// for kNarrowSplits, so 3 and 4 split nothing there).
void gemm_narrow_sm80_set_splits(int splits);
// The splits launch_gemm_narrow_sm80(args, scratch) would take here.
int gemm_narrow_sm80_splits_taken(const GemmArgs& args, const GemmScratch& scratch);
// Blocks whose warps share x. A 32-row block of one warp a k range reads
// all of x (at 32 tokens 64 bytes a k value beside 18 of Q4_K weights); in
// these, warps that split rows share a k range, and its x is copied once a
// stage into shared memory for all of them. Pair: 8 warps, 4 a k range of
// 128 rows, two blocks an SM; Wide: one block an SM of two groups of 4-6
// row warps, where those blocks fill the SMs once. Built for Q4_K and Q6_K
// at 25-32 tokens and Q4_0 at 1-8, where the rule (Rule) takes them as
// measured on the H200 (gemm_narrow_sm80.cu, shared_x). The tests force
// one (Pair, Wide: wherever built and fitting) or none (Never); Rule undoes
// that. VOLTAD_NARROW_SHARED_X=0|q4|pair|wide does the same for a process
// (comparisons; q4: the rule without Q6_K).
enum class NarrowSharedX { Rule, Never, Pair, Wide };
void gemm_narrow_sm80_set_shared_x(NarrowSharedX how);
// The blocks launch_gemm_narrow_sm80(args, ...) takes here: Pair, Wide or
// Never (also where it takes the streaming blocks, below).
NarrowSharedX gemm_narrow_sm80_shared_x_taken(const GemmArgs& args);
// Streaming blocks fed by bulk copies (sm_90, kernels/narrow_bulk_sm90.cu):
// Q4_K (Int4K256) and Q4_0 (Int4Sym32) rows of 4,096 columns at 1-8
// tokens, one wave of blocks that each walk row groups of 16 with a
// producer warp keeping a ring of whole-row stages in flight. Rule: where
// every block of the wave gets 4 or more row groups (a layer's gate|up on
// the H200), ahead of the shared-x blocks; Never / Always (tests: wherever
// the shape and device allow); VOLTAD_NARROW_BULK=0 keeps the rule from
// taking them, =q4k from taking Q4_0 (comparisons).
enum class NarrowBulk { Rule, Never, Always };
void gemm_narrow_sm80_set_bulk(NarrowBulk how);
// Whether launch_gemm_narrow_sm80(args, ...) takes the streaming blocks here.
bool gemm_narrow_sm80_bulk_taken(const GemmArgs& args);
// The shared memory a block of them needs: devices that give a block less
// (an sm_120 card) take none.
size_t gemm_narrow_sm80_bulk_smem_bytes();
// Launches them with x already in the narrow layout at xp, if they take
// `args` (else returns false having done nothing): launch_gemm_narrow_sm80's
// own step.
bool launch_narrow_bulk_sm90(const GemmArgs& args, const uint32_t* xp, cudaStream_t stream);
void launch_gemm_narrow_sm80(const GemmArgs& args, const GemmScratch& scratch, cudaStream_t stream);
// Two products of the same x in one launch at 1-8 tokens: a Q4_K
// (Int4K256) `a` and a Q6_K (Int6K256) `b` of as many columns (a Q4_K_M
// layer's q|k beside its attn_v), both in 8-warp blocks with the 8x2
// shape's bounds and rings (Q6_K's ring as q6k_ring gives it), the first
// blocks a's row blocks, the rest b's; each output's bits are those of its
// own launch in 8-warp blocks (v alone takes 16 where its row blocks do not
// fill the SMs). The one-tile shape (VOLTAD_NARROW_ONE_TILE,
// gemm_narrow_sm80_set_one_tile) does not apply to a pair, and
// gemm_narrow_sm80_one_tile_taken reports a matrix launched alone. Returns
// false having done nothing where the pair does not apply (other formats,
// token counts or x, arguments gemm_narrow_sm80_supports refuses,
// VOLTAD_NARROW_PAIR=0 in the environment, for comparisons:
// gemm_narrow_sm80_pair_enabled); then launch each.
bool gemm_narrow_sm80_pair_enabled();
bool launch_gemm_narrow_sm80_pair(const GemmArgs& a, const GemmArgs& b, const GemmScratch& scratch,
                                  cudaStream_t stream);

// Whether launch_gemm_for(set, args, scratch) runs the sm_80 narrow GEMM.
bool gemm_for_takes_narrow_sm80(KernelSet set, const GemmArgs& args, const GemmScratch& scratch);

// Whether launch_gemm_for(set, args, scratch) would read x from the scratch
// where scratch.holds_x == args.x (kernels/narrow_x.cuh's layout): the
// sm_80 narrow GEMM, or the portable narrow kernel or 32-token tiles where
// gemm_narrow_takes_x16 or gemm_tiles_take_x16 and the scratch holds n
// rows of x (not where the prefill variant would take
// the call: it rounds x into the scratch itself). A kernel that makes x for
// such GEMMs writes it there too, and they skip the conversion.
bool gemm_for_reads_narrow_x(KernelSet set, const GemmArgs& args, const GemmScratch& scratch);

// Whether launch_gemm_for(set, args, scratch) runs the portable narrow
// GEMM, which alone makes a norm's pieces (GemmArgs::norm_out: rows a
// multiple of 32) or reads them (norm_scale: from the scratch, which must
// hold x, as fp16 x).
bool gemm_for_takes_norm_pieces(KernelSet set, const GemmArgs& args, const GemmScratch& scratch);

// Whether launch_gemm_for(set, args, scratch) runs the portable narrow
// GEMM on fp16 x, which alone makes SwiGLU (GemmArgs::swiglu_out: gate|up's
// 2 x half rows, half a multiple of 32, up to 32 tokens, the scratch holding
// x; the caller checks that w_down's reader is portable, see SwigluOut).
bool gemm_for_takes_swiglu(KernelSet set, const GemmArgs& args, const GemmScratch& scratch);

// With `set` Auto: the sm_80 narrow GEMM where it takes the arguments, else
// launch_gemm_sm80 where it takes them and is preferred for them; otherwise
// (and with Portable) launch_gemm (the portable kernels, auto tile), or the
// portable narrow kernel or 32-token tiles on the scratch's fp16 x
// (launch_gemm_narrow_x16, launch_gemm_tiles_x16) where it holds x and
// gemm_for_reads_narrow_x.
// VOLTAD_GEMM_SM80_ALWAYS=1 (tests) puts launch_gemm_sm80 first.
void launch_gemm_for(KernelSet set, const GemmArgs& args, const GemmScratch& scratch,
                     cudaStream_t stream);

}  // namespace voltad::kernels
