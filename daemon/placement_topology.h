// The machine as placement sees it: packages, NUMA nodes with their CPUs and
// memory, physical cores, and the NVIDIA GPUs with their PCI bus id, model,
// UUID and local CPUs/nodes. Read once with hwloc (PCI and OS devices kept),
// then held as plain data, so planning and printing never touch hwloc and
// tests can plan for machines read from XML files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/result.h"

namespace voltad::placement {

// Sorted, unique OS indexes of CPUs (hwloc PUs) or NUMA nodes.
using IndexList = std::vector<unsigned>;

// "0-7,16,18-19"; "" for an empty list. The syntax of placement.cpus and of
// /proc/<pid>/status' Cpus_allowed_list.
std::string format_index_list(const IndexList& list);
// Parses that syntax; `what` names the list in the error ("placement.cpus").
Result<IndexList> parse_index_list(const std::string& text, const std::string& what);

IndexList intersect(const IndexList& a, const IndexList& b);
IndexList subtract(const IndexList& a, const IndexList& b);  // a without b
bool contains_all(const IndexList& haystack, const IndexList& needles);

struct Core {
  IndexList cpus;  // the core's hardware threads (PUs)
};

struct NumaNode {
  unsigned os_index = 0;
  IndexList cpus;  // empty for memory-only nodes (HBM, CXL)
  uint64_t memory_bytes = 0;
};

struct Package {
  unsigned os_index = 0;
  std::string model;  // hwloc's CPUModel, e.g. "Intel(R) Xeon(R) Platinum 8174 CPU @ 3.10GHz"
  IndexList cpus;
  IndexList nodes;
};

struct PciDevice {
  std::string bus_id;  // "0000:b7:00.0", lower-case hex
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;    // base class << 8 | subclass: 0x0300 VGA, 0x0302 3D controller
  std::string vendor_name;  // hwloc's PCIVendor, when it knew the name
  std::string device_name;  // hwloc's PCIDevice
};

constexpr uint16_t kPciVendorNvidia = 0x10de;

// An NVIDIA display or 3D controller (never an NVSwitch, never another vendor).
struct Gpu {
  unsigned index = 0;  // position among the NVIDIA GPUs in PCI bus order
  PciDevice pci;
  std::string model;                    // "Tesla V100-SXM3-32GB-H"
  std::string uuid;                     // "GPU-d3977428-...", empty when nothing told us
  std::string uuid_source;              // "hwloc NVML", "NVIDIA driver", ...
  std::vector<std::string> os_devices;  // hwloc OS devices: "nvml0", "cuda0", "opencl0d1"
  // The NVIDIA driver lists it: hwloc found a CUDA, NVML or NVIDIA OpenCL
  // device for it. An old board the driver no longer supports has none.
  bool cuda_listed = false;
  // Its nearest non-I/O ancestor (usually a Package): the CPUs and NUMA nodes
  // it is local to.
  std::string locality;  // "Package P#1"
  IndexList cpus;
  IndexList nodes;
};

struct Topology {
  std::string source;           // "this machine" or the XML file's path
  bool is_this_system = false;  // false for XML: nothing may be bound from it
  std::string hwloc_version;  // the library's API version, e.g. "2.8.0" (hwloc 2.9 keeps 2.8's API)

  std::vector<Package> packages;
  std::vector<NumaNode> nodes;  // by OS index
  std::vector<Core> cores;      // by first CPU
  IndexList cpus;               // every CPU of the machine
  IndexList allowed_cpus;       // what this process may use (cgroup cpuset)
  IndexList allowed_nodes;

  std::vector<Gpu> gpus;                  // NVIDIA GPUs, PCI bus order
  std::vector<PciDevice> other_displays;  // display/3D devices of other vendors: never used
  std::vector<PciDevice> pci_devices;     // every PCI device, to explain a bus id that is no GPU

  // Some GPU has a CUDA/NVML/OpenCL OS device, so the GPUs that have none are
  // not visible to CUDA and CUDA's own numbering skips them.
  bool cuda_inventory_known = false;

  // /proc/sys/kernel/numa_balancing, when read from this machine.
  std::optional<int> numa_balancing;

  const NumaNode* node(unsigned os_index) const;
  IndexList node_indexes() const;
};

// Where the live machine's extra facts come from; tests point them elsewhere.
struct SystemPaths {
  std::string nvidia_gpus_dir = "/proc/driver/nvidia/gpus";
  std::string numa_balancing = "/proc/sys/kernel/numa_balancing";
};

// This machine, as hwloc sees it now, plus the NVIDIA driver's model and UUID
// for GPUs hwloc had no NVML/CUDA OS device for.
Result<Topology> load_system_topology(const SystemPaths& paths = {});

// A topology saved with `lstopo FILE.xml` on another machine. hwloc 3.0 XML
// (`<topology version="3.0">`) is read too: this hwloc 2.x refuses it, and its
// only differences that matter here are the version and the OS device types.
// load_topology_xml() is the two halves, whose errors differ (--print-placement
// exits 66 when the file cannot be read, 65 when hwloc cannot read the XML).
Result<Topology> load_topology_xml(const std::string& path);
Result<std::string> read_topology_xml(const std::string& path);
Result<Topology> load_topology_xml_text(const std::string& xml, const std::string& name);

// hwloc 3.0 XML text rewritten to the 2.x format; other versions unchanged.
Result<std::string> xml_for_hwloc2(const std::string& xml, const std::string& name);

// Fills model and UUID of GPUs that lack them from the driver's
// <dir>/<bus id>/information files ("Model:", "GPU UUID:"). A missing
// directory is no error: the driver may be absent.
void add_nvidia_driver_info(Topology& topology, const std::string& nvidia_gpus_dir);

// "0000:b7:00.0" from "b7:00.0", "0000:B7:00.0" or "00000000:b7:00.0"
// (nvidia-smi's spelling); nullopt when it is no bus id.
std::optional<std::string> normalize_bus_id(const std::string& text);

}  // namespace voltad::placement
