// RoPE: one thread per rotated pair. Angles are p * inv_freq[i] in fp32 (one
// rounding) and sincosf is the accurate one, not __sinf: positions reach
// tens of thousands, where the fast intrinsics lose the phase.
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.h"
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
  float s, c;
  sincosf(float(positions[row]) * inv_freq[i], &s, &c);
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
  kernel_rope<<<unsigned((n + threads - 1) / threads), threads, 0, stream>>>(
      x, ld, rows, n_heads, head_dim, rot_dims, positions, inv_freq,
      ordering == RopeOrdering::NeoX);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
