#include "daemon/dbus_provider.h"

#include <algorithm>
#include <cmath>

#include "daemon/vram_monitor.h"

namespace voltad {

double TokenRate::sample(uint64_t tokens, std::chrono::steady_clock::time_point now) {
  if (!since_) {
    since_ = now;
    tokens_at_since_ = tokens;
    return rate_;
  }
  auto elapsed = now - *since_;
  if (elapsed < window_) return rate_;
  double seconds = std::chrono::duration<double>(elapsed).count();
  // One decimal: finer changes are noise, and each change is a signal.
  rate_ = std::round(double(tokens - tokens_at_since_) / seconds * 10.0) / 10.0;
  since_ = now;
  tokens_at_since_ = tokens;
  return rate_;
}

namespace {

DbusOutcome outcome(const ControlResult& r) {
  return DbusOutcome{r.ok, r.summary, r.ok ? r.notes : r.problems};
}

uint32_t clamp_u32(int64_t v) {
  return uint32_t(std::clamp<int64_t>(v, 0, UINT32_MAX));
}

}  // namespace

DbusProvider make_dbus_provider(ServerContext& ctx) {
  DbusProvider p;
  auto rate = std::make_shared<TokenRate>();
  p.properties = [&ctx, rate] {
    DbusProperties d;
    d.state = health_state_name(ctx.lifecycle.state());
    d.model = ctx.model_name;
    d.gpu_bus_id = ctx.placement.gpu_bus_id;
    d.numa_node = ctx.placement.numa_node;
    if (const ServedModel* m = ctx.loaded()) {
      SchedulerStats st = m->scheduler->stats();
      d.kv_blocks_free = uint64_t(std::max(st.kv_blocks_total - st.kv_blocks_used, 0));
      d.running_requests = clamp_u32(st.running);
      d.queued_requests = clamp_u32(st.waiting);
    }
    // The card as the VRAM guard last sampled it: every process's use, and
    // the line above which the daemon degrades (none on the CPU backend).
    if (const VramMonitor* vram = ctx.vram.load(std::memory_order_acquire)) {
      VramStatus v = vram->status();
      if (v.sampled) {
        d.vram_used_bytes = v.used_bytes;
        d.vram_budget_bytes = v.enter_above_bytes;
      }
    }
    d.decode_tokens_per_second =
        rate->sample(ctx.metrics.tokens_sampled(), std::chrono::steady_clock::now());
    return d;
  };
  p.reload = [&ctx](const std::string& caller) {
    (void)caller;  // request_reload logs the file it reads; the service logs the caller
    return outcome(ctx.lifecycle.request_reload());
  };
  p.drain = [&ctx](const std::string& caller) {
    return outcome(ctx.lifecycle.request_drain(caller));
  };
  p.resume = [&ctx](const std::string& caller) {
    return outcome(ctx.lifecycle.request_resume(caller));
  };
  return p;
}

std::shared_ptr<DbusService> start_dbus(boost::asio::io_context& ioc, const config::Config& cfg,
                                        ServerContext& ctx) {
  DbusOptions options;
  options.bus = cfg.server.dbus;
  options.instance = cfg.server.instance;
  auto service = DbusService::start(ioc, options, make_dbus_provider(ctx));
  if (!service) return nullptr;
  // The observer runs under the lifecycle's lock; refresh() only posts.
  std::weak_ptr<DbusService> weak = service;
  ctx.lifecycle.add_observer([weak](const LifecycleEvent& e) {
    if (e.kind != LifecycleEvent::Kind::StateChanged) return;
    if (auto s = weak.lock()) s->refresh();
  });
  return service;
}

}  // namespace voltad
