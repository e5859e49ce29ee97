// The batch-1 Q4_K matvec on sm_80+ with its weights in flight through
// shared memory: the streaming kernel's walk (matvec_stream.cu: one wave of
// blocks, each over row groups blockIdx.x, blockIdx.x + gridDim.x, ...), but
// each lane's loads go by cp.async into its warp's ring of D steps, so that
// D - 1 steps of weights are in flight while one is decoded, where the
// streaming kernel's two register sets hold one. On the H200 a batch-1 step
// needs ~4x the bytes in flight per SM of a V100 (docs/PERFORMANCE.md, run
// 21), and the streaming kernel's Q4_K reads at ~62% of the copy bandwidth
// with its warps waiting on their loads (Nsight Compute: long scoreboard).
// The V100 has no cp.async: it runs matvec_stream.cu.
//
// A step's slot holds, for each of the warp's R rows, the 32 lanes' 16
// bytes of nibbles (lane order) and the 4 super-block headers the lanes
// share (copied by the first lane of each 8). The dot products, their order
// and the stores are the streaming kernel's, so the results are the same
// bits. Chosen by launch_matvec under KernelSet::Auto where
// matvec_async_sm80_supports says so.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/kernel_set.h"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"
#include "kernels/matvec_chunks.cuh"
#include "kernels/sm80_common.cuh"

namespace voltad::kernels {

namespace {

using sm80::copy_async;
using sm80::copy_commit;
using sm80::copy_wait;

constexpr int kAsyncRows = 4;      // R: a warp's rows in a row group
constexpr int kRowSlots = 32 + 4;  // uint4 a row of a slot: nibbles, then headers

template <int R, int D>
constexpr size_t async_smem_bytes() {
  return size_t(kMatvecWarpsPerBlock) * D * R * kRowSlots * sizeof(uint4);
}

// S: warps that share a row group (matvec_slices); D: steps in a warp's ring.
template <int R, int S, int D>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32)
    kernel_matvec_async(MatvecArgs a, int64_t groups) {
  using C = Int4Chunk<PackedFormat::Int4K256>;
  extern __shared__ uint4 async_ring[];
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % S;
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  const int chunks = int(l.cols / 32);
  const int first = lane + 32 * slice, stride = 32 * S;
  const int steps = (chunks + stride - 1) / stride;  // per row group, the same for every warp
  const int64_t warp_row = (warp / S) * R;
  const int j = lane & 7;  // the Q4_K sub-block: chunk % 8, the same at every step
  uint4* ring = async_ring + size_t(warp) * D * R * kRowSlots;

  // The step whose copies go out next (lg, li), its slot ln % D, and the
  // loaded group's rows (computed once a group, as matvec_stream.cu).
  int64_t lg = blockIdx.x;
  int li = 0, ln = 0;
  C::Rows lrows = C::rows_at(a.w, lg * kBlockRows + warp_row);
  // One commit group a call, empty past the last step, so that the wait
  // counts hold.
  auto issue = [&] {
    if (lg < groups) {
      const int c = first + li * stride;
      if (c < chunks) {
        uint4* slot = ring + (ln % D) * R * kRowSlots;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int rr = r < lrows.last ? r : lrows.last;
          copy_async<16>(slot + r * kRowSlots + lane,
                         lrows.q + (rr * int(l.quant_row_bytes) + 16 * c), 16);
          if (j == 0)
            copy_async<16>(slot + r * kRowSlots + 32 + (lane >> 3),
                           lrows.s + (rr * int(l.scale_row_bytes) + 16 * (c >> 3)), 16);
        }
      }
      if (++li == steps) {
        li = 0;
        lg += gridDim.x;
        if (lg < groups) lrows = C::rows_at(a.w, lg * kBlockRows + warp_row);
      }
    }
    ++ln;
    copy_commit();
  };

  int64_t g = blockIdx.x;
  if (g >= groups) return;
  int i = 0, n = 0;
  float acc[R][1];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
#pragma unroll
  for (int k = 0; k < D - 1; ++k) issue();
  wait_for_previous_kernel();  // the first weights are on their way; x comes after
  for (;;) {
    issue();  // step n + D - 1
    const int c = first + i * stride;
    ChunkX x{};
    if (c < chunks) x = load_chunk_x(a.xq, c);
    copy_wait<D - 1>();  // step n's copies (this lane's)
    __syncwarp();        // and the headers other lanes copied
    if (c < chunks) {
      const uint4* slot = ring + (n % D) * R * kRowSlots;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        C::Raw raw;
        raw.w = slot[r * kRowSlots + lane];
        raw.s = slot[r * kRowSlots + 32 + (lane >> 3)];
        acc[r][0] += C::dot(raw, j, x);
      }
    }
    __syncwarp();  // the slot is refilled D - 1 issues on
    ++n;
    if (++i == steps) {
      if (g + gridDim.x >= groups) release_next_kernel();  // the block's last rows
      matvec_store_sliced<R, 1, S, true>(acc, g * kBlockRows + warp_row, l.rows, a.y, a.ldy, a.bias,
                                         a.accumulate);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][0] = 0.0f;
      i = 0;
      g += gridDim.x;
      if (g >= groups) break;
    }
  }
  copy_wait<0>();  // only empty groups are left; none outlives the block
}

template <int R, int S, int D>
void launch_async(const MatvecArgs& a, cudaStream_t stream) {
  constexpr size_t smem = async_smem_bytes<R, D>();
  static const int per_sm = [] {  // blocks an SM: the wave the grid is
    CUDA_CHECK(cudaFuncSetAttribute(kernel_matvec_async<R, S, D>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_matvec_async<R, S, D>,
                                                             kMatvecWarpsPerBlock * 32, smem));
    return std::max(blocks, 1);
  }();
  constexpr int64_t kBlockRows = int64_t(R) * (kMatvecWarpsPerBlock / S);
  const int64_t groups = (a.w.layout.rows + kBlockRows - 1) / kBlockRows;
  const int64_t grid = std::min<int64_t>(groups, int64_t(per_sm) * sm80::device().sms);
  launch_kernel(kernel_matvec_async<R, S, D>, unsigned(grid), kMatvecWarpsPerBlock * 32, smem,
                stream, a, groups);
  CUDA_CHECK(cudaGetLastError());
}

template <int D>
void launch_async_sliced(const MatvecArgs& a, cudaStream_t stream) {
  if (matvec_slices(a, kAsyncRows) == 2)
    launch_async<kAsyncRows, 2, D>(a, stream);
  else
    launch_async<kAsyncRows, 1, D>(a, stream);
}

}  // namespace

int matvec_async_steps() {
  static const int d = [] {
    const char* v = std::getenv("VOLTAD_MATVEC_ASYNC");
    const int n = v ? std::atoi(v) : 0;
    return n == 3 || n == 4 || n == 6 ? n : 0;
  }();
  return d;
}

bool matvec_async_sm80_supports(const MatvecArgs& a) {
  const sm80::Device& d = sm80::device();
  const PackedLayout& l = a.w.layout;
  return d.major >= 8 && d.code && a.batch == 1 && l.format == PackedFormat::Int4K256 &&
         a.xq.q != nullptr && l.quant_row_bytes * kAsyncRows < (int64_t(1) << 31) &&
         l.scale_row_bytes * kAsyncRows < (int64_t(1) << 31);
}

void launch_matvec_async_sm80(const MatvecArgs& a, int steps, cudaStream_t stream) {
  VOLTAD_KERNEL_REQUIRE(matvec_async_sm80_supports(a),
                        "matvec async sm80: arguments it takes (matvec_async_sm80_supports)");
  VOLTAD_KERNEL_REQUIRE(steps == 3 || steps == 4 || steps == 6,
                        "matvec async sm80: a ring of 3, 4 or 6 steps");
  switch (steps) {
    case 3:
      return launch_async_sliced<3>(a, stream);
    case 4:
      return launch_async_sliced<4>(a, stream);
    default:
      return launch_async_sliced<6>(a, stream);
  }
}

}  // namespace voltad::kernels
