#include "daemon/vram_monitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/vram_plan.h"

namespace voltad {

namespace {

uint64_t share_of(double fraction, uint64_t total) {
  return uint64_t(std::max(0.0, fraction) * double(total));
}

std::string fraction_text(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", f);
  return buf;
}

}  // namespace

uint64_t VramGuard::enter_above(uint64_t total) const {
  return share_of(options_.vram_fraction, total);
}

uint64_t VramGuard::leave_below(uint64_t total) const {
  return share_of(options_.vram_fraction - options_.hysteresis, total);
}

VramGuard::Change VramGuard::observe(const VramSample& s) {
  if (s.total_bytes == 0) return Change::None;  // not a card
  if (!degraded_ && s.used_bytes > enter_above(s.total_bytes)) {
    degraded_ = true;
    return Change::EnteredDegraded;
  }
  // Between the two lines nothing changes: that band is what keeps a
  // neighbour hovering at the threshold from flipping the state each sample.
  if (degraded_ && s.used_bytes < leave_below(s.total_bytes)) {
    degraded_ = false;
    return Change::LeftDegraded;
  }
  return Change::None;
}

std::string describe_vram_change(bool degraded, const VramSample& s, const VramGuard& g) {
  const VramGuardOptions& o = g.options();
  std::string used = "the card's memory in use by all processes is " + format_bytes(s.used_bytes) +
                     " of " + format_bytes(s.total_bytes);
  if (degraded)
    return used + ", above memory.vram_fraction " + fraction_text(o.vram_fraction) + " (" +
           format_bytes(g.enter_above(s.total_bytes)) +
           "): another process has grown; new requests get 503 until it falls below " +
           format_bytes(g.leave_below(s.total_bytes)) + " (memory.hysteresis " +
           fraction_text(o.hysteresis) + ")";
  return used + ", below " + format_bytes(g.leave_below(s.total_bytes)) +
         " (memory.vram_fraction " + fraction_text(o.vram_fraction) + " - hysteresis " +
         fraction_text(o.hysteresis) + "): taking new requests again";
}

VramMonitor::VramMonitor(std::string source_name, VramSampler sampler, VramGuardOptions options,
                         std::chrono::milliseconds interval, OnChange on_change)
    : sampler_(std::move(sampler)),
      on_change_(std::move(on_change)),
      guard_(options),
      interval_(std::max(interval, std::chrono::milliseconds(10))) {
  status_.source = std::move(source_name);
  status_.vram_fraction = options.vram_fraction;
  status_.hysteresis = options.hysteresis;
}

VramMonitor::~VramMonitor() {
  stop();
}

void VramMonitor::start() {
  sample_now();
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { run(); });
}

void VramMonitor::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void VramMonitor::reconfigure(VramGuardOptions options, std::chrono::milliseconds interval) {
  {
    std::lock_guard lock(mu_);
    guard_.set_options(options);
    status_.vram_fraction = options.vram_fraction;
    status_.hysteresis = options.hysteresis;
    interval_ = std::max(interval, std::chrono::milliseconds(10));
  }
  cv_.notify_all();
}

VramStatus VramMonitor::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

std::chrono::milliseconds VramMonitor::interval() const {
  std::lock_guard lock(mu_);
  return interval_;
}

void VramMonitor::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_, [&] { return stop_; });
    if (stop_) break;
    lock.unlock();
    sample_now();
    lock.lock();
  }
}

void VramMonitor::sample_now() {
  std::lock_guard one_at_a_time(sample_mu_);
  // The sampler may take a while (NVML, a driver call): not under mu_, so
  // status() never waits for the driver.
  Result<VramSample> sample = sampler_();
  bool changed = false, degraded = false;
  std::string why;
  {
    std::lock_guard lock(mu_);
    if (!sample.ok()) {
      ++status_.sample_errors;
      // Logged when the message changes, not every interval. The state
      // stays as it was: no sample is no evidence either way.
      if (status_.last_error != sample.error().message)
        spdlog::warn("VRAM monitor ({}): cannot sample the card: {}; keeping the state '{}'",
                     status_.source, sample.error().message,
                     status_.degraded ? "degraded" : "not degraded");
      status_.last_error = sample.error().message;
      return;
    }
    if (!status_.last_error.empty())
      spdlog::info("VRAM monitor ({}): sampling works again", status_.source);
    status_.last_error.clear();
    const VramSample& s = sample.value();
    ++status_.samples;
    status_.sampled = true;
    status_.used_bytes = s.used_bytes;
    status_.total_bytes = s.total_bytes;
    status_.enter_above_bytes = guard_.enter_above(s.total_bytes);
    status_.leave_below_bytes = guard_.leave_below(s.total_bytes);
    VramGuard::Change c = guard_.observe(s);
    if (c != VramGuard::Change::None) {
      changed = true;
      degraded = c == VramGuard::Change::EnteredDegraded;
      status_.degraded = degraded;
      if (degraded) ++status_.degraded_total;
      why = describe_vram_change(degraded, s, guard_);
    }
  }
  // Outside mu_: the callback posts to the lifecycle, whose observers may
  // read status().
  if (changed && on_change_) on_change_(degraded, why);
}

}  // namespace voltad
