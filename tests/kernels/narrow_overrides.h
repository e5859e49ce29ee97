// The portable narrow GEMM's test overrides (kernels/gemm_wmma.h: paired B's
// order, 32-token blocks) set for a scope: undone when it ends, a failed
// REQUIRE or a thrown CUDA error included, so no later test inherits them.
#pragma once

#include <optional>

#include "kernels/gemm_wmma.h"

namespace voltad::test {

class NarrowOverrides {
 public:
  NarrowOverrides() = default;
  NarrowOverrides(const NarrowOverrides&) = delete;
  NarrowOverrides& operator=(const NarrowOverrides&) = delete;
  ~NarrowOverrides() {
    kernels::gemm_narrow_pairs_force(std::nullopt);
    kernels::gemm_narrow_tokens32_force(std::nullopt);
  }
  void pairs(std::optional<kernels::WmmaPairs> order) { kernels::gemm_narrow_pairs_force(order); }
  void tokens32(std::optional<bool> on) { kernels::gemm_narrow_tokens32_force(on); }
};

}  // namespace voltad::test
