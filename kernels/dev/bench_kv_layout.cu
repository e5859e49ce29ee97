// How fast the decode attention's cache reads can be, by layout (not part of
// the build). The KV cache keeps a cache block's 16 positions as whole rows
// of every KV head ([block][position][kv head][head_dim]): one head's share
// of a block is 16 pieces of 256 bytes (head_dim 128, fp16) at a 2 KB
// stride, and the 8 heads' blocks read those rows in turn. This times reads
// of Llama-3-8B's cache (8 KV heads, head_dim 128) in the attention's pattern
// (a block a (sequence, KV head, piece), 4 warps, each warp walking cache
// blocks warp, warp + 4, ..., its next block's K and V in flight while it
// consumes the last) with no arithmetic, in that layout and with each head's
// share of a block contiguous ([block][kv head][position][head_dim]: 4 KB),
// against a plain read of the same bytes. If the rows' layout held the reads
// back, the head-major reads would be faster than the row-major ones.
//   nvcc -std=c++17 -O3 -I. -arch=sm_90 kernels/dev/bench_kv_layout.cu -o /tmp/bench_kv_layout
//   /tmp/bench_kv_layout
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/dev/bench_timing.cuh"

namespace {

constexpr int kHeads = 8, kHd = 128, kKvDim = kHeads * kHd, kBlockTokens = 16;
constexpr int kWarps = 4;
constexpr int kLoads = kBlockTokens / 2;  // a lane's 16-byte loads of a block's K (or V)

// The offset (in halves) of lane piece c of row r of head h's share of cache
// block b.
template <bool kHeadMajor>
__device__ __forceinline__ int64_t at(int64_t b, int h, int r, int c) {
  if constexpr (kHeadMajor)
    return b * kBlockTokens * kKvDim + int64_t(h) * kBlockTokens * kHd + r * kHd + c * 8;
  else
    return b * kBlockTokens * kKvDim + int64_t(r) * kKvDim + h * kHd + c * 8;
}

// grid (sequences, heads, pieces): each block walks its piece of `blocks`
// cache blocks of its sequence (blocks s * per_seq, ...), a warp every
// kWarps-th, with the next block's loads issued before the last's are used.
template <bool kHeadMajor>
__global__ void __launch_bounds__(kWarps * 32)
    kernel_walk(const uint4* __restrict__ k, const uint4* __restrict__ v, int per_seq, int blocks,
                uint32_t* sink) {
  const int s = blockIdx.x, h = blockIdx.y, pieces = gridDim.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_piece = (blocks + pieces - 1) / pieces;
  const int first = blockIdx.z * per_piece, last = min(blocks, first + per_piece);
  const int r0 = lane / 16, c = lane % 16;
  const __half* kh = reinterpret_cast<const __half*>(k);
  const __half* vh = reinterpret_cast<const __half*>(v);
  uint4 kr[kLoads], vr[kLoads];
  uint32_t acc = 0;
  auto load = [&](int n) {
    const int64_t b = int64_t(s) * per_seq + n;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int64_t o = at<kHeadMajor>(b, h, r0 + 2 * i, c);
      kr[i] = __ldcg(reinterpret_cast<const uint4*>(kh + o));
      vr[i] = __ldcg(reinterpret_cast<const uint4*>(vh + o));
    }
  };
  int n = first + warp;
  if (n < last) load(n);
  for (; n < last; n += kWarps) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) acc ^= kr[i].x ^ kr[i].w ^ vr[i].y ^ vr[i].z;
    if (n + kWarps < last) load(n + kWarps);
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

// The same bytes read as one contiguous stream, 16 bytes a thread a step.
__global__ void kernel_stream(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 x = __ldcg(p + i);
    acc ^= x.x ^ x.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

}  // namespace

int main() {
  const int seqs_max = 32, ctx_max = 4096;
  const int per_seq = ctx_max / kBlockTokens + 1;
  const size_t halves = size_t(seqs_max) * per_seq * kBlockTokens * kKvDim;
  uint4* buf[2][2];  // two caches used in turn, so that no read finds the last in L2
  for (auto& c : buf)
    for (auto& p : c) {
      CUDA_CHECK(cudaMalloc(&p, halves * 2));
      CUDA_CHECK(cudaMemset(p, 0x2e, halves * 2));
    }
  uint32_t* sink;
  CUDA_CHECK(cudaMalloc(&sink, 4));
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("%-22s %-12s %6s %9s %8s\n", "case", "layout", "pieces", "us", "GB/s");
  for (int ctx : {512, 4096})
    for (int seqs : {1, 8, 32}) {
      const int blocks = (ctx + 1 + kBlockTokens - 1) / kBlockTokens;
      const double bytes = double(seqs) * blocks * kBlockTokens * kKvDim * 2 * 2;
      for (int pieces : {1, 2, 4, 8, 16}) {
        if (seqs * kHeads * pieces > 8 * sms || blocks / pieces < kWarps) continue;
        for (int layout = 0; layout < 2; ++layout) {
          int i = 0;
          const dim3 grid{unsigned(seqs), unsigned(kHeads), unsigned(pieces)};
          const float ms = bench_timing::time_ms(
              [&] {
                for (int r = 0; r < 8; ++r, ++i) {
                  const uint4* k = buf[i % 2][0];
                  const uint4* v = buf[i % 2][1];
                  if (layout)
                    kernel_walk<true><<<grid, kWarps * 32>>>(k, v, per_seq, blocks, sink);
                  else
                    kernel_walk<false><<<grid, kWarps * 32>>>(k, v, per_seq, blocks, sink);
                }
              },
              nullptr, 4);
          CUDA_CHECK(cudaGetLastError());
          const double us = ms * 1e3 / 8;
          char name[64];
          std::snprintf(name, sizeof name, "b%d ctx %d", seqs, ctx);
          std::printf("%-22s %-12s %6d %9.2f %8.0f\n", name, layout ? "head-major" : "rows", pieces,
                      us, bytes / (us * 1e-6) / 1e9);
        }
      }
      // The same bytes as a stream (K, then V), all SMs.
      int i = 0;
      const int64_t n = int64_t(bytes / 2 / 16);
      const float ms = bench_timing::time_ms(
          [&] {
            for (int r = 0; r < 8; ++r, ++i) {
              kernel_stream<<<4 * sms, 256>>>(buf[i % 2][0], n, sink);
              kernel_stream<<<4 * sms, 256>>>(buf[i % 2][1], n, sink);
            }
          },
          nullptr, 4);
      const double us = ms * 1e3 / 8;
      char name[64];
      std::snprintf(name, sizeof name, "b%d ctx %d", seqs, ctx);
      std::printf("%-22s %-12s %6s %9.2f %8.0f\n", name, "stream x2", "-", us,
                  bytes / (us * 1e-6) / 1e9);
    }
  return 0;
}
