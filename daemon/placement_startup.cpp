// The daemon's start-up placement: the policy around plan_placement() and
// apply_placement() (what refuses, what only warns), and the node-local
// host memory the CUDA backend pins.
#include "daemon/placement_startup.h"

#include <sched.h>

#include <map>
#include <memory>
#include <mutex>

#include "daemon/log.h"

namespace voltad::placement {

namespace {

IndexList current_affinity() {
  IndexList out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// Nothing could be planned (hwloc cannot read the machine): the process
// stays where it was started, and says so.
StartupPlacement unplaced(const std::string& why, const config::PlacementSection& want) {
  StartupPlacement p;
  p.applied.cpus = current_affinity();
  p.applied.threads = static_cast<unsigned>(want.threads);
  p.applied.warnings.push_back(why +
                               "; voltad runs where it was started: no CPU or memory binding, "
                               "CUDA_VISIBLE_DEVICES left as it is");
  spdlog::warn("placement: {}", p.applied.warnings.back());
  return p;
}

}  // namespace

Result<StartupPlacement> place_process(const config::Config& cfg) {
  const config::PlacementSection& want = cfg.placement;
  auto topology = load_system_topology();
  if (!topology) {
    if (want.strict) return make_error("placement.strict is true and " + topology.error().message);
    return unplaced(topology.error().message, want);
  }

  // strict refuses a shortfall (no GPU in hwloc's view, ...) in apply_placement().
  auto plan = plan_for_engine(*topology, cfg);
  // The config names a GPU, node or CPUs this machine lacks: never serve on
  // something else.
  if (!plan)
    return make_error(plan.error().message +
                      " (voltad --print-placement shows this machine and the plan)");

  auto applied = apply_placement(*plan, want.strict);
  if (!applied) return applied.error();
  return StartupPlacement{std::move(*plan), std::move(*applied)};
}

PlacementSummary summarize(const StartupPlacement& placed) {
  const AppliedPlacement& a = placed.applied;
  PlacementSummary s;
  s.gpu_bus_id = a.gpu_bus_id;
  s.gpu_uuid = a.gpu_uuid;
  s.gpu_model = a.gpu_model;
  if (placed.plan.gpu && placed.plan.gpu->nodes.size() == 1)
    s.gpu_numa_node = static_cast<int32_t>(placed.plan.gpu->nodes[0]);
  if (a.policy != MemoryPolicy::off) {
    s.numa_nodes = format_index_list(a.nodes);
    if (a.nodes.size() == 1) s.numa_node = static_cast<int32_t>(a.nodes[0]);
  }
  s.memory_policy = to_string(a.policy);
  s.cpus = format_index_list(a.cpus);
  s.cpus_bound = a.cpus_bound;
  s.threads = a.threads;
  s.warnings = a.warnings;
  return s;
}

HostMemoryHooks node_local_host_memory(const PlacementPlan& plan) {
  struct Buffers {
    PlacementPlan plan;
    std::mutex mu;
    std::map<void*, HostBuffer> held;
  };
  auto buffers = std::make_shared<Buffers>();
  buffers->plan = plan;
  HostMemoryHooks hooks;
  hooks.allocate = [buffers](size_t bytes) -> void* {
    auto buffer = allocate_node_local(bytes, buffers->plan);
    if (!buffer) {
      spdlog::error("placement: {}", buffer.error().message);
      return nullptr;
    }
    void* data = buffer->data();
    std::lock_guard lock(buffers->mu);
    buffers->held.emplace(data, std::move(*buffer));
    return data;
  };
  hooks.release = [buffers](void* data) {
    std::lock_guard lock(buffers->mu);
    buffers->held.erase(data);
  };
  return hooks;
}

}  // namespace voltad::placement
