// Dequantize-to-FP16 GEMM on tensor cores through wmma m16n16k16 (sm_70+).
// Contract in gemm_wmma.h; packed layouts in device_common.cuh and
// docs/FORMAT.md; measurements in docs/KERNEL-NOTES.md.
//
// A block computes a BM (tokens) x BN (weight rows) tile of y, walking k in
// stages of 64 (two 32-value chunks). Stage k+1 is loaded from global memory
// into registers while the tensor cores work on stage k in shared memory;
// then the registers are decoded to FP16 and stored into the other half of
// a double buffer (the V100 has no cp.async, so the copy goes through
// registers). One __syncthreads per stage.
//
//   weights: thread t decodes chunk (t & 1) of tile row t >> 1: 2*BN chunks,
//            one per thread (every tile shape has 2*BN threads). Its 16
//            bytes of nibbles (32 of int8, 64 of f16, 128 of f32) and its
//            scales become 32 halves, stored as 4 16-byte words.
//   x:       BM x 64 floats, float4 per thread per step, rounded to FP16;
//            or, in the 32-token tiles, x already in fp16 in the narrow
//            GEMMs' layout (kernels/narrow_x.cuh), written by the kernel
//            that made it (kX16): a stage's two chunks are 2 x 32 tokens x
//            64 contiguous bytes, one 16-byte load a thread (two in the
//            4-warp tile), put back in k order on the way to shared memory.
//   shared:  both tiles k-contiguous with rows of 72 halves (144 bytes: the
//            8-half pad spreads the rows of a 16x16 fragment over the banks);
//            x is wmma's row-major A, W (rows x k) is its column-major B.
//   epilogue: accumulators -> shared memory (fp32) -> y with bias and the
//            residual add, rows of the tile coalesced.
//
// The weight chunks decode in kernels/gemm_decode.cuh (shared with the
// sm_80+ variant, kernels/gemm_sm80.cu).
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/gemm_decode.cuh"
#include "kernels/gemm_wmma.h"
#include "kernels/launch.cuh"

namespace voltad::kernels {

namespace {

namespace wmma = nvcuda::wmma;
using namespace gemm_decode;

constexpr int kStageK = 64;           // k per pipeline stage
constexpr int kTileLd = kStageK + 8;  // shared row stride, halves

// ---- the kernel ------------------------------------------------------------
// BM x BN tile, WM x WN warps, each warp (BM/WM) x (BN/WN) = FM x FN
// fragments of 16x16. Threads = 2*BN (one weight chunk each). x: thread t
// stages 8 consecutive floats (k = 8*(t%8) of the stage) of tile rows t/8,
// t/8 + T/8, ...: a warp reads 4 rows x 256 contiguous bytes per pass.
template <int BM, int BN, int WM, int WN>
struct TileShape {
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kFragsM = BM / WM / 16, kFragsN = BN / WN / 16;
  static constexpr int kXRowsPerPass = kThreads / 8;
  static constexpr int kXPasses = BM / kXRowsPerPass;
  static constexpr int kLdc = BN + 4;
  static constexpr size_t kPipeBytes = size_t(2) * (BM + BN) * kTileLd * sizeof(__half);
  static constexpr size_t kEpilogueBytes = size_t(BM) * kLdc * sizeof(float);
  static constexpr size_t kSmemBytes = kPipeBytes > kEpilogueBytes ? kPipeBytes : kEpilogueBytes;
  static_assert(kThreads == 2 * BN, "one weight chunk per thread");
  static_assert(kFragsM * WM * 16 == BM && kFragsN * WN * 16 == BN, "tile splits into warps");
  static_assert(kXPasses * kXRowsPerPass == BM, "x tile splits into threads");
};

// 8 floats at p..p+7 of which those at k + i < cols exist (p 16-byte aligned
// when vec): the careful path for tiles at the edges of x.
__device__ __forceinline__ void load_x8_edge(const float* p, int64_t k, int64_t cols, bool vec,
                                             float4& lo, float4& hi) {
  float v[8];
  if (vec && k + 8 <= cols) {
    lo = load_activation(reinterpret_cast<const float4*>(p));
    hi = load_activation(reinterpret_cast<const float4*>(p + 4));
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = k + i < cols ? p[i] : 0.0f;
  lo = make_float4(v[0], v[1], v[2], v[3]);
  hi = make_float4(v[4], v[5], v[6], v[7]);
}

// Words 4q..4q+3 of a chunk in the narrow x layout hold the values
// 4q..4q+3 and 16+4q..19+4q as the pairs (v, v+2), (v+1, v+3): put back
// as (v, v+1), (v+2, v+3) at k = 4q and 16 + 4q of the chunk's 32 halves.
__device__ __forceinline__ void store_x16_quarter(__half* chunk_row, int q, uint4 w) {
  *reinterpret_cast<uint2*>(chunk_row + 4 * q) =
      make_uint2(__byte_perm(w.x, w.y, 0x5410), __byte_perm(w.x, w.y, 0x7632));
  *reinterpret_cast<uint2*>(chunk_row + 16 + 4 * q) =
      make_uint2(__byte_perm(w.z, w.w, 0x5410), __byte_perm(w.z, w.w, 0x7632));
}

// MinBlocks 2 caps registers at 128 so that two 128x128 blocks share an SM
// where shared memory allows (sm_80+: 2 x 72 KB); the V100 holds one.
// kX16: x is x16 (the narrow GEMMs' fp16 layout, n rounded up to 8 rows),
// not a.x; BM 32 only.
template <PackedFormat F, int BM, int BN, int WM, int WN, int MinBlocks, bool kX16>
__global__ void __launch_bounds__(WM* WN * 32, MinBlocks)
    kernel_gemm_wmma(GemmArgs a, bool x_vec, const uint32_t* x16) {
  wait_for_previous_kernel();
  using S = TileShape<BM, BN, WM, WN>;
  constexpr int T = S::kThreads, FM = S::kFragsM, FN = S::kFragsN;
  constexpr int XP = kX16 ? 1 : S::kXPasses, XR = S::kXRowsPerPass;
  // x16: BM tokens x 2 chunks x 4 quarters of 16 bytes a stage.
  constexpr int XQ = kX16 ? BM * 8 / T : 1;
  static_assert(!kX16 || (BM == 32 && XQ * T == BM * 8), "x16 tiles: 32 tokens, whole loads");
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sx = reinterpret_cast<__half*>(smem);  // [2][BM][kTileLd]
  __half* sw = sx + 2 * BM * kTileLd;            // [2][BN][kTileLd]

  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int m0 = blockIdx.x * BM;
  const int64_t n0 = int64_t(blockIdx.y) * BN;
  const int64_t rows = a.w.layout.rows, cols = a.w.layout.cols;
  const int64_t chunks = (cols + 31) / 32;
  const int stages = int((cols + kStageK - 1) / kStageK);

  // This thread's weight chunk: tile row wr, chunk wc of each stage.
  const int wr = tid >> 1, wc = tid & 1;
  const bool row_ok = n0 + wr < rows;
  const RowPointers w_row = row_pointers(a.w, row_ok ? n0 + wr : 0);
  // This thread's x pieces: tile rows xr + j*XR, k = xk .. xk+7 of the stage.
  const int xr = tid >> 3, xk = (tid & 7) * 8;
  const float* x_base = a.x + int64_t(m0 + xr) * a.ldx + xk;
  const int64_t x_pass = int64_t(XR) * a.ldx;
  const bool x_rows_full = x_vec && m0 + BM <= a.n;
  Chunk<F> chunk;
  float4 xv[2 * XP];
  uint4 xh[XQ];
  const int64_t n8 = (a.n + 7) / 8 * 8;

  auto load_stage = [&](int s) {
    const int64_t c = int64_t(s) * 2 + wc;
    if (row_ok && c < chunks)
      chunk.template load<GlobalMemory>(w_row, c);
    else
      chunk.zero();
    const int64_t k0 = int64_t(s) * kStageK;
    if constexpr (kX16) {  // cols is whole stages (gemm_tiles_take_x16)
#pragma unroll
      for (int j = 0; j < XQ; ++j) {
        const int i = tid + j * T, token = m0 + ((i >> 2) & (BM - 1));
        const int64_t c = int64_t(s) * 2 + i / (BM * 4);
        xh[j] = token < a.n ? load_activation(reinterpret_cast<const uint4*>(
                                  x16 + (c * n8 + token) * 16 + 4 * (i & 3)))
                            : make_uint4(0, 0, 0, 0);
      }
    } else if (x_rows_full && k0 + kStageK <= cols) {  // the common case: no checks
#pragma unroll
      for (int j = 0; j < XP; ++j) {
        const float4* p = reinterpret_cast<const float4*>(x_base + j * x_pass + k0);
        xv[2 * j] = load_activation(p);
        xv[2 * j + 1] = load_activation(p + 1);
      }
    } else {
#pragma unroll
      for (int j = 0; j < XP; ++j) {
        xv[2 * j] = xv[2 * j + 1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (m0 + xr + j * XR < a.n)
          load_x8_edge(x_base + j * x_pass + k0, k0 + xk, cols, x_vec, xv[2 * j], xv[2 * j + 1]);
      }
    }
  };
  auto store_stage = [&](int s, int buf) {
    uint32_t h[16];
    chunk.decode(int64_t(s) * 2 + wc, h);
    uint4* dst = reinterpret_cast<uint4*>(sw + (buf * BN + wr) * kTileLd + wc * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dst[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
    if constexpr (kX16) {
#pragma unroll
      for (int j = 0; j < XQ; ++j) {
        const int i = tid + j * T;
        store_x16_quarter(sx + (buf * BM + ((i >> 2) & (BM - 1))) * kTileLd + i / (BM * 4) * 32,
                          i & 3, xh[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < XP; ++j) {
        const float4 lo = xv[2 * j], hi = xv[2 * j + 1];
        *reinterpret_cast<uint4*>(sx + (buf * BM + xr + j * XR) * kTileLd + xk) =
            make_uint4(pack_half2(lo.x, lo.y), pack_half2(lo.z, lo.w), pack_half2(hi.x, hi.y),
                       pack_half2(hi.z, hi.w));
      }
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  load_stage(0);
  store_stage(0, 0);
  __syncthreads();
  for (int s = 0; s < stages; ++s) {
    const int buf = s & 1;
    const bool more = s + 1 < stages;
    if (more) load_stage(s + 1);  // in flight while the tensor cores work
    const __half* x_tile = sx + (buf * BM + wm * FM * 16) * kTileLd;
    const __half* w_tile = sw + (buf * BN + wn * FN * 16) * kTileLd;
#pragma unroll
    for (int kk = 0; kk < kStageK / 16; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[FN];
#pragma unroll
      for (int j = 0; j < FN; ++j)
        wmma::load_matrix_sync(b[j], w_tile + j * 16 * kTileLd + kk * 16, kTileLd);
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> xa;
        wmma::load_matrix_sync(xa, x_tile + i * 16 * kTileLd + kk * 16, kTileLd);
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], xa, b[j], acc[i][j]);
      }
    }
    if (more) store_stage(s + 1, buf ^ 1);
    __syncthreads();
  }

  // Epilogue through shared memory (the pipeline buffers are free now).
  float* sc = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
      wmma::store_matrix_sync(sc + (wm * FM * 16 + i * 16) * S::kLdc + wn * FN * 16 + j * 16,
                              acc[i][j], S::kLdc, wmma::mem_row_major);
  __syncthreads();
  for (int i = tid; i < BM * BN; i += T) {
    const int tm = i / BN, tn = i % BN;
    const int token = m0 + tm;
    const int64_t row = n0 + tn;
    if (token < a.n && row < rows) {
      float v = sc[tm * S::kLdc + tn];
      if (a.bias) v += a.bias[row];
      float* dst = a.y + int64_t(token) * a.ldy + row;
      if (a.accumulate) v += *dst;
      *dst = v;
    }
  }
}

template <PackedFormat F, int BM, int BN, int WM, int WN, int MinBlocks = 1, bool kX16 = false>
void launch_tile(const GemmArgs& a, cudaStream_t stream, const uint32_t* x16 = nullptr) {
  using S = TileShape<BM, BN, WM, WN>;
  auto kernel = kernel_gemm_wmma<F, BM, BN, WM, WN, MinBlocks, kX16>;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once).
  static const bool opted_in = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(S::kSmemBytes)));
    return true;
  }();
  (void)opted_in;
  const bool x_vec = a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const dim3 grid(unsigned((a.n + BM - 1) / BM), unsigned((a.w.layout.rows + BN - 1) / BN));
  launch_kernel(kernel, grid, S::kThreads, S::kSmemBytes, stream, a, x_vec, x16);
  CUDA_CHECK(cudaGetLastError());
}

template <PackedFormat F>
void launch_format(const GemmArgs& a, GemmTile tile, cudaStream_t stream) {
  switch (tile) {
    case GemmTile::T32x64:
      return launch_tile<F, 32, 64, 1, 4>(a, stream);
    case GemmTile::T32x128:
      return launch_tile<F, 32, 128, 1, 8>(a, stream);
    case GemmTile::T64x128:
      return launch_tile<F, 64, 128, 2, 4>(a, stream);
    case GemmTile::T128x128Occ2:
      return launch_tile<F, 128, 128, 2, 4, 2>(a, stream);
    case GemmTile::T128x128:
    case GemmTile::Auto:
      return launch_tile<F, 128, 128, 2, 4>(a, stream);
    case GemmTile::N16:  // launch_gemm sends it to launch_gemm_narrow
      VOLTAD_KERNEL_REQUIRE(false, "gemm: the narrow tile has its own launcher");
      return;
  }
}

template <PackedFormat F>
void launch_format_x16(const GemmArgs& a, GemmTile tile, const uint32_t* x16, cudaStream_t stream) {
  // Capped at 80 registers for three blocks an SM (24 warps), the 32x128
  // tiles lost 1.2-1.8% at batch 16-32 end to end (run 65, H100): two.
  if (tile == GemmTile::T32x64) return launch_tile<F, 32, 64, 1, 4, 1, true>(a, stream, x16);
  launch_tile<F, 32, 128, 1, 8, 1, true>(a, stream, x16);
}

// VOLTAD_GEMM_TILES_X16=0: the tiles convert x themselves (comparisons).
bool tiles_x16_on() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_GEMM_TILES_X16");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

}  // namespace

bool gemm_tiles_take_x16(const GemmArgs& a) {
  const PackedLayout& l = a.w.layout;
  if (!tiles_x16_on() || a.n < 1 || a.n > kGemmNarrowMaxTokens || !a.w.data ||
      l.cols % kStageK != 0 || gemm_has_fused_epilogue(a))
    return false;
  const GemmTile tile = gemm_pick_tile(a.n, l.rows);
  return tile == GemmTile::T32x64 || tile == GemmTile::T32x128;
}

namespace {
std::atomic<uint64_t> tiles_x16_launches{0};
}  // namespace

uint64_t gemm_tiles_x16_launches() {
  return tiles_x16_launches.load();
}

void launch_gemm_tiles_x16(const GemmArgs& a, const void* x16, cudaStream_t stream) {
  VOLTAD_KERNEL_REQUIRE(gemm_tiles_take_x16(a),
                        "gemm tiles x16: a shape they take (gemm_tiles_take_x16)");
  launch_gemm_tiles_x16(a, gemm_pick_tile(a.n, a.w.layout.rows), x16, stream);
}

void launch_gemm_tiles_x16(const GemmArgs& a, GemmTile tile, const void* x16, cudaStream_t stream) {
  const PackedLayout& l = a.w.layout;
  VOLTAD_KERNEL_REQUIRE(tile == GemmTile::T32x64 || tile == GemmTile::T32x128,
                        "gemm tiles x16: the 32x64 or 32x128 tile");
  VOLTAD_KERNEL_REQUIRE(
      a.n >= 1 && a.y && a.w.data && x16 && reinterpret_cast<uintptr_t>(x16) % 16 == 0,
      "gemm tiles x16: n >= 1, y, weights and 16-byte aligned x");
  VOLTAD_KERNEL_REQUIRE(l.rows >= 1 && l.cols % kStageK == 0 && a.ldy >= l.rows,
                        "gemm tiles x16: cols whole stages of 64, y's row stride");
  VOLTAD_KERNEL_REQUIRE((l.rows + 63) / 64 <= 65535, "gemm tiles x16: too many rows for the grid");
  VOLTAD_KERNEL_REQUIRE(!gemm_has_fused_epilogue(a),
                        "gemm tiles x16: a norm's pieces and SwiGLU are the narrow "
                        "kernel's");
  with_packed_format(l.format, [&](auto f) {
    launch_format_x16<decltype(f)::value>(a, tile, static_cast<const uint32_t*>(x16), stream);
  });
  ++tiles_x16_launches;
}

GemmTile gemm_pick_tile(int n, int64_t rows) {
  const int sms = device_sm_count();
  // Decode-sized batches (docs/KERNEL-NOTES.md, "Narrow GEMM"): the narrow
  // kernel, which decodes every weight once per 16 tokens (32 where the
  // 32-token blocks of paired B run).
  const bool narrow_fits = (rows + 31) / 32 <= 65535;  // its grid's y dimension
  // The lm head's rows (kGemmHeadRows and more): the 32x64 tiles from 9
  // tokens (run 53, H100, 128,256 x 4,096 Q6_K at 32 tokens: 451 us against
  // the narrow kernel's 922; run 54, end to end, portable, from 9 against
  // from 17: 12 and 16 tokens +1.2-1.9% on Llama-3-8B Q4_K_M and Q4_0,
  // +1.9-2.2% on Qwen3-8B; auto even; from 5: 8 tokens -4.6 to -4.9%).
  // VOLTAD_NARROW_HEAD_TILES_FROM=N: from N tokens.
  static const int head_tiles_from = [] {
    const char* v = std::getenv("VOLTAD_NARROW_HEAD_TILES_FROM");
    return v && *v ? std::atoi(v) : 9;
  }();
  const bool head = rows >= kGemmHeadRows;
  const bool narrow = narrow_fits && !(head && n >= head_tiles_from);
  if (n <= 16 && narrow) return GemmTile::N16;
  // From 17 tokens, a matrix with rows for two waves of 32x64 tiles ran
  // faster on those with 16-token blocks (H200: 28672 rows at 32 tokens 104
  // against 219 us; 4096 rows 53 against 35), but not with the 32-token
  // blocks: run 53 (H100, portable, end to end, gate|up narrow and the lm
  // head in the tiles, against both in the tiles): Llama-3-8B Q4_K_M / Q4_0
  // 17 tokens +8.1% / +9.5%, 24 +8.0% / +8.9%, 32 +4.9% / +4.0%.
  // VOLTAD_NARROW_WIDE_MAX=16 gives the tiles from 17 tokens again.
  static const int wide_max = [] {
    const char* v = std::getenv("VOLTAD_NARROW_WIDE_MAX");
    return v && *v ? std::atoi(v) : kGemmNarrowMaxTokens;
  }();
  const bool wide_narrow = n <= wide_max && gemm_narrow_tokens32();
  if (n <= kGemmNarrowMaxTokens && narrow &&
      (wide_narrow || (rows + 63) / 64 < 2 * int64_t(sms)))
    return GemmTile::N16;
  // An lm head at 9-32 tokens: the 32x64 tiles stage 32 tokens' x (fp32,
  // 8 KB a stage) for every 64 rows, 2.4 times the bytes of the rows' Q6_K
  // weights; the 32x128 tiles stage it once per 128 rows. Run 59 (H100,
  // the kernel alone): Llama-3's 128,256 x 4,096 Q6_K at 9-32 tokens 11-19%
  // shorter (410 against 461 us at 32), Qwen3's 151,936 rows 8% at 16
  // tokens and even at 32; end to end (portable) +0.9-1.4% at batch 12 and
  // +0.25-0.7% at 32. VOLTAD_GEMM_HEAD_TILE=32x64 gives the old tiles.
  static const bool head_wide = [] {
    const char* v = std::getenv("VOLTAD_GEMM_HEAD_TILE");
    return !(v && std::strcmp(v, "32x64") == 0);
  }();
  if (head && !narrow && n <= kGemmNarrowMaxTokens && head_wide) return GemmTile::T32x128;
  // Cost model: waves of blocks times the work of one block, over a
  // relative efficiency of the tile (smaller tiles re-read more and keep the
  // tensor cores less busy). One resident block per SM for the 8-warp
  // tiles, two for the 4-warp one.
  struct Option {
    GemmTile tile;
    int bm, bn, per_sm;
    double efficiency;
  };
  const Option options[] = {{GemmTile::T128x128, 128, 128, 1, 1.0},
                            {GemmTile::T64x128, 64, 128, 1, 0.8},
                            {GemmTile::T32x64, 32, 64, 2, 0.55}};
  GemmTile best = GemmTile::T128x128;
  double best_cost = 0.0;
  for (const Option& o : options) {
    const int64_t blocks = (n + o.bm - 1) / o.bm * ((rows + o.bn - 1) / o.bn);
    const int64_t waves = (blocks + int64_t(sms) * o.per_sm - 1) / (int64_t(sms) * o.per_sm);
    const double cost = double(waves) * o.bm * o.bn * o.per_sm / o.efficiency;
    if (best_cost == 0.0 || cost < best_cost) best = o.tile, best_cost = cost;
  }
  return best;
}

void launch_gemm(const GemmArgs& a, cudaStream_t stream) {
  launch_gemm(a, GemmTile::Auto, stream);
}

void launch_gemm(const GemmArgs& a, GemmTile tile, cudaStream_t stream) {
  const PackedLayout& l = a.w.layout;
  VOLTAD_KERNEL_REQUIRE(a.n >= 1 && a.x && a.y && a.w.data, "gemm: n >= 1 and buffers");
  VOLTAD_KERNEL_REQUIRE(l.rows >= 1 && l.cols >= 1 && l.cols % packed_block_elems(l.format) == 0,
                        "gemm: cols a multiple of the format's block");
  VOLTAD_KERNEL_REQUIRE(a.ldx >= l.cols && a.ldy >= l.rows, "gemm: row strides");
  VOLTAD_KERNEL_REQUIRE((l.rows + 63) / 64 <= 65535, "gemm: too many rows for the grid");
  if (tile == GemmTile::Auto) tile = gemm_pick_tile(a.n, l.rows);
  if (tile == GemmTile::N16) return launch_gemm_narrow(a, stream);
  VOLTAD_KERNEL_REQUIRE(!gemm_has_fused_epilogue(a),
                        "gemm: a norm's pieces and SwiGLU are the narrow kernel's "
                        "(GemmArgs::norm_out, swiglu_out)");
  with_packed_format(l.format, [&](auto f) { launch_format<decltype(f)::value>(a, tile, stream); });
}

}  // namespace voltad::kernels
