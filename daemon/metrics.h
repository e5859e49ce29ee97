// Prometheus metrics, written out by hand in the text exposition format
// (Debian has no prometheus-cpp; the format is a page of rules).
//
// Threads: every method is thread-safe. The engine thread reports token
// timings through the SchedulerObserver interface; I/O threads count
// requests and connections; render() reads everything under one lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/vram_monitor.h"
#include "engine/scheduler.h"

namespace voltad {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);  // caller holds the metrics lock
  // NAME_bucket{le=...}, NAME_sum, NAME_count (the TYPE/HELP lines are the caller's).
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What /metrics shows beside the counters: a snapshot taken at render time.
struct MetricsSnapshot {
  std::string state;  // health state name
  bool engine_ready = false;
  SchedulerStats scheduler;
  int64_t open_connections = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t device_memory_bytes = 0;  // 0: no device (CPU backend), not exported
  // The VRAM monitor's view of the card (daemon/vram_monitor.h); not
  // exported when there is no monitor (CPU backend).
  bool vram_monitored = false;
  VramStatus vram;
  // voltad_info labels: model, backend, version, chat format, placement...
  std::vector<std::pair<std::string, std::string>> info;
};

class Metrics final : public SchedulerObserver {
 public:
  Metrics();

  // endpoint: a known route or "other" (labels stay few).
  void count_request(std::string_view endpoint, int status);
  void observe_request_seconds(std::string_view endpoint, double seconds);
  void count_connection(bool accepted, std::string_view refusal_reason = {});
  void count_disconnect_cancel();

  // SchedulerObserver (engine thread).
  void on_first_token(double seconds_since_submit, int32_t prompt_tokens) override;
  void on_next_token(double seconds_since_previous_token) override;
  void on_finished(const StreamEvent& final_event) override;

  std::string render(const MetricsSnapshot& snapshot) const;

  // Tokens sampled so far by every sequence (first and later ones), counted
  // as they are made: the D-Bus DecodeTokensPerSecond is its rate.
  uint64_t tokens_sampled() const { return tokens_sampled_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> request_seconds_;
  std::map<std::string, uint64_t> finished_;  // by finish reason
  std::map<std::string, uint64_t> connections_refused_;
  uint64_t connections_accepted_ = 0;
  uint64_t disconnect_cancels_ = 0;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, itl_;
  std::atomic<uint64_t> tokens_sampled_{0};
};

// A Prometheus label value with \, " and newline escaped.
std::string prometheus_escape(std::string_view value);

}  // namespace voltad
