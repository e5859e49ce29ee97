#include "daemon/service_control.h"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <utility>

#include "daemon/config_machine.h"
#include "daemon/log.h"
#include "daemon/systemd_notify.h"
#include "daemon/vram_monitor.h"

namespace voltad {

namespace net = boost::asio;

void apply_server_settings(const config::Config& cfg, gid_t socket_gid, ServerContext& ctx) {
  ServerLimits limits;
  limits.max_connections = cfg.server.max_connections;
  limits.max_header_bytes = cfg.server.max_header_bytes.bytes;
  limits.max_body_bytes = cfg.server.max_body_bytes.bytes;
  limits.read_timeout = cfg.server.read_timeout.value;
  limits.write_timeout = cfg.server.write_timeout.value;
  limits.stream_keepalive = cfg.server.stream_keepalive.value;
  ctx.set_limits(limits);
  if (const ServedModel* m = ctx.loaded(); m && m->scheduler)
    m->scheduler->set_max_waiting(queued_request_limit(limits.max_connections));
  std::vector<std::string> warnings;
  auto access = AccessPolicy::create(cfg.server.allow_users, cfg.server.allow_groups, socket_gid,
                                     ::geteuid(), warnings);
  access.add_admin_groups(cfg.server.admin_groups, warnings);
  for (auto& w : warnings) spdlog::warn("{}", w);
  ctx.set_access(std::move(access));
  if (ctx.user_limiter)
    ctx.user_limiter->set_max_per_user(cfg.server.max_requests_per_user);
  else
    ctx.user_limiter = std::make_shared<UserLimiter>(cfg.server.max_requests_per_user);
  if (ctx.connection_limiter)
    ctx.connection_limiter->set_max_per_user(cfg.server.max_connections_per_user);
  else
    ctx.connection_limiter = std::make_shared<UserLimiter>(cfg.server.max_connections_per_user);
}

int32_t queued_request_limit(int64_t max_connections) {
  return int32_t(std::min<int64_t>(max_connections * 4, 1 << 20));
}

namespace {

// One log line per state change; a reload's outcome with every note or problem.
void log_event(const LifecycleEvent& e) {
  using K = LifecycleEvent::Kind;
  switch (e.kind) {
    case K::StateChanged:
      if (e.to == HealthState::Degraded)
        spdlog::warn("state {} -> {} ({})", health_state_name(e.from), health_state_name(e.to),
                     e.status);
      else
        spdlog::info("state {} -> {} ({})", health_state_name(e.from), health_state_name(e.to),
                     e.status);
      break;
    case K::Progress:
      if (e.fraction < 0)  // no measure of how far (systemd_notify shows none either)
        spdlog::debug("loading: {}", e.status);
      else
        spdlog::debug("loading: {} ({:.0f}%)", e.status, e.fraction * 100.0);
      break;
    case K::ReloadStarted:
      spdlog::info("reload: {}", e.status);
      break;
    case K::ReloadFinished:
      if (e.result->ok) {
        spdlog::info("{}", e.result->summary);
        for (const auto& n : e.result->notes) spdlog::info("  {}", n);
      } else {
        spdlog::error("{}", e.result->summary);
        for (const auto& p : e.result->problems) spdlog::error("  {}", p);
      }
      break;
    case K::Failed:
      break;  // the failing code logs its own error
  }
}

}  // namespace

// The graceful stop, on the strand: every 50 ms, see whether in-flight work
// is done; past the grace period, cancel what is left and give the
// connections a moment to send their error events.
class ServiceControl::Drain : public std::enable_shared_from_this<Drain> {
 public:
  Drain(net::io_context& ioc, net::strand<net::io_context::executor_type> strand,
        ServerContext& ctx, std::chrono::milliseconds grace)
      : ioc_(ioc), ctx_(ctx), timer_(strand), deadline_(std::chrono::steady_clock::now() + grace) {}

  void start() { tick(); }
  void force() {
    deadline_ = std::chrono::steady_clock::now();
    forced_ = true;
    forced_stop_ = true;
    timer_.cancel();  // tick now rather than in 50 ms
  }

 private:
  void tick() {
    const ServedModel* m = ctx_.loaded();
    bool idle = ctx_.active_generations.load() == 0 && (!m || m->scheduler->idle());
    auto now = std::chrono::steady_clock::now();
    if (idle) {
      spdlog::info("drained: no requests in flight; stopping");
      return ioc_.stop();
    }
    if (now >= deadline_ && !cancelled_) {
      const int64_t in_flight = ctx_.active_generations.load();
      spdlog::warn("{} with {} request{} in flight; cancelling {}",
                   forced_stop_ ? "a second stop signal" : "server.shutdown_grace has passed",
                   in_flight, in_flight == 1 ? "" : "s", in_flight == 1 ? "it" : "them");
      if (m) m->scheduler->cancel_all("the server is shutting down");
      cancelled_ = true;
      deadline_ = now + std::chrono::seconds(2);
    } else if (now >= deadline_) {
      spdlog::warn("connections still busy after cancelling; stopping anyway");
      return ioc_.stop();
    }
    timer_.expires_after(std::chrono::milliseconds(50));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec == net::error::operation_aborted && !std::exchange(self->forced_, false)) return;
      self->tick();
    });
  }

  net::io_context& ioc_;
  ServerContext& ctx_;
  net::steady_timer timer_;
  bool forced_stop_ = false;  // a second signal cut the grace short (for the log)
  std::chrono::steady_clock::time_point deadline_;
  bool cancelled_ = false;
  bool forced_ = false;  // the wait was cancelled by force()
};

ServiceControl::ServiceControl(net::io_context& ioc, ServerContext& ctx, RunningConfig& config,
                               gid_t socket_gid)
    : ioc_(ioc),
      ctx_(ctx),
      config_(config),
      socket_gid_(socket_gid),
      strand_(net::make_strand(ioc)),
      signals_(strand_, SIGINT, SIGTERM, SIGHUP) {}

ServiceControl::~ServiceControl() {
  // The lifecycle outlives this object; nothing may call back into it.
  if (observer_id_) ctx_.lifecycle.remove_observer(observer_id_);
  ctx_.lifecycle.set_reload_handler({});
  ctx_.lifecycle.set_drain_handler({});
  if (watchdog_) watchdog_->stop();
}

std::chrono::milliseconds ServiceControl::heartbeat_interval() {
  auto interval = sd::watchdog_interval();
  if (!interval) return std::chrono::seconds(1);
  auto quarter = std::chrono::duration_cast<std::chrono::milliseconds>(*interval / 4);
  return std::clamp(quarter, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

void ServiceControl::start() {
  ctx_.lifecycle.add_observer(sd::NotifyReporter{});
  observer_id_ = ctx_.lifecycle.add_observer([this](const LifecycleEvent& e) {
    log_event(e);
    if (e.kind == LifecycleEvent::Kind::ReloadFinished) {
      std::lock_guard lock(level_mu_);
      if (!pending_level_.empty()) log::set_level(pending_level_);
      pending_level_.clear();
    }
    if (e.kind == LifecycleEvent::Kind::StateChanged && e.to == HealthState::Stopping)
      net::post(strand_, [this] { begin_stop(); });
  });

  config_.on_apply([this](const config::Config& c) {
    apply_server_settings(c, socket_gid_, ctx_);
    std::lock_guard lock(level_mu_);
    pending_level_ = c.log.level;  // after the reload's summary (the observer above)
    if (VramMonitor* vram = ctx_.vram.load(std::memory_order_acquire))
      vram->reconfigure(VramGuardOptions{c.memory.vram_fraction, c.memory.hysteresis},
                        c.memory.monitor_interval.value);
  });
  // What --verify-config says of the file, a reload says too: a
  // socket_group that names no group refuses it (voltad would not start
  // with the file), and the reply names the account names that resolve to
  // nothing (the log has them too: a misspelled group must not lock people
  // out unseen) and a model.path a restart could not serve.
  config_.set_machine_check([path = config_.path()](const config::Config& c) {
    RunningConfig::MachineCheck m;
    MachineFindings found = machine_findings(c, path);
    for (const auto& p : found.problems) m.problems.push_back(p.to_string());
    m.warnings = std::move(found.warnings);
    return m;
  });
  ctx_.lifecycle.set_reload_handler([this] { return config_.reload(); });
  ctx_.lifecycle.set_drain_handler([this](bool draining) {
    if (const ServedModel* m = ctx_.loaded()) {
      if (draining)
        m->scheduler->stop_admitting();
      else
        m->scheduler->resume_admitting();
    }
    net::post(strand_, [this, draining] {
      if (draining)
        poll_drain(drain_watch_ = std::make_shared<net::steady_timer>(strand_));
      else
        drain_watch_.reset();
    });
  });

  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) on_signal(sig);
  });

  watchdog_ = sd::Watchdog::start(ioc_, [this]() -> std::optional<sd::SteadyTime> {
    // No engine loop yet (loading, warming up): the start timeout guards that.
    const ServedModel* m = ctx_.loaded();
    if (!m) return std::nullopt;
    auto beat = m->scheduler->last_heartbeat();
    if (beat == sd::SteadyTime{}) return std::nullopt;
    return beat;
  });
}

// An administrator's drain: the log says when the last request has ended,
// so that maintenance need not poll voltactl status. On the strand.
void ServiceControl::poll_drain(std::shared_ptr<net::steady_timer> timer) {
  if (drain_watch_ != timer) return;  // resumed, or a newer drain watches
  const ServedModel* m = ctx_.loaded();
  if (ctx_.active_generations.load() == 0 && (!m || m->scheduler->idle())) {
    spdlog::info("drained: no request in flight (voltactl resume serves again)");
    drain_watch_.reset();
    return;
  }
  timer->expires_after(std::chrono::milliseconds(200));
  timer->async_wait([this, timer](boost::system::error_code ec) {
    if (!ec) poll_drain(timer);
  });
}

void ServiceControl::on_signal(int sig) {
  if (sig == SIGHUP) {
    // The observer logs the outcome of a reload that began; one refused
    // before it began (stopping, starting) is said here.
    if (ControlResult r = ctx_.lifecycle.request_reload(); !r.ok && r.problems.empty())
      spdlog::warn("SIGHUP: {}", r.summary);
  } else if (!ctx_.lifecycle.request_stop(strsignal(sig))) {
    spdlog::warn("second signal ({}): cancelling every request now", strsignal(sig));
    if (drain_) drain_->force();
  }
  signals_.async_wait([this](boost::system::error_code ec, int next) {
    if (!ec) on_signal(next);
  });
}

void ServiceControl::begin_stop() {
  if (drain_) return;
  auto grace = config_.get().server.shutdown_grace;
  spdlog::info("stopping: no new requests; up to {} for running ones",
               config::format_duration(grace));
  // The socket stays open while stopping: /health says so, and new requests
  // get a 503 with Retry-After instead of a refused connect.
  if (const ServedModel* m = ctx_.loaded()) m->scheduler->stop_admitting();
  // Under systemd: the stop timeout covers the grace, whatever the unit's
  // TimeoutStopSec= says.
  if (sd::notify_socket_present()) sd::notify(sd::stop_timeout_message(grace.value));
  drain_ = std::make_shared<Drain>(ioc_, strand_, ctx_, grace.value);
  drain_->start();
}

}  // namespace voltad
