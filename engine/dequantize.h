// Reference decoders for the tensor types voltad runs: one row of packed
// blocks in, floats out. Scalar and obvious on purpose: the CPU backend uses
// them directly, and every faster path (repacked CUDA weights, fused matvecs)
// is tested against them. The block layouts are documented above each
// decoder in dequantize.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/ggml_types.h"

namespace voltad {

struct GgufTensor;

// Bytes that n values of `type` occupy. n must be a multiple of the type's
// block size (VOLTAD_CHECK): GGUF validation guarantees this for ne[0].
uint64_t ggml_row_bytes(GgmlType type, int64_t n);

// Decodes n values (a multiple of the block size) from src into dst.
// `type` must be supported (ggml_type_info(type)->supported); both are
// VOLTAD_CHECKed, because callers validate types when they bind weights.
// n values of one row from src to dst; src and dst must not overlap (the
// decoders read and write them as __restrict pointers).
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);

// Rows [first_row, first_row + n_rows) of a tensor, each ne[0] floats, into
// dst (n_rows * ne[0] floats). A row is ggml_row_bytes(type, ne[0]) bytes.
void dequantize_rows(const GgufTensor& tensor, uint64_t first_row, uint64_t n_rows, float* dst);

// The whole tensor as floats, row after row (n_elements floats).
std::vector<float> dequantize_tensor(const GgufTensor& tensor);

// The 12 scale bytes of Q4_K and Q5_K hold 8 six-bit scales and 8 six-bit
// mins, one pair per sub-block j (0..7) of 32:
//   sub-blocks 0-3: scale = s[j] & 63,                     min = s[j+4] & 63
//   sub-blocks 4-7: scale = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
//                   min   = (s[j+4] >> 4) | (s[j]   >> 6) << 4
// (the top two bits of the first 8 bytes carry the high bits of 4-7).
[[gnu::always_inline]] inline void q4_k_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace voltad
