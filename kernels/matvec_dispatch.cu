// launch_matvec (format dispatch, preconditions, batch slicing) and the
// activation quantizer the Int* matvecs read.
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/matvec.h"

namespace voltad::kernels {

// One thread per block of 32 values: amax -> d = amax/127, q = rint(x/d)
// (as x * (1/d), in that order, so the CPU reference can match it bit for
// bit), record {d, d*sum(q)}. A non-finite value makes d NaN so that the
// matvec's output is NaN too rather than silently finite.
__global__ void kernel_quantize_activations(const float* __restrict__ x, int64_t ldx, int batch,
                                            int64_t cols, int8_t* __restrict__ q,
                                            float* __restrict__ scales) {
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
  const float d = finite ? amax / 127.0f : __int_as_float(0x7fc00000);
  const float id = (finite && d != 0.0f) ? 1.0f / d : 0.0f;
  uint32_t words[kActBlock / 4] = {};
  int sum = 0;
#pragma unroll
  for (int j = 0; j < kActBlock; ++j) {
    const int qj = __float2int_rn(v[j] * id);
    sum += qj;
    words[j / 4] |= uint32_t(qj & 0xFF) << (8 * (j % 4));
  }
  uint4* dst = reinterpret_cast<uint4*>(q + b * cols + blk * kActBlock);
  dst[0] = make_uint4(words[0], words[1], words[2], words[3]);
  dst[1] = make_uint4(words[4], words[5], words[6], words[7]);
  *reinterpret_cast<float2*>(scales + b * (cols / 16) + 2 * blk) = make_float2(d, d * float(sum));
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
  kernel_quantize_activations<<<unsigned((n + threads - 1) / threads), threads, 0, stream>>>(
      x, ldx, batch, cols, out.q, out.scales);
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

void launch_matvec(const MatvecArgs& args, cudaStream_t stream) {
  const PackedLayout& l = args.w.layout;
  if (args.batch < 1) matvec_misuse("batch must be >= 1", args);
  if (l.rows == 0) return;
  if (args.w.data == nullptr || reinterpret_cast<uintptr_t>(args.w.data) % 256 != 0)
    matvec_misuse("weights must be a 256-byte aligned device allocation", args);
  if (l.cols % packed_block_elems(l.format) != 0) matvec_misuse("cols not a block multiple", args);
  if (args.y == nullptr || args.ldy < l.rows) matvec_misuse("y must hold rows per batch row", args);
  if (l.rows > int64_t(1) << 30 || l.cols > int64_t(1) << 30)
    matvec_misuse("matrix too large for 32-bit piece indices", args);
  if (is_quantized(l.format)) {
    if (args.xq.q == nullptr || args.xq.scales == nullptr)
      matvec_misuse("quantized weights need quantized activations (xq)", args);
  } else if (args.x == nullptr || args.ldx < l.cols) {
    matvec_misuse("float weights need x with ldx >= cols", args);
  }
  // Slices of at most kMatvecMaxBatch activation rows.
  for (int b0 = 0; b0 < args.batch; b0 += kMatvecMaxBatch) {
    MatvecArgs a = args;
    a.batch = args.batch - b0 < kMatvecMaxBatch ? args.batch - b0 : kMatvecMaxBatch;
    a.y = args.y + b0 * args.ldy;
    if (args.x) a.x = args.x + b0 * args.ldx;
    if (args.xq.q) {
      a.xq.q = args.xq.q + b0 * l.cols;
      a.xq.scales = args.xq.scales + b0 * (l.cols / 16);
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
