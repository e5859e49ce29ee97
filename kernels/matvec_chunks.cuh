// What one lane of a decode matvec loads for one chunk (32 values) of one
// weight row, and how that chunk becomes its dot product with the chunk's 32
// two-level activations (kernels/matvec.h): the per-format pieces the
// matvec kernels are built from (matvec_int4.cu, matvec_stream.cu).
// Layouts in kernels/device_common.cuh and docs/FORMAT.md.
#pragma once

#include "kernels/device_common.cuh"
#include "kernels/matvec.h"

namespace voltad::kernels {

// Per-format scale records: what one lane loads for chunk c, and how it
// becomes the (a, b) of value = a*q + b.
template <PackedFormat F>
struct Int4Scales;

template <>
struct Int4Scales<PackedFormat::Int4Sym32> {
  using Raw = unsigned short;  // fp16 d
  static __device__ __forceinline__ Raw load(const uint8_t* srow, int c) {
    return __ldg(reinterpret_cast<const unsigned short*>(srow) + c);
  }
  static __device__ __forceinline__ void decode(Raw raw, int, float& a, float& b) {
    a = __half2float(__ushort_as_half(raw));
    b = -8.0f * a;
  }
};

template <>
struct Int4Scales<PackedFormat::Int4Affine32> {
  using Raw = unsigned int;  // fp16 d (low half), fp16 m (high half)
  static __device__ __forceinline__ Raw load(const uint8_t* srow, int c) {
    return __ldg(reinterpret_cast<const unsigned int*>(srow) + c);
  }
  static __device__ __forceinline__ void decode(Raw raw, int, float& a, float& b) {
    a = __half2float(__ushort_as_half((unsigned short)(raw & 0xFFFF)));
    b = __half2float(__ushort_as_half((unsigned short)(raw >> 16)));
  }
};

template <>
struct Int4Scales<PackedFormat::Int4K256> {
  using Raw = uint4;  // Q4_K header of the chunk's super-block
  static __device__ __forceinline__ Raw load(const uint8_t* srow, int c) {
    return load_weights_16(srow + 16 * (c >> 3));
  }
  // j = c % 8, the sub-block: constant per lane, since c = lane + 32i.
  static __device__ __forceinline__ void decode(Raw raw, int j, float& a, float& b) {
    int sc, mn;
    q4_k_scale_min(raw.y, raw.z, raw.w, j, sc, mn);
    a = __half2float(__ushort_as_half((unsigned short)(raw.x & 0xFFFF))) * float(sc);
    b = -__half2float(__ushort_as_half((unsigned short)(raw.x >> 16))) * float(mn);
  }
};

// The activations of chunk c at batch row 0: q1 (x0, x1), q2 (y0, y1) and
// the record {d1, d2, sum x, 0}. Plain loads: the kernel before wrote them.
struct ChunkX {
  uint4 x0, x1, y0, y1;
  float4 rec;
};

__device__ __forceinline__ ChunkX load_chunk_x(const QuantizedActivations& xq, int c) {
#if VOLTAD_MATVEC_X_LANE_MAJOR  // timing only (device_common.cuh)
  const int8_t* q = xq.q + 2048 * (c >> 5) + 16 * (c & 31);
  constexpr int kPart = 512;
#else
  const int8_t* q = xq.q + 64 * c;
  constexpr int kPart = 16;
#endif
  ChunkX x;
  x.x0 = load_activation(reinterpret_cast<const uint4*>(q));
  x.x1 = load_activation(reinterpret_cast<const uint4*>(q + kPart));
#if VOLTAD_MATVEC_ONE_LEVEL  // timing only (device_common.cuh)
  x.y0 = x.y1 = make_uint4(0, 0, 0, 0);
#else
  x.y0 = load_activation(reinterpret_cast<const uint4*>(q + 2 * kPart));
  x.y1 = load_activation(reinterpret_cast<const uint4*>(q + 3 * kPart));
#endif
  x.rec = load_activation(reinterpret_cast<const float4*>(xq.scales) + c);
  return x;
}

// The factor a batch-1 matvec multiplies its row sums by where x holds an
// RMSNorm's input not yet divided by its rms (QuantizedActivations::sumsq):
// rsqrt(sum / cols + eps), the sums of the 32-value units added in a fixed
// order (lane l takes units l, l + 32, ..., then the butterfly), so every
// warp of every reader gets the same bits. 1 where sumsq is null. Every
// lane of the warp calls it, after the wait: the kernel before wrote sumsq.
__device__ __forceinline__ float activation_norm_scale(const QuantizedActivations& xq,
                                                       int64_t cols) {
  if (xq.sumsq == nullptr) return 1.0f;
  const int lane = threadIdx.x & 31;
  const int units = int(cols / kActivationBlock);
  float s = 0.0f;
#pragma unroll 4
  for (int u = lane; u < units; u += 32) s += xq.sumsq[u];
  return rsqrtf(warp_sum(s) / float(cols) + xq.eps);
}

// acc *= activation_norm_scale where x holds a norm's input (batch 1:
// check_matvec_args refuses sumsq at other batches).
template <int R, int B>
__device__ __forceinline__ void scale_by_norm(float (&acc)[R][B], const QuantizedActivations& xq,
                                              int64_t cols) {
  if (xq.sumsq == nullptr) return;
  const float f = activation_norm_scale(xq, cols);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] *= f;
}

// d + the dot product of four words of weight bytes with four of x bytes.
__device__ __forceinline__ int dp4a_4(const uint32_t (&w)[4], const uint4& x, int d) {
  d = __dp4a(int(w[0]), int(x.x), d);
  d = __dp4a(int(w[1]), int(x.y), d);
  d = __dp4a(int(w[2]), int(x.z), d);
  return __dp4a(int(w[3]), int(x.w), d);
}

// Int4Scales<Int4K256>::decode without branches: q4_k_scale_min's two cases
// as selects on the lane's sub-block j (the same for all of a lane's chunks),
// so that ptxas can interleave the rows' decoding.
__device__ __forceinline__ void q4_k_scales_lane(const uint4& h, int j, float& a, float& b) {
  const int shift = 8 * (j & 3);
  const bool low = j < 4;
  // sc: j < 4 byte j of s0 & 63; else (byte j-4 of s2 & 15) | (top 2 bits of byte j-4 of s0) << 4
  // mn: j < 4 byte j of s1 & 63; else (byte j-4 of s2 >> 4) | (top 2 bits of byte j-4 of s1) << 4
  const uint32_t s0 = h.y >> shift, s1 = h.z >> shift, s2 = h.w >> shift;
  const uint32_t sc = low ? (s0 & 63) : ((s2 & 15) | ((s0 >> 2) & 0x30));
  const uint32_t mn = low ? (s1 & 63) : (((s2 >> 4) & 15) | ((s1 >> 2) & 0x30));
  a = __half2float(__ushort_as_half((unsigned short)(h.x & 0xFFFF))) * float(int(sc));
  b = -__half2float(__ushort_as_half((unsigned short)(h.x >> 16))) * float(int(mn));
}

// A chunk of an Int4 format: 16 bytes of nibbles and the chunk's scales.
// Raw holds loaded words only: nothing that would wait for the load is done
// before dot(), so a kernel can issue the next chunk's loads and then work on
// this one.
template <PackedFormat F>
struct Int4Chunk {
  struct Raw {
    uint4 w;
    typename Int4Scales<F>::Raw s;
  };
  static __device__ __forceinline__ Raw load(const PackedMatrixView& m, int64_t row, int c) {
    const PackedLayout& l = m.layout;
    Raw r;
    r.w = load_weights_16(m.data + l.quants_offset + row * l.quant_row_bytes + 16 * c);
    r.s = Int4Scales<F>::load(m.data + l.scales_offset + row * l.scale_row_bytes, c);
    return r;
  }
  // Rows row0 + r of a stream kernel's step (stream_load), as pointers to
  // the first one's arrays and 32-bit offsets from them, in place of 64-bit
  // row arithmetic at every load: fewer instructions on the load path, 3.5%
  // less time alone (docs/PERFORMANCE-RUNS-21-22.md, run 22). Rows past the end read
  // the last row. The offsets fit an int for r <= 3 (the kernel's 4 rows a
  // warp) at launch_matvec's limit of 2^30 columns: 3 * 2^29 + 16 * 2^25
  // < 2^31, with nothing to spare; more rows a warp or wider rows need
  // 64-bit offsets.
  struct Rows {
    const uint8_t* q;
    const uint8_t* s;
    int last;  // rows from the first to the matrix's last
  };
  static __device__ __forceinline__ Rows rows_at(const PackedMatrixView& m, int64_t row0) {
    const PackedLayout& l = m.layout;
    const int64_t end = l.rows - 1, base = row0 < end ? row0 : end;
    return {m.data + l.quants_offset + base * l.quant_row_bytes,
            m.data + l.scales_offset + base * l.scale_row_bytes,
            int(end - base < (1 << 30) ? end - base : (1 << 30))};
  }
  static __device__ __forceinline__ Raw load(const PackedMatrixView& m, const Rows& p, int64_t,
                                             int r, int c) {
    const PackedLayout& l = m.layout;
    if (r > p.last) r = p.last;
    Raw raw;
    raw.w = load_weights_16(p.q + (r * int(l.quant_row_bytes) + 16 * c));
    raw.s = Int4Scales<F>::load(p.s + r * int(l.scale_row_bytes), c);
    return raw;
  }
  // j = c % 8 (the Q4_K sub-block).
  static __device__ __forceinline__ float dot(const Raw& r, int j, const ChunkX& x) {
    float a, b;
    if constexpr (F == PackedFormat::Int4K256)
      q4_k_scales_lane(r.s, j, a, b);
    else
      Int4Scales<F>::decode(r.s, j, a, b);
    uint32_t lo[4], hi[4];
    int4_unpack(r.w.x, lo[0], hi[0]);
    int4_unpack(r.w.y, lo[1], hi[1]);
    int4_unpack(r.w.z, lo[2], hi[2]);
    int4_unpack(r.w.w, lo[3], hi[3]);
    float d = x.rec.x * small_int_to_float(dp4a_4(hi, x.x1, dp4a_4(lo, x.x0, 0)));
    if (!VOLTAD_MATVEC_ONE_LEVEL)
      d = fmaf(x.rec.y, small_int_to_float(dp4a_4(hi, x.y1, dp4a_4(lo, x.y0, 0))), d);
    // sum_i (a*q_i + b) * x_i = a * sum_i q_i x_i + b * sum_i x_i
    return a * d + b * x.rec.z;
  }
};

// A chunk of Int6K256 (Q6_K): 16 bytes of nibbles, 8 of crumbs, the two
// int8 scales of its halves and the fp16 d of its super-block.
struct Int6Chunk {
  struct Raw {
    uint4 w;
    uint2 h;
    unsigned short sc, d;
  };
  static __device__ __forceinline__ Raw load(const PackedMatrixView& m, int64_t row, int c) {
    const PackedLayout& l = m.layout;
    Raw r;
    r.w = load_weights_16(m.data + l.quants_offset + row * l.quant_row_bytes + 16 * c);
    r.h = load_weights_8(m.data + l.high_offset + row * l.high_row_bytes + 8 * c);
    r.sc = __ldg(reinterpret_cast<const unsigned short*>(m.data + l.scales_offset +
                                                         row * l.scale_row_bytes) +
                 c);
    r.d = __ldg(
        reinterpret_cast<const unsigned short*>(m.data + l.super_offset + row * l.super_row_bytes) +
        (c >> 3));
    return r;
  }
  // The stream kernel's loads (stream_load) from row0 + r, clamped to the
  // last row, as load() above: Int4Chunk's array pointers took that kernel
  // from 72 registers to 92 here (one warp a row group; 62 to 80 at two),
  // and measured slower (docs/PERFORMANCE-RUNS-21-22.md, run 22).
  struct Rows {};
  static __device__ __forceinline__ Rows rows_at(const PackedMatrixView&, int64_t) { return {}; }
  static __device__ __forceinline__ Raw load(const PackedMatrixView& m, const Rows&, int64_t row0,
                                             int r, int c) {
    const int64_t last = m.layout.rows - 1;
    return load(m, row0 + r < last ? row0 + r : last, c);
  }
  static __device__ __forceinline__ float dot(const Raw& r, int, const ChunkX& x) {
    uint32_t lo[4], hi[4];
    lo[0] = int6_assemble<0>(r.w.x, r.h.x);
    lo[1] = int6_assemble<1>(r.w.y, r.h.x);
    lo[2] = int6_assemble<2>(r.w.z, r.h.x);
    lo[3] = int6_assemble<3>(r.w.w, r.h.x);
    hi[0] = int6_assemble<0>(r.w.x >> 4, r.h.y);
    hi[1] = int6_assemble<1>(r.w.y >> 4, r.h.y);
    hi[2] = int6_assemble<2>(r.w.z >> 4, r.h.y);
    hi[3] = int6_assemble<3>(r.w.w >> 4, r.h.y);
    const int s0 = int8_t(r.sc & 0xFF), s1 = int8_t(r.sc >> 8);
    // Each half has its own scale: the halves' dp4a sums stay apart.
    const int d0 = dp4a_4(lo, x.x0, 0), d1 = dp4a_4(hi, x.x1, 0);
    const int e0 = dp4a_4(lo, x.y0, 0), e1 = dp4a_4(hi, x.y1, 0);  // dead when one level
    // |s0*d0 + s1*d1| < 2^26: past small_int_to_float's range.
    float dot = x.rec.x * float(s0 * d0 + s1 * d1);
    // (Written in this order the V100 build takes 72 registers; the second
    // level's dp4a inside the branch took 78, a block an SM fewer.)
    if (!VOLTAD_MATVEC_ONE_LEVEL) dot = fmaf(x.rec.y, float(s0 * e0 + s1 * e1), dot);
    return 0.25f * __half2float(__ushort_as_half(r.d)) * dot;  // bytes hold 4*(q-32)
  }
};

}  // namespace voltad::kernels
