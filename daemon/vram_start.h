// The VRAM plan at daemon start (issue 8; engine/vram_plan.h has the rule):
// measure the card, plan, and either refuse to start (exit 75 with the
// table and the ways out) or size the CUDA backend's KV pool from the plan,
// so that what is allocated is what was planned.
//
// Measuring: NVML (if present) reads the card before voltad creates its CUDA
// context -- that is the other processes' share -- and again after, which
// adds the context itself (with every kernel: they are loaded eagerly).
// Without NVML only cudaMemGetInfo's "after" reading exists; the context is
// then assumed (400 MiB) and the rest counted as other processes'.
#pragma once

#include <optional>
#include <string>

#include "daemon/config.h"
#include "daemon/vram_monitor.h"
#include "engine/model.h"
#include "engine/vram_plan.h"

namespace voltad {

// The plan's inputs from the config, as --plan and the daemon read them.
// The CUDA backend needs max_batch_tokens >= max_sequences (one decode
// token per sequence), so the plan counts the larger.
EngineLimits plan_engine_limits(const config::Config& cfg);
MemoryLimits plan_memory_limits(const config::Config& cfg);

// The card as the plan sees it, from a reading before voltad's context
// (none without NVML) and one after.
DeviceMemory device_memory_from_samples(const std::string& name,
                                        const std::optional<VramSample>& before_context,
                                        const VramSample& after_context);

struct StartPlan {
  VramPlan plan;
  std::string measured_with;  // "nvml, before and after voltad's context", "cuda runtime"
};

// Measures CUDA device `device` (PCI bus id `bus_id` for NVML; may be
// empty) and plans `model` under the config's limits. Creates voltad's CUDA
// context. Error: no device, or this voltad has no CUDA.
Result<StartPlan> plan_vram_at_start(const config::Config& cfg, const Model& model, int device,
                                     std::string bus_id);

// The refusal, for the log and systemd's status: the table and the ways out.
std::string vram_refusal_text(const StartPlan& start);

}  // namespace voltad
