#include "engine/ggml_types.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace voltad {
namespace {

// Indexed by ggml type id. Block geometry is fixed by the file format (it
// matches ggml's block structs; ids 4, 5 and 31-33, 36-38 were retired).
// An entry with block_elems == 0 marks an id that has no type.
constexpr std::array<GgmlTypeInfo, 42> kTypes = {{
    {"F32", 1, 4, true},          // 0
    {"F16", 1, 2, true},          // 1
    {"Q4_0", 32, 18, true},       // 2
    {"Q4_1", 32, 20, true},       // 3
    {"", 0, 0, false},            // 4 (Q4_2, retired)
    {"", 0, 0, false},            // 5 (Q4_3, retired)
    {"Q5_0", 32, 22, true},       // 6
    {"Q5_1", 32, 24, true},       // 7
    {"Q8_0", 32, 34, true},       // 8
    {"Q8_1", 32, 36, false},      // 9: fp16 d and s + 32 int8 (an activation format)
    {"Q2_K", 256, 84, false},     // 10
    {"Q3_K", 256, 110, false},    // 11
    {"Q4_K", 256, 144, true},     // 12
    {"Q5_K", 256, 176, true},     // 13
    {"Q6_K", 256, 210, true},     // 14
    {"Q8_K", 256, 292, false},    // 15
    {"IQ2_XXS", 256, 66, false},  // 16
    {"IQ2_XS", 256, 74, false},   // 17
    {"IQ3_XXS", 256, 98, false},  // 18
    {"IQ1_S", 256, 50, false},    // 19
    {"IQ4_NL", 32, 18, false},    // 20
    {"IQ3_S", 256, 110, false},   // 21
    {"IQ2_S", 256, 82, false},    // 22
    {"IQ4_XS", 256, 136, false},  // 23
    {"I8", 1, 1, false},          // 24
    {"I16", 1, 2, false},         // 25
    {"I32", 1, 4, false},         // 26
    {"I64", 1, 8, false},         // 27
    {"F64", 1, 8, false},         // 28
    {"IQ1_M", 256, 56, false},    // 29
    {"BF16", 1, 2, true},         // 30
    {"", 0, 0, false},            // 31 (Q4_0_4_4, retired)
    {"", 0, 0, false},            // 32 (Q4_0_4_8, retired)
    {"", 0, 0, false},            // 33 (Q4_0_8_8, retired)
    {"TQ1_0", 256, 54, false},    // 34
    {"TQ2_0", 256, 66, false},    // 35
    {"", 0, 0, false},            // 36 (IQ4_NL_4_4, retired)
    {"", 0, 0, false},            // 37 (IQ4_NL_4_8, retired)
    {"", 0, 0, false},            // 38 (IQ4_NL_8_8, retired)
    {"MXFP4", 32, 17, false},     // 39
    {"NVFP4", 64, 36, false},     // 40
    {"Q1_0", 128, 18, false},     // 41
}};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t raw) {
  if (raw >= kTypes.size() || kTypes[raw].block_elems == 0) return nullptr;
  return &kTypes[raw];
}

std::string ggml_type_name(uint32_t raw) {
  const GgmlTypeInfo* info = ggml_type_info(raw);
  if (!info) return "type " + std::to_string(raw);
  return std::string(info->name);
}

std::string supported_ggml_type_names() {
  // The order people meet them in: plain floats first, then the quants.
  static constexpr GgmlType kOrder[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                        GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                        GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                                        GgmlType::Q5_K, GgmlType::Q6_K};
  std::string names;
  for (GgmlType type : kOrder) {
    if (!names.empty()) names += ", ";
    names += ggml_type_info(type)->name;
  }
  return names;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7e00u;  // NaN stays a (quiet) NaN
  // At or above 65520 (halfway between the largest half, 65504, and 2^16)
  // rounding to nearest even gives infinity.
  if (bits >= 0x477ff000u) return sign | 0x7c00u;
  if (bits < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, in units of 2^-24.
    // nearbyint rounds to nearest even; 1024 units carry into the smallest
    // normal, whose encoding is exactly 0x400.
    const float units = std::nearbyint(std::bit_cast<float>(bits) * 16777216.0f);
    return sign | static_cast<uint16_t>(units);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to
  // nearest even (a carry out of the mantissa correctly bumps the exponent).
  const uint32_t odd = (bits >> 13) & 1u;
  bits += 0xfffu + odd;
  return sign | static_cast<uint16_t>((bits - ((127u - 15u) << 23)) >> 13);
}

}  // namespace voltad
