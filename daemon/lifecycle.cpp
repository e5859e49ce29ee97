#include "daemon/lifecycle.h"

#include <algorithm>

namespace voltad {

const char* health_state_name(HealthState state) {
  switch (state) {
    case HealthState::Starting:
      return "starting";
    case HealthState::Loading:
      return "loading";
    case HealthState::Ready:
      return "ready";
    case HealthState::Degraded:
      return "degraded";
    case HealthState::Draining:
      return "draining";
    case HealthState::Stopping:
      return "stopping";
  }
  return "starting";
}

ControlResult ControlResult::failure(std::string summary, std::vector<std::string> problems) {
  ControlResult r;
  r.ok = false;
  r.summary = std::move(summary);
  r.problems = std::move(problems);
  return r;
}

ControlResult ControlResult::success(std::string summary, std::vector<std::string> notes) {
  ControlResult r;
  r.summary = std::move(summary);
  r.notes = std::move(notes);
  return r;
}

uint64_t Lifecycle::add_observer(Observer observer) {
  std::lock_guard lock(mu_);
  uint64_t id = next_observer_id_++;
  observers_.emplace_back(id, std::move(observer));
  return id;
}

void Lifecycle::remove_observer(uint64_t id) {
  std::lock_guard lock(mu_);
  std::erase_if(observers_, [id](const auto& o) { return o.first == id; });
}

void Lifecycle::set_reload_handler(ReloadHandler handler) {
  std::lock_guard lock(mu_);
  reload_handler_ = std::move(handler);
}

void Lifecycle::set_drain_handler(DrainHandler handler) {
  std::lock_guard lock(mu_);
  drain_handler_ = std::move(handler);
}

HealthState Lifecycle::derive() const {
  if (stopping_) return HealthState::Stopping;
  if (!loaded_) return loading_ ? HealthState::Loading : HealthState::Starting;
  if (draining_) return HealthState::Draining;
  if (memory_pressure_) return HealthState::Degraded;
  return HealthState::Ready;
}

void Lifecycle::update(const std::string& why) {
  HealthState from = state_.load(std::memory_order_relaxed);
  HealthState to = derive();
  if (from == to) return;
  state_.store(to, std::memory_order_release);
  LifecycleEvent e;
  e.kind = LifecycleEvent::Kind::StateChanged;
  e.from = from;
  e.to = to;
  e.status = why;
  emit(std::move(e));
}

void Lifecycle::emit(LifecycleEvent event) {
  if (event.kind != LifecycleEvent::Kind::StateChanged)
    event.from = event.to = state_.load(std::memory_order_relaxed);
  for (auto& [id, observer] : observers_) observer(event);
}

void Lifecycle::begin_loading(const std::string& what) {
  std::lock_guard lock(mu_);
  loading_ = true;
  update(what);
}

void Lifecycle::report_progress(const std::string& what, double fraction) {
  std::lock_guard lock(mu_);
  if (loaded_ || stopping_) return;
  LifecycleEvent e;
  e.kind = LifecycleEvent::Kind::Progress;
  e.status = what;
  e.fraction = fraction;
  emit(std::move(e));
}

bool Lifecycle::finish_loading(const std::string& summary) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  loaded_ = true;
  // A drain asked for while loading found no scheduler to stop; now there is one.
  if (draining_ && drain_handler_) drain_handler_(true);
  update(summary);
  return true;
}

void Lifecycle::fail(int exit_code, const std::string& message) {
  std::lock_guard lock(mu_);
  LifecycleEvent e;
  e.kind = LifecycleEvent::Kind::Failed;
  e.status = message;
  e.exit_code = exit_code;
  emit(std::move(e));
  stopping_ = true;
  update(message);
}

void Lifecycle::set_memory_pressure(bool over_budget, const std::string& why) {
  std::lock_guard lock(mu_);
  if (memory_pressure_ == over_budget) return;
  memory_pressure_ = over_budget;
  update(why);
}

ControlResult Lifecycle::request_reload() {
  std::lock_guard reload_lock(reload_mu_);
  ReloadHandler handler;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return ControlResult::failure("not reloading: the daemon is stopping");
    if (!reload_handler_)
      return ControlResult::failure("not reloading: the daemon is still starting");
    handler = reload_handler_;
    LifecycleEvent e;
    e.kind = LifecycleEvent::Kind::ReloadStarted;
    e.status = "reloading the configuration";
    emit(std::move(e));
  }
  // The handler reads a file and swaps settings; the state may change meanwhile
  // (observers see ReloadFinished with the state as it is then).
  ControlResult result = handler();
  std::lock_guard lock(mu_);
  LifecycleEvent e;
  e.kind = LifecycleEvent::Kind::ReloadFinished;
  e.status = result.summary;
  e.result = &result;
  emit(std::move(e));
  return result;
}

ControlResult Lifecycle::request_drain(const std::string& who) {
  std::lock_guard lock(mu_);
  if (stopping_) return ControlResult::failure("not draining: the daemon is stopping");
  if (draining_) return ControlResult::success("already draining");
  draining_ = true;
  // The state first: the handler's watcher may log "drained" at once, and
  // that line should follow the change it ends. (A resume, below, admits
  // again before the state says ready.)
  update("draining (" + who + "): new requests are refused; running ones finish");
  if (loaded_ && drain_handler_) drain_handler_(true);
  return ControlResult::success(loaded_ ? "draining: new requests are refused; running ones finish"
                                        : "will drain once the model is loaded");
}

ControlResult Lifecycle::request_resume(const std::string& who) {
  std::lock_guard lock(mu_);
  if (stopping_) return ControlResult::failure("not resuming: the daemon is stopping");
  if (!draining_) return ControlResult::success("not draining; nothing to resume");
  draining_ = false;
  if (loaded_ && drain_handler_) drain_handler_(false);
  update("resumed (" + who + ")");
  return ControlResult::success(std::string("resumed: ") + health_state_name(derive()));
}

bool Lifecycle::request_stop(const std::string& why) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  stopping_ = true;
  update(why);
  return true;
}

}  // namespace voltad
