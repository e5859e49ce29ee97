// Kernel-boundary harness (not part of the build; scripts/device-test.sh
// --bench=persistent compiles it with nvcc): what one persistent kernel
// with grid barriers would buy over a kernel a phase, for the byte stream
// of a batch-1 decode step. Nothing here is quantized: the question is the
// cost of the boundaries, not of the decoding (docs/PERFORMANCE.md, runs 14
// and 20: the matvecs alone read at ~0.6 of the copy bandwidth, and the
// short kernels between them cost ~0.5 ms of a 2.3 ms step).
//
// A step is Llama-3-8B Q4_K_M's: per layer the phases of the decode graph,
//   RMSNorm | q|k|v (15.2 MB) | attention | combine | o (9.4 MB) | RMSNorm |
//   gate|up (66.1 MB) | SwiGLU | down (48.2 or 33.0 MB, Q6_K or Q4_K),
// 32 layers, then RMSNorm | output matrix (431 MB): 4.63 GB. A read phase
// streams its bytes (16-byte loads, 4 in flight a thread, a sum so nothing
// is elided); a short phase is a 4,096-float vector that 32 blocks each
// read whole (16 KB from L2), reduce and write a slice of, as RMSNorm does.
// Every phase reads what the one before wrote, so each waits for it.
//
// Forms (ms a step: medians of 7 rounds of 4 steps, from CUDA events):
//   kernels: a kernel a phase from a CUDA graph, plain launches (the
//     portable path) and, on sm_90, programmatic dependent launch with each
//     read phase's first loads before its wait (the auto path);
//   persistent: one cooperative kernel for the step, grid.sync() between
//     phases; the grid is one wave (SMs x resident blocks);
//   persistent, loads ahead: the same, each thread issuing its first loads
//     of the next read phase as soon as it has nothing else to do (after its
//     part of a read phase, or in a short phase it takes no part in), so
//     they cross the barriers in flight.
// The same three with the read phases only (no short phases) separate the
// cost of a boundary from that of the short phases' own latency.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/dev/bench_timing.cuh"
#include "kernels/launch.cu"

namespace bench {

namespace cg = cooperative_groups;
using namespace voltad::kernels;

constexpr int kThreads = 128;
constexpr int kVector = 4096;     // floats of a short phase's vector (a row of x)
constexpr int kShortBlocks = 32;  // blocks a short phase runs on (RMSNorm's spread)
constexpr int kAhead = 4;         // 16-byte loads a thread has in flight

// A phase: `words` 16-byte words from `offset` (a read phase), or none (a
// short phase).
struct Phase {
  size_t offset, words;
};

// Phase i reads vector i % 2 and writes vector (i + 1) % 2.
__device__ __forceinline__ const float* vector_in(const float* vecs, int i) {
  return vecs + (i & 1) * kVector;
}
__device__ __forceinline__ float* vector_out(float* vecs, int i) {
  return vecs + ((i + 1) & 1) * kVector;
}

struct Ahead {  // a thread's first loads of a read phase
  uint4 w[kAhead];
};

__device__ __forceinline__ Ahead load_ahead(const uint4* p, size_t n, size_t first, size_t stride) {
  Ahead a;
#pragma unroll
  for (int k = 0; k < kAhead; ++k) {
    const size_t i = first + size_t(k) * stride;
    a.w[k] = i < n ? __ldg(p + i) : make_uint4(0, 0, 0, 0);
  }
  return a;
}

// The rest of a read phase after its first kAhead loads (already in `a`),
// folded with the value the previous phase left (`dep`): the sum.
__device__ __forceinline__ uint32_t read_rest(const uint4* p, size_t n, size_t first, size_t stride,
                                              const Ahead& a, float dep) {
  uint32_t acc = __float_as_uint(dep);
#pragma unroll
  for (int k = 0; k < kAhead; ++k) acc ^= a.w[k].x ^ a.w[k].w;
  size_t i = first + size_t(kAhead) * stride;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 w0 = __ldg(p + i), w1 = __ldg(p + i + stride), w2 = __ldg(p + i + 2 * stride),
                w3 = __ldg(p + i + 3 * stride);
    acc ^= w0.x ^ w0.w ^ w1.y ^ w1.z ^ w2.x ^ w2.w ^ w3.y ^ w3.z;
  }
  for (; i < n; i += stride) acc ^= __ldg(p + i).x;
  return acc;
}

// A short phase's block: reads the whole vector (from L2: another block
// wrote it), sums its squares, writes its slice scaled (RMSNorm's shape).
__device__ __forceinline__ void short_block(const float* in, float* out, int block) {
  __shared__ float partial[kThreads / 32];
  float ss = 0.0f;
  for (int i = threadIdx.x; i < kVector; i += kThreads) {
    const float x = __ldcg(in + i);
    ss = fmaf(x, x, ss);
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = rsqrtf(total / kVector + 1e-6f);
  for (int i = block * (kVector / kShortBlocks) + threadIdx.x;
       i < (block + 1) * (kVector / kShortBlocks); i += kThreads)
    out[i] = __ldcg(in + i) * inv;
  __syncthreads();  // `partial` is reused by the next short phase
}

// The value a read phase takes from the previous phase, and where its sum goes.
__device__ __forceinline__ void read_phase_end(float* out, uint32_t acc) {
  // Keep the sum finite and small: only the dependency matters.
  if (threadIdx.x == 0) out[blockIdx.x % kVector] = float(acc & 0xFF) * 1e-3f;
}

// --- a kernel a phase -------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    kernel_read_phase(const uint4* w, size_t n, float* vecs, int i) {
  const size_t stride = size_t(gridDim.x) * kThreads,
               first = blockIdx.x * size_t(kThreads) + threadIdx.x;
  const Ahead a = load_ahead(w, n, first, stride);  // weights: before the wait
  wait_for_previous_kernel();
  const float dep = __ldcg(vector_in(vecs, i) + blockIdx.x % kVector);
  const uint32_t acc = read_rest(w, n, first, stride, a, dep);
  release_next_kernel();
  read_phase_end(vector_out(vecs, i), acc);
}

__global__ void __launch_bounds__(kThreads) kernel_short_phase(float* vecs, int i) {
  wait_then_release_next();
  short_block(vector_in(vecs, i), vector_out(vecs, i), blockIdx.x);
}

// --- one persistent kernel ----------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    kernel_persistent(const uint4* base, const Phase* phases, int n_phases, float* vecs,
                      bool ahead) {
  cg::grid_group grid = cg::this_grid();
  const size_t stride = size_t(gridDim.x) * kThreads,
               first = blockIdx.x * size_t(kThreads) + threadIdx.x;
  Ahead next{};
  int next_phase = -1;  // the read phase whose first loads `next` holds
  // Issues the first loads of the first read phase after phase i.
  auto load_next = [&](int i) {
    for (int j = i + 1; j < n_phases; ++j)
      if (phases[j].words) {
        next = load_ahead(base + phases[j].offset, phases[j].words, first, stride);
        next_phase = j;
        return;
      }
  };
  for (int i = 0; i < n_phases; ++i) {
    const Phase ph = phases[i];
    if (ph.words) {
      const uint4* w = base + ph.offset;
      const Ahead a = next_phase == i ? next : load_ahead(w, ph.words, first, stride);
      const float dep = __ldcg(vector_in(vecs, i) + blockIdx.x % kVector);
      const uint32_t acc = read_rest(w, ph.words, first, stride, a, dep);
      if (ahead) load_next(i);
      read_phase_end(vector_out(vecs, i), acc);
    } else if (blockIdx.x < kShortBlocks) {
      short_block(vector_in(vecs, i), vector_out(vecs, i), blockIdx.x);
    } else if (ahead && next_phase <= i) {
      load_next(i);
    }
    if (i + 1 < n_phases) grid.sync();  // n - 1 boundaries, as the kernel forms have
  }
}

// --- the harness --------------------------------------------------------------

using bench_timing::time_ms;

// ms a step, from kSteps steps between the events: the host's submission
// of the first is then a quarter of what it would be.
constexpr int kSteps = 4;
template <class F>
float time_steps(F&& step, cudaStream_t stream) {
  auto steps = [&] {
    for (int s = 0; s < kSteps; ++s) step();
  };
  return time_ms(steps, stream) / kSteps;
}

// Llama-3-8B Q4_K_M's decode step at batch 1, as phases over one pool.
std::vector<Phase> llama3_step(bool with_short, size_t& words_total) {
  constexpr size_t kWordBytes = sizeof(uint4);
  const size_t qkv = 15237120, o = 9437184, gate_up = 66060288, down_q6 = 48168960,
               down_q4 = 33030144, output = 431030272;
  std::vector<Phase> phases;
  size_t at = 0;
  auto read = [&](size_t bytes) {
    phases.push_back({at, bytes / kWordBytes});
    at += bytes / kWordBytes;
  };
  auto short_phase = [&] {
    if (with_short) phases.push_back({0, 0});
  };
  for (int layer = 0; layer < 32; ++layer) {
    short_phase();  // attention RMSNorm
    read(qkv);
    short_phase();  // attention pass 1
    short_phase();  // combine
    read(o);
    short_phase();  // FFN RMSNorm
    read(gate_up);
    short_phase();  // SwiGLU
    read(layer % 2 == 0 ? down_q6 : down_q4);
  }
  short_phase();  // final RMSNorm
  read(output);
  words_total = at;
  return phases;
}

struct Result {
  std::string what;
  float ms;
};

}  // namespace bench

int main() {
  using namespace bench;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int cooperative = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  std::printf("device: %s, %d SMs, L2 %d MB, cooperative launch %s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, cooperative ? "yes" : "no");
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Copy bandwidth (read + write), as voltad-bench measures it.
  const size_t copy_bytes = size_t(1) << 30;
  uint8_t *src = nullptr, *dst = nullptr;
  CUDA_CHECK(cudaMalloc(&src, copy_bytes));
  CUDA_CHECK(cudaMalloc(&dst, copy_bytes));
  CUDA_CHECK(cudaMemset(src, 1, copy_bytes));
  // cudaMemset runs on the legacy stream, which `stream` (non-blocking) does
  // not wait for.
  CUDA_CHECK(cudaDeviceSynchronize());
  const float copy_ms = time_ms(
      [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream)); },
      stream);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_gbs);

  size_t words = 0;
  llama3_step(true, words);
  uint4* pool = nullptr;
  CUDA_CHECK(cudaMalloc(&pool, words * sizeof(uint4)));
  CUDA_CHECK(cudaMemset(pool, 1, words * sizeof(uint4)));
  float* vecs = nullptr;
  CUDA_CHECK(cudaMalloc(&vecs, 2 * kVector * sizeof(float)));
  CUDA_CHECK(cudaMemset(vecs, 0, 2 * kVector * sizeof(float)));
  CUDA_CHECK(cudaDeviceSynchronize());  // the legacy-stream memsets, before `stream` reads

  int per_sm = 0;
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_persistent, kThreads, 0));
  const int grid = per_sm * prop.multiProcessorCount;
  std::printf("grid: %d blocks of %d threads (%d an SM), the same for every form\n", grid, kThreads,
              per_sm);
  const double bytes = double(words) * sizeof(uint4);
  std::printf("step: %.3f GB of weights read\n\n", bytes / 1e9);
  std::printf("%-46s %9s %8s %7s %8s\n", "form", "ms/step", "GB/s", "% copy", "tok/s");

  std::vector<Result> results;
  for (bool with_short : {false, true}) {
    size_t w = 0;
    const std::vector<Phase> phases = llama3_step(with_short, w);
    const std::string steps = with_short ? "step" : "reads only";
    auto report = [&](const std::string& what, float ms) {
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("%-46s %9.3f %8.0f %6.1f%% %8.1f\n", (steps + ", " + what).c_str(), ms, gbs,
                  100.0 * gbs / copy_gbs, 1e3 / ms);
      std::fflush(stdout);
      results.push_back({steps + ", " + what, ms});
    };
    // A kernel a phase, from a graph: plain launches, then PDL where the
    // device takes it (launch_kernel decides, as in the engine).
    for (KernelSet set : {KernelSet::Portable, KernelSet::Auto}) {
      if (set == KernelSet::Auto && !programmatic_launch_supported()) continue;
      KernelSetScope scope(set);
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < int(phases.size()); ++i) {
        if (phases[size_t(i)].words)
          launch_kernel(kernel_read_phase, dim3(grid), dim3(kThreads), 0, stream,
                        static_cast<const uint4*>(pool + phases[size_t(i)].offset),
                        phases[size_t(i)].words, vecs, i);
        else
          launch_kernel(kernel_short_phase, dim3(kShortBlocks), dim3(kThreads), 0, stream, vecs, i);
      }
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CUDA_CHECK(cudaGetLastError());  // launch_kernel leaves a launch error here
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      report(set == KernelSet::Auto ? "kernels, PDL (auto)" : "kernels, plain (portable)",
             time_steps([&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream));
      CUDA_CHECK(cudaGraphExecDestroy(exec));
      CUDA_CHECK(cudaGraphDestroy(graph));
    }
    if (!cooperative) continue;
    Phase* d_phases = nullptr;
    CUDA_CHECK(cudaMalloc(&d_phases, phases.size() * sizeof(Phase)));
    // On `stream`: a pageable cudaMemcpy may return before its DMA lands, and
    // the non-blocking stream would not wait for it.
    CUDA_CHECK(cudaMemcpyAsync(d_phases, phases.data(), phases.size() * sizeof(Phase),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (bool ahead : {false, true}) {
      const uint4* base = pool;
      int n_phases = int(phases.size());
      void* args[] = {&base, &d_phases, &n_phases, &vecs, &ahead};
      auto launch = [&] {
        CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel_persistent),
                                               dim3(grid), dim3(kThreads), args, 0, stream));
      };
      report(ahead ? "persistent, loads ahead" : "persistent", time_steps(launch, stream));
    }
    CUDA_CHECK(cudaFree(d_phases));
  }

  // The cost of a boundary: (kernels - persistent) / boundaries of the step.
  std::printf("\n== summary ==\n");
  size_t w = 0;
  const int boundaries_reads = int(llama3_step(false, w).size()) - 1;
  const int boundaries_step = int(llama3_step(true, w).size()) - 1;
  auto find = [&](const std::string& what) {
    for (const Result& r : results)
      if (r.what == what) return r.ms;
    return -1.0f;
  };
  for (const char* steps : {"reads only", "step"}) {
    const int b = std::string(steps) == "step" ? boundaries_step : boundaries_reads;
    for (const char* pform : {"persistent", "persistent, loads ahead"}) {
      const float persistent = find(std::string(steps) + ", " + pform);
      for (const char* form : {"kernels, plain (portable)", "kernels, PDL (auto)"}) {
        const float k = find(std::string(steps) + ", " + form);
        if (k > 0 && persistent > 0)
          std::printf("%s, %s: %.2f us a boundary more than %s (%d boundaries)\n", steps, form,
                      (k - persistent) * 1e3 / b, pform, b);
      }
    }
  }
  CUDA_CHECK(cudaFree(pool));
  CUDA_CHECK(cudaFree(vecs));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
