// Matvec bandwidth harness (not part of the build; scripts/device-test.sh
// --bench compiles it with nvcc): times the quantized matvecs at Llama-3-8B
// shapes for several (rows per warp R, chunks in flight U) variants and the
// production dispatch, against the device-to-device copy bandwidth measured
// in the same run, then one whole layer's matvecs (Q4_K_M: Q4_K + Q6_K)
// launched plainly and replayed from a CUDA graph. Then batched decode:
// the dp4a matvecs (slices of 8 tokens) against the tensor-core GEMMs (the
// narrow kernel, kernels/gemm_narrow.cu, and the prefill tiles) at 2..32
// tokens, per matrix and for a whole layer from a graph.
//
// Every matrix is one of many copies spread over ~2 GB and used in turn, so
// no launch finds its weights in the 50-60 MB L2. The weight bytes are
// random (scales made finite fp16). Times are medians of 7 rounds, each the
// mean over a pass through all copies, from CUDA events.
//
// It includes the kernel sources so it can launch any template variant;
// -DVOLTAD_WEIGHTS_VIA_L1=1 builds it with weight loads through L1, and
// -DVOLTAD_MATVEC_ONE_LEVEL=1 with the Int* matvecs reading only the first
// level of the two-level activations (the pre-two-level cost; wrong results).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dev/bench_timing.cuh"
#include "kernels/gemm_narrow.cu"
#include "kernels/gemm_narrow_pairs.cu"
#include "kernels/gemm_narrow_sm80.cu"
#include "kernels/gemm_sm80.cu"
#include "kernels/gemm_wmma.cu"
#include "kernels/launch.cu"
#include "kernels/matvec_bulk_sm90.cu"
#include "kernels/matvec_dispatch.cu"
#include "kernels/matvec_float.cu"
#include "kernels/matvec_int4.cu"
#include "kernels/matvec_int8.cu"
#include "kernels/matvec_stream.cu"
#include "kernels/narrow_bulk_sm90.cu"
#include "kernels/narrow_x_sm80.cu"

namespace bench {

using namespace voltad::kernels;

constexpr size_t kPoolBytes = size_t(2) << 30;

__global__ void kernel_random_bytes(uint32_t* p, size_t n_words, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    h *= 0xC2B2AE3Du;
    h ^= h >> 16;
    p[i] = h;
  }
}

// fp16 words in [2^-4, 2^-1) of either sign: finite scales.
__global__ void kernel_finite_halves(uint16_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint16_t exponent = uint16_t(11 + ((p[i] >> 10) & 3));
    p[i] = uint16_t((p[i] & 0x83FF) | (exponent << 10));
  }
}

using bench_timing::time_ms;

struct Pool {
  uint8_t* base = nullptr;
  Pool() {
    CUDA_CHECK(cudaMalloc(&base, kPoolBytes));
    kernel_random_bytes<<<4096, 256>>>(reinterpret_cast<uint32_t*>(base), kPoolBytes / 4, 12345);
    CUDA_CHECK(cudaGetLastError());
  }
};

// A matrix of layout l at byte `at` of the pool, its scales made finite.
// (Int4K256: the sc/mn bytes become fp16 patterns too: still valid six-bit
// fields.)
PackedMatrixView view_at(const Pool& pool, const PackedLayout& l, size_t at) {
  PackedMatrixView v{l, pool.base + at};
  auto halves = [&](uint64_t off, int64_t row_bytes) {
    if (row_bytes == 0) return;
    kernel_finite_halves<<<1024, 256>>>(reinterpret_cast<uint16_t*>(pool.base + at + off),
                                        size_t(row_bytes) * l.rows / 2);
    CUDA_CHECK(cudaGetLastError());
  };
  halves(l.scales_offset, l.scale_row_bytes);
  halves(l.super_offset, l.super_row_bytes);
  return v;
}

// Copies of one layout laid end to end over the pool.
std::vector<PackedMatrixView> copies_of(const Pool& pool, const PackedLayout& l) {
  std::vector<PackedMatrixView> out;
  const size_t stride = packed_align256(l.total_bytes);
  for (size_t at = 0; at + stride <= kPoolBytes; at += stride) out.push_back(view_at(pool, l, at));
  CUDA_CHECK(cudaDeviceSynchronize());
  return out;
}

struct Activations {
  float* x = nullptr;
  QuantizedActivations q;
  float* y = nullptr;
  explicit Activations(int64_t max_cols, int64_t max_rows, int batch) {
    CUDA_CHECK(cudaMalloc(&x, sizeof(float) * max_cols * batch));
    CUDA_CHECK(cudaMalloc(&q.q, quantized_activation_q_bytes(batch, max_cols)));
    CUDA_CHECK(cudaMalloc(&q.scales, quantized_activation_scale_bytes(batch, max_cols)));
    CUDA_CHECK(cudaMalloc(&y, sizeof(float) * max_rows * batch));
    std::vector<float> h(size_t(max_cols * batch));
    for (size_t i = 0; i < h.size(); ++i)
      h[i] = float(int((i * 2654435761u) % 2001) - 1000) / 1000.f;
    CUDA_CHECK(cudaMemcpy(x, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
};

using Launcher = void (*)(const MatvecArgs&, cudaStream_t);

struct Variant {
  const char* name;
  Launcher launch;
  const void* kernel;  // for the register / occupancy report; null: dispatch
};

// "regs 56, 9 blocks/SM" for a matvec kernel of kMatvecWarpsPerBlock warps.
std::string occupancy(const void* kernel) {
  if (!kernel) return "";
  cudaFuncAttributes attr;
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  int blocks = 0;
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kMatvecWarpsPerBlock * 32, 0));
  return "  regs " + std::to_string(attr.numRegs) + ", " + std::to_string(blocks) + " blk/SM";
}

// The roofline of one kernel that only streams the same bytes: 16-byte
// loads, 4 in flight per thread, a full grid, a sum so nothing is elided.
__global__ void kernel_read_only(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
                d = __ldg(p + i + 3 * stride);
    acc ^= a.x ^ a.w ^ b.y ^ b.z ^ c.x ^ c.w ^ d.y ^ d.z;
  }
  for (; i < n; i += stride) acc ^= __ldg(p + i).x;
  if (acc == 0x12345678u) *sink = acc;
}

__global__ void kernel_empty() {}

struct Row {
  std::string what;
  double us, gbs, frac;
};
std::vector<Row> g_rows;

void report(const std::string& what, double bytes, float ms_per_launch, double copy_gbs,
            const std::string& note = "") {
  const double gbs = bytes / (ms_per_launch * 1e-3) / 1e9;
  g_rows.push_back({what, ms_per_launch * 1e3, gbs, gbs / copy_gbs});
  std::printf("%-44s %9.2f us %8.0f GB/s %5.1f%%%s\n", what.c_str(), ms_per_launch * 1e3, gbs,
              100.0 * gbs / copy_gbs, note.c_str());
  std::fflush(stdout);
}

float time_matvec(const std::vector<PackedMatrixView>& mats, Activations& act, int batch,
                  Launcher launch) {
  const int n = int(mats.size());
  const int iters = std::max(n, 64);
  MatvecArgs a;
  a.batch = batch;
  a.xq = act.q;
  a.x = act.x;
  a.ldx = mats[0].layout.cols;
  a.y = act.y;
  a.ldy = mats[0].layout.rows;
  const float ms = time_ms([&] {
    for (int i = 0; i < iters; ++i) {
      a.w = mats[size_t(i % n)];
      launch(a, nullptr);
    }
  });
  return ms / float(iters);
}

template <PackedFormat F, int R, int B, int U>
void int4_launch(const MatvecArgs& a, cudaStream_t s) {
  launch_int4<F, R, B, U>(a, s);
}
template <int R, int B, int U>
void int6_launch(const MatvecArgs& a, cudaStream_t s) {
  launch_int6<R, B, U>(a, s);
}
template <PackedFormat F, int R, int B, int U>
Variant int4_variant(const char* name) {
  return {name, int4_launch<F, R, B, U>,
          reinterpret_cast<const void*>(kernel_matvec_int4<F, R, B, U, 1>)};
}
// Batch 1 as the dispatch had it before the streaming kernels: 4 rows a
// warp, sliced where rows are few.
template <PackedFormat F>
Variant int4_sliced_variant(const char* name) {
  return {name, launch_int4_sliced<F, 4, 1, 1>,
          reinterpret_cast<const void*>(kernel_matvec_int4<F, 4, 1, 1, 1>)};
}
template <class C, int R>
Variant stream_variant(const char* name) {
  return {name, launch_stream_sliced<C, R>,
          reinterpret_cast<const void*>(kernel_matvec_stream<C, R, 1>)};
}
template <int R, int B, int U>
Variant int6_variant(const char* name) {
  return {name, int6_launch<R, B, U>, reinterpret_cast<const void*>(kernel_matvec_int6<R, B, U, 1>)};
}

// Batched decode, n tokens: launch_matvec (dp4a, slices of 8: the weights
// are read once per slice) against launch_gemm with the narrow tiles and the
// tile the prefill model picks; single matrices over pool copies, then a
// Q4_K_M layer (q|k, v, o, gate|up, down) replayed from a graph.
void batched_decode(const Pool& pool, double copy_gbs) {
  constexpr auto Q4K = PackedFormat::Int4K256;
  constexpr auto Q6K = PackedFormat::Int6K256;
  const int kMaxN = 32;
  Activations act(14336, 28672, kMaxN);
  launch_quantize_activations(act.x, 14336, kMaxN, 14336, act.q, nullptr);
  enum class Path { Matvec, Narrow, Prefill, Narrow80 };
  const char* names[] = {"dp4a", "narrow", "prefill-tile", "narrow-sm80"};
  GemmScratch scratch;
  scratch.bytes = gemm_narrow_sm80_scratch_bytes(kMaxN, 14336);
  CUDA_CHECK(cudaMalloc(&scratch.data, scratch.bytes));
  auto launch = [&](Path p, const PackedMatrixView& w, int n, cudaStream_t st) {
    if (p == Path::Matvec) {
      MatvecArgs a;
      a.w = w;
      a.batch = n;
      a.xq = act.q;
      a.x = act.x;
      a.ldx = 14336;
      a.y = act.y;
      a.ldy = 28672;
      return launch_matvec(a, st);
    }
    GemmArgs g;
    g.w = w;
    g.x = act.x;
    g.ldx = 14336;
    g.n = n;
    g.y = act.y;
    g.ldy = 28672;
    if (p == Path::Narrow80) return launch_gemm_narrow_sm80(g, scratch, st);
    launch_gemm(g, p == Path::Narrow ? GemmTile::N16 : GemmTile::T32x64, st);
  };
  struct M {
    PackedFormat f;
    int64_t rows, cols;
    const char* name;
  };
  const M mats[] = {{Q4K, 4096, 4096, "Q4_K 4096x4096"},
                    {Q4K, 28672, 4096, "Q4_K 28672x4096"},
                    {Q6K, 4096, 14336, "Q6_K 4096x14336"},
                    {PackedFormat::Int4Sym32, 4096, 4096, "Q4_0 4096x4096"}};
  std::printf("\n== batched decode: one matrix, n tokens ==\n");
  for (const M& m : mats) {
    const PackedLayout l = make_packed_layout(m.f, m.rows, m.cols);
    const auto copies = copies_of(pool, l);
    const double bytes = double(packed_payload_bytes(l));
    for (int n : {1, 2, 4, 8, 16, 24, 32}) {
      for (Path p : {Path::Matvec, Path::Narrow, Path::Prefill, Path::Narrow80}) {
        if (p == Path::Prefill && n < 24) continue;
        if (p == Path::Narrow80 && !gemm_narrow_sm80_supports(
                                       [&] {
                                         GemmArgs g;
                                         g.w = copies[0];
                                         g.x = act.x;
                                         g.ldx = 14336;
                                         g.n = n;
                                         g.y = act.y;
                                         g.ldy = 28672;
                                         return g;
                                       }(),
                                       scratch))
          continue;
        const int count = int(copies.size()), iters = std::max(count, 64);
        const float ms = time_ms([&] {
          for (int i = 0; i < iters; ++i) launch(p, copies[size_t(i % count)], n, nullptr);
        });
        report(std::string("batched ") + m.name + " n" + std::to_string(n) + " " + names[int(p)],
               bytes, ms / float(iters), copy_gbs);
      }
    }
  }
  std::printf("\n== batched decode: a Q4_K_M layer from a graph ==\n");
  const M layer[] = {{Q4K, 5120, 4096, "q|k"},
                     {Q6K, 1024, 4096, "v"},
                     {Q4K, 4096, 4096, "o"},
                     {Q4K, 28672, 4096, "gate|up"},
                     {Q6K, 4096, 14336, "down"}};
  size_t stride = 0;
  double layer_bytes = 0;
  for (const M& m : layer) {
    const PackedLayout l = make_packed_layout(m.f, m.rows, m.cols);
    stride += packed_align256(l.total_bytes);
    layer_bytes += double(packed_payload_bytes(l));
  }
  const int n_layers = int(kPoolBytes / stride);
  std::vector<std::vector<PackedMatrixView>> per_layer;
  size_t at = 0;
  for (int L = 0; L < n_layers; ++L) {
    std::vector<PackedMatrixView> v;
    for (const M& m : layer) {
      const PackedLayout l = make_packed_layout(m.f, m.rows, m.cols);
      v.push_back(view_at(pool, l, at));
      at += packed_align256(l.total_bytes);
    }
    per_layer.push_back(v);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int n : {1, 2, 4, 6, 8, 16, 24, 32}) {
    for (Path p : {Path::Matvec, Path::Narrow, Path::Narrow80}) {
      if (p == Path::Narrow && n < 8) continue;
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      for (int L = 0; L < n_layers; ++L)
        for (size_t i = 0; i < std::size(layer); ++i) launch(p, per_layer[size_t(L)][i], n, stream);
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      const float ms = time_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream);
      report("batched layer n" + std::to_string(n) + " " + names[int(p)], layer_bytes,
             ms / n_layers, copy_gbs);
      CUDA_CHECK(cudaGraphExecDestroy(exec));
      CUDA_CHECK(cudaGraphDestroy(graph));
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// gate|up of Llama-3-8B (28672 rows) and Qwen3-8B (24576) at 1-8 tokens
// under `auto`: the narrow GEMM's 32-row blocks against its streaming
// blocks (narrow_bulk_sm90.cu), x already in the narrow layout (no
// conversion launch), back-to-back launches over pool copies.
void narrow_blocks_vs_bulk(const Pool& pool, double copy_gbs) {
  const KernelSetScope auto_set(KernelSet::Auto);
  Activations act(4096, 28672, 8);
  GemmScratch scratch;
  scratch.bytes = gemm_narrow_sm80_scratch_bytes(8, 4096);
  CUDA_CHECK(cudaMalloc(&scratch.data, scratch.bytes));
  CUDA_CHECK(cudaMemset(scratch.data, 0, scratch.bytes));
  scratch.holds_x = act.x;
  std::printf("\n== narrow GEMM at 1-8 tokens: 32-row blocks against streaming blocks ==\n");
  for (int64_t rows : {int64_t(28672), int64_t(24576)}) {
    const PackedLayout l = make_packed_layout(PackedFormat::Int4K256, rows, 4096);
    const auto copies = copies_of(pool, l);
    const double bytes = double(packed_payload_bytes(l));
    for (int n : {1, 2, 4, 8}) {
      for (NarrowBulk how : {NarrowBulk::Never, NarrowBulk::Always}) {
        gemm_narrow_sm80_set_bulk(how);
        const int count = int(copies.size()), iters = std::max(count, 64);
        const float ms = time_ms([&] {
          for (int i = 0; i < iters; ++i) {
            GemmArgs g;
            g.w = copies[size_t(i % count)];
            g.x = act.x;
            g.ldx = 4096;
            g.n = n;
            g.y = act.y;
            g.ldy = 28672;
            launch_gemm_narrow_sm80(g, scratch, nullptr);
          }
        });
        report("Q4_K " + std::to_string(rows) + "x4096 n" + std::to_string(n) +
                   (how == NarrowBulk::Always ? " streaming" : " 32-row"),
               bytes, ms / float(iters), copy_gbs);
      }
    }
  }
  gemm_narrow_sm80_set_bulk(NarrowBulk::Rule);
  CUDA_CHECK(cudaFree(scratch.data));
}

// Each matrix of a Q4_K_M layer, 3 launches at 1, 8 and 32 tokens through
// the sm_80 narrow GEMM: a short run for Nsight Compute to profile.
void profile_narrow80(const Pool& pool) {
  Activations act(14336, 28672, 32);
  GemmScratch scratch;
  scratch.bytes = gemm_narrow_sm80_scratch_bytes(32, 14336);
  CUDA_CHECK(cudaMalloc(&scratch.data, scratch.bytes));
  const struct {
    PackedFormat f;
    int64_t rows, cols;
  } layer[] = {{PackedFormat::Int4K256, 5120, 4096},
               {PackedFormat::Int6K256, 1024, 4096},
               {PackedFormat::Int4K256, 4096, 4096},
               {PackedFormat::Int4K256, 28672, 4096},
               {PackedFormat::Int6K256, 4096, 14336},
               {PackedFormat::Int4Sym32, 28672, 4096}};
  for (int n : {1, 8, 32})
    for (const auto& m : layer) {
      const auto copies = copies_of(pool, make_packed_layout(m.f, m.rows, m.cols));
      for (int i = 0; i < 3; ++i) {
        GemmArgs g;
        g.w = copies[size_t(i) % copies.size()];
        g.x = act.x;
        g.ldx = 14336;
        g.n = n;
        g.y = act.y;
        g.ldy = 28672;
        launch_gemm_narrow_sm80(g, scratch, nullptr);
      }
    }
  CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("profile-narrow80: %d launches\n", 3 * 3 * int(std::size(layer)));
}

}  // namespace bench

// Arguments: none, every section; `batched`, only the batched decode;
// `profile-narrow80`, each matrix of a Q4_K_M layer 3 times at 1, 8 and 32
// tokens through the sm_80 narrow GEMM and nothing else (for Nsight Compute);
// `narrow-bulk`, gate|up at 1-8 tokens in the narrow GEMM's two block shapes.
int main(int argc, char** argv) {
  using namespace bench;
  const std::string mode = argc > 1 ? argv[1] : "";
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB; activations: %s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20,
              VOLTAD_MATVEC_ONE_LEVEL ? "ONE level (timing only)" : "two levels");

  // Copy bandwidth: bytes read + bytes written per second, 1 GiB buffers.
  const size_t copy_bytes = size_t(1) << 30;
  void *src, *dst;
  CUDA_CHECK(cudaMalloc(&src, copy_bytes));
  CUDA_CHECK(cudaMalloc(&dst, copy_bytes));
  CUDA_CHECK(cudaMemset(src, 1, copy_bytes));
  const float copy_ms =
      time_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); });
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_gbs);
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));

  Pool pool;
  if (mode == "profile-narrow80") {
    profile_narrow80(pool);
    return 0;
  }
  if (mode == "narrow-bulk") {
    narrow_blocks_vs_bulk(pool, copy_gbs);
    return 0;
  }
  if (mode == "batched") {
    batched_decode(pool, copy_gbs);
    return 0;
  }
  Activations act(14336, 14336, 8);
  {
    // Quantize once per batch size actually used (contents don't change timing).
    launch_quantize_activations(act.x, 14336, 8, 14336, act.q, nullptr);
  }

  struct Shape {
    int64_t rows, cols;
    const char* name;
  };
  const Shape shapes[] = {{4096, 4096, "4096x4096 (wq/wo)"},
                          {14336, 4096, "14336x4096 (w_gate/w_up)"},
                          {4096, 14336, "4096x14336 (w_down)"}};

  constexpr auto Q40 = PackedFormat::Int4Sym32;
  constexpr auto Q4K = PackedFormat::Int4K256;
  const Variant dispatch{"dispatch", launch_matvec, nullptr};
  const Variant q40_b1[] = {int4_sliced_variant<Q40>("classic R4 U1 sliced"),
                            stream_variant<Int4Chunk<Q40>, 2>("stream R2"),
                            stream_variant<Int4Chunk<Q40>, 4>("stream R4"), dispatch};
  const Variant q4k_b1[] = {int4_sliced_variant<Q4K>("classic R4 U1 sliced"),
                            stream_variant<Int4Chunk<Q4K>, 2>("stream R2"),
                            stream_variant<Int4Chunk<Q4K>, 4>("stream R4"), dispatch};
  const Variant q40_b8[] = {
      int4_variant<Q40, 2, 8, 1>("R2 U1"), int4_variant<Q40, 4, 8, 1>("R4 U1"),
      int4_variant<Q40, 4, 8, 2>("R4 U2"), int4_variant<Q40, 8, 8, 1>("R8 U1"), dispatch};
  const Variant q4k_b8[] = {
      int4_variant<Q4K, 2, 8, 1>("R2 U1"), int4_variant<Q4K, 4, 8, 1>("R4 U1"),
      int4_variant<Q4K, 4, 8, 2>("R4 U2"), int4_variant<Q4K, 8, 8, 1>("R8 U1"), dispatch};
  const Variant q6k_b1[] = {{"classic R2 U2 sliced", launch_int6_format, nullptr},
                            stream_variant<Int6Chunk, 1>("stream R1"),
                            stream_variant<Int6Chunk, 2>("stream R2"),
                            stream_variant<Int6Chunk, 4>("stream R4"),
                            dispatch};
  const Variant q6k_b8[] = {int6_variant<2, 8, 1>("R2 U1"), int6_variant<4, 8, 1>("R4 U1"),
                            int6_variant<8, 8, 1>("R8 U1"), dispatch};

  // Launch-to-launch floor: back-to-back empty kernels.
  {
    const int n = 1000;
    const float ms = time_ms([&] {
      for (int i = 0; i < n; ++i) kernel_empty<<<132, 128>>>();
    });
    std::printf("empty kernel, back to back: %.2f us per launch\n", ms * 1e3 / n);
  }
  uint32_t* sink;
  CUDA_CHECK(cudaMalloc(&sink, 4));
  int read_blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&read_blocks, kernel_read_only, 256, 0));

  auto run = [&](PackedFormat f, const char* fname, const Shape& s, int batch,
                 const Variant* variants, size_t n_variants) {
    const PackedLayout l = make_packed_layout(f, s.rows, s.cols);
    const auto mats = copies_of(pool, l);
    const double bytes = double(packed_payload_bytes(l));
    if (batch == 1) {
      // The same bytes streamed by a kernel that does nothing else.
      const int n = int(mats.size()), iters = std::max(n, 64);
      const float ms = time_ms([&] {
        for (int i = 0; i < iters; ++i)
          kernel_read_only<<<read_blocks * prop.multiProcessorCount, 256>>>(
              reinterpret_cast<const uint4*>(mats[size_t(i % n)].data), size_t(bytes) / 16, sink);
      });
      report(std::string(fname) + " " + s.name + " read-only", bytes, ms / float(iters), copy_gbs);
    }
    for (size_t v = 0; v < n_variants; ++v) {
      const float ms = time_matvec(mats, act, batch, variants[v].launch);
      report(
          std::string(fname) + " " + s.name + " b" + std::to_string(batch) + " " + variants[v].name,
          bytes, ms, copy_gbs, occupancy(variants[v].kernel));
    }
  };
  for (const Shape& s : shapes) {
    run(Q40, "Q4_0", s, 1, q40_b1, std::size(q40_b1));
    run(Q4K, "Q4_K", s, 1, q4k_b1, std::size(q4k_b1));
    run(Q40, "Q4_0", s, 8, q40_b8, std::size(q40_b8));
    run(Q4K, "Q4_K", s, 8, q4k_b8, std::size(q4k_b8));
  }
  run(PackedFormat::Int6K256, "Q6_K", shapes[2], 1, q6k_b1, std::size(q6k_b1));
  run(PackedFormat::Int6K256, "Q6_K", shapes[2], 8, q6k_b8, std::size(q6k_b8));

  // One Llama-3-8B Q4_K_M layer's matvecs (w_v, w_down in Q6_K as in the
  // Q6_K layers) plus the three activation quantizations, through
  // launch_matvec, over 14 layer copies; plain launches and a graph.
  for (int batch : {1, 8}) {
    struct M {
      PackedFormat f;
      int64_t rows, cols;
    };
    const M layer[] = {{Q4K, 4096, 4096},
                       {Q4K, 1024, 4096},
                       {PackedFormat::Int6K256, 1024, 4096},
                       {Q4K, 4096, 4096},
                       {Q4K, 14336, 4096},
                       {Q4K, 14336, 4096},
                       {PackedFormat::Int6K256, 4096, 14336}};
    std::vector<std::vector<PackedMatrixView>> per_layer;
    double layer_bytes = 0;
    size_t at = 0, layer_stride = 0;
    for (const M& m : layer)
      layer_stride += packed_align256(make_packed_layout(m.f, m.rows, m.cols).total_bytes);
    const int n_layers = int(kPoolBytes / layer_stride);
    for (int L = 0; L < n_layers; ++L) {
      std::vector<PackedMatrixView> mats;
      for (const M& m : layer) {
        const PackedLayout l = make_packed_layout(m.f, m.rows, m.cols);
        mats.push_back(view_at(pool, l, at));
        at += packed_align256(l.total_bytes);
        if (L == 0) layer_bytes += double(packed_payload_bytes(l));
      }
      per_layer.push_back(mats);
    }
    auto step = [&](cudaStream_t stream) {
      for (int L = 0; L < n_layers; ++L) {
        for (size_t i = 0; i < std::size(layer); ++i) {
          if (i == 0 || i == 3 || i == 6)
            launch_quantize_activations(act.x, 14336, batch, layer[i].cols, act.q, stream);
          MatvecArgs a;
          a.w = per_layer[size_t(L)][i];
          a.batch = batch;
          a.xq = act.q;
          a.y = act.y;
          a.ldy = 14336;
          launch_matvec(a, stream);
        }
      }
    };
    const float ms = time_ms([&] { step(nullptr); });
    report("layer Q4_K_M b" + std::to_string(batch) + " launches", layer_bytes, ms / n_layers,
           copy_gbs);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    step(stream);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const float gms = time_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream);
    report("layer Q4_K_M b" + std::to_string(batch) + " graph", layer_bytes, gms / n_layers,
           copy_gbs);
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }

  batched_decode(pool, copy_gbs);

  std::printf("\n== summary (copy %.0f GB/s) ==\n", copy_gbs);
  for (const Row& r : g_rows)
    if (r.what.find("dispatch") != std::string::npos || r.what.find("layer") == 0 ||
        r.what.find("read-only") != std::string::npos)
      std::printf("%-44s %9.2f us %8.0f GB/s %5.1f%%\n", r.what.c_str(), r.us, r.gbs, 100 * r.frac);
  std::printf("\n== batched decode summary ==\n");
  for (const Row& r : g_rows)
    if (r.what.find("batched") == 0)
      std::printf("%-44s %9.2f us %8.0f GB/s %5.1f%%\n", r.what.c_str(), r.us, r.gbs, 100 * r.frac);
  return 0;
}
