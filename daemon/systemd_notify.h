// What systemd sees of the lifecycle: sd_notify(3) messages on
// $NOTIFY_SOCKET. Without a supervisor (no $NOTIFY_SOCKET) every send is a
// no-op, so the daemon runs the same under systemd, in a terminal and in tests.
//
//   starting/loading  STATUS=<what is loading, % done>  EXTEND_TIMEOUT_USEC=<grace>
//   -> ready          READY=1  STATUS=ready: ...        (model loaded and warmed up)
//   ready <-> degraded/draining                         STATUS=<state>: <why>
//   reload            RELOADING=1 MONOTONIC_USEC=...  ...  READY=1 STATUS=<result>
//   stopping          STOPPING=1  STATUS=stopping: ...
//                     EXTEND_TIMEOUT_USEC=<shutdown_grace + stop_margin>
//   fatal error       STATUS=<error>  ERRNO=<errno-style code>
//
// The mapping is a pure function (notify_messages) so it can be tested
// without a socket; NotifyReporter sends what it returns.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "daemon/lifecycle.h"

namespace voltad::sd {

// True when a service manager listens ($NOTIFY_SOCKET is set).
bool notify_socket_present();
// sd_notify(0, message); false when it failed or nobody listens.
bool notify(const std::string& message);

// The errno-style code systemd shows for one of voltad's exit codes
// (ERRNO=; `systemctl status` prints its name).
int errno_for_exit_code(int exit_code);

// What voltad may still need once the grace has passed: the drain's two
// seconds for connections to send their error events, then the engine's
// teardown (threads joined, device memory freed).
inline constexpr std::chrono::seconds kStopMargin{15};

// The message that stretches systemd's stop timeout over a graceful stop of
// `grace` (EXTEND_TIMEOUT_USEC=, systemd 236+): the unit's TimeoutStopSec=
// then never kills running answers that server.shutdown_grace lets finish.
// systemd only ever lengthens a timeout this way, so a short grace changes
// nothing.
std::string stop_timeout_message(std::chrono::milliseconds grace);

// A failed exit (a bad config, no model, no socket ...): STATUS= and ERRNO=
// for whatever stops the daemon before or after the lifecycle reports it.
void notify_exit(int exit_code);

struct NotifyOptions {
  // How much more time each loading step asks systemd for (EXTEND_TIMEOUT_USEC=):
  // a big model keeps extending the start timeout as long as it makes progress.
  std::chrono::seconds extend_timeout{90};
};

// Turns lifecycle events into notify messages (each one datagram). Keeps the
// little state it needs: whether READY=1 was sent, the last progress shown.
class NotifyMapper {
 public:
  explicit NotifyMapper(NotifyOptions options = {}) : options_(options) {}
  std::vector<std::string> messages(const LifecycleEvent& event);

 private:
  NotifyOptions options_;
  bool ready_sent_ = false;
  int last_percent_ = -2;
  std::string last_what_;
};

// A lifecycle observer that sends NotifyMapper's messages.
class NotifyReporter {
 public:
  explicit NotifyReporter(NotifyOptions options = {}) : mapper_(options) {}
  void operator()(const LifecycleEvent& event);

 private:
  NotifyMapper mapper_;
};

}  // namespace voltad::sd
