// Fused dequantize-matvec for the Int4 formats (Int4Sym32 from Q4_0,
// Int4Affine32 from Q4_1, Int4K256 from Q4_K); layouts in
// kernels/device_common.cuh and docs/FORMAT.md.
//
// Work split: a warp (or a pair of warps, see below) owns R consecutive
// rows. Lane l reads chunks l, l+32, l+64, ... of each of its rows (a chunk
// = 32 values = 16 bytes), so every load instruction of the warp covers 512
// contiguous bytes of a row. Per step a lane first issues U x R weight
// loads (and their scale loads), then decodes: nibbles -> bytes once per
// chunk, then for each of the B activation rows 8 dp4a against each of the
// two int8 levels of x (one block of 32 = one chunk, 64 bytes of x) and
// three FMAs. x (a few KB) stays in L1; R > 1 lets one x load serve several
// rows. Matrices with too few rows to keep enough loads in flight (q, k, v,
// o and down at batch 1) give each row group S = 2 warps, which take
// alternate groups of 32 chunks and add their sums in shared memory
// (matvec_store_sliced).
//
// Under programmatic dependent launch (kernels/launch.cuh) a lane issues its
// first weight loads, and asks L2 for the next ones' lines, before it waits
// for the kernel that wrote x: those bytes stream while the norm, SwiGLU or
// attention before it finishes. After the main loop the successor may be
// scheduled. Batch 1 +5% (docs/PERFORMANCE-RUNS-13-17.md, run 15).
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"
#include "kernels/matvec_chunks.cuh"

namespace voltad::kernels {

// R rows per warp, B activation rows, U chunks per lane in flight per row,
// S warps per row group (slices of the columns: groups of 32 chunks
// slice, slice + S, ...; a lane's chunks stay lane + 32i, so its Q4_K
// sub-block lane & 7 too).
template <PackedFormat F, int R, int B, int U, int S>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32) kernel_matvec_int4(MatvecArgs a) {
  using Scales = Int4Scales<F>;
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % S;
  const int64_t row0 = (int64_t(blockIdx.x) * (kMatvecWarpsPerBlock / S) + warp / S) * R;
  // Sliced warps all reach the block's reduction (rows past the end re-read
  // the last row and are not stored).
  if (S == 1 && row0 >= l.rows) return;
  const int chunks = int(l.cols / 32);
  const int64_t x_ld = 2 * l.cols;  // q1 and q2: 64 bytes per block
  const int64_t x_scale_ld = l.cols / kActivationBlock * kActivationRecordFloats;

  const uint8_t* qrow[R];
  const uint8_t* srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r < l.rows ? row0 + r : l.rows - 1;  // tail: re-read, not stored
    qrow[r] = a.w.data + l.quants_offset + row * l.quant_row_bytes;
    srow[r] = a.w.data + l.scales_offset + row * l.scale_row_bytes;
  }

  float acc[R][B];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;

  const int first = lane + 32 * slice;
  for (int c0 = first; c0 < chunks; c0 += 32 * U * S) {
    uint4 w[U][R];
    typename Scales::Raw s[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * S * u;
      if (c < chunks) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          w[u][r] = load_weights_16(qrow[r] + 16 * c);
          s[u][r] = Scales::load(srow[r], c);
        }
      }
    }
    if (c0 == first) {  // the first loads are out: L2 gets the next ones' lines, then the wait
      const int next = c0 + 32 * U * S;
      if ((lane & 7) == 0 && next < chunks)
#pragma unroll
        for (int r = 0; r < R; ++r) prefetch_l2_line(qrow[r] + 16 * next);
      wait_for_previous_kernel();
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * S * u;
      if (c >= chunks) break;
      uint32_t lo[R][4], hi[R][4];
      float ca[R], cb[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        Scales::decode(s[u][r], lane & 7, ca[r], cb[r]);
        int4_unpack(w[u][r].x, lo[r][0], hi[r][0]);
        int4_unpack(w[u][r].y, lo[r][1], hi[r][1]);
        int4_unpack(w[u][r].z, lo[r][2], hi[r][2]);
        int4_unpack(w[u][r].w, lo[r][3], hi[r][3]);
      }
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int8_t* xq = a.xq.q + b * x_ld + 64 * c;
        const uint4 x0 = load_activation(reinterpret_cast<const uint4*>(xq));
        const uint4 x1 = load_activation(reinterpret_cast<const uint4*>(xq + 16));
        // {d1, d2, sum x, 0} of the chunk's 32 activations.
        const float4 xs =
            load_activation(reinterpret_cast<const float4*>(a.xq.scales + b * x_scale_ld) + c);
#if VOLTAD_MATVEC_ONE_LEVEL
        const uint4 y0 = make_uint4(0, 0, 0, 0), y1 = y0;
#else
        const uint4 y0 = load_activation(reinterpret_cast<const uint4*>(xq + 32));
        const uint4 y1 = load_activation(reinterpret_cast<const uint4*>(xq + 48));
#endif
#pragma unroll
        for (int r = 0; r < R; ++r) {
          int d = __dp4a(int(lo[r][0]), int(x0.x), 0);
          d = __dp4a(int(lo[r][1]), int(x0.y), d);
          d = __dp4a(int(lo[r][2]), int(x0.z), d);
          d = __dp4a(int(lo[r][3]), int(x0.w), d);
          d = __dp4a(int(hi[r][0]), int(x1.x), d);
          d = __dp4a(int(hi[r][1]), int(x1.y), d);
          d = __dp4a(int(hi[r][2]), int(x1.z), d);
          d = __dp4a(int(hi[r][3]), int(x1.w), d);
          float dot = xs.x * small_int_to_float(d);
          if (!VOLTAD_MATVEC_ONE_LEVEL) {
            int e = __dp4a(int(lo[r][0]), int(y0.x), 0);
            e = __dp4a(int(lo[r][1]), int(y0.y), e);
            e = __dp4a(int(lo[r][2]), int(y0.z), e);
            e = __dp4a(int(lo[r][3]), int(y0.w), e);
            e = __dp4a(int(hi[r][0]), int(y1.x), e);
            e = __dp4a(int(hi[r][1]), int(y1.y), e);
            e = __dp4a(int(hi[r][2]), int(y1.z), e);
            e = __dp4a(int(hi[r][3]), int(y1.w), e);
            dot = fmaf(xs.y, small_int_to_float(e), dot);
          }
          // sum_i (a*q_i + b) * x_i = a * sum_i q_i x_i + b * sum_i x_i
          acc[r][b] += ca[r] * dot + cb[r] * xs.z;
        }
      }
    }
  }
  wait_for_previous_kernel();  // lanes past the last chunk: no wait yet
  release_next_kernel();
  scale_by_norm(acc, a.xq, l.cols);
  matvec_store_sliced<R, B, S>(acc, row0, l.rows, a.y, a.ldy, a.bias, a.accumulate);
}

namespace {

template <PackedFormat F, int R, int B, int U, int S = 1>
void launch_int4(const MatvecArgs& a, cudaStream_t stream) {
  launch_kernel(kernel_matvec_int4<F, R, B, U, S>, matvec_grid(a.w.layout.rows, R, S),
                kMatvecWarpsPerBlock * 32, 0, stream, a);
  CUDA_CHECK(cudaGetLastError());
}

// Matrices of few rows leave the SMs short of loads in flight: 1 or 2 warps
// per row group (MatvecArgs::slices), where it measured faster (H200,
// docs/PERFORMANCE-RUNS-13-17.md run 17): batch 1 for every Int4 format, batch 2 for
// Q4_0/Q4_1 (Q4_K at batch 2 was 1% slower sliced).
template <PackedFormat F, int R, int B, int U>
void launch_int4_sliced(const MatvecArgs& a, cudaStream_t stream) {
  if (matvec_slices(a, R) == 2)
    launch_int4<F, R, B, U, 2>(a, stream);
  else
    launch_int4<F, R, B, U, 1>(a, stream);
}

// Rows per warp and loads in flight per batch size: x reuse across rows
// matters more as B grows (docs/KERNEL-NOTES.md has the measurements).
template <PackedFormat F>
void launch_int4_format(const MatvecArgs& a, cudaStream_t stream) {
  switch (a.batch) {
    case 1:
      // One row per warp reads x (64 bytes + a record per 16 weight bytes)
      // from L1 for every row; more rows per warp share each x load. 4 rows
      // a warp, sliced where rows are few, for every Int4 format: Q4_0 had
      // 2 rows and 2 chunks in flight (docs/KERNEL-NOTES-MATVEC-RUNS-1-4.md, run 4), which
      // measured 429 tok/s against 478 (docs/PERFORMANCE-RUNS-13-17.md run 17).
      launch_int4_sliced<F, 4, 1, 1>(a, stream);
      break;
    case 2:
      if constexpr (F == PackedFormat::Int4K256)
        launch_int4<F, 2, 2, 2>(a, stream);
      else
        launch_int4_sliced<F, 2, 2, 2>(a, stream);
      break;
    case 3:
      launch_int4<F, 4, 3, 1>(a, stream);
      break;
    case 4:
      launch_int4<F, 4, 4, 1>(a, stream);
      break;
    case 5:
      launch_int4<F, 4, 5, 1>(a, stream);
      break;
    case 6:
      launch_int4<F, 4, 6, 1>(a, stream);
      break;
    case 7:
      launch_int4<F, 4, 7, 1>(a, stream);
      break;
    default:
      launch_int4<F, 4, 8, 1>(a, stream);
      break;
  }
}

}  // namespace

void launch_matvec_int4(const MatvecArgs& a, cudaStream_t stream) {
  switch (a.w.layout.format) {
    case PackedFormat::Int4Sym32:
      launch_int4_format<PackedFormat::Int4Sym32>(a, stream);
      break;
    case PackedFormat::Int4Affine32:
      launch_int4_format<PackedFormat::Int4Affine32>(a, stream);
      break;
    case PackedFormat::Int4K256:
      launch_int4_format<PackedFormat::Int4K256>(a, stream);
      break;
    default:
      std::fprintf(stderr, "launch_matvec_int4: format %s is not Int4\n",
                   packed_format_name(a.w.layout.format));
      std::abort();
  }
}

}  // namespace voltad::kernels
