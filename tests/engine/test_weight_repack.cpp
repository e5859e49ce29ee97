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
#include "tests/kernels/random_weights.h"

using namespace voltad;
using kernels::PackedFormat;
using test::put_u16;
using test::random_valid_tensor;

namespace {

bool same_float(float a, float b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::F16,  GgmlType::BF16, GgmlType::F32};

}  // namespace

TEST_CASE("repack is lossless for random valid blocks of every type") {
  std::mt19937 rng(std::random_device{}());
  for (GgmlType type : kTypes) {
    const int64_t block =
        ggml_type_info(type)->block_elems == 1 ? 8 : int64_t(ggml_type_info(type)->block_elems);
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
              MESSAGE("row " << r << " col " << k << ": packed " << got[k] << ", GGUF " << want[k]);
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

  // Each is the file's fault (voltad exits 65 for it, not restarted by
  // systemd).
  CHECK(unsupported.error().model_data);
  CHECK(ragged.error().model_data);
  CHECK(overflow.error().model_data);
}
