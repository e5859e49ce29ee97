// The CUDA backend: weights repacked once at load into the kernels' layouts
// (docs/FORMAT.md), every device buffer allocated at creation, one stream.
// The request path allocates nothing on the device.
//
// Built only with CUDA (engine/CMakeLists.txt compiles backend_cuda*.cpp
// when VOLTAD_CUDA is on). Not thread-safe: the engine thread owns it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/model.h"
#include "kernels/kernel_set.h"

namespace voltad {

struct CudaBackendOptions {
  int device = 0;                  // index among the visible devices
  int32_t max_context = 4096;      // longest sequence, tokens
  int32_t max_sequences = 16;      // sequences per step
  int32_t max_batch_tokens = 512;  // tokens per step (prefill chunks + decodes)
  int32_t kv_blocks = 0;  // KV pool size in 16-token blocks; 0: max_context x max_sequences
  // Decode steps (one token per sequence) replay a CUDA graph captured per
  // batch size, instead of launching every kernel: launch gaps are a large
  // part of a ~1-5 ms token.
  bool use_graphs = true;
  // KV cache elements: fp16, or int8 with one scale per head and token (half
  // the memory; the V100 has no FP8).
  bool kv_int8 = false;
  // Portable: only the kernels a V100 runs. Auto: per-architecture variants
  // where the card has them (kernels/kernel_set.h).
  kernels::KernelSet kernels = kernels::KernelSet::Auto;
  // Timing only (voltad-bench --omit): kernels every step leaves out, so
  // that a benchmark can measure what each costs inside the decode graph.
  // The outputs are then meaningless; nothing but the bench sets it.
  struct Omit {
    bool norms = false, rope = false, attention = false, swiglu = false;
    // The matrix products by kind (`matvecs` in voltad-bench: all five).
    bool qkv = false, wo = false, gate_up = false, down = false, output = false;
    bool any() const { return norms || rope || attention || swiglu || qkv || wo || gate_up || down || output; }
  } omit;
  // Called while weights load: (bytes done, bytes total, tensor name).
  std::function<void(uint64_t, uint64_t, const std::string&)> on_progress;
  // Host memory for the pinned buffers the GPU copies to and from (the
  // logits of each step): page-aligned and already on the GPU's NUMA node
  // (the daemon passes daemon/placement_startup.h's node_local_host_memory),
  // which the backend registers with cudaHostRegister and unregisters before
  // host_release. Unset: cudaMallocHost, wherever the driver puts it. The
  // engine itself stays free of NUMA libraries.
  std::function<void*(size_t bytes)> host_allocate;
  std::function<void(void* data)> host_release;
  // Events around each step's device work (voltad-bench --device-time):
  // last_step_device_seconds() then says how long the stream took from the
  // event before the upload of the step's indices to the one after its last
  // copy back. What the host spends enqueuing after the first event (the
  // graph's or the kernels' launches) falls inside that span, so the rest
  // of forward()'s time is a lower bound of the host's. Off: no events.
  bool time_steps = false;
};

// Device memory the backend holds, by component.
struct CudaMemoryUse {
  uint64_t weights = 0, kv_cache = 0, workspace = 0;
};

class CudaBackend final : public Backend {
 public:
  // Errors: no driver or device, an architecture below sm_70, a weight type
  // the kernels cannot run, not enough device memory.
  static Result<std::unique_ptr<CudaBackend>> create(std::shared_ptr<const Model> model,
                                                     const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override;
  KvBlockPool& kv_pool() override;
  std::string unusable_reason() const override;

  const CudaMemoryUse& memory_use() const;
  std::string device_name() const;
  // The kernels in use, for logs and benchmarks: "portable"; "auto: " and
  // the variants the card runs ("sm80-gemm", the sm_80+ prefill GEMM;
  // "sm80-narrow", the sm_80+ narrow GEMM for decode steps of a few tokens,
  // where it takes every matrix of the model; "sm80-attention", the
  // attention's pass 1 on the tensor cores, fp16 cache and head_dim 64 or
  // 128; "sm90-bulk", the batch-1 gate|up fed by bulk copies;
  // "sm90-narrow-bulk", the narrow GEMM's streaming blocks for gate|up at
  // 1-8 tokens (kernels/narrow_bulk_sm90.cu); "pdl",
  // programmatic dependent launch on sm_90+); "auto: portable" when
  // it has none (a V100, or a build without sm_80+ code).
  std::string kernels_in_use() const;
  // Bytes of weights one decode step reads: every matrix and vector except
  // the embedding table (unless it doubles as the output matrix).
  uint64_t decode_weight_bytes() const;
  // With options.time_steps, the last forward() step's device time
  // (seconds, from the event before its upload to the one after its last
  // copy back); -1 without the option, before the first step, and after a
  // step that failed.
  double last_step_device_seconds() const;

 private:
  Status warm_up();  // every kind of step once, at creation (backend_cuda.cpp)
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  Status step(std::span<const BatchChunk> chunks, ForwardOutput& out);
  std::unique_ptr<Impl> impl_;
};

// Device-to-device copy bandwidth in bytes/s (bytes read + bytes written),
// the median of several 1 GiB copies: the ceiling decode efficiency is
// measured against.
Result<double> measure_copy_bandwidth(int device);

// Makes the CUDA runtime load every kernel when the context is created
// (CUDA_MODULE_LOADING=EAGER, unless the environment already names a mode).
// Lazy loading, the default since CUDA 12.2, allocates device memory for a
// kernel's code at its first launch: during serving, after the VRAM plan
// was checked, and seen on the H200 as the card growing by 2 MiB at the
// first prompt. Call it first in main, before any CUDA call.
void prefer_eager_kernel_loading();

// "NVIDIA H200 (sm_90, 139.8 GiB)": the device the backend would use, or an
// error saying why there is none.
Result<std::string> describe_cuda_device(int device);

// The card's memory as the driver counts it (cudaMemGetInfo), for the VRAM
// plan at start and the VRAM monitor while serving. The first call on a
// thread makes `device` current there (creating voltad's CUDA context if
// there is none yet). Thread-safe. engine/backend_cuda_device.cpp.
struct CudaDeviceMemory {
  uint64_t free_bytes = 0, total_bytes = 0;
};
Result<CudaDeviceMemory> cuda_device_memory(int device);
// "0000:B7:00.0": the PCI bus id of `device`, for NVML.
Result<std::string> cuda_pci_bus_id(int device);

}  // namespace voltad
