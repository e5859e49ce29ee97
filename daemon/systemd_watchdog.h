// systemd's watchdog (WatchdogSec=): WATCHDOG=1 every half interval, but
// only while the engine loop shows progress. The engine thread beats a
// heartbeat every step and at least every heartbeat_interval when idle
// (Scheduler::last_heartbeat); a forward pass that never returns (a hung
// GPU) stops the beats, the pings stop, and systemd restarts the service.
//
// While the model loads there is no engine loop yet: pings go out freely,
// and the start timeout (stretched by EXTEND_TIMEOUT_USEC while loading
// makes progress) bounds a load that hangs.
//
// Threads: a timer on the I/O loop; the heartbeat function is called there.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

namespace voltad::sd {

using SteadyTime = std::chrono::steady_clock::time_point;

// WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID unset or
// ours); nullopt when no watchdog is asked for.
std::optional<std::chrono::microseconds> watchdog_interval();

// The rule, as a pure function: ping unless the engine runs and its last
// heartbeat is half an interval old or older. `heartbeat` is nullopt while
// there is no engine loop (loading).
bool should_ping(std::optional<SteadyTime> heartbeat, SteadyTime now,
                 std::chrono::microseconds interval);

class Watchdog : public std::enable_shared_from_this<Watchdog> {
 public:
  using Heartbeat = std::function<std::optional<SteadyTime>()>;

  // Starts pinging; nullptr when systemd asks for no watchdog.
  static std::shared_ptr<Watchdog> start(boost::asio::io_context& ioc, Heartbeat heartbeat);

  Watchdog(boost::asio::io_context& ioc, Heartbeat heartbeat, std::chrono::microseconds interval);
  void stop();  // thread-safe
  std::chrono::microseconds interval() const { return interval_; }

 private:
  void tick();

  boost::asio::steady_timer timer_;
  Heartbeat heartbeat_;
  std::chrono::microseconds interval_;
  bool warned_ = false;  // the engine looked stuck at the last tick
};

}  // namespace voltad::sd
