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
// For n <= 8 the dp4a matvecs (kernels/matvec.h) read the weights at full
// bandwidth and are the better choice; the GEMM pays from ~9-16 tokens up,
// where the matvec would re-read the weights per slice of 8.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec_format.h"

namespace voltad::kernels {

constexpr int kGemmMinTokens = 9;  // below this, launch_matvec is faster

struct GemmArgs {
  PackedMatrixView w;        // (rows, cols), on the device
  const float* x = nullptr;  // (n, ldx) fp32; 16-byte aligned rows read faster
  int64_t ldx = 0;
  int n = 0;                 // tokens (rows of x and y), >= 1
  float* y = nullptr;        // (n, ldy): y[t][0..rows) written, nothing else
  int64_t ldy = 0;
  const float* bias = nullptr;  // (rows) or null
  bool accumulate = false;      // y += W x (fused residual add)
};

// Block tile shapes (tokens x weight rows). launch_gemm picks one from n,
// rows and the device's SM count; the tests and the bench name one.
enum class GemmTile : uint8_t {
  Auto,
  T32x64,    // 4 warps: small n (batched decode) or few rows
  T64x128,   // 8 warps
  T128x128,  // 8 warps: prefill
  T128x128Occ2,  // the same capped at 128 registers: two blocks per SM where
                 // shared memory allows (sm_80+), one on the V100
};

// Every PackedFormat is supported. No scratch memory; graph-capturable.
void launch_gemm(const GemmArgs& args, cudaStream_t stream);
void launch_gemm(const GemmArgs& args, GemmTile tile, cudaStream_t stream);

// The tile launch_gemm(args, stream) uses for this shape on the current device.
GemmTile gemm_pick_tile(int n, int64_t rows);

}  // namespace voltad::kernels
