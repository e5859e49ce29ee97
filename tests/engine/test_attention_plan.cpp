// The decode attention's split-K arithmetic and the wmma pass 1's block
// size (kernels/attention_plan.h), on the CPU, with the wave sizes of cards
// not at hand: an H100 or H200 (132 SMs: 396 blocks of 4 warps a wave, 264
// of 6) and a V100 (80 SMs: 240 and 160, three and two blocks an SM).
#include <doctest/doctest.h>

#include <initializer_list>

#include "kernels/attention_plan.h"

using namespace voltad::kernels;

namespace {

constexpr int kH100Four = 132 * 3, kH100Six = 132 * 2;
constexpr int kV100Four = 80 * 3, kV100Six = 80 * 2;

// Llama-3-8B's 8 KV heads, n sequences, planned for max_position.
AttentionLaunchShape llama3(int n, int max_position) {
  AttentionLaunchShape s;
  s.n_tokens = n;
  s.n_kv_heads = 8;
  s.max_position = max_position;
  return s;
}

struct Want {
  int n, warps, pieces;
};

// The plan's choice at n sequences planned for 641 positions (voltad-bench's
// plan at 512: 41 cache blocks a token), for waves of `four` and `six`.
void check_choices(int four, int six, std::initializer_list<Want> wants) {
  for (const Want& w : wants) {
    CAPTURE(w.n);
    const WmmaPlan p = choose_wmma_plan(llama3(w.n, 640), four, six);
    CHECK(p.warps == w.warps);
    CHECK(p.pieces == w.pieces);
  }
}

}  // namespace

TEST_CASE("pieces cover a token's positions, a cache block at a time") {
  for (int pos = 0; pos <= 5000; pos += 7)
    for (int splits = 1; splits <= kAttentionMaxSplits; ++splits)
      for (int least : {0, 64, 96, 256}) {
        CAPTURE(pos);
        CAPTURE(splits);
        CAPTURE(least);
        const int per = piece_tokens(pos, splits, least);
        const int used = pieces_used(pos, splits, least);
        REQUIRE(per % kKvBlockTokens == 0);
        REQUIRE(per >= least);
        REQUIRE(used >= 1);
        REQUIRE(used <= splits);
        // The used pieces hold [0, pos] and each holds some of it.
        REQUIRE(int64_t(used) * per >= pos + 1);
        REQUIRE(int64_t(used - 1) * per <= pos);
      }
  CHECK(split_tokens(511, 8) == 64);
  CHECK(split_tokens(512, 8) == 80);  // 513 positions: 65 a piece, rounded up
  CHECK(pieces_used(511, 8, 256) == 2);
  CHECK(attention_splits(511) == 32);
  CHECK(attention_splits(100000) == kAttentionMaxSplits);
}

TEST_CASE("pieces a token: as many as one wave holds, capped") {
  CHECK(attention_pieces_in_wave(llama3(1, 511), 396) == 32);  // all 32: 256 blocks
  CHECK(attention_pieces_in_wave(llama3(8, 511), 396) == 6);   // 64 blocks a piece
  CHECK(attention_pieces_in_wave(llama3(32, 511), 396) == 1);
  CHECK(attention_pieces_in_wave(llama3(64, 511), 396) == 1);  // never none
  AttentionLaunchShape capped = llama3(1, 511);
  capped.max_splits = 3;
  CHECK(attention_pieces_in_wave(capped, 396) == 3);
}

TEST_CASE("the wmma pass 1's plan: 6 warps only where they walk fewer cache blocks") {
  SUBCASE("H100 / H200") {
    check_choices(kH100Four, kH100Six, {{1, 4, 10}, {8, 4, 6}, {16, 4, 3}, {24, 4, 2}, {32, 6, 1}});
    // 32 sequences: one piece a token either way, one wave either way;
    // 11 cache blocks for the longest of 4 warps, 7 of 6 (+1 each).
    CHECK(wmma_plan_for(llama3(32, 640), 4, kH100Four).cost == 12);
    CHECK(wmma_plan_for(llama3(32, 640), 6, kH100Six).cost == 8);
  }
  SUBCASE("V100") {
    // 16 sequences: one piece a token in both (128 blocks; 3 pieces of 4
    // warps would need 384 of a wave's 240). 24: 6 warps need two waves.
    check_choices(kV100Four, kV100Six, {{1, 4, 10}, {8, 4, 3}, {16, 6, 1}, {24, 4, 1}, {32, 6, 1}});
    // 32 sequences: two waves either way (256 blocks on 240 or 160).
    CHECK(wmma_plan_for(llama3(32, 640), 4, kV100Four).cost == 2 * 12);
    CHECK(wmma_plan_for(llama3(32, 640), 6, kV100Six).cost == 2 * 8);
  }
  SUBCASE("the least piece: a cache block a warp, or the caller's if longer") {
    // No more pieces than give each of 6 warps a cache block: 5 of 96+
    // positions at 512, where a wave would hold 33.
    CHECK(wmma_plan_for(llama3(1, 511), 6, kH100Six).pieces == 5);
    // One token at 4,096 positions, 4 warps: 49 pieces of 96 positions
    // (6 cache blocks, 2 a warp, +1); with the caller's least piece of 256,
    // 16 cache blocks a piece (4 a warp, +1).
    AttentionLaunchShape s = llama3(1, 4095);
    CHECK(wmma_plan_for(s, 4, kH100Four).pieces == 49);
    CHECK(wmma_plan_for(s, 4, kH100Four).cost == 3);
    s.least_piece = 256;
    CHECK(wmma_plan_for(s, 4, kH100Four).cost == 5);
    // A context shorter than one piece of 6 warps: one piece.
    CHECK(wmma_plan_for(llama3(1, 40), 6, kH100Six).pieces == 1);
  }
  SUBCASE("ties keep 4 warps") {
    const AttentionLaunchShape s = llama3(8, 511);
    CHECK(wmma_plan_for(s, 4, kH100Four).cost == wmma_plan_for(s, 6, kH100Six).cost);
    CHECK(choose_wmma_plan(s, kH100Four, kH100Six).warps == 4);
  }
}
