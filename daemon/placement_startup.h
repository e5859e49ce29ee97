// Placement at daemon start: plan with this machine's topology and the
// config, apply it, and describe what is in force for /health, /metrics and
// D-Bus. serve() calls place_process() first, from the main thread, before
// any other thread exists and before anything touches CUDA
// (docs/PLACEMENT.md says what is applied and what each warning means).
#pragma once

#include <cstddef>
#include <functional>

#include "daemon/placement_apply.h"
#include "daemon/server_context.h"

namespace voltad::placement {

struct StartupPlacement {
  PlacementPlan plan;  // what was asked for; empty cpus when nothing could be planned
  AppliedPlacement applied;
};

// Plans and applies. Refuses (an error; serve() exits with kExitPlacement)
// when placement.strict is true and anything falls short, and always when
// the config names a GPU, node or CPU this machine does not have: serving on
// another GPU than the one named is worse than not starting. Otherwise
// every shortfall is one warning that says what was done instead; in
// particular an engine that needs a GPU on a machine where hwloc sees none
// (a container without /sys/bus/pci) gets CPUs and memory placed without
// one, and the CUDA backend decides.
Result<StartupPlacement> place_process(const config::Config& config);

// What ServerContext keeps of it.
PlacementSummary summarize(const StartupPlacement& placed);

// Allocation hooks for the engine's pinned host buffers
// (CudaBackendOptions::host_allocate / host_release): each allocation is an
// allocate_node_local() buffer on the plan's node(s), touched, held here
// until released. The hooks share their state and may be copied freely and
// called from any thread. allocate returns nullptr (and logs why) on failure.
struct HostMemoryHooks {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* data)> release;
};
HostMemoryHooks node_local_host_memory(const PlacementPlan& plan);

}  // namespace voltad::placement
