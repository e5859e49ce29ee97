// The VRAM guard as the daemon wires it (issue 8): which sample source the
// monitor uses, how its transitions reach the lifecycle (ready <-> degraded,
// which the log, /health, /metrics, `voltactl status` and systemd's STATUS=
// line all follow), and what a refused request and /health say about it.
// The threshold logic and the thread are daemon/vram_monitor.h; the sources
// daemon/vram_sources.h.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/config.h"
#include "daemon/lifecycle.h"
#include "daemon/vram_sources.h"

namespace voltad {

// The monitor's source for this daemon:
// - VOLTAD_TEST_FAKE_VRAM=PATH set: the test-only file (any backend; logged
//   as a warning, since it is not a real card);
// - the CPU backend: none (no card to guard);
// - CUDA: NVML for the card at `bus_id` (or CUDA device `cuda_device`'s own
//   bus id), else cudaMemGetInfo on `cuda_device`.
// nullopt: no source (CPU backend, or CUDA with neither working: logged).
std::optional<VramSource> daemon_vram_source(const std::string& backend, int cuda_device,
                                             const std::string& bus_id);

// A monitor (not yet started) whose transitions are logged and posted to
// `lifecycle` as memory pressure. `lifecycle` must outlive it.
std::unique_ptr<VramMonitor> make_vram_guard(const config::Config& cfg, VramSource source,
                                             Lifecycle& lifecycle);

// What a new request gets while degraded: 503, the numbers, and a
// Retry-After of two sampling intervals (at least 1 s): the earliest the
// state can have changed and been seen.
int vram_retry_after_seconds(const VramMonitor& monitor);
std::string vram_refusal_message(const VramStatus& status);

// The "vram" object of /health.
nlohmann::json vram_health_json(const VramStatus& status);

}  // namespace voltad
