// Binding: CPUs through hwloc (it walks every thread of the process), the
// memory policy and staging buffers through the kernel's NUMA calls
// (libnuma's numaif.h), whose Linux semantics are exact: MPOL_BIND,
// MPOL_PREFERRED and MPOL_INTERLEAVE mean what placement.membind says.
#include "daemon/placement_apply.h"

#include <hwloc.h>
#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "daemon/log.h"

namespace voltad::placement {

namespace {

std::string errno_text(int e) {
  return std::strerror(e);
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// A node mask in the layout the kernel's NUMA calls read, with the maxnode
// they want (one more than the bits provided: the kernel reads maxnode - 1).
struct NodeMask {
  std::vector<unsigned long> words;
  unsigned long maxnode = 0;
  explicit NodeMask(const IndexList& nodes, unsigned at_least = 64) {
    unsigned top = nodes.empty() ? 0 : nodes.back();
    constexpr unsigned bits = 8 * sizeof(unsigned long);
    words.assign(std::max(top + 1, at_least) / bits + 1, 0);
    for (unsigned n : nodes) words[n / bits] |= 1ul << (n % bits);
    maxnode = words.size() * bits + 1;
  }
  IndexList list() const {
    IndexList out;
    constexpr unsigned bits = 8 * sizeof(unsigned long);
    for (unsigned i = 0; i < words.size() * bits; ++i)
      if (words[i / bits] >> (i % bits) & 1) out.push_back(i);
    return out;
  }
};

int kernel_mode(MemoryPolicy p) {
  switch (p) {
    case MemoryPolicy::bind:
      return MPOL_BIND;
    case MemoryPolicy::preferred:
      return MPOL_PREFERRED;
    case MemoryPolicy::interleave:
      return MPOL_INTERLEAVE;
    case MemoryPolicy::off:
      break;
  }
  return MPOL_DEFAULT;
}

MemoryPolicy from_kernel_mode(int mode) {
  switch (mode & 0xff) {  // high bits are MPOL_F_* flags
    case MPOL_BIND:
      return MemoryPolicy::bind;
    case MPOL_PREFERRED:
      return MemoryPolicy::preferred;
    case MPOL_INTERLEAVE:
      return MemoryPolicy::interleave;
    default:
      return MemoryPolicy::off;
  }
}

int thread_count() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "Threads:") {
      int n = 0;
      in >> n;
      return n;
    }
    in.ignore(1 << 16, '\n');
  }
  return 1;
}

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

// Binds every thread of the process to `cpus` and reads the binding back.
// Returns "" or what went wrong.
std::string bind_cpus(const IndexList& cpus, IndexList& bound) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return "hwloc could not start: " + errno_text(errno);
  std::unique_ptr<hwloc_topology, TopologyDeleter> topo(raw);
  // Binding needs no devices; the plain CPU topology loads in a millisecond.
  if (hwloc_topology_load(raw) != 0)
    return "hwloc could not read this machine: " + errno_text(errno);
  Bitmap want(hwloc_bitmap_alloc()), got(hwloc_bitmap_alloc());
  for (unsigned c : cpus) hwloc_bitmap_set(want.get(), c);
  std::string problem;
  if (hwloc_set_cpubind(raw, want.get(), HWLOC_CPUBIND_PROCESS) != 0)
    problem =
        "could not bind the process to CPUs " + format_index_list(cpus) + ": " + errno_text(errno);
  if (hwloc_get_cpubind(raw, got.get(), HWLOC_CPUBIND_PROCESS) == 0)
    for (int i = hwloc_bitmap_first(got.get()); i >= 0; i = hwloc_bitmap_next(got.get(), i))
      bound.push_back(static_cast<unsigned>(i));
  if (problem.empty() && bound != cpus)
    problem = "asked the kernel for CPUs " + format_index_list(cpus) + " but the process runs on " +
              format_index_list(bound);
  return problem;
}

// The calling thread's memory policy, for this thread and those it creates.
std::string bind_memory(MemoryPolicy policy, const IndexList& nodes, AppliedPlacement& out) {
  NodeMask mask(nodes);
  std::string problem;
  if (set_mempolicy(kernel_mode(policy), mask.words.data(), mask.maxnode) != 0)
    problem = "could not set memory policy " + std::string(to_string(policy)) + " on node(s) " +
              format_index_list(nodes) + ": " + errno_text(errno) +
              "; memory follows the kernel's default (first touch, near the CPU that touches it)";
  int mode = 0;
  NodeMask now({}, 1024);  // get_mempolicy wants room for every possible node
  if (get_mempolicy(&mode, now.words.data(), now.maxnode, nullptr, 0) == 0) {
    out.policy = from_kernel_mode(mode);
    if (out.policy != MemoryPolicy::off) out.nodes = now.list();
  }
  return problem;
}

void log_summary(const AppliedPlacement& a) {
  std::string gpu =
      a.gpu_bus_id.empty() ? "no GPU" : "GPU " + a.gpu_bus_id + " (" + a.gpu_model + ")";
  std::string mem = a.policy == MemoryPolicy::off ? "memory: kernel default"
                                                  : "memory: " + std::string(to_string(a.policy)) +
                                                        " to node(s) " + format_index_list(a.nodes);
  spdlog::info("placement: {}; CPUs {}{}; {}; {} worker threads", gpu, format_index_list(a.cpus),
               a.cpus_bound ? "" : " (not bound)", mem, a.threads);
}

}  // namespace

Result<AppliedPlacement> apply_placement(const PlacementPlan& plan, bool strict) {
  if (!plan.for_this_system)
    return make_error("the placement plan was made for " + plan.topology_source +
                      ", not for this machine; plan with the system topology to apply it");
  std::vector<std::string> problems = plan.shortfalls;
  if (int n = thread_count(); n > 1 && plan.policy != MemoryPolicy::off)
    problems.push_back(std::to_string(n) +
                       " threads already run: the memory policy covers only the "
                       "calling thread and the threads it starts from now on");
  auto refuse = [&](const std::vector<std::string>& why) {
    return make_error(
        "placement.strict is true and the placement cannot be applied as configured: " +
        join(why, "; "));
  };
  // Refuse before changing anything when the plan already falls short.
  if (strict && !problems.empty()) return refuse(problems);

  AppliedPlacement a;
  a.threads = plan.threads;
  a.warnings = plan.warnings;
  if (plan.gpu) {
    a.gpu_bus_id = plan.gpu->pci.bus_id;
    a.gpu_uuid = plan.gpu->uuid;
    a.gpu_model = plan.gpu->model;
  }
  std::vector<std::string> runtime;
  for (auto& [key, value] : plan.environment) {
    const char* old = std::getenv(key.c_str());
    if (old && value != old)
      a.warnings.push_back(key + " was '" + old + "' in the environment; voltad set it to '" +
                           value + "' so that CUDA shows exactly the chosen GPU");
    if (setenv(key.c_str(), value.c_str(), 1) != 0)
      runtime.push_back("could not set " + key + ": " + errno_text(errno));
    a.environment.emplace_back(key, value);
  }

  if (std::string p = bind_cpus(plan.cpus, a.cpus); !p.empty()) runtime.push_back(p);
  a.cpus_bound = a.cpus == plan.cpus;
  if (plan.policy != MemoryPolicy::off)
    if (std::string p = bind_memory(plan.policy, plan.nodes, a); !p.empty()) runtime.push_back(p);
  if (strict && !runtime.empty()) return refuse(runtime);
  problems.insert(problems.end(), runtime.begin(), runtime.end());

  for (auto& p : problems) a.warnings.push_back(p);
  for (auto& w : a.warnings) spdlog::warn("placement: {}", w);
  log_summary(a);
  return a;
}

HostBuffer::HostBuffer(HostBuffer&& o) noexcept {
  *this = std::move(o);
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    nodes_ = std::move(o.nodes_);
    pages_off_node_ = std::exchange(o.pages_off_node_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() {
  if (data_) munmap(data_, size_);
}

size_t HostBuffer::pages() const {
  return size_ / static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

Result<HostBuffer> allocate_node_local(size_t bytes, const PlacementPlan& plan) {
  if (bytes == 0) return make_error("a staging buffer of 0 bytes was asked for");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page)
    return make_error("a staging buffer of " + std::to_string(bytes) + " bytes is too large");
  HostBuffer buf;
  buf.size_ = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, buf.size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return make_error("cannot map " + std::to_string(buf.size_) +
                      " bytes for a staging buffer: " + errno_text(errno));
  buf.data_ = p;

  // Bind before the first touch: pages are placed when they are first written.
  if (plan.policy != MemoryPolicy::off && !plan.nodes.empty()) {
    int mode = plan.policy == MemoryPolicy::preferred ? MPOL_PREFERRED : MPOL_BIND;
    NodeMask mask(plan.nodes);
    if (mbind(p, buf.size_, mode, mask.words.data(), mask.maxnode, 0) == 0) {
      buf.nodes_ = plan.nodes;
    } else {
      std::string why = "could not bind a " + std::to_string(buf.size_) +
                        "-byte staging buffer to node(s) " + format_index_list(plan.nodes) + ": " +
                        errno_text(errno);
      if (plan.strict) return make_error("placement.strict is true and " + why);
      // Every later buffer would fail the same way: say it once.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        spdlog::warn("placement: {}; staging buffers are placed by first touch instead", why);
    }
  }
  auto* bytes_ptr = static_cast<volatile unsigned char*>(p);
  for (size_t off = 0; off < buf.size_; off += page) bytes_ptr[off] = 0;

  if (!buf.nodes_.empty()) {
    // Ask where the pages went; a preferred node that is full spills.
    constexpr size_t kBatch = 1024;
    std::vector<void*> addrs;
    std::vector<int> status;
    for (size_t first = 0; first < buf.pages(); first += kBatch) {
      size_t n = std::min(kBatch, buf.pages() - first);
      addrs.resize(n);
      status.assign(n, -1);
      for (size_t i = 0; i < n; ++i) addrs[i] = static_cast<char*>(p) + (first + i) * page;
      if (move_pages(0, n, addrs.data(), nullptr, status.data(), 0) != 0) break;
      for (int s : status)
        if (s < 0 || !contains_all(buf.nodes_, {static_cast<unsigned>(s)})) ++buf.pages_off_node_;
    }
    if (buf.pages_off_node_)
      spdlog::warn(
          "placement: {} of {} staging pages are not on node(s) {} (the node is short of memory?)",
          buf.pages_off_node_, buf.pages(), format_index_list(buf.nodes_));
  }
  return buf;
}

}  // namespace voltad::placement
