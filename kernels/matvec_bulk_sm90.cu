// Batch-1 decode matvecs fed by bulk copies (sm_90: cp.async.bulk and
// mbarriers; `auto` on the H200 and newer): Q4_K (Int4K256) and Q4_0
// (Int4Sym32) rows of 4,096 columns, one wave of blocks.
//
// A block is one producer warp and 8 consumer warps. The producer's first
// lane copies the block's row groups (8 rows: their nibbles and their
// headers are two contiguous ranges) into a ring of 2 stages in shared
// memory, each stage's arrival counted by an mbarrier (`full`), and
// refills a stage once each consumer warp has released it (`empty`). It
// starts at the block's launch, before the programmatic-launch wait:
// weights are no kernel's output. The consumers hold x in registers,
// loaded once after the wait: thread t owns chunk t % 128 (32 columns) of
// the stage's rows t / 128, t / 128 + 2, ..., so it reads its chunk of x
// once for the whole matrix where the streaming kernel (matvec_stream.cu)
// re-reads x through L1 at every step. A consumer copies its stage bytes
// to registers and releases the stage before it decodes them. A stage's
// rows are summed warp by warp, then across the 4 warps that share a row
// in a fixed order (the same bits every run).
//
// Measured on the H200 (kernels/dev/bench_stream.cu `bulk` and `chain`,
// docs/PERFORMANCE-RUNS-25-26.md run 25): Llama-3-8B's gate|up alone in 19.3 us
// against 22.8 for the streaming kernel (3.4 TB/s against 2.9); the copies
// without the decode in 16.0 us (4.1 TB/s, 96% of the copy bandwidth),
// where the streaming kernel's loads alone take 19.5. Matrices of about
// one row group a block (q|k|v, o) gain nothing; the same ring for Q6_K
// and for rows of 14,336 columns (two chunks a thread) was slower than the
// streaming kernel. Those stay with it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/bulk_sm90.cuh"
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"
#include "kernels/matvec_chunks.cuh"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels {

namespace bulk {

// Probe (bench_stream only; docs/PERFORMANCE-RUNS-25-26.md run 26): globaltimer
// stamps of block 0..255's producer and consumer warp 0 at each stage, for
// kernels/dev/bench_stream.cu `timeline`. [block][stage][0..5]: producer issue, producer's empty wait
// begin, consumer full wait begin, end, consumer after decode (before the
// bar.sync), after the bar.sync.
#ifdef VOLTAD_BULK_STAMPS
__device__ long long g_bulk_stamps[256][16][6];
__device__ long long g_bulk_start[256];
__device__ __forceinline__ void bulk_stamp(int k, int what) {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (blockIdx.x < 256 && k < 16) g_bulk_stamps[blockIdx.x][k][what] = t;
}
__device__ __forceinline__ void bulk_start() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (blockIdx.x < 256 && threadIdx.x == 0) g_bulk_start[blockIdx.x] = t;
}
#else
__device__ __forceinline__ void bulk_stamp(int, int) {}
__device__ __forceinline__ void bulk_start() {}
#endif

// A chunk's scales read from a stage's headers (row r's at headers + r *
// kHeaderRow): Q4_K's 16-byte header of the chunk's super-block, Q4_0's
// fp16 d.
template <class C>
struct StageScales;
template <>
struct StageScales<Int4Chunk<PackedFormat::Int4K256>> {
  static __device__ __forceinline__ uint4 read(const uint8_t* row, int c) {
    return *reinterpret_cast<const uint4*>(row + 16 * (c >> 3));
  }
};
template <>
struct StageScales<Int4Chunk<PackedFormat::Int4Sym32>> {
  static __device__ __forceinline__ unsigned short read(const uint8_t* row, int c) {
    return *reinterpret_cast<const unsigned short*>(row + 2 * c);
  }
};

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreads = kConsumers + 32;   // and the producer warp
constexpr int kCols = 4096;                 // 128 chunks: 4 warps a row
constexpr int kChunks = kCols / 32;
constexpr int kPhases = kConsumers / kChunks;  // rows a thread takes turns over
constexpr int kRowWarps = kConsumerWarps / kPhases;
constexpr int kGroup = 8;                   // rows a stage
#ifndef VOLTAD_BULK_STAGES  // probe: -DVOLTAD_BULK_STAGES=3 for a deeper ring
#define VOLTAD_BULK_STAGES 2
#endif
constexpr int kStages = VOLTAD_BULK_STAGES;
constexpr int kRowsEach = kGroup / kPhases;  // rows a thread, a stage
// Q4_K: 16 header bytes a super-block of 256; Q4_0: 2 bytes of d a chunk
// of 32. The same bytes a row either way.
constexpr int kQuantRow = kCols / 2, kHeaderRow = kCols / 256 * 16;
static_assert(kHeaderRow == kCols / 32 * 2, "Q4_K and Q4_0 rows of the same size");
constexpr int kStage = kGroup * (kQuantRow + kHeaderRow);
// The stages, 2 barriers a stage, and the partial sums of two stages.
constexpr int kSmem = kStages * kStage + 2 * kStages * 8 + 2 * kGroup * kRowWarps * 4;
// A block's ring pays once it holds several of the block's row groups: a
// matrix of fewer groups than this many a block (the small products:
// q|k|v, o) stays with the streaming kernel. 6, not 4: under programmatic
// launch the bulk kernel's blocks slow the o product before it and the
// SwiGLU after it by ~1.9 us a layer, more than the 1.1 it saves at
// Qwen3-8B's gate|up (24,576 rows, 5.8 groups a block on 132 SMs);
// Llama-3-8B's 28,672 (6.8) gain (docs/PERFORMANCE-RUNS-73.md).
constexpr int64_t kMinGroupsPerBlock = 6;

// The warp's sums of 4 values (a lane's acc[0..3]): lanes 0, 8, 16 and 24
// get the sums of acc[0], [1], [2] and [3]. The first exchange sends half
// of a lane's values across 16 lanes and keeps the other half (rows 0-1
// stay in lanes 0-15, rows 2-3 go to 16-31), the second does the same
// across 8, then three plain butterfly steps finish each row: 6 shuffles
// where 4 warp sums take 20.
__device__ __forceinline__ float sum4_rows(const float (&acc)[4], int lane) {
  const bool low16 = (lane & 16) == 0, low8 = (lane & 8) == 0;
  const float k0 = low16 ? acc[0] : acc[2], k1 = low16 ? acc[1] : acc[3];
  const float s0 = low16 ? acc[2] : acc[0], s1 = low16 ? acc[3] : acc[1];
  const float r0 = k0 + __shfl_xor_sync(kFullMask, s0, 16);
  const float r1 = k1 + __shfl_xor_sync(kFullMask, s1, 16);
  float v = (low8 ? r0 : r1) + __shfl_xor_sync(kFullMask, low8 ? r1 : r0, 8);
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

template <class C>
__global__ void __launch_bounds__(kThreads) kernel_matvec_bulk(MatvecArgs a, int64_t groups) {
  static_assert(kRowsEach == 4 && kChunks % 32 == 0, "sum4_rows takes 4 rows a thread");
  extern __shared__ __align__(128) uint8_t smem[];
  bulk_start();
  const PackedLayout& l = a.w.layout;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStage);
  uint64_t* empty = full + kStages;
  float* part = reinterpret_cast<float*>(empty + kStages);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  init_ring(full, empty, kStages, kConsumerWarps);
  const int mine = groups_of_block(groups);
  if (warp == kConsumerWarps) {
    if (lane != 0) return;
    for (int k = 0; k < mine; ++k) {
      const int s = k % kStages;
      bulk_stamp(k, 1);
      if (k >= kStages) {
        barrier_wait(&empty[s], uint32_t((k / kStages - 1) & 1));
        // The consumers' reads of the stage (generic proxy) before the
        // copy's writes (async proxy), as the PTX memory model asks.
        fence_proxy_async();
      }
      bulk_stamp(k, 0);
      const int64_t row0 = (blockIdx.x + int64_t(k) * gridDim.x) * kGroup;
      const int rows = int(std::min<int64_t>(kGroup, l.rows - row0));
      uint8_t* dst = smem + s * kStage;
      barrier_expect(&full[s], uint32_t(rows * (kQuantRow + kHeaderRow)));
      copy_bulk(dst, a.w.data + l.quants_offset + row0 * kQuantRow, uint32_t(rows * kQuantRow),
                &full[s]);
      copy_bulk(dst + kGroup * kQuantRow, a.w.data + l.scales_offset + row0 * kHeaderRow,
                uint32_t(rows * kHeaderRow), &full[s]);
    }
    return;
  }
  const int t = threadIdx.x, c = t % kChunks, phase = t / kChunks;
  const int j = c & 7;  // the chunk's Q4_K sub-block (Q4_0: unused)
  wait_for_previous_kernel();
  ChunkX x = load_chunk_x(a.xq, c);
  if (a.xq.sumsq) {  // x's norm factor: the record scales every term of a dot
    const float f = activation_norm_scale(a.xq, kCols);
    x.rec.x *= f;
    x.rec.y *= f;
    x.rec.z *= f;
  }
  for (int k = 0; k < mine; ++k) {
    const int s = k % kStages;
    if (threadIdx.x == 0) bulk_stamp(k, 2);
    barrier_wait(&full[s], uint32_t((k / kStages) & 1));
    if (threadIdx.x == 0) bulk_stamp(k, 3);
    const uint8_t* quants = smem + s * kStage;
    const uint8_t* headers = quants + kGroup * kQuantRow;
    typename C::Raw raw[kRowsEach];
#pragma unroll
    for (int r = 0; r < kRowsEach; ++r) {
      const int row = phase + kPhases * r;
      raw[r].w = *reinterpret_cast<const uint4*>(quants + row * kQuantRow + 16 * c);
      raw[r].s = StageScales<C>::read(headers + row * kHeaderRow, c);
    }
    // The stage's bytes are in registers: its slot goes back to the producer.
    __syncwarp();
    if (lane == 0) barrier_arrive(&empty[s]);
    float acc[kRowsEach];
#pragma unroll
    for (int r = 0; r < kRowsEach; ++r) acc[r] = C::dot(raw[r], j, x);
    float* pk = part + (k & 1) * kGroup * kRowWarps;
    const float v = sum4_rows(acc, lane);
    if ((lane & 7) == 0) pk[(phase + kPhases * (lane >> 3)) * kRowWarps + warp % kRowWarps] = v;
    // The consumers meet. The partial sums of two stages alternate, so one
    // barrier a stage is enough: stage k's are read before the barrier of
    // stage k + 1, which every writer of stage k + 2 passes first.
    if (threadIdx.x == 0) bulk_stamp(k, 4);
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    if (threadIdx.x == 0) bulk_stamp(k, 5);
    const int64_t row = (blockIdx.x + int64_t(k) * gridDim.x) * kGroup + t;
    if (t < kGroup && row < l.rows) {
      float out = pk[t * kRowWarps];
#pragma unroll
      for (int w = 1; w < kRowWarps; ++w) out += pk[t * kRowWarps + w];
      if (a.bias) out += a.bias[row];
      if (a.accumulate) out += a.y[row];
      a.y[row] = out;
    }
  }
  release_next_kernel();
}

// Blocks an SM of kernel_matvec_bulk<C> (read once: one process serves
// one GPU), and the rows from which it takes a matrix: kMinGroupsPerBlock
// groups for every block of its wave.
template <class C>
int blocks_per_sm() {
  static const int per_sm = blocks_per_sm_with(kernel_matvec_bulk<C>, kThreads, kSmem);
  return per_sm;
}
template <class C>
int64_t min_rows() {
  const int per_sm = blocks_per_sm<C>();
  return per_sm < 1 ? 0 : kGroup * kMinGroupsPerBlock * per_sm * device_sm_count();
}

// Launches kernel_matvec_bulk<C> if the matrix has the groups (go = false:
// only says whether it would).
template <class C>
bool launch(const MatvecArgs& a, cudaStream_t stream, bool go) {
  const int64_t least = min_rows<C>();
  if (least == 0 || a.w.layout.rows < least) return false;
  if (!go) return true;
  const int64_t groups = (a.w.layout.rows + kGroup - 1) / kGroup;
  const int64_t grid = int64_t(blocks_per_sm<C>()) * device_sm_count();
  launch_kernel(kernel_matvec_bulk<C>, unsigned(grid), kThreads, size_t(kSmem), stream, a, groups);
  CUDA_CHECK(cudaGetLastError());
  return true;
}

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_MATVEC_BULK");
    return !(v && v[0] == '0');
  }();
  return on && programmatic_launch_enabled();
}

// Whether a bulk kernel takes `a`, and with go, launches it.
bool take(const MatvecArgs& a, cudaStream_t stream, bool go) {
  const PackedLayout& l = a.w.layout;
  const bool q4k = l.format == PackedFormat::Int4K256, q4_0 = l.format == PackedFormat::Int4Sym32;
  if (a.batch != 1 || l.rows == 0 || a.xq.q == nullptr || !(q4k || q4_0) || l.cols != kCols ||
      l.quant_row_bytes != kQuantRow || l.scale_row_bytes != kHeaderRow ||
      reinterpret_cast<uintptr_t>(a.w.data) % 16 != 0 || l.quants_offset % 16 != 0 ||
      l.scales_offset % 16 != 0 || !enabled())
    return false;
  return q4k ? launch<Int4Chunk<PackedFormat::Int4K256>>(a, stream, go)
             : launch<Int4Chunk<PackedFormat::Int4Sym32>>(a, stream, go);
}

}  // namespace bulk

int64_t matvec_bulk_min_rows(PackedFormat format) {
  if (!bulk::enabled()) return 0;
  if (format == PackedFormat::Int4K256) return bulk::min_rows<Int4Chunk<PackedFormat::Int4K256>>();
  if (format == PackedFormat::Int4Sym32)
    return bulk::min_rows<Int4Chunk<PackedFormat::Int4Sym32>>();
  return 0;
}

bool matvec_bulk_applies(const MatvecArgs& a) {
  return bulk::take(a, nullptr, false);
}

bool launch_matvec_bulk(const MatvecArgs& a, cudaStream_t stream) {
  return bulk::take(a, stream, true);
}

}  // namespace voltad::kernels
