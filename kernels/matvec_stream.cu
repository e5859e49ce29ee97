// Batch-1 decode matvecs as a stream of loads (Int4K256 and Int6K256, from
// Q4_K and Q6_K; the other formats keep matvec_int4.cu's and matvec_int8.cu's):
// the grid is one wave of blocks, each walking the matrix's row groups
// blockIdx.x, blockIdx.x + gridDim.x, ...; a lane issues the loads of its
// next chunk (in this row group or the block's next one) before it decodes
// the current one, so its loads stay in flight through the decoding, the
// row groups' reductions and the block's move to its next rows, as a kernel
// that only reads does (kernels/dev/bench_persistent.cu: 89-91% of the copy
// bandwidth over a decode step's matrices, against ~0.6 for the matvecs
// that load, then decode). Gate|up's blocks (Q4_K, one warp a row group)
// load each set again row by row, as the decode frees its registers (run
// 70; matvec_stream_blocks' kRows).
//
// The work split within a row group is matvec_int4.cu's: a warp owns R
// consecutive rows, lane l takes chunks l, l+32, ... (or S = 2 warps share
// the rows, each over alternate groups of 32 chunks), and the sums meet in
// the same fixed order (matvec_store_sliced).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"
#include "kernels/matvec_chunks.cuh"
#include "kernels/quantize_warp.cuh"

namespace voltad::kernels {

// The loads of one step: chunk c of the R rows from row0, which C::rows_at
// gave `rows` for (rows past the end re-read the last row and are not
// stored). Lanes whose chunk is past the columns load nothing.
template <class C, int R>
__device__ __forceinline__ void stream_load(typename C::Raw (&buf)[R], const PackedMatrixView& m,
                                            const typename C::Rows& rows, int64_t row0, int c,
                                            bool valid) {
  if (!valid) return;
#pragma unroll
  for (int r = 0; r < R; ++r) buf[r] = C::load(m, rows, row0, r, c);
}

// C: the chunk format (matvec_chunks.cuh); groups: row groups of R rows a
// warp (R * kMatvecWarpsPerBlock / S rows a block). A lane's steps are
// (row group g, chunk first + i * step) for the block's groups g and
// i < steps; two register sets take turns (loads into one while the other
// is decoded), so no step copies registers.
// block and blocks: this block's place among the blocks that share the
// matrix (blockIdx.x and gridDim.x, or a part of a pair's grid). W: the
// block's warps; row_base: the row where group 0 starts (a unit of
// launch_matvec_norm_units).
// kRows: a set is loaded again row by row, each row's loads issued as soon
// as its dot product has read the row's words, where the other kernels
// load the whole set after the decode and the row group's store: each
// load goes out a decode earlier. Taken by the plain kernel for Q4_K at
// one warp a row group (gate|up): +2.0% / +1.0% batch 1 under `portable`
// (Llama-3-8B / Qwen3-8B Q4_K_M, an H100; docs/PERFORMANCE-RUNS-70.md).
// Everywhere (the pair and unit kernels, Q6_K, two warps a group, and
// loads past the block's last group) it lost 4.7-5.9%: o +8% and Q6_K
// down +16% alone. Q6_K's plain streams alone, with the guard (run 71,
// bench_stream): the down 17-19% slower (5% held to the same blocks an
// SM), the lm head even (it streams at the copy bandwidth already).
template <class C, int R, int S, int W = kMatvecWarpsPerBlock, bool kRows = false>
__device__ __forceinline__ void matvec_stream_blocks(const MatvecArgs& a, int64_t groups,
                                                     int64_t block, int64_t blocks,
                                                     int64_t row_base = 0) {
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % S;
  constexpr int64_t kBlockRows = int64_t(R) * (W / S);
  const int chunks = int(l.cols / 32);
  const int first = lane + 32 * slice, stride = 32 * S;
  const int steps = (chunks + stride - 1) / stride;  // per row group, the same for every warp
  const int64_t warp_row = row_base + (warp / S) * R;
  __shared__ float norm_scale[W];  // x's norm factor (QuantizedActivations::sumsq)

  // The step being decoded (g, i) and the one being loaded (lg, li); the
  // loaded group's rows, computed once a group.
  int64_t g = block, lg = g;
  int i = 0, li = 0;
  typename C::Rows lrows;
  auto set_load_rows = [&] { lrows = C::rows_at(a.w, lg * kBlockRows + warp_row); };
  set_load_rows();
  auto advance = [&] {
    if (++li == steps) {
      li = 0;
      lg += blocks;
      if (lg < groups) set_load_rows();
    }
  };
  typename C::Raw buf0[R], buf1[R];
  const int j = lane & 7;  // the Q4_K sub-block: chunk % 8, the same at every step
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
  // Decodes `buf` (step (g, i)); after a row group's last step the warps
  // store it (sliced, the block meets there: every warp has the same steps).
  auto consume = [&](typename C::Raw(&buf)[R]) {
    const int c = first + i * stride;
    if constexpr (kRows) {
      // Every lane decodes, its chunk clamped to the columns (a lane past
      // them adds nothing), and, while the block has rows left to load,
      // loads the step at the load cursor (lg, li), clamped the same way.
      const int lc = first + li * stride;
      const int lcc = lc < chunks ? lc : chunks - 1;
      const int64_t lrow0 = lg * kBlockRows + warp_row;
      const bool have = c < chunks;
      const ChunkX x = load_chunk_x(a.xq, have ? c : chunks - 1);
      if (lg >= groups) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float d = C::dot(buf[r], j, x);
          acc[r][0] = have ? acc[r][0] + d : acc[r][0];
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float d = C::dot(buf[r], j, x);
          acc[r][0] = have ? acc[r][0] + d : acc[r][0];
          buf[r] = C::load(a.w, lrows, lrow0, r, lcc);
        }
      }
      advance();
    } else if (c < chunks) {
      const ChunkX x = load_chunk_x(a.xq, c);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][0] += C::dot(buf[r], j, x);
    }
    if (++i == steps) {
      if (g + blocks >= groups) release_next_kernel();  // the block's last rows
      if (a.xq.sumsq) {
        const float f = norm_scale[warp];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][0] *= f;
      }
      matvec_store_sliced<R, 1, S, true, W>(acc, g * kBlockRows + warp_row, l.rows, a.y, a.ldy,
                                            a.bias, a.accumulate);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
      i = 0;
      g += blocks;
    }
  };

  if (g >= groups) return;
  stream_load<C, R>(buf0, a.w, lrows, lg * kBlockRows + warp_row, first + li * stride,
                    first + li * stride < chunks);
  advance();
  wait_for_previous_kernel();  // the first weights are on their way
  if (a.xq.sumsq) {            // x's norm factor, in the warp's slot (not a register of the loop)
    const float f = activation_norm_scale(a.xq, l.cols);
    if (lane == 0) norm_scale[warp] = f;
    __syncwarp();
  }
  // Each turn loads the step after the one it decodes. Issuing both sets'
  // loads before the wait was no better for Q4_K_M and 3% slower for Q4_0
  // streamed the same way (docs/PERFORMANCE-RUNS-21-22.md, run 21).
  if constexpr (kRows) {  // each decode loads its own set again (consume)
    if (lg < groups)
      stream_load<C, R>(buf1, a.w, lrows, lg * kBlockRows + warp_row, first + li * stride,
                        first + li * stride < chunks);
    advance();
    for (;;) {
      consume(buf0);
      if (g >= groups) break;
      consume(buf1);
      if (g >= groups) break;
    }
  } else {
    for (;;) {
      if (lg < groups)
        stream_load<C, R>(buf1, a.w, lrows, lg * kBlockRows + warp_row, first + li * stride,
                          first + li * stride < chunks);
      advance();
      consume(buf0);
      if (g >= groups) break;
      if (lg < groups)
        stream_load<C, R>(buf0, a.w, lrows, lg * kBlockRows + warp_row, first + li * stride,
                          first + li * stride < chunks);
      advance();
      consume(buf1);
      if (g >= groups) break;
    }
  }
}

template <class C, int R, int S, bool kRows = false>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32)
    kernel_matvec_stream(MatvecArgs a, int64_t groups) {
  matvec_stream_blocks<C, R, S, kMatvecWarpsPerBlock, kRows>(a, groups, blockIdx.x, gridDim.x);
}

// Two matrices that read the same x in one launch (launch_matvec_pair):
// blocks [0, blocks_a) stream a's row groups, the rest b's.
template <class CA, int RA, int SA, class CB, int RB, int SB>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32)
    kernel_matvec_stream_pair(MatvecArgs a, int64_t groups_a, int blocks_a, MatvecArgs b,
                              int64_t groups_b) {
  if (int(blockIdx.x) < blocks_a)
    matvec_stream_blocks<CA, RA, SA>(a, groups_a, blockIdx.x, blocks_a);
  else
    matvec_stream_blocks<CB, RB, SB>(b, groups_b, blockIdx.x - blocks_a, gridDim.x - blocks_a);
}

// launch_matvec_norm_units: W warps a block, whose row groups of R * W / S
// rows tile units of 32 rows; block b takes units b, b + gridDim.x, ....
// After a unit's last row group is stored (and the block has met), warp 0
// reads the unit's 32 rows of h back (this block wrote them), quantizes
// g * h as the unit's block of the readers' x and writes the unit's sum of
// h^2. The successor is released at each unit's last group, as a block of
// the plain kernel is at its last; it reads these only after its wait,
// which returns when this grid, epilogues included, has completed.
template <class C, int R, int S, int W>
__global__ void __launch_bounds__(W * 32)
    kernel_matvec_norm_units(MatvecArgs a, const float* __restrict__ weight,
                             QuantizedActivations norm, int64_t units) {
  constexpr int64_t kGroupRows = int64_t(R) * (W / S);
  static_assert(kActivationBlock % kGroupRows == 0, "row groups tile a unit");
  constexpr int64_t kUnitGroups = kActivationBlock / kGroupRows;
  const int lane = threadIdx.x & 31;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    matvec_stream_blocks<C, R, S, W>(a, kUnitGroups, 0, 1, u * kActivationBlock);
    __syncthreads();  // every row of the unit stored (S = 1 stores without a barrier)
    if (threadIdx.x < 32) {
      const int64_t row = u * kActivationBlock + lane;
      const float h = a.y[row];
      const float ss = warp_sum(h * h);
      quantize_block_warp(__fmul_rn(h, weight[row]), norm, 0, a.w.layout.rows, u);
      if (lane == 0) norm.sumsq[u] = ss;
    }
  }
}

namespace {

// The row-by-row loads (kRows, matvec_stream_blocks) where they gained
// (launch_stream). VOLTAD_STREAM_RELOAD=step loads whole sets there too,
// for comparisons.
bool stream_row_loads() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_STREAM_RELOAD");
    return !(v && std::string_view(v) == "step");
  }();
  return on;
}

// The blocks of one wave of the kernel: the grid it runs.
template <class C, int R, int S, bool kRows>
int64_t stream_wave() {
  static const int per_sm = [] {
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, kernel_matvec_stream<C, R, S, kRows>, kMatvecWarpsPerBlock * 32, 0));
    return std::max(blocks, 1);
  }();
  return int64_t(per_sm) * device_sm_count();
}

template <class C, int R, int S>
int64_t stream_groups(const MatvecArgs& a) {
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  return (a.w.layout.rows + kBlockRows - 1) / kBlockRows;
}

template <class C, int R, int S, bool kRows>
void launch_stream_as(const MatvecArgs& a, cudaStream_t stream) {
  const int64_t groups = stream_groups<C, R, S>(a);
  const int64_t grid = std::min<int64_t>(groups, stream_wave<C, R, S, kRows>());
  launch_kernel(kernel_matvec_stream<C, R, S, kRows>, unsigned(grid), kMatvecWarpsPerBlock * 32, 0,
                stream, a, groups);
  CUDA_CHECK(cudaGetLastError());
}

// The row-by-row loads where they were measured: Q4_K at one warp a row
// group, where every block walks two row groups or more (gate|up on the
// H100 and H200: 1,536-1,792 groups for 528 blocks; on a V100's 320, also
// gate|up alone: q|k|v's 384 groups of 16 rows stay with whole sets).
template <class C, int R, int S>
void launch_stream(const MatvecArgs& a, cudaStream_t stream) {
  if constexpr (std::is_same_v<C, Int4Chunk<PackedFormat::Int4K256>> && S == 1) {
    if (stream_row_loads() && stream_groups<C, R, S>(a) >= 2 * stream_wave<C, R, S, true>())
      return launch_stream_as<C, R, S, true>(a, stream);
  }
  launch_stream_as<C, R, S, false>(a, stream);
}

template <class C, int R>
void launch_stream_sliced(const MatvecArgs& a, cudaStream_t stream) {
  if (matvec_slices(a, R) == 2)
    launch_stream<C, R, 2>(a, stream);
  else
    launch_stream<C, R, 1>(a, stream);
}

// The pair's grid: one wave of the pair kernel, split by
// matvec_pair_split (the busiest block's bytes).
template <class CA, int RA, int SA, class CB, int RB, int SB>
void launch_pair(const MatvecArgs& a, const MatvecArgs& b, cudaStream_t stream) {
  auto kernel = kernel_matvec_stream_pair<CA, RA, SA, CB, RB, SB>;
  static const int per_sm = [&] {
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel,
                                                             kMatvecWarpsPerBlock * 32, 0));
    return std::max(blocks, 1);
  }();
  constexpr int64_t kRowsA = int64_t(RA) * (kMatvecWarpsPerBlock / SA);
  constexpr int64_t kRowsB = int64_t(RB) * (kMatvecWarpsPerBlock / SB);
  const int64_t groups_a = (a.w.layout.rows + kRowsA - 1) / kRowsA;
  const int64_t groups_b = (b.w.layout.rows + kRowsB - 1) / kRowsB;
  const int64_t wave = std::max<int64_t>(2, int64_t(per_sm) * device_sm_count());
  const MatvecPairSplit split = matvec_pair_split(
      groups_a, kRowsA * int64_t(packed_row_bytes(a.w.layout)), groups_b,
      kRowsB * int64_t(packed_row_bytes(b.w.layout)), wave);
  launch_kernel(kernel, unsigned(split.blocks_a + split.blocks_b), kMatvecWarpsPerBlock * 32, 0,
                stream, a, groups_a, int(split.blocks_a), b, groups_b);
  CUDA_CHECK(cudaGetLastError());
}

// Q4_K (rows of 4 a warp) then Q6_K (2), each with the slices it would take alone.
void launch_pair_q4k_q6k(const MatvecArgs& a, const MatvecArgs& b, cudaStream_t stream) {
  using A = Int4Chunk<PackedFormat::Int4K256>;
  using B = Int6Chunk;
  const bool sa = matvec_slices(a, 4) == 2, sb = matvec_slices(b, 2) == 2;
  if (sa && sb)
    launch_pair<A, 4, 2, B, 2, 2>(a, b, stream);
  else if (sa)
    launch_pair<A, 4, 2, B, 2, 1>(a, b, stream);
  else if (sb)
    launch_pair<A, 4, 1, B, 2, 2>(a, b, stream);
  else
    launch_pair<A, 4, 1, B, 2, 1>(a, b, stream);
}

}  // namespace

MatvecPairSplit matvec_pair_split(int64_t groups_a, int64_t group_bytes_a, int64_t groups_b,
                                  int64_t group_bytes_b, int64_t wave) {
  const int64_t most_b = std::max<int64_t>(1, std::min(groups_b, wave - 1));
  // The blocks b would take in proportion to the matrices' bytes.
  const double even =
      double(wave) * double(groups_b) * double(group_bytes_b) /
      (double(groups_a) * double(group_bytes_a) + double(groups_b) * double(group_bytes_b));
  MatvecPairSplit best{};
  int64_t best_bytes = 0;
  double best_off = 0;
  for (int64_t nb = 1; nb <= most_b; ++nb) {
    const int64_t na = std::max<int64_t>(1, std::min(groups_a, wave - nb));
    const int64_t busiest = std::max((groups_a + na - 1) / na * group_bytes_a,
                                     (groups_b + nb - 1) / nb * group_bytes_b);
    const double off = std::fabs(double(nb) - even);
    if (nb == 1 || busiest < best_bytes || (busiest == best_bytes && off < best_off)) {
      best = {na, nb};
      best_bytes = busiest;
      best_off = off;
    }
  }
  return best;
}

bool matvec_pair_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_MATVEC_PAIR");
    return !(v && v[0] == '0');
  }();
  return on;
}

bool launch_matvec_pair(const MatvecArgs& a, const MatvecArgs& b, cudaStream_t stream) {
  const PackedLayout &la = a.w.layout, &lb = b.w.layout;
  if (!matvec_pair_enabled() || !matvec_stream_enabled() || a.batch != 1 || b.batch != 1 ||
      la.rows == 0 || lb.rows == 0 || a.xq.q == nullptr || a.xq.q != b.xq.q ||
      a.xq.scales != b.xq.scales || la.cols != lb.cols)
    return false;
  if (la.format != PackedFormat::Int4K256 || lb.format != PackedFormat::Int6K256) return false;
  if (matvec_bulk_applies(a) || matvec_bulk_applies(b)) return false;  // their own kernels
  check_matvec_args(a);
  check_matvec_args(b);
  launch_pair_q4k_q6k(a, b, stream);
  return true;
}

namespace {

// Blocks of 16 warps: 32 rows a group for Q4_K and Q4_0 (4 rows a warp, 2
// warps a row group), two groups of 16 for Q6_K (2 rows a warp). An SM
// then holds as many of the unit kernel's warps as of the plain Q4_K one's
// (4 blocks of 4 at 128 registers), walking as many rows. The plain Q6_K
// kernel (62-70 registers for sm_90, 72 for sm_70: 7-8 blocks of 4 warps an
// SM; scripts/sm70-budgets.txt) holds more; its units (78
// registers, one block of 16 an SM; 32 warps spill) made down 6 us a layer
// slower on the H200, so Q6_K takes them only on request
// (VOLTAD_NORM_UNITS_Q6K=1; docs/PERFORMANCE-RUNS-38-39.md run 38).
constexpr int kUnitWarps = 16;

template <class C, int R, int S, int W = kUnitWarps>
void launch_units(const MatvecArgs& a, const float* weight, QuantizedActivations norm,
                  cudaStream_t stream) {
  auto kernel = kernel_matvec_norm_units<C, R, S, W>;
  static const int per_sm = [&] {
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, W * 32, 0));
    return std::max(blocks, 1);
  }();
  const int64_t units = a.w.layout.rows / kActivationBlock;
  const int64_t grid = std::min<int64_t>(units, int64_t(per_sm) * device_sm_count());
  launch_kernel(kernel, unsigned(grid), W * 32, 0, stream, a, weight, norm, units);
  CUDA_CHECK(cudaGetLastError());
}

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  return v && v[0] ? v[0] != '0' : fallback;
}

}  // namespace

bool matvec_norm_units_apply(const MatvecArgs& a) {
  static const bool q6k = env_flag("VOLTAD_NORM_UNITS_Q6K", false);
  const PackedLayout& l = a.w.layout;
  const bool format = l.format == PackedFormat::Int4K256 || l.format == PackedFormat::Int4Sym32 ||
                      (q6k && l.format == PackedFormat::Int6K256);
  return matvec_stream_enabled() && format && a.batch == 1 && a.accumulate && a.xq.q != nullptr &&
         a.xq.sumsq == nullptr && l.rows > 0 && l.rows % kActivationBlock == 0;
}

bool launch_matvec_norm_units(const MatvecArgs& a, const float* weight, QuantizedActivations norm,
                              cudaStream_t stream) {
  if (!matvec_norm_units_apply(a)) return false;
  check_matvec_args(a);
  if (weight == nullptr || norm.q == nullptr || norm.scales == nullptr || norm.sumsq == nullptr ||
      norm.q == a.xq.q || norm.scales == a.xq.scales) {
    std::fprintf(stderr,
                 "launch_matvec_norm_units: needs the norm's weights and an output (q, scales, "
                 "sumsq) apart from the product's own x (%lld rows)\n",
                 (long long)a.w.layout.rows);
    std::abort();
  }
  switch (a.w.layout.format) {
    case PackedFormat::Int4K256:
      launch_units<Int4Chunk<PackedFormat::Int4K256>, 4, 2>(a, weight, norm, stream);
      break;
    case PackedFormat::Int4Sym32:
      launch_units<Int4Chunk<PackedFormat::Int4Sym32>, 4, 2>(a, weight, norm, stream);
      break;
    default:  // Int6K256 (matvec_norm_units_apply)
      launch_units<Int6Chunk, 2, 2>(a, weight, norm, stream);
      break;
  }
  return true;
}

bool matvec_stream_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("VOLTAD_MATVEC_STREAM");
    return !(v && v[0] == '0');
  }();
  return on;
}

void launch_matvec_stream(const MatvecArgs& a, cudaStream_t stream) {
  if (a.batch != 1 || a.w.layout.rows == 0 || a.xq.q == nullptr) {
    std::fprintf(stderr, "launch_matvec_stream: needs batch 1, rows and quantized x (batch %d)\n",
                 a.batch);
    std::abort();
  }
  switch (a.w.layout.format) {
    case PackedFormat::Int4K256:
      launch_stream_sliced<Int4Chunk<PackedFormat::Int4K256>, 4>(a, stream);
      break;
    case PackedFormat::Int6K256:
      launch_stream_sliced<Int6Chunk, 2>(a, stream);
      break;
    default:
      std::fprintf(stderr, "launch_matvec_stream: format %s has no streaming matvec\n",
                   packed_format_name(a.w.layout.format));
      std::abort();
  }
}

}  // namespace voltad::kernels
