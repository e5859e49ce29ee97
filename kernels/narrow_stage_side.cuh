// The narrow GEMM's staged formats (kernels/gemm_narrow.cu): what a lane
// reads of a staged chunk beside the stage's nibbles, a stage at a time.
// Plain CUDA: builds for sm_70 too. Included by kernels/gemm_narrow.cu only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device_common.cuh"
#include "kernels/gemm_decode.cuh"

namespace voltad::kernels::narrow_stage {

using namespace gemm_decode;

// Chunk<F>::load for the staged formats: no `quants` (the stage has them)
// and no Q4_K header (read once a stage); the other reads as GlobalMemory.
struct SideMemory {
  static __device__ __forceinline__ uint4 u128(const uint8_t*) { return make_uint4(0, 0, 0, 0); }
  static __device__ __forceinline__ uint4 u128i(const uint8_t*, int64_t) {
    return make_uint4(0, 0, 0, 0);
  }
  static __device__ __forceinline__ uint2 u64(const uint8_t* p) { return GlobalMemory::u64(p); }
  static __device__ __forceinline__ uint32_t u32(const uint8_t* p, int64_t i) {
    return GlobalMemory::u32(p, i);
  }
  static __device__ __forceinline__ uint32_t u16(const uint8_t* p, int64_t i) {
    return GlobalMemory::u16(p, i);
  }
};

// The rest of a staged chunk (its scales; Q6_K's crumbs too) for the
// lane's row, read once a stage for the stage's kStageChunks chunks where
// the rows are whole stages (kWholeX): a lane's loads a stage are then 1-3
// vector loads instead of 1-3 scalar loads a chunk. Each load of this kind
// touches 32 rows' cache lines (a lane a row), so its count, not its bytes,
// is what the L1 pays: Nsight Compute had the 8-token kernels' L1 87-90%
// busy (run 46 in docs/PERFORMANCE.md). load(r, cs, new_super) reads the
// stage at chunk cs, the 8-chunk super-block's data (Q4_K's header, Q6_K's
// d) only where new_super (else it is the stage before's); fill(ch, j)
// gives chunk j of the stage its fields but `q` (the stage's nibbles).
template <PackedFormat F>
struct StageSide {  // the formats not staged
  __device__ void load(const RowPointers&, int, bool) {}
  __device__ void fill(Chunk<F>&, int) const {}
};
template <>
struct StageSide<PackedFormat::Int4Sym32> {
  uint2 d;  // fp16 d of chunks 0-3
  __device__ void load(const RowPointers& r, int cs, bool) {
    d = *reinterpret_cast<const uint2*>(r.scales + 2 * cs);
  }
  __device__ void fill(Chunk<PackedFormat::Int4Sym32>& ch, int j) const {
    ch.d = ((j < 2 ? d.x : d.y) >> (16 * (j & 1))) & 0xFFFFu;
  }
};
template <>
struct StageSide<PackedFormat::Int4Affine32> {
  uint4 dm;  // fp16 {d, m} of chunks 0-3
  __device__ void load(const RowPointers& r, int cs, bool) {
    dm = __ldg(reinterpret_cast<const uint4*>(r.scales + 4 * cs));
  }
  __device__ void fill(Chunk<PackedFormat::Int4Affine32>& ch, int j) const {
    ch.dm = j == 0 ? dm.x : j == 1 ? dm.y : j == 2 ? dm.z : dm.w;
  }
};
template <>
struct StageSide<PackedFormat::Int4K256> {
  uint4 hdr;  // the stage lies in one super-block of 8 chunks
  __device__ void load(const RowPointers& r, int cs, bool new_super) {
    if (new_super) hdr = GlobalMemory::u128i(r.scales, cs >> 3);
  }
  __device__ void fill(Chunk<PackedFormat::Int4K256>& ch, int) const { ch.hdr = hdr; }
};
template <>
struct StageSide<PackedFormat::Int6K256> {
  uint4 crumbs[2];  // 8 bytes a chunk
  uint2 sc;         // two int8 sub-scales a chunk
  uint32_t d;       // fp16 d of the stage's super-block
  __device__ void load(const RowPointers& r, int cs, bool new_super) {
    crumbs[0] = load_weights_16(r.high + 8 * cs);
    crumbs[1] = load_weights_16(r.high + 8 * cs + 16);
    sc = *reinterpret_cast<const uint2*>(r.scales + 2 * cs);
    if (new_super) d = GlobalMemory::u16(r.super_, cs >> 3);
  }
  __device__ void fill(Chunk<PackedFormat::Int6K256>& ch, int j) const {
    const uint4& c = crumbs[j >> 1];
    ch.crumbs = (j & 1) ? make_uint2(c.z, c.w) : make_uint2(c.x, c.y);
    ch.sc = ((j < 2 ? sc.x : sc.y) >> (16 * (j & 1))) & 0xFFFFu;
    ch.d = d;
  }
};

}  // namespace voltad::kernels::narrow_stage
