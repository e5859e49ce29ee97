// The narrow GEMM's block sizes (kernels/narrow_plan.h), on the CPU,
// with the SM counts of cards not at hand: an H100 or H200 (132), an A100
// (108) and a V100 (80).
#include <doctest/doctest.h>

#include <initializer_list>

#include "kernels/narrow_plan.h"

using voltad::kernels::narrow_warps16_for;
using voltad::kernels::narrow_warps32_for;

namespace {

// Blocks of 32 rows for a matrix of `rows` (one token block: 17-32 tokens).
int64_t row_blocks(int64_t rows) {
  return (rows + 31) / 32;
}

}  // namespace

TEST_CASE(
    "32-token blocks: 12 warps where the grid fits once or its last 6-warp wave is half empty") {
  SUBCASE("H100 / H200, Llama-3-8B and Qwen3-8B at batch 32") {
    CHECK(narrow_warps32_for(row_blocks(4096), 132) == 12);       // o, down: 128 blocks, one wave
    CHECK(narrow_warps32_for(row_blocks(6144), 132) == 6);        // q|k|v: 192, one wave of 6
    CHECK(narrow_warps32_for(row_blocks(2 * 14336), 132) == 12);  // gate|up: 896, 4th wave 39%
    CHECK(narrow_warps32_for(row_blocks(2 * 12288), 132) == 6);   // Qwen3's: 768, 3rd wave 91%
  }
  SUBCASE("V100: Llama-3-8B's gate|up is a tie (12 and 2 x 6 waves), so 6; q|k|v 12") {
    CHECK(narrow_warps32_for(row_blocks(2 * 14336), 80) == 6);
    CHECK(narrow_warps32_for(row_blocks(4096), 80) == 6);   // 128 blocks: one wave of 6
    CHECK(narrow_warps32_for(row_blocks(6144), 80) == 12);  // q|k|v's 192: 3 against 2 x 2
    CHECK(narrow_warps32_for(80, 80) == 12);
  }
  SUBCASE("at the edges of a wave") {
    for (int sms : {80, 108, 132}) {
      CAPTURE(sms);
      CHECK(narrow_warps32_for(1, sms) == 12);
      CHECK(narrow_warps32_for(sms, sms) == 12);
      CHECK(narrow_warps32_for(sms + 1, sms) == 6);  // one wave of 6 against two of 12
      CHECK(narrow_warps32_for(2 * sms, sms) == 6);
      CHECK(narrow_warps32_for(2 * sms + 1, sms) == 12);  // 3 waves of 12 against 2 x 2
      CHECK(narrow_warps32_for(3 * sms, sms) == 12);
      CHECK(narrow_warps32_for(3 * sms + 1, sms) == 6);  // 4 against 2 x 2: a tie
      CHECK(narrow_warps32_for(4 * sms, sms) == 6);
    }
    CHECK(narrow_warps32_for(10, 0) == 6);  // no SM count: the blocks that always fit
  }
}

// The rule VOLTAD_NARROW_WARPS16=waves gives the 8- and 16-token blocks.
TEST_CASE("blocks of 8 or 16 tokens: 16 warps by the same waves, else 8") {
  // H100 / H200: Llama-3-8B's gate|up (896 blocks) and lm head at 4-8
  // tokens (128,256 rows: 4,008 blocks, 16 waves of 264 with 48 in the
  // last) move to 16; Qwen3-8B's (768) and its lm head (151,936 rows:
  // 4,748 blocks, 18 waves, the last 260) stay at 8, as does q|k|v.
  CHECK(narrow_warps16_for(row_blocks(2 * 14336), 132) == 16);
  CHECK(narrow_warps16_for(row_blocks(128256), 132) == 16);
  CHECK(narrow_warps16_for(row_blocks(2 * 12288), 132) == 8);
  CHECK(narrow_warps16_for(row_blocks(151936), 132) == 8);
  CHECK(narrow_warps16_for(row_blocks(6144), 132) == 8);
  CHECK(narrow_warps16_for(row_blocks(4096), 132) == 16);
  // 17-32 tokens in two 16-token blocks a row range (paired B off): twice
  // the row blocks.
  CHECK(narrow_warps16_for(2 * row_blocks(4096), 132) == 8);
  // V100 (80 SMs): q|k|v's 192 blocks (2.4 waves of 160 8-warp blocks,
  // the last 20% full) and Llama-3-8B's lm head (4,008: 25.05 waves) move
  // to 16; gate|up (896: 5.6 waves), o and down (128: 0.8), Qwen3-8B's
  // gate|up (768: 4.8) and lm head (4,748: 29.7) stay at 8.
  CHECK(narrow_warps16_for(row_blocks(6144), 80) == 16);
  CHECK(narrow_warps16_for(row_blocks(128256), 80) == 16);
  for (int64_t rows : {4096, 2 * 14336, 2 * 12288, 151936}) {
    CAPTURE(rows);
    CHECK(narrow_warps16_for(row_blocks(rows), 80) == 8);
  }
  CHECK(narrow_warps16_for(10, 0) == 8);
}
