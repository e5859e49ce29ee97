// Paired B's selection for the portable narrow GEMM (kernels/gemm_narrow.cu):
// the probe of the device's wmma order, the environment's switches and the
// tests' overrides (kernels/gemm_narrow_pairs.h, kernels/gemm_wmma.h).
#include "kernels/gemm_narrow_pairs.h"

#include <cuda_fp16.h>
#include <mma.h>

#include <atomic>
#include <cstdlib>
#include <optional>

#include "kernels/cuda_check.h"
#include "kernels/gemm_wmma.h"

namespace voltad::kernels {

namespace {

namespace wmma = nvcuda::wmma;

// The probe of paired B (kernels/wmma_pairs.h): element (k, n) of a 16 x 32
// col_major B holds 64n + k; each lane writes the codes of its fragment's
// 16 elements (0xFFFF for all where the fragment has another size).
// out[513 + 16 L + e]: the same for x's A fragment (row_major 8 x 16,
// element (t, k) holding 16t + k), which Quads' kernels fill themselves.
// out[512]: bit o set where the paired kernels of order o (WmmaPairs) are
// built in the code this probe runs as. The GEMM (kernels/gemm_narrow.cu)
// must be built for the same architectures: kernels/CMakeLists.txt builds
// every kernel file of the library with one set, so a driver that compiles
// compute_70 PTX for a newer GPU runs sm_70's choice in both.
__global__ void kernel_probe_wmma_order(uint16_t* out) {
  __shared__ __align__(32) __half tile[32 * 16];
#if defined(__CUDA_ARCH__)
  if (threadIdx.x == 0)
    out[32 * 16] =
        uint16_t((pairs_built_natively(WmmaPairs::Quads, __CUDA_ARCH__) ? 1u << 1 : 0u) |
                 (pairs_built_natively(WmmaPairs::RowPerLane, __CUDA_ARCH__) ? 1u << 2 : 0u));
#endif
  for (int i = threadIdx.x; i < 32 * 16; i += 32)
    tile[i] = __float2half(float(64 * (i / 16) + i % 16));
  __syncwarp();
  wmma::fragment<wmma::matrix_b, 8, 32, 16, __half, wmma::col_major> b;
  wmma::load_matrix_sync(b, tile, 16);
  constexpr bool kSixteen = decltype(b)::num_elements == 16;
  for (int e = 0; e < 16; ++e)
    out[16 * threadIdx.x + e] = kSixteen ? uint16_t(__half2float(b.x[kSixteen ? e : 0])) : 0xFFFFu;
  __syncwarp();
  for (int i = threadIdx.x; i < 8 * 16; i += 32) tile[i] = __float2half(float(i));
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 8, 32, 16, __half, wmma::row_major> xa;
  wmma::load_matrix_sync(xa, tile, 16);
  constexpr bool kSixteenA = decltype(xa)::num_elements == 16;
  for (int e = 0; e < 16; ++e)
    out[513 + 16 * threadIdx.x + e] =
        kSixteenA ? uint16_t(__half2float(xa.x[kSixteenA ? e : 0])) : 0xFFFFu;
}

// Bit o: the paired kernels of order o are built natively in the code this
// device runs (the probe's out[512]); kPairsNativeKnown: the probe ran.
constexpr unsigned kPairsNativeKnown = 1u << 15;
std::atomic<unsigned> g_pairs_native{0};

// The device's order, None where the probe fails or matches neither: on a
// stream of its own, synchronously (not during a graph capture).
WmmaPairs probe_wmma_order() {
  cudaStream_t s = nullptr;
  uint16_t* dev = nullptr;
  uint16_t codes[2 * 32 * 16 + 1] = {};  // B's codes, the built orders, A's codes
  bool ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
            cudaMalloc(&dev, sizeof codes) == cudaSuccess;
  if (ok) {
    kernel_probe_wmma_order<<<1, 32, 0, s>>>(dev);
    ok = cudaGetLastError() == cudaSuccess &&
         cudaMemcpyAsync(codes, dev, sizeof codes, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
         cudaStreamSynchronize(s) == cudaSuccess;
  }
  if (dev) cudaFree(dev);
  if (s) cudaStreamDestroy(s);
  if (!ok) {
    (void)cudaGetLastError();  // the tile path then; a dead device shows at the next launch
    return WmmaPairs::None;
  }
  WmmaPairs o = classify_wmma_order(codes);
  if (o == WmmaPairs::Quads && !x_frag_is_quads(codes + 32 * 16 + 1)) o = WmmaPairs::None;
  g_pairs_native.store(codes[32 * 16] | kPairsNativeKnown);
  return (codes[32 * 16] >> int(o) & 1) ? o : WmmaPairs::None;
}

std::atomic<bool> g_pairs_probed{false};
constexpr int kPairsUnforced = -1;
std::atomic<int> g_pairs_forced{kPairsUnforced};  // a WmmaPairs, or kPairsUnforced

WmmaPairs probed_order() {
  static const WmmaPairs o = [] {
    const WmmaPairs r = probe_wmma_order();
    g_pairs_probed.store(true);
    return r;
  }();
  return o;
}

// VOLTAD_NARROW_PAIRS in the environment: 0 never, 8 only the 8-token
// blocks (comparisons); else wherever the order allows.
int narrow_pairs_env() {
  static const int mode = [] {
    const char* v = std::getenv("VOLTAD_NARROW_PAIRS");
    if (v && v[0] == '0') return 0;
    if (v && v[0] == '8') return 8;
    return 1;
  }();
  return mode;
}

constexpr int kTokens32Unforced = -1;
std::atomic<int> g_tokens32_forced{kTokens32Unforced};  // 0, 1 or kTokens32Unforced

}  // namespace

WmmaPairs narrow_pairs_for(bool eight_token_blocks, cudaStream_t stream) {
  const int forced = g_pairs_forced.load();
  if (forced != kPairsUnforced) return WmmaPairs(forced);
  const int mode = narrow_pairs_env();
  if (mode == 0 || (mode == 8 && !eight_token_blocks)) return WmmaPairs::None;
  if (!g_pairs_probed.load()) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone)
      return WmmaPairs::None;
  }
  return probed_order();
}

bool narrow_tokens32_switch() {
  static const bool env = [] {
    const char* v = std::getenv("VOLTAD_NARROW_TOKENS32");  // =0: two 16-token blocks
    return !(v && v[0] == '0');
  }();
  const int forced = g_tokens32_forced.load();
  return forced == kTokens32Unforced ? env : forced == 1;
}

WmmaPairs gemm_narrow_pairs() {
  if (narrow_pairs_env() == 0) return WmmaPairs::None;
  return probed_order();
}

bool gemm_narrow_tokens32() {
  return narrow_tokens32_switch() && narrow_pairs_for(false, nullptr) != WmmaPairs::None;
}

bool gemm_narrow_pairs_runs(WmmaPairs order) {
  // An order runs natively only where the probe found it; RowPerLane also
  // where its kernels emulate it (where not native: sm_75 and later). None
  // (the tile) always, without the probe (which cannot run in a capture).
  if (order == WmmaPairs::None) return true;
  const WmmaPairs found = probed_order();
  const unsigned built = g_pairs_native.load();
  const bool emulated = (built & kPairsNativeKnown) && !(built >> int(order) & 1);
  return found == order || (order == WmmaPairs::RowPerLane && emulated);
}

void gemm_narrow_pairs_force(std::optional<WmmaPairs> order) {
  VOLTAD_KERNEL_REQUIRE(!order || gemm_narrow_pairs_runs(*order),
                        "paired B forced to an order this device cannot run");
  g_pairs_forced.store(order ? int(*order) : kPairsUnforced);
}

void gemm_narrow_tokens32_force(std::optional<bool> on) {
  g_tokens32_forced.store(on ? int(*on) : kTokens32Unforced);
}

}  // namespace voltad::kernels
