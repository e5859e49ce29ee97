#include "daemon/vram_start.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "daemon/vram_sources.h"
#ifdef VOLTAD_HAVE_CUDA
#include "engine/backend_cuda.h"
#endif

namespace voltad {

EngineLimits plan_engine_limits(const config::Config& cfg) {
  EngineLimits l;
  l.max_context = cfg.engine.max_context;
  l.max_sequences = cfg.engine.max_sequences;
  l.max_batch_tokens = std::max(cfg.engine.max_batch_tokens, cfg.engine.max_sequences);
  l.kv_cache_type = cfg.engine.kv_cache_type == "int8" ? KvCacheType::Int8 : KvCacheType::Fp16;
  return l;
}

MemoryLimits plan_memory_limits(const config::Config& cfg) {
  MemoryLimits m;
  m.vram_fraction = cfg.memory.vram_fraction;
  m.kv_cache_bytes = cfg.memory.kv_cache_bytes.bytes;
  return m;
}

DeviceMemory device_memory_from_samples(const std::string& name,
                                        const std::optional<VramSample>& before,
                                        const VramSample& after) {
  DeviceMemory d;
  d.name = name;
  d.total_bytes = after.total_bytes;
  if (before) {
    d.used_by_others = before->used_bytes;
    // Another process may have freed memory between the readings: the
    // context is never counted below zero.
    d.context_bytes =
        after.used_bytes > before->used_bytes ? after.used_bytes - before->used_bytes : 0;
    d.context_measured = true;
  } else {
    d.context_bytes = std::min(after.used_bytes, kAssumedCudaContextBytes);
    d.used_by_others = after.used_bytes - d.context_bytes;
    d.context_measured = false;
  }
  return d;
}

std::string vram_refusal_text(const StartPlan& s) {
  return "the VRAM plan does not fit (measured with " + s.measured_with +
         "); voltad does not start rather than run out of memory later:\n" + vram_plan_text(s.plan);
}

Result<StartPlan> plan_vram_at_start(const config::Config& cfg, const Model& model, int device,
                                     std::string bus_id) {
#ifdef VOLTAD_HAVE_CUDA
  // Every kernel is loaded when the context is created, not at its first
  // launch: the context reading below then includes the code, and no launch
  // on the request path allocates device memory. An operator's own setting
  // wins.
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  auto name = describe_cuda_device(device);
  if (!name) return name.error();
  if (bus_id.empty()) {
    auto id = cuda_pci_bus_id(device);
    if (id) bus_id = id.value();
  }
  std::optional<VramSample> before;
  auto nvml = nvml_vram_source(bus_id);
  if (nvml) {
    auto s = nvml->sample();
    if (s) before = s.value();
  } else {
    spdlog::info("VRAM plan: no NVML ({}); measuring with the CUDA runtime only",
                 nvml.error().message);
  }
  auto after = cuda_device_memory(device);  // creates voltad's context
  if (!after) return after.error();
  VramSample after_sample{after->total_bytes - after->free_bytes, after->total_bytes};
  // Both readings from one source: NVML's total is the one the monitor will
  // compare with, and may differ from the runtime's by what the driver keeps.
  if (before) {
    if (auto s = nvml->sample(); s)
      after_sample = s.value();
    else
      before.reset();
  }

  auto weight_bytes = repacked_weight_bytes(model.weights, model.config);
  if (!weight_bytes) return weight_bytes.error();
  ModelConfig config = model.config;
  if (config.name.empty()) config.name = std::filesystem::path(cfg.model.path).filename().string();
  StartPlan s;
  s.measured_with = before ? "nvml, before and after voltad's context" : "cuda runtime";
  s.plan = plan_vram(config, *weight_bytes, plan_engine_limits(cfg), plan_memory_limits(cfg),
                     device_memory_from_samples(name.value(), before, after_sample));
  return s;
#else
  (void)cfg;
  (void)model;
  (void)bus_id;
  return make_error("this voltad was built without CUDA; no card " + std::to_string(device) +
                    " to plan for");
#endif
}

}  // namespace voltad
