// Discovery against real machines' hwloc topologies (tests/fixtures/topologies)
// and this machine, plus the list and bus-id syntax placement relies on.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "daemon/placement_topology.h"

using namespace voltad::placement;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  REQUIRE_MESSAGE(src, "VOLTAD_SOURCE_DIR is not set (run through ctest)");
  return std::string(src) + "/tests/fixtures/topologies/" + name;
}

Topology load(const std::string& name) {
  auto t = load_topology_xml(fixture(name));
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  return *t;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/voltad-placement-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("index lists read and print the kernel's list syntax") {
  CHECK(format_index_list({}) == "");
  CHECK(format_index_list({3}) == "3");
  CHECK(format_index_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  auto l = parse_index_list("16,0-3,2,8", "placement.cpus");
  REQUIRE(l.ok());
  CHECK(*l == IndexList{0, 1, 2, 3, 8, 16});
  CHECK(format_index_list(*l) == "0-3,8,16");

  auto backwards = parse_index_list("7-3", "placement.cpus");
  REQUIRE_FALSE(backwards.ok());
  CHECK(backwards.error().message.find("runs backwards") != std::string::npos);
  auto word = parse_index_list("0-x", "placement.cpus");
  REQUIRE_FALSE(word.ok());
  CHECK(word.error().message.find("placement.cpus: '0-x'") == 0);
  CHECK_FALSE(parse_index_list("1,,2", "l").ok());
  CHECK_FALSE(parse_index_list("", "l").ok());
  auto huge = parse_index_list("0-4000000000", "placement.cpus");
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().message.find("beyond any machine") != std::string::npos);

  CHECK(intersect({1, 2, 3}, {2, 3, 4}) == IndexList{2, 3});
  CHECK(subtract({1, 2, 3}, {2}) == IndexList{1, 3});
  CHECK(contains_all({1, 2, 3}, {1, 3}));
  CHECK_FALSE(contains_all({1, 2, 3}, {4}));
}

TEST_CASE("PCI bus ids are normalised to hwloc's spelling") {
  CHECK(normalize_bus_id("0000:b7:00.0") == "0000:b7:00.0");
  CHECK(normalize_bus_id("b7:00.0") == "0000:b7:00.0");
  CHECK(normalize_bus_id("00000000:B7:00.0") == "0000:b7:00.0");  // nvidia-smi
  CHECK(normalize_bus_id("0001:03:1f.7") == "0001:03:1f.7");
  CHECK_FALSE(normalize_bus_id("b7:00").has_value());
  CHECK_FALSE(normalize_bus_id("0000:b7:00.8").has_value());
  CHECK_FALSE(normalize_bus_id("GPU-1234").has_value());
}

TEST_CASE("hwloc 3.0 XML is rewritten for hwloc 2.x; 2.0 XML is left alone") {
  std::string v3 =
      "<topology version=\"3.0\">\n<object type=\"OSDev\" name=\"cuda0\" osdev_type=\"12\"/>"
      "<object type=\"OSDev\" name=\"card0\" osdev_type=\"4\"/><object type=\"OSDev\" "
      "name=\"eth0\" osdev_type=\"16\"/>"
      "<object type=\"OSDev\" name=\"mlx5_0\" osdev_type=\"48\"/><object type=\"OSDev\" "
      "name=\"sda\" osdev_type=\"1\"/>";
  auto out = xml_for_hwloc2(v3, "x.xml");
  REQUIRE(out.ok());
  CHECK(out->find("<topology version=\"2.0\">") == 0);
  CHECK(out->find("name=\"cuda0\" osdev_type=\"5\"") != std::string::npos);   // coprocessor
  CHECK(out->find("name=\"card0\" osdev_type=\"1\"") != std::string::npos);   // GPU
  CHECK(out->find("name=\"eth0\" osdev_type=\"2\"") != std::string::npos);    // network
  CHECK(out->find("name=\"mlx5_0\" osdev_type=\"3\"") != std::string::npos);  // OpenFabrics
  CHECK(out->find("name=\"sda\" osdev_type=\"0\"") != std::string::npos);     // block

  std::string h200 = read_file(fixture("h200-1socket.xml"));
  auto same = xml_for_hwloc2(h200, "h200");
  REQUIRE(same.ok());
  CHECK(*same == h200);

  auto future = xml_for_hwloc2("<topology version=\"4.0\">", "f.xml");
  REQUIRE_FALSE(future.ok());
  CHECK(future.error().message.find("f.xml: hwloc XML version 4.0") == 0);
  // Numbers past what an int or a long holds are errors, not an abort.
  auto huge = xml_for_hwloc2("<topology version=\"99999999999.0\">", "h.xml");
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().message.find("h.xml: hwloc XML version 99999999999.0 is newer") == 0);
  auto flags = xml_for_hwloc2(
      "<topology version=\"3.0\"><object osdev_type=\"99999999999999999999999\"/>", "o.xml");
  REQUIRE_FALSE(flags.ok());
  CHECK(flags.error().message.find("o.xml: osdev_type=\"99999999999999999999999\" is not") == 0);
}

TEST_CASE("DGX-2: 16 V100 on two sockets, with their NVML UUIDs; NVSwitches are no GPUs") {
  Topology t = load("nvidiaDGX2.xml");
  CHECK_FALSE(t.is_this_system);
  REQUIRE(t.packages.size() == 2);
  REQUIRE(t.nodes.size() == 2);
  CHECK(t.nodes[0].cpus == IndexList{0, 1});
  CHECK(t.nodes[1].cpus == IndexList{24, 25});
  CHECK(t.nodes[0].memory_bytes == 810234351616ull);
  CHECK(t.packages[1].model == "Intel(R) Xeon(R) Platinum 8174 CPU @ 3.10GHz");
  CHECK(t.cores.size() == 4);
  CHECK(t.cuda_inventory_known);
  REQUIRE(t.gpus.size() == 16);
  for (auto& g : t.gpus) {
    CAPTURE(g.pci.bus_id);
    CHECK(g.pci.vendor_id == 0x10de);
    CHECK(g.pci.class_id == 0x0302);
    CHECK(g.model == "Tesla V100-SXM3-32GB-H");
    CHECK(g.uuid.rfind("GPU-", 0) == 0);
    CHECK(g.uuid.size() == 40);
    CHECK(g.cuda_listed);
    bool first_socket = g.index < 8;
    CHECK(g.nodes == IndexList{first_socket ? 0u : 1u});
    CHECK(g.cpus == (first_socket ? IndexList{0, 1} : IndexList{24, 25}));
    CHECK(g.locality == (first_socket ? "Package P#0" : "Package P#1"));
  }
  CHECK(t.gpus[0].pci.bus_id == "0000:34:00.0");
  CHECK(t.gpus[0].uuid == "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6");
  CHECK(t.gpus[0].os_devices == std::vector<std::string>{"nvml0"});
  CHECK(t.gpus[8].pci.bus_id == "0000:b7:00.0");
  CHECK(t.gpus[15].pci.bus_id == "0000:e7:00.0");
  // The 12 NVSwitches are NVIDIA PCI devices of class 0680 (bridge): known, never GPUs.
  int nvswitches = 0;
  for (auto& d : t.pci_devices) nvswitches += d.vendor_id == 0x10de && d.class_id == 0x0680;
  CHECK(nvswitches == 11);  // the twelfth reads 0000:0000 in this file
  CHECK(t.other_displays.empty());
}

TEST_CASE(
    "2-socket box: the CUDA K40m, two boards CUDA does not list, an AMD GPU that is never one") {
  Topology t = load("32em64t-2n8c2t-pci-normalio.xml");
  REQUIRE(t.nodes.size() == 2);
  CHECK(t.nodes[1].cpus == parse_index_list("8-15,24-31", "x").value());
  CHECK(t.cores.size() == 16);
  CHECK(t.cores[8].cpus == IndexList{8, 24});
  REQUIRE(t.gpus.size() == 3);
  CHECK(t.gpus[0].pci.bus_id == "0000:03:00.0");
  CHECK(t.gpus[0].nodes == IndexList{0});
  CHECK_FALSE(t.gpus[0].cuda_listed);
  CHECK(t.gpus[1].pci.bus_id == "0000:83:00.0");
  CHECK(t.gpus[1].nodes == IndexList{1});
  const Gpu& k40 = t.gpus[2];
  CHECK(k40.pci.bus_id == "0000:84:00.0");
  CHECK(k40.model == "Tesla K40m");  // the CUDA device's name, not the PCI id database's
  CHECK(k40.cuda_listed);
  CHECK(k40.uuid.empty());
  CHECK(k40.nodes == IndexList{1});
  CHECK(k40.cpus == t.nodes[1].cpus);
  CHECK(t.cuda_inventory_known);
  REQUIRE(t.other_displays.size() == 2);
  CHECK(t.other_displays[0].bus_id == "0000:05:03.0");  // Matrox VGA
  CHECK(t.other_displays[1].bus_id == "0000:84:00.1");
  CHECK(t.other_displays[1].vendor_id == 0x1002);
  for (auto& g : t.gpus) CHECK(g.pci.vendor_id == kPciVendorNvidia);
}

TEST_CASE("H200 machine: one node, the GPU known only by its PCI ids until the driver is asked") {
  Topology t = load("h200-1socket.xml");
  REQUIRE(t.nodes.size() == 1);
  CHECK(t.nodes[0].cpus == parse_index_list("0-15", "x").value());
  CHECK(t.cores.size() == 16);
  REQUIRE(t.gpus.size() == 1);
  Gpu g = t.gpus[0];
  CHECK(g.pci.bus_id == "0000:00:06.0");
  CHECK(g.pci.device_id == 0x2335);
  CHECK(g.nodes == IndexList{0});
  CHECK(g.uuid.empty());
  CHECK_FALSE(t.cuda_inventory_known);  // the OpenCL device is not under the PCI device

  TempDir dir;
  std::filesystem::create_directories(dir.path / "0000:00:06.0");
  std::ofstream(dir.path / "0000:00:06.0" / "information")
      << "Model: \t\t NVIDIA H200\nIRQ:             10\nGPU UUID: \t "
         "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b\n"
         "Bus Location: \t 0000:00:06.0\n";
  add_nvidia_driver_info(t, dir.path.string());
  CHECK(t.gpus[0].model == "NVIDIA H200");
  CHECK(t.gpus[0].uuid == "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b");
  CHECK(t.gpus[0].uuid_source == "NVIDIA driver");
  CHECK(t.gpus[0].cuda_listed);
  CHECK(t.cuda_inventory_known);
}

TEST_CASE("an uninitialised GPU's placeholder UUID from the driver is not taken") {
  Topology t = load("h200-1socket.xml");
  TempDir dir;
  std::filesystem::create_directories(dir.path / "0000:00:06.0");
  std::ofstream(dir.path / "0000:00:06.0" / "information")
      << "Model: NVIDIA H200\nGPU UUID: GPU-" << std::string(8, '?') << "-????"
      << "-????"
      << "-????"
      << "-" << std::string(12, '?') << "\n";
  add_nvidia_driver_info(t, dir.path.string());
  CHECK(t.gpus[0].model == "NVIDIA H200");
  CHECK(t.gpus[0].uuid.empty());
  add_nvidia_driver_info(t,
                         (dir.path / "absent").string());  // no driver: nothing changes, no error
  CHECK(t.gpus[0].model == "NVIDIA H200");
}

TEST_CASE("unreadable and invalid topology files are errors naming the file") {
  auto missing = load_topology_xml("/nonexistent/topo.xml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("/nonexistent/topo.xml: cannot read") == 0);
  TempDir dir;  // opens as a file, and reads as nothing
  auto directory = read_topology_xml(dir.path.string());
  REQUIRE_FALSE(directory.ok());
  CHECK(directory.error().message ==
        dir.path.string() + ": cannot read the topology XML: it is a directory");
  auto garbage = load_topology_xml_text("this is not XML", "garbage.xml");
  REQUIRE_FALSE(garbage.ok());
  CHECK(garbage.error().message.find("garbage.xml: hwloc") == 0);
}

TEST_CASE("this machine: CPUs, nodes, allowed sets, and kernel NUMA balancing") {
  TempDir dir;
  std::ofstream(dir.path / "numa_balancing") << "1\n";
  SystemPaths paths;
  paths.numa_balancing = (dir.path / "numa_balancing").string();
  paths.nvidia_gpus_dir = (dir.path / "no-driver").string();
  auto t = load_system_topology(paths);
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  CHECK(t->is_this_system);
  CHECK(t->source == "this machine");
  CHECK_FALSE(t->cpus.empty());
  CHECK_FALSE(t->nodes.empty());
  CHECK_FALSE(t->cores.empty());
  CHECK(contains_all(t->cpus, t->allowed_cpus));
  CHECK(t->numa_balancing == 1);
  IndexList node_cpus;
  for (auto& n : t->nodes) node_cpus.insert(node_cpus.end(), n.cpus.begin(), n.cpus.end());
  std::sort(node_cpus.begin(), node_cpus.end());
  CHECK(node_cpus == t->cpus);
}
