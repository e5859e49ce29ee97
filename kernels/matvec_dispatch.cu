// launch_matvec (format dispatch, preconditions, batches in chunks of 8) and the
// activation quantizer the Int* matvecs read.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/matvec.h"

namespace voltad::kernels {

// One thread per block of 32 values, two levels (kernels/matvec.h):
// d1 = amax/127, q1 = rint(x * (1/d1)); r = fma(-d1, q1, x), d2 = max|r|/127,
// q2 = rint(r * (1/d2)) clamped to +-127; record {d1, d2, sum_x, 0} with
// sum_x = fma(d2, sum(q2), d1*sum(q1)). Every step is one IEEE operation in
// a fixed order so the CPU reference can match it bit for bit. A non-finite
// value makes d1 and d2 NaN so that the matvec's output is NaN too rather
// than silently finite.
__device__ __forceinline__ void quantize_block_level(const float (&v)[kActivationBlock], float d,
                                                     uint32_t (&words)[kActivationBlock / 4],
                                                     int& sum) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  sum = 0;
#pragma unroll
  for (int j = 0; j < kActivationBlock; ++j) {
    const int qj = max(-127, min(127, __float2int_rn(v[j] * id)));
    sum += qj;
    words[j / 4] |= uint32_t(qj & 0xFF) << (8 * (j % 4));
  }
}

__global__ void kernel_quantize_activations(const float* x, int64_t ldx, int batch, int64_t cols,
                                            int8_t* __restrict__ q, float* __restrict__ scales) {
  wait_then_release_next();
  constexpr int kActBlock = kActivationBlock;
  const int64_t blocks_per_row = cols / kActBlock;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= blocks_per_row * batch) return;
  const int64_t b = i / blocks_per_row, blk = i % blocks_per_row;
  const float4* src = reinterpret_cast<const float4*>(x + b * ldx + blk * kActBlock);
  float v[kActBlock];
#pragma unroll
  for (int j = 0; j < kActBlock / 4; ++j) {
    const float4 f = src[j];
    v[4 * j] = f.x;
    v[4 * j + 1] = f.y;
    v[4 * j + 2] = f.z;
    v[4 * j + 3] = f.w;
  }
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int j = 0; j < kActBlock; ++j) {
    amax = fmaxf(amax, fabsf(v[j]));
    finite = finite && isfinite(v[j]);
  }
  const float nan = __int_as_float(0x7fc00000);
  const float d1 = finite ? amax / 127.0f : nan;
  uint32_t w1[kActBlock / 4] = {}, w2[kActBlock / 4] = {};
  int sum1 = 0, sum2 = 0;
  quantize_block_level(v, finite ? d1 : 0.0f, w1, sum1);
  // The residual, in place.
  float ramax = 0.0f;
#pragma unroll
  for (int j = 0; j < kActBlock; ++j) {
    const int qj = int(int8_t(w1[j / 4] >> (8 * (j % 4))));
    v[j] = __fmaf_rn(-d1, float(qj), v[j]);
    ramax = fmaxf(ramax, fabsf(v[j]));
  }
  const float d2 = finite ? ramax / 127.0f : nan;
  quantize_block_level(v, finite ? d2 : 0.0f, w2, sum2);
  uint4* dst = reinterpret_cast<uint4*>(q + b * 2 * cols + blk * 2 * kActBlock);
  dst[0] = make_uint4(w1[0], w1[1], w1[2], w1[3]);
  dst[1] = make_uint4(w1[4], w1[5], w1[6], w1[7]);
  dst[2] = make_uint4(w2[0], w2[1], w2[2], w2[3]);
  dst[3] = make_uint4(w2[4], w2[5], w2[6], w2[7]);
  const float sum_x = __fmaf_rn(d2, float(sum2), __fmul_rn(d1, float(sum1)));
  *reinterpret_cast<float4*>(scales + b * (cols / kActBlock) * kActivationRecordFloats +
                             kActivationRecordFloats * blk) = make_float4(d1, d2, sum_x, 0.0f);
}

void launch_quantize_activations(const float* x, int64_t ldx, int batch, int64_t cols,
                                 QuantizedActivations out, cudaStream_t stream) {
  if (cols % kActivationBlock != 0 || ldx % 4 != 0 || ldx < cols ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(out.q) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out.scales) % 16 != 0) {
    std::fprintf(stderr,
                 "launch_quantize_activations: need cols %% 32 == 0, ldx %% 4 == 0, ldx >= cols "
                 "and 16-byte aligned buffers (cols=%lld ldx=%lld)\n",
                 (long long)cols, (long long)ldx);
    std::abort();
  }
  const int64_t n = int64_t(batch) * (cols / kActivationBlock);
  if (n == 0) return;
  const int threads = 128;
  launch_kernel(kernel_quantize_activations, unsigned((n + threads - 1) / threads), threads, 0,
                stream, x, ldx, batch, cols, out.q, out.scales);
  CUDA_CHECK(cudaGetLastError());
}

namespace {

[[noreturn]] void matvec_misuse(const char* what, const MatvecArgs& a) {
  std::fprintf(stderr, "launch_matvec: %s (format %s, %lld x %lld, batch %d)\n", what,
               packed_format_name(a.w.layout.format), (long long)a.w.layout.rows,
               (long long)a.w.layout.cols, a.batch);
  std::abort();
}

bool is_quantized(PackedFormat f) {
  return f != PackedFormat::F16 && f != PackedFormat::F32;
}

}  // namespace

int matvec_slices(const MatvecArgs& a, int rows_per_warp) {
  if (a.slices > 0) return a.slices;
  static const int forced = [] {  // read once: ~225 matvecs a step
    const char* v = std::getenv("VOLTAD_MATVEC_SLICES");
    return v && (std::string_view(v) == "1" || std::string_view(v) == "2") ? v[0] - '0' : 0;
  }();
  if (forced) return forced;
  const int64_t row_groups = (a.w.layout.rows + rows_per_warp - 1) / rows_per_warp;
  return row_groups < int64_t(16) * device_sm_count() ? 2 : 1;
}

void check_matvec_args(const MatvecArgs& args) {
  const PackedLayout& l = args.w.layout;
  if (args.batch < 1) matvec_misuse("batch must be >= 1", args);
  if (args.w.data == nullptr || reinterpret_cast<uintptr_t>(args.w.data) % 256 != 0)
    matvec_misuse("weights must be a 256-byte aligned device allocation", args);
  if (l.cols % packed_block_elems(l.format) != 0) matvec_misuse("cols not a block multiple", args);
  if (args.slices < 0 || args.slices > 2) matvec_misuse("slices must be 0 (chosen), 1 or 2", args);
  if (args.y == nullptr || args.ldy < l.rows) matvec_misuse("y must hold rows per batch row", args);
  if (l.rows > int64_t(1) << 30 || l.cols > int64_t(1) << 30)
    matvec_misuse("matrix too large for 32-bit piece indices", args);
  if (is_quantized(l.format)) {
    if (args.xq.q == nullptr || args.xq.scales == nullptr)
      matvec_misuse("quantized weights need quantized activations (xq)", args);
    if (args.xq.sumsq && args.batch != 1)
      matvec_misuse("a norm's unscaled x (xq.sumsq) is read at batch 1 only", args);
  } else if (args.x == nullptr || args.ldx < l.cols) {
    matvec_misuse("float weights need x with ldx >= cols", args);
  }
}

void launch_matvec(const MatvecArgs& args, cudaStream_t stream) {
  const PackedLayout& l = args.w.layout;
  if (args.batch < 1) matvec_misuse("batch must be >= 1", args);
  if (l.rows == 0) return;
  check_matvec_args(args);
  // Slices of at most kMatvecMaxBatch activation rows.
  for (int b0 = 0; b0 < args.batch; b0 += kMatvecMaxBatch) {
    MatvecArgs a = args;
    a.batch = args.batch - b0 < kMatvecMaxBatch ? args.batch - b0 : kMatvecMaxBatch;
    a.y = args.y + b0 * args.ldy;
    if (args.x) a.x = args.x + b0 * args.ldx;
    if (args.xq.q) {
      a.xq.q = args.xq.q + b0 * quantized_activation_q_row(l.cols);
      a.xq.scales = args.xq.scales + b0 * quantized_activation_scale_row(l.cols);
    }
    if (a.batch == 1 && launch_matvec_bulk(a, stream)) continue;
    const bool streams = l.format == PackedFormat::Int4K256 || l.format == PackedFormat::Int6K256;
    if (a.batch == 1 && streams && matvec_stream_enabled()) {
      launch_matvec_stream(a, stream);
      continue;
    }
    switch (l.format) {
      case PackedFormat::Int4Sym32:
      case PackedFormat::Int4Affine32:
      case PackedFormat::Int4K256:
        launch_matvec_int4(a, stream);
        break;
      case PackedFormat::Int6K256:
      case PackedFormat::Int8Sym32:
      case PackedFormat::Int8Affine32:
      case PackedFormat::Int8K256:
        launch_matvec_int8(a, stream);
        break;
      case PackedFormat::F16:
      case PackedFormat::F32:
        launch_matvec_float(a, stream);
        break;
    }
  }
}

}  // namespace voltad::kernels
