// Discovery: hwloc's view of the machine turned into plain data
// (placement_topology.h). hwloc is used only here and in placement_apply.cpp.
#include "daemon/placement_topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>

#include "engine/read_limited.h"
#include "engine/whole_number.h"

namespace voltad::placement {

const NumaNode* Topology::node(unsigned os_index) const {
  for (auto& n : nodes)
    if (n.os_index == os_index) return &n;
  return nullptr;
}

IndexList Topology::node_indexes() const {
  IndexList out;
  for (auto& n : nodes) out.push_back(n.os_index);
  return out;
}

std::optional<std::string> normalize_bus_id(const std::string& text) {
  static const std::regex re(
      "^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\\.([0-7])$");
  std::smatch m;
  if (!std::regex_match(text, m, re)) return std::nullopt;
  unsigned long domain = m[1].matched ? std::stoul(m[1].str(), nullptr, 16) : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lx:%02lx:%02lx.%lx", domain,
                std::stoul(m[2].str(), nullptr, 16), std::stoul(m[3].str(), nullptr, 16),
                std::stoul(m[4].str(), nullptr, 16));
  return std::string(buf);
}

namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocTopology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

IndexList to_list(hwloc_const_bitmap_t set) {
  IndexList out;
  if (!set || hwloc_bitmap_weight(set) < 0) return out;  // infinite sets never describe hardware
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i))
    out.push_back(static_cast<unsigned>(i));
  return out;
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v ? v : "";
}

std::string version_string() {
  unsigned v = hwloc_get_api_version();
  return std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) + "." +
         std::to_string(v & 0xff);
}

// I/O devices are what placement is about, so they are all kept; bridges
// only where they lead somewhere (they carry no information we use).
Result<HwlocTopology> open_topology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0)
    return make_error(std::string("hwloc could not start: ") + std::strerror(errno));
  HwlocTopology topo(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  // See CPUs and nodes a cgroup hides, so the plan can say what is excluded
  // instead of silently planning on a smaller machine.
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  return topo;
}

PciDevice pci_device(hwloc_obj_t obj) {
  PciDevice d;
  auto& a = obj->attr->pcidev;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", a.domain, a.bus, a.dev, a.func);
  d.bus_id = buf;
  d.vendor_id = a.vendor_id;
  d.device_id = a.device_id;
  d.class_id = a.class_id;
  d.vendor_name = info(obj, "PCIVendor");
  d.device_name = info(obj, "PCIDevice");
  return d;
}

bool is_display_class(uint16_t class_id) {
  return class_id == 0x0300 || class_id == 0x0302;
}

// An OS device the NVIDIA driver stack created: CUDA and NVML devices, and
// OpenCL devices of NVIDIA's platform. Their presence means CUDA lists the GPU.
bool is_nvidia_compute_osdev(hwloc_obj_t os) {
  std::string name = os->name ? os->name : "";
  std::string subtype = os->subtype ? os->subtype : "";
  if (subtype == "CUDA" || name.rfind("cuda", 0) == 0) return true;
  if (subtype == "NVML" || info(os, "Backend") == "NVML" || name.rfind("nvml", 0) == 0) return true;
  if (subtype == "OpenCL" && info(os, "OpenCLPlatformName").find("NVIDIA") != std::string::npos)
    return true;
  return false;
}

// hwloc names the UUID after its backend (NVML: NVIDIAUUID); take whichever
// OS device info ends in UUID and looks like one.
std::string osdev_uuid(hwloc_obj_t os) {
  static const std::regex uuid(
      "^(GPU-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  for (unsigned i = 0; i < os->infos_count; ++i) {
    std::string name = os->infos[i].name ? os->infos[i].name : "";
    std::string value = os->infos[i].value ? os->infos[i].value : "";
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "UUID") == 0 &&
        std::regex_match(value, uuid))
      return value.rfind("GPU-", 0) == 0 ? value : "GPU-" + value;
  }
  return "";
}

Gpu describe_gpu(hwloc_topology_t topo, hwloc_obj_t pci) {
  Gpu g;
  g.pci = pci_device(pci);
  for (hwloc_obj_t os = pci->io_first_child; os; os = os->next_sibling) {
    if (os->type != HWLOC_OBJ_OS_DEVICE) continue;
    if (os->name) g.os_devices.push_back(os->name);
    if (!is_nvidia_compute_osdev(os)) continue;
    g.cuda_listed = true;
    if (g.model.empty()) g.model = info(os, "GPUModel");
    if (g.uuid.empty()) {
      g.uuid = osdev_uuid(os);
      if (!g.uuid.empty())
        g.uuid_source = "hwloc " + std::string(os->name ? os->name : "OS device");
    }
  }
  if (g.model.empty()) g.model = g.pci.device_name;
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pci);
  if (anc) {
    g.locality = hwloc_obj_type_string(anc->type);
    if (anc->os_index != HWLOC_UNKNOWN_INDEX) g.locality += " P#" + std::to_string(anc->os_index);
    g.cpus = to_list(anc->cpuset);
    g.nodes = to_list(anc->nodeset);
  }
  return g;
}

bool pci_order(const PciDevice& a, const PciDevice& b) {
  return a.bus_id < b.bus_id;
}

Topology extract(hwloc_topology_t topo, const std::string& source) {
  Topology t;
  t.source = source;
  t.is_this_system = hwloc_topology_is_thissystem(topo) != 0;
  t.hwloc_version = version_string();
  t.cpus = to_list(hwloc_topology_get_complete_cpuset(topo));
  t.allowed_cpus = to_list(hwloc_topology_get_allowed_cpuset(topo));
  t.allowed_nodes = to_list(hwloc_topology_get_allowed_nodeset(topo));

  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o));)
    t.packages.push_back(
        {o->os_index, info(o, "CPUModel"), to_list(o->cpuset), to_list(o->nodeset)});
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o));)
    t.nodes.push_back({o->os_index, to_list(o->cpuset), o->attr->numanode.local_memory});
  std::sort(t.nodes.begin(), t.nodes.end(),
            [](auto& a, auto& b) { return a.os_index < b.os_index; });
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, o));)
    t.cores.push_back({to_list(o->cpuset)});
  // Without Core objects (some VMs and architectures) every PU is a core.
  if (t.cores.empty())
    for (unsigned cpu : t.cpus) t.cores.push_back({{cpu}});
  std::erase_if(t.cores, [](const Core& c) { return c.cpus.empty(); });
  std::sort(t.cores.begin(), t.cores.end(), [](auto& a, auto& b) { return a.cpus[0] < b.cpus[0]; });

  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(topo, o));) {
    PciDevice d = pci_device(o);
    t.pci_devices.push_back(d);
    if (!is_display_class(d.class_id)) continue;
    if (d.vendor_id == kPciVendorNvidia)
      t.gpus.push_back(describe_gpu(topo, o));
    else
      t.other_displays.push_back(d);
  }
  std::sort(t.pci_devices.begin(), t.pci_devices.end(), pci_order);
  std::sort(t.other_displays.begin(), t.other_displays.end(), pci_order);
  std::sort(t.gpus.begin(), t.gpus.end(), [](auto& a, auto& b) { return pci_order(a.pci, b.pci); });
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    t.gpus[i].index = static_cast<unsigned>(i);
    if (t.gpus[i].cuda_listed) t.cuda_inventory_known = true;
  }
  return t;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

void add_nvidia_driver_info(Topology& topology, const std::string& nvidia_gpus_dir) {
  static const std::regex uuid(
      "^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
  for (auto& g : topology.gpus) {
    std::ifstream in(nvidia_gpus_dir + "/" + g.pci.bus_id + "/information");
    if (!in) continue;
    std::string line;
    while (std::getline(in, line)) {
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = trim(line.substr(0, colon));
      std::string value = trim(line.substr(colon + 1));
      if (key == "Model" && !value.empty() && (g.model.empty() || g.model == g.pci.device_name))
        g.model = value;
      // Before the GPU is initialised the driver prints GPU-????????-...;
      // only a real UUID counts.
      if (key == "GPU UUID" && g.uuid.empty() && std::regex_match(value, uuid)) {
        g.uuid = value;
        g.uuid_source = "NVIDIA driver";
      }
    }
    // The driver manages it, so CUDA lists it (when the driver is the only
    // witness, every GPU it manages is listed this way).
    g.cuda_listed = true;
    topology.cuda_inventory_known = true;
  }
}

Result<std::string> xml_for_hwloc2(const std::string& xml, const std::string& name) {
  static const std::regex header("<topology\\s+version=\"([0-9]+)\\.([0-9]+)\"");
  std::smatch m;
  if (!std::regex_search(xml, m, header)) return xml;  // hwloc 1.x XML, or none: hwloc decides
  // Digits the regex matched, but perhaps more than an int holds: too new.
  const int major = whole_number<int>(m[1].str()).value_or(INT_MAX);
  if (major <= 2) return xml;
  if (major > 3)
    return make_error(
        name + ": hwloc XML version " + m[1].str() + "." + m[2].str() +
        " is newer than voltad can read (2.x and 3.0); export it with lstopo --of xml "
        "from hwloc 2.x or 3.0");
  std::string out = m.prefix().str() + "<topology version=\"2.0\"";
  std::string rest = m.suffix().str();
  // hwloc 3.0 made the OS device type a set of flags (storage 1, memory 2,
  // GPU 4, coprocessor 8, network 16, OpenFabrics 32, DMA 64); 2.x has one
  // enumerated type per device. Keep the most specific flag.
  static const std::regex osdev_type("osdev_type=\"([0-9]+)\"");
  auto convert = [](unsigned long flags) {
    if (flags & 8) return HWLOC_OBJ_OSDEV_COPROC;
    if (flags & 4) return HWLOC_OBJ_OSDEV_GPU;
    if (flags & 32) return HWLOC_OBJ_OSDEV_OPENFABRICS;
    if (flags & 16) return HWLOC_OBJ_OSDEV_NETWORK;
    if (flags & 64) return HWLOC_OBJ_OSDEV_DMA;
    return HWLOC_OBJ_OSDEV_BLOCK;
  };
  auto begin = std::sregex_iterator(rest.begin(), rest.end(), osdev_type);
  size_t copied = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto flags = whole_number<unsigned long>((*it)[1].str());
    if (!flags)
      return make_error(name + ": osdev_type=\"" + (*it)[1].str() +
                        "\" is not a set of hwloc 3.0 OS device flags");
    out.append(rest, copied, it->position() - copied);
    out += "osdev_type=\"" + std::to_string(static_cast<int>(convert(*flags))) + "\"";
    copied = it->position() + it->length();
  }
  out.append(rest, copied, std::string::npos);
  return out;
}

Result<Topology> load_topology_xml_text(const std::string& xml, const std::string& name) {
  auto text = xml_for_hwloc2(xml, name);
  if (!text) return text.error();
  auto topo = open_topology();
  if (!topo) return topo.error();
  if (hwloc_topology_set_xmlbuffer(topo->get(), text->c_str(),
                                   static_cast<int>(text->size() + 1)) != 0 ||
      hwloc_topology_load(topo->get()) != 0)
    return make_error(name +
                      ": hwloc could not read this topology XML (save one with lstopo FILE.xml; "
                      "HWLOC_XML_VERBOSE=1 makes hwloc say why)");
  if (hwloc_topology_is_thissystem(topo->get()))  // HWLOC_THISSYSTEM=1 in the environment
    return make_error(
        name + ": hwloc treats this XML as this machine (HWLOC_THISSYSTEM is set); unset it");
  return extract(topo->get(), name);
}

Result<std::string> read_topology_xml(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))  // an ifstream opens it and reads nothing
    return make_error(path + ": cannot read the topology XML: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path + ": cannot read the topology XML: " + std::strerror(errno));
  // A DGX-2's is 42 KB.
  auto text = read_limited(in, 64u << 20, "the topology XML");
  if (!text) return make_error(path + ": " + text.error().message);
  return text;
}

Result<Topology> load_topology_xml(const std::string& path) {
  auto text = read_topology_xml(path);
  if (!text) return text.error();
  return load_topology_xml_text(*text, path);
}

Result<Topology> load_system_topology(const SystemPaths& paths) {
  auto topo = open_topology();
  if (!topo) return topo.error();
  // hwloc's CUDA and OpenCL components (where a build has them) list GPUs by
  // starting CUDA in this process, before voltad has set
  // CUDA_VISIBLE_DEVICES, which CUDA reads once: that CUDA would show every
  // GPU, and its threads would miss the memory policy. NVML and the driver's
  // /proc files name the GPUs without starting CUDA.
  for (const char* component : {"cuda", "opencl"})
    hwloc_topology_set_components(topo->get(), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  if (hwloc_topology_load(topo->get()) != 0)
    return make_error(std::string("hwloc could not read this machine's topology: ") +
                      std::strerror(errno));
  if (!hwloc_topology_is_thissystem(topo->get()))
    return make_error(
        "hwloc read a topology that is not this machine (HWLOC_XMLFILE or HWLOC_SYNTHETIC "
        "is set in the environment); unset it, or plan with --topology-xml");
  Topology t = extract(topo->get(), "this machine");
  add_nvidia_driver_info(t, paths.nvidia_gpus_dir);
  std::ifstream nb(paths.numa_balancing);
  int v = 0;
  if (nb >> v) t.numa_balancing = v;
  return t;
}

}  // namespace voltad::placement
