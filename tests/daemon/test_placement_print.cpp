// --print-placement's text and JSON, and its exit codes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "daemon/exit_codes.h"
#include "daemon/placement_print.h"

using namespace voltad::placement;
using nlohmann::json;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  REQUIRE_MESSAGE(src, "VOLTAD_SOURCE_DIR is not set (run through ctest)");
  return std::string(src) + "/tests/fixtures/topologies/" + name;
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/voltad-placement-XXXXXX.yaml";
    int fd = mkstemps(tmpl, 5);
    REQUIRE(fd >= 0);
    close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

PrintPlacementOutput render(const std::string& xml, const std::string& gpu = "",
                            bool as_json = false, const std::string& config = "") {
  PrintPlacementRequest r;
  r.topology_xml = xml.empty() ? "" : fixture(xml);
  r.gpu = gpu;
  r.json = as_json;
  r.config_path = config;
  return render_placement(r);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("text: the machine (packages, nodes, GPUs, devices never used) and the plan") {
  auto r = render("32em64t-2n8c2t-pci-normalio.xml", "0000:84:00.0");
  CHECK(r.exit_code == voltad::kExitOk);
  CHECK(r.err.empty());
  CAPTURE(r.out);
  CHECK(contains(
      r.out, "Package 1: Intel(R) Xeon(R) CPU E5-2650 0 @ 2.00GHz; CPUs 8-15,24-31; NUMA node 1"));
  CHECK(contains(r.out, "NUMA node 1: CPUs 8-15,24-31 (8 physical cores), 32.0 GiB"));
  CHECK(contains(
      r.out, "#2  0000:84:00.0  Tesla K40m  UUID unknown  node 1 (Package P#1, CPUs 8-15,24-31)"));
  CHECK(contains(r.out, "#0  0000:03:00.0"));
  CHECK(contains(r.out, "[no CUDA device]"));
  CHECK(contains(r.out, "Never used (not NVIDIA): 0000:84:00.1 Advanced Micro Devices"));
  CHECK(contains(r.out, "another machine's topology: nothing can be bound"));
  CHECK(contains(r.out, "GPU:          #2 0000:84:00.0 Tesla K40m"));
  CHECK(contains(r.out, "NUMA node:    node 1 (the GPU's node)"));
  CHECK(contains(r.out, "CPUs:         8-15 (one per physical core of node 1)"));
  CHECK(contains(r.out, "Threads:      8 (on 8 physical cores)"));
  CHECK(contains(r.out, "Memory:       bind to node 1"));
  CHECK(contains(r.out, "CUDA_VISIBLE_DEVICES=0"));
  CHECK(contains(r.out, "Warnings:     none"));
}

TEST_CASE("JSON: the same facts, for scripts") {
  auto r = render("nvidiaDGX2.xml", "GPU-27ce06e8-97e8-a3d3-f1e7-f81e0dff7929", true);
  REQUIRE(r.exit_code == voltad::kExitOk);
  json j = json::parse(r.out);
  auto& m = j.at("machine");
  CHECK(m.at("is_this_system") == false);
  REQUIRE(m.at("gpus").size() == 16);
  CHECK(m.at("gpus")[8].at("bus_id") == "0000:b7:00.0");
  CHECK(m.at("gpus")[8].at("nodes") == json::array({1}));
  CHECK(m.at("gpus")[8].at("cpus") == "24-25");
  CHECK(m.at("gpus")[8].at("model") == "Tesla V100-SXM3-32GB-H");
  CHECK(m.at("numa_nodes")[1].at("memory_bytes") == 811737923584ull);
  CHECK(m.at("packages").size() == 2);
  auto& p = j.at("plan");
  CHECK(p.at("gpu").at("index") == 8);
  CHECK(p.at("gpu").at("uuid") == "GPU-27ce06e8-97e8-a3d3-f1e7-f81e0dff7929");
  CHECK(p.at("nodes") == json::array({1}));
  CHECK(p.at("cpus") == "24-25");
  CHECK(p.at("threads") == 2);
  CHECK(p.at("memory_policy") == "bind");
  CHECK(p.at("environment").at("CUDA_VISIBLE_DEVICES") ==
        "GPU-27ce06e8-97e8-a3d3-f1e7-f81e0dff7929");
  CHECK(p.at("environment").at("CUDA_DEVICE_ORDER") == "PCI_BUS_ID");
  CHECK(p.at("warnings").empty());

  auto other = render("32em64t-2n8c2t-pci-normalio.xml", "", true);
  json k = json::parse(other.out);
  REQUIRE(k.at("machine").at("ignored_display_devices").size() == 2);
  CHECK(k.at("machine").at("ignored_display_devices")[1].at("vendor_id") == "1002");
  CHECK(k.at("machine").at("gpus")[2].at("uuid").is_null());
}

TEST_CASE(
    "errors: bad --gpu, a non-NVIDIA device, a missing or invalid topology file, a bad config") {
  auto syntax = render("nvidiaDGX2.xml", "first");
  CHECK(syntax.exit_code == voltad::kExitUsage);
  CHECK(contains(syntax.err, "--gpu: invalid GPU 'first'"));

  auto amd = render("32em64t-2n8c2t-pci-normalio.xml", "0000:84:00.1", true);
  CHECK(amd.exit_code == voltad::kExitPlacement);
  CHECK(contains(amd.err, "0000:84:00.1 is not an NVIDIA GPU"));
  json j = json::parse(amd.out);  // the machine is still shown
  CHECK(j.at("plan").is_null());
  CHECK(contains(j.at("error").get<std::string>(), "not an NVIDIA GPU"));
  CHECK(j.at("machine").at("gpus").size() == 3);

  // 74 is placement.strict's code: a bad --topology-xml file has sysexits' own.
  auto missing = render("no-such-file.xml");
  CHECK(missing.exit_code == voltad::kExitNoTopology);
  CHECK(contains(missing.err, "no-such-file.xml: cannot read the topology XML"));
  CHECK(missing.out.empty());
  TempFile garbage("this is not XML");
  PrintPlacementRequest request;
  request.topology_xml = garbage.path;
  auto invalid = render_placement(request);
  CHECK(invalid.exit_code == voltad::kExitTopologyData);
  CHECK(contains(invalid.err, garbage.path + ": hwloc could not read this topology XML"));
  CHECK(invalid.out.empty());

  TempFile bad("placement:\n  numa: nearby\n  cpu: 3\n");
  auto config = render("nvidiaDGX2.xml", "", false, bad.path);
  CHECK(config.exit_code == voltad::kExitConfig);
  CHECK(contains(config.err, "placement.numa: invalid NUMA node 'nearby'"));
  CHECK(contains(config.err, "placement.cpu"));
  CHECK_FALSE(contains(config.err, "model.path"));  // not needed to print a placement
  CHECK(config.out.empty());
}

TEST_CASE("a config file without model.path drives the plan") {
  TempFile cfg(
      "placement:\n  gpu: 3\n  numa: 1\n  cpus: all-threads\n  membind: interleave\n  threads: "
      "6\n");
  auto r = render("nvidiaDGX2.xml", "", true, cfg.path);
  REQUIRE_MESSAGE(r.exit_code == voltad::kExitOk, r.err);
  json p = json::parse(r.out).at("plan");
  CHECK(p.at("gpu").at("bus_id") == "0000:3b:00.0");
  CHECK(p.at("nodes") == json::array({1}));
  CHECK(p.at("memory_policy") == "interleave");
  CHECK(p.at("threads") == 6);
  CHECK(p.at("warnings").size() == 2);  // GPU on node 0, and 6 threads on 2 cores

  auto overridden = render("nvidiaDGX2.xml", "12", true, cfg.path);  // --gpu wins over the file
  CHECK(json::parse(overridden.out).at("plan").at("gpu").at("index") == 12);
}

// The CUDA backend on a machine without a GPU: the plan is printed with the
// shortfall (the daemon would stop at the engine, 69); under
// placement.strict the daemon refuses at placement, and so does this (74).
TEST_CASE("this machine without a GPU: a shortfall under CUDA, 74 under strict; a CPU plan") {
  auto cuda = render("");
  CHECK(contains(cuda.out, "Machine: this machine"));
  if (!contains(cuda.out, "no NVIDIA GPU in this machine")) {
    MESSAGE("this machine has an NVIDIA GPU; the no-GPU path is covered with XML topologies");
    return;
  }
  CHECK(cuda.exit_code == voltad::kExitOk);
  CHECK(contains(cuda.out, "voltad stops there (exit 69)"));
  TempFile strict("placement:\n  strict: true\n");
  for (bool as_json : {false, true}) {
    auto refused = render("", "", as_json, strict.path);
    CHECK(refused.exit_code == voltad::kExitPlacement);
    CHECK(contains(refused.err, "voltad would refuse to start (exit 74)"));
  }
  TempFile cpu("engine:\n  backend: cpu\nplacement:\n  numa: 0\n");
  auto r = render("", "", true, cpu.path);
  REQUIRE_MESSAGE(r.exit_code == voltad::kExitOk, r.err);
  json p = json::parse(r.out).at("plan");
  CHECK(p.at("gpu").is_null());
  CHECK(p.at("for_this_system") == true);
  CHECK(p.at("nodes") == json::array({0}));
}

TEST_CASE("applied placements render for status and metrics") {
  AppliedPlacement a;
  a.gpu_bus_id = "0000:b7:00.0";
  a.cpus = {24, 25};
  a.cpus_bound = true;
  a.nodes = {1};
  a.policy = MemoryPolicy::bind;
  a.threads = 2;
  a.environment = {{"CUDA_VISIBLE_DEVICES", "GPU-x"}};
  json j = applied_json(a);
  CHECK(j.at("gpu_bus_id") == "0000:b7:00.0");
  CHECK(j.at("gpu_uuid").is_null());
  CHECK(j.at("cpus") == "24-25");
  CHECK(j.at("memory_policy") == "bind");
  CHECK(j.at("environment").at("CUDA_VISIBLE_DEVICES") == "GPU-x");
}
