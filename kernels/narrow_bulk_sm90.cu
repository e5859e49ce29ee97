// The narrow GEMM's streaming blocks on sm_90 (bulk copies and mbarriers):
// batched decode of 1-8 tokens on Q4_K (Int4K256) and Q4_0 (Int4Sym32)
// rows of 4,096 columns, in a matrix of many rows (a layer's gate|up).
// Part of launch_gemm_narrow_sm80 (kernels/gemm_sm80.h), which takes it
// where gemm_narrow_sm80_bulk_taken says so, after x is in the narrow
// GEMM's layout (kernels/narrow_x.cuh).
//
// Why: the 32-row blocks of kernels/gemm_narrow_sm80.cu split k over 8
// warps, so each warp of a 4,096-column product copies only 4 stages, its
// whole ring at once, and waits one DRAM round trip per block; gate|up at 8
// tokens ran at ~2.1 TB/s in the step (docs/PERFORMANCE-RUNS-38-39.md run
// 39), where
// the batch-1 matvec fed by bulk copies streams the same bytes at 3.4
// (kernels/matvec_bulk_sm90.cu). Here, as there, one wave of blocks each
// walks many row groups, and a producer warp keeps a ring of whole-row
// stages in flight for 16 consumer warps:
//   - a stage is 16 rows (one m16 tile), all 4,096 columns: each row's
//     nibbles and its header copied by one bulk copy each (a lane of the
//     producer warp each), at row strides padded by 16 bytes so that the 8
//     rows a load reads hit distinct banks;
//   - consumer warp w takes super-block w (chunks 8w..8w+7) of every
//     stage; token g's x fragments of those chunks and their x sums are in
//     its registers for the whole kernel, read once after the wait;
//   - the decode and the MMAs are the 32-row kernel's (narrow_sm80.cuh):
//     Q4_K's sc*q exact in FP16 summed over the super-block in FP32, then
//     D*(sc*q . x) - 64*M*(mn . xsum) once per row and token; Q4_0's
//     d*(q - 8) in FP16;
//   - each warp's 16 x 8 sums meet in shared memory (two stages' worth,
//     alternating, so one barrier a stage) and one thread an output adds
//     the 16 warps' in warp order: the same bits every run.
// Bits differ from the 32-row kernel's (another order of FP32 sums); both
// are held to the same reference (tests/kernels/test_gemm.cpp).
// Measured on the H200 (docs/PERFORMANCE-RUNS-42.md): Llama-3-8B's gate|up
// at 8 tokens alone in 25.2 us against 33.1 (2.6 TB/s); batch 8 +14.2%
// end to end (Q4_K_M), +2.7% (Q4_0, against its shared-x blocks). Rows
// longer than 4,096 columns, 9-16 tokens and a producer inside a consumer
// warp were slower (branch next/narrow-bulk-general; KERNEL-NOTES.md).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/bulk_sm90.cuh"
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/gemm_sm80.h"
#include "kernels/launch.cuh"
#include "kernels/narrow_sm80.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels {

namespace narrow_bulk {

using bulk::barrier_arrive;
using bulk::barrier_expect;
using bulk::barrier_wait;
using bulk::copy_bulk;
using bulk::fence_proxy_async;
using bulk::groups_of_block;
using bulk::init_ring;
using narrow80::byte_as_half2;
using narrow80::decode_q4_0;
using narrow80::decode_sc_q;
using narrow80::half2_as_u32;
using narrow80::k256_d;
using narrow80::k256_six_bits;
using sm80::mma_16816;
using sm80::mma_16816_first;

constexpr int kConsumerWarps = 16;  // one super-block of a 4,096-value row each
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreads = kConsumers + 32;  // and the producer warp
constexpr int kCols = 4096;
constexpr int kChunks = kCols / 32;
constexpr int kN8 = 8;  // token rows of x (one n8 tile)
constexpr int kRows = 16;
constexpr int kQuantRow = kCols / 2, kHeaderRow = kCols / 256 * 16;
constexpr int kQuantLd = kQuantRow + 16, kHeaderLd = kHeaderRow + 16;
constexpr int kStageBytes = kRows * (kQuantLd + kHeaderLd);
#ifndef VOLTAD_NARROW_BULK_STAGES  // probe: -DVOLTAD_NARROW_BULK_STAGES=4
#define VOLTAD_NARROW_BULK_STAGES 3
#endif
constexpr int kStages = VOLTAD_NARROW_BULK_STAGES;
constexpr int kRedFloats = kConsumerWarps * kRows * kN8;  // one stage's partial sums
constexpr int kSmem = kStages * kStageBytes + 2 * kStages * 8 + 2 * kRedFloats * 4;
// As for the batch-1 bulk matvec: the ring pays once each block walks
// several row groups.
constexpr int64_t kMinGroupsPerBlock = 4;
static_assert(kChunks == 8 * kConsumerWarps, "a super-block a consumer warp");
static_assert(kStageBytes % 128 == 0, "stages 128-byte aligned");

// One chunk's two MMAs (values 0-15, 16-31) into c: lo and hi, the decoded
// pairs of rows g and g + 8 (A); x, token g's B fragments of the chunk.
// first: c starts from zero.
__device__ __forceinline__ void mma_chunk(float (&c)[4], const uint32_t (&lo)[4],
                                          const uint32_t (&hi)[4], const uint4& x, bool first) {
  const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]};
  const uint32_t a1[4] = {lo[2], hi[2], lo[3], hi[3]};
  if (first)
    mma_16816_first(c, a0, x.x, x.y);
  else
    mma_16816(c, a0, x.x, x.y);
  mma_16816(c, a1, x.z, x.w);
}

// F: Int4K256 (Q4_K) or Int4Sym32 (Q4_0), whose rows have as many bytes
// (a chunk's 16 bytes of nibbles; 16 header bytes a super-block, or an
// fp16 d a chunk).
template <PackedFormat F>
__global__ void __launch_bounds__(kThreads, 1)
    kernel_narrow_bulk(GemmArgs a, const uint32_t* xp, int64_t groups) {
  constexpr bool kQ4K = F == PackedFormat::Int4K256;
  extern __shared__ __align__(128) uint8_t smem[];
  const PackedLayout& l = a.w.layout;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  float* red = reinterpret_cast<float*>(empty + kStages);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  init_ring(full, empty, kStages, kConsumerWarps);
  const int mine = groups_of_block(groups);
  auto first_row = [&](int k) { return (blockIdx.x + int64_t(k) * gridDim.x) * kRows; };

  if (warp == kConsumerWarps) {
    // The producer: lane r < 16 copies row r's nibbles, lane 16 + r its
    // header; from the block's start (weights are no kernel's output).
    for (int k = 0; k < mine; ++k) {
      const int s = k % kStages;
      if (k >= kStages) {
        barrier_wait(&empty[s], uint32_t((k / kStages - 1) & 1));
        // The consumers' reads of the stage (generic proxy) before the
        // copies' writes (async proxy), as the PTX memory model asks.
        fence_proxy_async();
      }
      const int64_t row0 = first_row(k);
      const int rows = int(min(int64_t(kRows), l.rows - row0));
      if (lane == 0) barrier_expect(&full[s], uint32_t(rows * (kQuantRow + kHeaderRow)));
      __syncwarp();
      uint8_t* dst = smem + s * kStageBytes;
      const int r = lane & 15;
      if (r < rows) {
        if (lane < 16)
          copy_bulk(dst + r * kQuantLd, a.w.data + l.quants_offset + (row0 + r) * kQuantRow,
                    kQuantRow, &full[s]);
        else
          copy_bulk(dst + kRows * kQuantLd + r * kHeaderLd,
                    a.w.data + l.scales_offset + (row0 + r) * kHeaderRow, kHeaderRow, &full[s]);
      }
    }
    return;
  }

  const int g = lane >> 2, t = lane & 3;
  const int c0 = warp * 8;  // the warp's super-block
  wait_then_release_next();
  // Token g's B fragments of the warp's 8 chunks, and the x sums (hi, lo)
  // of chunks c0 + t and c0 + t + 4: the mins' B operand.
  const uint4* xw = reinterpret_cast<const uint4*>(xp) + g * 4 + t;
  uint4 xb[8];
#pragma unroll
  for (int cc = 0; cc < 8; ++cc) xb[cc] = load_activation(xw + (c0 + cc) * kN8 * 4);
  const uint32_t* xs = xp + kN8 * kChunks * 16;  // (Q4_K only)
  const uint32_t bs0 = kQ4K ? load_activation(xs + (c0 + t) * kN8 + g) : 0u;
  const uint32_t bs1 = kQ4K ? load_activation(xs + (c0 + t + 4) * kN8 + g) : 0u;

  for (int k = 0; k < mine; ++k) {
    const int s = k % kStages;
    barrier_wait(&full[s], uint32_t((k / kStages) & 1));
    const uint8_t* q = smem + s * kStageBytes;
    const uint8_t* hdr = q + kRows * kQuantLd;
    // Rows g and g + 8: word t of each chunk of the super-block, and the
    // super-block's header.
    uint32_t wa[8], wb[8];
#pragma unroll
    for (int cc = 0; cc < 8; ++cc) {
      wa[cc] = *reinterpret_cast<const uint32_t*>(q + g * kQuantLd + (c0 + cc) * 16 + 4 * t);
      wb[cc] = *reinterpret_cast<const uint32_t*>(q + (g + 8) * kQuantLd + (c0 + cc) * 16 + 4 * t);
    }
    // (Q4_0: the 8 chunks' fp16 d.)
    const uint4 ha = *reinterpret_cast<const uint4*>(hdr + g * kHeaderLd + warp * 16);
    const uint4 hb = *reinterpret_cast<const uint4*>(hdr + (g + 8) * kHeaderLd + warp * 16);
    // The stage's bytes are in registers: its slot goes back to the producer.
    __syncwarp();
    if (lane == 0) barrier_arrive(&empty[s]);

    float part[4];  // e 0, 1: row g, tokens 2t, 2t + 1; 2, 3: row g + 8
    if constexpr (!kQ4K) {
      // Q4_0: d*(q - 8) in FP16 (decode_q4_0: the portable decoder's
      // values), the MMAs' sum as it is.
      const auto* da = reinterpret_cast<const uint8_t*>(&ha);
      const auto* db = reinterpret_cast<const uint8_t*>(&hb);
#pragma unroll
      for (int cc = 0; cc < 8; ++cc) {
        uint32_t lo[4], hi[4];
        decode_q4_0(wa[cc], da, cc, lo);
        decode_q4_0(wb[cc], db, cc, hi);
        mma_chunk(part, lo, hi, xb[cc], cc == 0);
      }
    } else {
      float sq[4];  // sum over the super-block of (sc*q) . x
#pragma unroll
      for (int cc = 0; cc < 8; ++cc) {
        const bool upper = cc >= 4;
        uint32_t lo[4], hi[4];
        decode_sc_q<true>(wa[cc], byte_as_half2(k256_six_bits(ha, upper, false), cc & 3), lo);
        decode_sc_q<true>(wb[cc], byte_as_half2(k256_six_bits(hb, upper, false), cc & 3), hi);
        mma_chunk(sq, lo, hi, xb[cc], cc == 0);
      }
      // The mins: A row r, k = 2c + {0, 1} holds (mn of chunk c, same), lane
      // t chunks t (k 2t, 2t+1) and t + 4 (k 2t+8, 2t+9); B the chunks' x sums.
      const uint32_t amin[4] = {half2_as_u32(byte_as_half2(k256_six_bits(ha, false, true), t)),
                                half2_as_u32(byte_as_half2(k256_six_bits(hb, false, true), t)),
                                half2_as_u32(byte_as_half2(k256_six_bits(ha, true, true), t)),
                                half2_as_u32(byte_as_half2(k256_six_bits(hb, true, true), t))};
      float sm[4];
      mma_16816_first(sm, amin, bs0, bs1);
      const float d[2] = {k256_d(ha, false), k256_d(hb, false)};
      // -M, times 64 for the x sums' scale (kNarrowXSumScale): exact.
      const float nm[2] = {-k256_d(ha, true) / kNarrowXSumScale,
                           -k256_d(hb, true) / kNarrowXSumScale};
#pragma unroll
      for (int e = 0; e < 4; ++e) part[e] = fmaf(d[e >> 1], sq[e], nm[e >> 1] * sm[e]);
    }
    // red[warp][row][token]; stages alternate between two of them, so one
    // barrier a stage is enough: stage k's are read before the barrier of
    // stage k + 1, which every writer of stage k + 2 passes first.
    float* rk = red + (k & 1) * kRedFloats;
    *reinterpret_cast<float2*>(rk + (warp * kRows + g) * kN8 + 2 * t) =
        make_float2(part[0], part[1]);
    *reinterpret_cast<float2*>(rk + (warp * kRows + g + 8) * kN8 + 2 * t) =
        make_float2(part[2], part[3]);
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    const int o = threadIdx.x;  // output (row o / 8, token o % 8)
    const int64_t row = first_row(k) + o / kN8;
    const int token = o % kN8;
    if (o < kRows * kN8 && token < a.n && row < l.rows) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) v += rk[w * kRows * kN8 + o];
      if (a.bias) v += a.bias[row];
      float* dst = a.y + int64_t(token) * a.ldy + row;
      if (a.accumulate) v += *dst;
      *dst = v;
    }
  }
}

// Blocks an SM (read once: one process serves one GPU).
template <PackedFormat F>
int blocks_per_sm() {
  // (0 where a block's shared memory does not fit: the 32-row blocks take
  // those matrices.)
  static const int per_sm = bulk::blocks_per_sm_with(kernel_narrow_bulk<F>, kThreads, kSmem);
  return per_sm;
}

std::atomic<NarrowBulk> g_bulk{NarrowBulk::Rule};

// VOLTAD_NARROW_BULK (comparisons): 0, none by the rule; q4k, Q4_K only.
enum class EnvBulk { All, Q4K, Off };
EnvBulk env_bulk() {
  static const EnvBulk e = [] {
    const char* v = std::getenv("VOLTAD_NARROW_BULK");
    if (v && v[0] == '0') return EnvBulk::Off;
    if (v && std::string(v) == "q4k") return EnvBulk::Q4K;
    return EnvBulk::All;
  }();
  return e;
}

// Whether the streaming blocks take `a` (the shape they are built for, on a
// device whose launches wait as sm_90 code does, and, by the rule, enough
// row groups for every block of the wave).
bool takes(const GemmArgs& a) {
  const NarrowBulk how = g_bulk.load(std::memory_order_relaxed);
  const PackedLayout& l = a.w.layout;
  const bool q4k = l.format == PackedFormat::Int4K256, q4_0 = l.format == PackedFormat::Int4Sym32;
  const EnvBulk env = how == NarrowBulk::Rule ? env_bulk() : EnvBulk::All;
  if (how == NarrowBulk::Never || env == EnvBulk::Off || (env == EnvBulk::Q4K && !q4k))
    return false;
  if (a.n < 1 || a.n > kN8 || !(q4k || q4_0) || l.cols != kCols || l.rows < 1 ||
      l.quant_row_bytes != kQuantRow || l.scale_row_bytes != kHeaderRow ||
      reinterpret_cast<uintptr_t>(a.w.data) % 16 != 0 || l.quants_offset % 16 != 0 ||
      l.scales_offset % 16 != 0 || !programmatic_launch_enabled())
    return false;
  const int per_sm =
      q4k ? blocks_per_sm<PackedFormat::Int4K256>() : blocks_per_sm<PackedFormat::Int4Sym32>();
  if (per_sm < 1) return false;
  const int64_t groups = (l.rows + kRows - 1) / kRows;
  return how == NarrowBulk::Always ||
         groups >= kMinGroupsPerBlock * int64_t(per_sm) * device_sm_count();
}

}  // namespace narrow_bulk

void gemm_narrow_sm80_set_bulk(NarrowBulk how) {
  narrow_bulk::g_bulk.store(how, std::memory_order_relaxed);
}

size_t gemm_narrow_sm80_bulk_smem_bytes() {
  return size_t(narrow_bulk::kSmem);
}

bool gemm_narrow_sm80_bulk_taken(const GemmArgs& a) {
  return narrow_bulk::takes(a);
}

bool launch_narrow_bulk_sm90(const GemmArgs& a, const uint32_t* xp, cudaStream_t stream) {
  namespace nb = narrow_bulk;
  if (!nb::takes(a)) return false;
  const int64_t groups = (a.w.layout.rows + nb::kRows - 1) / nb::kRows;
  constexpr PackedFormat kQ4K = PackedFormat::Int4K256, kQ4_0 = PackedFormat::Int4Sym32;
  const bool q4k = a.w.layout.format == kQ4K;
  const int per_sm = q4k ? nb::blocks_per_sm<kQ4K>() : nb::blocks_per_sm<kQ4_0>();
  const int64_t grid = std::min<int64_t>(groups, int64_t(per_sm) * device_sm_count());
  launch_kernel(q4k ? nb::kernel_narrow_bulk<kQ4K> : nb::kernel_narrow_bulk<kQ4_0>, unsigned(grid),
                nb::kThreads, size_t(nb::kSmem), stream, a, xp, groups);
  CUDA_CHECK(cudaGetLastError());
  return true;
}

}  // namespace voltad::kernels
