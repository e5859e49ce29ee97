// The lifecycle -> sd_notify mapping and the watchdog's rule, without a
// socket (tests/integration/systemd_notify.sh drives the real thing).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/exit_codes.h"
#include "daemon/systemd_notify.h"
#include "daemon/systemd_watchdog.h"

using namespace voltad;

namespace {

struct Sent {
  sd::NotifyMapper mapper;
  std::vector<std::string> all;
  void attach(Lifecycle& lc) {
    lc.add_observer([this](const LifecycleEvent& e) {
      for (auto& m : mapper.messages(e)) all.push_back(m);
    });
  }
  bool any(const std::string& needle) const {
    for (auto& m : all)
      if (m.find(needle) != std::string::npos) return true;
    return false;
  }
};

}  // namespace

TEST_CASE("notify: start, progress, ready, stop") {
  Lifecycle lc;
  Sent s;
  s.attach(lc);
  lc.begin_loading("loading /m.gguf");
  REQUIRE(s.all.size() == 1);
  CHECK(s.all[0] == "STATUS=loading: loading /m.gguf\nEXTEND_TIMEOUT_USEC=90000000");
  lc.report_progress("loading weights", 0.421);
  lc.report_progress("loading weights", 0.425);  // same percent: not sent again
  lc.report_progress("loading weights", 0.43);
  REQUIRE(s.all.size() == 3);
  CHECK(s.all[1] == "STATUS=loading: loading weights (42%)\nEXTEND_TIMEOUT_USEC=90000000");
  CHECK_FALSE(s.any("READY=1"));
  lc.finish_loading("serving m");
  CHECK(s.all.back() == "READY=1\nSTATUS=ready: serving m");
  lc.set_memory_pressure(true, "card at 95%");
  CHECK(s.all.back() == "STATUS=degraded: card at 95%");  // READY=1 only once
  lc.request_stop("Terminated");
  CHECK(s.all.back() == "STOPPING=1\nSTATUS=stopping: Terminated");
}

TEST_CASE("notify: a stop asks for the grace and the margin, in microseconds") {
  using namespace std::chrono_literals;
  CHECK(sd::stop_timeout_message(30s) == "EXTEND_TIMEOUT_USEC=45000000");
  CHECK(sd::stop_timeout_message(0ms) == "EXTEND_TIMEOUT_USEC=15000000");
  CHECK(sd::stop_timeout_message(std::chrono::milliseconds(86400001)) ==
        "EXTEND_TIMEOUT_USEC=86415001000");
}

TEST_CASE("notify: reloads bracket RELOADING=1 ... READY=1 once ready, not before") {
  Lifecycle lc;
  Sent s;
  s.attach(lc);
  bool valid = false;
  lc.set_reload_handler([&] {
    return valid ? ControlResult::success("reloaded f.yaml: 1 change applied")
                 : ControlResult::failure("reload refused: f.yaml has 2 problems",
                                          {"f.yaml:2:3: bad\nvalue", "f.yaml:5:1: worse"});
  });
  lc.begin_loading("m");
  lc.request_reload();  // while loading: systemd is still starting us, so STATUS only
  CHECK_FALSE(s.any("RELOADING=1"));
  CHECK_FALSE(s.any("READY=1"));
  lc.finish_loading("serving");
  s.all.clear();
  lc.request_reload();
  REQUIRE(s.all.size() == 2);
  CHECK(s.all[0].rfind("RELOADING=1\nMONOTONIC_USEC=", 0) == 0);
  CHECK(s.all[1] ==
        "READY=1\nSTATUS=ready: reload refused: f.yaml has 2 problems: f.yaml:2:3: bad value; "
        "f.yaml:5:1: worse");  // one line: a newline would end the STATUS= value
  valid = true;
  lc.request_reload();
  CHECK(s.all.back() == "READY=1\nSTATUS=ready: reloaded f.yaml: 1 change applied");
}

TEST_CASE("notify: a fatal error says what and sets ERRNO") {
  Lifecycle lc;
  Sent s;
  s.attach(lc);
  lc.begin_loading("m");
  lc.fail(kExitModelData, "m.gguf: bad tensor");
  CHECK(s.any("STATUS=failed: m.gguf: bad tensor\nERRNO=" + std::to_string(EBADMSG)));
  CHECK(s.all.back() == "STOPPING=1\nSTATUS=stopping: m.gguf: bad tensor");
  CHECK(sd::errno_for_exit_code(kExitNoModel) == ENOENT);
  CHECK(sd::errno_for_exit_code(kExitConfig) == EINVAL);
  CHECK(sd::errno_for_exit_code(kExitVramBudget) == ENOMEM);
  CHECK(sd::errno_for_exit_code(12345) == EIO);
}

TEST_CASE("notify: nothing is sent without NOTIFY_SOCKET") {
  ::unsetenv("NOTIFY_SOCKET");
  CHECK_FALSE(sd::notify_socket_present());
  CHECK_FALSE(sd::notify("READY=1"));
}

TEST_CASE("watchdog: the interval is read only when meant for this process") {
  ::setenv("WATCHDOG_USEC", "3000000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  auto mine = sd::watchdog_interval();
  REQUIRE(mine);
  CHECK(*mine == std::chrono::seconds(3));
  ::setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
  CHECK_FALSE(sd::watchdog_interval());  // for another process (a parent's, inherited)
  ::unsetenv("WATCHDOG_PID");
  CHECK(sd::watchdog_interval());  // no pid: ours
  ::unsetenv("WATCHDOG_USEC");
  CHECK_FALSE(sd::watchdog_interval());
}

TEST_CASE("watchdog: ping while loading or while the heartbeat is fresh, not when it is stale") {
  using namespace std::chrono;
  auto now = steady_clock::now();
  auto interval = microseconds(seconds(2));
  CHECK(sd::should_ping(std::nullopt, now, interval));  // loading: no engine loop yet
  CHECK(sd::should_ping(now - milliseconds(200), now, interval));
  CHECK(sd::should_ping(now - milliseconds(999), now, interval));
  CHECK_FALSE(sd::should_ping(now - milliseconds(1000), now, interval));
  CHECK_FALSE(sd::should_ping(now - seconds(30), now, interval));
}
