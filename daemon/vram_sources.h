// Where the VRAM monitor's samples come from (daemon/vram_monitor.h):
//
// - NVML, loaded with dlopen("libnvidia-ml.so.1") at run time: voltad has no
//   build dependency on it, and a machine without the driver's library
//   simply has no NVML source. The device is found by PCI bus id (the same
//   card the CUDA backend uses, whatever CUDA_VISIBLE_DEVICES says) or, when
//   none is known, by NVML index.
// - The CUDA runtime's cudaMemGetInfo (engine/backend_cuda.h), when NVML is
//   absent. It needs voltad's own CUDA context, so it is no use before the
//   backend exists (the start-up plan uses NVML for the "before" reading).
// - A file, for tests only: VOLTAD_TEST_FAKE_VRAM=PATH makes the daemon read
//   "USED TOTAL" (bytes, or sizes such as 30GiB) from PATH at each sample,
//   so an integration test can pretend another process grows on a card the
//   machine does not have.
#pragma once

#include <memory>
#include <string>

#include "daemon/vram_monitor.h"

namespace voltad {

struct VramSource {
  std::string name;  // "nvml", "cuda runtime", "test file PATH"
  VramSampler sample;
};

// NVML for the card at `pci_bus_id` ("0000:b7:00.0"), or NVML index
// `index` when pci_bus_id is empty. Error: no libnvidia-ml.so.1, NVML does
// not start, no such device.
Result<VramSource> nvml_vram_source(const std::string& pci_bus_id, unsigned index = 0);

// cudaMemGetInfo on CUDA device `device` (an index among the visible ones).
// Error when this voltad was built without CUDA.
Result<VramSource> cuda_vram_source(int device);

// Test only: samples read from a file (see above).
VramSource file_vram_source(const std::string& path);

// The environment variable that selects file_vram_source, and its value ("" when unset).
constexpr const char* kFakeVramEnv = "VOLTAD_TEST_FAKE_VRAM";
std::string fake_vram_path();

// "USED TOTAL" -> a sample; exposed for tests.
Result<VramSample> parse_vram_sample(const std::string& text);

}  // namespace voltad
