// /proc readers for checking a placement from outside the process.
#include "daemon/placement_observe.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace voltad::placement {

namespace {

std::string pid_dir(int pid, const std::string& proc_root) {
  return proc_root + "/" + (pid == 0 ? std::string("self") : std::to_string(pid));
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

Result<std::vector<TaskPlacement>> read_task_placements(int pid, const std::string& proc_root) {
  namespace fs = std::filesystem;
  std::string dir = pid_dir(pid, proc_root) + "/task";
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return make_error(dir + ": " + ec.message());
  std::vector<TaskPlacement> out;
  for (auto& entry : it) {
    std::ifstream in(entry.path() / "status");
    if (!in) continue;  // the thread ended while we looked
    TaskPlacement t;
    t.tid = std::atoi(entry.path().filename().c_str());
    std::string line;
    while (std::getline(in, line)) {
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon), value = trim(line.substr(colon + 1));
      if (key == "Name") {
        t.name = value;
      } else if (key == "Cpus_allowed_list" || key == "Mems_allowed_list") {
        auto list = parse_index_list(value, entry.path().string() + "/status " + key);
        if (!list) return list.error();
        (key[0] == 'C' ? t.cpus_allowed : t.mems_allowed) = *list;
      }
    }
    out.push_back(std::move(t));
  }
  if (out.empty()) return make_error(dir + ": no threads could be read");
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.tid < b.tid; });
  return out;
}

Result<NumaMapsEntry> parse_numa_maps_line(const std::string& line) {
  std::istringstream in(line);
  std::string address, policy;
  if (!(in >> address >> policy)) return make_error("numa_maps: short line '" + line + "'");
  NumaMapsEntry e;
  try {
    size_t used = 0;
    e.start = std::stoull(address, &used, 16);
    if (used != address.size()) throw std::invalid_argument(address);
  } catch (...) {
    return make_error("numa_maps: '" + address + "' is not an address in '" + line + "'");
  }
  // "prefer (many):0-1" is the one policy spelled with a space.
  if (policy == "prefer" && in.peek() == ' ') {
    std::string more;
    in >> more;
    policy += " " + more;
  }
  size_t colon = policy.find(':');
  e.policy = policy.substr(0, std::min(colon, policy.find('=')));  // drop "=static" / "=relative"
  if (colon != std::string::npos) {
    auto nodes = parse_index_list(policy.substr(colon + 1), "numa_maps policy nodes");
    if (!nodes) return nodes.error();
    e.policy_nodes = *nodes;
  }
  std::string field;
  while (in >> field) {
    size_t eq = field.find('=');
    if (field.size() < 3 || field[0] != 'N' || eq == std::string::npos) continue;
    try {
      e.pages_on_node[static_cast<unsigned>(std::stoul(field.substr(1, eq - 1)))] =
          std::stoull(field.substr(eq + 1));
    } catch (...) {
      // A field we do not know that starts with N: not a node count.
    }
  }
  return e;
}

Result<std::vector<NumaMapsEntry>> read_numa_maps(int pid, const std::string& proc_root) {
  std::string path = pid_dir(pid, proc_root) + "/numa_maps";
  std::ifstream in(path);
  if (!in)
    return make_error(path + ": " + std::strerror(errno) +
                      " (a kernel without NUMA support has none)");
  std::vector<NumaMapsEntry> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto e = parse_numa_maps_line(line);
    if (!e) return make_error(path + ": " + e.error().message);
    out.push_back(std::move(*e));
  }
  return out;
}

std::vector<std::string> check_tasks_against(const std::vector<TaskPlacement>& tasks,
                                             const IndexList& cpus, const IndexList& nodes) {
  std::vector<std::string> out;
  for (auto& t : tasks) {
    std::string who = "thread " + std::to_string(t.tid) + " (" + t.name + ")";
    if (t.cpus_allowed != cpus)
      out.push_back(who + " runs on CPUs " + format_index_list(t.cpus_allowed) +
                    ", the plan says " + format_index_list(cpus));
    if (!contains_all(t.mems_allowed, nodes))
      out.push_back(who + " may use memory nodes " + format_index_list(t.mems_allowed) +
                    " only, the plan needs " + format_index_list(nodes));
  }
  return out;
}

std::vector<std::string> check_mapping_against(const std::vector<NumaMapsEntry>& maps,
                                               const void* start, MemoryPolicy policy,
                                               const IndexList& nodes) {
  auto addr = reinterpret_cast<uint64_t>(start);
  const NumaMapsEntry* e = nullptr;
  for (auto& m : maps)
    if (m.start == addr) e = &m;
  if (!e) return {"no numa_maps entry starts at the buffer's address"};
  std::vector<std::string> out;
  const char* want = policy == MemoryPolicy::preferred ? "prefer" : "bind";
  if (policy != MemoryPolicy::off && (e->policy != want || e->policy_nodes != nodes))
    out.push_back("the buffer's policy is " + e->policy + ":" + format_index_list(e->policy_nodes) +
                  ", the plan says " + want + ":" + format_index_list(nodes));
  if (e->pages_on_node.empty())
    out.push_back("numa_maps shows no pages for the buffer (was it touched?)");
  for (auto& [node, pages] : e->pages_on_node)
    if (!contains_all(nodes, {node}))
      out.push_back(std::to_string(pages) + " of the buffer's pages are on node " +
                    std::to_string(node) + ", the plan says " + format_index_list(nodes));
  return out;
}

}  // namespace voltad::placement
