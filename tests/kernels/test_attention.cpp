// Paged attention (decode and prefill shapes, GQA, split-K) against a scalar
// float64 reference over the same fp16 cache contents.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>

#include <cuda_fp16.h>

#include "kernels/attention.h"
#include "kernels/gemm_sm80.h"
#include "kernels/kernel_set.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/gpu_test_util.h"

using namespace voltad;
using namespace voltad::test;

namespace {

struct Shape {
  int n_heads, n_kv_heads, head_dim;
};

float round_half(float x) {
  __half h = __float2half_rn(x);
  return __half2float(h);
}

// Runs one step: `seqs` sequences, each with `lens[s]` tokens already cached
// plus `new_tokens[s]` tokens in the step, and checks every head of every
// step token. Returns the pieces per token the launch used. pass1: which
// pass-1 kernel (attention_test_util.h).
// k_growth: each position's K row is scaled by 1 + k_growth * position, so
// that the scores' range, and with it a head's running maximum, grows
// along the context. Cache slots that hold no position are NaN: a kernel
// must not let them into a sum (zero weights times NaN are NaN).
// planned_len: the launch is planned for this many positions where that is
// more than the step holds, as a decode graph is for max_context.
int check_attention_with(Shape sh, const std::vector<int>& cached,
                         const std::vector<int>& new_tokens, int max_splits, Pass1 pass1,
                         float k_growth, int planned_len = 0) {
  const int kv_dim = sh.n_kv_heads * sh.head_dim, q_dim = sh.n_heads * sh.head_dim;
  const int n_seqs = int(cached.size());
  int max_len = 0, n_tokens = 0;
  for (int s = 0; s < n_seqs; ++s)
    max_len = std::max(max_len, cached[s] + new_tokens[s]), n_tokens += new_tokens[s];
  const int blocks_per_seq = (max_len + 15) / 16;
  const int n_blocks = blocks_per_seq * n_seqs + 3;

  // Blocks handed out shuffled, as a pool does after some traffic.
  std::vector<int32_t> free_blocks(static_cast<size_t>(n_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), test_rng());
  std::vector<int32_t> tables(size_t(n_seqs * blocks_per_seq));
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = free_blocks[i];

  // Cache contents for every position of every sequence (fp16-rounded).
  std::vector<float> k_all = random_floats(size_t(n_blocks) * 16 * size_t(kv_dim));
  std::vector<float> v_all = random_floats(size_t(n_blocks) * 16 * size_t(kv_dim));
  std::vector<bool> holds(size_t(n_blocks) * 16, false);  // slot -> holds a position
  for (int s = 0; s < n_seqs; ++s)
    for (int p = 0; p < cached[s] + new_tokens[s]; ++p) {
      const size_t slot = size_t(tables[size_t(s * blocks_per_seq + p / 16)]) * 16 + size_t(p % 16);
      holds[slot] = true;
      for (int e = 0; e < kv_dim; ++e)
        k_all[slot * size_t(kv_dim) + size_t(e)] *= 1.0f + k_growth * float(p);
    }
  for (auto& x : k_all) x = round_half(x);
  for (auto& x : v_all) x = round_half(x);
  std::vector<uint16_t> k_bits(k_all.size()), v_bits(v_all.size());
  for (size_t i = 0; i < k_all.size(); ++i) {
    __half hk = __float2half_rn(k_all[i]), hv = __float2half_rn(v_all[i]);
    k_bits[i] = holds[i / size_t(kv_dim)] ? *reinterpret_cast<uint16_t*>(&hk) : uint16_t(0x7E00);
    v_bits[i] = holds[i / size_t(kv_dim)] ? *reinterpret_cast<uint16_t*>(&hv) : uint16_t(0x7E00);
  }

  std::vector<int32_t> positions, token_tables;
  for (int s = 0; s < n_seqs; ++s)
    for (int i = 0; i < new_tokens[s]; ++i)
      positions.push_back(cached[s] + i), token_tables.push_back(s);
  std::vector<float> q = random_floats(size_t(n_tokens) * size_t(q_dim));
  const float scale = 1.0f / std::sqrt(float(sh.head_dim));

  DeviceBuffer<uint16_t> dk(k_bits), dv(v_bits);
  DeviceBuffer<int32_t> dpos(positions), dtt(token_tables), dtab(tables);
  DeviceBuffer<float> dq(q), dout(size_t(n_tokens) * size_t(q_dim));
  poison(dout);
  const int max_position = std::max(max_len, planned_len) - 1;
  DeviceBuffer<float> dpart(
      kernels::attention_partial_floats(n_tokens, sh.n_heads, sh.head_dim, max_position));
  kernels::AttentionArgs a;
  a.q = dq.get();
  a.ldq = q_dim;
  a.out = dout.get();
  a.ldo = q_dim;
  a.cache = {dk.get(), dv.get()};
  a.positions = dpos.get();
  a.token_tables = dtt.get();
  a.block_tables = dtab.get();
  a.table_stride = blocks_per_seq;
  a.n_tokens = n_tokens;
  a.n_heads = sh.n_heads;
  a.n_kv_heads = sh.n_kv_heads;
  a.head_dim = sh.head_dim;
  a.max_position = max_position;
  a.max_splits = max_splits;
  a.scale = scale;
  a.partials = dpart.get();
  set_pass1(a, pass1);
  // Where the device has sm_80+ code, head_dim 64 and 128 take the
  // tensor-core kernel asked for: a fallback would pass the checks below
  // unnoticed.
  const bool mma_shape = sh.head_dim == 64 || sh.head_dim == 128;
  if (pass1 == Pass1::Mma && kernels::gemm_sm80_available() && mma_shape)
    REQUIRE(kernels::attention_mma_applies(a));
  if (pass1 == Pass1::Wmma && mma_shape) REQUIRE(kernels::attention_wmma_applies(a));
  const int pieces = kernels::attention_launch_pieces(a);
  poison(dpart);
  kernels::launch_attention(a, nullptr);
  const std::vector<float> two_launches = dout.download();
  // Pass 1 split each token as the combines count its pieces: those that
  // hold positions have a finite maximum, the rest -inf, with the plan's
  // least piece (AttentionArgs::least_piece) taken into account: a launch
  // that ignored it would still be exact, but split otherwise.
  {
    const std::vector<float> parts = dpart.download();
    const int least = kernels::attention_launch_least_piece(a);
    const size_t stride = size_t(kernels::kAttentionPartialHeader + sh.head_dim);
    int wrong = 0;
    for (int t = 0; t < n_tokens; ++t) {
      const int pos = positions[size_t(t)];
      const int split = ((pos + pieces) / pieces + 15) / 16 * 16;  // split_tokens
      const int used = std::min(pieces, pos / std::max(split, least) + 1);
      for (int h = 0; h < sh.n_heads; ++h)
        for (int s = 0; s < pieces; ++s) {
          const size_t at = ((size_t(t) * size_t(sh.n_heads) + size_t(h)) * size_t(pieces) +
                             size_t(s)) * stride;
          wrong += std::isfinite(parts[at]) != (s < used);
        }
    }
    CAPTURE(least);
    CHECK(wrong == 0);
  }
  // The combine in the last block of pass 1 (AttentionArgs::arrivals), run
  // twice: the counters must be left zero, and the second run equal the first.
  DeviceBuffer<uint32_t> arrivals(
      std::vector<uint32_t>(size_t(n_tokens) * size_t(sh.n_kv_heads), 0u));
  a.arrivals = arrivals.get();
  poison(dout);
  kernels::launch_attention(a, nullptr);
  const std::vector<float> fused = dout.download();
  poison(dout);
  kernels::launch_attention(a, nullptr);
  CHECK(dout.download() == fused);
  for (uint32_t c : arrivals.download()) REQUIRE(c == 0u);
  // Decode tokens (one a sequence): pass 1 may load every row but the
  // token's own before its wait (AttentionArgs::own_position_only); the
  // own row is then loaded after it. Same bits, both paths.
  if (std::all_of(new_tokens.begin(), new_tokens.end(), [](int n) { return n == 1; })) {
    a.own_position_only = true;
    poison(dout);
    kernels::launch_attention(a, nullptr);
    CHECK(dout.download() == fused);
    a.arrivals = nullptr;
    poison(dout);
    kernels::launch_attention(a, nullptr);
    CHECK(dout.download() == two_launches);
    a.arrivals = arrivals.get();
    a.own_position_only = false;
  }

  std::vector<double> ref(fused.size());
  const int group = sh.n_heads / sh.n_kv_heads;
  for (int t = 0; t < n_tokens; ++t) {
    const int seq = token_tables[size_t(t)], pos = positions[size_t(t)];
    for (int h = 0; h < sh.n_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> scores(size_t(pos) + 1);
      double mx = -1e300;
      for (int p = 0; p <= pos; ++p) {
        size_t row = (size_t(tables[size_t(seq * blocks_per_seq + p / 16)]) * 16 + size_t(p % 16)) *
                         size_t(kv_dim) +
                     size_t(kvh * sh.head_dim);
        double s = 0;
        for (int e = 0; e < sh.head_dim; ++e)
          s += double(q[size_t(t * q_dim + h * sh.head_dim + e)]) * k_all[row + size_t(e)];
        scores[size_t(p)] = s * scale;
        mx = std::max(mx, scores[size_t(p)]);
      }
      double sum = 0;
      for (auto& s : scores) sum += (s = std::exp(s - mx));
      for (int e = 0; e < sh.head_dim; ++e) {
        double acc = 0;
        for (int p = 0; p <= pos; ++p) {
          size_t row =
              (size_t(tables[size_t(seq * blocks_per_seq + p / 16)]) * 16 + size_t(p % 16)) *
                  size_t(kv_dim) +
              size_t(kvh * sh.head_dim);
          acc += scores[size_t(p)] / sum * v_all[row + size_t(e)];
        }
        ref[size_t(t * q_dim + h * sh.head_dim + e)] = acc;
      }
    }
  }
  CAPTURE(pass1_name(pass1));
  CHECK(count_mismatches("attention", two_launches, ref, 2e-4, 1e-3) == 0);
  CHECK(count_mismatches("attention, combined in pass 1", fused, ref, 2e-4, 1e-3) == 0);
  return pieces;
}

// Every pass-1 kernel; returns the portable kernel's pieces per token.
int check_attention(Shape sh, const std::vector<int>& cached, const std::vector<int>& new_tokens,
                    int max_splits = 0, float k_growth = 0.0f, int planned_len = 0) {
  const int pieces = check_attention_with(sh, cached, new_tokens, max_splits, Pass1::Portable,
                                          k_growth, planned_len);
  check_attention_with(sh, cached, new_tokens, max_splits, Pass1::Mma, k_growth, planned_len);
  // The wmma pass 1 in blocks of 4 and of 6 warps, whichever its plan
  // would choose here.
  if (sh.head_dim == 64 || sh.head_dim == 128) {
    for (int warps : {4, 6}) {
      CAPTURE(warps);
      const WmmaWarpsScope scope(warps);
      check_attention_with(sh, cached, new_tokens, max_splits, Pass1::Wmma, k_growth, planned_len);
    }
  } else {  // the portable pass 1 runs for these (attention_wmma_applies)
    check_attention_with(sh, cached, new_tokens, max_splits, Pass1::Wmma, k_growth, planned_len);
  }
  return pieces;
}

}  // namespace

TEST_CASE("decode: one token per sequence, GQA shapes of real models") {
  check_attention({32, 8, 128}, {511, 37, 4095}, {1, 1, 1});  // Llama-3-8B, split-K at 4096
  check_attention({9, 3, 64}, {100, 1}, {1, 1});              // SmolLM2
  check_attention({64, 8, 128}, {700}, {1});                  // Qwen3-32B: 8 heads per KV head
  check_attention({4, 4, 32}, {0, 16, 17}, {1, 1, 1});        // no GQA, block edges
  check_attention({4, 2, 16}, {40}, {1});  // tiny test models: half the lanes idle
}

TEST_CASE("prefill: many tokens of one sequence attend causally, also after cached ones") {
  check_attention({8, 2, 64}, {0}, {77});
  check_attention({8, 2, 128}, {300}, {33});
  check_attention({16, 4, 256}, {5, 0}, {20, 9});
}

namespace {
// Llama-3-8B's heads on the tensor cores, planned for max_position.
kernels::AttentionArgs llama3_tensor_core_plan(int max_position) {
  kernels::AttentionArgs a;
  a.n_heads = 32;
  a.n_kv_heads = 8;
  a.head_dim = 128;
  a.max_position = max_position;
  a.tensor_cores = true;
  return a;
}
}  // namespace

TEST_CASE("batched decode: the pieces stop at one wave of blocks") {
  // One sequence of 2 KV heads at position 511: its 32 pieces (64 blocks)
  // fit any device with 40+ SMs' worth of one block each, so all are used.
  CHECK(check_attention({8, 2, 128}, {511}, {1}) == kernels::attention_splits(511));
  // 64 Llama-3-8B sequences at up to 1,200 positions: 512 blocks a piece,
  // more than a V100 or H200 runs at once, so each token takes fewer pieces
  // (one, unless the device holds 1,024+ such blocks at once), each walking
  // more positions; still exact.
  std::vector<int> cached, one;
  for (int s = 0; s < 64; ++s) cached.push_back((s * 389) % 1200), one.push_back(1);
  const int max_position = *std::max_element(cached.begin(), cached.end());
  const int pieces = check_attention({32, 8, 128}, cached, one);
  CHECK(pieces < kernels::attention_splits(max_position));
  CHECK(pieces >= 1);
  // 8 sequences (the b8 bench): fewer pieces than the 32 of a 512-position
  // grid, more than one.
  const int eight =
      check_attention({32, 8, 128}, {500, 511, 37, 300, 420, 1, 64, 255}, {1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(eight < kernels::attention_splits(511));
  // On the tensor cores, from 4 tokens on no piece is shorter than 256
  // positions: 2 pieces at 512 positions, where 2 tokens take more.
  kernels::AttentionArgs a = llama3_tensor_core_plan(511);
  if (kernels::gemm_sm80_available() && kernels::attention_mma_applies(a)) {
    a.n_tokens = 8;
    const int at8 = kernels::attention_launch_pieces(a);
    CHECK(at8 >= 1);
    CHECK(at8 <= 2);
    a.n_tokens = 4;
    const int at4 = kernels::attention_launch_pieces(a);
    CHECK(at4 <= 2);
    // 2 tokens keep pieces of 64: 8 at 512 positions where a wave holds
    // them (16 blocks a piece: 48+ SMs at one block an SM), else fewer.
    a.n_tokens = 2;
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (sms >= 64) CHECK(kernels::attention_launch_pieces(a) > 2);
    else CHECK(kernels::attention_launch_pieces(a) >= at4);
    // At 4,096 positions pieces of 256 allow 16, as many as one wave holds
    // (4 on an H200): no fewer than at 512.
    a.max_position = 4095;
    a.n_tokens = 8;
    CHECK(kernels::attention_launch_pieces(a) >= at8);
    // One token at 4,096 positions: the cap, where a wave holds more (33 on
    // an H200).
    a.n_tokens = 1;
    if (sms >= 64) CHECK(kernels::attention_launch_pieces(a) == kernels::kAttentionMmaMaxPieces);
    CHECK(kernels::attention_launch_pieces(a) <= kernels::kAttentionMmaMaxPieces);
  }
}

// From 2 tokens on, where the grid fits one wave of 8-warp blocks (128 KB
// of rings each at head_dim 128) and each warp gets two cache blocks of the
// longest piece, pass 1 runs 8 warps a block (attention_launch_warps);
// exact like the 4-warp blocks, also where a token's positions leave warps
// without a block, and at head_dim 64.
TEST_CASE("batched decode on 8-warp blocks") {
  const char* wide = std::getenv("VOLTAD_ATTENTION_WIDE");
  const bool allowed = !(wide && std::string(wide) == "0");
  kernels::AttentionArgs a = llama3_tensor_core_plan(639);
  // The cases below: Llama-3-8B's heads at 8 tokens up to 640 positions,
  // at 16 tokens up to 700, and SmolLM2's (head_dim 64) at 4 tokens up to
  // 901; each expects 8 warps on a device that holds their grid in one
  // wave of 8-warp blocks (one an SM at head_dim 128: 136 KB of opt-in
  // shared memory and 64 SMs for 8 tokens, 128 for 16).
  std::vector<int> cached16, one16;
  for (int s = 0; s < 16; ++s) cached16.push_back((s * 211) % 700), one16.push_back(1);
  const std::vector<int> cached8 = {639, 600, 37, 300, 420, 0, 64, 255};
  const std::vector<int> one8(8, 1);
  const std::vector<int> cached_64 = {900, 17, 640, 300}, one4(4, 1);
  if (kernels::gemm_sm80_available() && kernels::attention_mma_applies(a)) {
    int device = 0, sms = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    a.n_tokens = 1;  // one token keeps 4 warps
    CHECK(kernels::attention_launch_warps(a) == 4);
    a.n_tokens = 64;  // 512 blocks of one piece: more than a wave below 512 SMs
    if (sms < 512) CHECK(kernels::attention_launch_warps(a) == 4);
    a.max_position = 127;  // pieces of 128 positions: one cache block a warp
    a.n_tokens = 8;
    CHECK(kernels::attention_launch_warps(a) == 4);
    const bool wide_device = optin >= 136 * 1024 && sms >= 64;
    if (allowed && wide_device) {
      // 8 tokens at 640 positions: 2 pieces of 320 (20 cache blocks, at
      // most 3 a warp), 128 blocks.
      a.max_position = 639;
      CHECK(kernels::attention_launch_warps(a) == 8);
      a.n_tokens = 16;  // one piece a token where 128 blocks fit the wave
      a.max_position = *std::max_element(cached16.begin(), cached16.end());
      CHECK(kernels::attention_launch_warps(a) == (sms >= 128 ? 8 : 4));
      kernels::AttentionArgs smol = a;
      smol.n_heads = 9, smol.n_kv_heads = 3, smol.head_dim = 64, smol.n_tokens = 4;
      smol.max_position = 900;
      CHECK(kernels::attention_launch_warps(smol) == 8);
    }
  }
  // Exact on them (and on 4 warps elsewhere), also where a token's
  // positions leave warps without a block.
  check_attention({32, 8, 128}, cached8, one8);
  check_attention({32, 8, 128}, cached16, one16, 0, 0.02f);  // growing scores
  check_attention({9, 3, 64}, cached_64, one4);
}

// A decode graph is planned for max_context positions; its tokens hold
// fewer. On the tensor cores each token's pieces are then no shorter than
// the plan's least piece (64 positions, 256 from 4 tokens on), the pieces
// past them empty; exact either way, and at positions off the 16 grid.
TEST_CASE("decode planned for a longer context than its tokens hold") {
  check_attention({32, 8, 128}, {511}, {1}, 0, 0.0f, 4096);
  check_attention({32, 8, 128}, {100, 7, 300}, {1, 1, 1}, 0, 0.0f, 8192);
  check_attention({32, 8, 128}, {500, 511, 37, 300, 420, 1, 64, 255}, {1, 1, 1, 1, 1, 1, 1, 1}, 0,
                  0.0f, 4096);
  check_attention({16, 2, 64}, {1000, 2}, {1, 1}, 0, 0.0f, 4096);  // head_dim 64
  kernels::AttentionArgs a = llama3_tensor_core_plan(4095);
  CHECK(kernels::attention_launch_least_piece(a) >= 0);
  if (kernels::gemm_sm80_available() && kernels::attention_mma_applies(a)) {
    a.n_tokens = 1;
    CHECK(kernels::attention_launch_least_piece(a) == 64);
    a.n_tokens = 2;
    CHECK(kernels::attention_launch_least_piece(a) == 64);
    a.n_tokens = 4;
    CHECK(kernels::attention_launch_least_piece(a) == 256);
    a.n_tokens = 8;
    CHECK(kernels::attention_launch_least_piece(a) == 256);
  }
  a.tensor_cores = false;  // the portable kernel keeps the grid's split
  a.n_tokens = 8;
  CHECK(kernels::attention_launch_least_piece(a) == 0);
  a.wmma = true;  // the wmma kernel: a cache block a warp at least
  {
    const WmmaWarpsScope four(4);
    CHECK(kernels::attention_launch_least_piece(a) == 64);
  }
  const WmmaWarpsScope six(6);
  CHECK(kernels::attention_launch_warps(a) == 6);
  CHECK(kernels::attention_launch_least_piece(a) == 96);
}

// The wmma pass 1's plan: 4 warps a block (three an SM) unless 6 (two an
// SM) shorten the longest warp's walk. At Llama-3-8B's shapes and 512
// positions on an H100 or H200 (132 SMs), 1 and 8 sequences keep 4 warps;
// 32 sequences (256 blocks at one piece a token) take 6, whose blocks fit
// one wave there (264; 4 warps: 396): walks of 6 cache blocks (+1 for a
// block's start and end) against 8. Other devices' choices differ (171+
// SMs give 4 warps two pieces at 32 sequences); what every device must
// show is a least piece of a cache block a warp. Until the plan is
// measured the default is 4 warps always.
TEST_CASE("the wmma pass 1's warps a block") {
  kernels::AttentionArgs a = llama3_tensor_core_plan(511);
  a.tensor_cores = false;
  a.wmma = true;
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CAPTURE(sms);
  a.n_tokens = 32;
  if (!std::getenv("VOLTAD_ATTENTION_WMMA_WARPS")) CHECK(kernels::attention_launch_warps(a) == 4);
  {
    const WmmaWarpsScope plan(0);
    const bool h100_class = sms >= 128 && sms <= 170;
    for (int n : {1, 8, 16, 24, 32}) {
      CAPTURE(n);
      a.n_tokens = n;
      const int warps = kernels::attention_launch_warps(a);
      CHECK((warps == 4 || warps == 6));
      CHECK(kernels::attention_launch_least_piece(a) == 16 * warps);
      if (h100_class) CHECK(warps == (n == 32 ? 6 : 4));
    }
    a.n_tokens = 32;
    if (h100_class) CHECK(kernels::attention_launch_pieces(a) == 1);
  }
  {
    // A forced size wins over the plan, and exact results follow it
    // (check_attention runs both).
    const WmmaWarpsScope four(4);
    CHECK(kernels::attention_launch_warps(a) == 4);
  }
  // 32 sequences of Llama-3-8B at 511 positions, exact in both sizes.
  std::vector<int> cached(32), one(32, 1);
  for (int s = 0; s < 32; ++s) cached[size_t(s)] = 511 - 13 * s;
  check_attention({32, 8, 128}, cached, one);
}

TEST_CASE("capped piece counts: a long run of prompt tokens in one launch") {
  check_attention({8, 2, 128}, {0}, {300}, 1);
  check_attention({32, 8, 128}, {200, 0}, {100, 40}, 3);
}

TEST_CASE("decode, one long piece: the own position around a pass boundary, every head size") {
  // One piece a token: the loop walks many passes of 2 block steps (HD 16:
  // 128 positions a pass, 32: 64, 64: 32, 128: 16, 256: 8), loading each
  // pass's rows during the one before. The own position at the last row of
  // pass 0, the first of pass 1, the one after, deep in a later pass, and
  // in a piece shorter than a block step (warps with no positions).
  check_attention({4, 2, 16}, {127, 128, 129, 1500, 5}, {1, 1, 1, 1, 1}, 1);
  check_attention({4, 4, 32}, {63, 64, 65, 700, 5}, {1, 1, 1, 1, 1}, 1);
  check_attention({9, 3, 64}, {31, 32, 33, 333, 2}, {1, 1, 1, 1, 1}, 1);
  check_attention({32, 8, 128}, {15, 16, 17, 511, 1}, {1, 1, 1, 1, 1}, 1);
  check_attention({8, 4, 256}, {7, 8, 9, 300, 0}, {1, 1, 1, 1, 1}, 1);
  // Pieces that start inside a sequence and end off the pass grid.
  check_attention({4, 2, 16}, {1000, 777}, {1, 1}, 2);
  check_attention({32, 8, 128}, {1000, 777}, {1, 1}, 3);
}

TEST_CASE("decode: scores whose range grows along the context") {
  // K rows scaled up to ~16-76x by position: a head's maximum keeps growing
  // (the tensor-core kernel rescales its sums only when it grows by more
  // than e^8, in later blocks of a warp too) and the weights span many
  // orders of magnitude.
  for (int max_splits : {0, 1}) {
    CAPTURE(max_splits);
    check_attention({32, 8, 128}, {300, 700, 1500}, {1, 1, 1}, max_splits, 0.05f);
    check_attention({9, 3, 64}, {300, 1000}, {1, 1}, max_splits, 0.05f);
  }
}

TEST_CASE("decode, one piece of more than 32 cache blocks a warp, and one head a group") {
  // The tensor-core kernel hands each warp its blocks' table entries 32 at
  // a time: pieces of 2,100+ positions take it past the first 32.
  check_attention({32, 8, 128}, {2200, 4200}, {1, 1}, 1);
  check_attention({9, 3, 64}, {2200, 4200}, {1, 1}, 1);
  // One query head a KV head, without RoPE inside.
  check_attention({8, 8, 64}, {700, 33, 0}, {1, 1, 1});
  check_attention({4, 4, 128}, {700, 2100}, {1, 1}, 1);
}

// Under programmatic dependent launch pass 1 loads the older cache rows
// before its wait (AttentionArgs::own_position_only) and the token's own
// row after it. Here the own rows are written by launch_kv_write just
// before, on the same stream, with fresh values each round: were the own
// row read before that kernel completed (or from a stale L1 line), `auto`
// would see the previous round's row and differ from `portable`, whose
// launches are plain. Head sizes 16 and 32 (slots share cache lines) and
// 128; pieces as the launch picks them (the own row in the first pass) and
// one or two a token (at HD 16 the own rows 511, 200 and 128 then lie in
// later passes, whose rows are loaded during the pass before).
TEST_CASE("decode attention under PDL: each token's own row written by the kernel just before") {
  if (!kernels::programmatic_launch_supported())
    MESSAGE(
        "no programmatic dependent launch on this device or build: both runs are plain launches");
  for (int max_splits : {0, 1, 2}) {
    for (Shape sh : {Shape{32, 8, 128}, Shape{4, 2, 16}, Shape{8, 4, 32}, Shape{9, 3, 64}})
      for (Pass1 pass1 : kEveryPass1) {  // the tensor-core ones at head_dim 64 and 128
        CAPTURE(sh.head_dim);
        CAPTURE(max_splits);
        CAPTURE(pass1_name(pass1));
        PdlDecodeStep st(sh.n_heads, sh.n_kv_heads, sh.head_dim, {511, 37, 200, 16, 128},
                         max_splits);
        set_pass1(st.args, pass1);
        std::vector<uint16_t> cache_bits(st.cache_slots() * size_t(st.kv_dim));
        for (uint16_t& b : cache_bits) b = float_to_half_bits(random_floats(1)[0]);
        DeviceBuffer<uint16_t> ck(cache_bits), cv(cache_bits);
        st.args.cache = {ck.get(), cv.get()};
        const int differing_rounds = rounds_auto_differs(
            20, [&] { st.refresh(); },
            [&](cudaStream_t stream) {
              poison(st.out);
              kernels::launch_kv_write(st.k.get(), st.v.get(), st.kv_dim, st.n, st.kv_dim,
                                       st.slots.get(), {ck.get(), cv.get()}, stream);
              kernels::launch_attention(st.args, stream);
              CUDA_CHECK(cudaStreamSynchronize(stream));
              return st.out.download();
            });
        CHECK(differing_rounds == 0);
      }
  }
}

TEST_CASE("kv_write stores fp16 rows in their slots") {
  const int n = 7, kv_dim = 96;
  std::vector<float> k = random_floats(size_t(n * kv_dim)), v = random_floats(size_t(n * kv_dim));
  std::vector<int32_t> slots = {5, 0, 31, 16, 2, 47, 9};
  DeviceBuffer<float> dk(k), dv(v);
  DeviceBuffer<int32_t> ds(slots);
  DeviceBuffer<uint16_t> ck(size_t(48 * kv_dim)), cv(size_t(48 * kv_dim));
  kernels::launch_fill_u16(ck.get(), ck.size(), 0x7E00, nullptr);
  kernels::launch_fill_u16(cv.get(), cv.size(), 0x7E00, nullptr);
  kernels::launch_kv_write(dk.get(), dv.get(), kv_dim, n, kv_dim, ds.get(), {ck.get(), cv.get()},
                           nullptr);
  auto hk = ck.download(), hv = cv.download();
  int bad = 0;
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < kv_dim; ++i) {
      uint16_t bk = hk[size_t(slots[size_t(t)] * kv_dim + i)],
               bv = hv[size_t(slots[size_t(t)] * kv_dim + i)];
      __half h1 = *reinterpret_cast<__half*>(&bk), h2 = *reinterpret_cast<__half*>(&bv);
      bad += __half2float(h1) != round_half(k[size_t(t * kv_dim + i)]);
      bad += __half2float(h2) != round_half(v[size_t(t * kv_dim + i)]);
    }
  CHECK(bad == 0);
}
