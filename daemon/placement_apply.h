// Applying a placement plan to this process, and host buffers on the planned
// node.
//
// Order at start-up (docs/ARCHITECTURE.md, "Threads"): load the system
// topology, plan, then apply_placement() from the main thread BEFORE any
// other thread exists and BEFORE anything initialises CUDA. The CPU binding
// covers every thread of the process; the memory policy is the main thread's
// and every thread started later inherits it, which is why it must come first.
// CUDA reads CUDA_VISIBLE_DEVICES once, at its initialisation.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "daemon/placement_plan.h"

namespace voltad::placement {

// What is in force after apply_placement(), read back from the kernel: what
// `voltactl status` and /metrics report.
struct AppliedPlacement {
  std::string gpu_bus_id;  // empty without a GPU
  std::string gpu_uuid;
  std::string gpu_model;
  IndexList cpus;  // the process's CPU affinity
  bool cpus_bound = false;
  IndexList nodes;  // the main thread's memory policy nodes
  MemoryPolicy policy = MemoryPolicy::off;
  unsigned threads = 0;
  std::vector<std::pair<std::string, std::string>> environment;
  std::vector<std::string> warnings;  // each one was logged once
};

// Sets the environment, binds the process's CPUs (hwloc, every thread) and
// the memory policy (set_mempolicy, this thread and its future threads).
// What cannot be done as planned (the plan's shortfalls, a kernel refusal
// such as EPERM in a container, threads that already run): with strict, an
// error and nothing more is changed where it can still be avoided; without,
// one warning each saying what was done instead, and success.
// A plan made from an XML file is refused: it describes another machine.
Result<AppliedPlacement> apply_placement(const PlacementPlan& plan, bool strict);

// Page-aligned host memory whose pages sit on the plan's memory node(s):
// mapped, bound (mbind), then touched page by page so they exist before the
// engine registers them with CUDA as pinned staging memory
// (cudaHostRegister(data(), size(), cudaHostRegisterDefault), and
// cudaHostUnregister(data()) before the buffer dies). Move-only; unmapped on
// destruction.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }              // the request rounded up to whole pages
  const IndexList& nodes() const { return nodes_; }  // bound to; empty: not bound
  size_t pages() const;
  size_t pages_off_node() const { return pages_off_node_; }  // found elsewhere after touching

 private:
  friend Result<HostBuffer> allocate_node_local(size_t bytes, const PlacementPlan& plan);
  void* data_ = nullptr;
  size_t size_ = 0;
  IndexList nodes_;
  size_t pages_off_node_ = 0;
};

// A buffer on plan.nodes (preferred when the plan's policy is preferred,
// else bound). Without nodes in the plan, plain memory touched by this
// thread (first touch: on the node of the bound CPUs). When the kernel
// refuses the binding: an error with plan.strict, else one warning and an
// unbound buffer.
Result<HostBuffer> allocate_node_local(size_t bytes, const PlacementPlan& plan);

}  // namespace voltad::placement
