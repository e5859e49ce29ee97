// Attention over the paged KV cache, for decode and prefill alike: each
// query token attends to positions [0, pos] of its own sequence, whose keys
// and values live in 16-token blocks named by the sequence's block table.
// Grouped-query attention: a block of the kernel loads each K/V row once for
// all query heads that share it. Long contexts are split over several
// blocks (split-K) whose partial softmax sums a second pass combines.
// Host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "kernels/attention_plan.h"
#include "kernels/matvec.h"

namespace voltad::kernels {

// The most pieces a token the tensor-core pass 1 takes (launch_attention_mma's
// plan; the wave would hold 33 at batch 1 on an H200): at batch 1 of a
// 4,096-position plan, 12 pieces against 33 gave +2.4% end to end at 1,024
// positions, +0.8% at 2,048 and +0.7-1.5% at 4,096; 16 gave -0.6 to +0.8%,
// 8 -0.9%; batch 8 (4 pieces) unchanged (Llama-3-8B Q4_K_M, H200,
// docs/PERFORMANCE-RUNS-31-33.md run 33). Below ~768 positions a token uses 64-position
// pieces (the least piece), so 12 leaves them as they were.
// AttentionArgs::max_splits (VOLTAD_ATTENTION_MAX_SPLITS) can only lower it.
constexpr int kAttentionMmaMaxPieces = 12;
// A piece's partial: {m, l, 0, 0} then acc[head_dim]; the header padded to
// 4 floats so that acc is 16-byte aligned (the combine reads float4s).
constexpr int kAttentionPartialHeader = 4;

// KV cache of one layer: [n_blocks][16][kv_dim] halves for K, same for V.
struct KvLayerView {
  uint16_t* k = nullptr;  // fp16 bits
  uint16_t* v = nullptr;
};

// Writes each token's K and V (fp32, rows of kv_dim with stride ld) into its
// cache slot: slots[t] = block * 16 + position % 16.
void launch_kv_write(const float* k, const float* v, int64_t ld, int n_tokens, int kv_dim,
                     const int32_t* slots, KvLayerView cache, cudaStream_t stream);

struct AttentionArgs {
  const float* q = nullptr;  // (n_tokens, n_heads * head_dim), stride ldq
  int64_t ldq = 0;
  float* out = nullptr;      // (n_tokens, n_heads * head_dim), stride ldo
  int64_t ldo = 0;
  KvLayerView cache;
  const int32_t* positions = nullptr;     // (n_tokens): attend to [0, pos]
  const int32_t* token_tables = nullptr;  // (n_tokens): row of block_tables for the token's sequence
  const int32_t* block_tables = nullptr;  // (n_sequences, table_stride) block numbers
  int table_stride = 0;
  int n_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;      // 32, 64, 128 or 256
  int max_position = 0;  // the largest position of any token in the step (sizes split-K)
  // At most this many split-K pieces per token (0: attention_splits(max_position)).
  // Fewer pieces need less scratch, so a long run of prompt tokens fits one
  // launch; each block then walks more positions.
  int max_splits = 0;
  // The fewest positions a piece of a token holds (a multiple of 16; 0: as
  // the grid's pieces split the token's positions). launch_attention's
  // tensor-core path sets it from its plan (the portable and int8 ones take
  // the caller's); a token whose positions would make shorter pieces
  // fills fewer of them, and the rest hold none. So the pieces' length
  // follows each token's own positions, not the longest context the grid
  // was planned for (a decode graph's: max_context).
  int least_piece = 0;
  float scale = 1.0f;    // 1/sqrt(head_dim)
  // Split-K scratch: n_tokens * n_heads * attention_splits(max_position) *
  // (kAttentionPartialHeader + head_dim) floats.
  float* partials = nullptr;
  // When set (and head_dim % 32 == 0): the output also quantized for the
  // matvec that reads it (rows of n_heads * head_dim), saving a launch.
  QuantizedActivations out_q;
  // When set (and head_dim % 32 == 0): the output also written as the sm_80
  // narrow GEMM's x (kernels/narrow_x.cuh) for rows narrow_row0 + token of
  // narrow_n8, for the GEMM that reads `out` to skip its conversion. Rows
  // past the step's tokens are left as they are (the GEMM drops them).
  uint32_t* narrow_x = nullptr;
  int narrow_n8 = 0;
  int narrow_row0 = 0;
  // When set: n_tokens * n_kv_heads counters, zero before the first launch
  // and left zero by each. The last pass-1 block of a (token, KV head) to
  // write its piece then combines the pieces of that KV head's query heads
  // (the combine kernel's work, outputs included), and the second launch is
  // not made. Null: the two launches.
  uint32_t* arrivals = nullptr;
  // True where each token is the only one of its sequence in the step (a
  // decode step): of its positions only its own was written by the kernel
  // just before (the KV write), so under programmatic dependent launch pass 1
  // loads the others before it waits for that kernel. positions,
  // token_tables and block_tables must be the step's inputs (copied from the
  // host), not a kernel's output: they are read before the wait either way.
  bool own_position_only = false;
  // When rope.inv_freq is set (decode steps: own_position_only, the fp16
  // cache): q is the projection's raw output, and pass 1 applies, per head,
  // the RMSNorm (weights q_norm / k_norm, when set; Qwen3) and RoPE over the
  // whole head_dim to q and to the token's own k (rope.k, beside rope.v,
  // stride ldkv), and the block whose piece holds the token's own position
  // writes that k and its v into the cache slot slots[t]. This replaces
  // launch_head_rmsnorm (q and k) and launch_rope_qk_kv_write before the
  // attention: one to three launches a layer fewer. q and k stay unrotated
  // in their buffers. inv_freq, the norm weights and slots are read before
  // the wait (rope.h): not a kernel's output.
  struct Rope {
    const float* inv_freq = nullptr;  // head_dim / 2 (rope_inverse_frequencies)
    bool neox = false;                // pairs (i, i + head_dim/2); else (2i, 2i+1)
    const float* k = nullptr;         // the token's own k and v rows (n_kv_heads * head_dim)
    const float* v = nullptr;
    int64_t ldkv = 0;
    const int32_t* slots = nullptr;   // (n_tokens): cache slot of the token's own row
    const float* q_norm = nullptr;    // head_dim weights, or null: no norm
    const float* k_norm = nullptr;
    float eps = 0.0f;
  } rope;
  // Pass 1 on the tensor cores where attention_mma_applies (the fp16 cache,
  // head_dim 64 or 128, an sm_80+ device; engine.kernels: auto): each warp
  // takes 16 positions at a time from shared memory into mma.sync, q and
  // the softmax weights split into an fp16 high and low part (the MMAs'
  // idle rows carry the low parts), so the sums keep about fp32 accuracy.
  // Elsewhere, and when false: the wmma kernel (below) or the portable one.
  bool tensor_cores = false;
  // Pass 1 on the tensor cores through wmma where attention_wmma_applies
  // and the sm_80+ one does not (the fp16 cache, head_dim 64 or 128; sm_70+:
  // the V100's), with plain loads; the same high and low parts. When false:
  // the portable kernel.
  bool wmma = false;
};

// Floats of split-K scratch a step needs.
inline size_t attention_partial_floats(int n_tokens, int n_heads, int head_dim, int max_position) {
  size_t splits = size_t(attention_splits(max_position));
  return size_t(n_tokens) * size_t(n_heads) * splits * size_t(kAttentionPartialHeader + head_dim);
}

void launch_attention(const AttentionArgs& args, cudaStream_t stream);

// True where launch_attention runs the tensor-core pass 1 for `args`
// (AttentionArgs::tensor_cores).
bool attention_mma_applies(const AttentionArgs& args);
// True where launch_attention runs the wmma pass 1 for `args` (AttentionArgs::
// wmma), unless attention_mma_applies.
bool attention_wmma_applies(const AttentionArgs& args);
// The AttentionArgs::least_piece launch_attention gives those args (tests).
int attention_launch_least_piece(const AttentionArgs& args);

// The split-K pieces per token launch_attention uses for `args`:
// attention_splits(max_position), at most max_splits, and no more than keep
// the grid (n_tokens x n_kv_heads x pieces) within one wave of the device.
int attention_launch_pieces(const AttentionArgs& args);
// The warps of a pass-1 block launch_attention uses for `args` (tests): 4,
// or 8 on the tensor cores where 2+ tokens' grid of 8-warp blocks fits one
// wave and each warp gets two cache blocks of the longest piece or more,
// or 6 in the wmma pass 1 where its plan is on and its warps then walk
// fewer cache blocks (attention_wmma.cu: 32 sequences at 512 positions).
int attention_launch_warps(const AttentionArgs& args);
// Tests: the wmma pass 1's blocks fixed at `warps` (4 or 6), 0 for its
// plan's choice, std::nullopt for the default (VOLTAD_ATTENTION_WMMA_WARPS,
// else 4).
void attention_wmma_warps_force(std::optional<int> warps);

}  // namespace voltad::kernels
