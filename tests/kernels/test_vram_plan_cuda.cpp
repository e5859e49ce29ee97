// The VRAM plan against the CUDA backend on a real card (issue 8): what the
// backend holds is what engine/vram_plan.cpp says, component by component;
// the card's usage grows by about that much when the backend is created;
// once created, steps allocate nothing on the device; and a backend that
// does not fit fails cleanly and gives back what it took.
//
// Kernels are loaded eagerly (as voltad does), so module loading does not
// show up as growth of the card's usage during steps.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "engine/backend_cuda.h"
#include "engine/model.h"
#include "engine/vram_plan.h"
#include "kernels/gemm_sm80.h"

using namespace voltad;
namespace fs = std::filesystem;

namespace {

// Before any static constructor that may touch CUDA (the skip check).
__attribute__((constructor(101))) void load_kernels_eagerly() {
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

fs::path fixtures() {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  return fs::path(src ? src : ".") / "tests/fixtures/models";
}

std::string demo_model() {
  if (const char* m = std::getenv("VOLTAD_DEMO_MODEL")) return m;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") +
         "/.cache/voltad/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

uint64_t card_used() {
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  return uint64_t(total - free_bytes);
}

struct Limits {
  int32_t ctx, seqs, batch;
  bool int8;
};

EngineLimits engine_limits(const Limits& l) {
  EngineLimits e;
  e.max_context = l.ctx;
  e.max_sequences = l.seqs;
  e.max_batch_tokens = l.batch;
  e.kv_cache_type = l.int8 ? KvCacheType::Int8 : KvCacheType::Fp16;
  return e;
}

CudaBackendOptions options(const Limits& l, int32_t kv_blocks) {
  CudaBackendOptions o;
  o.max_context = l.ctx;
  o.max_sequences = l.seqs;
  o.max_batch_tokens = l.batch;
  o.kv_int8 = l.int8;
  o.kv_blocks = kv_blocks;
  return o;
}

std::vector<std::string> models() {
  std::vector<std::string> m = {(fixtures() / "tiny-llama.Q4_0.gguf").string(),
                                (fixtures() / "tiny-llama256.Q4_K_M.gguf").string(),
                                (fixtures() / "tiny-qwen3.F32.gguf").string()};
  if (fs::exists(demo_model())) m.push_back(demo_model());
  return m;
}

}  // namespace

TEST_CASE("the backend holds what the plan says: weights, workspace and KV cache") {
  REQUIRE(cudaFree(nullptr) == cudaSuccess);  // the context first
  for (const std::string& path : models()) {
    CAPTURE(path);
    auto model = load_model(path);
    REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
    auto weights = repacked_weight_bytes(model.value()->weights, model.value()->config);
    REQUIRE(weights.ok());
    for (Limits l : {Limits{256, 4, 256, false}, Limits{1000, 3, 17, false},
                     Limits{4096, 16, 512, false}, Limits{512, 8, 64, true}}) {
      CAPTURE(l.ctx);
      CAPTURE(l.seqs);
      CAPTURE(l.batch);
      CAPTURE(l.int8);
      const EngineLimits el = engine_limits(l);
      const ModelConfig& c = model.value()->config;
      // A pool the size a plan would give: an odd number of blocks, more than one sequence.
      const int32_t blocks = int32_t((l.ctx + 15) / 16 * 2 + 3);
      auto backend = CudaBackend::create(model.value(), options(l, blocks));
      REQUIRE_MESSAGE(backend.ok(), (backend.ok() ? "" : backend.error().message));
      const CudaMemoryUse& use = backend.value()->memory_use();
      CHECK(use.workspace == cuda_workspace_bytes(c, el).total());
      CHECK(use.kv_cache ==
            uint64_t(blocks) * kKvBlockTokens * kv_bytes_per_token(c, el.kv_cache_type));
      CHECK(use.weights == *weights);
    }
  }
}

TEST_CASE(
    "creating the backend grows the card's usage by about the plan; steps grow it by nothing") {
  if (!fs::exists(demo_model())) {
    MESSAGE("no SmolLM2 demo model (VOLTAD_DEMO_MODEL): skipped");
    return;
  }
  REQUIRE(cudaFree(nullptr) == cudaSuccess);
  auto model = load_model(demo_model());
  REQUIRE(model.ok());
  const Limits l{2048, 8, 256, false};
  const EngineLimits el = engine_limits(l);
  const ModelConfig& c = model.value()->config;
  auto weights = repacked_weight_bytes(model.value()->weights, model.value()->config);
  REQUIRE(weights.ok());
  const int32_t blocks = 2048 / 16 * 8;
  const uint64_t kv = uint64_t(blocks) * kKvBlockTokens * kv_bytes_per_token(c, el.kv_cache_type);
  const uint64_t graphs = uint64_t(cuda_graph_count(l.seqs)) * kGraphBytes;
  const uint64_t planned = *weights + cuda_workspace_bytes(c, el).total() + kv + graphs;

  const uint64_t before = card_used();
  auto backend = CudaBackend::create(model.value(), options(l, blocks));
  REQUIRE(backend.ok());
  const uint64_t created = card_used();
  const uint64_t grown = created - before;
  MESSAGE("plan: weights ", *weights, " + workspace ", cuda_workspace_bytes(c, el).total(),
          " + KV ", kv, " + graphs (estimate) ", graphs, " = ", planned,
          " bytes; the card grew by ", grown, " bytes (", double(grown) / double(planned),
          " of the plan)");
  // Everything planned is really held...
  CHECK(grown >= *weights + cuda_workspace_bytes(c, el).total() + kv);
  // ... and the rest (cudaMalloc's rounding of ~200 separate weight
  // allocations, the graphs' real size) stays within a small margin.
  CHECK(grown <= planned + (64ull << 20));

  // Steps of every shape: a long prefill in chunks, decodes of 1..8 sequences.
  Backend& b = *backend.value();
  KvBlockPool& pool = b.kv_pool();
  std::vector<int32_t> prompt(600);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(1 + (i * 7919) % 40000);
  ForwardOutput out;
  uint64_t after_first_steps = 0;
  for (int round = 0; round < 2; ++round) {
    for (int32_t s = 0; s < l.seqs; ++s) {
      REQUIRE(pool.reserve(s, 600 + 8));
      for (int32_t at = 0; at < 600; at += 256) {
        BatchChunk ch;
        ch.seq_id = s;
        ch.start_pos = at;
        ch.tokens =
            std::span<const int32_t>(prompt).subspan(size_t(at), size_t(std::min(256, 600 - at)));
        REQUIRE(b.forward(std::span<const BatchChunk>(&ch, 1), out).ok());
      }
    }
    for (int32_t n = 1; n <= l.seqs; ++n) {
      std::vector<BatchChunk> chunks(static_cast<size_t>(n));
      for (int32_t s = 0; s < n; ++s) {
        chunks[size_t(s)].seq_id = s;
        chunks[size_t(s)].start_pos = 600 + n - 1;
        chunks[size_t(s)].tokens = std::span<const int32_t>(prompt).subspan(size_t(s), 1);
        chunks[size_t(s)].top_k = n % 2 ? 0 : 8;
      }
      REQUIRE(b.forward(chunks, out).ok());
    }
    for (int32_t s = 0; s < l.seqs; ++s) pool.release(s);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    if (round == 0) after_first_steps = card_used();
  }
  const uint64_t after = card_used();
  MESSAGE("the card after creation ", created, ", after the first round of steps ",
          after_first_steps, ", after the second ", after);
  CHECK(after_first_steps == created);
  CHECK(after == created);
}

TEST_CASE("a backend that does not fit fails with an error and gives its memory back") {
  REQUIRE(cudaFree(nullptr) == cudaSuccess);
  auto model = load_model((fixtures() / "tiny-llama.Q4_0.gguf").string());
  REQUIRE(model.ok());
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  const uint64_t before = card_used();
  // A KV pool of more blocks than the card has memory for.
  const uint64_t per_block =
      kKvBlockTokens * kv_bytes_per_token(model.value()->config, KvCacheType::Fp16);
  // 5% more than the free memory: allocation granularity and the driver's
  // own reserves must not make a small excess fit.
  const int64_t too_many = int64_t(free_bytes / per_block) * 21 / 20 + 1000;
  MESSAGE("free " << free_bytes << " bytes, " << per_block << " per KV block, asking for " << too_many
                  << " blocks (" << uint64_t(too_many) * per_block << " bytes)");
  if (too_many > INT32_MAX) {
    MESSAGE("the card is too large for an int32 block count to exhaust it: skipped");
    return;
  }
  Limits l{256, 4, 64, false};
  auto backend = CudaBackend::create(model.value(), options(l, int32_t(too_many)));
  REQUIRE_FALSE(backend.ok());
  MESSAGE(backend.error().message);
  CHECK(backend.error().message.find("out of memory") != std::string::npos);
  CHECK(card_used() <= before + (4ull << 20));
  // And the card is still usable by a backend that fits.
  auto ok = CudaBackend::create(model.value(), options(l, 64));
  CHECK(ok.ok());
}

// The plan's quantized activations are also the sm_80 GEMMs' fp16 x
// (engine/backend_cuda.cpp checks the same at start): for every step size
// up to max_batch_tokens, and the widest input of a model's products (dim,
// ffn_dim or q_dim), they hold the tiled GEMM's x and the narrow GEMM's (1
// to 32 tokens). No device needed.
TEST_CASE("the plan's quantized activations hold the sm_80 GEMMs' fp16 x") {
  struct Shape {
    int64_t dim, heads, kv_heads, ffn;
  };
  // Llama-3-8B, Qwen3-32B (q_dim 8192 past dim 5120), SmolLM2-135M-like.
  for (const Shape& sh : {Shape{4096, 32, 8, 14336}, Shape{5120, 64, 8, 25600},
                          Shape{576, 9, 3, 1536}}) {
    ModelConfig m{};
    m.arch = Arch::Llama;
    m.dim = sh.dim;
    m.n_layers = 2;
    m.n_heads = sh.heads;
    m.n_kv_heads = sh.kv_heads;
    m.head_dim = 128;
    m.ffn_dim = sh.ffn;
    m.n_vocab = 32000;
    m.context_length = 4096;
    const int64_t widest = std::max({m.dim, m.ffn_dim, m.q_dim()});
    for (int64_t t : {1, 7, 8, 9, 31, 32, 33, 512, 2047}) {
      CAPTURE(sh.dim);
      CAPTURE(t);
      EngineLimits limits;
      limits.max_batch_tokens = t;
      limits.max_sequences = std::min<int64_t>(t, 16);
      const uint64_t planned = cuda_workspace_bytes(m, limits).quantized_x;
      for (int64_t n = std::max<int64_t>(1, t - 8); n <= t; ++n) {
        CHECK(planned >= kernels::gemm_sm80_scratch_bytes(int(n), widest));
        if (n <= 32) CHECK(planned >= kernels::gemm_narrow_sm80_scratch_bytes(int(n), widest));
      }
    }
  }
}
