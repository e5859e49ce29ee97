#include "daemon/vram_guard.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "engine/vram_plan.h"

namespace voltad {

std::optional<VramSource> daemon_vram_source(const std::string& backend, int cuda_device,
                                             const std::string& bus_id) {
  if (std::string path = fake_vram_path(); !path.empty()) {
    spdlog::warn("VRAM monitor: {} is set: reading the card's usage from {} (for tests only)",
                 kFakeVramEnv, path);
    return file_vram_source(path);
  }
  if (backend != "cuda") return std::nullopt;
  auto nvml = nvml_vram_source(bus_id);
  if (nvml) return std::move(nvml.value());
  auto cuda = cuda_vram_source(cuda_device);
  if (cuda) {
    spdlog::info("VRAM monitor: NVML unavailable ({}); sampling with cudaMemGetInfo",
                 nvml.error().message);
    return std::move(cuda.value());
  }
  spdlog::warn(
      "VRAM monitor: no way to sample the card (NVML: {}; CUDA runtime: {}); the guard is off",
      nvml.error().message, cuda.error().message);
  return std::nullopt;
}

std::unique_ptr<VramMonitor> make_vram_guard(const config::Config& cfg, VramSource source,
                                             Lifecycle& lifecycle) {
  VramGuardOptions options{cfg.memory.vram_fraction, cfg.memory.hysteresis};
  std::string name = source.name;
  auto monitor = std::make_unique<VramMonitor>(source.name, std::move(source.sample), options,
                                               cfg.memory.monitor_interval.value,
                                               [&lifecycle](bool degraded, const std::string& why) {
                                                 if (degraded)
                                                   spdlog::warn("degraded: {}", why);
                                                 else
                                                   spdlog::info("ready again: {}", why);
                                                 lifecycle.set_memory_pressure(degraded, why);
                                               });
  spdlog::info(
      "VRAM monitor: sampling the card every {} ms with {}; degraded above {:.2f} of the card, "
      "ready again below {:.2f}",
      cfg.memory.monitor_interval.value.count(), name, options.vram_fraction,
      options.vram_fraction - options.hysteresis);
  return monitor;
}

int vram_retry_after_seconds(const VramMonitor& monitor) {
  double seconds = 2.0 * double(monitor.interval().count()) / 1000.0;
  return std::max(1, int(std::ceil(seconds)));
}

std::string vram_refusal_message(const VramStatus& s) {
  return "the GPU's memory is nearly full: all processes use " + format_bytes(s.used_bytes) +
         " of " + format_bytes(s.total_bytes) + ", above the budget of " +
         format_bytes(s.enter_above_bytes) +
         " (memory.vram_fraction); new requests are refused until usage falls below " +
         format_bytes(s.leave_below_bytes) + "; requests already running go on";
}

nlohmann::json vram_health_json(const VramStatus& s) {
  nlohmann::json j = {{"source", s.source},
                      {"degraded", s.degraded},
                      {"card_used_bytes", s.used_bytes},
                      {"card_total_bytes", s.total_bytes},
                      {"degraded_above_bytes", s.enter_above_bytes},
                      {"ready_below_bytes", s.leave_below_bytes},
                      {"vram_fraction", s.vram_fraction},
                      {"hysteresis", s.hysteresis},
                      {"times_degraded", s.degraded_total},
                      {"sample_errors", s.sample_errors}};
  if (!s.last_error.empty()) j["last_error"] = s.last_error;
  return j;
}

}  // namespace voltad
