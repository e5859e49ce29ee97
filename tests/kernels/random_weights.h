// Random GGUF tensors whose every block is valid: random bits everywhere,
// then each fp16 scale made finite (subnormal to 2^4, either sign, now and
// then zero), so quant bits take every value and scales every exponent.
// Shared by the repack test (tests/engine) and the kernel tests.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/dequantize.h"
#include "engine/ggml_types.h"

namespace voltad::test {

inline uint16_t random_fp16_scale(std::mt19937& rng, int max_exponent = 19) {
  if (rng() % 16 == 0) return (rng() & 1) ? 0x8000 : 0;
  const uint16_t sign = uint16_t((rng() & 1) << 15);
  const uint16_t exponent = uint16_t(rng() % uint32_t(max_exponent + 1));
  const uint16_t mantissa = uint16_t(rng() & 0x3FF);
  return uint16_t(sign | (exponent << 10) | mantissa);
}

inline void put_u16(std::vector<uint8_t>& bytes, size_t at, uint16_t v) {
  std::memcpy(bytes.data() + at, &v, 2);
}

// rows x cols of `type` (cols a multiple of its block). max_exponent bounds
// the fp16 scales' biased exponent (19 = up to 2^4; 15 = up to 2^0).
inline std::vector<uint8_t> random_valid_tensor(GgmlType type, int64_t rows, int64_t cols,
                                                std::mt19937& rng, int max_exponent = 19) {
  const uint64_t n = uint64_t(rows * cols);
  std::vector<uint8_t> bytes(ggml_row_bytes(type, cols) * uint64_t(rows));
  for (uint8_t& b : bytes) b = uint8_t(rng());
  const size_t block_bytes = ggml_type_info(type)->block_bytes;
  auto each_block = [&](auto&& fix) {
    for (size_t at = 0; at < bytes.size(); at += block_bytes) fix(at);
  };
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
      each_block([&](size_t at) { put_u16(bytes, at, random_fp16_scale(rng, max_exponent)); });
      break;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      each_block([&](size_t at) {
        put_u16(bytes, at, random_fp16_scale(rng, max_exponent));
        put_u16(bytes, at + 2, random_fp16_scale(rng, max_exponent));
      });
      break;
    case GgmlType::Q6_K:
      each_block(
          [&](size_t at) { put_u16(bytes, at + 208, random_fp16_scale(rng, max_exponent)); });
      break;
    case GgmlType::F16:
      for (uint64_t i = 0; i < n; ++i) put_u16(bytes, 2 * i, random_fp16_scale(rng, max_exponent));
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
        const float v = std::ldexp(float(int32_t(rng())), -int(rng() % 24) - 31);
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
      break;
    default:
      break;
  }
  return bytes;
}

}  // namespace voltad::test
