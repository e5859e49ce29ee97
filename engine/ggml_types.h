// Tensor element types as GGUF files name them (ggml's type ids), their block
// geometry, and the scalar float conversions every decoder needs.
//
// A ggml type stores a row as a sequence of blocks: `block_elems` values
// packed into `block_bytes` bytes. Plain types (F32, F16, BF16) are blocks of
// one value. The ids are fixed by the file format; gaps are ids ggml retired.
#pragma once

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
// and keeps NaN a NaN.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);

// bfloat16 is the top half of a float: exact.
float bf16_to_fp32(uint16_t h);

}  // namespace voltad
