// Decode matvecs: y[b][r] = bias[r] + sum_c W[r][c] * x[b][c] (+ y[b][r])
// for a batch of 1..8 activation rows, reading the packed weights once for the
// whole batch. Host-side declarations only (plain C++).
//
// Activations: the quantized formats (Int4*, Int6*, Int8*) multiply int8
// activations with dp4a: x is first quantized in blocks of 32 values with an
// fp32 scale (launch_quantize_activations), so the integer products and their
// sums are exact and only that quantization (docs/KERNEL-NOTES.md has its
// measured cost) separates the result from an fp32 matvec. F16 and F32 weights multiply the fp32 x
// directly. Accumulation is fp32 throughout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec_format.h"

namespace voltad::kernels {

constexpr int kMatvecMaxBatch = 8;

// x quantized for the Int* formats, in blocks of 32 values (one weight chunk):
// d = max|x|/127, q = rint(x/d), and per block a record {d, d*sum(q)} (the
// sum serves the formats with a zero point: sum (a q_w + b) x = a sum q_w x +
// b sum x). q[b][c] int8 with row stride cols; records with row stride
// cols/16 floats. x[b][c] ~= d * q[b][c].
constexpr int kActivationBlock = 32;
struct QuantizedActivations {
  int8_t* q = nullptr;      // (batch, cols)
  float* scales = nullptr;  // (batch, cols/32, 2)
};

// Bytes of device memory QuantizedActivations needs for batch x cols.
inline size_t quantized_activation_q_bytes(int batch, int64_t cols) {
  return size_t(batch) * size_t(cols);
}
inline size_t quantized_activation_scale_bytes(int batch, int64_t cols) {
  return size_t(batch) * size_t(cols / kActivationBlock) * 2 * sizeof(float);
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
};

// Dispatches on the weight format. Batches above kMatvecMaxBatch are run in
// slices of 8 (the weights are then read once per slice).
void launch_matvec(const MatvecArgs& args, cudaStream_t stream);

// The per-format launchers launch_matvec dispatches to.
void launch_matvec_int4(const MatvecArgs& args, cudaStream_t stream);
void launch_matvec_int8(const MatvecArgs& args, cudaStream_t stream);   // Int8*, Int6K256
void launch_matvec_float(const MatvecArgs& args, cudaStream_t stream);  // F16, F32

}  // namespace voltad::kernels
