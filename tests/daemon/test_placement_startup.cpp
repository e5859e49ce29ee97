// The daemon's start-up placement policy (what refuses, what is applied),
// the summary /health and /metrics report, and the node-local host memory
// hooks the CUDA backend pins. Runs on whatever machine CI is.
#include <doctest/doctest.h>

#include <sched.h>
#include <unistd.h>

#include <cstdint>

#include "daemon/placement_observe.h"
#include "daemon/placement_startup.h"

using namespace voltad;
using namespace voltad::placement;

namespace {

IndexList affinity() {
  IndexList out;
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  for (unsigned c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// A node this process may allocate on (Mems_allowed_list of its cpuset).
unsigned allowed_node() {
  auto tasks = read_task_placements(0);
  REQUIRE(tasks.ok());
  REQUIRE(!tasks->front().mems_allowed.empty());
  return tasks->front().mems_allowed.front();
}

config::Config cpu_config() {
  config::Config cfg = config::Config::defaults();
  cfg.engine.backend = "cpu";
  return cfg;
}

}  // namespace

TEST_CASE("summarize: one bound node is numa_node; none or several are -1") {
  StartupPlacement p;
  p.applied.gpu_bus_id = "0000:b7:00.0";
  p.applied.gpu_model = "Tesla V100-SXM3-32GB-H";
  p.applied.cpus = {24, 25, 26, 27};
  p.applied.cpus_bound = true;
  p.applied.policy = MemoryPolicy::bind;
  p.applied.nodes = {1};
  p.applied.threads = 4;
  p.applied.warnings = {"kernel NUMA balancing is on"};
  p.plan.gpu = Gpu{};
  p.plan.gpu->nodes = {1};
  PlacementSummary s = summarize(p);
  CHECK(s.gpu_bus_id == "0000:b7:00.0");
  CHECK(s.gpu_numa_node == 1);
  CHECK(s.numa_node == 1);
  CHECK(s.numa_nodes == "1");
  CHECK(s.memory_policy == "bind");
  CHECK(s.cpus == "24-27");
  CHECK(s.cpus_bound);
  CHECK(s.threads == 4);
  CHECK(s.warnings.size() == 1);

  p.applied.policy = MemoryPolicy::interleave;
  p.applied.nodes = {0, 1};
  s = summarize(p);
  CHECK(s.numa_node == -1);
  CHECK(s.numa_nodes == "0-1");

  p.applied.policy = MemoryPolicy::off;
  p.applied.nodes.clear();
  p.plan.gpu.reset();
  s = summarize(p);
  CHECK(s.numa_node == -1);
  CHECK(s.numa_nodes.empty());
  CHECK(s.gpu_numa_node == -1);
  CHECK(s.memory_policy == "off");
}

TEST_CASE("place_process: a config naming a node this machine lacks is refused, strict or not") {
  config::Config cfg = cpu_config();
  cfg.placement.numa = "999";
  for (bool strict : {false, true}) {
    cfg.placement.strict = strict;
    auto placed = place_process(cfg);
    REQUIRE_FALSE(placed.ok());
    CHECK(placed.error().message.find("NUMA node 999 does not exist") != std::string::npos);
    CHECK(placed.error().message.find("--print-placement") != std::string::npos);
  }
}

TEST_CASE("place_process: an engine that needs a GPU where hwloc sees none") {
  auto topology = load_system_topology();
  REQUIRE(topology.ok());
  if (!topology->gpus.empty()) {
    MESSAGE("this machine has an NVIDIA GPU; the no-GPU cases are not reachable here");
    return;
  }
  config::Config cfg = config::Config::defaults();
  cfg.engine.backend = "cuda";
  cfg.placement.numa = "off";  // nothing to bind but CPUs
  cfg.placement.strict = true;
  auto refused = place_process(cfg);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("placement.strict is true") != std::string::npos);
  CHECK(refused.error().message.find("no NVIDIA GPU") != std::string::npos);

  cfg.placement.strict = false;
  auto placed = place_process(cfg);
  REQUIRE(placed.ok());
  CHECK_FALSE(placed->plan.gpu.has_value());
  CHECK(placed->plan.environment.empty());  // CUDA_VISIBLE_DEVICES left alone
  bool said = false;
  for (auto& w : placed->applied.warnings)
    said |= w.find("placed without a GPU") != std::string::npos;
  CHECK(said);
}

TEST_CASE("place_process: an explicit CPU binds this process there and reports it") {
  IndexList before = affinity();
  config::Config cfg = cpu_config();
  cfg.placement.cpus = std::to_string(before.back());
  cfg.placement.numa = std::to_string(allowed_node());
  cfg.placement.membind = "preferred";
  cfg.placement.threads = 3;
  auto placed = place_process(cfg);
  REQUIRE(placed.ok());
  CHECK(affinity() == IndexList{before.back()});
  PlacementSummary s = summarize(*placed);
  CHECK(s.cpus == std::to_string(before.back()));
  CHECK(s.cpus_bound);
  CHECK(s.threads == 3);
  CHECK(s.memory_policy == "preferred");
  CHECK(s.numa_node == static_cast<int32_t>(allowed_node()));
}

TEST_CASE("node_local_host_memory: page-aligned, writable, bound to the plan's node") {
  PlacementPlan plan;
  plan.policy = MemoryPolicy::bind;
  plan.nodes = {allowed_node()};
  HostMemoryHooks hooks = node_local_host_memory(plan);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = hooks.allocate(3 * page + 1);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % page == 0);
  static_cast<unsigned char*>(p)[3 * page] = 7;  // the rounded-up last page exists

  auto maps = read_numa_maps(0);
  REQUIRE(maps.ok());
  auto diffs = check_mapping_against(*maps, p, plan.policy, plan.nodes);
  for (auto& d : diffs) MESSAGE(d);
  CHECK(diffs.empty());

  // The copies share their buffers; release unmaps, so the mapping is gone.
  HostMemoryHooks copy = hooks;
  copy.release(p);
  auto after = read_numa_maps(0);
  REQUIRE(after.ok());
  bool still_there = false;
  for (auto& m : *after) still_there |= m.start == reinterpret_cast<uintptr_t>(p);
  CHECK_FALSE(still_there);

  CHECK(hooks.allocate(0) == nullptr);  // logged, not thrown
}
