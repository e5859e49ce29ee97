// Checks for the string-valued config keys whose syntax is richer than a
// list of choices.
#include <sys/un.h>

#include <cctype>
#include <regex>

#include "daemon/config.h"
#include "daemon/config_paths.h"

namespace voltad::config {

namespace {
bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}
// N or N-M, comma-separated. By hand: libstdc++'s regex recursed once a
// character, and a list of some 20 KB overflowed the stack (at a reload,
// the serving daemon's).
bool is_cpu_list(std::string_view spec) {
  size_t start = 0;
  while (true) {
    const size_t comma = spec.find(',', start);
    std::string_view item =
        spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start);
    const size_t dash = item.find('-');
    if (!all_digits(item.substr(0, dash))) return false;
    if (dash != std::string_view::npos && !all_digits(item.substr(dash + 1))) return false;
    if (comma == std::string_view::npos) return true;
    start = comma + 1;
  }
}
}  // namespace

std::string check_gpu_spec(const std::string& spec) {
  static const std::regex bus_id("^([0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]$");
  static const std::regex uuid(
      "^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  if (spec == "auto" || all_digits(spec) || std::regex_match(spec, bus_id) || std::regex_match(spec, uuid))
    return "";
  return "invalid GPU '" + spec + "' (auto, an index such as 0, a PCI bus id such as 0000:b7:00.0, or GPU-<uuid>)";
}

std::string check_numa_spec(const std::string& spec) {
  if (spec == "auto" || spec == "off" || all_digits(spec)) return "";
  return "invalid NUMA node '" + spec + "' (auto, off or a node number)";
}

std::string check_cpus_spec(const std::string& spec) {
  if (spec == "auto" || spec == "all-threads" || is_cpu_list(spec)) return "";
  const std::string shown = spec.size() > 80 ? spec.substr(0, 80) + "..." : spec;
  return "invalid CPU list '" + shown + "' (auto, all-threads, or a list such as 0-7,16)";
}

std::string check_octal_mode(const std::string& mode) {
  static const std::regex octal("^0?[0-7]{3}$");
  if (std::regex_match(mode, octal)) return "";
  return "invalid mode '" + mode + "' (an octal mode such as 0660)";
}

// The name is appended to org.voltad.Daemon1 as one more element, so it
// follows D-Bus's rule for elements (and leaves out '-', which D-Bus
// discourages).
std::string check_instance_name(const std::string& name) {
  static const std::regex element("^[A-Za-z_][A-Za-z0-9_]{0,63}$");
  if (name.empty() || std::regex_match(name, element)) return "";
  return "invalid instance name '" + name +
         "' (letters, digits and _, not starting with a digit, such as gpu0)";
}

// sun_path holds the path and its terminating NUL: a longer path could
// only fail at bind. A path with variables (${RUNTIME_DIRECTORY}, ${HOME})
// is not measured here: they expand in the daemon's environment (the
// unit's user and RuntimeDirectory), which the process that checks the
// config (an admin's --verify-config) need not share; the daemon names
// the path it could not bind (exit 73).
std::string check_socket_path(const std::string& path) {
  constexpr size_t kMax = sizeof(sockaddr_un::sun_path) - 1;
  const std::string limit = std::to_string(kMax);
  if (path.empty())
    return "empty (0 bytes); a Unix socket path is 1 to " + limit +
           " bytes; leave the key out for the default, ${RUNTIME_DIRECTORY}/voltad.sock";
  if (std::string bad = path_variable_problem(path); !bad.empty()) return bad;
  if (path.find("${") != std::string::npos || path.size() <= kMax) return "";
  return "'" + path + "' is " + std::to_string(path.size()) +
         " bytes; a Unix socket path is at most " + limit + "; choose a shorter path";
}

std::string check_model_path(const std::string& path) {
  if (path.empty()) return "must not be empty";
  return path_variable_problem(path);
}

}  // namespace voltad::config
