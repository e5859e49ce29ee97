// Planning against real machines' topologies: GPU choice by every spelling,
// node, CPUs, threads, policy, environment, warnings, and clear refusals.
#include <doctest/doctest.h>

#include <sched.h>

#include <cstdlib>

#include "daemon/placement_apply.h"
#include "daemon/placement_plan.h"

using namespace voltad::placement;
using voltad::config::PlacementSection;

namespace {

Topology load(const std::string& name) {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  REQUIRE_MESSAGE(src, "VOLTAD_SOURCE_DIR is not set (run through ctest)");
  auto t = load_topology_xml(std::string(src) + "/tests/fixtures/topologies/" + name);
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  return *t;
}

PlacementSection section(const std::string& gpu = "auto", const std::string& numa = "auto",
                         const std::string& cpus = "auto", const std::string& membind = "bind") {
  PlacementSection s = voltad::config::Config::defaults().placement;
  s.gpu = gpu;
  s.numa = numa;
  s.cpus = cpus;
  s.membind = membind;
  return s;
}

PlacementPlan plan_ok(const Topology& t, const PlacementSection& s, PlanOptions o = {}) {
  auto p = plan_placement(t, s, o);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  return *p;
}

std::string plan_error(const Topology& t, const PlacementSection& s, PlanOptions o = {}) {
  auto p = plan_placement(t, s, o);
  REQUIRE_FALSE(p.ok());
  return p.error().message;
}

std::string env(const PlacementPlan& p, const std::string& key) {
  for (auto& [k, v] : p.environment)
    if (k == key) return v;
  return "<unset>";
}

bool has(const std::vector<std::string>& lines, const std::string& text) {
  for (auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

IndexList list(const char* text) {
  return parse_index_list(text, "test").value();
}

}  // namespace

TEST_CASE("DGX-2: every GPU, by index, bus id and UUID, lands on its own socket's node and cores") {
  Topology t = load("nvidiaDGX2.xml");
  for (const Gpu& g : t.gpus) {
    CAPTURE(g.index);
    unsigned node = g.index < 8 ? 0 : 1;
    IndexList cpus = node == 0 ? IndexList{0, 1} : IndexList{24, 25};
    std::string short_bus = g.pci.bus_id.substr(5);  // "b7:00.0"
    for (const std::string& spec : {std::to_string(g.index), g.pci.bus_id, short_bus, g.uuid}) {
      CAPTURE(spec);
      PlacementPlan p = plan_ok(t, section(spec));
      REQUIRE(p.gpu);
      CHECK(p.gpu->pci.bus_id == g.pci.bus_id);
      CHECK(p.gpu->uuid == g.uuid);
      CHECK(p.nodes == IndexList{node});
      CHECK(p.cpus == cpus);
      CHECK(p.physical_cores == 2);
      CHECK(p.threads == 2);
      CHECK(p.policy == MemoryPolicy::bind);
      CHECK(env(p, "CUDA_DEVICE_ORDER") == "PCI_BUS_ID");
      CHECK(env(p, "CUDA_VISIBLE_DEVICES") == g.uuid);
      CHECK(p.warnings.empty());
      CHECK(p.shortfalls.empty());
      CHECK_FALSE(p.for_this_system);
    }
  }
  // A UUID matches whatever its letters' case.
  PlacementPlan upper = plan_ok(t, section("GPU-27CE06E8-97E8-A3D3-F1E7-F81E0DFF7929"));
  CHECK(upper.gpu->pci.bus_id == "0000:b7:00.0");
  CHECK(plan_ok(t, section()).gpu->pci.bus_id == "0000:34:00.0");  // auto: first in bus order
}

TEST_CASE(
    "2-socket box: the CUDA GPU at 0000:84:00.0 maps to node 1; the AMD device is never chosen") {
  Topology t = load("32em64t-2n8c2t-pci-normalio.xml");
  PlacementPlan p = plan_ok(t, section("0000:84:00.0"));
  CHECK(p.gpu->model == "Tesla K40m");
  CHECK(p.nodes == IndexList{1});
  CHECK(p.cpus == list("8-15"));  // one hardware thread per physical core
  CHECK(p.threads == 8);
  // The other two NVIDIA boards have no CUDA device, so CUDA calls this one 0.
  CHECK(env(p, "CUDA_VISIBLE_DEVICES") == "0");

  // auto skips the boards CUDA does not list.
  PlacementPlan a = plan_ok(t, section("auto"));
  CHECK(a.gpu->pci.bus_id == "0000:84:00.0");
  CHECK(a.gpu_choice.find("that CUDA lists") != std::string::npos);

  std::string amd = plan_error(t, section("0000:84:00.1"));
  CHECK(amd.find("0000:84:00.1 is not an NVIDIA GPU") != std::string::npos);
  CHECK(amd.find("1002:6798") != std::string::npos);
  std::string matrox = plan_error(t, section("05:03.0"));
  CHECK(matrox.find("is not an NVIDIA GPU") != std::string::npos);

  std::string old = plan_error(t, section("0"));
  CHECK(old.find("0000:03:00.0") != std::string::npos);
  CHECK(old.find("no CUDA device") != std::string::npos);
  CHECK(old.find("0000:84:00.0 Tesla K40m") != std::string::npos);

  PlacementPlan all = plan_ok(t, section("2", "auto", "all-threads"));
  CHECK(all.cpus == list("8-15,24-31"));
  CHECK(all.physical_cores == 8);
  CHECK(all.threads == 8);
}

TEST_CASE("H200 machine: one node, the GPU by index; no UUID is known") {
  Topology t = load("h200-1socket.xml");
  PlacementPlan p = plan_ok(t, section());
  CHECK(p.gpu->pci.bus_id == "0000:00:06.0");
  CHECK(p.nodes == IndexList{0});
  CHECK(p.cpus == list("0-15"));
  CHECK(p.threads == 16);
  CHECK(env(p, "CUDA_VISIBLE_DEVICES") == "0");
  std::string uuid = plan_error(t, section("GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b"));
  CHECK(uuid.find("no GPU UUID is known") != std::string::npos);
}

TEST_CASE("bad specs are refused, saying what the machine has") {
  Topology dgx = load("nvidiaDGX2.xml");
  Topology box = load("32em64t-2n8c2t-pci-normalio.xml");

  std::string index = plan_error(dgx, section("16"));
  CHECK(index.find("no NVIDIA GPU with index 16") != std::string::npos);
  CHECK(index.find("16 in PCI bus order") != std::string::npos);
  CHECK(plan_error(dgx, section("99999999999999999999")).find("no NVIDIA GPU with index") !=
        std::string::npos);

  std::string bus = plan_error(dgx, section("0000:99:00.0"));
  CHECK(bus.find("no PCI device at 0000:99:00.0") != std::string::npos);
  std::string nvswitch = plan_error(dgx, section("0000:61:00.0"));
  CHECK(nvswitch.find("is not an NVIDIA GPU") != std::string::npos);
  CHECK(nvswitch.find("class 0680") != std::string::npos);

  std::string uuid = plan_error(dgx, section("GPU-00000000-0000-0000-0000-000000000000"));
  CHECK(uuid.find("no NVIDIA GPU has UUID GPU-00000000") != std::string::npos);
  CHECK(uuid.find("GPU-27ce06e8-97e8-a3d3-f1e7-f81e0dff7929 (0000:b7:00.0)") != std::string::npos);

  std::string node = plan_error(dgx, section("auto", "2"));
  CHECK(node.find("placement.numa: NUMA node 2 does not exist") != std::string::npos);
  CHECK(node.find("its nodes: 0-1") != std::string::npos);
  CHECK(plan_error(dgx, section("auto", "99999999999")).find("does not exist") !=
        std::string::npos);
  CHECK(plan_error(dgx, section("auto", "near")).find("placement.numa: invalid") !=
        std::string::npos);

  std::string cpus = plan_error(box, section("auto", "auto", "0-40"));
  CHECK(cpus.find("placement.cpus: CPUs 32-40 not in") != std::string::npos);
  CHECK(cpus.find("its CPUs: 0-31") != std::string::npos);
  CHECK(plan_error(dgx, section("auto", "auto", "2")).find("CPU 2 not in") != std::string::npos);
  CHECK(plan_error(dgx, section("auto", "auto", "0--1")).find("placement.cpus") == 0);
  CHECK(plan_error(dgx, section("auto", "auto", "auto", "spread")).find("placement.membind") == 0);
  CHECK(plan_error(dgx, section("gpu0")).find("placement.gpu: invalid GPU") == 0);
}

TEST_CASE("placement.numa overrides the GPU's node, with a warning when they differ") {
  Topology t = load("nvidiaDGX2.xml");
  PlacementPlan p = plan_ok(t, section("0", "1"));
  CHECK(p.nodes == IndexList{1});
  CHECK(p.cpus == IndexList{24, 25});
  CHECK(has(p.warnings, "GPU 0000:34:00.0 sits on node 0 but memory goes to node 1"));

  PlacementPlan same = plan_ok(t, section("8", "1"));
  CHECK(same.warnings.empty());

  PlacementPlan off = plan_ok(t, section("8", "off"));
  CHECK(off.nodes.empty());
  CHECK(off.policy == MemoryPolicy::off);
  CHECK(off.cpus == IndexList{0, 1, 24, 25});  // not bound to a node: every core of the machine
  CHECK(off.threads == 4);
  CHECK(off.warnings.empty());  // membind bind, the default: nothing to say
  // A policy named beside numa: off binds nothing: said, not dropped.
  PlacementPlan unbound = plan_ok(t, section("8", "off", "auto", "interleave"));
  CHECK(unbound.policy == MemoryPolicy::off);
  CHECK(
      has(unbound.warnings, "placement.membind interleave has no effect with placement.numa: off"));
}

TEST_CASE("explicit CPUs, thread counts and policies") {
  Topology t = load("32em64t-2n8c2t-pci-normalio.xml");
  PlacementPlan far = plan_ok(t, section("2", "auto", "0-3,8-9"));
  CHECK(far.cpus == list("0-3,8-9"));
  CHECK(far.physical_cores == 6);
  CHECK(has(far.warnings, "CPUs 0-3 that are not on node 1"));

  PlacementPlan smt = plan_ok(t, section("2", "auto", "8,24"));  // both threads of one core
  CHECK(smt.physical_cores == 1);
  CHECK(smt.threads == 1);

  PlacementSection many = section("2");
  many.threads = 12;
  PlacementPlan over = plan_ok(t, many);
  CHECK(over.threads == 12);
  CHECK(has(over.warnings, "placement.threads 12 exceeds the 8 physical cores"));

  CHECK(plan_ok(t, section("2", "auto", "auto", "interleave")).policy == MemoryPolicy::interleave);
  PlacementPlan pref = plan_ok(t, section("2", "auto", "auto", "preferred"));
  CHECK(pref.policy == MemoryPolicy::preferred);
  CHECK(pref.nodes == IndexList{1});
  PlacementPlan none = plan_ok(t, section("2", "auto", "auto", "off"));
  CHECK(none.policy == MemoryPolicy::off);
  CHECK(none.nodes == IndexList{1});  // the CPUs still follow the GPU's node
  CHECK(none.cpus == list("8-15"));
}

TEST_CASE("kernel NUMA balancing on is warned about when memory is bound") {
  Topology t = load("nvidiaDGX2.xml");
  t.numa_balancing = 1;
  CHECK(has(plan_ok(t, section()).warnings, "kernel NUMA balancing is on"));
  CHECK_FALSE(has(plan_ok(t, section("auto", "auto", "auto", "off")).warnings, "NUMA balancing"));
  t.numa_balancing = 0;
  CHECK(plan_ok(t, section()).warnings.empty());
}

TEST_CASE(
    "a machine without NVIDIA GPUs: an error for CUDA, CPUs and memory only for the CPU backend") {
  Topology t = load("nvidiaDGX2.xml");
  t.gpus.clear();
  std::string err = plan_error(t, section());
  CHECK(err.find("no NVIDIA GPU in") != std::string::npos);
  CHECK(err.find("engine.backend: cpu") != std::string::npos);

  PlanOptions cpu_only;
  cpu_only.gpu_required = false;
  PlacementPlan p = plan_ok(t, section(), cpu_only);
  CHECK_FALSE(p.gpu);
  CHECK(p.nodes.empty());  // nothing to follow
  CHECK(p.cpus == IndexList{0, 1, 24, 25});
  CHECK(p.environment.empty());
  PlacementPlan n1 = plan_ok(t, section("auto", "1"), cpu_only);
  CHECK(n1.nodes == IndexList{1});
  CHECK(n1.cpus == IndexList{24, 25});
  // A named GPU is still required to exist.
  CHECK(plan_error(t, section("3"), cpu_only).find("no NVIDIA GPU with index 3") !=
        std::string::npos);
}

TEST_CASE("CPUs and nodes a cgroup hides become shortfalls that strict refuses") {
  Topology t = load("nvidiaDGX2.xml");
  t.allowed_cpus = {0, 1};
  t.allowed_nodes = {0};
  PlacementPlan p = plan_ok(t, section("8"));
  CHECK(has(p.shortfalls, "are all outside this process's allowed CPUs"));
  CHECK(has(p.shortfalls, "node 1 outside this process's allowed memory nodes"));
  CHECK(p.cpus == IndexList{0, 1});
  CHECK(p.nodes.empty());
  CHECK(p.policy == MemoryPolicy::off);

  t.allowed_cpus = {0, 1, 24};
  t.allowed_nodes = {0, 1};
  PlacementPlan partly = plan_ok(t, section("8", "auto", "all-threads"));
  CHECK(partly.cpus == IndexList{24});
  CHECK(has(partly.shortfalls, "CPUs 25 of node 1 are outside"));
  CHECK(partly.nodes == IndexList{1});

  // Strict refuses before touching anything; this plan claims to be for this
  // machine so that only the shortfall stops it.
  p.for_this_system = true;
  cpu_set_t before, after;
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  auto applied = apply_placement(p, true);
  REQUIRE_FALSE(applied.ok());
  CHECK(applied.error().message.find("placement.strict is true") == 0);
  CHECK(applied.error().message.find("outside this process's allowed CPUs") != std::string::npos);
  REQUIRE(sched_getaffinity(0, sizeof after, &after) == 0);
  CHECK(CPU_EQUAL(&before, &after));
}

TEST_CASE("a plan made from another machine's XML is never applied") {
  Topology t = load("h200-1socket.xml");
  PlacementPlan p = plan_ok(t, section());
  auto applied = apply_placement(p, false);
  REQUIRE_FALSE(applied.ok());
  CHECK(applied.error().message.find("not for this machine") != std::string::npos);
  auto buffer = allocate_node_local(0, p);
  CHECK_FALSE(buffer.ok());
}

TEST_CASE("kernel refusals: a warning and what was done instead, or under strict an error") {
  auto live = load_system_topology();
  REQUIRE_MESSAGE(live.ok(), (live.ok() ? "" : live.error().message));
  PlanOptions cpu_only;
  cpu_only.gpu_required = false;
  PlacementSection s = section("auto", std::to_string(live->nodes.front().os_index));
  PlacementPlan p = plan_ok(*live, s, cpu_only);
  REQUIRE(p.for_this_system);
  // Keep the CPUs this process already has, so that applying changes nothing
  // else in this test process; ask for a memory node no machine here has.
  p.cpus = live->allowed_cpus;
  p.nodes = {1000};

  auto strict = apply_placement(p, true);
  REQUIRE_FALSE(strict.ok());
  CHECK(strict.error().message.find("placement.strict is true") == 0);
  CHECK(strict.error().message.find("could not set memory policy bind on node(s) 1000") !=
        std::string::npos);

  auto lenient = apply_placement(p, false);
  REQUIRE(lenient.ok());
  CHECK(has(lenient->warnings, "could not set memory policy bind on node(s) 1000"));
  CHECK(has(lenient->warnings, "memory follows the kernel's default"));
  CHECK(lenient->policy == MemoryPolicy::off);
  CHECK(lenient->cpus_bound);
  CHECK(lenient->cpus == live->allowed_cpus);

  auto unbound = allocate_node_local(3 * 4096 + 1, p);  // rounded up to whole pages
  REQUIRE(unbound.ok());
  CHECK(unbound->nodes().empty());
  CHECK(unbound->size() % 4096 == 0);
  CHECK(unbound->size() >= 3 * 4096 + 1);
  p.strict = true;
  auto refused = allocate_node_local(4096, p);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("could not bind a 4096-byte staging buffer to node(s) 1000") !=
        std::string::npos);

  // A buffer on a real node: bound, touched, every page there; moves keep it.
  p.nodes = {live->nodes.front().os_index};
  auto real = allocate_node_local(1 << 20, p);
  REQUIRE(real.ok());
  CHECK(real->nodes() == p.nodes);
  CHECK(real->pages_off_node() == 0);
  void* data = real->data();
  HostBuffer moved = std::move(*real);
  CHECK(moved.data() == data);
  CHECK(real->data() == nullptr);
  static_cast<volatile char*>(moved.data())[moved.size() - 1] = 1;  // still mapped and writable
}
