// Causal prefill attention on tensor cores. Contract in attention_prefill.h.
//
// A block (4 warps) owns 64 query tokens of one head; warp w owns tokens
// 16w..16w+15 of them. It walks the keys in tiles of 64 (four cache blocks),
// from 0 to the block's last query position:
//   1. all threads copy the tile's K and V rows (fp16, 16-byte pieces) from
//      the paged cache into shared memory; keys past the chunk are zeros;
//   2. each warp: S = Q K^T (16 x 64, fp32) with wmma, stored to its own
//      shared scratch; lane pair (2r, 2r+1) owns row r, 32 columns each:
//      causal mask, running max m, P = 2^(S - m) rounded to fp16 into shared
//      memory, running sum l, and the rescale factor 2^(m_old - m_new);
//   3. O (16 x head_dim accumulators) is rescaled row by row, then O += P V.
// Q is staged once, multiplied by scale * log2(e) so the softmax runs in
// base 2 (exp2). A warp skips a tile in which none of its rows sees a key.
//
// Rows of accumulator fragments: the element-to-position mapping of wmma
// fragments is unspecified, but it is one fixed mapping per fragment type.
// Loading a 16x16 matrix whose every entry is its row index into an
// accumulator fragment tells each lane which row each of its elements sits
// in; the per-row softmax factors are then applied to O in registers.
#include <cuda_fp16.h>
#include <mma.h>

#include "kernels/attention_prefill.h"
#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/wmma_scores.cuh"

namespace voltad::kernels {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kPrefillWarps = 4;
constexpr int kQTile = 16 * kPrefillWarps;  // query tokens per block
constexpr int kKeyTile = 64;                // keys per step
constexpr int kSLd = kKeyTile + 4;          // floats, per-warp score rows
constexpr int kPLd = kKeyTile + 8;          // halves, per-warp probability rows
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory of one block, in bytes: Q, K, V tiles (fp16 rows of D + 8),
// then per warp: scores (16 x kSLd fp32), probabilities (16 x kPLd fp16),
// and 32 floats of row factors. At the end, K and V's space holds each
// warp's 16 x (D + 4) fp32 output rows.
template <int D>
struct PrefillSmem {
  static constexpr int kLd = D + 8;
  static constexpr size_t kTileBytes = size_t(64) * kLd * 2;
  static constexpr size_t kQ = 0, kK = kTileBytes, kV = 2 * kTileBytes;
  static constexpr size_t kS = 3 * kTileBytes;
  static constexpr size_t kP = kS + size_t(kPrefillWarps) * 16 * kSLd * 4;
  static constexpr size_t kRows = kP + size_t(kPrefillWarps) * 16 * kPLd * 2;
  static constexpr size_t kBytes = kRows + size_t(kPrefillWarps) * 32 * 4;
  static constexpr int kOutLd = D + 4;
  static_assert(size_t(kPrefillWarps) * 16 * kOutLd * 4 <= 2 * kTileBytes,
                "output staging fits in K and V");
  static_assert(kTileBytes % 32 == 0 && kS % 32 == 0 && kP % 32 == 0,
                "wmma needs 32-byte alignment");
};

template <int D>
__global__ void __launch_bounds__(kPrefillWarps * 32)
    kernel_attention_prefill(PrefillAttentionArgs a) {
  wait_for_previous_kernel();
  using L = PrefillSmem<D>;
  constexpr int LD = L::kLd, FRAGS = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sq = reinterpret_cast<__half*>(smem + L::kQ);
  __half* sk = reinterpret_cast<__half*>(smem + L::kK);
  __half* sv = reinterpret_cast<__half*>(smem + L::kV);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float* s_scores = reinterpret_cast<float*>(smem + L::kS) + warp * 16 * kSLd;
  __half* s_probs = reinterpret_cast<__half*>(smem + L::kP) + warp * 16 * kPLd;
  float* s_factor =
      reinterpret_cast<float*>(smem + L::kRows) + warp * 32;  // [16] rescale, [16] 1/l

  const int t0 = (gridDim.x - 1 - blockIdx.x) * kQTile;  // the longest tiles start first
  const int head = blockIdx.y;
  const int kvh = head / (a.n_heads / a.n_kv_heads);
  const int64_t kv_dim = int64_t(a.n_kv_heads) * D;
  const int rows_here = min(kQTile, a.n - t0);
  const int key_end = a.start + t0 + rows_here;  // keys [0, key_end) are visible to some row
  const int tiles = (key_end + kKeyTile - 1) / kKeyTile;

  // Q tile, scaled, fp16 (rows past the chunk: zeros).
  const float q_scale = a.scale * kLog2e;
  for (int i = tid; i < kQTile * D / 4; i += kPrefillWarps * 32) {
    const int r = i / (D / 4), c = (i % (D / 4)) * 4;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (r < rows_here) {
      const float* p = a.q + int64_t(t0 + r) * a.ldq + head * D + c;
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = p[e] * q_scale;
    }
    __half2* dst = reinterpret_cast<__half2*>(sq + r * LD + c);
    dst[0] = __floats2half2_rn(v[0], v[1]);
    dst[1] = __floats2half2_rn(v[2], v[3]);
  }

  // Which row each accumulator element sits in.
  for (int i = lane; i < 256; i += 32) s_scores[(i >> 4) * kSLd + (i & 15)] = float(i >> 4);
  __syncwarp();
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> row_map;
  wmma::load_matrix_sync(row_map, s_scores, kSLd, wmma::mem_row_major);
  int row_of[row_map.num_elements];
#pragma unroll
  for (int e = 0; e < row_map.num_elements; ++e) row_of[e] = int(row_map.x[e]);
  __syncwarp();

  // Lane pair (2r, 2r+1) keeps row r's softmax state; padding rows (past
  // the chunk) mirror the last real row and are never written out.
  const int r = lane >> 1, side = lane & 1;
  const int q_pos = a.start + t0 + min(warp * 16 + r, rows_here - 1);
  const bool warp_active = warp * 16 < rows_here;
  const int warp_last_pos = a.start + t0 + min(warp * 16 + 15, rows_here - 1);
  float m_run = -INFINITY, l_run = 0.0f;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[FRAGS];
#pragma unroll
  for (int f = 0; f < FRAGS; ++f) wmma::fill_fragment(o[f], 0.0f);

  for (int kt = 0; kt < tiles; ++kt) {
    const int k0 = kt * kKeyTile;
    __syncthreads();  // the previous tile's K and V are no longer read
    for (int i = tid; i < kKeyTile * D / 8; i += kPrefillWarps * 32) {
      const int kr = i / (D / 8), c = (i % (D / 8)) * 8;
      const int p = k0 + kr;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (p < key_end) {
        const int64_t slot = int64_t(__ldg(a.block_table + p / kKvBlockTokens)) * kKvBlockTokens +
                             p % kKvBlockTokens;
        const int64_t at = slot * kv_dim + int64_t(kvh) * D + c;
        kv = load_activation(reinterpret_cast<const uint4*>(a.cache.k + at));
        vv = load_activation(reinterpret_cast<const uint4*>(a.cache.v + at));
      }
      *reinterpret_cast<uint4*>(sk + kr * LD + c) = kv;
      *reinterpret_cast<uint4*>(sv + kr * LD + c) = vv;
    }
    __syncthreads();
    if (!warp_active || k0 > warp_last_pos) continue;  // no key of this tile is visible here

      // S = Q K^T for the warp's 16 rows.
#pragma unroll
    for (int j = 0; j < kKeyTile / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s;
      wmma::fill_fragment(s, 0.0f);
      wmma_scores<D>(s, sq + warp * 16 * LD, sk + j * 16 * LD, LD);
      wmma::store_matrix_sync(s_scores + j * 16, s, kSLd, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of row r, columns 32*side .. 32*side+31.
    const float* srow = s_scores + r * kSLd + side * 32;
    const int p0 = k0 + side * 32;
    float sc[32];
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      sc[c] = p0 + c <= q_pos ? srow[c] : -INFINITY;
      mx = fmaxf(mx, sc[c]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    const float m_new = fmaxf(m_run, mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float rescale = exp2f(m_run - m_use);  // 0 while nothing was seen
    float sum = 0.0f;
    __half2* prow = reinterpret_cast<__half2*>(s_probs + r * kPLd + side * 32);
#pragma unroll
    for (int c = 0; c < 32; c += 2) {
      const float e0 = exp2f(sc[c] - m_use), e1 = exp2f(sc[c + 1] - m_use);
      sum += e0 + e1;
      prow[c / 2] = __floats2half2_rn(e0, e1);
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    l_run = l_run * rescale + sum;
    m_run = m_new;
    if (side == 0) s_factor[r] = rescale;
    __syncwarp();

    // O = O * rescale (per row) + P V.
#pragma unroll
    for (int f = 0; f < FRAGS; ++f)
#pragma unroll
      for (int e = 0; e < o[f].num_elements; ++e) o[f].x[e] *= s_factor[row_of[e]];
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pa;
      wmma::load_matrix_sync(pa, s_probs + kk * 16, kPLd);
#pragma unroll
      for (int f = 0; f < FRAGS; ++f) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
        wmma::load_matrix_sync(vb, sv + kk * 16 * LD + f * 16, LD);
        wmma::mma_sync(o[f], pa, vb, o[f]);
      }
    }
    __syncwarp();  // s_scores / s_probs are rewritten by the next tile
  }

  // O / l, through shared memory (K and V's space) to the output rows.
  if (side == 0) s_factor[16 + r] = 1.0f / l_run;
  __syncwarp();
#pragma unroll
  for (int f = 0; f < FRAGS; ++f)
#pragma unroll
    for (int e = 0; e < o[f].num_elements; ++e) o[f].x[e] *= s_factor[16 + row_of[e]];
  __syncthreads();  // every warp is done with K and V
  float* so = reinterpret_cast<float*>(smem + L::kK) + warp * 16 * L::kOutLd;
#pragma unroll
  for (int f = 0; f < FRAGS; ++f)
    wmma::store_matrix_sync(so + f * 16, o[f], L::kOutLd, wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < 16 * D; i += 32) {
    const int rr = i / D, d = i % D;
    const int t = t0 + warp * 16 + rr;
    if (t < a.n) a.out[int64_t(t) * a.ldo + head * D + d] = so[rr * L::kOutLd + d];
  }
}

template <int D>
void launch_head_dim(const PrefillAttentionArgs& a, cudaStream_t stream) {
  using L = PrefillSmem<D>;
  static const bool opted_in = [] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel_attention_prefill<D>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kBytes)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(unsigned((a.n + kQTile - 1) / kQTile), unsigned(a.n_heads));
  launch_kernel(kernel_attention_prefill<D>, grid, kPrefillWarps * 32, L::kBytes, stream, a);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_attention_prefill(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  VOLTAD_KERNEL_REQUIRE(
      a.n > 0 && a.start >= 0 && a.q && a.out && a.block_table && a.cache.k && a.cache.v,
      "prefill attention: tokens, positions and buffers");
  VOLTAD_KERNEL_REQUIRE(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0,
                        "heads must divide into KV heads");
  VOLTAD_KERNEL_REQUIRE(prefill_attention_supported(a.head_dim),
                        "prefill attention: head_dim 64 or 128");
  if (a.head_dim == 64)
    launch_head_dim<64>(a, stream);
  else
    launch_head_dim<128>(a, stream);
}

}  // namespace voltad::kernels
