// The reference decoders against ggml's own Python package (gguf.quants),
// whose outputs scripts/gen_dequant_fixtures.py stored in a GGUF fixture,
// and the fp16 conversions against their definition (nearest, ties to even).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/dequantize.h"
#include "engine/gguf_file.h"
#include "tests/engine/test_gguf_support.h"

using namespace voltad;

namespace {

bool same_float(float a, float b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

std::vector<GgmlType> supported_types() {
  std::vector<GgmlType> types;
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    if (info && info->supported) types.push_back(GgmlType(id));
  }
  return types;
}

}  // namespace

TEST_CASE("every supported type decodes exactly as gguf.quants.dequantize") {
  auto file = GgufFile::open(test::fixture_path("dequant_reference.gguf"));
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  const std::vector<GgmlType> types = supported_types();
  CHECK(types.size() == 11);
  for (GgmlType type : types) {
    const std::string name = ggml_type_name(type);
    CAPTURE(name);
    const GgufTensor* input = (*file)->find_tensor(name + ".input");
    const GgufTensor* expected = (*file)->find_tensor(name + ".expected");
    REQUIRE(input != nullptr);
    REQUIRE(expected != nullptr);
    REQUIRE(input->type == type);
    REQUIRE(expected->type == GgmlType::F32);
    REQUIRE(input->ne == expected->ne);
    REQUIRE(input->n_bytes == ggml_row_bytes(type, int64_t(input->ne[0])) * input->n_rows());

    std::vector<float> got(input->n_elements, std::numeric_limits<float>::quiet_NaN());
    dequantize_rows(*input, 0, input->n_rows(), got.data());
    const std::vector<float> want = dequantize_tensor(*expected);
    int mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!same_float(got[i], want[i]) && ++mismatches <= 5) {
        MESSAGE(name << " value " << i << ": got " << got[i] << ", gguf.quants gives " << want[i]);
      }
    }
    CHECK(mismatches == 0);

    // A single row from the middle decodes the same as within the whole.
    std::vector<float> row(input->ne[0]);
    dequantize_rows(*input, 1, 1, row.data());
    CHECK(std::equal(row.begin(), row.end(), want.begin() + input->ne[0], same_float));
  }
}

TEST_CASE("row bytes follow the block geometry") {
  for (GgmlType type : supported_types()) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    CAPTURE(info->name);
    CHECK(ggml_row_bytes(type, 0) == 0);
    CHECK(ggml_row_bytes(type, info->block_elems) == info->block_bytes);
    CHECK(ggml_row_bytes(type, 7 * int64_t(info->block_elems)) == 7 * info->block_bytes);
  }
}

TEST_CASE("type table: names, ids, unknown ids") {
  CHECK(ggml_type_info(uint32_t(4)) == nullptr);  // retired Q4_2
  CHECK(ggml_type_info(uint32_t(1000)) == nullptr);
  CHECK(ggml_type_name(uint32_t(1000)) == "type 1000");
  REQUIRE(ggml_type_info(GgmlType::IQ2_XXS) != nullptr);
  CHECK_FALSE(ggml_type_info(GgmlType::IQ2_XXS)->supported);
  CHECK(ggml_type_name(GgmlType::Q4_K) == "Q4_K");
  for (GgmlType type : supported_types()) {
    CHECK(supported_ggml_type_names().find(std::string(ggml_type_info(type)->name)) !=
          std::string::npos);
  }
}

TEST_CASE("fp16 -> fp32 -> fp16 is the identity on every non-NaN half") {
  int failures = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(uint16_t(h));
    if (std::isnan(f)) {
      if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0) ++failures;
      if (!std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) ++failures;
      continue;
    }
    if (fp32_to_fp16(f) != h && ++failures <= 5) MESSAGE("half " << h << " came back different");
  }
  CHECK(failures == 0);
}

TEST_CASE("fp32 -> fp16 rounds to the nearest half, ties to even") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  int checked = 0, failures = 0;
  while (checked < 200000) {
    const float f = std::bit_cast<float>(bits(rng));
    if (!std::isfinite(f) || std::fabs(f) > 65504.0f) continue;
    ++checked;
    const uint16_t h = fp32_to_fp16(f);
    const double err = std::fabs(double(fp16_to_fp32(h)) - f);
    // Neighbours one unit either way (same sign) must not be closer.
    for (int step : {-1, 1}) {
      const uint16_t mag = h & 0x7fff;
      if ((step < 0 && mag == 0) || (step > 0 && mag >= 0x7bff)) continue;
      const uint16_t n = uint16_t((h & 0x8000) | (mag + step));
      const double nerr = std::fabs(double(fp16_to_fp32(n)) - f);
      const bool closer = nerr < err;
      const bool tie_lost = nerr == err && (h & 1) != 0;
      if ((closer || tie_lost) && ++failures <= 5) MESSAGE("float " << f << " -> half " << h);
    }
  }
  CHECK(failures == 0);
  // Past the largest half: midpoint to 2^16 and beyond are infinity.
  CHECK(fp32_to_fp16(65519.0f) == 0x7bff);
  CHECK(std::isinf(fp16_to_fp32(fp32_to_fp16(65520.0f))));
  CHECK(std::isinf(fp16_to_fp32(fp32_to_fp16(1e10f))));
  CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("bf16 is the top half of a float") {
  std::mt19937 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const float f = std::bit_cast<float>(uint32_t(rng()) & 0xffff0000u);
    const uint16_t top = uint16_t(std::bit_cast<uint32_t>(f) >> 16);
    CHECK(same_float(bf16_to_fp32(top), f));
  }
}
