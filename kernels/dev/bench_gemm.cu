// Prefill kernels harness (not part of the build; scripts/device-test.sh
// --bench compiles it with nvcc): TFLOP/s of the tensor-core GEMM
// (gemm_wmma.cu) at Llama-3-8B shapes for 512 tokens, per weight format and
// tile shape, a whole Q4_K_M layer's GEMMs, and small token counts (batched
// decode); the same for the sm_80+ variant (gemm_sm80.cu) where the device
// has it; with cuBLAS available (-DVOLTAD_BENCH_CUBLAS -lcublas) also a
// dense fp16 GEMM of the same shapes as the practical tensor-core ceiling.
// Then the tensor-core prefill attention (attention_prefill.cu) against the
// CUDA-core paged attention (attention.cu) for a 512-token chunk, and top-k
// over a vocabulary (topk.cu).
//
// Weights are random bytes with every fp16 scale made finite; x is random in
// [-1, 1). At 512 tokens a GEMM does 256-1000 FLOP per weight byte, so it is
// compute-bound and the weights' L2 residency hardly matters: each matrix is
// allocated once. Times: median of 7 rounds of the mean over 10 launches,
// from CUDA events, after a warm-up.
// `bench_gemm head`: the lm heads alone at 9-32 tokens in each kernel (the
// 32-token tiles also on fp16 x, as the decode graph gives it to them);
// `bench_gemm wide`: a layer's products at 17-32 tokens in each kernel (the
// narrow launch here converts fp32 x itself, where the decode graph's reads
// the fp16 x its RMSNorm wrote: compare tiles with tiles).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#ifdef VOLTAD_BENCH_CUBLAS
#include <cublas_v2.h>
#endif

#include "kernels/attention.cu"
#include "kernels/attention_prefill.cu"
#include "kernels/attention_sm80.cu"
#include "kernels/attention_wmma.cu"
#include "kernels/dev/bench_timing.cuh"
#include "kernels/gemm_narrow.cu"
#include "kernels/gemm_narrow_pairs.cu"
#include "kernels/gemm_narrow_sm80.cu"
#include "kernels/gemm_sm80.cu"
#include "kernels/gemm_wmma.cu"
#include "kernels/launch.cu"
#include "kernels/narrow_bulk_sm90.cu"
#include "kernels/narrow_x_sm80.cu"
#include "kernels/topk.cu"

namespace bench {

using namespace voltad::kernels;

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

// fp16 words in [2^-4, 2^-1) of either sign.
__global__ void kernel_finite_halves(uint16_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint16_t exponent = uint16_t(11 + ((p[i] >> 10) & 3));
    p[i] = uint16_t((p[i] & 0x83FF) | (exponent << 10));
  }
}

__global__ void kernel_uniform(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    p[i] = float(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

void fill_random(void* p, size_t bytes, uint32_t seed) {
  kernel_random_bytes<<<2048, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed);
  CUDA_CHECK(cudaGetLastError());
}

struct Matrix {
  PackedMatrixView view;
  explicit Matrix(PackedFormat f, int64_t rows, int64_t cols, uint32_t seed) {
    view.layout = make_packed_layout(f, rows, cols);
    uint8_t* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, view.layout.total_bytes));
    fill_random(p, view.layout.total_bytes, seed);
    const PackedLayout& l = view.layout;
    auto halves = [&](uint64_t off, int64_t row_bytes) {
      if (row_bytes == 0) return;
      kernel_finite_halves<<<1024, 256>>>(reinterpret_cast<uint16_t*>(p + off),
                                          size_t(row_bytes) * size_t(l.rows) / 2);
      CUDA_CHECK(cudaGetLastError());
    };
    if (f == PackedFormat::F16) halves(l.quants_offset, l.quant_row_bytes);
    if (f != PackedFormat::Int6K256) halves(l.scales_offset, l.scale_row_bytes);
    halves(l.super_offset, l.super_row_bytes);
    view.data = p;
  }
  ~Matrix() { cudaFree(const_cast<uint8_t*>(view.data)); }
};

// ms a launch: the mean over 10 launches, the median of 7 rounds.
template <class F>
float time_ms(F&& body) {
  return bench_timing::time_ms(body, nullptr, 10);
}

struct Buffers {
  float* x = nullptr;
  float* y = nullptr;
  GemmScratch scratch;  // the sm_80 variant's fp16 x
  Buffers(size_t max_x, size_t max_y) {
    CUDA_CHECK(cudaMalloc(&x, max_x * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&y, max_y * sizeof(float)));
    scratch.bytes = max_x * 2;
    CUDA_CHECK(cudaMalloc(&scratch.data, scratch.bytes));
    kernel_uniform<<<1024, 256>>>(x, max_x, 7);
    CUDA_CHECK(cudaGetLastError());
  }
};

std::vector<std::string> g_summary;

// n tokens of the buffers' x through m into their y.
GemmArgs bench_args(const Matrix& m, Buffers& buf, int n) {
  GemmArgs a;
  a.w = m.view;
  a.x = buf.x;
  a.ldx = m.view.layout.cols;
  a.n = n;
  a.y = buf.y;
  a.ldy = m.view.layout.rows;
  return a;
}

float time_gemm(const Matrix& m, Buffers& buf, int n, GemmTile tile, bool accumulate = false) {
  GemmArgs a = bench_args(m, buf, n);
  a.accumulate = accumulate;
  return time_ms([&] { launch_gemm(a, tile, nullptr); });
}

// The 32-token tiles on fp16 x in the narrow layout (launch_gemm_tiles_x16):
// the scratch's bytes as that x (0x3C3C halves, ~1.06).
float time_gemm_x16(const Matrix& m, Buffers& buf, int n, GemmTile tile) {
  const GemmArgs a = bench_args(m, buf, n);
  CUDA_CHECK(cudaMemset(buf.scratch.data, 0x3C, buf.scratch.bytes));
  return time_ms([&] { launch_gemm_tiles_x16(a, tile, buf.scratch.data, nullptr); });
}

void report(const std::string& what, int n, int64_t rows, int64_t cols, float ms, bool summary) {
  const double tflops = 2.0 * n * rows * cols / (ms * 1e-3) / 1e12;
  char line[200];
  std::snprintf(line, sizeof line, "%-46s %9.1f us %7.1f TFLOP/s", what.c_str(), ms * 1e3, tflops);
  std::printf("%s\n", line);
  std::fflush(stdout);
  if (summary) g_summary.push_back(line);
}

#ifdef VOLTAD_BENCH_CUBLAS
void cublas_reference(int n, int64_t rows, int64_t cols) {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return;
  __half *w, *x;
  float* y;
  CUDA_CHECK(cudaMalloc(&w, size_t(rows * cols) * 2));
  CUDA_CHECK(cudaMalloc(&x, size_t(n * cols) * 2));
  CUDA_CHECK(cudaMalloc(&y, size_t(n * rows) * 4));
  fill_random(w, size_t(rows * cols) * 2, 3);
  fill_random(x, size_t(n * cols) * 2, 4);
  kernel_finite_halves<<<1024, 256>>>(reinterpret_cast<uint16_t*>(w), size_t(rows * cols));
  kernel_finite_halves<<<1024, 256>>>(reinterpret_cast<uint16_t*>(x), size_t(n * cols));
  const float one = 1.0f, zero = 0.0f;
  // y (rows x n, column-major) = W^T(cols x rows, column-major)^T * x
  const float ms = time_ms([&] {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), n, int(cols), &one, w, CUDA_R_16F,
                 int(cols), x, CUDA_R_16F, int(cols), &zero, y, CUDA_R_32F, int(rows),
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  report("cuBLAS fp16 dense " + std::to_string(n) + "x" + std::to_string(rows) + "x" +
             std::to_string(cols),
         n, rows, cols, ms, true);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  cublasDestroy(h);
}
#endif

}  // namespace bench

// `bench_gemm head`: only the lm heads' products at batched-decode sizes,
// each tile that could take them (run 59: the 32x128 tile).
void head_sweep(bench::Buffers& buf) {
  using namespace bench;
  struct Head {
    PackedFormat f;
    int64_t rows;
    const char* what;
  };
  const Head heads[] = {{PackedFormat::Int6K256, 128256, "Q6_K Llama-3"},
                        {PackedFormat::Int6K256, 151936, "Q6_K Qwen3"},
                        {PackedFormat::Int8Sym32, 128256, "Q8_0 Llama-3"}};
  const GemmTile tiles[] = {GemmTile::N16, GemmTile::T32x64, GemmTile::T32x128, GemmTile::T64x128};
  std::printf("\n== lm heads x 4096 at 9-32 tokens ==\n");
  for (const Head& h : heads) {
    Matrix m(h.f, h.rows, 4096, 13);
    for (int n : {9, 16, 24, 32})
      for (GemmTile t : tiles) {
        const float ms = time_gemm(m, buf, n, t);
        report(std::string(h.what) + " n=" + std::to_string(n) + " " + gemm_tile_name(t), n, h.rows,
               4096, ms, false);
        if (t != GemmTile::T32x64 && t != GemmTile::T32x128) continue;
        const float ms16 = time_gemm_x16(m, buf, n, t);
        report(std::string(h.what) + " n=" + std::to_string(n) + " " + gemm_tile_name(t) + " x16",
               n, h.rows, 4096, ms16, false);
      }
  }
}

// `bench_gemm wide`: a layer's products at 17-32 tokens (the 32-token
// decode batches), in the narrow kernel and in the tiles (run 61).
void wide_sweep(bench::Buffers& buf) {
  using namespace bench;
  struct Product {
    PackedFormat f;
    int64_t rows, cols;
    const char* what;
  };
  const Product products[] = {{PackedFormat::Int4K256, 28672, 4096, "gate|up Q4_K"},
                              {PackedFormat::Int4Sym32, 28672, 4096, "gate|up Q4_0"},
                              {PackedFormat::Int4K256, 24576, 4096, "gate|up Q4_K Qwen3"},
                              {PackedFormat::Int6K256, 4096, 14336, "down Q6_K"},
                              {PackedFormat::Int4K256, 4096, 14336, "down Q4_K"},
                              {PackedFormat::Int4K256, 6144, 4096, "q|k|v Q4_K"}};
  const GemmTile tiles[] = {GemmTile::N16, GemmTile::T32x64, GemmTile::T32x128};
  std::printf("\n== a layer's products at 17-32 tokens ==\n");
  for (const Product& p : products) {
    Matrix m(p.f, p.rows, p.cols, 17);
    for (int n : {17, 24, 32})
      for (GemmTile t : tiles) {
        const float ms = time_gemm(m, buf, n, t);
        report(std::string(p.what) + " " + std::to_string(p.rows) + "x" + std::to_string(p.cols) +
                   " n=" + std::to_string(n) + " " + gemm_tile_name(t),
               n, p.rows, p.cols, ms, false);
      }
  }
}

int main(int argc, char** argv) {
  using namespace bench;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, sm_%d%d\n", prop.name, prop.multiProcessorCount, prop.major,
              prop.minor);
  if (argc > 1 && std::string(argv[1]) == "head") {
    Buffers buf(size_t(32) * 4096, size_t(32) * 151936);
    head_sweep(buf);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "wide") {
    Buffers buf(size_t(32) * 14336, size_t(32) * 28672);
    wide_sweep(buf);
    return 0;
  }
  Buffers buf(size_t(2048) * 14336, size_t(2048) * 14336);

  struct Fmt {
    PackedFormat f;
    const char* name;
  };
  const Fmt formats[] = {{PackedFormat::Int4K256, "Q4_K"},
                         {PackedFormat::Int4Sym32, "Q4_0"},
                         {PackedFormat::Int6K256, "Q6_K"},
                         {PackedFormat::Int8Sym32, "Q8_0"},
                         {PackedFormat::F16, "F16"}};
  struct Shape {
    int64_t rows, cols;
    const char* what;
  };
  const Shape shapes[] = {{4096, 4096, "wq/wo"},
                          {14336, 4096, "gate/up"},
                          {4096, 14336, "down"},
                          {1024, 4096, "wk/wv"}};
  const GemmTile tiles[] = {GemmTile::T128x128, GemmTile::T128x128Occ2, GemmTile::T64x128,
                            GemmTile::T32x64, GemmTile::Auto};

  std::printf("\n== 512 tokens: format x shape x tile ==\n");
  for (const Shape& s : shapes) {
    for (const Fmt& f : formats) {
      Matrix m(f.f, s.rows, s.cols, 11);
      for (GemmTile t : tiles) {
        const float ms = time_gemm(m, buf, 512, t);
        const std::string what = std::string(f.name) + " 512x" + std::to_string(s.rows) + "x" +
                                 std::to_string(s.cols) + " " + gemm_tile_name(t);
        report(what, 512, s.rows, s.cols, ms,
               t == GemmTile::Auto && (f.f == PackedFormat::Int4K256 || f.f == PackedFormat::F16));
      }
    }
  }

  std::printf("\n== register / occupancy (Q4_K) ==\n");
  {
    auto show = [](const char* name, const void* k, int threads, size_t smem) {
      cudaFuncAttributes attr;
      CUDA_CHECK(cudaFuncGetAttributes(&attr, k));
      int blocks = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, threads, smem));
      std::printf("%-12s regs %d, smem %zu, %d blk/SM\n", name, attr.numRegs, smem, blocks);
    };
    show("128x128", (const void*)kernel_gemm_wmma<PackedFormat::Int4K256, 128, 128, 2, 4, 1, false>,
         256, TileShape<128, 128, 2, 4>::kSmemBytes);
    show("128x128/2",
         (const void*)kernel_gemm_wmma<PackedFormat::Int4K256, 128, 128, 2, 4, 2, false>, 256,
         TileShape<128, 128, 2, 4>::kSmemBytes);
    show("64x128", (const void*)kernel_gemm_wmma<PackedFormat::Int4K256, 64, 128, 2, 4, 1, false>,
         256, TileShape<64, 128, 2, 4>::kSmemBytes);
    show("32x64", (const void*)kernel_gemm_wmma<PackedFormat::Int4K256, 32, 64, 1, 4, 1, false>,
         128, TileShape<32, 64, 1, 4>::kSmemBytes);
    show("32x128 Q6_K",
         (const void*)kernel_gemm_wmma<PackedFormat::Int6K256, 32, 128, 1, 8, 1, false>, 256,
         TileShape<32, 128, 1, 8>::kSmemBytes);
    show("32x128 Q6_K x16",
         (const void*)kernel_gemm_wmma<PackedFormat::Int6K256, 32, 128, 1, 8, 1, true>, 256,
         TileShape<32, 128, 1, 8>::kSmemBytes);
  }

  std::printf("\n== token count sweep, Q4_K 4096x4096 ==\n");
  {
    Matrix m(PackedFormat::Int4K256, 4096, 4096, 5);
    for (int n : {9, 16, 32, 64, 128, 256, 1024, 2048}) {
      for (GemmTile t : tiles) {
        const float ms = time_gemm(m, buf, n, t);
        report("Q4_K n=" + std::to_string(n) + " 4096x4096 " + gemm_tile_name(t), n, 4096, 4096, ms,
               t == GemmTile::Auto && (n == 16 || n == 64 || n == 2048));
      }
    }
  }

  std::printf("\n== one Llama-3-8B Q4_K_M layer, 512 tokens (auto tiles) ==\n");
  {
    // q, k, o, gate, up: Q4_K; v, down: Q6_K (the Q4_K_M layers that have them).
    Matrix q(PackedFormat::Int4K256, 4096, 4096, 21), k(PackedFormat::Int4K256, 1024, 4096, 22),
        v(PackedFormat::Int6K256, 1024, 4096, 23), o(PackedFormat::Int4K256, 4096, 4096, 24),
        gate(PackedFormat::Int4K256, 14336, 4096, 25), up(PackedFormat::Int4K256, 14336, 4096, 26),
        down(PackedFormat::Int6K256, 4096, 14336, 27);
    const Matrix* mats[] = {&q, &k, &v, &o, &gate, &up, &down};
    double flops = 0;
    for (const Matrix* m : mats) flops += 2.0 * 512 * m->view.layout.rows * m->view.layout.cols;
    for (KernelSet set : {KernelSet::Portable, KernelSet::Auto}) {
      if (set == KernelSet::Auto && !gemm_sm80_available()) continue;
      const float ms = time_ms([&] {
        for (const Matrix* m : mats) {
          GemmArgs a;
          a.w = m->view;
          a.x = buf.x;
          a.ldx = m->view.layout.cols;
          a.n = 512;
          a.y = buf.y;
          a.ldy = m->view.layout.rows;
          launch_gemm_for(set, a, buf.scratch, nullptr);
        }
      });
      char line[220];
      std::snprintf(line, sizeof line,
                    "layer Q4_K_M 512 tokens, kernels %s: %.1f us, %.1f TFLOP/s; 32 layers %.1f ms = %.0f "
                    "tok/s (GEMMs only)",
                    kernel_set_name(set), ms * 1e3, flops / (ms * 1e-3) / 1e12, 32 * ms, 512.0 / (32 * ms * 1e-3));
      std::printf("%s\n", line);
      g_summary.push_back(line);
    }
  }

  if (gemm_sm80_available()) {
    std::printf("\n== sm_80+ variant (gemm_sm80.cu): 512 tokens, format x shape ==\n");
    for (const Shape& s : shapes) {
      for (const Fmt& f : formats) {
        Matrix m(f.f, s.rows, s.cols, 11);
        GemmArgs a;
        a.w = m.view;
        a.x = buf.x;
        a.ldx = s.cols;
        a.n = 512;
        a.y = buf.y;
        a.ldy = s.rows;
        if (!gemm_sm80_supports(a, buf.scratch)) {
          std::printf("%s %s: not taken by the variant\n", f.name, s.what);
          continue;
        }
        const float ms = time_ms([&] { launch_gemm_sm80(a, buf.scratch, nullptr); });
        report(std::string(f.name) + " 512x" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + " sm80",
               512, s.rows, s.cols, ms, f.f == PackedFormat::Int4K256 || f.f == PackedFormat::F16);
      }
    }
    std::printf("\n== sm_80+ variant: tile and ring slots, Q4_K, 512 tokens ==\n");
    for (int64_t rows : {4096, 14336}) {
      Matrix mq(PackedFormat::Int4K256, rows, 4096, 7);
      GemmArgs a;
      a.w = mq.view;
      a.x = buf.x;
      a.ldx = 4096;
      a.n = 512;
      a.y = buf.y;
      a.ldy = rows;
      const std::string shape = " 512x" + std::to_string(rows) + "x4096";
      // The x conversion once, then the GEMM kernels alone.
      sm80::convert_x(a, static_cast<__half*>(buf.scratch.data), nullptr);
      const __half* xh = static_cast<const __half*>(buf.scratch.data);
      report("Q4_K" + shape + " sm80 x->fp16 alone", 512, rows, 4096,
             time_ms([&] { sm80::convert_x(a, static_cast<__half*>(buf.scratch.data), nullptr); }), true);
      report("Q4_K" + shape + " sm80 128x128 3 slots", 512, rows, 4096,
             time_ms([&] { sm80::launch_tile<PackedFormat::Int4K256, 128, 128, 2, 4, 3>(a, xh, nullptr); }), true);
      report("Q4_K" + shape + " sm80 128x128 4 slots", 512, rows, 4096,
             time_ms([&] { sm80::launch_tile<PackedFormat::Int4K256, 128, 128, 2, 4, 4>(a, xh, nullptr); }), true);
      report("Q4_K" + shape + " sm80 128x128 3 slots 2 blk/SM", 512, rows, 4096,
             time_ms([&] { sm80::launch_tile<PackedFormat::Int4K256, 128, 128, 2, 4, 3, 2>(a, xh, nullptr); }),
             true);
      report("Q4_K" + shape + " sm80 64x128 3 slots", 512, rows, 4096,
             time_ms([&] { sm80::launch_tile<PackedFormat::Int4K256, 64, 128, 2, 4, 3>(a, xh, nullptr); }), true);
      report("Q4_K" + shape + " sm80 64x128 4 slots", 512, rows, 4096,
             time_ms([&] { sm80::launch_tile<PackedFormat::Int4K256, 64, 128, 2, 4, 4>(a, xh, nullptr); }), true);
    }
    std::printf("\n== sm_80+ variant: token count sweep, Q4_K 4096x4096 ==\n");
    Matrix m(PackedFormat::Int4K256, 4096, 4096, 5);
    for (int n : {16, 32, 64, 128, 256, 1024, 2048}) {
      GemmArgs a;
      a.w = m.view;
      a.x = buf.x;
      a.ldx = 4096;
      a.n = n;
      a.y = buf.y;
      a.ldy = 4096;
      const float ms = time_ms([&] { launch_gemm_sm80(a, buf.scratch, nullptr); });
      report("Q4_K n=" + std::to_string(n) + " 4096x4096 sm80", n, 4096, 4096, ms, n == 32 || n == 2048);
    }
  } else {
    std::printf("\n(no sm_80+ variant on this device)\n");
  }

  std::printf("\n== prefill attention, Llama-3-8B heads (32/8, 128), 512-token chunk ==\n");
  for (int start : {0, 3584}) {
    const int n = 512, heads = 32, kv_heads = 8, d = 128, len = start + n;
    const int blocks = (len + 15) / 16;
    uint16_t *kc, *vc;
    float *q, *out, *partials;
    int32_t *table, *positions, *token_tables;
    CUDA_CHECK(cudaMalloc(&kc, size_t(blocks) * 16 * kv_heads * d * 2));
    CUDA_CHECK(cudaMalloc(&vc, size_t(blocks) * 16 * kv_heads * d * 2));
    fill_random(kc, size_t(blocks) * 16 * kv_heads * d * 2, 8);
    fill_random(vc, size_t(blocks) * 16 * kv_heads * d * 2, 9);
    kernel_finite_halves<<<1024, 256>>>(kc, size_t(blocks) * 16 * kv_heads * d);
    kernel_finite_halves<<<1024, 256>>>(vc, size_t(blocks) * 16 * kv_heads * d);
    CUDA_CHECK(cudaMalloc(&q, size_t(n) * heads * d * 4));
    CUDA_CHECK(cudaMalloc(&out, size_t(n) * heads * d * 4));
    kernel_uniform<<<256, 256>>>(q, size_t(n) * heads * d, 10);
    std::vector<int32_t> h_table(blocks), h_pos(n), h_tt(n, 0);
    for (int i = 0; i < blocks; ++i) h_table[size_t(i)] = i;
    for (int i = 0; i < n; ++i) h_pos[size_t(i)] = start + i;
    CUDA_CHECK(cudaMalloc(&table, blocks * 4));
    CUDA_CHECK(cudaMalloc(&positions, n * 4));
    CUDA_CHECK(cudaMalloc(&token_tables, n * 4));
    CUDA_CHECK(cudaMemcpy(table, h_table.data(), blocks * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(positions, h_pos.data(), n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(token_tables, h_tt.data(), n * 4, cudaMemcpyHostToDevice));
    const size_t part_floats = attention_partial_floats(n, heads, d, len - 1);
    CUDA_CHECK(cudaMalloc(&partials, part_floats * 4));
    const double flops = 4.0 * n * (start + (n + 1) / 2.0) * d * heads;

    PrefillAttentionArgs pa;
    pa.q = q;
    pa.ldq = heads * d;
    pa.out = out;
    pa.ldo = heads * d;
    pa.cache = {kc, vc};
    pa.block_table = table;
    pa.start = start;
    pa.n = n;
    pa.n_heads = heads;
    pa.n_kv_heads = kv_heads;
    pa.head_dim = d;
    pa.scale = 0.088f;
    const float ms_tc = time_ms([&] { launch_attention_prefill(pa, nullptr); });
    AttentionArgs aa;
    aa.q = q;
    aa.ldq = heads * d;
    aa.out = out;
    aa.ldo = heads * d;
    aa.cache = {kc, vc};
    aa.positions = positions;
    aa.token_tables = token_tables;
    aa.block_tables = table;
    aa.table_stride = blocks;
    aa.n_tokens = n;
    aa.n_heads = heads;
    aa.n_kv_heads = kv_heads;
    aa.head_dim = d;
    aa.max_position = len - 1;
    aa.scale = 0.088f;
    aa.partials = partials;
    const float ms_cc = time_ms([&] { launch_attention(aa, nullptr); });
    char line[200];
    std::snprintf(line, sizeof line,
                  "attention 512 tokens after %4d: tensor cores %8.1f us %6.1f TFLOP/s | CUDA "
                  "cores %8.1f us %6.1f TFLOP/s",
                  start, ms_tc * 1e3, flops / (ms_tc * 1e-3) / 1e12, ms_cc * 1e3,
                  flops / (ms_cc * 1e-3) / 1e12);
    std::printf("%s\n", line);
    g_summary.push_back(line);
    cudaFree(kc), cudaFree(vc), cudaFree(q), cudaFree(out), cudaFree(partials);
    cudaFree(table), cudaFree(positions), cudaFree(token_tables);
  }

  std::printf("\n== top-k over a vocabulary ==\n");
  for (int rows : {1, 8}) {
    for (int k : {1, 40, 64}) {
      const int64_t n = 128256;
      float* logits;
      float* vals;
      int32_t* ids;
      void* scratch;
      CUDA_CHECK(cudaMalloc(&logits, size_t(rows) * n * 4));
      CUDA_CHECK(cudaMalloc(&vals, size_t(rows) * k * 4));
      CUDA_CHECK(cudaMalloc(&ids, size_t(rows) * k * 4));
      CUDA_CHECK(cudaMalloc(&scratch, topk_scratch_bytes(rows, n, k)));
      kernel_uniform<<<256, 256>>>(logits, size_t(rows) * n, 11);
      const float ms =
          time_ms([&] { launch_topk(logits, n, rows, n, k, ids, vals, scratch, nullptr); });
      char line[200];
      std::snprintf(line, sizeof line, "topk rows %d n %lld k %2d: %7.1f us", rows, (long long)n, k,
                    ms * 1e3);
      std::printf("%s\n", line);
      g_summary.push_back(line);
      cudaFree(logits), cudaFree(vals), cudaFree(ids), cudaFree(scratch);
    }
  }

#ifdef VOLTAD_BENCH_CUBLAS
  std::printf("\n== cuBLAS dense fp16 (ceiling) ==\n");
  for (const Shape& s : shapes) cublas_reference(512, s.rows, s.cols);
#endif

  std::printf("\n== summary ==\n");
  for (const std::string& s : g_summary) std::printf("%s\n", s.c_str());
  return 0;
}
