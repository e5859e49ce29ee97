#include "daemon/config_paths.h"

#include <unistd.h>

#include <cstdlib>

namespace voltad::config {

namespace {

std::string first_of(const char* var) {
  const char* v = std::getenv(var);
  if (!v || !*v) return "";
  std::string s = v;
  return s.substr(0, s.find(':'));
}

std::string home() {
  const char* h = std::getenv("HOME");
  return h && *h ? h : "/";
}

}  // namespace

std::string runtime_directory() {
  if (auto d = first_of("RUNTIME_DIRECTORY"); !d.empty()) return d;
  if (geteuid() == 0) return "/run/voltad";
  if (auto x = first_of("XDG_RUNTIME_DIR"); !x.empty()) return x + "/voltad";
  return "/tmp/voltad-" + std::to_string(geteuid());
}

std::string state_directory() {
  if (auto d = first_of("STATE_DIRECTORY"); !d.empty()) return d;
  if (geteuid() == 0) return "/var/lib/voltad";
  return home() + "/.local/state/voltad";
}

std::string configuration_directory() {
  if (auto d = first_of("CONFIGURATION_DIRECTORY"); !d.empty()) return d;
  return "/etc/voltad";
}

std::string default_config_path() { return configuration_directory() + "/voltad.yaml"; }

std::string expand_path(const std::string& path) {
  struct { const char* name; std::string (*value)(); } vars[] = {
      {"${RUNTIME_DIRECTORY}", runtime_directory},
      {"${STATE_DIRECTORY}", state_directory},
      {"${CONFIGURATION_DIRECTORY}", configuration_directory},
      {"${HOME}", home},
  };
  std::string out = path;
  for (auto& v : vars) {
    std::string name = v.name;
    for (size_t pos; (pos = out.find(name)) != std::string::npos;) out.replace(pos, name.size(), v.value());
  }
  return out;
}

}  // namespace voltad::config
