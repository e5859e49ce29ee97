// The CUDA weight repack is lossless: for random valid blocks of every type,
// decoding the packed layout gives bit for bit what dequantize_row gives for
// the GGUF bytes. Plus sizes (the memory budget) and the error paths.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/dequantize.h"
#include "engine/weight_repack.h"

using namespace voltad;
using kernels::PackedFormat;

namespace {

bool same_float(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// A finite fp16 of either sign with an exponent anywhere from subnormal to
// 2^4, and now and then an exact zero: scales as real files have them and
// the corners (subnormal, zero, negative) they may have.
uint16_t random_scale(std::mt19937& rng) {
  if (rng() % 16 == 0) return (rng() & 1) ? 0x8000 : 0;
  const uint16_t sign = uint16_t((rng() & 1) << 15);
  const uint16_t exponent = uint16_t(rng() % 20);  // 0 (subnormal) .. 19 = 2^4
  const uint16_t mantissa = uint16_t(rng() & 0x3FF);
  return uint16_t(sign | (exponent << 10) | mantissa);
}

void put_u16(std::vector<uint8_t>& bytes, size_t at, uint16_t v) {
  std::memcpy(bytes.data() + at, &v, 2);
}

// Random bytes of a rows x cols tensor with every fp16 field made finite:
// the quant bits take every value, the scales every exponent.
std::vector<uint8_t> random_valid_tensor(GgmlType type, int64_t rows, int64_t cols,
                                         std::mt19937& rng) {
  const uint64_t n = uint64_t(rows * cols);
  std::vector<uint8_t> bytes(ggml_row_bytes(type, cols) * uint64_t(rows));
  for (uint8_t& b : bytes) b = uint8_t(rng());
  auto each_block = [&](size_t block_bytes, auto&& fix) {
    for (size_t at = 0; at < bytes.size(); at += block_bytes) fix(at);
  };
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: {
      const size_t bb = ggml_row_bytes(type, 32);
      each_block(bb, [&](size_t at) { put_u16(bytes, at, random_scale(rng)); });
      break;
    }
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const size_t bb = ggml_row_bytes(type, ggml_type_info(type)->block_elems);
      each_block(bb, [&](size_t at) {
        put_u16(bytes, at, random_scale(rng));
        put_u16(bytes, at + 2, random_scale(rng));
      });
      break;
    }
    case GgmlType::Q6_K:
      each_block(210, [&](size_t at) { put_u16(bytes, at + 208, random_scale(rng)); });
      break;
    case GgmlType::F16:
      for (uint64_t i = 0; i < n; ++i) put_u16(bytes, 2 * i, random_scale(rng));
      break;
    case GgmlType::BF16:
      // Within FP16's normal range, where BF16 -> F16 is exact.
      for (uint64_t i = 0; i < n; ++i) {
        const float v = std::ldexp(float(int(rng() % 255) - 127), -int(rng() % 12));
        put_u16(bytes, 2 * i, uint16_t(std::bit_cast<uint32_t>(v) >> 16));
      }
      break;
    case GgmlType::F32:
      for (uint64_t i = 0; i < n; ++i) {
        const float v = std::ldexp(float(int32_t(rng())), -int(rng() % 60) - 20);
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
      break;
    default: break;
  }
  return bytes;
}

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::F16,  GgmlType::BF16, GgmlType::F32};

}  // namespace

TEST_CASE("repack is lossless for random valid blocks of every type") {
  std::mt19937 rng(std::random_device{}());
  for (GgmlType type : kTypes) {
    const int64_t block = ggml_type_info(type)->block_elems == 1
                              ? 8
                              : int64_t(ggml_type_info(type)->block_elems);
    for (int64_t rows : {1, 3, 6}) {
      for (int64_t blocks : {1, 2, 5}) {
        const int64_t cols = block * blocks + (block == 8 ? 1 : 0);  // odd for plain types
        CAPTURE(ggml_type_name(type));
        CAPTURE(rows);
        CAPTURE(cols);
        const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, rng);
        auto packed = repack_matrix(type, gguf.data(), rows, cols);
        REQUIRE_MESSAGE(packed.ok(), (packed.ok() ? "" : packed.error().message));
        std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
        const uint64_t row_bytes = ggml_row_bytes(type, cols);
        int mismatches = 0;
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(type, gguf.data() + r * row_bytes, want.data(), cols);
          std::fill(got.begin(), got.end(), std::nanf(""));
          dequantize_packed_row(*packed, r, got.data());
          for (int64_t k = 0; k < cols; ++k) {
            if (!same_float(got[k], want[k]) && ++mismatches <= 5)
              MESSAGE("row " << r << " col " << k << ": packed " << got[k] << ", GGUF "
                             << want[k]);
          }
        }
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("repacking disjoint row ranges builds the same matrix") {
  std::mt19937 rng(std::random_device{}());
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_1}) {
    const int64_t rows = 7, cols = 512;
    const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, rng);
    auto whole = repack_matrix(type, gguf.data(), rows, cols);
    REQUIRE(whole.ok());
    std::vector<uint8_t> pieces(whole->bytes.size(), 0);
    CHECK(repack_rows(type, gguf.data(), whole->layout, 4, 3, pieces.data()).ok());
    CHECK(repack_rows(type, gguf.data(), whole->layout, 0, 4, pieces.data()).ok());
    CHECK(pieces == whole->bytes);
  }
}

TEST_CASE("packed sizes: the GGUF size for every type of a Q4_K_M/Q4_0 model") {
  // A Llama-3-8B-sized matrix: the payload equals the GGUF bytes exactly for
  // these types, and padding is under 256 bytes per sub-array.
  const int64_t rows = 4096, cols = 14336;
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K,
                        GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
    CAPTURE(ggml_type_name(type));
    auto layout = packed_layout_for(type, rows, cols);
    REQUIRE(layout.ok());
    const uint64_t gguf = ggml_row_bytes(type, cols) * uint64_t(rows);
    CHECK(kernels::packed_payload_bytes(*layout) == gguf);
    CHECK(layout->total_bytes < gguf + 4 * 256);
    CHECK(layout->quants_offset % 256 == 0);
    CHECK(layout->high_offset % 256 == 0);
    CHECK(layout->scales_offset % 256 == 0);
    CHECK(layout->super_offset % 256 == 0);
    CHECK(layout->quant_row_bytes % 16 == 0);
  }
  // The 5-bit types widen to a byte per value (rare in files; docs/FORMAT.md).
  auto q5 = packed_layout_for(GgmlType::Q5_0, rows, cols);
  REQUIRE(q5.ok());
  CHECK(kernels::packed_payload_bytes(*q5) == uint64_t(rows) * cols / 32 * 34);
}

TEST_CASE("formats per type") {
  CHECK(packed_format_for(GgmlType::Q4_0).value() == PackedFormat::Int4Sym32);
  CHECK(packed_format_for(GgmlType::Q4_1).value() == PackedFormat::Int4Affine32);
  CHECK(packed_format_for(GgmlType::Q4_K).value() == PackedFormat::Int4K256);
  CHECK(packed_format_for(GgmlType::Q6_K).value() == PackedFormat::Int6K256);
  CHECK(packed_format_for(GgmlType::Q8_0).value() == PackedFormat::Int8Sym32);
  CHECK(packed_format_for(GgmlType::Q5_0).value() == PackedFormat::Int8Sym32);
  CHECK(packed_format_for(GgmlType::Q5_1).value() == PackedFormat::Int8Affine32);
  CHECK(packed_format_for(GgmlType::Q5_K).value() == PackedFormat::Int8K256);
  CHECK(packed_format_for(GgmlType::BF16).value() == PackedFormat::F16);
}

TEST_CASE("errors name the problem") {
  auto unsupported = packed_format_for(GgmlType::Q2_K);
  REQUIRE(!unsupported.ok());
  CHECK(unsupported.error().message.find("Q2_K") != std::string::npos);

  auto ragged = packed_layout_for(GgmlType::Q4_K, 4, 300);
  REQUIRE(!ragged.ok());
  CHECK(ragged.error().message.find("multiple of 256") != std::string::npos);

  // A BF16 value beyond FP16's range cannot be stored as F16.
  std::vector<uint8_t> bf16(2 * 4, 0);
  const float big = 1.0e6f;
  put_u16(bf16, 4, uint16_t(std::bit_cast<uint32_t>(big) >> 16));
  auto overflow = repack_matrix(GgmlType::BF16, bf16.data(), 1, 4);
  REQUIRE(!overflow.ok());
  CHECK(overflow.error().message.find("does not fit FP16") != std::string::npos);
  CHECK(overflow.error().message.find("column 2") != std::string::npos);
}
