// Text and JSON renderings of the machine and the plan, and the
// --print-placement mode built from them.
#include "daemon/placement_print.h"

#include <algorithm>
#include <cstdio>

#include "daemon/config_load.h"
#include "daemon/exit_codes.h"

namespace voltad::placement {

namespace {

using nlohmann::json;

std::string hex4(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04x", v);
  return buf;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

// "#3": a GPU's index as the plans print it. (Built by appending: GCC 12
// warns, falsely, on "#" + std::to_string(i) in a Release build.)
std::string gpu_number(int index) {
  std::string s = "#";
  s += std::to_string(index);
  return s;
}

std::string gpu_model(const Gpu& g) {
  return g.model.empty() ? "NVIDIA " + hex4(g.pci.vendor_id) + ":" + hex4(g.pci.device_id)
                         : g.model;
}

unsigned cores_in(const Topology& t, const IndexList& cpus) {
  unsigned n = 0;
  for (auto& c : t.cores)
    if (!intersect(c.cpus, cpus).empty()) ++n;
  return n;
}

std::string nodes_word(const IndexList& nodes) {
  if (nodes.empty()) return "no node";
  return (nodes.size() == 1 ? "node " : "nodes ") + format_index_list(nodes);
}

// "  Label:        value" with continuation lines aligned under the value.
void field(std::string& out, const std::string& label, const std::vector<std::string>& values) {
  const std::string pad(16, ' ');
  std::string head = "  " + label + ":";
  head.resize(pad.size(), ' ');
  if (values.empty()) {
    out += head + "none\n";
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) out += (i == 0 ? head : pad) + values[i] + "\n";
}

json pci_json(const PciDevice& d) {
  return {{"bus_id", d.bus_id},
          {"vendor_id", hex4(d.vendor_id)},
          {"device_id", hex4(d.device_id)},
          {"class", hex4(d.class_id)},
          {"vendor", d.vendor_name},
          {"device", d.device_name}};
}

json gpu_json(const Gpu& g) {
  return {{"index", g.index},
          {"bus_id", g.pci.bus_id},
          {"device_id", hex4(g.pci.device_id)},
          {"class", hex4(g.pci.class_id)},
          {"model", gpu_model(g)},
          {"uuid", g.uuid.empty() ? json(nullptr) : json(g.uuid)},
          {"uuid_source", g.uuid_source},
          {"cuda_listed", g.cuda_listed},
          {"os_devices", g.os_devices},
          {"locality", g.locality},
          {"cpus", format_index_list(g.cpus)},
          {"nodes", g.nodes}};
}

}  // namespace

std::string machine_text(const Topology& t) {
  std::string out = "Machine: " + t.source + " (read with hwloc API " + t.hwloc_version + ")\n";
  for (auto& p : t.packages)
    out += "  Package " + std::to_string(p.os_index) + ": " + (p.model.empty() ? "CPU" : p.model) +
           "; CPUs " + format_index_list(p.cpus) + "; NUMA " + nodes_word(p.nodes) + "\n";
  for (auto& n : t.nodes)
    out += "  NUMA node " + std::to_string(n.os_index) + ": " +
           (n.cpus.empty() ? std::string("no CPUs (memory only)")
                           : "CPUs " + format_index_list(n.cpus) + " (" +
                                 std::to_string(cores_in(t, n.cpus)) + " physical cores)") +
           ", " + gib(n.memory_bytes) + "\n";
  if (t.gpus.empty())
    out += "  NVIDIA GPUs: none\n";
  else
    out += "  NVIDIA GPUs, in PCI bus order:\n";
  for (auto& g : t.gpus) {
    std::string index = gpu_number(g.index);
    index.resize(std::max<size_t>(index.size(), 4), ' ');
    out += "    " + index + g.pci.bus_id + "  " + gpu_model(g) + "  " +
           (g.uuid.empty() ? std::string("UUID unknown") : g.uuid) + "  " + nodes_word(g.nodes);
    if (!g.locality.empty()) out += " (" + g.locality + ", CPUs " + format_index_list(g.cpus) + ")";
    if (t.cuda_inventory_known && !g.cuda_listed) out += "  [no CUDA device]";
    out += "\n";
  }
  for (auto& d : t.other_displays)
    out += "  Never used (not NVIDIA): " + d.bus_id + " " +
           (d.vendor_name.empty() ? "" : d.vendor_name + " ") +
           (d.device_name.empty() ? "" : d.device_name + " ") + "[" + hex4(d.vendor_id) + ":" +
           hex4(d.device_id) + "], class " + hex4(d.class_id) + "\n";
  if (t.allowed_cpus != t.cpus || t.allowed_nodes != t.node_indexes())
    out += "  Allowed to this process: CPUs " + format_index_list(t.allowed_cpus) + "; " +
           nodes_word(t.allowed_nodes) + "\n";
  if (t.numa_balancing)
    out += "  Kernel NUMA balancing: " + std::string(*t.numa_balancing ? "on" : "off") + "\n";
  return out;
}

std::string plan_text(const PlacementPlan& p) {
  std::string out =
      "Plan for " + p.topology_source +
      (p.for_this_system ? ":\n" : " (another machine's topology: nothing can be bound):\n");
  if (p.gpu)
    field(out, "GPU",
          {gpu_number(p.gpu->index) + " " + p.gpu->pci.bus_id + " " + gpu_model(*p.gpu) +
               (p.gpu->uuid.empty() ? "" : ", " + p.gpu->uuid),
           "(" + p.gpu_choice + ")"});
  else
    field(out, "GPU", {p.gpu_choice});
  field(out, "NUMA node",
        {p.nodes.empty() ? "none: memory is not bound to a node (" + p.nodes_choice + ")"
                         : nodes_word(p.nodes) + " (" + p.nodes_choice + ")"});
  field(out, "CPUs", {format_index_list(p.cpus) + " (" + p.cpus_choice + ")"});
  field(out, "Threads",
        {std::to_string(p.threads) + " (on " + std::to_string(p.physical_cores) + " physical core" +
         (p.physical_cores == 1 ? ")" : "s)")});
  field(out, "Memory",
        {p.policy == MemoryPolicy::off
             ? "off: the kernel's default policy (first touch)"
             : std::string(to_string(p.policy)) + " to " + nodes_word(p.nodes)});
  std::vector<std::string> env;
  for (auto& [k, v] : p.environment) env.push_back(k + "=" + v);
  field(out, "Environment", env);
  field(out, "Warnings", p.warnings);
  field(out, "Shortfalls", p.shortfalls);
  if (!p.shortfalls.empty())
    out += "  (placement.strict " +
           std::string(p.strict ? "is true: voltad would refuse to start"
                                : "is false: voltad would warn and do the above") +
           ")\n";
  return out;
}

json machine_json(const Topology& t) {
  json j = {{"source", t.source},
            {"is_this_system", t.is_this_system},
            {"hwloc_api_version", t.hwloc_version},
            {"cpus", format_index_list(t.cpus)},
            {"allowed_cpus", format_index_list(t.allowed_cpus)},
            {"allowed_nodes", t.allowed_nodes},
            {"physical_cores", t.cores.size()},
            {"numa_balancing", t.numa_balancing ? json(*t.numa_balancing) : json(nullptr)},
            {"packages", json::array()},
            {"numa_nodes", json::array()},
            {"gpus", json::array()},
            {"ignored_display_devices", json::array()}};
  for (auto& p : t.packages)
    j["packages"].push_back({{"os_index", p.os_index},
                             {"model", p.model},
                             {"cpus", format_index_list(p.cpus)},
                             {"nodes", p.nodes}});
  for (auto& n : t.nodes)
    j["numa_nodes"].push_back({{"os_index", n.os_index},
                               {"cpus", format_index_list(n.cpus)},
                               {"physical_cores", cores_in(t, n.cpus)},
                               {"memory_bytes", n.memory_bytes}});
  for (auto& g : t.gpus) j["gpus"].push_back(gpu_json(g));
  for (auto& d : t.other_displays) j["ignored_display_devices"].push_back(pci_json(d));
  return j;
}

json plan_json(const PlacementPlan& p) {
  json env = json::object();
  for (auto& [k, v] : p.environment) env[k] = v;
  return {{"topology", p.topology_source},
          {"for_this_system", p.for_this_system},
          {"gpu", p.gpu ? gpu_json(*p.gpu) : json(nullptr)},
          {"gpu_choice", p.gpu_choice},
          {"nodes", p.nodes},
          {"nodes_choice", p.nodes_choice},
          {"cpus", format_index_list(p.cpus)},
          {"cpus_choice", p.cpus_choice},
          {"physical_cores", p.physical_cores},
          {"threads", p.threads},
          {"memory_policy", to_string(p.policy)},
          {"strict", p.strict},
          {"environment", env},
          {"warnings", p.warnings},
          {"shortfalls", p.shortfalls}};
}

json applied_json(const AppliedPlacement& a) {
  json env = json::object();
  for (auto& [k, v] : a.environment) env[k] = v;
  return {{"gpu_bus_id", a.gpu_bus_id.empty() ? json(nullptr) : json(a.gpu_bus_id)},
          {"gpu_uuid", a.gpu_uuid.empty() ? json(nullptr) : json(a.gpu_uuid)},
          {"gpu_model", a.gpu_model},
          {"cpus", format_index_list(a.cpus)},
          {"cpus_bound", a.cpus_bound},
          {"nodes", a.nodes},
          {"memory_policy", to_string(a.policy)},
          {"threads", a.threads},
          {"environment", env},
          {"warnings", a.warnings}};
}

namespace {

// --print-placement looks at placement only; the daemon itself still
// requires model.path.
bool about_model_path(const config::Problem& p) {
  return p.message == "missing required key 'model.path'" ||
         p.message.rfind("model.path: must not be empty", 0) == 0;
}

}  // namespace

PrintPlacementOutput render_placement(const PrintPlacementRequest& req) {
  PrintPlacementOutput r;
  config::Config cfg = config::Config::defaults();
  if (!req.config_path.empty()) {
    auto loaded = config::load_config_file(req.config_path);
    size_t problems = 0;
    for (auto& p : loaded.problems)
      if (!about_model_path(p)) r.err += p.to_string() + "\n", ++problems;
    if (problems) {
      r.err += "voltad: " + req.config_path + " is invalid; no placement printed\n";
      r.exit_code = kExitConfig;
      return r;
    }
    cfg = loaded.config;
  }
  if (!req.gpu.empty()) {
    if (std::string bad = config::check_gpu_spec(req.gpu); !bad.empty()) {
      r.err = "voltad: --gpu: " + bad + "\n";
      r.exit_code = kExitUsage;
      return r;
    }
    cfg.placement.gpu = req.gpu;
  }

  // This machine's topology, or another machine's file: sysexits' codes for
  // a file that cannot be read (66) or parsed (65), not placement.strict's 74.
  auto fail = [&](const Error& e, int code) {
    r.err = "voltad: " + e.message + "\n";
    r.exit_code = code;
    return r;
  };
  Result<Topology> topology = make_error("no topology");
  if (req.topology_xml.empty()) {
    topology = load_system_topology();
    if (!topology) return fail(topology.error(), kExitPlacement);
  } else {
    auto xml = read_topology_xml(req.topology_xml);
    if (!xml) return fail(xml.error(), kExitNoTopology);
    topology = load_topology_xml_text(*xml, req.topology_xml);
    if (!topology) return fail(topology.error(), kExitTopologyData);
  }
  // The daemon's own plan: with placement.gpu auto and no GPU in hwloc's
  // view, CPUs and memory without one (a shortfall, shown); a GPU, node or
  // CPU the config names and the machine lacks is 74, as at start.
  auto plan = plan_for_engine(*topology, cfg);
  if (!plan) {
    r.err = "voltad: " + plan.error().message + "\n";
    r.exit_code = kExitPlacement;
  } else if (plan->strict && !plan->shortfalls.empty()) {
    // What the daemon would refuse at start (apply_placement), with its code.
    r.err =
        "voltad: placement.strict is true and the plan falls short (Shortfalls): voltad would "
        "refuse to start (exit 74)\n";
    r.exit_code = kExitPlacement;
  }
  if (req.json) {
    json j = {{"machine", machine_json(*topology)},
              {"plan", plan ? plan_json(*plan) : json(nullptr)}};
    if (!plan) j["error"] = plan.error().message;
    r.out = j.dump(2) + "\n";
  } else {
    r.out =
        machine_text(*topology) + "\n" + (plan ? plan_text(*plan) : "Plan: none (see the error)\n");
    if (plan && plan->for_this_system)
      r.out += "(--print-placement binds nothing; voltad applies this plan when it starts)\n";
  }
  return r;
}

int print_placement(const PrintPlacementRequest& request) {
  PrintPlacementOutput r = render_placement(request);
  std::fputs(r.out.c_str(), stdout);
  std::fputs(r.err.c_str(), stderr);
  return r.exit_code;
}

}  // namespace voltad::placement
