// The sm_80+ prefill GEMM: contract in gemm_sm80.h and gemm_wmma.h.
//
// What differs from the portable kernel (gemm_wmma.cu): there, stage k+1 is
// loaded into registers while the tensor cores work on stage k, so a
// stage's memory latency is exposed per stage (measured ~1.7 us a stage on
// the H200 against ~0.3 us of MMA: docs/KERNEL-NOTES.md), and every block
// reads x as fp32 and rounds it to fp16 itself. Here:
//   - x is rounded to fp16 once, by a small kernel, into scratch memory the
//     caller lends (the same rounding as the portable kernel's);
//   - each stage's fp16 x tile and raw weight bytes are copied by cp.async
//     into a ring of 3-4 slots, issued 2-3 stages ahead; the x tile is used
//     where it lands, as wmma's A operand;
//   - after one __syncthreads per stage s, warps interleave the MMAs of
//     stage s with decoding stage s + 1's weights (gemm_decode.cuh: the
//     portable kernel's code and rounding, reading shared memory) into the
//     other half of a double-buffered fp16 W tile.
// The fp16 operands and the order of the fp32 sums are the portable
// kernel's, so the results are bit-identical: the tests compare both.
//
// Raw bytes one weight row gives one stage (64 values = chunks 2s, 2s+1):
//   quants  2 chunks of nibbles/bytes/halves/floats at s * Q
//   high    Int6: 16 bytes of crumbs at s * 16
//   scales  per-32 formats: 2 chunks' scales at s * Sc; Int4K256/Int8K256:
//           the 16-byte header of super-block s / 4 at (s / 4) * 16
//   super   Int6: the 4-byte word holding super-block s / 4's fp16 scale,
//           at (s / 8) * 4 (cp.async copies 4, 8 or 16 bytes)
// Rows past the matrix and tokens past n are zero-filled by cp.async's
// src-size operand, and zeros decode to zero weights in every format.
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdlib>

#include "kernels/cuda_check.h"
#include "kernels/gemm_decode.cuh"
#include "kernels/gemm_sm80.h"
#include "kernels/launch.cuh"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels {

// Named (not anonymous) so that kernels/dev/bench_gemm.cu can include this
// file beside gemm_wmma.cu.
namespace sm80 {

namespace wmma = nvcuda::wmma;
using namespace gemm_decode;

constexpr int kStageK = 64;           // k per stage
constexpr int kTileLd = kStageK + 8;  // fp16 tile row stride, halves (as the portable kernel)

// Bytes per row per stage of each weight sub-array (0: the format lacks it).
struct RawRow {
  int quants, high, scales, super_;
  constexpr int total() const { return quants + high + scales + super_; }
};
template <PackedFormat F>
constexpr RawRow raw_row() {
  switch (F) {
    case PackedFormat::Int4Sym32:
      return {32, 0, 4, 0};
    case PackedFormat::Int4Affine32:
      return {32, 0, 8, 0};
    case PackedFormat::Int4K256:
      return {32, 0, 16, 0};
    case PackedFormat::Int6K256:
      return {32, 16, 4, 4};
    case PackedFormat::Int8Sym32:
      return {64, 0, 4, 0};
    case PackedFormat::Int8Affine32:
      return {64, 0, 8, 0};
    case PackedFormat::Int8K256:
      return {64, 0, 16, 0};
    case PackedFormat::F16:
      return {128, 0, 0, 0};
    case PackedFormat::F32:
      return {256, 0, 0, 0};
  }
  return {0, 0, 0, 0};
}
// Formats whose scales are a 16-byte header per 256 values (Int6K256's are
// per chunk, with its fp16 scale in `super`).
constexpr bool k256_header(PackedFormat f) {
  return f == PackedFormat::Int4K256 || f == PackedFormat::Int8K256;
}

// A ring slot: stage s's fp16 x tile [BM][kTileLd], then its raw weight
// bytes for BN rows. The fp16 W tiles [2][BN][kTileLd] follow the ring.
template <PackedFormat F, int BM, int BN, int Stages>
struct Ring {
  static constexpr RawRow kRow = raw_row<F>();
  static constexpr size_t kXBytes = size_t(BM) * kTileLd * sizeof(__half);
  static constexpr size_t kSlotBytes = kXBytes + size_t(BN) * kRow.total();
  static constexpr size_t kWTileBytes = size_t(BN) * kTileLd * sizeof(__half);
  static constexpr size_t kEpilogueBytes = size_t(BM) * (BN + 4) * sizeof(float);
  static constexpr size_t kPipeBytes = Stages * kSlotBytes + 2 * kWTileBytes;
  static constexpr size_t kSmemBytes = kPipeBytes > kEpilogueBytes ? kPipeBytes : kEpilogueBytes;
  static_assert(kSlotBytes % 16 == 0 && kXBytes % 16 == 0, "16-byte aligned sub-arrays");
  static_assert(Stages >= 3, "the wait counts assume a stage in flight beyond the next");
};

// One sub-array's stage bytes for BN rows: row r of the tile copies
// `Bytes` bytes from row n0 + r at byte `offset` of the row.
template <int Bytes, int BN, int Threads>
__device__ __forceinline__ void copy_rows(uint8_t* dst, const uint8_t* base, int64_t row_bytes,
                                          int64_t offset, int64_t n0, int64_t rows, int tid) {
  if constexpr (Bytes > 0) {
    constexpr int kUnit = Bytes < 16 ? Bytes : 16;
    constexpr int kPieces = Bytes / kUnit;
    for (int i = tid; i < BN * kPieces; i += Threads) {
      const int r = i / kPieces, p = i % kPieces;
      const bool ok = n0 + r < rows;
      const uint8_t* src = base + (ok ? (n0 + r) * row_bytes + offset + p * kUnit : 0);
      copy_async<kUnit>(dst + r * Bytes + p * kUnit, src, ok ? kUnit : 0);
    }
  }
}

// x (n rows of cols floats, stride ldx) -> fp16 rows of cols values
// (stride cols), rounded as the portable kernel rounds when it stages x.
__global__ void kernel_x_to_half(const float* x, int64_t ldx, int n, int64_t cols, bool vec,
                                 __half* out) {
  wait_for_previous_kernel();
  const int64_t groups = cols / 8;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= groups * n) return;
  const int64_t t = i / groups, g = i % groups;
  const float* p = x + t * ldx + g * 8;
  float v[8];
  if (vec) {
    const float4 lo = load_activation(reinterpret_cast<const float4*>(p)),
                 hi = load_activation(reinterpret_cast<const float4*>(p + 4));
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z,
    v[7] = hi.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = load_activation(p + j);
  }
  *reinterpret_cast<uint4*>(out + t * cols + g * 8) =
      make_uint4(pack_half2(v[0], v[1]), pack_half2(v[2], v[3]), pack_half2(v[4], v[5]),
                 pack_half2(v[6], v[7]));
}

template <PackedFormat F, int BM, int BN, int WM, int WN, int Stages, int MinBlocks>
__global__ void __launch_bounds__(WM* WN * 32, MinBlocks)
    kernel_gemm_sm80(GemmArgs a, const __half* xh) {
  wait_for_previous_kernel();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using R = Ring<F, BM, BN, Stages>;
  constexpr int T = WM * WN * 32, FM = BM / WM / 16, FN = BN / WN / 16;
  static_assert(T == 2 * BN && FM * WM * 16 == BM && FN * WN * 16 == BN, "tile shape");
  extern __shared__ __align__(128) unsigned char smem[];
  __half* w_tiles = reinterpret_cast<__half*>(smem + Stages * R::kSlotBytes);

  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int m0 = blockIdx.x * BM;
  const int64_t n0 = int64_t(blockIdx.y) * BN;
  const PackedLayout& l = a.w.layout;
  const int64_t rows = l.rows, cols = l.cols;
  const int stages = int(cols / kStageK);
  const uint8_t* quants = a.w.data + l.quants_offset;
  const uint8_t* high = a.w.data + l.high_offset;
  const uint8_t* scales = a.w.data + l.scales_offset;
  const uint8_t* super_ = a.w.data + l.super_offset;

  auto slot_of = [&](int s) { return smem + (s % Stages) * R::kSlotBytes; };
  auto issue = [&](int s) {
    if (s < stages) {
      uint8_t* slot = slot_of(s);
      __half* x = reinterpret_cast<__half*>(slot);
      const int64_t k0 = int64_t(s) * kStageK;
      for (int i = tid; i < BM * (kStageK / 8); i += T) {
        const int r = i / (kStageK / 8), c = i % (kStageK / 8);
        const bool ok = m0 + r < a.n;
        copy_async<16>(x + r * kTileLd + c * 8, xh + (ok ? int64_t(m0 + r) * cols + k0 + c * 8 : 0),
                       ok ? 16 : 0);
      }
      uint8_t* w = slot + R::kXBytes;
      copy_rows<R::kRow.quants, BN, T>(w, quants, l.quant_row_bytes, int64_t(s) * R::kRow.quants,
                                       n0, rows, tid);
      w += BN * R::kRow.quants;
      copy_rows<R::kRow.high, BN, T>(w, high, l.high_row_bytes, int64_t(s) * R::kRow.high, n0, rows,
                                     tid);
      w += BN * R::kRow.high;
      copy_rows<R::kRow.scales, BN, T>(
          w, scales, l.scale_row_bytes,
          k256_header(F) ? int64_t(s / 4) * R::kRow.scales : int64_t(s) * R::kRow.scales, n0, rows,
          tid);
      w += BN * R::kRow.scales;
      copy_rows<R::kRow.super_, BN, T>(w, super_, l.super_row_bytes, int64_t(s / 8) * 4, n0, rows,
                                       tid);
    }
    copy_commit();  // an empty group past the end keeps the wait counts uniform
  };

  // This thread decodes chunk wc of tile row wr.
  const int wr = tid >> 1, wc = tid & 1;
  auto decode = [&](int s, int buf) {
    const uint8_t* w = slot_of(s) + R::kXBytes;
    RowPointers p;
    p.quants = w + wr * R::kRow.quants;
    p.high = w + BN * R::kRow.quants + wr * R::kRow.high;
    p.scales = w + BN * (R::kRow.quants + R::kRow.high) + wr * R::kRow.scales;
    p.super_ = w + BN * (R::kRow.quants + R::kRow.high + R::kRow.scales) + wr * R::kRow.super_ +
               ((s / 4) & 1) * 2;
    p.cols = int64_t(1) << 40;  // every chunk is whole: cols % 64 == 0
    Chunk<F> chunk;
    chunk.template load<SharedMemory>(p, wc);
    uint32_t h[16];
    chunk.decode(int64_t(s) * 2 + wc, h);
    uint4* dst = reinterpret_cast<uint4*>(w_tiles + (buf * BN + wr) * kTileLd + wc * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      dst[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  // Slot s % Stages holds stage s from its issue until its MMAs (x) and its
  // decode (weights, one stage earlier); W tile s & 1 from its decode until
  // its MMAs. After the barrier of stage s: stage s + 1 has landed for every
  // thread, W tile s & 1 is decoded, and W tile (s + 1) & 1 and the slot of
  // stage s - 1 are free.
  for (int s = 0; s < Stages - 1; ++s) issue(s);
  copy_wait<Stages - 2>();
  __syncthreads();
  decode(0, 0);
  for (int s = 0; s < stages; ++s) {
    copy_wait<Stages - 3>();  // this thread's copies of stage s + 1 have landed
    __syncthreads();
    issue(s + Stages - 1);  // into the slot of stage s - 1
    const __half* x_tile = reinterpret_cast<const __half*>(slot_of(s)) + wm * FM * 16 * kTileLd;
    const __half* w_tile = w_tiles + ((s & 1) * BN + wn * FN * 16) * kTileLd;
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
    if (s + 1 < stages) decode(s + 1, (s + 1) & 1);  // while other warps are on the MMAs
  }
  copy_wait<0>();
  __syncthreads();

  // Epilogue through shared memory, as the portable kernel's.
  constexpr int kLdc = BN + 4;
  float* sc = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
      wmma::store_matrix_sync(sc + (wm * FM * 16 + i * 16) * kLdc + wn * FN * 16 + j * 16,
                              acc[i][j], kLdc, wmma::mem_row_major);
  __syncthreads();
  for (int i = tid; i < BM * BN; i += T) {
    const int tm = i / BN, tn = i % BN;
    const int token = m0 + tm;
    const int64_t r = n0 + tn;
    if (token < a.n && r < rows) {
      float v = sc[tm * kLdc + tn];
      if (a.bias) v += a.bias[r];
      float* dst = a.y + int64_t(token) * a.ldy + r;
      if (a.accumulate) v += *dst;
      *dst = v;
    }
  }
#endif
}

const Device& device() {
  static const Device d = [] {
    Device r;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&r.major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&r.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CUDA_CHECK(
        cudaDeviceGetAttribute(&r.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    cudaFuncAttributes attr{};
    // The PTX version the loaded code came from: below 80 the body above
    // compiled to nothing (a build without sm_80+ targets, JIT-compiled).
    if (cudaFuncGetAttributes(
            &attr, kernel_gemm_sm80<PackedFormat::Int4K256, 128, 128, 2, 4, 3, 1>) == cudaSuccess)
      r.code = attr.ptxVersion >= 80 && attr.binaryVersion >= 80;
    else
      (void)cudaGetLastError();
    return r;
  }();
  return d;
}

template <PackedFormat F, int BM, int BN, int WM, int WN, int Stages, int MinBlocks = 1>
void launch_tile(const GemmArgs& a, const __half* xh, cudaStream_t stream) {
  using R = Ring<F, BM, BN, Stages>;
  auto kernel = kernel_gemm_sm80<F, BM, BN, WM, WN, Stages, MinBlocks>;
  static const bool opted_in = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(R::kSmemBytes)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(unsigned((a.n + BM - 1) / BM), unsigned((a.w.layout.rows + BN - 1) / BN));
  launch_kernel(kernel, grid, WM * WN * 32, R::kSmemBytes, stream, a, xh);
  CUDA_CHECK(cudaGetLastError());
}

// Four ring slots where shared memory allows, else three.
template <PackedFormat F, int BM, int BN, int WM, int WN>
void launch_stages(const GemmArgs& a, const __half* xh, cudaStream_t stream) {
  if (Ring<F, BM, BN, 4>::kSmemBytes <= size_t(device().max_smem))
    return launch_tile<F, BM, BN, WM, WN, 4>(a, xh, stream);
  launch_tile<F, BM, BN, WM, WN, 3>(a, xh, stream);
}

// 64x128 tiles for few tokens; else 128x128, two blocks per SM (registers
// capped at 128) where shared memory holds two three-slot rings, measured
// 318 against 378 us for 512 x 14336 x 4096 Q4_K on the H200.
template <PackedFormat F>
void launch_format(const GemmArgs& a, const __half* xh, cudaStream_t stream) {
  if (a.n <= 64) return launch_stages<F, 64, 128, 2, 4>(a, xh, stream);
  constexpr size_t kReservedPerBlock = 1024;  // the runtime's own shared memory per block
  if (2 * (Ring<F, 128, 128, 3>::kSmemBytes + kReservedPerBlock) <= size_t(device().smem_per_sm))
    return launch_tile<F, 128, 128, 2, 4, 3, 2>(a, xh, stream);
  launch_stages<F, 128, 128, 2, 4>(a, xh, stream);
}

// The least any launch of the format needs (128x128, three slots).
template <PackedFormat F>
size_t smem_needed() {
  return Ring<F, 128, 128, 3>::kSmemBytes;
}

size_t smem_needed(PackedFormat f) {
  size_t bytes = ~size_t(0);
  with_packed_format(f, [&](auto v) { bytes = smem_needed<decltype(v)::value>(); });
  return bytes;
}

void convert_x(const GemmArgs& a, __half* xh, cudaStream_t stream) {
  const int64_t groups = a.w.layout.cols / 8 * a.n;
  const bool vec = a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  launch_kernel(kernel_x_to_half, unsigned((groups + 255) / 256), 256, 0, stream, a.x, a.ldx, a.n,
                a.w.layout.cols, vec, xh);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace sm80

using sm80::Device;
using sm80::device;

bool gemm_sm80_available() {
  const Device& d = device();
  return d.major >= 8 && d.code;
}

bool gemm_sm80_supports(const GemmArgs& a, const GemmScratch& scratch) {
  const PackedLayout& l = a.w.layout;
  // The super word copy reads 4-byte words of Int6's super row (cols % 512).
  const bool super_ok = l.super_row_bytes % 4 == 0;
  return gemm_sm80_available() && a.n >= 1 && l.cols % sm80::kStageK == 0 && super_ok &&
         reinterpret_cast<uintptr_t>(a.w.data) % 16 == 0 && scratch.data &&
         reinterpret_cast<uintptr_t>(scratch.data) % 16 == 0 &&
         scratch.bytes >= gemm_sm80_scratch_bytes(a.n, l.cols) &&
         sm80::smem_needed(l.format) <= size_t(device().max_smem);
}

void launch_gemm_sm80(const GemmArgs& a, const GemmScratch& scratch, cudaStream_t stream) {
  const PackedLayout& l = a.w.layout;
  VOLTAD_KERNEL_REQUIRE(a.n >= 1 && a.x && a.y && a.w.data, "gemm_sm80: n >= 1 and buffers");
  VOLTAD_KERNEL_REQUIRE(gemm_sm80_supports(a, scratch),
                        "gemm_sm80: arguments the variant takes (gemm_sm80_supports)");
  VOLTAD_KERNEL_REQUIRE(a.ldx >= l.cols && a.ldy >= l.rows, "gemm_sm80: row strides");
  VOLTAD_KERNEL_REQUIRE(!gemm_has_fused_epilogue(a),
                        "gemm_sm80: a norm's pieces and SwiGLU are the portable narrow "
                        "kernel's");
  VOLTAD_KERNEL_REQUIRE((l.rows + 127) / 128 <= 65535, "gemm_sm80: too many rows for the grid");
  __half* xh = static_cast<__half*>(scratch.data);
  sm80::convert_x(a, xh, stream);
  with_packed_format(l.format,
                     [&](auto f) { sm80::launch_format<decltype(f)::value>(a, xh, stream); });
}

namespace {
// Read at every launch, not once: a test may set it between steps.
bool sm80_always() {
  const char* v = std::getenv("VOLTAD_GEMM_SM80_ALWAYS");
  return v && v[0] == '1';
}
}  // namespace

bool gemm_sm80_preferred(const GemmArgs& a) {
  // Measured on the H200 (docs/KERNEL-NOTES.md): the variant wins from
  // about one wave of 128x128 tiles (4096 rows x 512 tokens: 102 against
  // 108 us; 14336 rows: 321 against 433); with fewer blocks, or 64 tokens
  // and fewer, the portable kernel's smaller tiles win (1024 rows x 512
  // tokens: 59 against 110 us).
  // VOLTAD_GEMM_SM80_ALWAYS=1 (tests, benchmarks): wherever it runs, so
  // that small models exercise it too.
  if (sm80_always()) return true;
  const int64_t blocks = (a.n + 127) / 128 * ((a.w.layout.rows + 127) / 128);
  return a.n > 64 && blocks * 4 >= int64_t(device().sms) * 3;
}

bool gemm_for_takes_narrow_sm80(KernelSet set, const GemmArgs& a, const GemmScratch& scratch) {
  return set == KernelSet::Auto && !sm80_always() && gemm_narrow_sm80_supports(a, scratch);
}

namespace {
bool takes_sm80(KernelSet set, const GemmArgs& a, const GemmScratch& scratch) {
  return set == KernelSet::Auto && gemm_sm80_supports(a, scratch) &&
         (sm80_always() || gemm_sm80_preferred(a));
}
// The portable narrow GEMM or 32-token tiles on the scratch's fp16 x,
// where it may hold it.
bool takes_narrow_x16(const GemmArgs& a, const GemmScratch& scratch) {
  return scratch.data && reinterpret_cast<uintptr_t>(scratch.data) % 16 == 0 &&
         scratch.bytes >= gemm_narrow_sm80_scratch_bytes(a.n, a.w.layout.cols) &&
         (gemm_narrow_takes_x16(a) || gemm_tiles_take_x16(a));
}
void launch_x16(const GemmArgs& a, const void* x16, cudaStream_t stream) {
  if (gemm_narrow_takes_x16(a)) return launch_gemm_narrow_x16(a, x16, stream);
  launch_gemm_tiles_x16(a, x16, stream);
}
}  // namespace

bool gemm_for_reads_narrow_x(KernelSet set, const GemmArgs& a, const GemmScratch& scratch) {
  if (gemm_for_takes_narrow_sm80(set, a, scratch)) return true;
  return !takes_sm80(set, a, scratch) && takes_narrow_x16(a, scratch);
}

bool gemm_for_takes_norm_pieces(KernelSet set, const GemmArgs& a, const GemmScratch& scratch) {
  if (gemm_for_takes_narrow_sm80(set, a, scratch) || takes_sm80(set, a, scratch)) return false;
  if (a.n > kNormPiecesMaxTokens || gemm_pick_tile(a.n, a.w.layout.rows) != GemmTile::N16)
    return false;
  if (a.norm_out.weight && a.w.layout.rows % 32 != 0) return false;
  return !a.norm_scale || (a.x && scratch.holds_x == a.x && a.w.layout.cols % 32 == 0 &&
                           takes_narrow_x16(a, scratch));
}

bool gemm_for_takes_swiglu(KernelSet set, const GemmArgs& a, const GemmScratch& scratch) {
  if (gemm_for_takes_narrow_sm80(set, a, scratch) || takes_sm80(set, a, scratch)) return false;
  const SwigluOut& p = a.swiglu_out;
  return a.n >= 1 && a.n <= kGemmNarrowMaxTokens && p.half > 0 && p.half % 32 == 0 &&
         a.w.layout.rows == 2 * p.half && gemm_swiglu_up_fits(a) && !a.norm_out.weight &&
         !a.accumulate && !a.bias && a.x && scratch.holds_x == a.x && gemm_narrow_takes_x16(a) &&
         takes_narrow_x16(a, scratch);
}

void launch_gemm_for(KernelSet set, const GemmArgs& a, const GemmScratch& scratch,
                     cudaStream_t stream) {
  if (gemm_has_fused_epilogue(a)) {
    VOLTAD_KERNEL_REQUIRE(!gemm_has_norm_pieces(a) || gemm_for_takes_norm_pieces(set, a, scratch),
                          "gemm: a norm's pieces only on the portable narrow GEMM "
                          "(gemm_for_takes_norm_pieces)");
    VOLTAD_KERNEL_REQUIRE(!a.swiglu_out.half || gemm_for_takes_swiglu(set, a, scratch),
                          "gemm: SwiGLU made by a product only on the portable narrow GEMM "
                          "(gemm_for_takes_swiglu)");
    if (a.x && scratch.holds_x == a.x && takes_narrow_x16(a, scratch))
      return launch_x16(a, scratch.data, stream);
    return launch_gemm_narrow(a, stream);
  }
  if (gemm_for_takes_narrow_sm80(set, a, scratch))
    return launch_gemm_narrow_sm80(a, scratch, stream);
  if (takes_sm80(set, a, scratch)) return launch_gemm_sm80(a, scratch, stream);
  if (a.x && scratch.holds_x == a.x && takes_narrow_x16(a, scratch))
    return launch_x16(a, scratch.data, stream);
  launch_gemm(a, stream);
}

}  // namespace voltad::kernels
