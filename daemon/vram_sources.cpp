#include "daemon/vram_sources.h"

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "daemon/config_values.h"
#ifdef VOLTAD_HAVE_CUDA
#include "engine/backend_cuda.h"
#endif

namespace voltad {

namespace {

// The few NVML declarations voltad needs (NVML's documented C API; the
// library is opened at run time, so there is no nvml.h at build time).
using NvmlReturn = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlMemory {  // nvmlMemory_t (version 1)
  unsigned long long total, free, used;
};

class Nvml {
 public:
  static Result<std::shared_ptr<Nvml>> open() {
    auto n = std::shared_ptr<Nvml>(new Nvml());
    n->lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib_)
      return make_error("libnvidia-ml.so.1 cannot be loaded (" + std::string(::dlerror()) +
                        "); is the NVIDIA driver installed?");
    bool all = n->bind(n->init_, "nvmlInit_v2") && n->bind(n->shutdown_, "nvmlShutdown") &&
               n->bind(n->by_bus_id_, "nvmlDeviceGetHandleByPciBusId_v2") &&
               n->bind(n->by_index_, "nvmlDeviceGetHandleByIndex_v2") &&
               n->bind(n->memory_info_, "nvmlDeviceGetMemoryInfo") &&
               n->bind(n->error_string_, "nvmlErrorString");
    if (!all) return make_error("libnvidia-ml.so.1 lacks an NVML function voltad needs");
    if (NvmlReturn r = n->init_(); r != 0) return make_error("nvmlInit_v2: " + n->error(r));
    n->initialized_ = true;
    return n;
  }

  ~Nvml() {
    if (initialized_) shutdown_();
    if (lib_) ::dlclose(lib_);
  }

  Result<NvmlDevice> device(const std::string& bus_id, unsigned index) const {
    NvmlDevice d = nullptr;
    NvmlReturn r = bus_id.empty() ? by_index_(index, &d) : by_bus_id_(bus_id.c_str(), &d);
    if (r != 0)
      return make_error(
          "NVML finds no GPU " +
          (bus_id.empty() ? "at index " + std::to_string(index) : "with PCI bus id " + bus_id) +
          ": " + error(r));
    return d;
  }

  Result<VramSample> memory(NvmlDevice d) const {
    NvmlMemory m{};
    if (NvmlReturn r = memory_info_(d, &m); r != 0)
      return make_error("nvmlDeviceGetMemoryInfo: " + error(r));
    // total - free, as cudaMemGetInfo counts: what the card cannot hand out.
    return VramSample{m.total >= m.free ? m.total - m.free : 0, m.total};
  }

 private:
  Nvml() = default;
  template <class F>
  bool bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(::dlsym(lib_, name));
    return fn != nullptr;
  }
  std::string error(NvmlReturn r) const {
    const char* s = error_string_ ? error_string_(r) : nullptr;
    return (s ? std::string(s) : "NVML error") + " (" + std::to_string(r) + ")";
  }

  void* lib_ = nullptr;
  bool initialized_ = false;
  NvmlReturn (*init_)() = nullptr;
  NvmlReturn (*shutdown_)() = nullptr;
  NvmlReturn (*by_bus_id_)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*by_index_)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*memory_info_)(NvmlDevice, NvmlMemory*) = nullptr;
  const char* (*error_string_)(NvmlReturn) = nullptr;
};

}  // namespace

Result<VramSource> nvml_vram_source(const std::string& pci_bus_id, unsigned index) {
  auto nvml = Nvml::open();
  if (!nvml) return nvml.error();
  auto device = nvml.value()->device(pci_bus_id, index);
  if (!device) return device.error();
  // The library stays loaded as long as the sampler lives.
  std::shared_ptr<Nvml> lib = nvml.value();
  NvmlDevice d = device.value();
  auto first = lib->memory(d);
  if (!first) return first.error();
  return VramSource{"nvml", [lib, d] { return lib->memory(d); }};
}

Result<VramSource> cuda_vram_source(int device) {
#ifdef VOLTAD_HAVE_CUDA
  auto first = cuda_device_memory(device);
  if (!first) return first.error();
  return VramSource{"cuda runtime", [device]() -> Result<VramSample> {
                      auto m = cuda_device_memory(device);
                      if (!m) return m.error();
                      return VramSample{m->total_bytes - m->free_bytes, m->total_bytes};
                    }};
#else
  return make_error("this voltad was built without CUDA (device " + std::to_string(device) + ")");
#endif
}

Result<VramSample> parse_vram_sample(const std::string& text) {
  std::istringstream in(text);
  std::string used, total;
  if (!(in >> used >> total)) return make_error("expected 'USED TOTAL', got '" + text + "'");
  auto u = config::parse_byte_size(used);
  auto t = config::parse_byte_size(total);
  if (!u || !t) return make_error("'" + used + "' or '" + total + "' is not a size");
  if (t->bytes == 0 || u->bytes > t->bytes)
    return make_error("used (" + used + ") must be at most total (" + total + "), total > 0");
  return VramSample{u->bytes, t->bytes};
}

VramSource file_vram_source(const std::string& path) {
  return VramSource{"test file " + path, [path]() -> Result<VramSample> {
                      std::ifstream in(path);
                      if (!in) return make_error("cannot read " + path);
                      std::stringstream text;
                      text << in.rdbuf();
                      auto s = parse_vram_sample(text.str());
                      if (!s) return make_error(path + ": " + s.error().message);
                      return s;
                    }};
}

std::string fake_vram_path() {
  const char* p = std::getenv(kFakeVramEnv);
  return p ? std::string(p) : std::string();
}

}  // namespace voltad
