// Which kernels the CUDA backend runs (`engine.kernels` in the config).
// Portable: the kernels a V100 (sm_70) runs, on every device, so a newer
// card can test exactly what a V100 executes. Auto: a per-architecture
// variant where the device and the shape allow one (today the sm_80+
// prefill GEMM, kernels/gemm_sm80.h), the portable kernel otherwise.
// Plain C++, no CUDA headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace voltad::kernels {

enum class KernelSet : uint8_t { Portable, Auto };

inline const char* kernel_set_name(KernelSet k) {
  return k == KernelSet::Auto ? "auto" : "portable";
}

inline std::optional<KernelSet> parse_kernel_set(std::string_view s) {
  if (s == "auto") return KernelSet::Auto;
  if (s == "portable") return KernelSet::Portable;
  return std::nullopt;
}

}  // namespace voltad::kernels
