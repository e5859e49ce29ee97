// What the lifecycle (daemon/lifecycle.h) sets in motion in a serving daemon,
// and what posts to it. serve() builds one ServiceControl before the I/O loop
// runs:
//
//   observers     systemd notify messages (systemd_notify.h), one log line
//                 per state change and per reload
//   reload        SIGHUP / voltactl reload / D-Bus Reload -> RunningConfig
//                 (config_reload.h); an accepted reload applies limits,
//                 access lists, the log level and the VRAM guard's thresholds
//   drain/resume  the scheduler stops / starts admitting
//   stop          SIGTERM/SIGINT or a fatal error -> stopping: stop admitting,
//                 let running requests finish within server.shutdown_grace,
//                 cancel the rest, then stop the loop; a second signal
//                 cancels at once
//   watchdog      WATCHDOG=1 while the engine loop beats (systemd_watchdog.h)
//
// Threads: signals, the stop sequence and the watchdog run on one strand of
// the I/O loop; lifecycle observers only post to it.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <memory>
#include <mutex>
#include <string>

#include "daemon/config_reload.h"
#include "daemon/server_context.h"
#include "daemon/systemd_watchdog.h"

namespace voltad {

class ServiceControl {
 public:
  // socket_gid: the group the access policy falls back to (the socket's).
  ServiceControl(boost::asio::io_context& ioc, ServerContext& ctx, RunningConfig& config,
                 gid_t socket_gid);
  ~ServiceControl();
  ServiceControl(const ServiceControl&) = delete;
  ServiceControl& operator=(const ServiceControl&) = delete;

  // Installs observers and handlers, waits for signals, starts the watchdog.
  void start();

  // How often the engine loop should beat so the watchdog sees it: a quarter
  // of WatchdogSec (1 s without a watchdog).
  static std::chrono::milliseconds heartbeat_interval();

 private:
  class Drain;
  void on_signal(int sig);
  void begin_stop();  // on the strand
  void poll_drain(std::shared_ptr<boost::asio::steady_timer> timer);  // on the strand

  boost::asio::io_context& ioc_;
  ServerContext& ctx_;
  RunningConfig& config_;
  gid_t socket_gid_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::signal_set signals_;
  std::shared_ptr<Drain> drain_;  // on the strand
  std::shared_ptr<boost::asio::steady_timer> drain_watch_;  // an administrator's drain; strand
  std::shared_ptr<sd::Watchdog> watchdog_;
  uint64_t observer_id_ = 0;
  // A reload's log.level, set once its summary is logged: a level turned
  // down would otherwise hide the very line that says so.
  std::mutex level_mu_;
  std::string pending_level_;  // under level_mu_; "" when none
};

// Limits, access lists and the per-user allowance from a config, into ctx
// and the scheduler's queue: at start and after every accepted reload.
void apply_server_settings(const config::Config& cfg, gid_t socket_gid, ServerContext& ctx);

// The requests the scheduler queues beyond the running ones before it
// answers 503: each connection carries one at a time, so 4x
// server.max_connections is never reached while that limit holds; it
// follows the limit when a reload changes it.
int32_t queued_request_limit(int64_t max_connections);

}  // namespace voltad
