// Planning: from the machine and the `placement` config section, which GPU,
// which NUMA node(s), which CPUs, how many worker threads, which memory
// policy and which environment. Pure: nothing is bound here
// (placement_apply.h does that), so the same plan can be printed, tested
// against other machines' topologies, and applied.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config.h"
#include "daemon/placement_topology.h"

namespace voltad::placement {

enum class MemoryPolicy { off, bind, preferred, interleave };
const char* to_string(MemoryPolicy p);

struct PlanOptions {
  // engine.backend cpu serves without a GPU; then `placement.gpu: auto` on a
  // machine with none plans CPUs and memory only.
  bool gpu_required = true;
};

struct PlacementPlan {
  std::string topology_source;   // "this machine" or an XML file
  bool for_this_system = false;  // only such a plan may be applied
  bool strict = false;           // placement.strict

  std::optional<Gpu> gpu;  // none only when !gpu_required
  std::string gpu_choice;  // why this GPU: "placement.gpu auto: first NVIDIA GPU in PCI bus order"

  IndexList nodes;              // memory goes here; empty: no NUMA binding
  std::string nodes_choice;     // "the GPU's node", "placement.numa: 0", ...
  IndexList cpus;               // the process is bound to these; never empty
  std::string cpus_choice;      // "one per physical core of node 1", ...
  unsigned physical_cores = 0;  // distinct cores among `cpus`
  unsigned threads = 0;         // worker threads
  MemoryPolicy policy = MemoryPolicy::off;

  // Set before CUDA starts: CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES.
  std::vector<std::pair<std::string, std::string>> environment;

  // Advice: the plan is what was asked for, but probably not what is wanted
  // (NUMA balancing on, more threads than cores, GPU far from the memory).
  std::vector<std::string> warnings;
  // The plan could not follow the config on this machine and says what it
  // does instead (a cgroup excludes the CPUs, ...). placement.strict refuses
  // to start on any of these.
  std::vector<std::string> shortfalls;
};

Result<PlacementPlan> plan_placement(const Topology& topology,
                                     const config::PlacementSection& placement,
                                     const PlanOptions& options = {});

// The plan the daemon places itself by (place_process) and --print-placement
// shows: plan_placement() for the config's placement and backend, except
// that an engine needing a GPU, with placement.gpu auto, on a machine where
// hwloc sees none (a container without /sys/bus/pci, where CUDA may still
// see one) gets CPUs and memory planned without one, with a shortfall that
// says so. An error: the config names a GPU, node or CPU this machine lacks.
Result<PlacementPlan> plan_for_engine(const Topology& topology, const config::Config& config);

// The GPU a placement.gpu spec names: auto, an index in PCI bus order, a PCI
// bus id or GPU-<uuid>. With `optional`, auto on a machine without NVIDIA
// GPUs gives nullopt instead of an error.
Result<std::optional<Gpu>> find_gpu(const Topology& topology, const std::string& spec,
                                    bool optional);

// What CUDA_VISIBLE_DEVICES must say so that CUDA shows exactly this GPU:
// its UUID when known, else its position in CUDA's PCI bus order.
std::string cuda_visible_devices(const Topology& topology, const Gpu& gpu);

}  // namespace voltad::placement
