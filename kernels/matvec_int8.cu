// Fused dequantize-matvecs for the byte-decoded formats: Int8Sym32 (Q8_0,
// Q5_0), Int8Affine32 (Q5_1), Int8K256 (Q5_K) and Int6K256 (Q6_K, decoded to
// int8 in registers). Layouts in kernels/device_common.cuh and docs/FORMAT.md.
//
// Same work split as matvec_int4.cu: a warp owns R rows (Int6 at batch 1
// where rows are few: a pair of warps, each over alternate groups of 32
// pieces), lane l reads
// the 16-byte pieces l, l+32, ... of each row so a warp's load covers 512
// contiguous bytes. An Int8 piece is 16 values (half a scale group); an Int6
// piece is a chunk of 32 values: 16 bytes of nibbles plus 8 of crumbs.
// x is two-level (kernels/matvec.h): every dp4a against q1 has a twin
// against q2, and the two integer sums meet in one FMA.
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"
#include "kernels/matvec_chunks.cuh"

namespace voltad::kernels {

// Int8*: w = a*q + b with (a, b) per group of 32 (two pieces).
template <PackedFormat F, int R, int B, int U>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32) kernel_matvec_int8(MatvecArgs a) {
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t(blockIdx.x) * kMatvecWarpsPerBlock + (threadIdx.x >> 5)) * R;
  if (row0 >= l.rows) return;
  const int pieces = int(l.cols / 16);
  const int64_t x_ld = 2 * l.cols;  // q1 and q2: 64 bytes per block
  const int64_t x_scale_ld = l.cols / kActivationBlock * kActivationRecordFloats;

  const uint8_t* qrow[R];
  const uint8_t* srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r < l.rows ? row0 + r : l.rows - 1;
    qrow[r] = a.w.data + l.quants_offset + row * l.quant_row_bytes;
    srow[r] = a.w.data + l.scales_offset + row * l.scale_row_bytes;
  }
  float acc[R][B];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;

  for (int p0 = lane; p0 < pieces; p0 += 32 * U) {
    uint4 w[U][R];
    float2 dm[U][R];  // {a, b}
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + 32 * u;
      if (p < pieces) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          w[u][r] = load_weights_16(qrow[r] + 16 * p);
          if constexpr (F == PackedFormat::Int8Affine32) {
            dm[u][r] = load_half2(srow[r] + 4 * (p >> 1));
          } else if constexpr (F == PackedFormat::Int8K256) {
            // Sub-block (p/2) % 8 = (lane/2) % 8: fixed per lane.
            const uint4 h = load_weights_16(srow[r] + 16 * (p >> 4));
            int sc, mn;
            q4_k_scale_min(h.y, h.z, h.w, (lane >> 1) & 7, sc, mn);
            dm[u][r] = make_float2(
                __half2float(__ushort_as_half((unsigned short)(h.x & 0xFFFF))) * float(sc),
                -__half2float(__ushort_as_half((unsigned short)(h.x >> 16))) * float(mn));
          } else {
            dm[u][r] = make_float2(load_half(srow[r] + 2 * (p >> 1)), 0.0f);
          }
        }
      }
    }
    if (p0 == lane) wait_for_previous_kernel();  // after the first loads
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + 32 * u;
      if (p >= pieces) break;
#pragma unroll
      for (int b = 0; b < B; ++b) {
        // Piece p is half p&1 of activation block p/2: q1 at 16*(p&1) of the
        // block's 64 bytes, q2 32 bytes further.
        const int8_t* xq = a.xq.q + b * x_ld + 64 * (p >> 1) + 16 * (p & 1);
        const uint4 x = load_activation(reinterpret_cast<const uint4*>(xq));
        const float2 xd = load_activation(
            reinterpret_cast<const float2*>(a.xq.scales + b * x_scale_ld) + 2 * (p >> 1));
#if VOLTAD_MATVEC_ONE_LEVEL
        const uint4 x2 = make_uint4(0, 0, 0, 0);
#else
        const uint4 x2 = load_activation(reinterpret_cast<const uint4*>(xq + 32));
#endif
        // The zero-point formats need sum(x) over this half block: 4 more
        // dp4a per level.
        float xsum = 0.0f;
        if constexpr (F != PackedFormat::Int8Sym32) {
          int s = __dp4a(int(x.x), 0x01010101, 0);
          s = __dp4a(int(x.y), 0x01010101, s);
          s = __dp4a(int(x.z), 0x01010101, s);
          s = __dp4a(int(x.w), 0x01010101, s);
          xsum = xd.x * small_int_to_float(s);
          if (!VOLTAD_MATVEC_ONE_LEVEL) {
            int s2 = __dp4a(int(x2.x), 0x01010101, 0);
            s2 = __dp4a(int(x2.y), 0x01010101, s2);
            s2 = __dp4a(int(x2.z), 0x01010101, s2);
            s2 = __dp4a(int(x2.w), 0x01010101, s2);
            xsum = fmaf(xd.y, small_int_to_float(s2), xsum);
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          int d = __dp4a(int(w[u][r].x), int(x.x), 0);
          d = __dp4a(int(w[u][r].y), int(x.y), d);
          d = __dp4a(int(w[u][r].z), int(x.z), d);
          d = __dp4a(int(w[u][r].w), int(x.w), d);
          float dot = xd.x * small_int_to_float(d);
          if (!VOLTAD_MATVEC_ONE_LEVEL) {
            int d2 = __dp4a(int(w[u][r].x), int(x2.x), 0);
            d2 = __dp4a(int(w[u][r].y), int(x2.y), d2);
            d2 = __dp4a(int(w[u][r].z), int(x2.z), d2);
            d2 = __dp4a(int(w[u][r].w), int(x2.w), d2);
            dot = fmaf(xd.y, small_int_to_float(d2), dot);
          }
          float v = dm[u][r].x * dot;
          if constexpr (F != PackedFormat::Int8Sym32) v += dm[u][r].y * xsum;
          acc[r][b] += v;
        }
      }
    }
  }
  wait_for_previous_kernel();  // lanes past the last chunk: no wait yet
  release_next_kernel();
  scale_by_norm(acc, a.xq, l.cols);
  matvec_store<R, B>(acc, row0, l.rows, a.y, a.ldy, a.bias, a.accumulate);
}

// Int6K256: w = d*sc*(q-32); assembled bytes hold 4*(q-32). S warps per
// row group, as in kernel_matvec_int4.
template <int R, int B, int U, int S>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32) kernel_matvec_int6(MatvecArgs a) {
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % S;
  const int64_t row0 = (int64_t(blockIdx.x) * (kMatvecWarpsPerBlock / S) + warp / S) * R;
  if (S == 1 && row0 >= l.rows) return;  // sliced warps all reach the reduction
  const int chunks = int(l.cols / 32);
  const int64_t x_ld = 2 * l.cols;  // q1 and q2: 64 bytes per block
  const int64_t x_scale_ld = l.cols / kActivationBlock * kActivationRecordFloats;

  const uint8_t* qrow[R];
  const uint8_t* hrow[R];
  const uint8_t* srow[R];
  const uint8_t* drow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r < l.rows ? row0 + r : l.rows - 1;
    qrow[r] = a.w.data + l.quants_offset + row * l.quant_row_bytes;
    hrow[r] = a.w.data + l.high_offset + row * l.high_row_bytes;
    srow[r] = a.w.data + l.scales_offset + row * l.scale_row_bytes;
    drow[r] = a.w.data + l.super_offset + row * l.super_row_bytes;
  }
  float acc[R][B];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;

  const int first = lane + 32 * slice;
  for (int c0 = first; c0 < chunks; c0 += 32 * U * S) {
    uint4 w[U][R];
    uint2 h[U][R];
    unsigned short sc[U][R];
    float d[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * S * u;
      if (c < chunks) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          w[u][r] = load_weights_16(qrow[r] + 16 * c);
          h[u][r] = load_weights_8(hrow[r] + 8 * c);
          sc[u][r] = __ldg(reinterpret_cast<const unsigned short*>(srow[r]) + c);
          d[u][r] = load_half(drow[r] + 2 * (c >> 3));
        }
      }
    }
    if (c0 == first) wait_for_previous_kernel();  // after the first loads
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * S * u;
      if (c >= chunks) break;
      uint32_t lo[R][4], hi[R][4];
      float dq[R];       // d/4
      int s0[R], s1[R];  // sc of each half
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 q = w[u][r];
        const uint2 cr = h[u][r];
        lo[r][0] = int6_assemble<0>(q.x, cr.x);
        lo[r][1] = int6_assemble<1>(q.y, cr.x);
        lo[r][2] = int6_assemble<2>(q.z, cr.x);
        lo[r][3] = int6_assemble<3>(q.w, cr.x);
        hi[r][0] = int6_assemble<0>(q.x >> 4, cr.y);
        hi[r][1] = int6_assemble<1>(q.y >> 4, cr.y);
        hi[r][2] = int6_assemble<2>(q.z >> 4, cr.y);
        hi[r][3] = int6_assemble<3>(q.w >> 4, cr.y);
        dq[r] = 0.25f * d[u][r];
        s0[r] = int8_t(sc[u][r] & 0xFF);
        s1[r] = int8_t(sc[u][r] >> 8);
      }
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int8_t* xq = a.xq.q + b * x_ld + 64 * c;
        const uint4 x0 = load_activation(reinterpret_cast<const uint4*>(xq));
        const uint4 x1 = load_activation(reinterpret_cast<const uint4*>(xq + 16));
        const float2 xd =
            load_activation(reinterpret_cast<const float2*>(a.xq.scales + b * x_scale_ld) + 2 * c);
#if VOLTAD_MATVEC_ONE_LEVEL
        const uint4 y0 = make_uint4(0, 0, 0, 0), y1 = y0;
#else
        const uint4 y0 = load_activation(reinterpret_cast<const uint4*>(xq + 32));
        const uint4 y1 = load_activation(reinterpret_cast<const uint4*>(xq + 48));
#endif
#pragma unroll
        for (int r = 0; r < R; ++r) {
          int d0 = __dp4a(int(lo[r][0]), int(x0.x), 0);
          d0 = __dp4a(int(lo[r][1]), int(x0.y), d0);
          d0 = __dp4a(int(lo[r][2]), int(x0.z), d0);
          d0 = __dp4a(int(lo[r][3]), int(x0.w), d0);
          int d1 = __dp4a(int(hi[r][0]), int(x1.x), 0);
          d1 = __dp4a(int(hi[r][1]), int(x1.y), d1);
          d1 = __dp4a(int(hi[r][2]), int(x1.z), d1);
          d1 = __dp4a(int(hi[r][3]), int(x1.w), d1);
          // |s0*d0 + s1*d1| < 2^26: past small_int_to_float's range.
          float dot = xd.x * float(s0[r] * d0 + s1[r] * d1);
          if (!VOLTAD_MATVEC_ONE_LEVEL) {
            int e0 = __dp4a(int(lo[r][0]), int(y0.x), 0);
            e0 = __dp4a(int(lo[r][1]), int(y0.y), e0);
            e0 = __dp4a(int(lo[r][2]), int(y0.z), e0);
            e0 = __dp4a(int(lo[r][3]), int(y0.w), e0);
            int e1 = __dp4a(int(hi[r][0]), int(y1.x), 0);
            e1 = __dp4a(int(hi[r][1]), int(y1.y), e1);
            e1 = __dp4a(int(hi[r][2]), int(y1.z), e1);
            e1 = __dp4a(int(hi[r][3]), int(y1.w), e1);
            dot = fmaf(xd.y, float(s0[r] * e0 + s1[r] * e1), dot);
          }
          acc[r][b] += dq[r] * dot;
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

template <PackedFormat F, int R, int B, int U>
void launch_int8(const MatvecArgs& a, cudaStream_t stream) {
  launch_kernel(kernel_matvec_int8<F, R, B, U>, matvec_grid(a.w.layout.rows, R),
                kMatvecWarpsPerBlock * 32, 0, stream, a);
  CUDA_CHECK(cudaGetLastError());
}

template <int R, int B, int U, int S = 1>
void launch_int6(const MatvecArgs& a, cudaStream_t stream) {
  launch_kernel(kernel_matvec_int6<R, B, U, S>, matvec_grid(a.w.layout.rows, R, S),
                kMatvecWarpsPerBlock * 32, 0, stream, a);
  CUDA_CHECK(cudaGetLastError());
}

template <PackedFormat F>
void launch_int8_format(const MatvecArgs& a, cudaStream_t stream) {
  switch (a.batch) {
    case 1:
      launch_int8<F, 1, 1, 2>(a, stream);
      break;
    case 2:
      launch_int8<F, 2, 2, 2>(a, stream);
      break;
    case 3:
      launch_int8<F, 4, 3, 1>(a, stream);
      break;
    case 4:
      launch_int8<F, 4, 4, 1>(a, stream);
      break;
    case 5:
      launch_int8<F, 4, 5, 1>(a, stream);
      break;
    case 6:
      launch_int8<F, 4, 6, 1>(a, stream);
      break;
    case 7:
      launch_int8<F, 4, 7, 1>(a, stream);
      break;
    default:
      launch_int8<F, 4, 8, 1>(a, stream);
      break;
  }
}

void launch_int6_format(const MatvecArgs& a, cudaStream_t stream) {
  switch (a.batch) {
    case 1:  // 2 rows share each x load (KERNEL-NOTES-MATVEC-RUNS-1-4 run 4); slices as for Q4_K
      if (matvec_slices(a, 2) == 2)
        launch_int6<2, 1, 2, 2>(a, stream);
      else
        launch_int6<2, 1, 2>(a, stream);
      break;
    case 2:
      launch_int6<2, 2, 2>(a, stream);
      break;
    case 3:
      launch_int6<4, 3, 1>(a, stream);
      break;
    case 4:
      launch_int6<4, 4, 1>(a, stream);
      break;
    case 5:
      launch_int6<4, 5, 1>(a, stream);
      break;
    case 6:
      launch_int6<4, 6, 1>(a, stream);
      break;
    case 7:
      launch_int6<4, 7, 1>(a, stream);
      break;
    default:
      launch_int6<4, 8, 1>(a, stream);
      break;
  }
}

}  // namespace

void launch_matvec_int8(const MatvecArgs& a, cudaStream_t stream) {
  switch (a.w.layout.format) {
    case PackedFormat::Int8Sym32:
      launch_int8_format<PackedFormat::Int8Sym32>(a, stream);
      break;
    case PackedFormat::Int8Affine32:
      launch_int8_format<PackedFormat::Int8Affine32>(a, stream);
      break;
    case PackedFormat::Int8K256:
      launch_int8_format<PackedFormat::Int8K256>(a, stream);
      break;
    case PackedFormat::Int6K256:
      launch_int6_format(a, stream);
      break;
    default:
      std::fprintf(stderr, "launch_matvec_int8: format %s is not Int8/Int6\n",
                   packed_format_name(a.w.layout.format));
      std::abort();
  }
}

}  // namespace voltad::kernels
