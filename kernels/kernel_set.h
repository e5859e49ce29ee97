// Which kernels the CUDA backend runs (`engine.kernels` in the config).
// Portable: the kernels a V100 (sm_70) runs, launched as on a V100, on every
// device, so a newer card can test exactly what a V100 executes. Auto:
// per-architecture variants where the device and the shape allow them: the
// sm_80+ prefill and narrow GEMMs (kernels/gemm_sm80.h) and, on sm_90+,
// programmatic dependent launch of every kernel (kernels/launch.cuh).
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

// The kernel set of the launches this host thread makes while the scope
// lives (the CUDA backend opens one per step and per graph capture); outside
// any scope, Portable.
class KernelSetScope {
 public:
  explicit KernelSetScope(KernelSet set);
  ~KernelSetScope();
  KernelSetScope(const KernelSetScope&) = delete;
  KernelSetScope& operator=(const KernelSetScope&) = delete;

 private:
  KernelSet previous_;
};
KernelSet current_kernel_set();

// True when the device is sm_90+ and this binary's kernels were built for
// it: Auto then launches every kernel with programmatic dependent launch.
bool programmatic_launch_supported();

}  // namespace voltad::kernels
