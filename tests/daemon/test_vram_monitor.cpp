// The VRAM guard while serving, with fake cards: the threshold and
// hysteresis logic, the monitor thread around it, the sample sources that
// need no GPU, and the start-up plan's reading of the card.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <thread>
#include <vector>

#include "daemon/config.h"
#include "daemon/vram_monitor.h"
#include "daemon/vram_sources.h"
#include "daemon/vram_start.h"

using namespace voltad;

namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kCard = 100 * kGiB;  // round numbers: 90% = 90 GiB, 88% = 88 GiB

VramSample used(double gib) {
  return {uint64_t(gib * double(kGiB)), kCard};
}

// A card whose usage the test sets; the monitor samples it.
struct FakeCard {
  std::mutex mu;
  VramSample now = used(10);
  bool broken = false;
  std::atomic<int> samples = 0;  // counted under mu, read by the test without it
  void set(double gib) {
    std::lock_guard lock(mu);
    now = used(gib);
  }
  VramSampler sampler() {
    return [this]() -> Result<VramSample> {
      std::lock_guard lock(mu);
      ++samples;
      if (broken) return make_error("the driver went away");
      return now;
    };
  }
};

struct Transitions {
  std::mutex mu;
  std::vector<std::pair<bool, std::string>> seen;
  VramMonitor::OnChange callback() {
    return [this](bool degraded, const std::string& why) {
      std::lock_guard lock(mu);
      seen.emplace_back(degraded, why);
    };
  }
  size_t count() {
    std::lock_guard lock(mu);
    return seen.size();
  }
};

}  // namespace

TEST_CASE("the guard enters degraded above vram_fraction and leaves below it minus hysteresis") {
  VramGuard g({0.90, 0.02});
  CHECK(g.enter_above(kCard) == 90 * kGiB);
  CHECK(g.leave_below(kCard) == 88 * kGiB);
  CHECK(g.observe(used(50)) == VramGuard::Change::None);
  CHECK(g.observe({90 * kGiB, kCard}) == VramGuard::Change::None);  // at the line: still fine
  CHECK_FALSE(g.degraded());
  CHECK(g.observe({90 * kGiB + 1, kCard}) == VramGuard::Change::EnteredDegraded);
  CHECK(g.degraded());
  CHECK(g.observe(used(95)) == VramGuard::Change::None);
  CHECK(g.observe(used(89)) == VramGuard::Change::None);  // under the line, above the band
  CHECK(g.observe({88 * kGiB, kCard}) == VramGuard::Change::None);
  CHECK(g.degraded());
  CHECK(g.observe({88 * kGiB - 1, kCard}) == VramGuard::Change::LeftDegraded);
  CHECK_FALSE(g.degraded());
  CHECK(g.observe({0, 0}) == VramGuard::Change::None);  // no card: no verdict
}

TEST_CASE("a neighbour hovering around the threshold does not make the state flap") {
  VramGuard g({0.90, 0.02});
  int entered = 0, left = 0;
  // Usage that swings by +-1.5 GiB around 90 GiB for a while, then settles low.
  for (int i = 0; i < 200; ++i) {
    auto c = g.observe(used(i % 2 ? 91.5 : 88.5));
    entered += c == VramGuard::Change::EnteredDegraded;
    left += c == VramGuard::Change::LeftDegraded;
  }
  CHECK(entered == 1);
  CHECK(left == 0);
  CHECK(g.degraded());
  CHECK(g.observe(used(80)) == VramGuard::Change::LeftDegraded);

  // Without hysteresis the same swings would flip it at every sample: the
  // band is what prevents that.
  VramGuard bare({0.90, 0.0});
  int flips = 0;
  for (int i = 0; i < 20; ++i)
    flips += bare.observe(used(i % 2 ? 91.5 : 88.5)) != VramGuard::Change::None;
  CHECK(flips == 19);
}

TEST_CASE("the monitor samples on its thread and reports each transition once, with numbers") {
  FakeCard card;
  Transitions t;
  VramMonitor m("fake", card.sampler(), {0.90, 0.02}, std::chrono::milliseconds(10), t.callback());
  m.start();
  CHECK(card.samples >= 1);  // start() samples before returning
  VramStatus s = m.status();
  CHECK(s.sampled);
  CHECK(s.source == "fake");
  CHECK(s.used_bytes == 10 * kGiB);
  CHECK(s.total_bytes == kCard);
  CHECK(s.enter_above_bytes == 90 * kGiB);
  CHECK(s.leave_below_bytes == 88 * kGiB);
  CHECK_FALSE(s.degraded);

  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 500 && t.count() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return t.count() >= n;
  };
  card.set(95);  // another process grows
  REQUIRE(wait_for(1));
  {
    std::lock_guard lock(t.mu);
    CHECK(t.seen[0].first);
    CHECK(t.seen[0].second.find("95.00 GiB of 100.00 GiB") != std::string::npos);
    CHECK(t.seen[0].second.find("88.00 GiB") != std::string::npos);  // where it resumes
  }
  CHECK(m.status().degraded);
  CHECK(m.status().degraded_total == 1);
  card.set(89);  // inside the band: stays degraded for many samples
  int before = card.samples;
  while (card.samples < before + 10) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(t.count() == 1);
  card.set(60);
  REQUIRE(wait_for(2));
  {
    std::lock_guard lock(t.mu);
    CHECK_FALSE(t.seen[1].first);
    CHECK(t.seen[1].second.find("taking new requests again") != std::string::npos);
  }
  m.stop();
  int stopped_at = card.samples;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(card.samples == stopped_at);
}

TEST_CASE("a failing sampler is counted and leaves the state alone") {
  FakeCard card;
  Transitions t;
  VramMonitor m("fake", card.sampler(), {0.90, 0.02}, std::chrono::hours(1), t.callback());
  card.set(95);
  m.sample_now();
  CHECK(m.status().degraded);
  card.broken = true;
  m.sample_now();
  m.sample_now();
  VramStatus s = m.status();
  CHECK(s.degraded);  // no sample is no evidence that the pressure is gone
  CHECK(s.sample_errors == 2);
  CHECK(s.last_error == "the driver went away");
  card.broken = false;
  card.set(50);
  m.sample_now();
  CHECK_FALSE(m.status().degraded);
  CHECK(m.status().last_error.empty());
  CHECK(t.count() == 2);
}

TEST_CASE("reconfigure moves the lines from the next sample") {
  FakeCard card;
  Transitions t;
  VramMonitor m("fake", card.sampler(), {0.90, 0.02}, std::chrono::hours(1), t.callback());
  card.set(85);
  m.sample_now();
  CHECK_FALSE(m.status().degraded);
  m.reconfigure({0.80, 0.05}, std::chrono::milliseconds(500));
  m.sample_now();
  CHECK(m.status().degraded);
  CHECK(m.status().enter_above_bytes == 80 * kGiB);
  CHECK(m.interval() == std::chrono::milliseconds(500));
}

TEST_CASE("the test-only file source reads USED TOTAL, with units") {
  auto ok = parse_vram_sample("30GiB 40GiB\n");
  REQUIRE(ok.ok());
  CHECK(ok->used_bytes == 30 * kGiB);
  CHECK(ok->total_bytes == 40 * kGiB);
  CHECK(parse_vram_sample("1000 2000")->used_bytes == 1000);
  CHECK_FALSE(parse_vram_sample("50GiB 40GiB").ok());  // more used than there is
  CHECK_FALSE(parse_vram_sample("lots").ok());
  CHECK_FALSE(parse_vram_sample("1 0").ok());

  auto path =
      std::filesystem::temp_directory_path() / ("voltad-fake-vram-" + std::to_string(::getpid()));
  VramSource src = file_vram_source(path.string());
  CHECK(src.name == "test file " + path.string());
  CHECK_FALSE(src.sample().ok());  // no file yet
  std::ofstream(path) << "12GiB 16GiB\n";
  auto s = src.sample();
  REQUIRE(s.ok());
  CHECK(s->used_bytes == 12 * kGiB);
  std::ofstream(path) << "15GiB 16GiB\n";
  CHECK(src.sample()->used_bytes == 15 * kGiB);
  std::filesystem::remove(path);
}

TEST_CASE("NVML is optional: without it the source says why") {
  auto nvml = nvml_vram_source("0000:ff:1f.7");
  // This machine may or may not have the driver's library; either way there
  // is no GPU at that address, so the answer is an error that says so.
  REQUIRE_FALSE(nvml.ok());
  CHECK((nvml.error().message.find("libnvidia-ml.so.1") != std::string::npos ||
         nvml.error().message.find("0000:ff:1f.7") != std::string::npos ||
         nvml.error().message.find("nvmlInit") != std::string::npos));
}

TEST_CASE("the start-up plan reads others' usage before the context and the context after") {
  auto d = device_memory_from_samples("card", VramSample{3 * kGiB, kCard},
                                      VramSample{3 * kGiB + (512ull << 20), kCard});
  CHECK(d.total_bytes == kCard);
  CHECK(d.used_by_others == 3 * kGiB);
  CHECK(d.context_bytes == 512ull << 20);
  CHECK(d.context_measured);
  // Another process freed memory between the readings: never a negative context.
  d = device_memory_from_samples("card", VramSample{5 * kGiB, kCard}, VramSample{4 * kGiB, kCard});
  CHECK(d.context_bytes == 0);
  // No NVML: the context is assumed, the rest is others'.
  d = device_memory_from_samples("card", std::nullopt, VramSample{2 * kGiB, kCard});
  CHECK_FALSE(d.context_measured);
  CHECK(d.context_bytes == kAssumedCudaContextBytes);
  CHECK(d.used_by_others == 2 * kGiB - kAssumedCudaContextBytes);
  d = device_memory_from_samples("card", std::nullopt, VramSample{100ull << 20, kCard});
  CHECK(d.used_by_others == 0);
  CHECK(d.context_bytes == 100ull << 20);
}

TEST_CASE("the plan's limits come from the config; the batch holds one token per sequence") {
  config::Config cfg = config::Config::defaults();
  cfg.engine.max_context = 8192;
  cfg.engine.max_sequences = 64;
  cfg.engine.max_batch_tokens = 32;
  cfg.engine.kv_cache_type = "int8";
  cfg.memory.vram_fraction = 0.8;
  cfg.memory.kv_cache_bytes.bytes = 1 * kGiB;
  EngineLimits l = plan_engine_limits(cfg);
  CHECK(l.max_context == 8192);
  CHECK(l.max_batch_tokens == 64);
  CHECK(l.kv_cache_type == KvCacheType::Int8);
  MemoryLimits m = plan_memory_limits(cfg);
  CHECK(m.vram_fraction == doctest::Approx(0.8));
  CHECK(m.kv_cache_bytes == kGiB);
}
