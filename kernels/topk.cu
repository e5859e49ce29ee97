// Top-k by radix select. Contract in topk.h.
//
// Values become order-preserving unsigned keys (flip the sign bit of
// positives, all bits of negatives; NaN -> 0, below -inf's key). A block
// selects the k largest (key, index) pairs of up to 4096 candidates held in
// shared memory:
//   1. four 8-bit radix passes over the keys: a 256-bin histogram of the
//      digit among candidates matching the digits found so far, and one warp
//      scanning it from the top finds the digit where the count of larger
//      candidates reaches k; this gives the k-th largest key T;
//   2. only if more candidates equal T than are still needed: four more
//      passes over ~index among those equal to T (lower index wins);
//   3. the winners go to k slots, and each finds its rank among the k
//      (key descending, index ascending): the output is sorted.
// At k = 1 a block finds its best pair by a reduction instead (the 4,096
// values never go to shared memory).
// Pass 1 (grid chunks x rows) does this per chunk of kTopKChunk values;
// pass 2 (one block per row) over the chunks' k candidates each. A row of at
// most kTopKChunk values takes pass 1 alone. A row with noise (RowNoise::on)
// is ranked by its Gumbel keys (kernels/gumbel.h) and reports its logits.
#include <climits>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/gumbel.h"
#include "kernels/launch.cuh"
#include "kernels/topk.h"

namespace voltad::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kCapacity = 4096;  // candidates per block

__device__ __forceinline__ uint32_t float_to_key(float f) {
  const uint32_t u = __float_as_uint(f);
  if (isnan(f)) return 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_to_float(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

struct SelectShared {
  uint32_t keys[kCapacity];
  int32_t ids[kCapacity];
  uint32_t hist[256];
  uint32_t win_keys[kTopKMax];
  int32_t win_ids[kTopKMax];
  int digit, above, equal, slots;
};

// One radix pass: among candidates i with match(i) and (value(i) & mask) ==
// prefix, the digit (value >> shift) & 255 at which the count of candidates
// with larger values reaches `remaining`. Updates prefix, mask, remaining;
// `equal` gets the count of candidates with that digit.
template <class Match, class Value>
__device__ void radix_pass(SelectShared& sm, int m, int shift, uint32_t& prefix, uint32_t& mask,
                           int& remaining, int& equal, Match match, Value value) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) sm.hist[i] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < m; i += blockDim.x) {
    if (!match(i)) continue;
    const uint32_t v = value(i);
    if ((v & mask) == prefix) atomicAdd(&sm.hist[(v >> shift) & 255], 1u);
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    // Lane l scans bins 255-8l down to 248-8l; lanes in order cover the
    // digits from the top, so an exclusive scan over lanes counts the
    // candidates above each lane's bins.
    const int lane = threadIdx.x;
    uint32_t c[8], local = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) local += (c[j] = sm.hist[255 - 8 * lane - j]);
    uint32_t inclusive = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t t = __shfl_up_sync(kFullMask, inclusive, o);
      if (lane >= o) inclusive += t;
    }
    uint32_t running = inclusive - local;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (running < uint32_t(remaining) && running + c[j] >= uint32_t(remaining)) {
        sm.digit = 255 - 8 * lane - j;
        sm.above = int(running);
        sm.equal = int(c[j]);
      }
      running += c[j];
    }
  }
  __syncthreads();
  prefix |= uint32_t(sm.digit) << shift;
  mask |= 255u << shift;
  remaining -= sm.above;
  equal = sm.equal;
}

// The k largest of sm.keys/ids[0..m) (k <= m, ids distinct) into
// sm.win_keys/ids[0..k), sorted.
__device__ void block_top_k(SelectShared& sm, int m, int k) {
  uint32_t key_t = 0, mask = 0;
  int remaining = k, equal = 0;
  auto any = [](int) { return true; };
  auto key_of = [&](int i) { return sm.keys[i]; };
  for (int shift = 24; shift >= 0; shift -= 8)
    radix_pass(sm, m, shift, key_t, mask, remaining, equal, any, key_of);
  // remaining of the `equal` candidates with key T are in; if not all, the
  // lowest indices (largest ~index) win.
  const bool ties = remaining < equal;
  uint32_t inv_t = 0;
  if (ties) {
    uint32_t inv_mask = 0;
    auto is_t = [&](int i) { return sm.keys[i] == key_t; };
    auto inv_id = [&](int i) { return ~uint32_t(sm.ids[i]); };
    for (int shift = 24; shift >= 0; shift -= 8)
      radix_pass(sm, m, shift, inv_t, inv_mask, remaining, equal, is_t, inv_id);
  }
  if (threadIdx.x == 0) sm.slots = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < m; i += blockDim.x) {
    const uint32_t key = sm.keys[i];
    const bool win = key > key_t || (key == key_t && (!ties || ~uint32_t(sm.ids[i]) >= inv_t));
    if (win) {
      const int slot = atomicAdd(&sm.slots, 1);
      sm.hist[slot] = key;  // hist is free now: k <= 64 slots of keys
      sm.hist[kTopKMax + slot] = uint32_t(sm.ids[i]);
    }
  }
  __syncthreads();
  for (int s = threadIdx.x; s < k; s += blockDim.x) {
    const uint32_t key = sm.hist[s];
    const int32_t id = int32_t(sm.hist[kTopKMax + s]);
    int rank = 0;
    for (int t = 0; t < k; ++t) {
      const uint32_t kt = sm.hist[t];
      const int32_t it = int32_t(sm.hist[kTopKMax + t]);
      rank += kt > key || (kt == key && it < id);
    }
    sm.win_keys[rank] = key;
    sm.win_ids[rank] = id;
  }
  __syncthreads();
}

// k = 1 (greedy, or a token drawn by its Gumbel keys): the block's best
// (key, index) by a reduction instead of the radix passes. A pair as one
// 64-bit code, key above and ~index below, orders as the passes do (ties to
// the lower index); 0 is below every candidate's code.
__device__ __forceinline__ uint64_t best_code(uint32_t key, int32_t id) {
  return (uint64_t(key) << 32) | uint64_t(~uint32_t(id));
}
__device__ __forceinline__ uint64_t larger(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

// Each thread's best code in; the block's in sm.win_keys[0] and
// sm.win_ids[0].
__device__ void block_best(SelectShared& sm, uint64_t code) {
  __shared__ uint64_t warp_best[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) code = larger(code, __shfl_xor_sync(0xffffffffu, code, o));
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = code;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t best = warp_best[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w) best = larger(best, warp_best[w]);
    sm.win_keys[0] = uint32_t(best >> 32);
    sm.win_ids[0] = int32_t(~uint32_t(best));
  }
  __syncthreads();
}

// Writes the block's winners: to the final output or to the chunk's
// candidate slots. raw_row: a noisy row's logits (the keys are not its
// values), else null.
__device__ void emit(const SelectShared& sm, int k, int32_t* ids_out, float* vals_out,
                     uint32_t* cand_keys, int32_t* cand_ids, const float* raw_row, int64_t n) {
  for (int s = threadIdx.x; s < k; s += blockDim.x) {
    if (cand_keys) {
      cand_keys[s] = sm.win_keys[s];
      cand_ids[s] = sm.win_ids[s];
    } else {
      const int32_t id = sm.win_ids[s];
      ids_out[s] = id;
      vals_out[s] = !raw_row ? key_to_float(sm.win_keys[s])
                    : id < n ? raw_row[id]
                             : __int_as_float(0x7FC00000);
    }
  }
}

// The row's noise, or null where it has none.
__device__ __forceinline__ const RowNoise* row_noise(const RowNoise* noise, int row) {
  return noise && noise[row].on ? noise + row : nullptr;
}

// Chunks shorter than k are padded with keys 0 (NaN's key) and distinct
// indices above any real one, which lose every tie.
__global__ void __launch_bounds__(kThreads)
    kernel_topk_chunks(const float* logits, int64_t ld, int64_t n, int k, bool final_pass,
                       uint32_t* cand_keys, int32_t* cand_ids, int32_t* out_ids, float* out_vals,
                       const RowNoise* noise) {
  wait_for_previous_kernel();
  __shared__ SelectShared sm;
  const int row = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  const int64_t begin = int64_t(chunk) * kTopKChunk;
  const int m = n - begin < kTopKChunk ? int(n - begin) : kTopKChunk;
  const float* src = logits + int64_t(row) * ld + begin;
  const RowNoise* rn = row_noise(noise, row);
  if (k == 1) {
    uint64_t best = 0;
    if (rn) {
      const uint64_t base = noise_base(*rn);
      const float t = rn->temperature;
      for (int i = threadIdx.x; i < m; i += blockDim.x)
        best = larger(best, best_code(float_to_key(noise_key(src[i], t, base, begin + i)),
                                      int32_t(begin + i)));
    } else {
      for (int i = threadIdx.x; i < m; i += blockDim.x)
        best = larger(best, best_code(float_to_key(src[i]), int32_t(begin + i)));
    }
    block_best(sm, best);
  } else if (rn) {
    const uint64_t base = noise_base(*rn);
    const float t = rn->temperature;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
      sm.keys[i] = float_to_key(noise_key(src[i], t, base, begin + i));
      sm.ids[i] = int32_t(begin + i);
    }
  } else {
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
      sm.keys[i] = float_to_key(src[i]);
      sm.ids[i] = int32_t(begin + i);
    }
  }
  if (k > 1) {
    for (int i = m + threadIdx.x; i < k; i += blockDim.x) {
      sm.keys[i] = 0;
      sm.ids[i] = INT_MAX - i;
    }
    __syncthreads();
    block_top_k(sm, max(m, k), k);
  }
  const int64_t slot = (int64_t(row) * chunks + chunk) * k;
  if (final_pass)
    emit(sm, k, out_ids + int64_t(row) * k, out_vals + int64_t(row) * k, nullptr, nullptr,
         rn ? logits + int64_t(row) * ld : nullptr, n);
  else
    emit(sm, k, nullptr, nullptr, cand_keys + slot, cand_ids + slot, nullptr, n);
}

__global__ void __launch_bounds__(kThreads)
    kernel_topk_merge(const uint32_t* cand_keys, const int32_t* cand_ids, int chunks, int k,
                      int32_t* out_ids, float* out_vals, const float* logits, int64_t ld, int64_t n,
                      const RowNoise* noise) {
  wait_for_previous_kernel();
  __shared__ SelectShared sm;
  const int row = blockIdx.x, m = chunks * k;
  if (k == 1) {
    uint64_t best = 0;
    for (int i = threadIdx.x; i < m; i += blockDim.x)
      best =
          larger(best, best_code(cand_keys[int64_t(row) * m + i], cand_ids[int64_t(row) * m + i]));
    block_best(sm, best);
  } else {
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
      sm.keys[i] = cand_keys[int64_t(row) * m + i];
      sm.ids[i] = cand_ids[int64_t(row) * m + i];
    }
    __syncthreads();
    block_top_k(sm, m, k);
  }
  emit(sm, k, out_ids + int64_t(row) * k, out_vals + int64_t(row) * k, nullptr, nullptr,
       row_noise(noise, row) ? logits + int64_t(row) * ld : nullptr, n);
}

}  // namespace

void launch_topk(const float* logits, int64_t ld, int rows, int64_t n, int k, int32_t* out_ids,
                 float* out_vals, void* scratch, cudaStream_t stream, const RowNoise* noise) {
  if (rows == 0) return;
  VOLTAD_KERNEL_REQUIRE(k >= 1 && k <= kTopKMax && k <= n, "topk: 1 <= k <= min(64, n)");
  VOLTAD_KERNEL_REQUIRE(ld >= n && logits && out_ids && out_vals, "topk: buffers and row stride");
  const int64_t chunks = (n + kTopKChunk - 1) / kTopKChunk;
  VOLTAD_KERNEL_REQUIRE(chunks * k <= kCapacity && n <= INT_MAX - kTopKMax,
                        "topk: row too long for k");
  VOLTAD_KERNEL_REQUIRE(rows <= 65535, "topk: at most 65535 rows");
  if (chunks == 1) {
    launch_kernel(kernel_topk_chunks, dim3(1, unsigned(rows)), kThreads, 0, stream, logits, ld, n,
                  k, true, nullptr, nullptr, out_ids, out_vals, noise);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  VOLTAD_KERNEL_REQUIRE(scratch != nullptr, "topk: scratch (topk_scratch_bytes)");
  uint32_t* cand_keys = static_cast<uint32_t*>(scratch);
  int32_t* cand_ids =
      reinterpret_cast<int32_t*>(cand_keys + size_t(rows) * size_t(chunks) * size_t(k));
  launch_kernel(kernel_topk_chunks, dim3(unsigned(chunks), unsigned(rows)), kThreads, 0, stream,
                logits, ld, n, k, false, cand_keys, cand_ids, nullptr, nullptr, noise);
  CUDA_CHECK(cudaGetLastError());
  launch_kernel(kernel_topk_merge, unsigned(rows), kThreads, 0, stream, cand_keys, cand_ids,
                int(chunks), k, out_ids, out_vals, logits, ld, n, noise);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
