// The packed weight formats: the contract between the load-time repack
// (engine/weight_repack.cpp) and the kernels that decode them (matvec_*.cu,
// embedding.cu). Plain C++, no CUDA, so the CPU-only engine build and its
// tests can use it too. docs/FORMAT.md describes every layout in full; the
// short form sits above each decoder in kernels/device_common.cuh.
//
// A packed matrix is one allocation holding up to four sub-arrays, each
// starting on a 256-byte boundary and each row-major over the rows:
//   quants  the values: 4-bit nibbles, int8 bytes, or the F16/F32 elements
//   high    Int6 only: the top two bits of every value ("crumbs")
//   scales  per-group scales (and mins)
//   super   Int6 only: the FP16 super-block scale, one per 256 values
// Rows of `quants` are 16-byte multiples so that every lane of a warp can
// read its 16 bytes with one aligned vector load.
#pragma once

#include <cstdint>
#include <type_traits>

namespace voltad::kernels {

enum class PackedFormat : uint8_t {
  // 32 values in 16 bytes; byte i holds value i (low nibble) and i+16 (high).
  Int4Sym32,     // from Q4_0: w = d*(q-8);       scales: fp16 d per 32
  Int4Affine32,  // from Q4_1: w = d*q + m;       scales: fp16 {d, m} per 32
  Int4K256,      // from Q4_K: w = D*sc*q - M*mn; scales: Q4_K's own 16-byte
                 //   header per 256 (fp16 D, fp16 M, 8+8 six-bit sc/mn packed)
  // Q6_K: low nibbles as in Int4, top two bits in `high`; decoded in
  // registers to int8 4*(q-32). w = d*sc*(q-32); sc int8 per 16, d fp16 per 256.
  Int6K256,
  // One int8 per value, 16 values per 16 bytes.
  Int8Sym32,     // from Q8_0 (q) and Q5_0 (q-16): w = d*q; fp16 d per 32
  Int8Affine32,  // from Q5_1: w = d*q + m, q in 0..31;  fp16 {d, m} per 32
  Int8K256,      // from Q5_K: w = D*sc*q - M*mn, q in 0..31; scales as Int4K256
  F16,           // from F16 and BF16 (converted; see docs/FORMAT.md)
  F32,           // from F32
};

inline const char* packed_format_name(PackedFormat f) {
  switch (f) {
    case PackedFormat::Int4Sym32:
      return "int4-sym32";
    case PackedFormat::Int4Affine32:
      return "int4-affine32";
    case PackedFormat::Int4K256:
      return "int4-k256";
    case PackedFormat::Int6K256:
      return "int6-k256";
    case PackedFormat::Int8Sym32:
      return "int8-sym32";
    case PackedFormat::Int8Affine32:
      return "int8-affine32";
    case PackedFormat::Int8K256:
      return "int8-k256";
    case PackedFormat::F16:
      return "f16";
    case PackedFormat::F32:
      return "f32";
  }
  return "?";
}

// Values per block the format needs a row length to be a multiple of.
inline int64_t packed_block_elems(PackedFormat f) {
  switch (f) {
    case PackedFormat::Int4K256:
    case PackedFormat::Int6K256:
    case PackedFormat::Int8K256:
      return 256;
    case PackedFormat::F16:
    case PackedFormat::F32:
      return 1;
    default:
      return 32;
  }
}

// Where each sub-array lives inside one packed matrix (offsets in bytes from
// its start). Offsets of sub-arrays a format lacks are 0 with 0 row bytes.
struct PackedLayout {
  PackedFormat format = PackedFormat::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t quant_row_bytes = 0;  // stride of `quants` (a 16-byte multiple)
  int64_t high_row_bytes = 0;   // stride of `high`   (Int6: cols/4)
  int64_t scale_row_bytes = 0;  // stride of `scales`
  int64_t super_row_bytes = 0;  // stride of `super`  (Int6: 2 per 256)
  uint64_t quants_offset = 0;
  uint64_t high_offset = 0;
  uint64_t scales_offset = 0;
  uint64_t super_offset = 0;
  uint64_t total_bytes = 0;
};

inline uint64_t packed_align256(uint64_t n) {
  return (n + 255) & ~uint64_t(255);
}

// The layout of a rows x cols matrix. cols must be a multiple of
// packed_block_elems(format) (the caller checks; GGUF block sizes ensure it).
inline PackedLayout make_packed_layout(PackedFormat format, int64_t rows, int64_t cols) {
  PackedLayout l;
  l.format = format;
  l.rows = rows;
  l.cols = cols;
  switch (format) {
    case PackedFormat::Int4Sym32:
      l.quant_row_bytes = cols / 2;
      l.scale_row_bytes = cols / 32 * 2;
      break;
    case PackedFormat::Int4Affine32:
      l.quant_row_bytes = cols / 2;
      l.scale_row_bytes = cols / 32 * 4;
      break;
    case PackedFormat::Int4K256:
      l.quant_row_bytes = cols / 2;
      l.scale_row_bytes = cols / 256 * 16;
      break;
    case PackedFormat::Int6K256:
      l.quant_row_bytes = cols / 2;
      l.high_row_bytes = cols / 4;
      l.scale_row_bytes = cols / 16;
      l.super_row_bytes = cols / 256 * 2;
      break;
    case PackedFormat::Int8Sym32:
      l.quant_row_bytes = cols;
      l.scale_row_bytes = cols / 32 * 2;
      break;
    case PackedFormat::Int8Affine32:
      l.quant_row_bytes = cols;
      l.scale_row_bytes = cols / 32 * 4;
      break;
    case PackedFormat::Int8K256:
      l.quant_row_bytes = cols;
      l.scale_row_bytes = cols / 256 * 16;
      break;
    case PackedFormat::F16:
      l.quant_row_bytes = (cols * 2 + 15) / 16 * 16;
      break;
    case PackedFormat::F32:
      l.quant_row_bytes = (cols * 4 + 15) / 16 * 16;
      break;
  }
  uint64_t at = 0;
  auto place = [&](uint64_t& offset, int64_t row_bytes) {
    if (row_bytes == 0) return;
    offset = at;
    at = packed_align256(at + uint64_t(row_bytes) * uint64_t(rows));
  };
  place(l.quants_offset, l.quant_row_bytes);
  place(l.high_offset, l.high_row_bytes);
  place(l.scales_offset, l.scale_row_bytes);
  place(l.super_offset, l.super_row_bytes);
  l.total_bytes = at;
  return l;
}

// Bytes of one row, every array of the format.
inline uint64_t packed_row_bytes(const PackedLayout& l) {
  return uint64_t(l.quant_row_bytes + l.high_row_bytes + l.scale_row_bytes + l.super_row_bytes);
}

// Bytes a decode step reads from this matrix: everything but the padding.
inline uint64_t packed_payload_bytes(const PackedLayout& l) {
  return uint64_t(l.rows) * packed_row_bytes(l);
}

// A packed matrix on the device: the layout plus the base pointer of its
// allocation (256-byte aligned, as cudaMalloc returns).
struct PackedMatrixView {
  PackedLayout layout;
  const uint8_t* data = nullptr;
};

// The one switch over formats that kernel launchers share: calls
// fn(std::integral_constant<PackedFormat, F>{}) for f, so that a launcher
// can instantiate its template for F.
template <class Fn>
void with_packed_format(PackedFormat f, Fn&& fn) {
  using P = PackedFormat;
  switch (f) {
    case P::Int4Sym32:
      return fn(std::integral_constant<P, P::Int4Sym32>{});
    case P::Int4Affine32:
      return fn(std::integral_constant<P, P::Int4Affine32>{});
    case P::Int4K256:
      return fn(std::integral_constant<P, P::Int4K256>{});
    case P::Int6K256:
      return fn(std::integral_constant<P, P::Int6K256>{});
    case P::Int8Sym32:
      return fn(std::integral_constant<P, P::Int8Sym32>{});
    case P::Int8Affine32:
      return fn(std::integral_constant<P, P::Int8Affine32>{});
    case P::Int8K256:
      return fn(std::integral_constant<P, P::Int8K256>{});
    case P::F16:
      return fn(std::integral_constant<P, P::F16>{});
    case P::F32:
      return fn(std::integral_constant<P, P::F32>{});
  }
}

}  // namespace voltad::kernels
