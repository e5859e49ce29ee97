// How every kernel in kernels/ is launched, and what each does first.
//
// Programmatic dependent launch (sm_90+, `engine.kernels: auto`): a kernel
// launched with cudaLaunchAttributeProgrammaticStreamSerialization may be
// scheduled while the kernel before it on the stream is still draining its
// last blocks; it then waits in griddepcontrol.wait until that kernel has
// completed and its writes are visible. What is saved is the launch latency
// and the ramp of each kernel boundary, a few microseconds each, of which a
// decode step has ~360. Every kernel waits before it reads anything a
// kernel of the step writes or writes anything at all; before the wait it
// may only read what no kernel of the step writes (weights, the step's
// inputs copied from the host, cache rows of earlier steps), so each one
// still reads only after every earlier kernel on the stream is complete
// (each of those waited for its own predecessor). What a kernel of the
// step writes is never read through the read-only path (__ldg, .nc,
// const __restrict__), not even after the wait: ptxas may move such loads
// above it (device_common.cuh, load_activation). Without the attribute
// (portable, the V100, sm_80) the wait returns at once and the launch is
// the plain <<<>>>.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/kernel_set.h"

namespace voltad::kernels {

// True when launches on this host thread use programmatic dependent launch:
// the thread's kernel set (KernelSetScope) is Auto, the device is sm_90+,
// and this binary's kernels were built for sm_90+ (so that they do wait).
bool programmatic_launch_enabled();

// SMs of the current device, read once: one process serves one GPU.
int device_sm_count();
// The most dynamic shared memory a block may opt in to on the current
// device (96 KB on the V100, 64 KB on Turing, 227 KB on the H100), read once.
size_t device_smem_optin();

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  if (!programmatic_launch_enabled()) {
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  // An error stays the runtime's last error, which the caller's
  // CUDA_CHECK(cudaGetLastError()) reports as for <<<>>>.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Before a kernel's first read of what a kernel of the step writes, and
// before its first write (see above). What comes before it may only read
// what no kernel of the step writes: the narrow GEMM's first weight
// stages, the matvecs' first weights, the norm's weights, RoPE's angles and
// slots, the attention's step inputs and older cache rows.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The same wait, for the short kernels between the matvecs and GEMMs of a
// decode step (norms, RoPE, SwiGLU, the attention, the x conversions) and
// for the narrow GEMM: once the wait returns, the kernel lets the next one on the
// stream be scheduled (griddepcontrol.launch_dependents) instead of at its
// own exit. That next
// one, a GEMM as a rule, then starts its weight loads while this kernel
// runs. Its reads of this kernel's output still come after its own wait,
// which returns when this kernel has completed. The prefill GEMMs do not
// release early: measured, prefill lost 6% when they did (docs/PERFORMANCE.md,
// run 13); the decode matvecs release after their main loop
// (release_next_kernel), having issued their first weight loads before their
// wait (run 15).
__device__ __forceinline__ void wait_then_release_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

// griddepcontrol.launch_dependents alone: lets the next kernel on the
// stream be scheduled from here on (a matvec after its main loop; released
// at its start instead, batch 1 was 1% slower, run 15).
__device__ __forceinline__ void release_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

}  // namespace voltad::kernels
