// The D-Bus interface wired to the daemon: properties read from the
// ServerContext (lifecycle state, placement, scheduler statistics, metrics),
// the methods posted to the lifecycle, and a refresh on every state change
// so that State is announced at once rather than at the next poll.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "daemon/config.h"
#include "daemon/dbus_service.h"
#include "daemon/server_context.h"

namespace voltad {

// Tokens per second over windows of at least `window`: a rate read more
// often than that repeats the last window's value, so a Get between polls
// does not see a noisy rate from a few milliseconds. Not thread-safe (the
// D-Bus strand's).
class TokenRate {
 public:
  explicit TokenRate(std::chrono::milliseconds window = std::chrono::seconds(1))
      : window_(window) {}
  double sample(uint64_t tokens, std::chrono::steady_clock::time_point now);

 private:
  std::chrono::milliseconds window_;
  std::optional<std::chrono::steady_clock::time_point> since_;
  uint64_t tokens_at_since_ = 0;
  double rate_ = 0;
};

// The properties and methods of a daemon whose state is `ctx`. ctx must
// outlive the provider.
DbusProvider make_dbus_provider(ServerContext& ctx);

// Starts the interface per server.dbus and server.instance (nullptr when
// off or no bus is reachable, after a warning) and has lifecycle state
// changes refresh it. Call before the loop runs; close() it after.
std::shared_ptr<DbusService> start_dbus(boost::asio::io_context& ioc, const config::Config& cfg,
                                        ServerContext& ctx);

}  // namespace voltad
