// Matvec for unquantized weights (F16, from F16/BF16 GGUF tensors; F32):
// fp32 activations, fp32 FMA. Same work split as the quantized matvecs: a
// warp owns R rows, lane l reads 16-byte pieces l, l+32, ... (8 halves or 4
// floats), so each warp load covers 512 contiguous bytes of a row. A row
// whose length is not a multiple of the piece ends in a scalar tail.
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"

namespace voltad::kernels {

namespace {
// Piece p of a row as E floats.
template <class T>
struct FloatPiece;

template <>
struct FloatPiece<__half> {
  static constexpr int E = 8;
  static __device__ __forceinline__ void decode(uint4 raw, float (&v)[E]) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &words[i], 4);
      const float2 f = __half22float2(h);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ float element(const uint8_t* row, int64_t k) {
    return load_half(row + 2 * k);
  }
};

template <>
struct FloatPiece<float> {
  static constexpr int E = 4;
  static __device__ __forceinline__ void decode(uint4 raw, float (&v)[E]) {
    v[0] = __uint_as_float(raw.x);
    v[1] = __uint_as_float(raw.y);
    v[2] = __uint_as_float(raw.z);
    v[3] = __uint_as_float(raw.w);
  }
  static __device__ __forceinline__ float element(const uint8_t* row, int64_t k) {
    return __ldg(reinterpret_cast<const float*>(row) + k);
  }
};
}  // namespace

template <class T, int R, int B, int U>
__global__ void __launch_bounds__(kMatvecWarpsPerBlock * 32) kernel_matvec_float(MatvecArgs a) {
  wait_for_previous_kernel();
  using Piece = FloatPiece<T>;
  constexpr int E = Piece::E;
  const PackedLayout& l = a.w.layout;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t(blockIdx.x) * kMatvecWarpsPerBlock + (threadIdx.x >> 5)) * R;
  if (row0 >= l.rows) return;
  const int pieces = int(l.cols / E);

  const uint8_t* qrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r < l.rows ? row0 + r : l.rows - 1;
    qrow[r] = a.w.data + l.quants_offset + row * l.quant_row_bytes;
  }
  float acc[R][B];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;

  for (int p0 = lane; p0 < pieces; p0 += 32 * U) {
    uint4 w[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + 32 * u;
      if (p < pieces) {
#pragma unroll
        for (int r = 0; r < R; ++r) w[u][r] = load_weights_16(qrow[r] + 16 * p);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + 32 * u;
      if (p >= pieces) break;
      float wv[R][E];
#pragma unroll
      for (int r = 0; r < R; ++r) Piece::decode(w[u][r], wv[r]);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const float4* xp = reinterpret_cast<const float4*>(a.x + b * a.ldx + int64_t(E) * p);
        float xv[E];
#pragma unroll
        for (int i = 0; i < E / 4; ++i) {
          const float4 v = load_activation(xp + i);
          xv[4 * i] = v.x;
          xv[4 * i + 1] = v.y;
          xv[4 * i + 2] = v.z;
          xv[4 * i + 3] = v.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int i = 0; i < E; ++i) acc[r][b] = fmaf(wv[r][i], xv[i], acc[r][b]);
      }
    }
  }
  // Tail: the last cols % E values, one per lane.
  for (int64_t k = int64_t(pieces) * E + lane; k < l.cols; k += 32) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float wk = Piece::element(qrow[r], k);
#pragma unroll
      for (int b = 0; b < B; ++b) acc[r][b] = fmaf(wk, a.x[b * a.ldx + k], acc[r][b]);
    }
  }
  matvec_store<R, B>(acc, row0, l.rows, a.y, a.ldy, a.bias, a.accumulate);
}

namespace {

template <class T, int R, int B, int U>
void launch_float(const MatvecArgs& a, cudaStream_t stream) {
  launch_kernel(kernel_matvec_float<T, R, B, U>, matvec_grid(a.w.layout.rows, R),
                kMatvecWarpsPerBlock * 32, 0, stream, a);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void launch_float_type(const MatvecArgs& a, cudaStream_t stream) {
  switch (a.batch) {
    case 1:
      launch_float<T, 1, 1, 4>(a, stream);
      break;
    case 2:
      launch_float<T, 1, 2, 4>(a, stream);
      break;
    case 3:
      launch_float<T, 2, 3, 2>(a, stream);
      break;
    case 4:
      launch_float<T, 2, 4, 2>(a, stream);
      break;
    case 5:
      launch_float<T, 2, 5, 1>(a, stream);
      break;
    case 6:
      launch_float<T, 2, 6, 1>(a, stream);
      break;
    case 7:
      launch_float<T, 2, 7, 1>(a, stream);
      break;
    default:
      launch_float<T, 2, 8, 1>(a, stream);
      break;
  }
}

}  // namespace

void launch_matvec_float(const MatvecArgs& a, cudaStream_t stream) {
  if (a.x == nullptr || a.ldx % 4 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0) {
    std::fprintf(stderr, "launch_matvec_float: x must be 16-byte aligned with ldx %% 4 == 0\n");
    std::abort();
  }
  switch (a.w.layout.format) {
    case PackedFormat::F16:
      launch_float_type<__half>(a, stream);
      break;
    case PackedFormat::F32:
      launch_float_type<float>(a, stream);
      break;
    default:
      std::fprintf(stderr, "launch_matvec_float: format %s is not F16/F32\n",
                   packed_format_name(a.w.layout.format));
      std::abort();
  }
}

}  // namespace voltad::kernels
