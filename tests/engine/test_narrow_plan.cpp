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

// The 8- and 16-token blocks keep the one-wave rule: the 32-token rule
// measured -1 to -3% there (run 58).
TEST_CASE("blocks of 8 or 16 tokens: 16 warps only where the grid fits the SMs once") {
  // H100 / H200: o and down (4,096 rows: 128 blocks) take 16; Llama-3-8B's
  // gate|up (896 blocks, whose last wave of 8-warp blocks is 39% full) and
  // lm head (4,008) stay at 8, where run 58's 16 lost.
  CHECK(narrow_warps16_for(row_blocks(4096), 132) == 16);
  CHECK(narrow_warps16_for(132, 132) == 16);
  CHECK(narrow_warps16_for(133, 132) == 8);
  for (int64_t rows : {6144, 2 * 14336, 2 * 12288, 128256, 151936}) {
    CAPTURE(rows);
    CHECK(narrow_warps16_for(row_blocks(rows), 132) == 8);
  }
  // 17-32 tokens in two 16-token blocks a row range (paired B off): twice
  // the row blocks.
  CHECK(narrow_warps16_for(2 * row_blocks(4096), 132) == 8);
  // V100 (80 SMs): even o and down (128 blocks) take 8.
  CHECK(narrow_warps16_for(row_blocks(4096), 80) == 8);
  CHECK(narrow_warps16_for(row_blocks(2048), 80) == 16);
  CHECK(narrow_warps16_for(10, 0) == 8);  // no SM count: the blocks that always fit
}
