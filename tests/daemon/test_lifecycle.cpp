#include "daemon/lifecycle.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace voltad;

namespace {

// Records every event as one line: "state from->to: status", "progress ...", ...
struct Recorder {
  std::vector<std::string> lines;
  void attach(Lifecycle& lc) {
    lc.add_observer([this](const LifecycleEvent& e) {
      using K = LifecycleEvent::Kind;
      switch (e.kind) {
        case K::StateChanged:
          lines.push_back(std::string(health_state_name(e.from)) + "->" + health_state_name(e.to));
          break;
        case K::Progress:
          lines.push_back("progress " + e.status + " " + std::to_string(int(e.fraction * 100)));
          break;
        case K::ReloadStarted:
          lines.push_back("reload-start");
          break;
        case K::ReloadFinished:
          lines.push_back(std::string("reload-") + (e.result->ok ? "ok" : "failed"));
          break;
        case K::Failed:
          lines.push_back("failed " + std::to_string(e.exit_code));
          break;
      }
    });
  }
};

}  // namespace

TEST_CASE("lifecycle: start, load, serve, stop") {
  Lifecycle lc;
  Recorder r;
  r.attach(lc);
  CHECK(lc.state() == HealthState::Starting);
  CHECK_FALSE(lc.serving());
  lc.begin_loading("model.gguf");
  lc.report_progress("weights", 0.5);
  CHECK(lc.state() == HealthState::Loading);
  CHECK(lc.finish_loading("loaded"));
  CHECK(lc.serving());
  lc.report_progress("late", 1.0);  // ignored once loaded
  CHECK(lc.request_stop("SIGTERM"));
  CHECK_FALSE(lc.request_stop("SIGTERM again"));
  CHECK(lc.state() == HealthState::Stopping);
  CHECK(r.lines == std::vector<std::string>{"starting->loading", "progress weights 50",
                                            "loading->ready", "ready->stopping"});
}

TEST_CASE("lifecycle: a stop while loading wins") {
  Lifecycle lc;
  lc.begin_loading("m");
  CHECK(lc.request_stop("SIGTERM"));
  CHECK_FALSE(lc.finish_loading("loaded"));
  CHECK(lc.state() == HealthState::Stopping);
}

TEST_CASE("lifecycle: memory pressure and drain compose") {
  Lifecycle lc;
  std::vector<bool> drain_calls;
  std::vector<HealthState> states_at_call;  // a drain is told once the state says so
  lc.set_drain_handler([&](bool d) {
    drain_calls.push_back(d);
    states_at_call.push_back(lc.state());
  });
  lc.begin_loading("m");
  lc.finish_loading("loaded");
  lc.set_memory_pressure(true, "VRAM 95% > 90%");
  CHECK(lc.state() == HealthState::Degraded);
  CHECK_FALSE(lc.serving());  // running requests finish; new ones wait for ready
  CHECK(lc.request_drain("test").ok);
  CHECK(lc.state() == HealthState::Draining);
  CHECK_FALSE(lc.serving());
  CHECK(lc.request_drain("test").summary == "already draining");
  lc.set_memory_pressure(false, "VRAM back to 80%");
  CHECK(lc.state() == HealthState::Draining);  // draining hides the pressure change
  CHECK(lc.request_resume("test").ok);
  CHECK(lc.state() == HealthState::Ready);
  lc.set_memory_pressure(true, "again");
  lc.request_drain("test");
  lc.request_resume("test");
  CHECK(lc.state() == HealthState::Degraded);  // back to what the guard says
  CHECK(drain_calls == std::vector<bool>{true, false, true, false});
  // Drains see draining already; resumes see it still (they admit first).
  CHECK(states_at_call == std::vector<HealthState>(4, HealthState::Draining));
  CHECK(lc.request_stop("SIGTERM"));
  CHECK_FALSE(lc.request_drain("test").ok);
  CHECK_FALSE(lc.request_resume("test").ok);
}

TEST_CASE("lifecycle: a drain asked for while loading applies once loaded") {
  Lifecycle lc;
  std::vector<bool> drain_calls;
  lc.set_drain_handler([&](bool d) { drain_calls.push_back(d); });
  lc.begin_loading("m");
  CHECK(lc.request_drain("test").ok);
  CHECK(lc.state() == HealthState::Loading);
  CHECK(drain_calls.empty());  // no scheduler yet
  lc.finish_loading("loaded");
  CHECK(lc.state() == HealthState::Draining);
  CHECK(drain_calls == std::vector<bool>{true});
}

TEST_CASE("lifecycle: reload reports the handler's result between two events") {
  Lifecycle lc;
  Recorder r;
  CHECK_FALSE(lc.request_reload().ok);  // no handler yet: still starting
  r.attach(lc);
  bool valid = true;
  lc.set_reload_handler([&] {
    return valid ? ControlResult::success("reloaded")
                 : ControlResult::failure("not reloaded", {"f.yaml:3:5: bad", "f.yaml:7:1: worse"});
  });
  lc.begin_loading("m");
  lc.finish_loading("loaded");
  ControlResult ok = lc.request_reload();
  CHECK(ok.ok);
  valid = false;
  ControlResult bad = lc.request_reload();
  CHECK_FALSE(bad.ok);
  CHECK(bad.problems.size() == 2);
  CHECK(lc.state() == HealthState::Ready);  // a failed reload changes nothing
  CHECK(r.lines == std::vector<std::string>{"starting->loading", "loading->ready", "reload-start",
                                            "reload-ok", "reload-start", "reload-failed"});
}

TEST_CASE("lifecycle: a fatal error is reported, then stopping") {
  Lifecycle lc;
  Recorder r;
  r.attach(lc);
  lc.begin_loading("m");
  lc.fail(66, "no model");
  CHECK(lc.state() == HealthState::Stopping);
  CHECK(r.lines == std::vector<std::string>{"starting->loading", "failed 66", "loading->stopping"});
}

TEST_CASE("lifecycle: state names") {
  CHECK(std::string(health_state_name(HealthState::Degraded)) == "degraded");
  CHECK(std::string(health_state_name(HealthState::Stopping)) == "stopping");
}
