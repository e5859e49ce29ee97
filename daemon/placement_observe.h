// Reading back where a process runs and where its memory is, from /proc:
// Cpus_allowed_list and Mems_allowed_list of every thread, and numa_maps.
// The placement probe (tests/daemon/placement_probe.cpp) checks a running
// voltad (or itself) against a plan with these.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/placement_plan.h"

namespace voltad::placement {

struct TaskPlacement {
  int tid = 0;
  std::string name;        // the thread's comm
  IndexList cpus_allowed;  // Cpus_allowed_list: its CPU affinity
  IndexList mems_allowed;  // Mems_allowed_list: its cpuset's memory nodes (not the policy)
};

// /proc/<pid>/task/*/status; pid 0 means this process.
Result<std::vector<TaskPlacement>> read_task_placements(int pid,
                                                        const std::string& proc_root = "/proc");

struct NumaMapsEntry {
  uint64_t start = 0;      // the mapping's first address
  std::string policy;      // "default", "bind", "prefer", "interleave", "local", ...
  IndexList policy_nodes;  // after the ':' of "bind:0-1"
  std::map<unsigned, uint64_t> pages_on_node;  // N<node>=<pages>
};

// One numa_maps line, e.g. "7f5e2c000000 bind:0 anon=256 dirty=256 N0=256 kernelpagesize_kB=4".
Result<NumaMapsEntry> parse_numa_maps_line(const std::string& line);
Result<std::vector<NumaMapsEntry>> read_numa_maps(int pid, const std::string& proc_root = "/proc");

// What differs from the plan: every thread on exactly plan.cpus, and its
// cpuset allowing plan.nodes. Empty when all match.
std::vector<std::string> check_tasks_against(const std::vector<TaskPlacement>& tasks,
                                             const IndexList& cpus, const IndexList& nodes);

// The mapping that starts at `start` has the plan's policy on plan.nodes
// and every page on those nodes. Empty when it does.
std::vector<std::string> check_mapping_against(const std::vector<NumaMapsEntry>& maps,
                                               const void* start, MemoryPolicy policy,
                                               const IndexList& nodes);

}  // namespace voltad::placement
