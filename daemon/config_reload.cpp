#include "daemon/config_reload.h"

#include <algorithm>
#include <array>

#include "engine/result.h"

namespace voltad::config {

namespace {

// What a reload applies. Everything else is read once at start. A key added
// to config.h is restart-only until someone applies it live and lists it here.
constexpr std::array kLiveKeys = {
    "server.allow_users",
    "server.allow_groups",
    "server.admin_groups",
    "server.max_connections",
    "server.max_connections_per_user",
    "server.max_header_bytes",
    "server.max_body_bytes",
    "server.read_timeout",
    "server.write_timeout",
    "server.stream_keepalive",
    "server.max_requests_per_user",
    "server.shutdown_grace",
    "memory.vram_fraction",
    "memory.monitor_interval",
    "memory.hysteresis",
    "log.level",
};

// Every key of a config, in declaration order: its name, its value as YAML,
// and where it lives (so a second pass over another config can copy it).
struct KeyWalker {
  struct Key {
    std::string name;
    std::string yaml;
    const void* field;
  };
  std::vector<Key> keys;
  std::string section_name;

  template <class S>
  void section(S& s, const char* name, const char*) {
    section_name = name;
    s.visit(*this);
  }
  template <class T>
  void operator()(T& field, const char* name, const T&, const char*, const Check<T>& = {}) {
    keys.push_back({section_name + "." + name, to_yaml(field), &field});
  }
};

// Walks a second config in the same order as a KeyWalker did, putting back
// the restart-only keys' values.
struct RestartKeyRestorer {
  const std::vector<KeyWalker::Key>& from;
  size_t index = 0;
  std::string section_name;

  template <class S>
  void section(S& s, const char* name, const char*) {
    section_name = name;
    s.visit(*this);
  }
  template <class T>
  void operator()(T& field, const char* name, const T&, const char*, const Check<T>& = {}) {
    const KeyWalker::Key& k = from.at(index++);
    VOLTAD_CHECK(k.name == section_name + "." + name);  // both walks visit the same declarations
    if (!applies_live(k.name)) field = *static_cast<const T*>(k.field);
  }
};

std::vector<KeyWalker::Key> walk(Config& c) {
  KeyWalker w;
  c.visit(w);
  return std::move(w.keys);
}

}  // namespace

bool applies_live(const std::string& key) {
  return std::find(kLiveKeys.begin(), kLiveKeys.end(), key) != kLiveKeys.end();
}

std::vector<std::string> live_keys() {
  std::vector<std::string> out;
  for (const std::string& k : all_key_names())
    if (applies_live(k)) out.push_back(k);
  return out;
}

std::vector<KeyChange> changed_keys(const Config& before, const Config& after) {
  Config a = before, b = after;
  auto ka = walk(a), kb = walk(b);
  std::vector<KeyChange> out;
  for (size_t i = 0; i < ka.size(); ++i)
    if (ka[i].yaml != kb[i].yaml)
      out.push_back({ka[i].name, ka[i].yaml, kb[i].yaml, applies_live(ka[i].name)});
  return out;
}

Config keep_restart_keys(const Config& before, const Config& after) {
  Config old = before, next = after;
  auto keys = walk(old);
  RestartKeyRestorer r{keys, 0, {}};
  next.visit(r);
  return next;
}

}  // namespace voltad::config

namespace voltad {

RunningConfig::RunningConfig(std::string path, config::Config initial)
    : path_(std::move(path)), current_(std::move(initial)) {}

config::Config RunningConfig::get() const {
  std::lock_guard lock(mu_);
  return current_;
}

void RunningConfig::on_apply(Apply apply) {
  std::lock_guard lock(mu_);
  appliers_.push_back(std::move(apply));
}

ControlResult RunningConfig::reload() {
  return apply(config::load_config_file(path_));
}

ControlResult RunningConfig::reload_text(const std::string& text) {
  return apply(config::load_config_text(text, path_));
}

void RunningConfig::set_machine_check(Check check) {
  std::lock_guard lock(mu_);
  machine_check_ = std::move(check);
}

ControlResult RunningConfig::apply(const config::LoadResult& loaded) {
  std::lock_guard lock(mu_);
  auto refuse = [&](std::vector<std::string> problems) {
    std::string summary = "reload refused: " + path_ + " has " + std::to_string(problems.size()) +
                          " problem" + (problems.size() == 1 ? "" : "s") +
                          "; the running configuration is unchanged";
    return ControlResult::failure(std::move(summary), std::move(problems));
  };
  if (!loaded.ok()) {
    std::vector<std::string> problems;
    for (const auto& p : loaded.problems) problems.push_back(p.to_string());
    return refuse(std::move(problems));
  }
  MachineCheck machine = machine_check_ ? machine_check_(loaded.config) : MachineCheck{};
  if (!machine.problems.empty()) return refuse(std::move(machine.problems));
  auto changes = config::changed_keys(current_, loaded.config);
  std::vector<std::string> notes;
  int applied = 0, kept = 0;
  for (const auto& c : changes) {
    if (c.live) {
      notes.push_back(c.key + ": " + c.before + " -> " + c.after + " (applied)");
      ++applied;
    } else {
      notes.push_back(c.key + ": " + c.before + " -> " + c.after +
                      " needs a restart (systemctl restart); still " + c.before);
      ++kept;
    }
  }
  for (auto& w : machine.warnings) notes.push_back("warning: " + w);
  current_ = config::keep_restart_keys(current_, loaded.config);
  for (auto& a : appliers_) a(current_);
  std::string summary = "reloaded " + path_ + ": ";
  if (changes.empty())
    summary += "nothing changed";
  else
    summary += std::to_string(applied) + " change" + (applied == 1 ? "" : "s") + " applied";
  if (kept) summary += ", " + std::to_string(kept) + " waiting for a restart";
  return ControlResult::success(std::move(summary), std::move(notes));
}

}  // namespace voltad
