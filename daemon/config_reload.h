// Reloading the config file in a running daemon (SIGHUP, `voltactl reload`,
// D-Bus Reload): read it again, check it completely, and only then apply
// it. A file with problems changes nothing; every problem is reported as
// FILE:LINE:COL: message, the same as `voltad --verify-config`.
//
// Some keys take effect at once (live_keys(): log level, request limits,
// access lists, the VRAM guard's thresholds); the rest shape what was built
// at start (the model, the GPU and placement, the engine, the socket) and
// need a restart: a reload that changes them says so and leaves them as
// they were, so the running config never claims what the daemon does not do.
//
// Threads: RunningConfig is thread-safe; one reload runs at a time.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/config_load.h"
#include "daemon/lifecycle.h"

namespace voltad::config {

// Does the key ("server.max_connections") take effect on reload?
bool applies_live(const std::string& key);
// Every key that does, in declaration order.
std::vector<std::string> live_keys();

struct KeyChange {
  std::string key;            // "server.max_connections"
  std::string before, after;  // as YAML
  bool live = false;
};

// The keys whose values differ, in declaration order.
std::vector<KeyChange> changed_keys(const Config& before, const Config& after);

// `after`, with every key that needs a restart put back to `before`'s value.
Config keep_restart_keys(const Config& before, const Config& after);

}  // namespace voltad::config

namespace voltad {

class RunningConfig {
 public:
  // Called with the new config when a reload is accepted, on the reloading
  // thread, in the order added. Everything that could fail was checked
  // before, so an applier must not fail; it takes only the live keys.
  using Apply = std::function<void(const config::Config&)>;

  RunningConfig(std::string path, config::Config initial);

  config::Config get() const;  // a copy
  const std::string& path() const { return path_; }
  void on_apply(Apply apply);
  // What the file alone cannot say, asked of a file that parsed before
  // anything is applied (ServiceControl: account names, the model file):
  // problems refuse the reload as the file's own would; warnings go into
  // the reply's notes as "warning: ...".
  struct MachineCheck {
    std::vector<std::string> problems, warnings;
  };
  using Check = std::function<MachineCheck(const config::Config&)>;
  void set_machine_check(Check check);

  // Reads the file again. Problems: nothing changes, every problem is in the
  // result. Otherwise the live keys are applied and the result's notes say
  // what changed and which changes wait for a restart.
  ControlResult reload();
  // The same, from text instead of the file (tests).
  ControlResult reload_text(const std::string& text);

 private:
  ControlResult apply(const config::LoadResult& loaded);

  const std::string path_;
  mutable std::mutex mu_;
  config::Config current_;
  std::vector<Apply> appliers_;
  Check machine_check_;
};

}  // namespace voltad
