// Linked into every gpu-labelled test: without a usable CUDA device the test
// exits with 77 before doctest starts, which ctest reports as skipped (never
// as passed). A driver without a device, or no driver at all, both count.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

struct SkipWithoutDevice {
  SkipWithoutDevice() {
    // As the binaries do (engine/backend_cuda.h): every kernel loaded with
    // the context, none at its first launch.
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      std::printf("no CUDA device: skipped (%s)\n",
                  err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
      std::fflush(stdout);
      std::_Exit(77);
    }
  }
};

const SkipWithoutDevice skip_without_device;

}  // namespace
