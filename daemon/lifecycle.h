// The daemon's lifecycle: one state machine that everything outside the
// engine reads (/health, the router, systemd's notify socket, D-Bus) and
// that signal handlers, admin requests and the VRAM guard only post to.
//
//   starting -> loading -> ready <-> degraded          (memory pressure)
//                            \   <-> draining          (admin Drain / Resume)
//   any state --------------------> stopping           (SIGTERM, SIGINT, fatal error)
//
// The state is derived from a few facts rather than stored on its own, so
// that the orders of events do not matter: a Drain while degraded resumes to
// degraded if the pressure is still there; a drain requested while loading
// takes effect once loaded.
//
//   stopping                      once stop was requested (final)
//   starting / loading            until the model is loaded and warmed up
//   draining                      an admin asked to drain
//   degraded                      the VRAM guard reports pressure
//   ready                         otherwise
//
// Only ready admits new requests. Degraded and draining let running ones
// finish and answer new ones 503; so do starting, loading and stopping.
//
// Threads: every method is thread-safe. Observers run on the thread that
// caused the event, one event at a time and in order, under the lifecycle's
// lock: they must be short and must not call the mutating methods (post to
// your own loop instead). state() is a lock-free read and may be called from
// anywhere, observers included.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace voltad {

enum class HealthState { Starting, Loading, Ready, Degraded, Draining, Stopping };
// "starting", "loading", "ready", "degraded", "draining", "stopping": the
// words /health, systemd's STATUS= and D-Bus's State property use.
const char* health_state_name(HealthState state);

// What an admin request (reload, drain, resume) answers: a D-Bus method
// reply, `voltactl reload`'s output, a STATUS= line.
struct ControlResult {
  bool ok = true;
  std::string summary;                // one line, e.g. "reloaded /etc/voltad/voltad.yaml"
  std::vector<std::string> problems;  // when !ok: every problem, e.g. "FILE:LINE:COL: message"
  std::vector<std::string> notes;     // when ok: what changed, what needs a restart
  static ControlResult failure(std::string summary, std::vector<std::string> problems = {});
  static ControlResult success(std::string summary, std::vector<std::string> notes = {});
};

struct LifecycleEvent {
  enum class Kind {
    StateChanged,    // from != to
    Progress,        // while loading: status says what, fraction how far (0..1, or -1: unknown)
    ReloadStarted,   // status: the file
    ReloadFinished,  // result set
    Failed,          // a fatal error: status says what, exit_code the ExitCode; stopping follows
  };
  Kind kind = Kind::StateChanged;
  HealthState from = HealthState::Starting;  // for events other than StateChanged: from == to ==
  HealthState to = HealthState::Starting;    // the current state
  std::string status;                        // a human line for STATUS= / logs
  double fraction = -1;
  const ControlResult* result = nullptr;
  int exit_code = 0;
};

class Lifecycle {
 public:
  using Observer = std::function<void(const LifecycleEvent&)>;
  // Parses, checks and applies the config file; called by request_reload,
  // one reload at a time.
  using ReloadHandler = std::function<ControlResult()>;
  // Called (under the lock) when the draining fact changes: true = stop
  // admitting new requests, false = admit again.
  using DrainHandler = std::function<void(bool draining)>;

  Lifecycle() = default;
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  HealthState state() const { return state_.load(std::memory_order_acquire); }
  // Ready: new requests are admitted.
  bool serving() const { return state() == HealthState::Ready; }

  // Returns an id for remove_observer. Observers added later miss earlier events.
  uint64_t add_observer(Observer observer);
  void remove_observer(uint64_t id);
  void set_reload_handler(ReloadHandler handler);
  void set_drain_handler(DrainHandler handler);

  // --- posted by the daemon's start-up and engine thread
  void begin_loading(const std::string& what);  // starting -> loading
  // Loading progress: what is being loaded, fraction done (0..1; -1: unknown).
  void report_progress(const std::string& what, double fraction);
  // The model is loaded and a first forward pass ran: loading -> ready
  // (or degraded / draining). False when a stop came first.
  bool finish_loading(const std::string& summary);
  // A fatal error: Failed, then stopping. exit_code is an ExitCode.
  void fail(int exit_code, const std::string& message);

  // --- posted by the VRAM guard (issue 8): ready <-> degraded
  void set_memory_pressure(bool over_budget, const std::string& why);

  // --- admin requests (SIGHUP, voltactl reload, D-Bus Reload/Drain/Resume)
  ControlResult request_reload();
  ControlResult request_drain(const std::string& who);
  ControlResult request_resume(const std::string& who);

  // --- SIGTERM / SIGINT: -> stopping. False when already stopping.
  bool request_stop(const std::string& why);

 private:
  HealthState derive() const;
  // Caller holds mu_: recomputes the state and emits StateChanged when it moved.
  void update(const std::string& why);
  // Caller holds mu_.
  void emit(LifecycleEvent event);

  mutable std::mutex mu_;  // the facts below and the observers; held while emitting
  std::mutex reload_mu_;   // one reload at a time; taken before mu_, held while the handler runs
  std::atomic<HealthState> state_{HealthState::Starting};
  bool loading_ = false, loaded_ = false, stopping_ = false;
  bool draining_ = false, memory_pressure_ = false;
  std::vector<std::pair<uint64_t, Observer>> observers_;
  uint64_t next_observer_id_ = 1;
  ReloadHandler reload_handler_;
  DrainHandler drain_handler_;
};

}  // namespace voltad
