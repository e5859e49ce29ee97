#include "daemon/systemd_watchdog.h"

#include <systemd/sd-daemon.h>

#include <boost/asio/post.hpp>

#include "daemon/log.h"

namespace voltad::sd {

std::optional<std::chrono::microseconds> watchdog_interval() {
  uint64_t usec = 0;
  // 0: keep $WATCHDOG_USEC for anyone who reads it later (tests, logs).
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec);
}

bool should_ping(std::optional<SteadyTime> heartbeat, SteadyTime now,
                 std::chrono::microseconds interval) {
  if (!heartbeat) return true;
  return now - *heartbeat < interval / 2;
}

std::shared_ptr<Watchdog> Watchdog::start(boost::asio::io_context& ioc, Heartbeat heartbeat) {
  auto interval = watchdog_interval();
  if (!interval) return nullptr;
  auto w = std::make_shared<Watchdog>(ioc, std::move(heartbeat), *interval);
  spdlog::info("watchdog: pinging systemd every {} ms while the engine makes progress",
               std::chrono::duration_cast<std::chrono::milliseconds>(*interval / 2).count());
  boost::asio::post(w->timer_.get_executor(), [w] { w->tick(); });
  return w;
}

Watchdog::Watchdog(boost::asio::io_context& ioc, Heartbeat heartbeat,
                   std::chrono::microseconds interval)
    : timer_(ioc), heartbeat_(std::move(heartbeat)), interval_(interval) {}

void Watchdog::stop() {
  boost::asio::post(timer_.get_executor(), [self = shared_from_this()] { self->timer_.cancel(); });
}

void Watchdog::tick() {
  auto beat = heartbeat_();
  auto now = std::chrono::steady_clock::now();
  if (should_ping(beat, now, interval_)) {
    sd_notify(0, "WATCHDOG=1");
    if (warned_) spdlog::info("watchdog: the engine makes progress again; pinging");
    warned_ = false;
  } else if (!warned_) {
    spdlog::error(
        "watchdog: the engine loop has not gone round for {} ms (stuck in a forward pass?); not "
        "pinging systemd, which restarts the service when WatchdogSec passes",
        std::chrono::duration_cast<std::chrono::milliseconds>(now - *beat).count());
    warned_ = true;
  }
  timer_.expires_after(interval_ / 2);
  timer_.async_wait([self = shared_from_this()](auto ec) {
    if (!ec) self->tick();
  });
}

}  // namespace voltad::sd
