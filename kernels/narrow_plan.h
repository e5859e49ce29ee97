// The 32-token narrow GEMM's block size (kernels/gemm_narrow.cu), in plain
// C++: the launch calls it, and tests/engine/test_narrow_plan.cpp checks it
// on the CPU with the SM counts of cards not at hand (a V100's among them).
#pragma once

#include <cstdint>

namespace voltad::kernels {

// Warps a 32-token block: 12 (one block an SM, each warp half of a row's
// k range) or 6 (two an SM, each warp all of it). Either way an SM runs 12
// warps, so a full wave of 6-warp blocks takes about twice as long as one
// of 12-warp blocks. 12 where that makes fewer waves' time: every grid that
// fits the SMs once over, and a grid whose last wave of 6-warp blocks would
// be no more than half full, which leaves half the SMs without a block while
// their neighbours finish (run 56, H100, portable: Llama-3-8B Q4_K_M's
// gate|up, 896 blocks, 3.4 waves of 264: batch 32 +3.0%, 24 +3.4% end to
// end; Qwen3-8B's 768 blocks, 2.9 waves, stay at 6: forced to 12, -0.9%).
inline int narrow_warps32_for(int64_t blocks, int sms) {
  if (sms <= 0) return 6;
  const int64_t waves12 = (blocks + sms - 1) / sms;
  const int64_t waves6 = (blocks + 2 * int64_t(sms) - 1) / (2 * int64_t(sms));
  return waves12 < 2 * waves6 ? 12 : 6;
}

}  // namespace voltad::kernels
