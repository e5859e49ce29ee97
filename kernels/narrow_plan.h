// The narrow GEMM's block sizes (kernels/gemm_narrow.cu), in plain
// C++: the launch calls it, and tests/engine/test_narrow_plan.cpp checks it
// on the CPU with the SM counts of cards not at hand (a V100's among them).
#pragma once

#include <cstdint>

namespace voltad::kernels {

// Whether the narrow GEMM's blocks should each take a whole SM's warps (16
// in blocks of 8 or 16 tokens, 12 in blocks of 32) rather than half as
// many, two an SM. Either way an SM runs the same warps, so a full wave of
// half-size blocks takes about twice as long as a wave of whole-SM blocks
// (each of their warps takes half of a row's k range). Whole-SM blocks
// where that makes fewer waves' time: every grid that fits the SMs once
// over, and a grid whose last wave of half-size blocks would be no more
// than half full, which leaves half the SMs without a block while their
// neighbours finish. Run 56 (H100, portable, 32-token blocks): Llama-3-8B
// Q4_K_M's gate|up, 896 blocks, 3.4 waves of 264: batch 24 and 32 +2-3%
// end to end; Qwen3-8B's 768 blocks, 2.9 waves, a tie: forced to 12 warps,
// -0.9%.
inline bool narrow_whole_sm_blocks(int64_t blocks, int sms) {
  if (sms <= 0) return false;
  const int64_t whole_waves = (blocks + sms - 1) / sms;
  const int64_t half_waves = (blocks + 2 * int64_t(sms) - 1) / (2 * int64_t(sms));
  return whole_waves < 2 * half_waves;
}

// Warps a 32-token block: 12 or 6.
inline int narrow_warps32_for(int64_t blocks, int sms) {
  return narrow_whole_sm_blocks(blocks, sms) ? 12 : 6;
}

// Warps a block of 8 or 16 tokens: 16 only where the grid fits the SMs once
// over (a 4,096-row product's 128 blocks on a 132-SM card), else 8. The
// 32-token blocks' rule (16 also where the last wave of 8-warp blocks would
// be at most half full) lost here: run 58 (H200, portable), Llama-3-8B's
// gate|up and lm head moved to 16 warps, batch 8 -3.2% (Q4_K_M) and -3.0%
// (Q4_0), batch 12 -1.0%, batch 16 -1.4%.
inline int narrow_warps16_for(int64_t blocks, int sms) {
  return sms > 0 && blocks <= sms ? 16 : 8;
}

}  // namespace voltad::kernels
