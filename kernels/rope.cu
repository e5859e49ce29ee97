// RoPE: one thread per rotated pair. Angles are p * inv_freq[i] in fp32 (one
// rounding) and sincosf is the accurate one, not __sinf: positions reach
// tens of thousands, where the fast intrinsics lose the phase.
#include <cstdio>
#include <cstdlib>

#include <cuda_fp16.h>
#include "kernels/cuda_check.h"

#include "kernels/launch.cuh"
#include "kernels/rope.h"

namespace voltad::kernels {

__global__ void kernel_rope(float* x, int64_t ld, int rows, int n_heads, int head_dim, int rot_dims,
                            const int32_t* positions, const float* inv_freq, bool neox) {
  const int half = rot_dims / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(rows) * n_heads * half) return;
  const int i = int(idx % half);
  const int head = int((idx / half) % n_heads);
  const int row = int(idx / (int64_t(half) * n_heads));
  float* h = x + row * ld + int64_t(head) * head_dim;
  const int i0 = neox ? i : 2 * i;
  const int i1 = neox ? i + half : 2 * i + 1;
  // The angle before the wait (positions and inv_freq: see rope.h).
  float s, c;
  sincosf(float(positions[row]) * inv_freq[i], &s, &c);
  wait_then_release_next();
  const float a = h[i0], b = h[i1];
  h[i0] = a * c - b * s;
  h[i1] = a * s + b * c;
}

void launch_rope(float* x, int64_t ld, int rows, int n_heads, int head_dim, int rot_dims,
                 const int32_t* positions, const float* inv_freq, RopeOrdering ordering,
                 cudaStream_t stream) {
  if (rot_dims <= 0 || rot_dims % 2 != 0 || rot_dims > head_dim ||
      int64_t(n_heads) * head_dim > ld || rows < 0) {
    std::fprintf(stderr, "launch_rope: bad shape rows=%d heads=%d head_dim=%d rot=%d ld=%lld\n",
                 rows, n_heads, head_dim, rot_dims, (long long)ld);
    std::abort();
  }
  const int64_t n = int64_t(rows) * n_heads * (rot_dims / 2);
  if (n == 0) return;
  const int threads = 256;
  launch_kernel(kernel_rope, unsigned((n + threads - 1) / threads), threads, 0, stream, x, ld, rows,
                n_heads, head_dim, rot_dims, positions, inv_freq, ordering == RopeOrdering::NeoX);
  CUDA_CHECK(cudaGetLastError());
}

// One thread per rotated pair of every q and k head; the k threads also
// store their pair of k (rotated) and of v in the cache.
__global__ void kernel_rope_qk_kv_write(float* q, int64_t ldq, float* k, const float* v,
                                        int64_t ldkv, int rows, int n_heads, int n_kv_heads,
                                        int head_dim, const int32_t* positions,
                                        const float* inv_freq, bool neox, const int32_t* slots,
                                        __half* kc, __half* vc) {
  const int half = head_dim / 2, heads = n_heads + n_kv_heads;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(rows) * heads * half) return;
  const int i = int(idx % half);
  const int head = int((idx / half) % heads);
  const int row = int(idx / (int64_t(half) * heads));
  const bool is_k = head >= n_heads;
  const int kh = head - n_heads;
  float* h =
      is_k ? k + row * ldkv + int64_t(kh) * head_dim : q + row * ldq + int64_t(head) * head_dim;
  const int i0 = neox ? i : 2 * i;
  const int i1 = neox ? i + half : 2 * i + 1;
  // The angle and the slot before the wait (see rope.h).
  float s, c;
  sincosf(float(positions[row]) * inv_freq[i], &s, &c);
  const int64_t slot = is_k ? int64_t(slots[row]) : 0;
  wait_then_release_next();
  const float a = h[i0], b = h[i1];
  const float r0 = a * c - b * s, r1 = a * s + b * c;
  h[i0] = r0;
  h[i1] = r1;
  if (is_k) {
    const int64_t kv_dim = int64_t(n_kv_heads) * head_dim;
    const int64_t base = slot * kv_dim + int64_t(kh) * head_dim;
    kc[base + i0] = __float2half_rn(r0);
    kc[base + i1] = __float2half_rn(r1);
    const float* vh = v + row * ldkv + int64_t(kh) * head_dim;
    vc[base + i0] = __float2half_rn(vh[i0]);
    vc[base + i1] = __float2half_rn(vh[i1]);
  }
}

void launch_rope_qk_kv_write(float* q, int64_t ldq, float* k, const float* v, int64_t ldkv,
                             int rows, int n_heads, int n_kv_heads, int head_dim,
                             const int32_t* positions, const float* inv_freq, RopeOrdering ordering,
                             const int32_t* slots, KvLayerView cache, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || int64_t(n_heads) * head_dim > ldq ||
      int64_t(n_kv_heads) * head_dim > ldkv || rows < 0) {
    std::fprintf(stderr, "launch_rope_qk_kv_write: bad shape rows=%d heads=%d/%d head_dim=%d\n",
                 rows, n_heads, n_kv_heads, head_dim);
    std::abort();
  }
  const int64_t n = int64_t(rows) * (n_heads + n_kv_heads) * (head_dim / 2);
  if (n == 0) return;
  const int threads = 256;
  launch_kernel(kernel_rope_qk_kv_write, unsigned((n + threads - 1) / threads), threads, 0, stream,
                q, ldq, k, v, ldkv, rows, n_heads, n_kv_heads, head_dim, positions, inv_freq,
                ordering == RopeOrdering::NeoX, slots, reinterpret_cast<__half*>(cache.k),
                reinterpret_cast<__half*>(cache.v));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
