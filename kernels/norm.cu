// RMSNorm kernels. kernel_rmsnorm: one block per row; the block's threads
// stride over the row, sum squares, reduce through shared memory, then
// scale (rows are a few thousand floats: the second pass re-reads x from
// L1). kernel_rmsnorm_blocks (the norms that also quantize or write the
// narrow GEMM's x): several blocks per row, see below.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/narrow_x.cuh"
#include "kernels/norm.h"
#include "kernels/quantize_warp.cuh"

namespace voltad::kernels {

// With delta != null: residual row += delta row first (written back), and
// the sum runs over the updated values.
__global__ void kernel_rmsnorm(float* x, const float* delta, int64_t ldx, const float* weight,
                               float* out, int64_t ldo, int dim, float eps) {
  wait_then_release_next();
  __shared__ float scratch[32];
  float* row = x + blockIdx.x * ldx;
  float sum = 0.0f;
  for (int k = threadIdx.x; k < dim; k += blockDim.x) {
    float v = row[k];
    if (delta) {
      v += delta[blockIdx.x * ldx + k];
      row[k] = v;
    }
    sum = fmaf(v, v, sum);
  }
  sum = block_sum(sum, scratch);
  const float inv = rsqrtf(sum / float(dim) + eps);
  float* dst = out + blockIdx.x * ldo;
  for (int k = threadIdx.x; k < dim; k += blockDim.x) dst[k] = row[k] * inv * weight[k];
}

// RMSNorm whose output also goes out in the next matrix product's form, in
// one pass, spread over several blocks per row (grid: blocks of 32 values /
// warps, rows) so that each warp quantizes one block of 32 values: one block
// per row was 4 blocks a warp, a chain of ~80 shuffles (~4 us a norm at
// batch 1 on the H200, measured by leaving it out of the decode graph,
// docs/PERFORMANCE-RUNS-13-17.md run 15). Every block sums the squares of the whole row
// itself (the row is a few KB, in L2), in the order kernel_rmsnorm sums them
// (thread t takes t, t + threads, ...; threads_for(dim) threads), so the
// bytes equal launch_rmsnorm's. The warp then writes its block to `out` and
// to `put`: quantized for the dp4a matvecs (QuantizePut,
// kernels/quantize_warp.cuh) or in the narrow sm_80 GEMM's x layout
// (NarrowXPut, kernels/narrow_x.cuh). Rows from `rows` on (NarrowXPut's rows
// up to a multiple of 8) give put only zeros. dim % 32 == 0.
template <class Put>
__global__ void kernel_rmsnorm_blocks(const float* x, int64_t ldx, const float* weight, float* out,
                                      int64_t ldo, int rows, int dim, float eps, Put put) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int b = int(blockIdx.x) * warps + (threadIdx.x >> 5);  // this warp's block of 32
  const int k = b * kActivationBlock + lane;
  const bool mine = k < dim;
  // The norm's weights are no kernel's output: loaded before the wait.
  const float w = mine ? weight[k] : 0.0f;
  wait_then_release_next();
  __shared__ float scratch[32];
  const int row = int(blockIdx.y);
  if (row >= rows) {
    if (mine) put(0.0f, b, lane, row, dim);
    return;
  }
  const float* xr = x + row * ldx;
  const float v = mine ? xr[k] : 0.0f;
  float sum = 0.0f;
#pragma unroll 4
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum = fmaf(xr[i], xr[i], sum);
  sum = block_sum(sum, scratch);
  if (!mine) return;  // whole warps: dim % 32 == 0
  const float inv = rsqrtf(sum / float(dim) + eps);
  const float o = v * inv * w;
  out[row * ldo + k] = o;
  put(o, b, lane, row, dim);
}

struct QuantizePut {
  QuantizedActivations xq;
  __device__ void operator()(float o, int b, int, int row, int dim) const {
    quantize_block_warp(o, xq, row, dim, b);
  }
};

struct NarrowXPut {
  uint32_t* xp;
  int n8;
  __device__ void operator()(float o, int b, int lane, int row, int dim) const {
    write_narrow_x_warp(o, lane, b, row, n8, dim / kActivationBlock, xp);
  }
};

// One warp per head: heads are short (64-256 values).
__global__ void kernel_head_rmsnorm(float* x, int64_t ld, int n_heads, int head_dim,
                                    const float* weight, float eps, int total_heads) {
  wait_then_release_next();
  const int head = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (head >= total_heads) return;
  const int lane = threadIdx.x & 31;
  float* h = x + (head / n_heads) * ld + int64_t(head % n_heads) * head_dim;
  float sum = 0.0f;
  for (int k = lane; k < head_dim; k += 32) sum = fmaf(h[k], h[k], sum);
  const float inv = rsqrtf(warp_sum(sum) / float(head_dim) + eps);
  for (int k = lane; k < head_dim; k += 32) h[k] = h[k] * inv * weight[k];
}

namespace {

int threads_for(int dim) {
  int t = (dim / 4 + 31) / 32 * 32;  // about 4 values per thread
  return t < 32 ? 32 : (t > 1024 ? 1024 : t);
}

void check_args(const char* who, int rows, int dim, int64_t ld, int64_t ldo) {
  if (rows < 0 || dim <= 0 || ld < dim || ldo < dim) {
    std::fprintf(stderr, "%s: bad shape rows=%d dim=%d ld=%lld ldo=%lld\n", who, rows, dim,
                 (long long)ld, (long long)ldo);
    std::abort();
  }
}

}  // namespace

void launch_rmsnorm(const float* x, int64_t ldx, const float* weight, float* out, int64_t ldo,
                    int rows, int dim, float eps, cudaStream_t stream) {
  check_args("launch_rmsnorm", rows, dim, ldx, ldo);
  if (rows == 0) return;
  // x is only written when delta is given; the cast keeps one kernel.
  launch_kernel(kernel_rmsnorm, rows, threads_for(dim), 0, stream, const_cast<float*>(x), nullptr,
                ldx, weight, out, ldo, dim, eps);
  CUDA_CHECK(cudaGetLastError());
}

void launch_add_rmsnorm(float* residual, const float* delta, int64_t ld, const float* weight,
                        float* out, int64_t ldo, int rows, int dim, float eps,
                        cudaStream_t stream) {
  check_args("launch_add_rmsnorm", rows, dim, ld, ldo);
  if (rows == 0) return;
  launch_kernel(kernel_rmsnorm, rows, threads_for(dim), 0, stream, residual, delta, ld, weight, out,
                ldo, dim, eps);
  CUDA_CHECK(cudaGetLastError());
}

namespace {

// Whether the address ranges that rows x dim of x (stride ldx) and of out
// (stride ldo) span meet: conservative (two interleaved strided layouts
// that share no element count as overlapping; the backend has none).
bool overlaps(const float* x, int64_t ldx, const float* out, int64_t ldo, int rows, int dim) {
  if (rows == 0) return false;
  const uintptr_t x0 = reinterpret_cast<uintptr_t>(x), o0 = reinterpret_cast<uintptr_t>(out);
  const uintptr_t x1 = x0 + uintptr_t((rows - 1) * ldx + dim) * sizeof(float);
  const uintptr_t o1 = o0 + uintptr_t((rows - 1) * ldo + dim) * sizeof(float);
  return x0 < o1 && o0 < x1;
}

// The grid of kernel_rmsnorm_blocks: threads_for(dim) threads a block (the
// summation order of kernel_rmsnorm), as many blocks per row as it takes
// for one warp per 32 values; rows on y (at most 65,535).
constexpr int kNormMaxRows = 65535;
dim3 norm_blocks_grid(int rows, int dim) {
  const int warps = threads_for(dim) / 32;
  const int blocks = dim / kActivationBlock;
  return dim3(unsigned((blocks + warps - 1) / warps), unsigned(rows));
}

}  // namespace

void launch_rmsnorm_quantize(const float* x, int64_t ldx, const float* weight, float* out,
                             int64_t ldo, int rows, int dim, float eps, QuantizedActivations xq,
                             cudaStream_t stream) {
  check_args("launch_rmsnorm_quantize", rows, dim, ldx, ldo);
  VOLTAD_KERNEL_REQUIRE(dim % kActivationBlock == 0,
                        "launch_rmsnorm_quantize: dim must be a multiple of 32");
  VOLTAD_KERNEL_REQUIRE(
      !overlaps(x, ldx, out, ldo, rows, dim),
      "launch_rmsnorm_quantize: out must not overlap x (each row's blocks read all of it)");
  VOLTAD_KERNEL_REQUIRE(rows <= kNormMaxRows,
                        "launch_rmsnorm_quantize: at most 65,535 rows a launch");
  if (rows == 0) return;
  launch_kernel(kernel_rmsnorm_blocks<QuantizePut>, norm_blocks_grid(rows, dim), threads_for(dim),
                0, stream, x, ldx, weight, out, ldo, rows, dim, eps, QuantizePut{xq});
  CUDA_CHECK(cudaGetLastError());
}

bool launch_rmsnorm_narrow_x(const float* x, int64_t ldx, const float* weight, float* out,
                             int64_t ldo, int rows, int dim, float eps, void* narrow_x,
                             cudaStream_t stream) {
  check_args("launch_rmsnorm_narrow_x", rows, dim, ldx, ldo);
  VOLTAD_KERNEL_REQUIRE(dim % kActivationBlock == 0,
                        "launch_rmsnorm_narrow_x: dim must be a multiple of 32");
  VOLTAD_KERNEL_REQUIRE(
      !overlaps(x, ldx, out, ldo, rows, dim),
      "launch_rmsnorm_narrow_x: out must not overlap x (each row's blocks read all of it)");
  VOLTAD_KERNEL_REQUIRE(rows <= kNormMaxRows - 7,
                        "launch_rmsnorm_narrow_x: at most 65,528 rows a launch");
  if (rows == 0) return false;
  const int n8 = (rows + 7) / 8 * 8;
  auto* xp = static_cast<uint32_t*>(narrow_x);
  launch_kernel(kernel_rmsnorm_blocks<NarrowXPut>, norm_blocks_grid(n8, dim), threads_for(dim), 0,
                stream, x, ldx, weight, out, ldo, rows, dim, eps, NarrowXPut{xp, n8});
  CUDA_CHECK(cudaGetLastError());
  return true;
}

void launch_head_rmsnorm(float* x, int64_t ld, int rows, int n_heads, int head_dim,
                         const float* weight, float eps, cudaStream_t stream) {
  check_args("launch_head_rmsnorm", rows, head_dim, ld, ld);
  if (int64_t(n_heads) * head_dim > ld) {
    std::fprintf(stderr, "launch_head_rmsnorm: n_heads * head_dim > ld\n");
    std::abort();
  }
  const int total = rows * n_heads;
  if (total == 0) return;
  const int warps = 4;
  launch_kernel(kernel_head_rmsnorm, (total + warps - 1) / warps, warps * 32, 0, stream, x, ld,
                n_heads, head_dim, weight, eps, total);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
