// Checks for the string-valued config keys whose syntax is richer than a
// list of choices.
#include <sys/un.h>

#include <cctype>
#include <regex>

#include "daemon/config.h"
#include "daemon/config_paths.h"
#include "daemon/placement_topology.h"

namespace voltad::config {

namespace {
bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
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
  if (spec == "auto" || spec == "all-threads") return "";
  // The parser placement uses at start, so that a list --verify-config
  // passes is one the daemon takes (a range that runs backwards, a number
  // past any machine's, were refused only at start).
  auto list = placement::parse_index_list(spec, "invalid CPU list");
  if (list.ok()) return "";
  return list.error().message + " (auto, all-threads, or a list such as 0-7,16)";
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
