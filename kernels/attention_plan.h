// The decode attention's split-K arithmetic (how a token's positions are cut
// into pieces, how many pieces a wave of blocks holds) and the wmma pass 1's
// choice of block size, in plain C++: the kernels call it (VOLTAD_HD), and
// tests/engine/test_attention_plan.cpp checks it on the CPU with the wave
// sizes of devices not at hand (a V100's among them).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/host_device.h"

namespace voltad::kernels {

constexpr int kKvBlockTokens = 16;
constexpr int kAttentionMaxGroup = 8;  // query heads per KV head
// Split-K: a token's positions [0, pos] are cut into pieces of a multiple of
// 16 positions, as many as fit in kAttentionMaxSplits, so that a short
// context still spreads over many blocks and the scratch does not grow with
// the context.
constexpr int kAttentionMaxSplits = 64;
constexpr int kAttentionMinSplitTokens = 16;

// Pieces for the longest position of a step (the grid's third dimension).
inline int attention_splits(int max_position) {
  const int s = (max_position + kAttentionMinSplitTokens) / kAttentionMinSplitTokens;
  return s < kAttentionMaxSplits ? s : kAttentionMaxSplits;
}

// Positions per piece for a token at `pos` in a grid of `splits` pieces:
// ceil((pos + 1) / splits) rounded up to a multiple of 16 (a KV block), so
// every piece but the last has the same length and the first
// ceil((pos + 1) / per) pieces cover [0, pos].
VOLTAD_HD inline int split_tokens(int pos, int splits) {
  const int per = (pos + splits) / splits;
  return (per + kAttentionMinSplitTokens - 1) / kAttentionMinSplitTokens * kAttentionMinSplitTokens;
}
// The same, no fewer than `least` positions (AttentionArgs::least_piece),
// and the pieces that then hold positions of a token at `pos`.
VOLTAD_HD inline int piece_tokens(int pos, int splits, int least) {
  const int per = split_tokens(pos, splits);
  return per > least ? per : least;
}
VOLTAD_HD inline int pieces_used(int pos, int splits, int least) {
  const int used = pos / piece_tokens(pos, splits, least) + 1;
  return used < splits ? used : splits;
}

// A decode attention launch as the plans see it (AttentionArgs' fields).
struct AttentionLaunchShape {
  int n_tokens = 0, n_kv_heads = 0, max_position = 0;
  int max_splits = 0;   // AttentionArgs::max_splits (0: no cap)
  int least_piece = 0;  // the caller's AttentionArgs::least_piece
};

// Pieces a token: attention_splits(max_position), at most max_splits, and no
// more than keep the grid (n_tokens x n_kv_heads x pieces) within one wave
// of `wave_blocks` blocks; at least one.
inline int attention_pieces_in_wave(const AttentionLaunchShape& s, int wave_blocks) {
  int splits = attention_splits(s.max_position);
  if (s.max_splits > 0) splits = std::min(splits, s.max_splits);
  const int64_t per_piece = std::max<int64_t>(1, int64_t(s.n_tokens) * s.n_kv_heads);
  const int64_t fit = std::max<int64_t>(1, wave_blocks / per_piece);
  return int(std::min<int64_t>(splits, fit));
}

// The wmma pass 1 (kernels/attention_wmma.cu): blocks of 4 warps (three an
// SM where registers and shared memory allow) or 6 (two).
constexpr int kWmmaWarps = 4;
constexpr int kWmmaWideWarps = 6;
// The fewest positions a piece of W-warp blocks holds: a cache block a warp.
constexpr int wmma_least_piece_of(int warps) {
  return warps * kKvBlockTokens;
}

struct WmmaPlan {
  int warps = kWmmaWarps, pieces = 1;
  int64_t cost = 0;  // the longest warp's cache blocks (+1 a block), times the waves
};

// One block size's plan: as many pieces as one wave of its blocks
// (`wave_blocks`) holds, no more than give each warp a cache block; its cost
// the longest warp's walk in cache blocks, counting a block's start and end
// (its q, the merge of its warps) as one more, times the waves of the grid.
inline WmmaPlan wmma_plan_for(const AttentionLaunchShape& s, int warps, int wave_blocks) {
  const int64_t units = std::max<int64_t>(1, int64_t(s.n_tokens) * s.n_kv_heads);
  const int wave = std::max(1, wave_blocks);
  const int least = std::max(s.least_piece, wmma_least_piece_of(warps));
  const int most = std::max(1, (s.max_position + 1) / wmma_least_piece_of(warps));
  const int pieces = std::min(most, attention_pieces_in_wave(s, wave));
  const int per = piece_tokens(s.max_position, pieces, least);
  const int64_t steps = (per / kKvBlockTokens + warps - 1) / warps + 1;
  const int64_t waves = (units * pieces + wave - 1) / wave;
  return {warps, pieces, steps * waves};
}

// The block size whose plan costs less, 4 warps on a tie. The kernel is a
// chain of cache blocks a warp (each waits on its loads, then on its
// scores, softmax and products), so the longest walk is its time. Where a
// wave holds one piece a token in either size, 6 warps walk fewer cache
// blocks each: 32 sequences planned for 641 positions (voltad-bench's at
// 512) on an H100 or H200 (132 SMs: 256 blocks a piece, 396 of 4 warps a
// wave, 264 of 6) walk 7 a warp instead of 11; on a V100 (80 SMs: 240 and
// 160) both take two waves, of 7 instead of 11.
inline WmmaPlan choose_wmma_plan(const AttentionLaunchShape& s, int wave4, int wave6) {
  const WmmaPlan four = wmma_plan_for(s, kWmmaWarps, wave4);
  const WmmaPlan six = wmma_plan_for(s, kWmmaWideWarps, wave6);
  return six.cost < four.cost ? six : four;
}

}  // namespace voltad::kernels
