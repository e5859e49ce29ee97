// Decode matvecs: y[b][r] = bias[r] + sum_c W[r][c] * x[b][c] (+ y[b][r])
// for a batch of 1..8 activation rows, reading the packed weights once for the
// whole batch. Host-side declarations only (plain C++).
//
// Activations: the quantized formats (Int4*, Int6*, Int8*) multiply int8
// activations with dp4a: x is first quantized in blocks of 32 values at two
// levels, x ~= d1*q1 + d2*q2 (launch_quantize_activations), so the integer
// products and their sums are exact and only that quantization (~1e-5 of
// sum|w x|; docs/KERNEL-NOTES.md has the measurements) separates the result
// from an fp32 matvec. F16 and F32 weights multiply the fp32 x directly.
// Accumulation is fp32 throughout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec_format.h"

namespace voltad::kernels {

constexpr int kMatvecMaxBatch = 8;

// x quantized for the Int* formats, in blocks of 32 values (one weight chunk),
// at two levels so that one int8 dp4a pass is not the precision limit:
//   d1 = max|x|/127,  q1 = rint(x/d1)              (int8)
//   r  = x - d1*q1    (one fma),  d2 = max|r|/127, q2 = rint(r/d2)  (int8)
//   x ~= d1*q1 + d2*q2, error <= d2/2 <= max|x|/64516 per value.
// d2 is the residual's own amax (not a fixed d1/127): never coarser than
// d1/254 (|r| <= d1/2), never out of int8 range, 0 where x sits on d1's grid.
// Per block: the 32 q1 bytes then the 32 q2 bytes (64 contiguous bytes, row
// stride 2*cols), and a record {d1, d2, sum(x) ~= d1*sum(q1) + d2*sum(q2), 0}
// (the sum serves the formats with a zero point: sum (a q_w + b) x =
// a sum q_w x + b sum x), row stride cols/8 floats.
constexpr int kActivationBlock = 32;
constexpr int kActivationRecordFloats = 4;  // {d1, d2, sum_x, 0}: one float4
struct QuantizedActivations {
  int8_t* q = nullptr;      // (batch, cols/32, 2, 32): q1 and q2 of each block
  float* scales = nullptr;  // (batch, cols/32, 4)
  // Batch 1 only. When set, the blocks hold g * h, an RMSNorm's input h
  // times its weights g, not yet divided by rms(h), and sumsq the sums of
  // h^2 over each block of 32 (cols/32 floats): a batch-1 matvec that reads
  // them multiplies its sums by rsqrt(sum(sumsq) / cols + eps), summed in a
  // fixed order, so the norm is made where h is written
  // (launch_matvec_norm_units) without a launch of its own.
  float* sumsq = nullptr;
  float eps = 0.0f;
};

// Bytes of device memory QuantizedActivations needs for batch x cols.
inline size_t quantized_activation_q_bytes(int batch, int64_t cols) {
  return size_t(batch) * size_t(cols) * 2;
}
inline size_t quantized_activation_scale_bytes(int batch, int64_t cols) {
  return size_t(batch) * size_t(cols / kActivationBlock) * kActivationRecordFloats * sizeof(float);
}
// Offsets of batch row b (elements of q and floats of scales).
inline int64_t quantized_activation_q_row(int64_t cols) {
  return 2 * cols;
}
inline int64_t quantized_activation_scale_row(int64_t cols) {
  return cols / kActivationBlock * kActivationRecordFloats;
}

// x (batch, cols) fp32 with row stride ldx -> out. cols % 32 == 0.
void launch_quantize_activations(const float* x, int64_t ldx, int batch, int64_t cols,
                                 QuantizedActivations out, cudaStream_t stream);

struct MatvecArgs {
  PackedMatrixView w;        // (rows, cols), on the device
  int batch = 1;             // 1..kMatvecMaxBatch rows of x and y
  const float* x = nullptr;  // (batch, ldx) fp32: F16/F32 weights
  int64_t ldx = 0;
  QuantizedActivations xq;  // Int* weights
  float* y = nullptr;       // (batch, ldy): y[b][0..rows)
  int64_t ldy = 0;
  const float* bias = nullptr;  // (rows) or null
  bool accumulate = false;      // y += W x (fused residual add)
  // Warps that share each row group, each over every slices-th group of 32
  // chunks of the columns: more loads in flight for matrices with too few
  // rows to fill the SMs (Int4 and Q6_K at batch 1, Q4_0/Q4_1 at batch 2; see
  // matvec_int4.cu). 0: matvec_slices decides; 1, 2: as given (tests,
  // comparisons); other formats and batches ignore it.
  int slices = 0;
};

// The slices a sliced launcher runs `a` with, at rows_per_warp rows a row
// group: a.slices when set, else 2 under 16 row groups an SM of this
// device, else 1. VOLTAD_MATVEC_SLICES=1|2 in the environment overrides
// the choice (comparisons).
int matvec_slices(const MatvecArgs& a, int rows_per_warp);

// Aborts with a message naming the matrix where `args` break launch_matvec's
// contract (batch, weights' alignment, columns, slices, y, x or xq); the
// launchers call it.
void check_matvec_args(const MatvecArgs& args);

// Dispatches on the weight format. Batches above kMatvecMaxBatch are run in
// chunks of 8 rows of x (the weights are then read once per chunk).
void launch_matvec(const MatvecArgs& args, cudaStream_t stream);

// The per-format launchers launch_matvec dispatches to.
void launch_matvec_int4(const MatvecArgs& args, cudaStream_t stream);
void launch_matvec_int8(const MatvecArgs& args, cudaStream_t stream);   // Int8*, Int6K256
void launch_matvec_float(const MatvecArgs& args, cudaStream_t stream);  // F16, F32
// Batch 1, Int4K256 and Int6K256 (Q4_K, Q6_K): the one-wave streaming
// kernels (matvec_stream.cu), which launch_matvec takes for them unless
// VOLTAD_MATVEC_STREAM=0 is in the environment (comparisons).
void launch_matvec_stream(const MatvecArgs& args, cudaStream_t stream);
bool matvec_stream_enabled();
// Two batch-1 products of the same quantized x in one launch of the
// streaming kernels: a Q4_K (Int4K256) matrix `a` and a Q6_K (Int6K256)
// matrix `b` of as many columns (a Q4_K_M layer's q|k beside its attn_v),
// each with a share of the grid (matvec_pair_split, below). Returns false having done
// nothing where the pair does not apply (other formats or batches, a
// matrix the bulk kernel takes, VOLTAD_MATVEC_STREAM=0, or
// VOLTAD_MATVEC_PAIR=0 in the environment: comparisons); then launch each.
// Arguments that break launch_matvec's contract abort (check_matvec_args).
bool launch_matvec_pair(const MatvecArgs& a, const MatvecArgs& b, cudaStream_t stream);
bool matvec_pair_enabled();
// How launch_matvec_pair splits a wave of `wave` blocks (>= 2) between
// a's groups_a row groups of group_bytes_a bytes each (every array of the
// format) and b's: each matrix at least one block and at most one a row
// group, so that the busiest block reads the fewest bytes; among splits
// that tie, the nearest to the blocks in proportion to the bytes. (The
// first rule, blocks in proportion to the quants and scales bytes, gave
// Llama-3-8B's Q6_K v 88 blocks of up to 3 groups where q|k's take 2; this
// one 128 of 2: batch 1 +1.0-1.1%, docs/PERFORMANCE-RUNS-34-37.md run 37.)
struct MatvecPairSplit {
  int64_t blocks_a = 0, blocks_b = 0;
};
MatvecPairSplit matvec_pair_split(int64_t groups_a, int64_t group_bytes_a, int64_t groups_b,
                                  int64_t group_bytes_b, int64_t wave);
// Batch 1, Int4K256 (Q4_K) or Int4Sym32 (Q4_0) of 4,096 columns and at
// least 6 row groups of 8 rows a block (the big products: gate|up), under
// programmatic launch (`auto` on sm_90+): the bulk-copy kernel
// (matvec_bulk_sm90.cu), which launch_matvec takes where it applies.
// launch_matvec_bulk launches it and returns true where it applies, else
// returns false having done nothing. VOLTAD_MATVEC_BULK=0 in the
// environment turns it off (comparisons).
bool matvec_bulk_applies(const MatvecArgs& args);
// The rows from which the bulk-copy kernel takes a batch-1 matrix of this
// format at 4,096 columns on this device and kernel set; 0 where it takes
// none (another format, `portable`, no sm_90).
int64_t matvec_bulk_min_rows(PackedFormat format);
bool launch_matvec_bulk(const MatvecArgs& args, cudaStream_t stream);

// A batch-1 product that writes a residual row h (args.accumulate: h =
// y + W x) and makes the next RMSNorm's input for the matvecs that read it:
// norm.q and norm.scales get g * h quantized (g: `weight`, one a row),
// norm.sumsq the sums of h^2 of each 32 rows, and norm.eps is the readers'
// (QuantizedActivations::sumsq). Each block of the streaming kernel owns
// whole units of 32 rows, so it quantizes its own rows after storing them,
// with no count across blocks (the counters cost more than the launch they
// saved: docs/KERNEL-NOTES-RUNS-25-35.md run 35). y's bits are launch_matvec_stream's;
// the blocks are launch_quantize_activations' of g * h (fp32 products).
// Returns false having done nothing where it does not apply: a batch other
// than 1, a format other than Q4_K and Q4_0 (Int4K256, Int4Sym32; Q6_K
// only with VOLTAD_NORM_UNITS_Q6K=1, a comparison: slower), rows not a
// multiple of 32, no accumulate, an x that is itself a norm's, or
// VOLTAD_MATVEC_STREAM=0.
bool launch_matvec_norm_units(const MatvecArgs& args, const float* weight,
                              QuantizedActivations norm, cudaStream_t stream);
// The same conditions, without launching.
bool matvec_norm_units_apply(const MatvecArgs& args);

}  // namespace voltad::kernels
