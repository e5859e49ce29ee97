// placement_gpu_check: on a machine with NVIDIA GPUs, the daemon's start-up
// placement (placement::place_process, what serve() runs first) leaves the
// process seeing exactly one CUDA device, the planned one, with CUDA's own
// threads on the planned CPUs and a node-local pinned buffer on the planned
// node.
//
//   placement_gpu_check [--gpu SPEC]
//       One check in this process (SPEC: a placement.gpu value; default auto).
//   placement_gpu_check --each
//       Runs itself once per NVIDIA GPU hwloc sees, by PCI bus id, each in a
//       fresh process: CUDA_VISIBLE_DEVICES is read once, when CUDA starts.
//
// CUDA is reached through the driver library (libcuda.so.1, opened at run
// time), so this builds without the CUDA toolkit, on CI too; the runtime
// (cudaGetDeviceCount, the CUDA backend) counts devices through the same
// driver and the same CUDA_VISIBLE_DEVICES.
//
// Exit: 0 as planned, 1 something differs, 2 usage, 74 (kExitPlacement)
// the placement was refused, 77 no NVIDIA GPU or no driver here (skipped).
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/exit_codes.h"
#include "daemon/placement_observe.h"
#include "daemon/placement_startup.h"

using namespace voltad::placement;

namespace {

constexpr int kSkip = 77;

// The few driver entry points used, by their C signatures (CUresult is an
// int enum, CUdevice an int, CUcontext a pointer).
struct Driver {
  void* lib = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*device_count)(int*) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*pci_bus_id)(char*, int, int) = nullptr;
  int (*device_name)(char*, int, int) = nullptr;
  int (*device_uuid)(unsigned char*, int) = nullptr;  // CUuuid is 16 bytes
  int (*ctx_retain)(void**, int) = nullptr;
  int (*ctx_release)(int) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*host_register)(void*, size_t, unsigned) = nullptr;
  int (*host_unregister)(void*) = nullptr;
  int (*error_name)(int, const char**) = nullptr;

  std::string error(int code) const {
    const char* name = nullptr;
    if (error_name && error_name(code, &name) == 0 && name) return name;
    return "CUDA error " + std::to_string(code);
  }
};

template <class F>
bool find(void* lib, F& fn, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* p = dlsym(lib, n)) {
      fn = reinterpret_cast<F>(p);
      return true;
    }
  return false;
}

// Empty when every entry point was found; else what was missing.
std::string open_driver(Driver& d) {
  d.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d.lib) return std::string("cannot load the NVIDIA driver library: ") + dlerror();
  bool ok =
      find(d.lib, d.init, {"cuInit"}) && find(d.lib, d.device_count, {"cuDeviceGetCount"}) &&
      find(d.lib, d.device_get, {"cuDeviceGet"}) &&
      find(d.lib, d.pci_bus_id, {"cuDeviceGetPCIBusId"}) &&
      find(d.lib, d.device_name, {"cuDeviceGetName"}) &&
      find(d.lib, d.device_uuid, {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}) &&
      find(d.lib, d.ctx_retain, {"cuDevicePrimaryCtxRetain"}) &&
      find(d.lib, d.ctx_release, {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}) &&
      find(d.lib, d.ctx_set_current, {"cuCtxSetCurrent"}) &&
      find(d.lib, d.host_register, {"cuMemHostRegister_v2", "cuMemHostRegister"}) &&
      find(d.lib, d.host_unregister, {"cuMemHostUnregister"}) &&
      find(d.lib, d.error_name, {"cuGetErrorName"});
  return ok ? "" : "libcuda.so.1 lacks a driver API entry point this check uses (driver too old?)";
}

std::string uuid_text(const unsigned char* b) {
  char s[64];
  std::snprintf(s, sizeof s,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return s;
}

struct Report {
  int problems = 0;
  void check(bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "ok      " : "MISMATCH", what.c_str());
    problems += !ok;
  }
};

int check_one(const std::string& gpu_spec) {
  // Nothing of CUDA runs before the placement: the driver library is opened
  // only afterwards, exactly as the daemon's engine thread starts CUDA later.
  voltad::config::Config cfg = voltad::config::Config::defaults();
  cfg.engine.backend = "cuda";
  cfg.placement.gpu = gpu_spec;
  auto topology = load_system_topology();
  if (!topology) {
    std::printf("skipped: %s\n", topology.error().message.c_str());
    return kSkip;
  }
  if (topology->gpus.empty()) {
    std::printf("skipped: hwloc sees no NVIDIA GPU on this machine\n");
    return kSkip;
  }
  auto placed = place_process(cfg);
  if (!placed) {
    std::printf("refused: %s\n", placed.error().message.c_str());
    return voltad::kExitPlacement;
  }
  const PlacementPlan& plan = placed->plan;
  if (!plan.gpu) {
    std::printf("MISMATCH the plan chose no GPU\n");
    return 1;
  }
  std::printf("plan: GPU %s (%s, uuid %s), CPUs %s, memory %s on '%s'\n",
              plan.gpu->pci.bus_id.c_str(), plan.gpu->model.c_str(),
              plan.gpu->uuid.empty() ? "unknown" : plan.gpu->uuid.c_str(),
              format_index_list(plan.cpus).c_str(), to_string(plan.policy),
              format_index_list(plan.nodes).c_str());
  for (auto& [k, v] : plan.environment) std::printf("      %s=%s\n", k.c_str(), v.c_str());

  Driver cu;
  if (std::string why = open_driver(cu); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return kSkip;
  }
  Report r;
  int e = cu.init(0);
  if (e != 0) {
    std::printf("skipped: cuInit failed: %s (no usable device?)\n", cu.error(e).c_str());
    return kSkip;
  }
  int count = 0;
  e = cu.device_count(&count);
  r.check(e == 0 && count == 1, "CUDA sees " + std::to_string(count) + " device(s) (" +
                                    cu.error(e) + "); want exactly 1");
  if (e != 0 || count < 1) return 1;
  int dev = 0;
  char bus[64] = {}, name[256] = {};
  unsigned char uuid[16] = {};
  cu.device_get(&dev, 0);
  cu.pci_bus_id(bus, sizeof bus, dev);
  cu.device_name(name, sizeof name, dev);
  cu.device_uuid(uuid, dev);
  auto seen = normalize_bus_id(bus);
  r.check(seen && *seen == plan.gpu->pci.bus_id, std::string("CUDA device 0 is ") + name + " at " +
                                                     bus + "; the plan chose " +
                                                     plan.gpu->pci.bus_id);
  if (!plan.gpu->uuid.empty())
    r.check(uuid_text(uuid) == plan.gpu->uuid,
            "its UUID " + uuid_text(uuid) + " is the planned " + plan.gpu->uuid);

  // cuInit started the driver's own threads: they must have inherited the
  // binding like every other thread.
  auto tasks = read_task_placements(0);
  r.check(tasks.ok(), tasks.ok() ? "read /proc/self/task (" + std::to_string(tasks->size()) +
                                       " threads after cuInit)"
                                 : tasks.error().message);
  if (tasks) {
    auto diffs = check_tasks_against(*tasks, plan.cpus, plan.nodes);
    for (auto& d : diffs) r.check(false, d);
    if (diffs.empty())
      r.check(true, "every thread, the driver's too, runs on CPUs " + format_index_list(plan.cpus));
  }

  // The CUDA backend's pinned buffers: node-local memory, then registered.
  void* ctx = nullptr;
  if ((e = cu.ctx_retain(&ctx, dev)) == 0) e = cu.ctx_set_current(ctx);
  r.check(e == 0, "primary context: " + cu.error(e));
  if (e == 0) {
    HostMemoryHooks hooks = node_local_host_memory(plan);
    const size_t bytes = 32u << 20;
    void* p = hooks.allocate(bytes);
    r.check(p != nullptr, "allocated a 32 MiB node-local staging buffer");
    if (p) {
      e = cu.host_register(p, bytes, 0);
      r.check(e == 0, "cuMemHostRegister of it: " + cu.error(e));
      if (plan.policy != MemoryPolicy::off && !plan.nodes.empty()) {
        auto maps = read_numa_maps(0);
        auto diffs = maps ? check_mapping_against(*maps, p, plan.policy, plan.nodes)
                          : std::vector<std::string>{maps.error().message};
        for (auto& d : diffs) r.check(false, d);
        if (diffs.empty())
          r.check(true, "numa_maps: its pages are on node(s) " + format_index_list(plan.nodes) +
                            " after registration");
      }
      if (e == 0) cu.host_unregister(p);
      hooks.release(p);
    }
    cu.ctx_release(dev);
  }
  std::printf("%s\n", r.problems ? "placement differs from the plan" : "CUDA sees the planned GPU");
  return r.problems ? 1 : 0;
}

// Every NVIDIA GPU, each checked by a fresh process of this program.
int check_each(const char* self) {
  auto topology = load_system_topology();
  if (!topology || topology->gpus.empty()) {
    std::printf("skipped: %s\n", topology ? "hwloc sees no NVIDIA GPU on this machine"
                                          : topology.error().message.c_str());
    return kSkip;
  }
  int failed = 0, skipped = 0;
  for (const Gpu& g : topology->gpus) {
    std::printf("== %s (%s)\n", g.pci.bus_id.c_str(), g.model.c_str());
    std::fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
      execl(self, self, "--gpu", g.pci.bus_id.c_str(), static_cast<char*>(nullptr));
      std::_Exit(2);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
      std::printf("MISMATCH the check for %s did not finish\n", g.pci.bus_id.c_str());
      ++failed;
      continue;
    }
    int code = WEXITSTATUS(status);
    skipped += code == kSkip;
    failed += code != 0 && code != kSkip;
  }
  std::printf("%zu GPU(s): %d failed, %d skipped\n", topology->gpus.size(), failed, skipped);
  if (failed) return 1;
  return skipped == static_cast<int>(topology->gpus.size()) ? kSkip : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--each") return check_each("/proc/self/exe");
  if (args.empty()) return check_one("auto");
  if (args.size() == 2 && args[0] == "--gpu") return check_one(args[1]);
  std::fprintf(stderr, "usage: placement_gpu_check [--gpu SPEC | --each]\n");
  return 2;
}
