// Batch-1 decode matvecs as a stream of loads (Int4K256 and Int6K256, from
// Q4_K and Q6_K; the other formats keep matvec_int4.cu's and matvec_int8.cu's):
// the grid is one wave of blocks, each walking the matrix's row groups
// blockIdx.x, blockIdx.x + gridDim.x, ...; a lane issues the loads of its
// next chunk (in this row group or the block's next one) before it decodes
// the current one, so its loads stay in flight through the decoding, the
// row groups' reductions and the block's move to its next rows, as a kernel
// that only reads does (kernels/dev/bench_persistent.cu: 89-91% of the copy
// bandwidth over a decode step's matrices, against ~0.6 for the matvecs
// that load, then decode).
//
// The work split within a row group is matvec_int4.cu's: a warp owns R
// consecutive rows, lane l takes chunks l, l+32, ... (or S = 2 warps share
// the rows, each over alternate groups of 32 chunks), and the sums meet in
// the same fixed order (matvec_store_sliced).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"
#include "kernels/matvec_chunks.cuh"

namespace voltad::kernels {

// The loads of one step: chunk c of the R rows from row0 (clamped: rows past
// the end re-read the last row and are not stored). Lanes whose chunk is
// past the columns load nothing.
template <class C, int R>
__device__ __forceinline__ void stream_load(typename C::Raw (&buf)[R], const MatvecArgs& a,
                                            int64_t row0, int c, bool valid) {
  if (!valid) return;
  const int64_t last = a.w.layout.rows - 1;
#pragma unroll
  for (int r = 0; r < R; ++r) buf[r] = C::load(a.w, row0 + r < last ? row0 + r : last, c);
}

// Staged headers (C::kStaged, Int4KStagedChunk): the block's shared memory
// holds the headers of two row groups, the one being decoded and the next.
// Header k of a group (row k / headers_per_row of the block's rows) is
// loaded by thread k % 128 at step k / 128 of the group before and stored
// at its next step; every step count allows it (headers a thread a group
// <= steps at R <= 8). The block's meeting at each group's end orders the
// stores before the reads.
struct HeaderStage {
  uint4* smem;      // 2 x items
  int items;        // headers of a row group
  int per_row;      // headers of a row
  int half = 0;     // the half holding the decoded group's headers
  uint4 pending{};  // loaded at the last step, stored at the next
  int pending_item = -1;
};

// C: the chunk format (matvec_chunks.cuh); groups: row groups of R rows a
// warp (R * kMatvecWarpsPerBlock / S rows a block). A lane's steps are
// (row group g, chunk first + i * step) for the block's groups g and
// i < steps; two register sets take turns (loads into one while the other
// is decoded), so no step copies registers.
template <class C, int R, int S>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32)
    kernel_matvec_stream(MatvecArgs a, int64_t groups) {
  extern __shared__ uint4 staged_headers[];
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % S;
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  const int chunks = int(l.cols / 32);
  const int first = lane + 32 * slice, stride = 32 * S;
  const int steps = (chunks + stride - 1) / stride;  // per row group, the same for every warp
  const int64_t warp_row = (warp / S) * R;
  const int64_t last_row = l.rows - 1;

  // The step being decoded (g, i) and the one being loaded (lg, li).
  int64_t g = blockIdx.x, lg = g;
  int i = 0, li = 0;
  auto advance = [&] {
    if (++li == steps) {
      li = 0;
      lg += gridDim.x;
    }
  };
  typename C::Raw buf0[R], buf1[R];
  const int j = lane & 7;  // the Q4_K sub-block: chunk % 8, the same at every step
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;

  HeaderStage hs;
  auto header_row = [&](int64_t group, int item) {
    const int64_t row = group * kBlockRows + item / hs.per_row;
    return row < last_row ? row : last_row;
  };
  if constexpr (C::kStaged) {
    hs.smem = staged_headers;
    hs.per_row = C::headers_per_row(l);
    hs.items = int(kBlockRows) * hs.per_row;
  }

  // Decodes `buf` (step (g, i)); after a row group's last step the warps
  // store it (sliced, and with staged headers, the block meets there: every
  // warp has the same steps).
  auto consume = [&](const typename C::Raw(&buf)[R]) {
    if constexpr (C::kStaged) {  // the next group's headers, one a thread a step
      const int64_t next = g + gridDim.x;
      if (hs.pending_item >= 0) hs.smem[(hs.half ^ 1) * hs.items + hs.pending_item] = hs.pending;
      hs.pending_item = -1;
      const int item = threadIdx.x + kMatvecWarpsPerBlock * 32 * i;
      if (next < groups && item < hs.items) {
        hs.pending = C::load_header(a.w, header_row(next, item), item % hs.per_row);
        hs.pending_item = item;
      }
    }
    const int c = first + i * stride;
    if (c < chunks) {
      const ChunkX x = load_chunk_x(a.xq, c);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if constexpr (C::kStaged)
          acc[r][0] += C::dot(
              buf[r], hs.smem[hs.half * hs.items + (warp_row + r) * hs.per_row + (c >> 3)], j, x);
        else
          acc[r][0] += C::dot(buf[r], j, x);
      }
    }
    if (++i == steps) {
      if constexpr (C::kStaged) {
        const int64_t next = g + gridDim.x;
        if (hs.pending_item >= 0) hs.smem[(hs.half ^ 1) * hs.items + hs.pending_item] = hs.pending;
        hs.pending_item = -1;
        // Headers past the steps (none at R <= 8): loaded now.
        for (int item = threadIdx.x + kMatvecWarpsPerBlock * 32 * steps;
             next < groups && item < hs.items; item += kMatvecWarpsPerBlock * 32)
          hs.smem[(hs.half ^ 1) * hs.items + item] =
              C::load_header(a.w, header_row(next, item), item % hs.per_row);
      }
      if (g + gridDim.x >= groups) release_next_kernel();  // the block's last rows
      // Its __syncthreads orders this group's header reads and the next
      // one's stores before what follows.
      matvec_store_sliced<R, 1, S, true>(acc, g * kBlockRows + warp_row, l.rows, a.y, a.ldy, a.bias,
                                         a.accumulate);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
      i = 0;
      g += gridDim.x;
      if constexpr (C::kStaged) hs.half ^= 1;
    }
  };

  if (g >= groups) return;
  if constexpr (C::kStaged) {  // the first group's headers, four loads at a time
    for (int item0 = threadIdx.x; item0 < hs.items; item0 += 4 * kMatvecWarpsPerBlock * 32) {
      uint4 h[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int item = item0 + u * kMatvecWarpsPerBlock * 32;
        if (item < hs.items) h[u] = C::load_header(a.w, header_row(g, item), item % hs.per_row);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int item = item0 + u * kMatvecWarpsPerBlock * 32;
        if (item < hs.items) hs.smem[item] = h[u];
      }
    }
  }
  stream_load<C, R>(buf0, a, lg * kBlockRows + warp_row, first + li * stride,
                    first + li * stride < chunks);
  advance();
  wait_for_previous_kernel();                 // the first weights are on their way
  if constexpr (C::kStaged) __syncthreads();  // the first group's headers
  // Each turn loads the step after the one it decodes. Issuing both sets'
  // loads before the wait was no better for Q4_K_M and 3% slower for Q4_0
  // streamed the same way (docs/PERFORMANCE.md, run 21).
  for (;;) {
    if (lg < groups)
      stream_load<C, R>(buf1, a, lg * kBlockRows + warp_row, first + li * stride,
                        first + li * stride < chunks);
    advance();
    consume(buf0);
    if (g >= groups) break;
    if (lg < groups)
      stream_load<C, R>(buf0, a, lg * kBlockRows + warp_row, first + li * stride,
                        first + li * stride < chunks);
    advance();
    consume(buf1);
    if (g >= groups) break;
  }
}

namespace {

template <class C, int R, int S>
void launch_stream(const MatvecArgs& a, cudaStream_t stream) {
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  size_t smem = 0;
  if constexpr (C::kStaged)
    smem = 2 * size_t(kBlockRows) * size_t(C::headers_per_row(a.w.layout)) * sizeof(uint4);
  static const int per_sm_registers = [] {  // blocks an SM: the wave the grid is
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_matvec_stream<C, R, S>,
                                                             kMatvecWarpsPerBlock * 32, 0));
    return std::max(blocks, 1);
  }();
  int per_sm = per_sm_registers;
  if (smem > 0) {  // shared memory per block depends on the columns
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_matvec_stream<C, R, S>,
                                                             kMatvecWarpsPerBlock * 32, smem));
    per_sm = std::max(per_sm, 1);
  }
  const int64_t groups = (a.w.layout.rows + kBlockRows - 1) / kBlockRows;
  const int64_t grid = std::min<int64_t>(groups, int64_t(per_sm) * device_sm_count());
  launch_kernel(kernel_matvec_stream<C, R, S>, unsigned(grid), kMatvecWarpsPerBlock * 32, smem,
                stream, a, groups);
  CUDA_CHECK(cudaGetLastError());
}

template <class C, int R>
void launch_stream_sliced(const MatvecArgs& a, cudaStream_t stream) {
  if (matvec_slices(a, R) == 2)
    launch_stream<C, R, 2>(a, stream);
  else
    launch_stream<C, R, 1>(a, stream);
}

}  // namespace

// VOLTAD_MATVEC_STREAM=2 (4 rows a warp) or 3 (8 rows): Q4_K's headers
// staged in shared memory (comparisons); 0: no staging.
static int matvec_stream_staged() {
  static const int rows = [] {
    const char* v = std::getenv("VOLTAD_MATVEC_STREAM");
    return v && v[0] == '2' ? 4 : v && v[0] == '3' ? 8 : 0;
  }();
  return rows;
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
      // Headers in shared memory (2 row groups of at most 16 rows) while
      // they fit the 48 KB a block gets without opting in: up to 24,576
      // columns.
      if (matvec_stream_staged() == 8 &&
          2 * 32 * Int4KStagedChunk::headers_per_row(a.w.layout) * sizeof(uint4) <= 48 * 1024)
        launch_stream_sliced<Int4KStagedChunk, 8>(a, stream);
      else if (matvec_stream_staged() == 4 &&
               2 * 16 * Int4KStagedChunk::headers_per_row(a.w.layout) * sizeof(uint4) <= 48 * 1024)
        launch_stream_sliced<Int4KStagedChunk, 4>(a, stream);
      else
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
