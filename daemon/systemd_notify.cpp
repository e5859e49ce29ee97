#include "daemon/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>

#include "daemon/exit_codes.h"

namespace voltad::sd {

namespace {

// One STATUS= value: a single line (a newline would start a new assignment).
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

std::string status(HealthState state, const std::string& why) {
  std::string s = health_state_name(state);
  if (!why.empty()) s += ": " + why;
  return "STATUS=" + one_line(s);
}

bool serving_or_paused(HealthState s) {
  return s == HealthState::Ready || s == HealthState::Degraded || s == HealthState::Draining;
}

uint64_t monotonic_usec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000u + uint64_t(ts.tv_nsec) / 1000u;
}

}  // namespace

bool notify_socket_present() {
  const char* s = std::getenv("NOTIFY_SOCKET");
  return s && *s;
}

bool notify(const std::string& message) {
  return sd_notify(0, message.c_str()) > 0;
}

int errno_for_exit_code(int exit_code) {
  switch (exit_code) {
    case kExitUsage:
    case kExitConfig:
      return EINVAL;
    case kExitModelData:
      return EBADMSG;
    case kExitNoModel:
      return ENOENT;
    case kExitUnavailable:
      return ENODEV;
    case kExitCantCreate:
      return EADDRINUSE;
    case kExitPlacement:
      return EPERM;
    case kExitVramBudget:
      return ENOMEM;
    default:
      return EIO;
  }
}

std::string stop_timeout_message(std::chrono::milliseconds grace) {
  const auto total = std::chrono::duration_cast<std::chrono::microseconds>(grace + kStopMargin);
  return "EXTEND_TIMEOUT_USEC=" + std::to_string(total.count());
}

void notify_exit(int exit_code) {
  if (exit_code == kExitOk || !notify_socket_present()) return;
  notify("STATUS=failed: exit code " + std::to_string(exit_code) +
         " (see the log)\nERRNO=" + std::to_string(errno_for_exit_code(exit_code)));
}

std::vector<std::string> NotifyMapper::messages(const LifecycleEvent& e) {
  using K = LifecycleEvent::Kind;
  const std::string extend =
      "EXTEND_TIMEOUT_USEC=" +
      std::to_string(
          std::chrono::duration_cast<std::chrono::microseconds>(options_.extend_timeout).count());
  switch (e.kind) {
    case K::StateChanged:
      if (e.to == HealthState::Loading) return {status(e.to, e.status) + "\n" + extend};
      if (e.to == HealthState::Stopping) return {"STOPPING=1\n" + status(e.to, e.status)};
      if (serving_or_paused(e.to) && !ready_sent_) {
        ready_sent_ = true;
        return {"READY=1\n" + status(e.to, e.status)};
      }
      return {status(e.to, e.status)};
    case K::Progress: {
      int percent = e.fraction < 0 ? -1 : int(e.fraction * 100.0);
      if (percent == last_percent_ && e.status == last_what_) return {};
      last_percent_ = percent;
      last_what_ = e.status;
      std::string what = e.status;
      if (percent >= 0) what += " (" + std::to_string(percent) + "%)";
      return {status(e.to, what) + "\n" + extend};
    }
    case K::ReloadStarted:
      // Before READY=1 a reload is invisible to systemd (it is still starting us).
      if (!ready_sent_) return {status(e.to, e.status)};
      return {"RELOADING=1\nMONOTONIC_USEC=" + std::to_string(monotonic_usec()) + "\n" +
              status(e.to, e.status)};
    case K::ReloadFinished: {
      std::string text = e.result->summary;
      if (!e.result->ok && !e.result->problems.empty()) {
        text += ": ";
        for (size_t i = 0; i < e.result->problems.size(); ++i)
          text += (i ? "; " : "") + e.result->problems[i];
      }
      if (!ready_sent_) return {status(e.to, text)};
      return {"READY=1\n" + status(e.to, text)};
    }
    case K::Failed:
      return {"STATUS=" + one_line("failed: " + e.status) +
              "\nERRNO=" + std::to_string(errno_for_exit_code(e.exit_code))};
  }
  return {};
}

void NotifyReporter::operator()(const LifecycleEvent& event) {
  if (!notify_socket_present()) return;
  for (const std::string& m : mapper_.messages(event)) notify(m);
}

}  // namespace voltad::sd
