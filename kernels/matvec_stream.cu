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
template <class C, int R, int S>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32)
    kernel_matvec_stream(MatvecArgs a, int64_t groups) {
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % S;
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  const int chunks = int(l.cols / 32);
  const int first = lane + 32 * slice, stride = 32 * S;
  const int steps = (chunks + stride - 1) / stride;  // per row group, the same for every warp
  const int64_t warp_row = (warp / S) * R;

  // The step being decoded (g, i) and the one being loaded (lg, li); the
  // loaded group's rows, computed once a group.
  int64_t g = blockIdx.x, lg = g;
  int i = 0, li = 0;
  typename C::Rows lrows;
  auto set_load_rows = [&] { lrows = C::rows_at(a.w, lg * kBlockRows + warp_row); };
  set_load_rows();
  auto advance = [&] {
    if (++li == steps) {
      li = 0;
      lg += gridDim.x;
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
  auto consume = [&](const typename C::Raw(&buf)[R]) {
    const int c = first + i * stride;
    if (c < chunks) {
      const ChunkX x = load_chunk_x(a.xq, c);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][0] += C::dot(buf[r], j, x);
    }
    if (++i == steps) {
      if (g + gridDim.x >= groups) release_next_kernel();  // the block's last rows
      matvec_store_sliced<R, 1, S, true>(acc, g * kBlockRows + warp_row, l.rows, a.y, a.ldy, a.bias,
                                         a.accumulate);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
      i = 0;
      g += gridDim.x;
    }
  };

  if (g >= groups) return;
  stream_load<C, R>(buf0, a.w, lrows, lg * kBlockRows + warp_row, first + li * stride,
                    first + li * stride < chunks);
  advance();
  wait_for_previous_kernel();  // the first weights are on their way
  // Each turn loads the step after the one it decodes. Issuing both sets'
  // loads before the wait was no better for Q4_K_M and 3% slower for Q4_0
  // streamed the same way (docs/PERFORMANCE.md, run 21).
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

namespace {

template <class C, int R, int S>
void launch_stream(const MatvecArgs& a, cudaStream_t stream) {
  static const int per_sm = [] {  // blocks an SM: the wave the grid is
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_matvec_stream<C, R, S>,
                                                             kMatvecWarpsPerBlock * 32, 0));
    return std::max(blocks, 1);
  }();
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  const int64_t groups = (a.w.layout.rows + kBlockRows - 1) / kBlockRows;
  const int64_t grid = std::min<int64_t>(groups, int64_t(per_sm) * device_sm_count());
  launch_kernel(kernel_matvec_stream<C, R, S>, unsigned(grid), kMatvecWarpsPerBlock * 32, 0, stream,
                a, groups);
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
