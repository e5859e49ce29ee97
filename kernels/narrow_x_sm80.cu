// The sm_80 narrow GEMM's conversion of x (kernels/gemm_narrow_sm80.cu):
// fp32 rows to its fp16 fragments and x sums (kernels/narrow_x.cuh's
// layout), one launch before the GEMM's.
#include <cuda_fp16.h>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/gemm_decode.cuh"
#include "kernels/launch.cuh"
#include "kernels/narrow_sm80.cuh"
#include "kernels/narrow_x.cuh"

namespace voltad::kernels::narrow80 {

// x (n, ldx) fp32 -> xp: for chunk c and token t < n8 (n rounded up to 8;
// tokens past n are zeros), the chunk's 16 fp16 pairs at (c * n8 + t) * 16,
// lane i's B words at 4i..4i+3: values (4i, 4i+2), (4i+1, 4i+3), and the
// same 16 on (the MMAs' k order, above). Then, at xs[c * n8 + t],
// the sum of those 32 fp16 values as an fp16 pair (hi, lo = the rest): the
// B operand of the Int4K256 mins. kernels/narrow_x.cuh writes the same
// layout from a warp that holds a chunk (RMSNorm's fused path).
// One thread per 16 bytes of xp (lane i's four words of a token's chunk):
// four threads share a chunk's 128 bytes of x, so reads and writes are
// coalesced (one thread per token and chunk, reading 32 scalars in a row,
// took 4.6 us a launch at 4096 columns). The thread count is a multiple of
// 32 (n8 * 4 per chunk), so a warp is either all in or all out.
__global__ void kernel_x_to_fragments(const float* x, int64_t ldx, int n, int n8, int64_t chunks,
                                      bool quads_aligned, uint32_t* xp, uint32_t* xs) {
  wait_then_release_next();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks * n8 * 4) return;
  const int lane_t = int(i & 3);
  const int64_t ct = i >> 2;  // c * n8 + t
  const int64_t c = ct / n8;
  const int t = int(ct % n8);
  uint32_t w[4] = {0, 0, 0, 0};
  float sum = 0.0f;
  if (t < n) {
    const float* src = x + int64_t(t) * ldx + c * 32 + 4 * lane_t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // values 4 lane_t + 16h .. +3
      float4 v;
      if (quads_aligned) {
        v = load_activation(reinterpret_cast<const float4*>(src + 16 * h));
      } else {
        v = make_float4(load_activation(src + 16 * h), load_activation(src + 16 * h + 1),
                        load_activation(src + 16 * h + 2), load_activation(src + 16 * h + 3));
      }
      const __half2 even = __floats2half2_rn(v.x, v.z), odd = __floats2half2_rn(v.y, v.w);
      w[2 * h] = half2_as_u32(even);
      w[2 * h + 1] = half2_as_u32(odd);
      const float2 e = __half22float2(even), o = __half22float2(odd);
      sum += (e.x + o.x) + (e.y + o.y);
    }
  }
  reinterpret_cast<uint4*>(xp)[i] = make_uint4(w[0], w[1], w[2], w[3]);
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
  if (lane_t == 0) xs[ct] = pack_x_sum(sum);
}

void launch_x_to_fragments(const GemmArgs& a, uint32_t* xp, cudaStream_t stream) {
  const int n8 = (a.n + 7) / 8 * 8;
  const int64_t chunks = a.w.layout.cols / 32;
  const int64_t threads = chunks * n8 * 4;
  const bool quads_aligned = a.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  uint32_t* xs = xp + size_t(n8) * size_t(chunks) * 16;
  launch_kernel(kernel_x_to_fragments, unsigned((threads + 255) / 256), 256, 0, stream, a.x, a.ldx,
                a.n, n8, chunks, quads_aligned, xp, xs);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels::narrow80
