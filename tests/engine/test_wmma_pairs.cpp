// Paired B's orders (kernels/wmma_pairs.h) and the classification of the
// probe's codes, on the CPU: the orders as seen on devices (the H200's
// `load_matrix_sync`, printed by a probe on 2026-12-05; the V100's from its
// machine code, docs/KERNEL-NOTES-RUNS-49-51.md "sm_70 SASS"), each accepted as
// itself; codes that differ anywhere refused.
#include <doctest/doctest.h>

#include <array>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/wmma_pairs.h"

using namespace voltad::kernels;

namespace {

using Codes = std::array<uint16_t, 32 * 16>;

// The codes (64 n + k) order o gives, element by element.
Codes codes_of(WmmaPairs o) {
  Codes c{};
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < kPairRegisters; ++r) {
      const int n = pair_lane_row(o, lane) + pair_reg_drow(o, r);
      const int k = pair_lane_k(o, lane) + pair_reg_dk(o, r);
      c[size_t(16 * lane + 2 * r)] = uint16_t(64 * n + k);
      c[size_t(16 * lane + 2 * r + 1)] = uint16_t(64 * n + k + 1);
    }
  return c;
}

// Every (k, n) of the 16 x 32 fragment held exactly once.
bool covers_once(const Codes& c) {
  std::set<int> seen;
  for (uint16_t v : c) {
    const int n = v / 64, k = v % 64;
    if (n >= 32 || k >= 16 || !seen.insert(v).second) return false;
  }
  return seen.size() == 32 * 16;
}

}  // namespace

TEST_CASE("wmma pairs: the H200's order is Quads, element for element as the probe printed it") {
  // Lanes 0, 1, 4 and 31 of the probe's output on the H200, as (k, n).
  const std::vector<std::pair<int, std::vector<std::pair<int, int>>>> seen = {
      {0,
       {{0, 0},
        {1, 0},
        {0, 8},
        {1, 8},
        {8, 0},
        {9, 0},
        {8, 8},
        {9, 8},
        {0, 16},
        {1, 16},
        {0, 24},
        {1, 24},
        {8, 16},
        {9, 16},
        {8, 24},
        {9, 24}}},
      {1,
       {{2, 0},
        {3, 0},
        {2, 8},
        {3, 8},
        {10, 0},
        {11, 0},
        {10, 8},
        {11, 8},
        {2, 16},
        {3, 16},
        {2, 24},
        {3, 24},
        {10, 16},
        {11, 16},
        {10, 24},
        {11, 24}}},
      {4,
       {{0, 1},
        {1, 1},
        {0, 9},
        {1, 9},
        {8, 1},
        {9, 1},
        {8, 9},
        {9, 9},
        {0, 17},
        {1, 17},
        {0, 25},
        {1, 25},
        {8, 17},
        {9, 17},
        {8, 25},
        {9, 25}}},
      {31,
       {{6, 7},
        {7, 7},
        {6, 15},
        {7, 15},
        {14, 7},
        {15, 7},
        {14, 15},
        {15, 15},
        {6, 23},
        {7, 23},
        {6, 31},
        {7, 31},
        {14, 23},
        {15, 23},
        {14, 31},
        {15, 31}}},
  };
  const Codes q = codes_of(WmmaPairs::Quads);
  for (const auto& [lane, elems] : seen)
    for (size_t e = 0; e < elems.size(); ++e) {
      CAPTURE(lane);
      CAPTURE(e);
      CHECK(q[size_t(16 * lane) + e] == 64 * elems[e].second + elems[e].first);
    }
  CHECK(covers_once(q));
  CHECK(classify_wmma_order(q.data()) == WmmaPairs::Quads);
  CHECK(pair_owned_row(WmmaPairs::Quads, 13) == 13);
}

TEST_CASE("wmma pairs: the V100's order is RowPerLane, a lane's 16 k of one row in order") {
  const Codes c = codes_of(WmmaPairs::RowPerLane);
  // Lane L: row 8((L >> 2) & 3) + 4(L >> 4) + (L & 3), k 0..15.
  const int rows[32] = {0, 1, 2, 3, 8,  9,  10, 11, 16, 17, 18, 19, 24, 25, 26, 27,
                        4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 16; ++e) {
      CAPTURE(lane);
      CHECK(c[size_t(16 * lane + e)] == 64 * rows[lane] + e);
    }
  CHECK(covers_once(c));
  CHECK(classify_wmma_order(c.data()) == WmmaPairs::RowPerLane);
  // The lane reads its own row's factors: no shuffles.
  for (int lane = 0; lane < 32; ++lane)
    CHECK(pair_owned_row(WmmaPairs::RowPerLane, lane) == rows[lane]);
}

TEST_CASE("wmma pairs: codes that differ from both orders anywhere are refused") {
  for (WmmaPairs o : {WmmaPairs::Quads, WmmaPairs::RowPerLane}) {
    CAPTURE(wmma_pairs_name(o));
    const Codes good = codes_of(o);
    // A pair's two halves swapped (k + 1 first).
    Codes swapped = good;
    std::swap(swapped[16 * 5 + 6], swapped[16 * 5 + 7]);
    CHECK(classify_wmma_order(swapped.data()) == WmmaPairs::None);
    // Two lanes' fragments exchanged: still every element once.
    Codes lanes = good;
    for (int e = 0; e < 16; ++e) std::swap(lanes[size_t(16 * 3 + e)], lanes[size_t(16 * 20 + e)]);
    CHECK(covers_once(lanes));
    CHECK(classify_wmma_order(lanes.data()) == WmmaPairs::None);
    // A register's pair from two rows.
    Codes mixed = good;
    mixed[16 * 9 + 1] = uint16_t(mixed[16 * 9 + 1] + 64);
    CHECK(classify_wmma_order(mixed.data()) == WmmaPairs::None);
    // The last element of the last lane off by one.
    Codes last = good;
    last[32 * 16 - 1] = uint16_t(last[32 * 16 - 1] + 1);
    CHECK(classify_wmma_order(last.data()) == WmmaPairs::None);
  }
  // A fragment of another size (the probe writes 0xFFFF everywhere).
  Codes other;
  other.fill(0xFFFF);
  CHECK(classify_wmma_order(other.data()) == WmmaPairs::None);
  CHECK(std::string(wmma_pairs_name(WmmaPairs::None)) == "none");
}

// Each order's kernels are native where its order is found: Quads from
// sm_75 (mma.m16n8k16 underneath), RowPerLane on sm_70 (HMMA.884); None's
// (the tile) everywhere. The probe reports these bits, and a RowPerLane
// kernel built off sm_70 emulates its order (tests only).
TEST_CASE("wmma pairs: where each order's kernels are built natively") {
  for (int arch : {700, 720, 750, 800, 860, 890, 900, 1000, 1200}) {
    CAPTURE(arch);
    CHECK(pairs_built_natively(WmmaPairs::None, arch));
    CHECK(pairs_built_natively(WmmaPairs::Quads, arch) == (arch >= 750));
    CHECK(pairs_built_natively(WmmaPairs::RowPerLane, arch) == (arch < 750));
  }
}

// x's A fragment (m8n32k16, row_major), which Quads' kernels fill from
// registers: the order load_matrix_sync gives for sm_90 (its machine code
// read on 2026-12-07 with nvdisasm, CUDA 13: lane L loads the words at
// (t = L / 4, k = 2 (L % 4)) and k + 8, elements 0-3 from them and 4-15 the
// same four again; the HMMA.16816s read only elements 0-3), and the
// H100's probe found it (run 68: test_gemm_pairs). Codes 16 t + k.
TEST_CASE("wmma pairs: x's A fragment in Quads' order, and any other refused") {
  std::array<uint16_t, 32 * 16> a{};
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 16; ++e) {
      const int word = e >> 1 & 1;  // the load at k + 8
      a[size_t(16 * lane + e)] = uint16_t(16 * (lane >> 2) + 2 * (lane & 3) + 8 * word + (e & 1));
    }
  // Lane 0: k 0, 1, 8, 9 of token 0, four times; lane 29: token 7, k 2, 3, 10, 11.
  const uint16_t lane0[4] = {0, 1, 8, 9}, lane29[4] = {114, 115, 122, 123};
  for (int e = 0; e < 16; ++e) {
    CHECK(a[size_t(e)] == lane0[e % 4]);
    CHECK(a[size_t(16 * 29 + e)] == lane29[e % 4]);
  }
  CHECK(x_frag_is_quads(a.data()));
  // The second copy of a lane's four holding other k: refused (the kernels
  // fill every element, so each must be what load_matrix_sync gives).
  auto other = a;
  other[16 * 6 + 5] = uint16_t(other[16 * 6 + 5] + 2);
  CHECK_FALSE(x_frag_is_quads(other.data()));
  // Tokens of two lanes exchanged.
  other = a;
  for (int e = 0; e < 16; ++e) std::swap(other[size_t(16 * 1 + e)], other[size_t(16 * 9 + e)]);
  CHECK_FALSE(x_frag_is_quads(other.data()));
  // A fragment of another size (0xFFFF from the probe).
  other.fill(0xFFFF);
  CHECK_FALSE(x_frag_is_quads(other.data()));
}
