// The batch-1 streaming matvecs alone (not part of the build): a driver that
// compiles in seconds, for Nsight Compute and quick timing on the GPU
// machine. It includes only the streaming kernels (kernels/matvec_stream.cu)
// and the dispatch's helpers; bench_matvec.cu times every variant but takes
// a minute or more to compile.
//
//   nvcc -std=c++17 -O3 -I. -arch=sm_90 --expt-relaxed-constexpr -lineinfo \
//     kernels/dev/bench_stream.cu -o /tmp/bench_stream && /tmp/bench_stream
//   ncu --section WarpStateStats --section SourceCounters -k regex:kernel_matvec_stream \
//     --launch-skip 8 --launch-count 2 -o /tmp/stream /tmp/bench_stream
// (with --kernel-name-base demangled, the regex can name an instance, e.g.
// 'kernel_matvec_stream.*Int6Chunk'; --section MemoryWorkloadAnalysis gives
// DRAM throughput and hit rates). Last, probes of the Q4_K kernel: its
// access pattern (Int4KTiledProbe; run 70's Int4KBlockStepProbe and
// Int4KWaveStepProbe), its loads without the decode (Int4KLoadsOnlyProbe,
// LoadsOnly<P>), and gate|up's row-by-row loads against whole sets. Built
// with -DVOLTAD_MATVEC_X_LANE_MAJOR=1 every row reads x's bytes in a warp's
// contiguous order instead (wrong results, the same bytes: run 70).
//
// One argument picks another table instead (docs/PERFORMANCE-RUNS-23-24.md run 24):
//   sweep   Q4_K x 4,096 from half a wave of row groups to four waves;
//   slices  the small products' slices and grids;
//   l2      the products with their weights already in L2, and a prefetch
//           kernel beside a stand-in for the short kernels.
// and (run 25):
//   bulk    the bulk-copy kernel (matvec_bulk_sm90.cu) checked against the
//           streaming one and both timed on gate|up;
//   chain   both on gate|up after a programmatic-launch stand-in for a
//           short kernel, as in the decode graph;
// and (run 26):
//   timeline  when each stage of the bulk kernel's ring is issued, waited
//           for and decoded (globaltimer stamps; -DVOLTAD_BULK_STAGES=3 for
//           a deeper ring).
// Under `auto` the default table's launch_matvec takes the bulk-copy
// kernel for gate|up.
//
// Llama-3-8B's gate|up, q|k|v and o (Q4_K) and down (Q6_K, 4,096 x 14,336)
// matrices, each one of several copies used in turn so that no
// launch finds its weights in L2. Weight bytes are a fixed pattern (timing
// does not depend on them); the output is not checked (test_matvec does).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/dev/bench_timing.cuh"
#include "kernels/gemm_narrow.cu"
#include "kernels/gemm_narrow_pairs.cu"
#include "kernels/gemm_narrow_sm80.cu"
#include "kernels/gemm_sm80.cu"
#include "kernels/gemm_wmma.cu"
#include "kernels/launch.cu"
#include "kernels/matvec_dispatch.cu"
#include "kernels/matvec_stream.cu"
#define VOLTAD_BULK_STAMPS 1
#include "kernels/matvec_bulk_sm90.cu"
#include "kernels/narrow_bulk_sm90.cu"
#include "kernels/narrow_x_sm80.cu"

// launch_matvec's other launchers: never called here (batch 1, Q4_K/Q6_K).
namespace voltad::kernels {
void launch_matvec_int4(const MatvecArgs&, cudaStream_t) {
  std::abort();
}
void launch_matvec_int8(const MatvecArgs&, cudaStream_t) {
  std::abort();
}
void launch_matvec_float(const MatvecArgs&, cudaStream_t) {
  std::abort();
}
}  // namespace voltad::kernels

namespace {

using namespace voltad::kernels;

struct Matrices {
  PackedLayout layout;
  std::vector<uint8_t*> copies;
};

Matrices make(PackedFormat format, int64_t rows, int64_t cols, int n) {
  Matrices m{make_packed_layout(format, rows, cols), {}};
  for (int i = 0; i < n; ++i) {
    uint8_t* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, packed_payload_bytes(m.layout)));
    CUDA_CHECK(cudaMemset(p, 0x11, packed_payload_bytes(m.layout)));  // finite fp16 scales
    m.copies.push_back(p);
  }
  return m;
}

}  // namespace

namespace bench_probe {

using namespace voltad::kernels;

// A timing probe, not a format voltad has: Q4_K's nibbles and headers laid
// out so that each 4-row warp step of the streaming kernel (S = 1) reads
// one contiguous piece, 2 KB of nibbles (row r's 512 bytes at r * 512) and
// 256 bytes of headers, where the packed layout has it read 512 bytes from
// each of 4 rows a row apart. The same bytes in all, the same loop
// (Int4Chunk's dot); the values are not meaningful. Rows a multiple of 4,
// columns of 1,024. The question (PERFORMANCE-RUNS-21-22.md run 22): does the access
// pattern hold Q4_K at ~69% of the copy bandwidth where Q6_K reaches 81%?
// (A named namespace: kernels are instantiated on the type.)
// What the layout probes share: Q4_K's chunk and decode, and a load from
// pieces of 4 rows x 32 chunks (2 KB of nibbles, 256 bytes of headers), the
// next step's piece `step_pieces` pieces on.
struct Int4KPieceProbe {
  using Base = Int4Chunk<PackedFormat::Int4K256>;
  using Raw = Base::Raw;
  static __device__ __forceinline__ Raw load_piece(const uint8_t* q, const uint8_t* s,
                                                   int64_t step_pieces, int r, int c) {
    const int64_t step = c >> 5;
    const int k = c & 31;
    Raw raw;
    raw.w = load_weights_16(q + (step * step_pieces * 2048 + r * 512 + k * 16));
    raw.s = load_weights_16(s + (step * step_pieces * 256 + r * 64 + (k >> 3) * 16));
    return raw;
  }
  static __device__ __forceinline__ float dot(const Raw& r, int j, const ChunkX& x) {
    return Base::dot(r, j, x);
  }
};

struct Int4KTiledProbe : Int4KPieceProbe {
  struct Rows {
    const uint8_t* q;
    const uint8_t* s;
  };
  static __device__ __forceinline__ Rows rows_at(const PackedMatrixView& m, int64_t row0) {
    const PackedLayout& l = m.layout;
    const int64_t tile0 = row0 / 4 * (l.cols / 1024);  // a tile: 4 rows x 32 chunks
    return {m.data + l.quants_offset + tile0 * 2048, m.data + l.scales_offset + tile0 * 256};
  }
  static __device__ __forceinline__ Raw load(const PackedMatrixView&, const Rows& p, int64_t, int r,
                                             int c) {
    return load_piece(p.q, p.s, 1, r, c);
  }
};

// The packed layout's loads with next to no decode: the streaming kernel's
// walk, loads and stores, but a chunk's "dot" only folds its words into one
// bit. The question (docs/PERFORMANCE-RUNS-23-24.md run 24): is the streaming Q4_K kernel's
// ~80% of copy a wave set by its loads (this probe near it) or by the decode
// between them (this probe near the 89-91% of a kernel that only reads)?
struct Int4KLoadsOnlyProbe {
  using Base = Int4Chunk<PackedFormat::Int4K256>;
  using Raw = Base::Raw;
  using Rows = Base::Rows;
  static __device__ __forceinline__ Rows rows_at(const PackedMatrixView& m, int64_t row0) {
    return Base::rows_at(m, row0);
  }
  static __device__ __forceinline__ Raw load(const PackedMatrixView& m, const Rows& p, int64_t row0,
                                             int r, int c) {
    return Base::load(m, p, row0, r, c);
  }
  static __device__ __forceinline__ float dot(const Raw& r, int, const ChunkX& x) {
    const uint32_t v = r.w.x ^ r.w.y ^ r.w.z ^ r.w.w ^ r.s.x ^ r.s.y ^ r.s.z ^ r.s.w ^ x.x0.x;
    return float(v & 1u);
  }
};

// Two more timing probes of the same kind (run 70): the question is
// whether the DRAM sees too many short runs at once. With the packed
// layout each of the ~2,100 warps of a wave reads 512 bytes from each of 4
// rows a step, ~8,400 runs of 512 bytes in flight; a copy reads long ones.
// Block steps: a block's step (S = 1, 4 warps) is one piece of 8 KB of
// nibbles and 1 KB of headers, [row group][step][warp][row][chunk].
// Wave steps: the blocks of a wave at the same step read one piece, the
// whole wave's: [round][step][block][warp][row][chunk], where round g /
// gridDim.x and block g % gridDim.x place row group g (the last round
// holds the groups left). Rows a multiple of 16, columns of 1,024.
struct Int4KBlockStepProbe : Int4KPieceProbe {
  struct Rows {
    const uint8_t* q;
    const uint8_t* s;
  };
  static __device__ __forceinline__ Rows rows_at(const PackedMatrixView& m, int64_t row0) {
    const PackedLayout& l = m.layout;
    const int64_t piece = row0 / 16 * (l.cols / 1024) * 4 + row0 % 16 / 4;
    return {m.data + l.quants_offset + piece * 2048, m.data + l.scales_offset + piece * 256};
  }
  static __device__ __forceinline__ Raw load(const PackedMatrixView&, const Rows& p, int64_t, int r,
                                             int c) {
    return load_piece(p.q, p.s, 4, r, c);
  }
};

struct Int4KWaveStepProbe : Int4KPieceProbe {
  struct Rows {
    const uint8_t* q;
    const uint8_t* s;
    int step_pieces;  // warps' pieces between one step and the next: 4 x the round's blocks
  };
  static __device__ __forceinline__ Rows rows_at(const PackedMatrixView& m, int64_t row0) {
    const PackedLayout& l = m.layout;
    const int64_t g = row0 / 16, wave = gridDim.x, groups = l.rows / 16, steps = l.cols / 1024;
    const int64_t round = g / wave, block = g % wave;
    const int64_t blocks = groups - round * wave < wave ? groups - round * wave : wave;
    const int64_t piece = round * wave * steps * 4 + block * 4 + row0 % 16 / 4;
    return {m.data + l.quants_offset + piece * 2048, m.data + l.scales_offset + piece * 256,
            int(blocks * 4)};
  }
  static __device__ __forceinline__ Raw load(const PackedMatrixView&, const Rows& p, int64_t, int r,
                                             int c) {
    return load_piece(p.q, p.s, p.step_pieces, r, c);
  }
};

// Any of the probes above with Int4KLoadsOnlyProbe's fold for a decode.
template <class P>
struct LoadsOnly {
  using Raw = typename P::Raw;
  using Rows = typename P::Rows;
  static __device__ __forceinline__ Rows rows_at(const PackedMatrixView& m, int64_t row0) {
    return P::rows_at(m, row0);
  }
  static __device__ __forceinline__ Raw load(const PackedMatrixView& m, const Rows& p, int64_t row0,
                                             int r, int c) {
    return P::load(m, p, row0, r, c);
  }
  static __device__ __forceinline__ float dot(const Raw& r, int j, const ChunkX& x) {
    return Int4KLoadsOnlyProbe::dot(r, j, x);
  }
};

}  // namespace bench_probe

// One wave of blocks, or at most `max_grid`.
template <class C, int R, int S>
void launch_grid(const MatvecArgs& a, int64_t max_grid) {
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  const int64_t groups = (a.w.layout.rows + kBlockRows - 1) / kBlockRows;
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_matvec_stream<C, R, S>,
                                                           kMatvecWarpsPerBlock * 32, 0));
  const int64_t grid = std::min({groups, int64_t(per_sm) * device_sm_count(), max_grid});
  launch_kernel(kernel_matvec_stream<C, R, S>, unsigned(grid), kMatvecWarpsPerBlock * 32, 0,
                nullptr, a, groups);
}

// The L2 question (run 24): the short kernels between the matvecs leave
// DRAM idle for ~14 us a layer. A kernel beside them on another stream
// could bring the next matrix's weights into L2 meanwhile. How fast is a
// matvec whose weights are in L2, and how fast can a few blocks prefetch?
__global__ void kernel_prefetch_l2(const uint8_t* p, int64_t bytes) {
  const int64_t lines = bytes / 128, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < lines; i += stride)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + 128 * i));
}

// One block that spins for `ns` nanoseconds: a stand-in for the short
// kernels' latency.
__global__ void kernel_spin(int64_t ns) {
  int64_t t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// kernel_spin under programmatic launch: waits for the kernel before it,
// releases the next, then spins (a short kernel of the decode step).
__global__ void kernel_spin_pdl(int64_t ns) {
  wait_then_release_next();
  int64_t t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

int main(int argc, char** argv) {
  const bool chain = argc > 1 && std::string(argv[1]) == "chain";
  const bool timeline = argc > 1 && std::string(argv[1]) == "timeline";
  const bool bulk = argc > 1 && std::string(argv[1]) == "bulk";
  const bool shapes = argc > 1 && std::string(argv[1]) == "slices";
  const bool l2 = argc > 1 && std::string(argv[1]) == "l2";
  const bool sweep = argc > 1 && std::string(argv[1]) == "sweep";
  const int64_t max_cols = 14336;
  int8_t* q = nullptr;
  float *scales = nullptr, *y = nullptr;
  CUDA_CHECK(cudaMalloc(&q, quantized_activation_q_bytes(1, max_cols)));
  CUDA_CHECK(cudaMalloc(&scales, quantized_activation_scale_bytes(1, max_cols)));
  CUDA_CHECK(cudaMalloc(&y, 128256 * sizeof(float)));  // up to the lm head's rows
  CUDA_CHECK(cudaMemset(q, 0, quantized_activation_q_bytes(1, max_cols)));
  CUDA_CHECK(cudaMemset(scales, 0, quantized_activation_scale_bytes(1, max_cols)));
  const Matrices mats[] = {
      make(PackedFormat::Int4K256, 28672, 4096, 6), make(PackedFormat::Int4K256, 6144, 4096, 12),
      make(PackedFormat::Int4K256, 4096, 4096, 16), make(PackedFormat::Int6K256, 4096, 14336, 6)};
  const char* names[] = {"Q4_K 28672x4096 (gate|up)", "Q4_K 6144x4096 (q|k|v)",
                         "Q4_K 4096x4096 (o)", "Q6_K 4096x14336 (down)"};
  // Times `launch` over m's copies in turn under `set` and prints a row.
  // The arguments of a product on m (weights set per launch).
  auto args_for = [&](const Matrices& m) {
    MatvecArgs a;
    a.xq = {q, scales};
    a.y = y;
    a.ldy = m.layout.rows;
    return a;
  };
  auto time_row = [&](const char* name, const Matrices& m, KernelSet set, auto launch) {
    const KernelSetScope scope(set);
    MatvecArgs a = args_for(m);
    const int n = int(m.copies.size()), iters = 8 * n;
    const float ms = bench_timing::time_ms([&] {
      for (int i = 0; i < iters; ++i) {
        a.w = {m.layout, m.copies[size_t(i % n)]};
        launch(a);
      }
    });
    const double us = ms * 1e3 / iters, bytes = double(packed_payload_bytes(m.layout));
    std::printf("%-28s %-8s %8.2f us  %6.0f GB/s\n", name, kernel_set_name(set), us,
                bytes / (us * 1e-6) / 1e9);
  };
  // The tail question (run 24): Q4_K x 4,096 columns at rows from half a
  // wave of row groups to 4 waves, one wave of blocks (auto launches), over
  // 16 copies (at least 39 MB apart: no launch finds its weights in L2).
  if (sweep) {
    using Q4 = Int4Chunk<PackedFormat::Int4K256>;
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_matvec_stream<Q4, 4, 1>,
                                                             kMatvecWarpsPerBlock * 32, 0));
    const int64_t wave = int64_t(per_sm) * device_sm_count(), wave_rows = wave * 16;
    std::printf("wave: %lld blocks, %lld rows\n", (long long)wave, (long long)wave_rows);
    const Matrices big = make(PackedFormat::Int4K256, 4 * wave_rows, 4096, 16);
    for (int64_t rows = wave_rows / 2; rows <= 4 * wave_rows; rows += wave_rows / 8) {
      const Matrices m{make_packed_layout(PackedFormat::Int4K256, rows, 4096), big.copies};
      char name[64];
      std::snprintf(name, sizeof name, "rows %6lld (%.3f waves)", (long long)rows,
                    double(rows) / double(wave_rows));
      time_row(name, m, KernelSet::Auto, [](const MatvecArgs& a) { launch_stream<Q4, 4, 1>(a, nullptr); });
    }
    return 0;
  }
  if (l2) {
    cudaStream_t a_stream, b_stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&a_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b_stream, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    std::printf("5 us spin alone: %7.2f us\n", bench_timing::time_ms([&] {
      for (int r = 0; r < 16; ++r) kernel_spin<<<1, 32, 0, a_stream>>>(5000);
    }, a_stream) * 1e3 / 16);
    for (int k = 0; k < 4; ++k) {
      const Matrices& m = mats[k];
      const int64_t bytes = int64_t(packed_payload_bytes(m.layout));
      // Warm: one copy over and over (the o and q|k|v matrices fit L2).
      Matrices one{m.layout, {m.copies[0]}};
      char name[80];
      std::snprintf(name, sizeof name, "%s warm", names[k]);
      time_row(name, one, KernelSet::Portable, [](const MatvecArgs& a) { launch_matvec(a, nullptr); });
      time_row(name, one, KernelSet::Auto, [](const MatvecArgs& a) { launch_matvec(a, nullptr); });
      // Prefetch alone, G blocks of 256 threads.
      for (int g : {8, 16, 32, 132}) {
        int i = 0;
        const float ms = bench_timing::time_ms([&] {
          for (int r = 0; r < 16; ++r) {
            kernel_prefetch_l2<<<g, 256, 0, nullptr>>>(m.copies[size_t(i++ % int(m.copies.size()))], bytes);
          }
        });
        std::printf("  prefetch %5.1f MB, %3d blocks: %7.2f us  %6.0f GB/s\n", bytes / 1e6, g,
                    ms * 1e3 / 16, bytes / (ms * 1e-3 / 16) / 1e9);
      }
      // A 5 us short-kernel stand-in, then the matvec (cold), against the
      // same with the prefetch beside the stand-in (32 blocks).
      for (int with : {0, 1}) {
        MatvecArgs a = args_for(m);
        int i = 0;
        const int n = int(m.copies.size());
        const float ms = bench_timing::time_ms(
            [&] {
              for (int r = 0; r < 16; ++r) {
                uint8_t* w = m.copies[size_t(i++ % n)];
                a.w = {m.layout, w};
                CUDA_CHECK(cudaEventRecord(fork, a_stream));
                if (with) {
                  CUDA_CHECK(cudaStreamWaitEvent(b_stream, fork, 0));
                  kernel_prefetch_l2<<<32, 256, 0, b_stream>>>(w, std::min<int64_t>(bytes, 24 << 20));
                  CUDA_CHECK(cudaEventRecord(join, b_stream));
                }
                kernel_spin<<<1, 32, 0, a_stream>>>(5000);
                if (with) CUDA_CHECK(cudaStreamWaitEvent(a_stream, join, 0));
                launch_matvec(a, a_stream);
              }
            },
            a_stream);
        std::printf("  5 us spin + matvec%s: %7.2f us a pair\n", with ? ", prefetch beside (24 MB max)" : "",
                    ms * 1e3 / 16);
      }
    }
    return 0;
  }
  // The bulk-copy kernel (run 25): checked against the streaming kernel on
  // random quants and x where it applies (gate|up; the others say so), then
  // both timed alone under `auto`.
  if (bulk) {
    std::vector<int8_t> hq(size_t(quantized_activation_q_bytes(1, max_cols)));
    std::vector<float> hs(size_t(quantized_activation_scale_bytes(1, max_cols)) / 4);
    uint32_t seed = 12345;
    auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
    for (auto& v : hq) v = int8_t(next() >> 24);
    for (auto& v : hs) v = float(next() >> 20) * 1e-8f;
    CUDA_CHECK(cudaMemcpy(q, hq.data(), hq.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(scales, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
    const KernelSetScope scope(KernelSet::Auto);
    for (int k = 0; k < 4; ++k) {
      const Matrices& m = mats[k];
      // Random quants (and Q6_K's high bits, laid out between the quants
      // and the scales); the 0x11 scales stay finite.
      const uint64_t from = m.layout.quants_offset, to = m.layout.scales_offset;
      std::vector<uint8_t> w(size_t(to - from));
      for (auto& v : w) v = uint8_t(next() >> 24);
      CUDA_CHECK(cudaMemcpy(m.copies[0] + from, w.data(), w.size(), cudaMemcpyHostToDevice));
      MatvecArgs a = args_for(m);
      a.w = {m.layout, m.copies[0]};
      const size_t rows = size_t(m.layout.rows);
      std::vector<float> y0(rows), y1(rows);
      launch_matvec_stream(a, nullptr);
      CUDA_CHECK(cudaMemcpy(y0.data(), y, rows * 4, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemset(y, 0, rows * 4));
      const bool took = launch_matvec_bulk(a, nullptr);
      CUDA_CHECK(cudaMemcpy(y1.data(), y, rows * 4, cudaMemcpyDeviceToHost));
      double worst = 0, scale = 0;
      for (size_t r = 0; r < rows; ++r) {
        worst = std::max(worst, double(std::fabs(y0[r] - y1[r])));
        scale = std::max(scale, double(std::fabs(y0[r])));
      }
      std::printf("check %s: bulk %s, max |stream - bulk| %.3g of max |y| %.3g\n", names[k],
                  took ? "taken" : "NOT TAKEN", worst, scale);
    }
    time_row(names[0], mats[0], KernelSet::Auto, [](const MatvecArgs& a) { launch_matvec_stream(a, nullptr); });
    time_row("  bulk", mats[0], KernelSet::Auto, [](const MatvecArgs& a) { launch_matvec_bulk(a, nullptr); });
    return 0;
  }
  // The bulk kernel's timeline on gate|up (docs/PERFORMANCE-RUNS-25-26.md run 26):
  //   nvcc ... bench_stream.cu -o /tmp/bs2 && nvcc ... -DVOLTAD_BULK_STAGES=3 \
  //     bench_stream.cu -o /tmp/bs3 && /tmp/bs2 timeline && /tmp/bs3 timeline
  // (nvcc as in the header; the second a ring of 3 stages). One
  // launch after warm-up, cold weights; per stage k, over blocks 0-255
  // (each has 6-7 stages): when the producer issued it, how long it waited
  // for the slot, how long consumer warp 0 waited for it, decoded it, and
  // waited at the stage's barrier. Times in us from the earliest block start.
  if (timeline) {
    const KernelSetScope scope(KernelSet::Auto);
    const Matrices& m = mats[0];
    MatvecArgs a = args_for(m);
    for (int r = 0; r < 4; ++r) {
      a.w = {m.layout, m.copies[size_t(r % int(m.copies.size()))]};
      void* stamps = nullptr;
      CUDA_CHECK(cudaGetSymbolAddress(&stamps, voltad::kernels::bulk::g_bulk_stamps));
      CUDA_CHECK(cudaMemset(stamps, 0, 256 * 16 * 6 * sizeof(long long)));
      launch_matvec_bulk(a, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    static long long st[256][16][6], start[256];
    CUDA_CHECK(cudaMemcpyFromSymbol(st, voltad::kernels::bulk::g_bulk_stamps, sizeof st));
    CUDA_CHECK(cudaMemcpyFromSymbol(start, voltad::kernels::bulk::g_bulk_start, sizeof start));
    long long t0 = start[0];
    for (int b = 0; b < 256; ++b) t0 = std::min(t0, start[b]);
    long long t_start_max = 0;
    for (int b = 0; b < 256; ++b) t_start_max = std::max(t_start_max, start[b] - t0);
    std::printf("block starts: 0 .. %.2f us\n", t_start_max * 1e-3);
    std::printf("stage  n   issue      slot wait  full wait  wait begin  decode     barrier    (us, mean over blocks)\n");
    for (int k = 0; k < 16; ++k) {
      double issue = 0, slot = 0, fw = 0, fwb = 0, dec = 0, bar = 0;
      int n = 0;
      for (int b = 0; b < 256; ++b) {
        const long long* v = st[b][k];
        if (v[0] == 0 || v[3] == 0 || v[5] == 0) continue;
        ++n;
        issue += (v[0] - t0) * 1e-3;
        slot += (v[0] - v[1]) * 1e-3;
        fwb += (v[2] - t0) * 1e-3;
        fw += (v[3] - v[2]) * 1e-3;
        dec += (v[4] - v[3]) * 1e-3;
        bar += (v[5] - v[4]) * 1e-3;
      }
      if (n == 0) continue;
      std::printf("%5d %3d %8.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", k, n, issue / n, slot / n,
                  fw / n, fwb / n, dec / n, bar / n);
    }
    return 0;
  }
  // gate|up in a chain of programmatic launches (run 25): a stand-in for a
  // short kernel of D us (132 blocks), then the product, 16 pairs; against
  // the stand-in alone.
  if (chain) {
    const KernelSetScope scope(KernelSet::Auto);
    for (int64_t ns : {1000, 3000}) {
      const float alone = bench_timing::time_ms([&] {
        for (int r = 0; r < 16; ++r) launch_kernel(kernel_spin_pdl, 132, 32, 0, nullptr, ns);
      });
      std::printf("spin %lld ns alone: %7.2f us\n", (long long)ns, alone * 1e3 / 16);
      {
        const int k = 0;  // gate|up: the one the bulk kernel takes
        const Matrices& m = mats[k];
        auto pair = [&](const char* what, auto launch) {
          MatvecArgs a = args_for(m);
          int i = 0;
          const int n = int(m.copies.size());
          const float ms = bench_timing::time_ms([&] {
            for (int r = 0; r < 16; ++r) {
              a.w = {m.layout, m.copies[size_t(i++ % n)]};
              launch_kernel(kernel_spin_pdl, 132, 32, 0, nullptr, ns);
              launch(a);
            }
          });
          std::printf("  %-26s %-7s %7.2f us a pair, product %6.2f us\n", names[k], what,
                      ms * 1e3 / 16, (ms - alone) * 1e3 / 16);
        };
        pair("stream", [](const MatvecArgs& a) { launch_matvec_stream(a, nullptr); });
        pair("bulk", [](const MatvecArgs& a) { launch_matvec_bulk(a, nullptr); });
      }
    }
    return 0;
  }
  // Slices and grids for the matrices of less than a few waves (run 24).
  if (shapes) {
    using Q4 = Int4Chunk<PackedFormat::Int4K256>;
    const int64_t all = int64_t(1) << 40;
    for (KernelSet set : {KernelSet::Portable, KernelSet::Auto}) {
      time_row("q|k|v S=1", mats[1], set, [&](const MatvecArgs& a) { launch_grid<Q4, 4, 1>(a, all); });
      time_row("q|k|v S=2", mats[1], set, [&](const MatvecArgs& a) { launch_grid<Q4, 4, 2>(a, all); });
      time_row("q|k|v S=2 grid 384", mats[1], set, [&](const MatvecArgs& a) { launch_grid<Q4, 4, 2>(a, 384); });
      time_row("o S=1", mats[2], set, [&](const MatvecArgs& a) { launch_grid<Q4, 4, 1>(a, all); });
      time_row("o S=2", mats[2], set, [&](const MatvecArgs& a) { launch_grid<Q4, 4, 2>(a, all); });
      time_row("down S=1", mats[3], set, [&](const MatvecArgs& a) { launch_grid<Int6Chunk, 2, 1>(a, all); });
      time_row("down S=2", mats[3], set, [&](const MatvecArgs& a) { launch_grid<Int6Chunk, 2, 2>(a, all); });
      time_row("down S=2 grid 512", mats[3], set, [&](const MatvecArgs& a) { launch_grid<Int6Chunk, 2, 2>(a, 512); });
      time_row("down S=1 R=4 (Q4 rows)", mats[3], set, [&](const MatvecArgs& a) { launch_grid<Int6Chunk, 4, 1>(a, all); });
    }
    return 0;
  }
  // Each under `portable` (plain launches) and `auto` (programmatic
  // dependent launch on sm_90: a launch's first loads overlap the last's
  // end, as in the decode graph; run 22: 7-22% less time a matrix).
  for (int k = 0; k < 4; ++k)
    for (KernelSet set : {KernelSet::Portable, KernelSet::Auto})
      time_row(names[k], mats[k], set, [](const MatvecArgs& a) { launch_matvec(a, nullptr); });
  // The probes against the packed layout (runs 22-24 and 70), one row group
  // a warp and no slices (S = 1), sets loaded whole after the decode, both
  // ways, on gate|up's copies; and the row-by-row loads gate|up has taken
  // since run 70 (matvec_stream_blocks' kRows).
  for (KernelSet set : {KernelSet::Portable, KernelSet::Auto}) {
    time_row("probe: gate|up, packed", mats[0], set, [](const MatvecArgs& a) {
      launch_stream_as<Int4Chunk<PackedFormat::Int4K256>, 4, 1, false>(a, nullptr);
    });
    time_row("gate|up, row-by-row loads", mats[0], set, [](const MatvecArgs& a) {
      launch_stream_as<Int4Chunk<PackedFormat::Int4K256>, 4, 1, true>(a, nullptr);
    });
    time_row("probe: gate|up, tiled steps", mats[0], set, [](const MatvecArgs& a) {
      launch_stream<bench_probe::Int4KTiledProbe, 4, 1>(a, nullptr);
    });
    time_row("probe: gate|up, loads only", mats[0], set, [](const MatvecArgs& a) {
      launch_stream<bench_probe::Int4KLoadsOnlyProbe, 4, 1>(a, nullptr);
    });
    time_row("probe: gate|up, block steps", mats[0], set, [](const MatvecArgs& a) {
      launch_stream<bench_probe::Int4KBlockStepProbe, 4, 1>(a, nullptr);
    });
    time_row("probe: gate|up, wave steps", mats[0], set, [](const MatvecArgs& a) {
      launch_stream<bench_probe::Int4KWaveStepProbe, 4, 1>(a, nullptr);
    });
    time_row("probe: tiled, loads only", mats[0], set, [](const MatvecArgs& a) {
      launch_stream<bench_probe::LoadsOnly<bench_probe::Int4KTiledProbe>, 4, 1>(a, nullptr);
    });
    time_row("probe: block steps, loads only", mats[0], set, [](const MatvecArgs& a) {
      launch_stream<bench_probe::LoadsOnly<bench_probe::Int4KBlockStepProbe>, 4, 1>(a, nullptr);
    });
    time_row("probe: wave steps, loads only", mats[0], set, [](const MatvecArgs& a) {
      launch_stream<bench_probe::LoadsOnly<bench_probe::Int4KWaveStepProbe>, 4, 1>(a, nullptr);
    });
  }
  // Q6_K's streams with whole sets (as launched) and row by row (run 71):
  // down (one row group a block, or less) and the lm head (Llama-3's
  // 128,256 x 4,096, ~17 groups a block), one and two warps a row group.
  const Matrices head = make(PackedFormat::Int6K256, 128256, 4096, 2);
  for (KernelSet set : {KernelSet::Portable, KernelSet::Auto}) {
    for (const auto* m : {&mats[3], &head}) {
      const bool down = m == &mats[3];
      time_row(down ? "down S=1, whole sets" : "head S=1, whole sets", *m, set,
               [](const MatvecArgs& a) { launch_stream_as<Int6Chunk, 2, 1, false>(a, nullptr); });
      time_row(down ? "down S=1, row by row" : "head S=1, row by row", *m, set,
               [](const MatvecArgs& a) { launch_stream_as<Int6Chunk, 2, 1, true>(a, nullptr); });
      time_row(down ? "down S=2, whole sets" : "head S=2, whole sets", *m, set,
               [](const MatvecArgs& a) { launch_stream_as<Int6Chunk, 2, 2, false>(a, nullptr); });
      time_row(down ? "down S=2, row by row" : "head S=2, row by row", *m, set,
               [](const MatvecArgs& a) { launch_stream_as<Int6Chunk, 2, 2, true>(a, nullptr); });
      time_row(down ? "down, launch_matvec" : "head, launch_matvec", *m, set,
               [](const MatvecArgs& a) { launch_matvec(a, nullptr); });
    }
  }
  return 0;
}
