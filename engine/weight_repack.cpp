// GGUF blocks -> packed layouts. The GGUF block layouts are documented above
// their decoders in dequantize.cpp, the packed ones in docs/FORMAT.md and
// kernels/device_common.cuh. Every value here is moved, never recomputed, so
// the repack is lossless by construction; the exactness argument for the
// decode (why the packed decode rounds exactly like dequantize_row) is in
// FORMAT.md, and tests/engine/test_weight_repack.cpp checks it bit for bit.
#include "engine/weight_repack.h"

#include <cmath>
#include <cstring>
#include <string>

#include "engine/dequantize.h"
#include "engine/gguf_file.h"

namespace voltad {

using kernels::PackedFormat;
using kernels::PackedLayout;

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
void store_u32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}

// GGUF block geometry of the types we repack (bytes per block of 32 or 256).
constexpr int kQ4_0Bytes = 18, kQ4_1Bytes = 20, kQ5_0Bytes = 22, kQ5_1Bytes = 24;
constexpr int kQ8_0Bytes = 34, kQ4_KBytes = 144, kQ5_KBytes = 176, kQ6_KBytes = 210;

// The destination of one row: pointers into each sub-array.
struct RowOut {
  uint8_t* quants;
  uint8_t* high;
  uint8_t* scales;
  uint8_t* super;
};

RowOut row_out(const PackedLayout& l, uint8_t* dst, int64_t row) {
  return {dst + l.quants_offset + row * l.quant_row_bytes,
          dst + l.high_offset + row * l.high_row_bytes,
          dst + l.scales_offset + row * l.scale_row_bytes,
          dst + l.super_offset + row * l.super_row_bytes};
}

struct RowIn {
  const uint8_t* quants;
  const uint8_t* high;
  const uint8_t* scales;
  const uint8_t* super;
};

RowIn row_in(const PackedLayout& l, const uint8_t* src, int64_t row) {
  return {src + l.quants_offset + row * l.quant_row_bytes,
          src + l.high_offset + row * l.high_row_bytes,
          src + l.scales_offset + row * l.scale_row_bytes,
          src + l.super_offset + row * l.super_row_bytes};
}

// Q5_0/Q5_1: the fifth bit of value j sits in bit j of the 32-bit qh.
void unpack_q5(const uint8_t* qh_bytes, const uint8_t* qs, int q[32]) {
  const uint32_t qh = load_u32(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0F) | int(((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
  }
}

// Q6_K: 256 six-bit values (0..63) in natural order from ql/qh.
void unpack_q6_k(const uint8_t* block, int q[256]) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = block + 64 * half;
    const uint8_t* qh = block + 128 + 32 * half;
    int* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = (ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4);
      out[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
      out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
      out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
    }
  }
}

// One Int4 chunk: 32 values (0..15) -> 16 bytes, value i low, i+16 high.
void pack_int4_chunk(const int q[32], uint8_t* out) {
  for (int i = 0; i < 16; ++i) out[i] = uint8_t(q[i] | (q[i + 16] << 4));
}

// One Int6 chunk: 32 values (0..63) -> 16 nibble bytes + 8 crumb bytes.
// v = q ^ 32 is q-32 as a six-bit two's complement; its low nibbles go where
// Int4 puts them, its top two bits ("crumbs") go to two words, one per half
// of 16 values: value 4g+j of a half at bits 8j+2g (byte j, pair g).
void pack_int6_chunk(const int q[32], uint8_t* nibbles, uint8_t* crumbs) {
  int v[32];
  for (int i = 0; i < 32; ++i) v[i] = q[i] ^ 32;
  for (int i = 0; i < 16; ++i) nibbles[i] = uint8_t((v[i] & 0x0F) | ((v[i + 16] & 0x0F) << 4));
  for (int half = 0; half < 2; ++half) {
    uint32_t h = 0;
    for (int i = 0; i < 16; ++i) {
      const int g = i / 4, j = i % 4;
      h |= uint32_t((v[16 * half + i] >> 4) & 3) << (8 * j + 2 * g);
    }
    store_u32(crumbs + 4 * half, h);
  }
}

void repack_row(GgmlType type, const uint8_t* in, int64_t cols, const RowOut& out) {
  int q[256];
  switch (type) {
    case GgmlType::Q4_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = in + b * kQ4_0Bytes;
        std::memcpy(out.scales + 2 * b, blk, 2);
        std::memcpy(out.quants + 16 * b, blk + 2, 16);
      }
      break;
    case GgmlType::Q4_1:
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = in + b * kQ4_1Bytes;
        std::memcpy(out.scales + 4 * b, blk, 4);  // d, m
        std::memcpy(out.quants + 16 * b, blk + 4, 16);
      }
      break;
    case GgmlType::Q4_K:
      for (int64_t b = 0; b < cols / 256; ++b) {
        const uint8_t* blk = in + b * kQ4_KBytes;
        std::memcpy(out.scales + 16 * b, blk, 16);  // d, dmin, scales[12]
        // GGUF: qs[32p + l] holds value 64p + l (low) and 64p + 32 + l (high).
        for (int i = 0; i < 256; ++i) {
          const int p = i / 64, l = i % 32;
          const uint8_t byte = blk[16 + 32 * p + l];
          q[i] = (i % 64) < 32 ? (byte & 0x0F) : (byte >> 4);
        }
        for (int c = 0; c < 8; ++c) pack_int4_chunk(q + 32 * c, out.quants + 128 * b + 16 * c);
      }
      break;
    case GgmlType::Q5_K:
      for (int64_t b = 0; b < cols / 256; ++b) {
        const uint8_t* blk = in + b * kQ5_KBytes;
        std::memcpy(out.scales + 16 * b, blk, 16);  // d, dmin, scales[12]
        // GGUF: nibbles as in Q4_K (qs at 48); bit s of qh[l] (qh at 16) is
        // the fifth bit of value l of sub-block s.
        for (int i = 0; i < 256; ++i) {
          const int s = i / 32, l = i % 32;
          const uint8_t byte = blk[48 + 32 * (s / 2) + l];
          const int nib = s % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
          out.quants[256 * b + i] = uint8_t(nib | (((blk[16 + l] >> s) & 1) << 4));
        }
      }
      break;
    case GgmlType::Q6_K:
      for (int64_t b = 0; b < cols / 256; ++b) {
        const uint8_t* blk = in + b * kQ6_KBytes;
        unpack_q6_k(blk, q);
        for (int c = 0; c < 8; ++c)
          pack_int6_chunk(q + 32 * c, out.quants + 128 * b + 16 * c, out.high + 64 * b + 8 * c);
        std::memcpy(out.scales + 16 * b, blk + 192, 16);  // int8 sc per 16
        std::memcpy(out.super + 2 * b, blk + 208, 2);     // fp16 d
      }
      break;
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = in + b * kQ8_0Bytes;
        std::memcpy(out.scales + 2 * b, blk, 2);
        std::memcpy(out.quants + 32 * b, blk + 2, 32);
      }
      break;
    case GgmlType::Q5_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = in + b * kQ5_0Bytes;
        unpack_q5(blk + 2, blk + 6, q);
        std::memcpy(out.scales + 2 * b, blk, 2);
        for (int i = 0; i < 32; ++i) out.quants[32 * b + i] = uint8_t(int8_t(q[i] - 16));
      }
      break;
    case GgmlType::Q5_1:
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = in + b * kQ5_1Bytes;
        unpack_q5(blk + 4, blk + 8, q);
        std::memcpy(out.scales + 4 * b, blk, 4);  // d, m
        for (int i = 0; i < 32; ++i) out.quants[32 * b + i] = uint8_t(q[i]);
      }
      break;
    case GgmlType::F16:
      std::memcpy(out.quants, in, size_t(cols) * 2);
      break;
    case GgmlType::F32:
      std::memcpy(out.quants, in, size_t(cols) * 4);
      break;
    default:
      break;  // BF16 is handled by the caller; others were refused
  }
}

}  // namespace

Result<PackedFormat> packed_format_for(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return PackedFormat::Int4Sym32;
    case GgmlType::Q4_1:
      return PackedFormat::Int4Affine32;
    case GgmlType::Q4_K:
      return PackedFormat::Int4K256;
    case GgmlType::Q6_K:
      return PackedFormat::Int6K256;
    case GgmlType::Q8_0:
    case GgmlType::Q5_0:
      return PackedFormat::Int8Sym32;
    case GgmlType::Q5_1:
      return PackedFormat::Int8Affine32;
    case GgmlType::Q5_K:
      return PackedFormat::Int8K256;
    case GgmlType::F16:
    case GgmlType::BF16:
      return PackedFormat::F16;
    case GgmlType::F32:
      return PackedFormat::F32;
    default:
      break;
  }
  return model_data_error(
      "tensor type " + ggml_type_name(type) +
      " has no CUDA weight layout (the CUDA backend runs F32, F16, BF16, Q4_0, "
      "Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; use the CPU backend for this model)");
}

Result<PackedLayout> packed_layout_for(GgmlType type, int64_t rows, int64_t cols) {
  auto format = packed_format_for(type);
  if (!format) return format.error();
  const int64_t block = kernels::packed_block_elems(*format);
  if (rows < 0 || cols <= 0 || cols % block != 0)
    return model_data_error("cannot repack a " + std::to_string(rows) + " x " +
                            std::to_string(cols) + " " + ggml_type_name(type) +
                            " matrix: its row length must be a positive multiple of " +
                            std::to_string(block));
  return kernels::make_packed_layout(*format, rows, cols);
}

Status repack_rows(GgmlType type, const uint8_t* gguf_data, const PackedLayout& layout,
                   int64_t first_row, int64_t n_rows, uint8_t* dst) {
  return repack_rows_at(type, gguf_data, layout, 0, first_row, n_rows, dst);
}

Status repack_rows_at(GgmlType type, const uint8_t* gguf_data, const PackedLayout& layout,
                      int64_t at_row, int64_t first_row, int64_t n_rows, uint8_t* dst) {
  VOLTAD_CHECK(at_row >= 0 && first_row >= 0 && n_rows >= 0 &&
               at_row + first_row + n_rows <= layout.rows);
  const int64_t cols = layout.cols;
  const int64_t row_bytes = [&]() -> int64_t {
    switch (type) {
      case GgmlType::Q4_0:
        return cols / 32 * kQ4_0Bytes;
      case GgmlType::Q4_1:
        return cols / 32 * kQ4_1Bytes;
      case GgmlType::Q5_0:
        return cols / 32 * kQ5_0Bytes;
      case GgmlType::Q5_1:
        return cols / 32 * kQ5_1Bytes;
      case GgmlType::Q8_0:
        return cols / 32 * kQ8_0Bytes;
      case GgmlType::Q4_K:
        return cols / 256 * kQ4_KBytes;
      case GgmlType::Q5_K:
        return cols / 256 * kQ5_KBytes;
      case GgmlType::Q6_K:
        return cols / 256 * kQ6_KBytes;
      case GgmlType::F32:
        return cols * 4;
      default:
        return cols * 2;  // F16, BF16
    }
  }();
  for (int64_t r = first_row; r < first_row + n_rows; ++r) {
    const uint8_t* in = gguf_data + r * row_bytes;
    const RowOut out = row_out(layout, dst, at_row + r);
    if (type != GgmlType::BF16) {
      repack_row(type, in, cols, out);
      continue;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const float v = bf16_to_fp32(load_u16(in + 2 * c));
      const uint16_t h = fp32_to_fp16(v);
      if (std::isfinite(v) && !std::isfinite(fp16_to_fp32(h)))
        return model_data_error("BF16 value " + std::to_string(v) + " at row " + std::to_string(r) +
                                ", column " + std::to_string(c) +
                                " does not fit FP16 (|x| > 65504); the CUDA backend stores BF16 "
                                "weights as FP16 and cannot run this tensor");
      store_u16(out.quants + 2 * c, h);
    }
  }
  return {};
}

Result<PackedMatrix> repack_matrix(GgmlType type, const uint8_t* gguf_data, int64_t rows,
                                   int64_t cols) {
  auto layout = packed_layout_for(type, rows, cols);
  if (!layout) return layout.error();
  PackedMatrix m;
  m.layout = *layout;
  m.bytes.assign(m.layout.total_bytes, 0);
  VOLTAD_TRY(repack_rows(type, gguf_data, m.layout, 0, rows, m.bytes.data()));
  return m;
}

GgufMatrix gguf_matrix(const GgufTensor& t) {
  return {t.type, t.data, int64_t(t.n_rows()), int64_t(t.ne[0])};
}

Result<PackedLayout> stacked_layout_for(std::span<const GgufMatrix> parts) {
  if (parts.empty()) return make_error("a stack of matrices needs at least one");
  int64_t rows = 0;
  for (const GgufMatrix& p : parts) {
    if (p.type != parts[0].type || p.cols != parts[0].cols)
      return make_error("cannot stack a " + ggml_type_name(p.type) + " matrix of rows of " +
                        std::to_string(p.cols) + " on a " + ggml_type_name(parts[0].type) +
                        " matrix of rows of " + std::to_string(parts[0].cols) +
                        ": a stack has one type and one row length");
    rows += p.rows;
  }
  return packed_layout_for(parts[0].type, rows, parts[0].cols);
}

Result<PackedMatrix> repack_stacked(std::span<const GgufMatrix> parts) {
  auto layout = stacked_layout_for(parts);
  if (!layout) return layout.error();
  PackedMatrix m;
  m.layout = *layout;
  m.bytes.assign(m.layout.total_bytes, 0);
  int64_t at = 0;
  for (const GgufMatrix& p : parts) {
    VOLTAD_TRY(repack_rows_at(p.type, p.data, m.layout, at, 0, p.rows, m.bytes.data()));
    at += p.rows;
  }
  return m;
}

std::vector<std::vector<Projection>> projection_stacks(std::span<const Projection> projections) {
  std::vector<std::vector<Projection>> stacks;
  auto joins = [](const Projection& a, const Projection& b) {
    return a.weight->type == b.weight->type && a.weight->ne[0] == b.weight->ne[0] &&
           (a.bias == nullptr) == (b.bias == nullptr);
  };
  for (const Projection& p : projections) {
    VOLTAD_CHECK(p.weight != nullptr);
    if (stacks.empty() || !joins(stacks.back().back(), p)) stacks.emplace_back();
    stacks.back().push_back(p);
  }
  return stacks;
}

// The decode below mirrors the kernels': each value is a product of exact
// factors (FP16 scales times small integers fit FP32's 24 bits) with at most
// one rounded subtraction or addition, so it rounds exactly as the GGUF
// reference decoder does.
void dequantize_packed_row(const PackedLayout& l, const uint8_t* packed, int64_t row, float* out) {
  const RowIn in = row_in(l, packed, row);
  const int64_t cols = l.cols;
  auto nibble = [&](int64_t k) {
    const uint8_t byte = in.quants[(k / 32) * 16 + (k % 16)];
    return (k % 32) < 16 ? (byte & 0x0F) : (byte >> 4);
  };
  switch (l.format) {
    case PackedFormat::Int4Sym32:
      for (int64_t k = 0; k < cols; ++k) {
        const float d = fp16_to_fp32(load_u16(in.scales + 2 * (k / 32)));
        out[k] = float(nibble(k) - 8) * d;
      }
      break;
    case PackedFormat::Int4Affine32:
      for (int64_t k = 0; k < cols; ++k) {
        const float d = fp16_to_fp32(load_u16(in.scales + 4 * (k / 32)));
        const float m = fp16_to_fp32(load_u16(in.scales + 4 * (k / 32) + 2));
        out[k] = float(nibble(k)) * d + m;
      }
      break;
    case PackedFormat::Int4K256:
      for (int64_t k = 0; k < cols; ++k) {
        const uint8_t* h = in.scales + 16 * (k / 256);
        int sc, mn;
        q4_k_scale_min(h + 4, int(k / 32) % 8, sc, mn);
        const float d = fp16_to_fp32(load_u16(h)) * float(sc);
        const float m = fp16_to_fp32(load_u16(h + 2)) * float(mn);
        out[k] = d * float(nibble(k)) - m;
      }
      break;
    case PackedFormat::Int6K256:
      for (int64_t k = 0; k < cols; ++k) {
        const int i = int(k % 32);
        const uint32_t h = load_u32(in.high + (k / 32) * 8 + 4 * (i / 16));
        const int crumb = int(h >> (8 * (i % 4) + 2 * ((i % 16) / 4))) & 3;
        const int v6 = nibble(k) | (crumb << 4);    // (q-32) as 6-bit two's complement
        const int value = v6 >= 32 ? v6 - 64 : v6;  // q - 32
        const float d = fp16_to_fp32(load_u16(in.super + 2 * (k / 256)));
        const float sc = float(int8_t(in.scales[k / 16]));
        out[k] = (d * sc) * float(value);
      }
      break;
    case PackedFormat::Int8Sym32:
      for (int64_t k = 0; k < cols; ++k) {
        const float d = fp16_to_fp32(load_u16(in.scales + 2 * (k / 32)));
        out[k] = float(int8_t(in.quants[k])) * d;
      }
      break;
    case PackedFormat::Int8Affine32:
      for (int64_t k = 0; k < cols; ++k) {
        const float d = fp16_to_fp32(load_u16(in.scales + 4 * (k / 32)));
        const float m = fp16_to_fp32(load_u16(in.scales + 4 * (k / 32) + 2));
        out[k] = float(int8_t(in.quants[k])) * d + m;
      }
      break;
    case PackedFormat::Int8K256:
      for (int64_t k = 0; k < cols; ++k) {
        const uint8_t* h = in.scales + 16 * (k / 256);
        int sc, mn;
        q4_k_scale_min(h + 4, int(k / 32) % 8, sc, mn);
        const float d = fp16_to_fp32(load_u16(h)) * float(sc);
        const float m = fp16_to_fp32(load_u16(h + 2)) * float(mn);
        out[k] = d * float(in.quants[k]) - m;
      }
      break;
    case PackedFormat::F16:
      for (int64_t k = 0; k < cols; ++k) out[k] = fp16_to_fp32(load_u16(in.quants + 2 * k));
      break;
    case PackedFormat::F32:
      std::memcpy(out, in.quants, size_t(cols) * 4);
      break;
  }
}

}  // namespace voltad
