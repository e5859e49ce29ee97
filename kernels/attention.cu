// Paged attention with split-K over the fp16 KV cache, and the combine pass
// both KV caches share. See attention.h for the contract; pass 1 is
// kernel_attention_partial of attention_common.cuh, reading the cache through
// Fp16KvReader.
// Pass 2, kernel_attention_combine: rescales the partials by exp(m_i - m)
// and divides by the total sum.
#include <cuda_fp16.h>

#include "kernels/attention.h"
#include "kernels/attention_common.cuh"
#include "kernels/attention_fp16.cuh"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/quantize_warp.cuh"

namespace voltad::kernels {

namespace {

// Inputs written by the kernel just before: no __restrict__ (read-only
// loads may be moved above the PDL wait; device_common.cuh, load_activation).
__global__ void kernel_kv_write(const float* k, const float* v, int64_t ld, int kv_dim,
                                const int32_t* __restrict__ slots, __half* __restrict__ kc,
                                __half* __restrict__ vc) {
  wait_then_release_next();
  const int t = blockIdx.x;
  const int64_t slot = slots[t];
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    kc[slot * kv_dim + i] = __float2half_rn(k[t * ld + i]);
    vc[slot * kv_dim + i] = __float2half_rn(v[t * ld + i]);
  }
}

// Block-wide max and sum of one value per thread (blockDim.x a multiple of
// 32, at most 32 warps).
__device__ __forceinline__ float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // scratch may still be read from a previous call
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = fmaxf(v, scratch[w]);
  return v;
}
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v += scratch[w];
  return v;
}

// One block per (token, head), max(32, head_dim) threads: a thread per
// element. Every load is issued at once, in one round trip: each piece's max
// m_s and sum l_s (by one thread each; a serial loop over the pieces was a
// chain of dependent global loads, ~9 us at 32 pieces on the H200), and each
// thread's element of every piece (registers, kAttentionMaxSplits of them);
// then the block reduces m and l and every thread sums its element over the
// pieces (~2 us a layer less at batch 1 than loading the elements after the
// reductions, docs/PERFORMANCE-RUNS-13-17.md run 15). The sums go in the same order as
// before, so the bits are unchanged.
__global__ void kernel_attention_combine(AttentionArgs a, int splits) {
  __shared__ float weight[kAttentionMaxSplits];  // exp(m_s - max m) of each piece
  __shared__ float scratch[32];
  const int t = blockIdx.x, head = blockIdx.y;
  const int stride = kAttentionPartialHeader + a.head_dim;
  // positions is the step's input (AttentionArgs), not pass 1's output.
  const int pos = a.positions[t];
  const int used = pieces_used(pos, splits, a.least_piece);
  wait_then_release_next();
  const float* parts = a.partials + (int64_t(t) * a.n_heads + head) * splits * stride;
  const int e = threadIdx.x;
  static_assert(kAttentionMaxSplits % 32 == 0, "whole pieces a thread");
  constexpr int kPer = kAttentionMaxSplits / 32;  // pieces a thread reduces: blockDim >= 32
  float m[kPer], l[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int s = threadIdx.x + i * blockDim.x;
    m[i] = s < used ? parts[s * stride] : -INFINITY;
    l[i] = s < used ? parts[s * stride + 1] : 0.0f;
  }
  float vals[kAttentionMaxSplits];
#pragma unroll
  for (int s = 0; s < kAttentionMaxSplits; ++s)
    vals[s] = s < used && e < a.head_dim ? parts[s * stride + kAttentionPartialHeader + e] : 0.0f;
  float mine = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPer; ++i) mine = fmaxf(mine, m[i]);
  const float mm = block_max(mine, scratch);
  float lsum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int s = threadIdx.x + i * blockDim.x;
    if (s >= used) break;
    const float w = m[i] == -INFINITY ? 0.0f : __expf(m[i] - mm);
    weight[s] = w;
    lsum += l[i] * w;
  }
  const float ll = block_sum(lsum, scratch);  // its barriers also publish weight[]
  if (e >= a.head_dim) return;  // whole warps where the outputs are quantized (head_dim % 32 == 0)
  float v = 0.0f;
#pragma unroll
  for (int s = 0; s < kAttentionMaxSplits; ++s)
    if (s < used) v += vals[s] * weight[s];
  const float o = v / ll;
  a.out[int64_t(t) * a.ldo + head * a.head_dim + e] = o;
  // With out_q or narrow_x the block has head_dim threads: whole warps,
  // each warp one block of 32 values.
  if (a.out_q.q)
    quantize_block_warp(o, a.out_q, t, int64_t(a.n_heads) * a.head_dim,
                        (int64_t(head) * a.head_dim + e) / kActivationBlock);
  if (a.narrow_x)
    write_narrow_x_warp(o, threadIdx.x & 31, (int64_t(head) * a.head_dim + e) / kActivationBlock,
                        a.narrow_row0 + t, a.narrow_n8,
                        int64_t(a.n_heads) * a.head_dim / kActivationBlock, a.narrow_x);
}

}  // namespace

void launch_kv_write(const float* k, const float* v, int64_t ld, int n_tokens, int kv_dim,
                     const int32_t* slots, KvLayerView cache, cudaStream_t stream) {
  if (n_tokens == 0) return;
  launch_kernel(kernel_kv_write, n_tokens, 128, 0, stream, k, v, ld, kv_dim, slots,
                reinterpret_cast<__half*>(cache.k), reinterpret_cast<__half*>(cache.v));
  CUDA_CHECK(cudaGetLastError());
}

void launch_attention_combine(const AttentionArgs& a, int splits, cudaStream_t stream) {
  // With out_q, head_dim threads (a multiple of 32): each warp quantizes one block.
  const int threads = a.head_dim < 32 ? 32 : a.head_dim;
  launch_kernel(kernel_attention_combine, dim3(unsigned(a.n_tokens), unsigned(a.n_heads)), threads,
                0, stream, a, splits);
  CUDA_CHECK(cudaGetLastError());
}

int attention_launch_least_piece(const AttentionArgs& a) {
  return attention_mma_applies(a)    ? attention_mma_least_piece(a)
         : attention_wmma_applies(a) ? attention_wmma_least_piece(a)
                                     : a.least_piece;
}

int attention_launch_warps(const AttentionArgs& a) {
  return attention_mma_applies(a)    ? attention_mma_warps(a)
         : attention_wmma_applies(a) ? attention_wmma_warps(a)
                                     : kAttentionWarps;
}

int attention_launch_pieces(const AttentionArgs& a) {
  if (attention_mma_applies(a)) return attention_mma_pieces(a);
  if (attention_wmma_applies(a)) return attention_wmma_pieces(a);
  const int group = a.n_kv_heads > 0 ? a.n_heads / a.n_kv_heads : 1;
  return with_head_dim_group(a.head_dim, group, [&](auto hd, auto g) {
    constexpr int HD = decltype(hd)::value, G = decltype(g)::value;
    return a.rope.inv_freq ? attention_pieces<HD, G, Fp16KvReader, true>(a)
                           : attention_pieces<HD, G, Fp16KvReader, false>(a);
  });
}

void launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  const Fp16KvReader reader{reinterpret_cast<const __half*>(a.cache.k), reinterpret_cast<const __half*>(a.cache.v)};
  if (attention_mma_applies(a)) return launch_attention_mma(a, reader, stream);
  if (attention_wmma_applies(a)) return launch_attention_wmma(a, reader, stream);
  if (a.rope.inv_freq) launch_attention_split_k<true>(a, reader, stream);
  else launch_attention_split_k<false>(a, reader, stream);
}

}  // namespace voltad::kernels
