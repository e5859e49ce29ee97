// Tensor element types as GGUF files name them (ggml's type ids), their block
// geometry, and the scalar float conversions every decoder needs.
//
// A ggml type stores a row as a sequence of blocks: `block_elems` values
// packed into `block_bytes` bytes. Plain types (F32, F16, BF16) are blocks of
// one value. The ids are fixed by the file format; gaps are ids ggml retired.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace voltad {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

struct GgmlTypeInfo {
  std::string_view name;  // as llama.cpp prints it: "Q4_K", "IQ2_XXS", "BF16"
  uint32_t block_elems;   // values per block
  uint32_t block_bytes;   // bytes per block
  bool supported;         // voltad can dequantize (and so run) this type
};

// nullptr for ids no ggml version ever defined (or retired ones): a file
// using them is corrupt or from the future. Known but unsupported types get
// an entry with supported = false so they can be refused by name.
const GgmlTypeInfo* ggml_type_info(uint32_t raw);
inline const GgmlTypeInfo* ggml_type_info(GgmlType type) {
  return ggml_type_info(static_cast<uint32_t>(type));
}

// "Q4_K", or "type 99" for an id with no entry.
std::string ggml_type_name(uint32_t raw);
inline std::string ggml_type_name(GgmlType type) {
  return ggml_type_name(static_cast<uint32_t>(type));
}

// "F32, F16, BF16, Q4_0, ...": for "supported: ..." in error messages.
std::string supported_ggml_type_names();

// IEEE half <-> float. fp32_to_fp16 rounds to nearest even, overflows to inf
// and keeps NaN a NaN. fp16_to_fp32 is inline: the CPU backend's decoders
// call it once a block of 32 values (a call each was 6% of a decode step);
// always inlined, also into the decoders' x86-64-v3 clone (cpu_clones.h).
// IEEE binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
[[gnu::always_inline]] inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in a float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  uint32_t bits;
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN (payload kept)
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}
uint16_t fp32_to_fp16(float f);

// bfloat16 is the top half of a float: exact.
[[gnu::always_inline]] inline float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

}  // namespace voltad
