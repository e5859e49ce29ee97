// Prefill and large-batch GEMM on FP16 tensor cores (wmma m16n16k16, which
// the V100 has): y[t][r] = bias[r] + sum_c W[r][c] * x[t][c] (+ y[t][r]) for
// n tokens at once, W in any packed format (kernels/matvec_format.h).
// Host declarations only (plain C++).
//
// Numerics: each weight tile is dequantized to FP16 in shared memory (the
// value rounded once to FP16 from the exact decoded value), x is rounded to
// FP16 when staged (so |x| must stay below 65504), products are exact and
// accumulate in FP32. Against an FP32 matvec the difference is about
// 2^-11 * sum |w x| at most (docs/KERNEL-NOTES.md has the measured error).
//
// Small n: the dp4a matvecs (kernels/matvec.h) read the weights once per 8
// tokens at near full bandwidth; this GEMM's small tiles are bound by memory
// latency per k-stage (~44 us for 4096x4096 Q4_K at n = 16..64 on the H200
// against 13.5 us per slice of 8 for the matvec), so it pays from about 25
// tokens up there (docs/KERNEL-NOTES.md, "Prefill GEMM").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec_format.h"

namespace voltad::kernels {

constexpr int kGemmMinTokens = 25;  // below this, sliced launch_matvec is faster (H200)

struct GemmArgs {
  PackedMatrixView w;        // (rows, cols), on the device
  const float* x = nullptr;  // (n, ldx) fp32; 16-byte aligned rows read faster
  int64_t ldx = 0;
  int n = 0;           // tokens (rows of x and y), >= 1
  float* y = nullptr;  // (n, ldy): y[t][0..rows) written, nothing else
  int64_t ldy = 0;
  const float* bias = nullptr;  // (rows) or null
  bool accumulate = false;      // y += W x (fused residual add)
};

// Block tile shapes (tokens x weight rows). launch_gemm picks one from n,
// rows and the device's SM count; the tests and the bench name one.
enum class GemmTile : uint8_t {
  Auto,
  T32x64,        // 4 warps: small n (batched decode) or few rows
  T64x128,       // 8 warps
  T128x128,      // 8 warps: prefill
  T128x128Occ2,  // the same capped at 128 registers: two blocks per SM where
                 // shared memory allows (sm_80+), one on the V100. Measured
                 // +10-15% for Q4_0/Q6_K/Q8_0 at 14336x4096, worse for Q4_K
                 // (spills) and F16: Auto does not pick it.
};

inline const char* gemm_tile_name(GemmTile t) {
  switch (t) {
    case GemmTile::Auto:
      return "auto";
    case GemmTile::T32x64:
      return "32x64";
    case GemmTile::T64x128:
      return "64x128";
    case GemmTile::T128x128:
      return "128x128";
    case GemmTile::T128x128Occ2:
      return "128x128/2";
  }
  return "?";
}

// Every PackedFormat is supported. No scratch memory; graph-capturable.
void launch_gemm(const GemmArgs& args, cudaStream_t stream);
void launch_gemm(const GemmArgs& args, GemmTile tile, cudaStream_t stream);

// The tile launch_gemm(args, stream) uses for this shape on the current device.
GemmTile gemm_pick_tile(int n, int64_t rows);

}  // namespace voltad::kernels
