// Load-time repacking of GGUF weight matrices into the layouts the CUDA
// kernels decode (kernels/matvec_format.h; docs/FORMAT.md). Lossless for every
// quantized type: dequantize_packed_row(repacked) equals dequantize_row(GGUF)
// bit for bit. BF16 becomes F16, which is exact inside FP16's range (see
// FORMAT.md); values beyond it are refused.
//
//   GGUF type          packed format   bits/value (GGUF's)
//   Q4_0               Int4Sym32       4.5    (4.5)
//   Q4_1               Int4Affine32    5.0    (5.0)
//   Q4_K               Int4K256        4.5    (4.5)
//   Q6_K               Int6K256        6.5625 (6.5625)
//   Q8_0               Int8Sym32       8.5    (8.5)
//   Q5_0               Int8Sym32       8.5    (5.5)
//   Q5_1               Int8Affine32    9.0    (6.0)
//   Q5_K               Int8K256        8.5    (5.5)
//   F16, BF16          F16             16     (16)
//   F32                F32             32     (32)
// plus up to 255 bytes of alignment padding per sub-array.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/ggml_types.h"
#include "engine/result.h"
#include "kernels/matvec_format.h"

namespace voltad {

struct GgufTensor;

struct PackedMatrix {
  kernels::PackedLayout layout;  // (rows, cols) = (ne[1], ne[0])
  std::vector<uint8_t> bytes;    // layout.total_bytes
};

// The packed format a GGUF type becomes; an error naming the type for types
// the CUDA backend cannot run.
Result<kernels::PackedFormat> packed_format_for(GgmlType type);

// The layout a rows x cols tensor of `type` will have: for sizing device
// memory before anything is repacked. Errors: unsupported type, cols not a
// multiple of the format's block.
Result<kernels::PackedLayout> packed_layout_for(GgmlType type, int64_t rows, int64_t cols);

// Repacks rows [first_row, first_row + n_rows) of a GGUF tensor whose row 0
// starts at `gguf_data` into `dst`, the start of a buffer of
// layout.total_bytes laid out by `layout` (from packed_layout_for). Disjoint
// row ranges may be repacked concurrently into the same buffer. Padding bytes
// are not written: zero the buffer first if its bytes must be deterministic.
// Error: a BF16 value that does not fit FP16.
Status repack_rows(GgmlType type, const uint8_t* gguf_data, const kernels::PackedLayout& layout,
                   int64_t first_row, int64_t n_rows, uint8_t* dst);

// The whole tensor, into a fresh zeroed buffer.
Result<PackedMatrix> repack_matrix(GgmlType type, const uint8_t* gguf_data, int64_t rows,
                                   int64_t cols);

// Stacks. Projections that read the same input (wq, wk, wv; w_gate, w_up)
// are packed as one matrix holding their rows in order, so that one matvec
// computes them all: row r of part i is row (rows of parts 0..i-1) + r of the
// stack, and its output lands in the matching column of y. The stack is an
// ordinary packed matrix (make_packed_layout of the summed rows); only parts
// of one GGUF type and one row length stack.

// A GGUF matrix in memory: rows x cols values of `type`, row 0 at `data`.
struct GgufMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};
GgufMatrix gguf_matrix(const GgufTensor& t);

// The layout of the stack of `parts`. Errors: no parts, parts of different
// types or row lengths, or what packed_layout_for refuses.
Result<kernels::PackedLayout> stacked_layout_for(std::span<const GgufMatrix> parts);

// repack_rows with the tensor's rows going `at_row` rows further down:
// rows [first_row, first_row + n_rows) of one part of a stack, the part
// starting at row `at_row` of `layout`.
Status repack_rows_at(GgmlType type, const uint8_t* gguf_data, const kernels::PackedLayout& layout,
                      int64_t at_row, int64_t first_row, int64_t n_rows, uint8_t* dst);

// The whole stack, into a fresh zeroed buffer.
Result<PackedMatrix> repack_stacked(std::span<const GgufMatrix> parts);

// One projection of a layer: its weight (rows, cols) and bias (rows) or null.
struct Projection {
  const GgufTensor* weight = nullptr;
  const GgufTensor* bias = nullptr;
};

// How the CUDA backend places consecutive projections whose outputs are
// adjacent columns (q, k, v; gate, up): each run of neighbours with one
// GGUF type, one row length and a bias on all or none is one stack, and its
// biases are concatenated too. [wq Q4_K, wk Q4_K, wv Q6_K] -> [wq wk], [wv];
// a run of one is a matrix of its own. The VRAM plan counts the same
// (repacked_weight_bytes).
std::vector<std::vector<Projection>> projection_stacks(std::span<const Projection> projections);

// One row decoded to floats by the packed layout: the CPU reference of what
// the kernels decode (out has layout.cols floats).
void dequantize_packed_row(const kernels::PackedLayout& layout, const uint8_t* packed, int64_t row,
                           float* out);
inline void dequantize_packed_row(const PackedMatrix& m, int64_t row, float* out) {
  dequantize_packed_row(m.layout, m.bytes.data(), row, out);
}

}  // namespace voltad
