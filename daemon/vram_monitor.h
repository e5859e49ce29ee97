// The VRAM guard while serving (issue 8): a thread samples the card's total
// memory in use -- by every process, voltad included -- every
// memory.monitor_interval, and a small state machine turns the samples into
// "over budget" and "back under it" with hysteresis:
//
//   enter degraded   used > vram_fraction x total
//   leave degraded   used < (vram_fraction - hysteresis) x total
//
// voltad's own share is fixed at start (every device buffer is allocated
// then; docs/PLANNING.md), so crossing the line means another process grew.
// While degraded the daemon takes no new generations (503 + Retry-After);
// running ones finish.
//
// Where samples come from is a VramSampler (daemon/vram_sources.h: NVML,
// the CUDA runtime, or a test-only file), so tests fake a card without a GPU.
//
// Threads: VramGuard is plain data for one thread (the monitor's). Every
// VramMonitor method is thread-safe; its on_change callback runs on the
// monitor thread, one transition at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "engine/result.h"

namespace voltad {

// Memory of the whole card, as the driver counts it (total - free).
struct VramSample {
  uint64_t used_bytes = 0;
  uint64_t total_bytes = 0;
};

using VramSampler = std::function<Result<VramSample>()>;

struct VramGuardOptions {
  double vram_fraction = 0.90;  // memory.vram_fraction
  double hysteresis = 0.02;     // memory.hysteresis: a share of the card, below vram_fraction
};

// The threshold logic alone: fed samples, says when the state changes.
class VramGuard {
 public:
  enum class Change { None, EnteredDegraded, LeftDegraded };

  explicit VramGuard(VramGuardOptions options) : options_(options) {}

  Change observe(const VramSample& sample);
  bool degraded() const { return degraded_; }
  const VramGuardOptions& options() const { return options_; }
  void set_options(VramGuardOptions options) { options_ = options; }

  // The lines for a card of `total` bytes.
  uint64_t enter_above(uint64_t total) const;
  uint64_t leave_below(uint64_t total) const;

 private:
  VramGuardOptions options_;
  bool degraded_ = false;
};

// What /health, /metrics and `voltactl status` show.
struct VramStatus {
  std::string source;    // "nvml", "cuda runtime", "test file PATH"
  bool sampled = false;  // at least one sample has been taken
  uint64_t used_bytes = 0, total_bytes = 0;
  uint64_t enter_above_bytes = 0, leave_below_bytes = 0;
  double vram_fraction = 0, hysteresis = 0;
  bool degraded = false;
  uint64_t degraded_total = 0;  // times it entered degraded
  uint64_t samples = 0, sample_errors = 0;
  std::string last_error;  // the latest failed sample's message; "" after a good one
};

class VramMonitor {
 public:
  // Runs on the monitor thread at each transition: degraded or not, and a
  // sentence with the numbers (for the log, /health and systemd's status).
  using OnChange = std::function<void(bool degraded, const std::string& why)>;

  VramMonitor(std::string source_name, VramSampler sampler, VramGuardOptions options,
              std::chrono::milliseconds interval, OnChange on_change);
  ~VramMonitor();  // stops the thread
  VramMonitor(const VramMonitor&) = delete;
  VramMonitor& operator=(const VramMonitor&) = delete;

  // Takes the first sample now (so the state is right before the first
  // request), then samples every interval on its own thread.
  void start();
  void stop();
  // One sample, on the caller's thread: what the thread does each interval.
  void sample_now();
  // A reload: new lines and interval, used from the next sample.
  void reconfigure(VramGuardOptions options, std::chrono::milliseconds interval);

  VramStatus status() const;
  std::chrono::milliseconds interval() const;

 private:
  void run();

  const VramSampler sampler_;
  const OnChange on_change_;
  mutable std::mutex mu_;  // status_, guard_, interval_, stop_
  std::condition_variable cv_;
  VramGuard guard_;
  VramStatus status_;
  std::chrono::milliseconds interval_;
  bool stop_ = false;
  std::mutex sample_mu_;  // one sample at a time (the thread, or sample_now)
  std::thread thread_;
};

// "the card's memory in use by all processes is 131.0 GiB of 139.8 GiB, above ..."
std::string describe_vram_change(bool degraded, const VramSample& sample, const VramGuard& guard);

}  // namespace voltad
