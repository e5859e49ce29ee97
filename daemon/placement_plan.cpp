// Choosing GPU, node, CPUs, threads, memory policy and environment.
// Every refusal names the key, the value, and what the machine has instead.
#include "daemon/placement_plan.h"

#include <algorithm>
#include <cctype>

namespace voltad::placement {

const char* to_string(MemoryPolicy p) {
  switch (p) {
    case MemoryPolicy::off:
      return "off";
    case MemoryPolicy::bind:
      return "bind";
    case MemoryPolicy::preferred:
      return "preferred";
    case MemoryPolicy::interleave:
      return "interleave";
  }
  return "?";
}

namespace {

bool all_digits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string hex4(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04x", v);
  return buf;
}

// "0: 0000:03:00.0 Tesla M2075, 1: ..." for error messages.
std::string gpu_roster(const Topology& t) {
  if (t.gpus.empty()) return "none";
  std::string out;
  for (auto& g : t.gpus) {
    if (!out.empty()) out += ", ";
    out += std::to_string(g.index) + ": " + g.pci.bus_id;
    if (!g.model.empty()) out += " " + g.model;
  }
  return out;
}

std::string describe_pci(const PciDevice& d) {
  std::string who = d.vendor_name.empty() ? "vendor 0x" + hex4(d.vendor_id) : d.vendor_name;
  if (!d.device_name.empty()) who += " " + d.device_name;
  return who + " [" + hex4(d.vendor_id) + ":" + hex4(d.device_id) + "], PCI class " +
         hex4(d.class_id);
}

std::string no_gpu_message(const Topology& t) {
  std::string m =
      "no NVIDIA GPU in " + t.source +
      ": hwloc found no PCI device of vendor 0x10de with class 0300 (VGA) or 0302 (3D controller)";
  if (t.pci_devices.empty())
    m += "; it saw no PCI devices at all, so it may lack PCI access here (no /sys/bus/pci in a "
         "container?)";
  for (auto& d : t.other_displays)
    m += "; " + d.bus_id + " is " + describe_pci(d) + ", which voltad never uses";
  return m + ". To serve without a GPU set engine.backend: cpu";
}

Result<std::optional<Gpu>> by_index(const Topology& t, const std::string& spec) {
  unsigned long i = 0;
  try {
    i = std::stoul(spec);
  } catch (...) {
    i = t.gpus.size();
  }
  if (i >= t.gpus.size())
    return make_error("placement.gpu: no NVIDIA GPU with index " + spec + " in " + t.source + " (" +
                      std::to_string(t.gpus.size()) + " in PCI bus order: " + gpu_roster(t) + ")");
  return std::optional<Gpu>(t.gpus[i]);
}

Result<std::optional<Gpu>> by_bus_id(const Topology& t, const std::string& spec,
                                     const std::string& bus_id) {
  for (auto& g : t.gpus)
    if (g.pci.bus_id == bus_id) return std::optional<Gpu>(g);
  for (auto& d : t.pci_devices)
    if (d.bus_id == bus_id)
      return make_error(
          "placement.gpu: " + spec + " is not an NVIDIA GPU: it is " + describe_pci(d) +
          ". voltad serves only NVIDIA GPUs (vendor 0x10de, class 0300 or 0302); NVIDIA GPUs in " +
          t.source + ": " + gpu_roster(t));
  return make_error("placement.gpu: no PCI device at " + spec + " in " + t.source +
                    "; its NVIDIA GPUs: " + gpu_roster(t));
}

Result<std::optional<Gpu>> by_uuid(const Topology& t, const std::string& spec) {
  std::string known;
  for (auto& g : t.gpus) {
    if (g.uuid.empty()) continue;
    if (lower(g.uuid) == lower(spec)) return std::optional<Gpu>(g);
    known += (known.empty() ? "" : ", ") + g.uuid + " (" + g.pci.bus_id + ")";
  }
  if (known.empty())
    return make_error("placement.gpu: cannot find " + spec + ": no GPU UUID is known in " +
                      t.source +
                      " (hwloc has no NVML/CUDA device with one and the NVIDIA driver's "
                      "/proc/driver/nvidia/gpus gave none); name the GPU by index or PCI bus id: " +
                      gpu_roster(t));
  return make_error("placement.gpu: no NVIDIA GPU has UUID " + spec + " in " + t.source +
                    "; known: " + known);
}

// Union of the nodes' CPUs.
IndexList cpus_of_nodes(const Topology& t, const IndexList& nodes) {
  IndexList out;
  for (unsigned n : nodes)
    if (auto* node = t.node(n)) out.insert(out.end(), node->cpus.begin(), node->cpus.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// One CPU per physical core: the first of each core's CPUs that is in `from`.
IndexList one_per_core(const Topology& t, const IndexList& from) {
  IndexList out;
  for (auto& core : t.cores) {
    IndexList mine = intersect(core.cpus, from);
    if (!mine.empty()) out.push_back(mine.front());
  }
  std::sort(out.begin(), out.end());
  return out;
}

unsigned count_cores(const Topology& t, const IndexList& cpus) {
  unsigned n = 0;
  for (auto& core : t.cores)
    if (!intersect(core.cpus, cpus).empty()) ++n;
  return n;
}

std::string node_words(const IndexList& nodes) {
  return (nodes.size() == 1 ? "node " : "nodes ") + format_index_list(nodes);
}

Result<MemoryPolicy> parse_policy(const std::string& s) {
  if (s == "bind") return MemoryPolicy::bind;
  if (s == "preferred") return MemoryPolicy::preferred;
  if (s == "interleave") return MemoryPolicy::interleave;
  if (s == "off") return MemoryPolicy::off;
  return make_error("placement.membind: invalid policy '" + s +
                    "' (bind, preferred, interleave or off)");
}

// Memory nodes from placement.numa.
Status choose_nodes(const Topology& t, const config::PlacementSection& cfg, PlacementPlan& p) {
  if (cfg.numa == "off") {
    p.nodes_choice = "placement.numa: off";
    return {};
  }
  if (cfg.numa == "auto") {
    if (!p.gpu) {
      p.nodes_choice = "no GPU to follow (placement.numa: auto)";
      return {};
    }
    // Memory-only nodes (HBM, CXL) near the GPU are not where its staging
    // buffers and the CPU's working memory belong.
    for (unsigned n : p.gpu->nodes)
      if (auto* node = t.node(n); node && !node->cpus.empty()) p.nodes.push_back(n);
    if (p.nodes.empty()) {
      p.nodes_choice = "unknown";
      p.shortfalls.push_back("hwloc does not say which NUMA node GPU " + p.gpu->pci.bus_id +
                             " is attached to; memory is left to the kernel's default policy");
      return {};
    }
    p.nodes_choice = "the GPU's " + std::string(p.nodes.size() == 1 ? "node" : "nodes");
    return {};
  }
  if (!all_digits(cfg.numa))
    return make_error("placement.numa: invalid value '" + cfg.numa +
                      "' (auto, off or a node number)");
  unsigned long n = cfg.numa.size() > 6 ? ~0ul : std::stoul(cfg.numa);
  if (n > ~0u || !t.node(static_cast<unsigned>(n)))
    return make_error("placement.numa: NUMA node " + cfg.numa + " does not exist in " + t.source +
                      " (its nodes: " + format_index_list(t.node_indexes()) + ")");
  p.nodes = {static_cast<unsigned>(n)};
  p.nodes_choice = "placement.numa: " + cfg.numa;
  return {};
}

// CPUs from placement.cpus, within the node's (or GPU's, or machine's) CPUs.
Status choose_cpus(const Topology& t, const config::PlacementSection& cfg, PlacementPlan& p) {
  IndexList scope;
  std::string scope_name;
  if (!p.nodes.empty()) {
    scope = cpus_of_nodes(t, p.nodes);
    scope_name = node_words(p.nodes);
  }
  if (scope.empty() && p.gpu && cfg.numa != "off" && !p.gpu->cpus.empty()) {
    scope = p.gpu->cpus;
    scope_name = "the GPU's " + p.gpu->locality;
  }
  if (scope.empty()) {
    if (!p.nodes.empty())
      p.warnings.push_back(node_words(p.nodes) +
                           " has no CPUs of its own (a memory-only node); "
                           "the CPUs are chosen from the whole machine");
    scope = t.cpus;
    scope_name = "the machine";
  }
  IndexList allowed = t.allowed_cpus.empty() ? t.cpus : t.allowed_cpus;
  auto fall_back = [&](const std::string& why) {
    p.shortfalls.push_back(why + "; the process stays on its allowed CPUs " +
                           format_index_list(allowed));
    p.cpus = cfg.cpus == "auto" ? one_per_core(t, allowed) : allowed;
    p.cpus_choice = "the allowed CPUs (see shortfalls)";
  };

  if (cfg.cpus == "auto" || cfg.cpus == "all-threads") {
    IndexList usable = intersect(scope, allowed);
    if (usable.empty()) {
      fall_back("the CPUs of " + scope_name + " (" + format_index_list(scope) +
                ") are all outside this process's allowed CPUs (a cgroup cpuset limits them)");
      return {};
    }
    if (IndexList hidden = subtract(scope, allowed); !hidden.empty())
      p.shortfalls.push_back(
          "CPUs " + format_index_list(hidden) + " of " + scope_name +
          " are outside this process's allowed CPUs (a cgroup cpuset limits them); "
          "the plan uses the rest");
    bool all = cfg.cpus == "all-threads";
    p.cpus = all ? usable : one_per_core(t, usable);
    p.cpus_choice = (all ? "every hardware thread of " : "one per physical core of ") + scope_name;
    return {};
  }

  auto wanted = parse_index_list(cfg.cpus, "placement.cpus");
  if (!wanted) return wanted.error();
  if (IndexList unknown = subtract(*wanted, t.cpus); !unknown.empty())
    return make_error("placement.cpus: CPU" + std::string(unknown.size() == 1 ? " " : "s ") +
                      format_index_list(unknown) + " not in " + t.source +
                      " (its CPUs: " + format_index_list(t.cpus) + ")");
  IndexList usable = intersect(*wanted, allowed);
  if (usable.empty()) {
    fall_back("placement.cpus " + cfg.cpus + " lies entirely outside this process's allowed CPUs");
    return {};
  }
  if (IndexList hidden = subtract(*wanted, allowed); !hidden.empty())
    p.shortfalls.push_back("placement.cpus: CPUs " + format_index_list(hidden) +
                           " are outside this process's allowed CPUs; the plan uses " +
                           format_index_list(usable));
  if (scope_name != "the machine")
    if (IndexList far = subtract(usable, scope); !far.empty())
      p.warnings.push_back("placement.cpus lists CPUs " + format_index_list(far) +
                           " that are not on " + scope_name + " (" + format_index_list(scope) +
                           "): threads there reach the memory and the GPU across the socket link");
  p.cpus = usable;
  p.cpus_choice = "placement.cpus: " + cfg.cpus;
  return {};
}

}  // namespace

Result<std::optional<Gpu>> find_gpu(const Topology& t, const std::string& spec, bool optional) {
  if (spec == "auto") {
    // When hwloc knows which GPUs the driver lists, a board CUDA cannot use
    // (an old Tesla beside a supported one) is skipped.
    for (auto& g : t.gpus)
      if (g.cuda_listed || !t.cuda_inventory_known) return std::optional<Gpu>(g);
    if (optional) return std::optional<Gpu>();
    return make_error("placement.gpu auto: " + no_gpu_message(t));
  }
  if (all_digits(spec)) return by_index(t, spec);
  if (auto bus = normalize_bus_id(spec)) return by_bus_id(t, spec, *bus);
  if (lower(spec).rfind("gpu-", 0) == 0) return by_uuid(t, spec);
  return make_error(
      "placement.gpu: invalid GPU '" + spec +
      "' (auto, an index such as 0, a PCI bus id such as 0000:b7:00.0, or GPU-<uuid>)");
}

std::string cuda_visible_devices(const Topology& t, const Gpu& gpu) {
  if (!gpu.uuid.empty()) return gpu.uuid;
  // With CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA numbers the devices it lists in
  // bus order; boards it does not list take no number.
  unsigned n = 0;
  for (auto& g : t.gpus) {
    if (g.pci.bus_id == gpu.pci.bus_id) break;
    if (g.cuda_listed || !t.cuda_inventory_known) ++n;
  }
  return std::to_string(n);
}

Result<PlacementPlan> plan_placement(const Topology& t, const config::PlacementSection& cfg,
                                     const PlanOptions& options) {
  PlacementPlan p;
  p.topology_source = t.source;
  p.for_this_system = t.is_this_system;
  p.strict = cfg.strict;

  auto gpu = find_gpu(t, cfg.gpu, !options.gpu_required);
  if (!gpu) return gpu.error();
  p.gpu = *gpu;
  if (p.gpu) {
    p.gpu_choice = cfg.gpu == "auto" ? "placement.gpu auto: the first NVIDIA GPU in PCI bus order"
                                     : "placement.gpu: " + cfg.gpu;
    if (cfg.gpu == "auto" && p.gpu->index > 0)
      p.gpu_choice += " that CUDA lists (boards before it have no CUDA device)";
    // CUDA numbers only the boards it lists, so no CUDA_VISIBLE_DEVICES
    // value could show this one, and any number would show another.
    if (t.cuda_inventory_known && !p.gpu->cuda_listed) {
      std::string listed;
      for (auto& g : t.gpus)
        if (g.cuda_listed) listed += (listed.empty() ? "" : ", ") + g.pci.bus_id + " " + g.model;
      return make_error(
          "placement.gpu: " + cfg.gpu + " is " + p.gpu->pci.bus_id + " (" + p.gpu->model +
          "), which has no CUDA device in " + t.source +
          ": the NVIDIA driver does not list it, so CUDA cannot use it. GPUs CUDA lists: " +
          listed);
    }
  } else {
    p.gpu_choice = "none (no NVIDIA GPU; engine.backend needs none)";
  }

  auto policy = parse_policy(cfg.membind);
  if (!policy) return policy.error();
  if (Status s = choose_nodes(t, cfg, p); !s) return s.error();
  if (IndexList hidden = subtract(p.nodes, t.allowed_nodes);
      !hidden.empty() && !t.allowed_nodes.empty()) {
    p.shortfalls.push_back(
        node_words(hidden) + " outside this process's allowed memory nodes (" +
        format_index_list(t.allowed_nodes) + "; a cgroup cpuset limits them)" +
        (hidden.size() == p.nodes.size() ? ": memory is not bound" : ": using the rest"));
    p.nodes = intersect(p.nodes, t.allowed_nodes);
  }
  p.policy = p.nodes.empty() ? MemoryPolicy::off : *policy;
  if (cfg.numa == "off" && *policy != MemoryPolicy::bind && *policy != MemoryPolicy::off)
    p.warnings.push_back("placement.membind " + cfg.membind +
                         " has no effect with placement.numa: off: memory is not bound");
  if (p.policy == MemoryPolicy::preferred && p.nodes.size() > 1) {
    p.nodes_choice += "; preferred takes one node, the first of " + format_index_list(p.nodes);
    p.nodes.resize(1);
  }

  if (Status s = choose_cpus(t, cfg, p); !s) return s.error();
  p.physical_cores = std::max(1u, count_cores(t, p.cpus));
  p.threads = cfg.threads > 0 ? static_cast<unsigned>(cfg.threads) : p.physical_cores;
  if (p.threads > p.physical_cores)
    p.warnings.push_back("placement.threads " + std::to_string(p.threads) + " exceeds the " +
                         std::to_string(p.physical_cores) + " physical cores of CPUs " +
                         format_index_list(p.cpus) + ": threads will share cores");

  if (p.gpu && !p.nodes.empty() && !p.gpu->nodes.empty() &&
      intersect(p.nodes, p.gpu->nodes).empty())
    p.warnings.push_back("GPU " + p.gpu->pci.bus_id + " sits on " + node_words(p.gpu->nodes) +
                         " but memory goes to " + node_words(p.nodes) + " (" + p.nodes_choice +
                         "): every copy between host and GPU crosses the socket link");
  if (t.numa_balancing.value_or(0) != 0 && p.policy != MemoryPolicy::off)
    p.warnings.push_back("kernel NUMA balancing is on (/proc/sys/kernel/numa_balancing = " +
                         std::to_string(*t.numa_balancing) + "): it may move voltad's memory off " +
                         node_words(p.nodes) + "; turn it off with sysctl kernel.numa_balancing=0");

  if (p.gpu) {
    p.environment.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    p.environment.emplace_back("CUDA_VISIBLE_DEVICES", cuda_visible_devices(t, *p.gpu));
  }
  return p;
}

Result<PlacementPlan> plan_for_engine(const Topology& topology, const config::Config& config) {
  const config::PlacementSection& want = config.placement;
  PlanOptions options;
  options.gpu_required = config.engine.backend != "cpu";
  auto plan = plan_placement(topology, want, options);
  if (plan || !options.gpu_required || want.gpu != "auto") return plan;
  auto gpu = find_gpu(topology, "auto", /*optional=*/true);
  if (!gpu || gpu->has_value()) return plan;  // a GPU is there: the first error stands
  const std::string why = plan.error().message;
  PlanOptions cpu_only;
  cpu_only.gpu_required = false;
  plan = plan_placement(topology, want, cpu_only);
  if (plan) {
    plan->gpu_choice =
        "none (no NVIDIA GPU, though engine.backend " + config.engine.backend + " needs one)";
    plan->shortfalls.push_back(
        "engine.backend is " + config.engine.backend + ", but " + why +
        ". CPUs and memory are placed without a GPU and CUDA_VISIBLE_DEVICES is left as it is; "
        "the engine then finds no GPU, and voltad stops there (exit 69)");
  }
  return plan;
}

}  // namespace voltad::placement
