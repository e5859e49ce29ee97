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

namespace {

struct PathVariable {
  const char* name;
  std::string (*value)();
};
const PathVariable kPathVariables[] = {
    {"${RUNTIME_DIRECTORY}", runtime_directory},
    {"${STATE_DIRECTORY}", state_directory},
    {"${CONFIGURATION_DIRECTORY}", configuration_directory},
    {"${HOME}", home},
};

}  // namespace

std::string path_variable_problem(const std::string& path) {
  for (size_t pos = path.find("${"); pos != std::string::npos; pos = path.find("${", pos + 2)) {
    const size_t end = path.find('}', pos);
    if (end == std::string::npos)
      return "'${' at byte " + std::to_string(pos) + " has no closing '}'";
    const std::string name = path.substr(pos, end - pos + 1);
    bool known = false;
    for (const PathVariable& v : kPathVariables) known |= name == v.name;
    if (!known)
      return "unknown variable " + name +
             " (known: ${RUNTIME_DIRECTORY}, ${STATE_DIRECTORY}, ${CONFIGURATION_DIRECTORY}, "
             "${HOME})";
  }
  return "";
}

std::string expand_path(const std::string& path) {
  std::string out = path;
  for (const PathVariable& v : kPathVariables) {
    std::string name = v.name;
    for (size_t pos; (pos = out.find(name)) != std::string::npos;) out.replace(pos, name.size(), v.value());
  }
  return out;
}

}  // namespace voltad::config
