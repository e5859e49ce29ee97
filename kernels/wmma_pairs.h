// Paired B for the portable narrow GEMM (kernels/gemm_narrow.cu): the
// weights' wmma B fragment built in registers from the staged nibbles, not
// stored to a shared tile and loaded back.
//
// wmma's fragment order is unspecified, so the kernel cannot fill a
// fragment by a rule of its own; it takes one of the orders below, each
// checked at start against what `load_matrix_sync` gives on the device (a
// probe: gemm_narrow_prepare). The fragment is m8n32k16's B, col_major:
// element (k, n) is k of weight row n, 16 values a lane, 8 registers of
// two. In both orders register r of lane L holds k and k + 1 of one row n,
// k even, as
//   n = pair_lane_row(o, L) + pair_reg_drow(o, r),
//   k = pair_lane_k(o, L) + pair_reg_dk(o, r):
//   - Quads (seen on the H200, sm_90: mma.m16n8k16's B operand four times
//     over): n = L / 4 + 8 j, k = 2 (L % 4) + 8 h, with j = (r & 1) +
//     2 (r >> 2) and h = (r >> 1) & 1;
//   - RowPerLane (sm_70, read from the V100's machine code, run 49 in
//     docs/PERFORMANCE.md: 16 HMMA.884 a wmma): lane L holds all 16 k of
//     row n(L) = 8 ((L >> 2) & 3) + 4 (L >> 4) + (L & 3), k = 2r.
// Plain C++: tests/engine/test_wmma_pairs.cpp checks the classification
// on the CPU.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "kernels/host_device.h"

namespace voltad::kernels {

enum class WmmaPairs : uint8_t {
  None,        // neither order: the weights go through the shared tile
  Quads,       // four lanes a row, two k pairs each (sm_80+)
  RowPerLane,  // a lane a row, its 16 k in order (sm_70)
};

inline const char* wmma_pairs_name(WmmaPairs o) {
  switch (o) {
    case WmmaPairs::Quads:
      return "quads";
    case WmmaPairs::RowPerLane:
      return "row-per-lane";
    case WmmaPairs::None:
      break;
  }
  return "none";
}

constexpr int kPairRegisters = 8;  // registers of two fp16 in m8n32k16's B, a lane

VOLTAD_HD constexpr int pair_lane_row(WmmaPairs o, int lane) {
  return o == WmmaPairs::Quads ? lane >> 2 : 8 * ((lane >> 2) & 3) + 4 * (lane >> 4) + (lane & 3);
}
VOLTAD_HD constexpr int pair_lane_k(WmmaPairs o, int lane) {
  return o == WmmaPairs::Quads ? 2 * (lane & 3) : 0;
}
VOLTAD_HD constexpr int pair_reg_drow(WmmaPairs o, int r) {
  return o == WmmaPairs::Quads ? 8 * ((r & 1) + 2 * (r >> 2)) : 0;
}
VOLTAD_HD constexpr int pair_reg_dk(WmmaPairs o, int r) {
  return o == WmmaPairs::Quads ? 8 * ((r >> 1) & 1) : 2 * r;
}
// The row whose factors (scales) lane L reads for the warp: Quads, its own
// index (the lanes of a row's factors are found by shuffles); RowPerLane,
// the row it holds (no shuffles).
VOLTAD_HD constexpr int pair_owned_row(WmmaPairs o, int lane) {
  return o == WmmaPairs::RowPerLane ? pair_lane_row(o, lane) : lane;
}

// Where an order's paired kernels are built natively, by __CUDA_ARCH__:
// Quads from sm_75, RowPerLane below it (each runs in production only where
// the probe found its order).
VOLTAD_HD constexpr bool pairs_built_natively(WmmaPairs o, int arch) {
  return o == WmmaPairs::None || (o == WmmaPairs::Quads) == (arch >= 750);
}

// The probe's result: for lane L and element e (0..15) of its fragment,
// code[16 L + e] = 64 n + k of the element it holds. True where order o
// gives exactly these.
inline bool wmma_order_is(WmmaPairs o, const uint16_t* code) {
  if (o == WmmaPairs::None) return false;
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < kPairRegisters; ++r) {
      const int n = pair_lane_row(o, lane) + pair_reg_drow(o, r);
      const int k = pair_lane_k(o, lane) + pair_reg_dk(o, r);
      if (code[16 * lane + 2 * r] != 64 * n + k || code[16 * lane + 2 * r + 1] != 64 * n + k + 1)
        return false;
    }
  return true;
}

// Quads' kernels fill x's A fragment (m8n32k16, row_major: element (t, k)
// of the 8 x 16 tile) themselves, in the order of sm_90's machine code
// (mma.m16n8k16's B operand, repeated four times; the probe found it on an
// H100 and an H200, run 68): element e of lane L is
// token L / 4, k = 2 (L % 4) + e % 2 + 8 (e / 2 % 2). code[16 L + e] =
// 16 t + k of the element load_matrix_sync gives; true where all match.
inline bool x_frag_is_quads(const uint16_t* code) {
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 16; ++e)
      if (code[16 * lane + e] != 16 * (lane >> 2) + 2 * (lane & 3) + (e & 1) + 8 * ((e >> 1) & 1))
        return false;
  return true;
}

// The order the probe's codes match, None where neither.
inline WmmaPairs classify_wmma_order(const uint16_t* code) {
  for (WmmaPairs o : {WmmaPairs::Quads, WmmaPairs::RowPerLane})
    if (wmma_order_is(o, code)) return o;
  return WmmaPairs::None;
}

}  // namespace voltad::kernels
