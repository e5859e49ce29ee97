// Whole-model parity of the CUDA backend: against transformers (float64) on
// the tiny fixture models of every architecture and weight type, against
// the CPU backend on SmolLM2 (greedy text, batched and long contexts).
// VOLTAD_TEST_KERNELS=portable|auto (default auto) picks engine.kernels for
// every backend here, so scripts/device-test.sh runs the file in both modes;
// one case compares the two modes directly.
//
// Tolerances: the quantized matvecs multiply int8-quantized activations
// (blocks of 16, see kernels/matvec.h), which costs ~0.4% per dot product;
// across a model that shows as a relative logit error of about 1e-2, so
// the bound here is 5e-2 of the largest logit, and greedy choices must agree
// wherever the reference's top two logits are clearly apart.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/backend_cpu.h"
#include "engine/backend_cuda.h"
#include "engine/chat_template.h"
#include "engine/generate.h"
#include "engine/logprobs.h"
#include "engine/tokenizer.h"
#include "engine/vram_plan.h"
#include "kernels/gemm_sm80.h"
#include "kernels/gumbel.h"
#include "tests/engine/test_gguf_support.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
namespace fs = std::filesystem;

namespace {

fs::path fixtures() {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  return fs::path(src ? src : ".") / "tests/fixtures/models";
}

std::string demo_model() {
  if (const char* m = std::getenv("VOLTAD_DEMO_MODEL")) return m;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/voltad/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

kernels::KernelSet test_kernel_set() {
  const char* env = std::getenv("VOLTAD_TEST_KERNELS");
  if (!env || !*env) return kernels::KernelSet::Auto;
  auto set = kernels::parse_kernel_set(env);
  REQUIRE_MESSAGE(set.has_value(), "VOLTAD_TEST_KERNELS must be portable or auto, not " << env);
  return *set;
}

std::unique_ptr<CudaBackend> make_cuda(std::shared_ptr<const Model> model, int32_t ctx = 256, int32_t seqs = 4,
                                       int32_t batch_tokens = 256,
                                       kernels::KernelSet set = test_kernel_set()) {
  CudaBackendOptions o;
  o.kernels = set;
  o.max_context = ctx;
  o.max_sequences = seqs;
  o.max_batch_tokens = batch_tokens;
  auto b = CudaBackend::create(std::move(model), o);
  REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.error().message));
  return std::move(b).value();
}

double relative_error(std::span<const float> a, std::span<const float> b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < b.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i])), r = std::max(r, std::abs(double(b[i])));
  return d / std::max(r, 1e-30);
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// A tiny qwen2-shaped model (q/k/v biases) whose layers take every path of
// the CUDA backend's projection stacks (engine/weight_repack.h):
//   layer 0: q k v Q8_0, gate up Q4_K        -> one q|k|v stack, one gate|up stack
//   layer 1: q k Q4_K, v Q6_K, gate Q4_K, up Q6_K
//                                            -> [q k] [v] (Q4_K_M's usual), gate and up apart
//   layer 2: q Q6_K, k v Q4_0, gate up F16   -> [q] [k v], one gate|up stack
//   layer 3: q Q4_0, k Q8_0, v Q4_0, gate Q8_0, up Q4_0
//                                            -> three matrices, gate and up apart
// attn_output and ffn_down are Q4_K and Q6_K in layers 0 and 1, Q6_K and
// Q4_K in layer 2 and Q8_0 in layer 3, so that at one token o and down make
// the next norm (kernels::launch_matvec_norm_units) for every kind of
// reader, except layer 2's o, whose F16 gate|up reads fp32 x, and layer 3's.
// Random valid blocks, with scales bounded per type so that the weights stay
// below about 1 and the activations finite. A q|k|v or gate|up column out of
// place shows as errors of order 1, far above the 5e-2 of the arithmetic.
std::shared_ptr<const Model> mixed_type_model() {
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.dim = 256;
  spec.n_layers = 4;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 512;
  spec.n_vocab = 96;
  spec.seed = 11;
  using G = GgmlType;
  const std::vector<std::array<G, 5>> types = {{G::Q8_0, G::Q8_0, G::Q8_0, G::Q4_K, G::Q4_K},
                                               {G::Q4_K, G::Q4_K, G::Q6_K, G::Q4_K, G::Q6_K},
                                               {G::Q6_K, G::Q4_0, G::Q4_0, G::F16, G::F16},
                                               {G::Q4_0, G::Q8_0, G::Q4_0, G::Q8_0, G::Q4_0}};
  const char* names[] = {"attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"};
  for (int64_t layer = 0; layer < spec.n_layers; ++layer)
    for (const char* n : names)
      spec.omit.insert("blk." + std::to_string(layer) + "." + n + ".weight");
  // attn_output, ffn_down of layers 0-2 (layer 3 keeps the spec's Q8_0).
  const std::array<G, 2> products[] = {{G::Q4_K, G::Q6_K}, {G::Q4_K, G::Q6_K}, {G::Q6_K, G::Q4_K}};
  for (int64_t layer = 0; layer < 3; ++layer)
    for (const char* n : {"attn_output", "ffn_down"})
      spec.omit.insert("blk." + std::to_string(layer) + "." + n + ".weight");
  GgufWriter w = test::tiny_model_writer(spec);
  auto max_exponent = [](GgmlType t) {  // fp16 scales up to 2^(e - 14)
    switch (t) {
      case GgmlType::Q4_K:
        return 4;
      case GgmlType::Q6_K:
        return 2;
      case GgmlType::Q8_0:
        return 7;
      case GgmlType::Q4_0:
        return 10;
      default:
        return 11;  // F16 values
    }
  };
  std::mt19937 rng(spec.seed);
  const uint64_t dim = 256, q = 256, kv = 128, ffn = 512;
  const uint64_t rows[] = {q, kv, kv, ffn, ffn};
  for (int64_t layer = 0; layer < spec.n_layers; ++layer)
    for (int i = 0; i < 5; ++i) {
      const GgmlType t = types[size_t(layer)][size_t(i)];
      w.add_tensor(
          "blk." + std::to_string(layer) + "." + names[i] + ".weight", t, {dim, rows[i]},
          test::random_valid_tensor(t, int64_t(rows[i]), int64_t(dim), rng, max_exponent(t)));
    }
  for (int64_t layer = 0; layer < 3; ++layer) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    const auto [o, down] = products[layer];
    w.add_tensor(b + "attn_output.weight", o, {q, dim},
                 test::random_valid_tensor(o, int64_t(dim), int64_t(q), rng, max_exponent(o)));
    w.add_tensor(
        b + "ffn_down.weight", down, {ffn, dim},
        test::random_valid_tensor(down, int64_t(dim), int64_t(ffn), rng, max_exponent(down)));
  }
  auto file = GgufFile::from_bytes(w.to_bytes(), "mixed-types.gguf");
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  auto model = load_model(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  return model.value();
}

// Sets a switch the backend reads as it is created, then puts back what
// was there.
struct EnvScope {
  const char* name;
  std::optional<std::string> before;
  EnvScope(const char* n, const char* v) : name(n) {
    if (const char* b = std::getenv(name)) before = b;
    v ? setenv(name, v, 1) : unsetenv(name);
  }
  ~EnvScope() { before ? setenv(name, before->c_str(), 1) : unsetenv(name); }
};

}  // namespace

TEST_CASE("CUDA logits follow transformers on every tiny fixture model") {
  int files = 0;
  for (auto& entry : fs::directory_iterator(fixtures())) {
    std::string name = entry.path().filename().string();
    if (name.size() < 12 || name.substr(name.size() - 12) != ".logits.json") continue;
    ++files;
    std::ifstream in(entry.path());
    auto j = nlohmann::json::parse(in);
    auto model = load_model((fixtures() / j.at("model").get<std::string>()).string());
    REQUIRE(model.ok());
    auto backend = make_cuda(model.value());
    double worst = 0;
    int top1_checked = 0;
    for (auto& c : j.at("cases")) {
      auto tokens = c.at("tokens").get<std::vector<int32_t>>();
      auto logits = c.at("logits").get<std::vector<std::vector<double>>>();
      REQUIRE(backend->kv_pool().reserve(0, int64_t(tokens.size())));
      BatchChunk chunk;
      chunk.tokens = tokens;
      chunk.logits = BatchChunk::Logits::All;
      // All positions' logits exceed max_sequences rows: run the prompt a
      // token at a time (decode path), asking for each token's logits.
      for (size_t p = 0; p < tokens.size(); ++p) {
        BatchChunk one;
        one.start_pos = int32_t(p);
        one.tokens = std::span<const int32_t>(tokens).subspan(p, 1);
        ForwardOutput out;
        REQUIRE(backend->forward(std::span<const BatchChunk>(&one, 1), out).ok());
        auto ref = to_float(logits[p]);
        double err = relative_error(out.row(0), ref);
        worst = std::max(worst, err);
        CHECK_MESSAGE(err < 5e-2, name << " position " << p << ": relative error " << err);
        // Same greedy choice wherever the reference is not a near tie.
        std::vector<float> sorted = ref;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        if (sorted[0] - sorted[1] > 0.1f * std::abs(sorted[0]) + 0.05f) {
          ++top1_checked;
          auto r = out.row(0);
          CHECK(std::max_element(r.begin(), r.end()) - r.begin() == std::max_element(ref.begin(), ref.end()) - ref.begin());
        }
        // The same position again (its KV written again, the same up to the
        // order of split sums), now as
        // candidates with the row's normalizer (logprobs without the row):
        // the GPU top-k and kernels/log_sum_exp.cu against this row.
        one.top_k = 8;
        one.log_z = true;
        one.logits = BatchChunk::Logits::Last;
        ForwardOutput best;
        REQUIRE(backend->forward(std::span<const BatchChunk>(&one, 1), best).ok());
        REQUIRE(best.candidate_log_z.size() == 1);
        auto row = out.row(0);
        CHECK(best.candidate_row_logits(0)[0] ==
              doctest::Approx(*std::max_element(row.begin(), row.end())).epsilon(1e-5));
        CHECK(double(best.candidate_log_z[0]) ==
              doctest::Approx(row_log_normalizer(row)).epsilon(1e-5));
      }
      backend->kv_pool().release(0);
    }
    MESSAGE(name << ": worst relative error " << worst << ", greedy agreement checked at " << top1_checked);
  }
  CHECK(files >= 5);
}

TEST_CASE("SmolLM2 on CUDA: greedy text as the reference, batched and single agree, long context") {
  if (!fs::exists(demo_model())) {
    MESSAGE("SKIPPED: no demo model at " << demo_model());
    return;
  }
  auto model = load_model(demo_model());
  REQUIRE(model.ok());
  auto data = tokenizer_data_from_gguf(*model.value()->file);
  REQUIRE(data.ok());
  auto tok = Tokenizer::create(std::move(data).value());
  REQUIRE(tok.ok());
  auto cuda = make_cuda(model.value(), 2560, 4, 512);

  // Greedy 64 tokens on the chat prompts: identical to the reference (the
  // CPU backend matches the same reference exactly, tests/engine).
  std::ifstream in(fixtures() / "smollm2-135m.reference.json");
  auto ref = nlohmann::json::parse(in);
  for (auto& p : ref.at("prompts")) {
    auto ids = p.at("token_ids").get<std::vector<int32_t>>();
    auto want = p.at("greedy").at("new_tokens").get<std::vector<int32_t>>();
    if (p.at("greedy").at("first_eos_index").is_number()) want.resize(p.at("greedy").at("first_eos_index").get<size_t>());
    GenerateOptions go;
    go.max_tokens = 64;
    go.sampling.temperature = 0;
    auto r = generate(*cuda, tok.value(), ids, go);
    REQUIRE(r.ok());
    want.resize(std::min(want.size(), r->tokens.size() + (r->finish == FinishReason::Stop ? 0 : 0)));
    CHECK_MESSAGE(r->tokens == want, p.at("name").get<std::string>() << ": " << r->text);
  }

  // Three sequences in one step give what each gives alone.
  std::vector<std::vector<int32_t>> prompts = {tok->encode("The capital of France is", false, false),
                                               tok->encode("1, 2, 3, 4,", false, false),
                                               tok->encode("Once upon a time, in a land far away", false, false)};
  std::vector<std::vector<float>> alone;
  for (auto& pr : prompts) {
    REQUIRE(cuda->kv_pool().reserve(0, int64_t(pr.size())));
    BatchChunk c;
    c.tokens = pr;
    ForwardOutput out;
    REQUIRE(cuda->forward(std::span<const BatchChunk>(&c, 1), out).ok());
    alone.emplace_back(out.logits.begin(), out.logits.end());
    cuda->kv_pool().release(0);
  }
  std::vector<BatchChunk> chunks;
  for (size_t s = 0; s < prompts.size(); ++s) {
    REQUIRE(cuda->kv_pool().reserve(int32_t(s), int64_t(prompts[s].size())));
    BatchChunk c;
    c.seq_id = int32_t(s);
    c.tokens = prompts[s];
    chunks.push_back(c);
  }
  ForwardOutput batched;
  REQUIRE(cuda->forward(chunks, batched).ok());
  REQUIRE(batched.n_rows == 3);

  // The same step with the top-k taken on the device for two of the three:
  // one full row, then candidates in chunk order, each the best of its row.
  chunks[1].top_k = 40;
  chunks[2].top_k = 1;
  ForwardOutput mixed;
  REQUIRE(cuda->forward(chunks, mixed).ok());
  REQUIRE(mixed.n_rows == 1);
  REQUIRE(mixed.n_candidate_rows == 2);
  REQUIRE(mixed.candidate_k == 40);
  CHECK(relative_error(mixed.row(0), batched.row(0)) < 1e-5);
  for (int64_t r = 0; r < 2; ++r) {
    auto full = batched.row(r + 1);
    std::vector<float> sorted(full.begin(), full.end());
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float scale = std::abs(sorted[0]);
    auto ids = mixed.candidate_row_ids(r);
    auto values = mixed.candidate_row_logits(r);
    for (int i = 0; i < 40; ++i) {
      CHECK(std::abs(values[size_t(i)] - full[size_t(ids[size_t(i)])]) <= 1e-5f * scale);
      CHECK(std::abs(values[size_t(i)] - sorted[size_t(i)]) <= 1e-5f * scale);
      if (i > 0) CHECK(values[size_t(i)] <= values[size_t(i - 1)]);
    }
    CHECK(ids[0] == std::max_element(full.begin(), full.end()) - full.begin());
  }
  CHECK(mixed.candidate_log_z.empty());  // none asked
  // With the rows' normalizers (logprobs without the rows): one a candidate row.
  chunks[2].log_z = true;
  ForwardOutput normalized;
  REQUIRE(cuda->forward(chunks, normalized).ok());
  REQUIRE(normalized.n_candidate_rows == 2);
  REQUIRE(normalized.candidate_log_z.size() == 2);
  for (int64_t r = 0; r < 2; ++r)
    CHECK(double(normalized.candidate_log_z[size_t(r)]) ==
          doctest::Approx(row_log_normalizer(batched.row(r + 1))).epsilon(1e-5));
  chunks[2].log_z = false;
  // Drawn on the device (BatchChunk::noise): the noisy row's first candidate
  // is the largest Gumbel key of the row the step gives in full, its value
  // that row's logit; the plain row keeps its order.
  chunks[2].noise = {77, 5, 0.9f, 1};
  ForwardOutput drawn;
  REQUIRE(cuda->forward(chunks, drawn).ok());
  REQUIRE(drawn.n_candidate_rows == 2);
  CHECK(drawn.candidate_row_ids(0)[0] == mixed.candidate_row_ids(0)[0]);
  {
    auto full = batched.row(2);
    const uint64_t base = kernels::noise_base(chunks[2].noise);
    std::vector<float> keys;
    for (size_t i = 0; i < full.size(); ++i)
      keys.push_back(kernels::noise_key(full[i], 0.9f, base, int64_t(i)));
    const auto want = std::max_element(keys.begin(), keys.end()) - keys.begin();
    const int32_t got = drawn.candidate_row_ids(1)[0];
    const float scale = std::abs(*std::max_element(full.begin(), full.end()));
    REQUIRE(got >= 0);
    REQUIRE(size_t(got) < full.size());
    CHECK(keys[size_t(got)] >= keys[size_t(want)] - 1e-5f * scale);  // the draw, or a near tie
    CHECK(std::abs(drawn.candidate_row_logits(1)[0] - full[size_t(got)]) <= 1e-5f * scale);
  }
  chunks[2].noise = {};
  chunks[1].top_k = chunks[2].top_k = 0;
  // Batched and alone run different kernel variants (rows per warp, batch
  // slices, GEMM from 25 tokens), so their fp32 sums differ in order: ~1e-3
  // of the largest logit. What this guards against is one sequence leaking
  // into another, which shows as errors of order 1.
  for (size_t s = 0; s < prompts.size(); ++s) {
    double err = relative_error(batched.row(int64_t(s)), alone[s]);
    MESSAGE("sequence " << s << ": batched vs alone relative error " << err);
    CHECK(err < 5e-3);
    auto row = batched.row(int64_t(s));
    CHECK(std::max_element(row.begin(), row.end()) - row.begin() ==
          std::max_element(alone[s].begin(), alone[s].end()) - alone[s].begin());
    cuda->kv_pool().release(int32_t(s));
  }

  // A context past 2048 tokens: CUDA against the CPU reference.
  std::string long_text;
  for (int i = 0; long_text.size() < 9000; ++i) long_text += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog. ";
  auto long_ids = tok->encode(long_text, false, false);
  REQUIRE(long_ids.size() > 2048);
  long_ids.resize(std::min<size_t>(long_ids.size(), 2400));
  CpuBackendOptions co;
  co.max_context = 2560;
  auto cpu = CpuBackend::create(model.value(), co);
  REQUIRE(cpu.ok());
  std::vector<float> cpu_logits, cuda_logits;
  for (Backend* b : {static_cast<Backend*>(cpu.value().get()), static_cast<Backend*>(cuda.get())}) {
    REQUIRE(b->kv_pool().reserve(0, int64_t(long_ids.size())));
    ForwardOutput out;
    for (size_t start = 0; start < long_ids.size(); start += 512) {
      BatchChunk c;
      c.start_pos = int32_t(start);
      c.tokens = std::span<const int32_t>(long_ids).subspan(start, std::min<size_t>(512, long_ids.size() - start));
      REQUIRE(b->forward(std::span<const BatchChunk>(&c, 1), out).ok());
    }
    (b == cuda.get() ? cuda_logits : cpu_logits).assign(out.logits.begin(), out.logits.end());
    b->kv_pool().release(0);
  }
  double err = relative_error(cuda_logits, cpu_logits);
  MESSAGE("long context (" << long_ids.size() << " tokens): CUDA vs CPU relative error " << err);
  CHECK(err < 5e-2);
  CHECK(std::max_element(cuda_logits.begin(), cuda_logits.end()) - cuda_logits.begin() ==
        std::max_element(cpu_logits.begin(), cpu_logits.end()) - cpu_logits.begin());
}

TEST_CASE("INT8 KV cache: logits stay close to the FP16 cache's on every tiny model") {
  for (const char* name : {"tiny-llama.F32", "tiny-qwen3.F32", "tiny-qwen2.F32", "tiny-llama256.Q4_K_M"}) {
    auto model = load_model((fixtures() / (std::string(name) + ".gguf")).string());
    REQUIRE(model.ok());
    std::ifstream in(fixtures() / (std::string(name) + ".logits.json"));
    auto j = nlohmann::json::parse(in);
    auto tokens = j.at("cases").at(0).at("tokens").get<std::vector<int32_t>>();
    std::vector<std::vector<float>> results;
    for (bool int8 : {false, true}) {
      CudaBackendOptions o;
      o.kernels = test_kernel_set();
      o.max_context = 256;
      o.max_sequences = 4;
      o.max_batch_tokens = 256;
      o.kv_int8 = int8;
      auto b = CudaBackend::create(model.value(), o);
      REQUIRE(b.ok());
      REQUIRE(b.value()->kv_pool().reserve(0, int64_t(tokens.size())));
      ForwardOutput out;
      // Prefill all but the last token, then decode it: the cache is read.
      BatchChunk first;
      first.tokens = std::span<const int32_t>(tokens).first(tokens.size() - 1);
      first.logits = BatchChunk::Logits::None;
      REQUIRE(b.value()->forward(std::span<const BatchChunk>(&first, 1), out).ok());
      BatchChunk last;
      last.start_pos = int32_t(tokens.size() - 1);
      last.tokens = std::span<const int32_t>(tokens).last(1);
      REQUIRE(b.value()->forward(std::span<const BatchChunk>(&last, 1), out).ok());
      results.emplace_back(out.logits.begin(), out.logits.end());
    }
    double err = relative_error(results[1], results[0]);
    MESSAGE(name << ": INT8 vs FP16 KV relative error " << err);
    CHECK(err < 3e-2);
  }
}

// Steps of 2-32 tokens with `auto` on an sm_80+ card run the narrow GEMM,
// whose x RMSNorm, SwiGLU and the attention combine write themselves, so
// that its GEMMs skip their conversion (CudaBackend::Impl::enqueue_step).
// Against the portable kernels on the same steps: 5-token prompts, decode
// steps of 8, 2 and 3 sequences, and a step mixing a 20-token chunk (the tensor-core
// prefill attention, so wo converts its x itself) with 7 decode tokens; with
// both KV caches. Before the test case that sets VOLTAD_GEMM_SM80_ALWAYS,
// which turns the narrow GEMM off for the rest of the binary.
TEST_CASE("batched steps with auto (narrow GEMM, fused x) follow the portable kernels") {
  int device = 0, major = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess);
  auto model = load_model((fixtures() / "tiny-llama256.Q4_K_M.gguf").string());
  REQUIRE(model.ok());
  const int32_t vocab = int32_t(model.value()->config.n_vocab);
  // With the threshold moved, the 2- and 3-token steps below would not take
  // the narrow GEMM and the test would not test them.
  CHECK_MESSAGE(!std::getenv("VOLTAD_GEMM_MIN_TOKENS"),
                "VOLTAD_GEMM_MIN_TOKENS is set: the small steps may run the matvecs");
  // 8 sequences: their decode steps also take the attention's combine in
  // pass 1 (from 8 tokens), whose counters the graph replays must find zero.
  const int S = 8;
  for (bool kv_int8 : {false, true}) {
    CAPTURE(kv_int8);
    // rows[2]: portable with the next norms made in pieces by wo and w_down
    // (VOLTAD_NORM_PIECES=1; kernels/gemm_wmma.h, NormPieces); rows[0]
    // without them. rows[3]: as rows[0], but the lm head converts its x
    // itself (VOLTAD_HEAD_X16=0) instead of reading the fp16 x the final
    // norm writes for it. rows[4]: as rows[0], but SwiGLU launched
    // (VOLTAD_SWIGLU_FUSED_MAX=0), not made by gate|up's blocks
    // (kernels::SwigluOut).
    std::vector<std::vector<float>> rows[5];
    std::string used;
    uint64_t fused[5] = {};
    for (int k = 0; k < 5; ++k) {
      const EnvScope pieces("VOLTAD_NORM_PIECES", k == 2 ? "1" : "0");
      const EnvScope head_x16("VOLTAD_HEAD_X16", k == 3 ? "0" : nullptr);
      const EnvScope swiglu("VOLTAD_SWIGLU_FUSED_MAX", k == 4 ? "0" : nullptr);
      const uint64_t fused_before = kernels::gemm_narrow_swiglu_launches();  // create() captures
      CudaBackendOptions o;
      o.kernels = k == 1 ? kernels::KernelSet::Auto : kernels::KernelSet::Portable;
      o.max_context = 128;
      o.max_sequences = 8;
      o.max_batch_tokens = 64;
      o.kv_int8 = kv_int8;
      auto created = CudaBackend::create(model.value(), o);
      REQUIRE_MESSAGE(created.ok(), (created.ok() ? "" : created.error().message));
      CudaBackend& be = *created.value();
      if (k == 1) used = be.kernels_in_use();
      std::vector<std::vector<int32_t>> toks(S);
      auto step = [&](const std::vector<BatchChunk>& chunks) {
        ForwardOutput out;
        REQUIRE(be.forward(chunks, out).ok());
        for (int64_t r = 0; r < out.n_rows; ++r) rows[k].emplace_back(out.row(r).begin(), out.row(r).end());
      };
      // Appends n tokens to each listed sequence, then runs them as one step.
      auto extend = [&](const std::vector<std::pair<int, int>>& seq_and_count, int salt) {
        std::vector<BatchChunk> chunks;
        for (auto [s, count] : seq_and_count)
          for (int i = 0; i < count; ++i)
            toks[size_t(s)].push_back(int32_t((s * 131 + i * 7919 + salt * 977 + 17) % vocab));
        for (auto [s, count] : seq_and_count) {
          BatchChunk c;
          c.seq_id = s;
          c.start_pos = int32_t(toks[size_t(s)].size()) - count;
          c.tokens = std::span<const int32_t>(toks[size_t(s)]).last(size_t(count));
          chunks.push_back(c);
        }
        step(chunks);
      };
      for (int s = 0; s < S; ++s) {
        REQUIRE(be.kv_pool().reserve(s, 64));
        extend({{s, 5}}, 0);  // a 5-token prompt: a narrow-GEMM step alone
      }
      for (int d = 1; d <= 3; ++d) {  // decode steps of all eight
        std::vector<std::pair<int, int>> all;
        for (int s = 0; s < S; ++s) all.push_back({s, 1});
        extend(all, d);
      }
      // Decode steps of 2 and 3 sequences: the narrow GEMM's smallest steps
      // under auto (kGemmMinTokensNarrowSm80), the matvecs under portable.
      extend({{0, 1}, {1, 1}}, 5);
      extend({{2, 1}, {3, 1}, {4, 1}}, 6);
      std::vector<std::pair<int, int>> mixed = {{0, 20}};  // 20 + 7 = 27 tokens
      for (int s = 1; s < S; ++s) mixed.push_back({s, 1});
      extend(mixed, 7);
      fused[k] = kernels::gemm_narrow_swiglu_launches() - fused_before;
    }
    MESSAGE("auto runs '" << used << "'");
    if (major >= 8 && !std::getenv("VOLTAD_GEMM_SM80_ALWAYS"))
      CHECK(used.find("sm80-narrow") != std::string::npos);
    REQUIRE(rows[0].size() == size_t(S + 3 * S + 2 + 3 + S));
    // Against rows[0]: the worst relative error of a logit row and the
    // rows with the same bits.
    auto against_portable = [&](int k) {
      REQUIRE(rows[k].size() == rows[0].size());
      std::pair<double, int> out{0.0, 0};
      for (size_t r = 0; r < rows[0].size(); ++r) {
        out.first = std::max(out.first, relative_error(rows[k][r], rows[0][r]));
        out.second += rows[k][r] == rows[0][r];
      }
      return out;
    };
    const double worst = against_portable(1).first;
    MESSAGE("auto vs portable, batched steps: worst relative error " << worst);
    CHECK(worst < 2e-2);
    // The norm's pieces: fp16 g * h / 16 for fp16 g * h / rms, the same
    // kernels otherwise (the 2- and 3-token steps, matvecs, are the same bits).
    const auto [pieces_worst, same] = against_portable(2);
    MESSAGE("norm pieces vs the norm, batched steps: worst relative error "
            << pieces_worst << ", " << same << " rows the same");
    CHECK(pieces_worst < 1e-2);
    CHECK(same < int(rows[0].size()));  // the pieces ran: the 4+-token steps' logits moved
    // The head on the norm's fp16 x: the same fp16 operands, 32 values of
    // k a chunk in another order (the matvec steps of 2-3 tokens: the same
    // bits). Had the norm's x not been the head's, the logits would be far.
    const auto [head_worst, head_same] = against_portable(3);
    MESSAGE("the head on fp32 x vs on the norm's fp16 x: worst relative error "
            << head_worst << ", " << head_same << " rows the same");
    CHECK(head_worst < 1e-3);
    CHECK(head_same >= 5);                   // the 2- and 3-token steps
    CHECK(head_same < int(rows[0].size()));  // the 4+-token steps' head read x16
    // SwiGLU made by gate|up: the same arithmetic on the same values, and
    // w_down reads the same fp16 x, so the same bits; it ran under portable
    // (with the norm's pieces too), never under auto or when turned off.
    const auto [fused_worst, fused_same] = against_portable(4);
    MESSAGE("SwiGLU launched vs made by gate|up ("
            << fused[0] << " launches): worst relative error " << fused_worst << ", " << fused_same
            << " rows the same");
    CHECK(fused[0] > 0);
    CHECK(fused[2] > 0);
    CHECK(fused[1] == 0);
    CHECK(fused[4] == 0);
    CHECK(fused_same == int(rows[0].size()));
  }
}

// An lm head of kGemmHeadRows rows or more takes the 32x128 tiles at 9-32
// tokens (gemm_pick_tile); under `portable` they read the fp16 x the final
// norm writes for them (run 64). Steps of 16 and 12 sequences against the
// same steps with VOLTAD_HEAD_X16=0, where the head converts the norm's
// fp32 x itself: the same fp16 operands (the tiles give the same bits on
// either x: test_gemm_tiles_x16), so the logits are close or the same; and
// the x16 tiles must have run (a head that read some other x would be far
// off).
TEST_CASE("an lm head in the 32-token tiles reads the final norm's fp16 x (portable)") {
  test::TinyModelSpec spec;
  spec.dim = 256;
  spec.n_layers = 1;
  spec.ffn_dim = 256;
  spec.n_vocab = kernels::kGemmHeadRows + 64;
  spec.omit.insert("output.weight");
  GgufWriter w = test::tiny_model_writer(spec);
  std::mt19937 rng(5);
  w.add_tensor("output.weight", GgmlType::Q6_K, {256, uint64_t(spec.n_vocab)},
               test::random_valid_tensor(GgmlType::Q6_K, spec.n_vocab, 256, rng, 15));
  auto file = GgufFile::from_bytes(w.to_bytes(), "big-vocab.gguf");
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  auto model = load_model(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  const int32_t vocab = int32_t(spec.n_vocab);
  std::vector<std::vector<float>> rows[2];
  uint64_t launched[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const EnvScope head_x16("VOLTAD_HEAD_X16", k == 1 ? "0" : nullptr);
    // Counted before create(), which captures the decode graphs.
    const uint64_t before = kernels::gemm_tiles_x16_launches();
    auto be = make_cuda(model.value(), 64, 16, 64, kernels::KernelSet::Portable);
    std::vector<std::vector<int32_t>> toks(16);
    for (int s = 0; s < 16; ++s) REQUIRE(be->kv_pool().reserve(s, 8));
    for (int count : {16, 12, 16}) {  // one token of each of the first `count` sequences
      std::vector<BatchChunk> chunks;
      for (int s = 0; s < count; ++s)
        toks[size_t(s)].push_back(
            int32_t((s * 7919 + int(toks[size_t(s)].size()) * 131 + 17) % vocab));
      for (int s = 0; s < count; ++s) {
        BatchChunk c;
        c.seq_id = s;
        c.start_pos = int32_t(toks[size_t(s)].size()) - 1;
        c.tokens = std::span<const int32_t>(toks[size_t(s)]).last(1);
        chunks.push_back(c);
      }
      ForwardOutput out;
      REQUIRE(be->forward(chunks, out).ok());
      REQUIRE(out.n_rows == count);
      for (int64_t r = 0; r < out.n_rows; ++r)
        rows[k].emplace_back(out.row(r).begin(), out.row(r).end());
    }
    launched[k] = kernels::gemm_tiles_x16_launches() - before;
  }
  CHECK(launched[0] > 0);
  CHECK(launched[1] == 0);
  REQUIRE(rows[0].size() == rows[1].size());
  double worst = 0.0;
  for (size_t r = 0; r < rows[0].size(); ++r) {
    for (float v : rows[1][r]) REQUIRE(std::isfinite(v));
    worst = std::max(worst, relative_error(rows[0][r], rows[1][r]));
  }
  MESSAGE("the head's tiles on the norm's fp16 x vs on fp32 x: worst relative error " << worst);
  CHECK(worst < 1e-3);
}

// The two kernel sets on prompt chunks long enough for the GEMM (25+
// tokens): on an sm_80+ card `auto` runs the sm_80 GEMM, whose results are
// bit-identical to the portable one's (tests/kernels/test_gemm.cpp), so the
// logits must be too.
TEST_CASE("engine.kernels: auto and portable give the same logits on prompt chunks") {
  // These models' matrices are too small for auto to prefer the variant on
  // its own: take it wherever it runs (kernels/gemm_sm80.h), here and in
  // the test cases after this one.
  setenv("VOLTAD_GEMM_SM80_ALWAYS", "1", 1);
  std::vector<std::string> paths;
  for (const char* name : {"tiny-llama.F32", "tiny-qwen3.F32", "tiny-qwen2.F32", "tiny-llama256.Q4_K_M"})
    paths.push_back((fixtures() / (std::string(name) + ".gguf")).string());
  if (fs::exists(demo_model())) paths.push_back(demo_model());
  else MESSAGE("no demo model at " << demo_model() << ": tiny models only");
  for (const std::string& path : paths) {
    CAPTURE(path);
    auto model = load_model(path);
    REQUIRE(model.ok());
    std::vector<int32_t> tokens;
    const int32_t vocab = int32_t(model.value()->config.n_vocab);
    for (int i = 0; i < 100; ++i) tokens.push_back(int32_t((i * 7919 + 13) % vocab));
    std::vector<std::vector<float>> logits;
    std::vector<std::string> used;
    for (kernels::KernelSet set : {kernels::KernelSet::Portable, kernels::KernelSet::Auto}) {
      auto backend = make_cuda(model.value(), 256, 2, 128, set);
      used.push_back(backend->kernels_in_use());
      REQUIRE(backend->kv_pool().reserve(0, int64_t(tokens.size())));
      BatchChunk c;
      c.tokens = tokens;
      ForwardOutput out;
      REQUIRE(backend->forward(std::span<const BatchChunk>(&c, 1), out).ok());
      logits.emplace_back(out.logits.begin(), out.logits.end());
    }
    CHECK(used[0].rfind("portable", 0) == 0);  // "portable" or "portable + paired-b (...)"
    MESSAGE(path << ": auto runs '" << used[1] << "'");
    REQUIRE(logits[0].size() == logits[1].size());
    const double err = relative_error(logits[1], logits[0]);
    CHECK_MESSAGE(err == 0.0, "auto vs portable relative error " << err);
  }
}

TEST_CASE("engine.kernels: auto uses the sm_80 GEMMs (sm_80+) and PDL (sm_90+) on a card built for it") {
  int device = 0, major = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess);
  auto model = load_model((fixtures() / "tiny-llama.F32.gguf").string());
  REQUIRE(model.ok());
  auto backend = make_cuda(model.value(), 64, 1, 32, kernels::KernelSet::Auto);
  const std::string used = backend->kernels_in_use();
  MESSAGE("auto runs '" << used << "'");
  if (major >= 8) CHECK(used.rfind("auto: sm80-gemm", 0) == 0);
  else CHECK(used == "auto: portable");
  if (major >= 9) CHECK(used.find("pdl") != std::string::npos);

  // A model whose every decode matrix the sm_80 narrow GEMM takes (Q4_K and
  // Q6_K, rows of whole super-blocks): auto runs steps of a few tokens on it.
  auto q4km = load_model((fixtures() / "tiny-llama256.Q4_K_M.gguf").string());
  REQUIRE(q4km.ok());
  const std::string used_q4km = make_cuda(q4km.value(), 64, 8, 64, kernels::KernelSet::Auto)->kernels_in_use();
  MESSAGE("auto on tiny-llama256.Q4_K_M runs '" << used_q4km << "'");
  if (major >= 8) CHECK(used_q4km.find("sm80-narrow") != std::string::npos);
  // Its gate|up has far too few rows for the streaming blocks' rule (4 row
  // groups of 16 for every SM).
  CHECK(used_q4km.find("sm90-narrow-bulk") == std::string::npos);
  const std::string portable_q4km =
      make_cuda(q4km.value(), 64, 8, 64, kernels::KernelSet::Portable)->kernels_in_use();
  // Paired B named where the probe found an order (sm_80+: Quads,
  // tests/kernels/test_gemm_pairs.cpp).
  const kernels::WmmaPairs pairs = kernels::gemm_narrow_pairs();
  const std::string blocks32 = kernels::gemm_narrow_tokens32() ? ", 32-token blocks" : "";
  CHECK(portable_q4km == (pairs == kernels::WmmaPairs::None
                              ? std::string("portable")
                              : "portable + paired-b (" +
                                    std::string(kernels::wmma_pairs_name(pairs)) + blocks32 + ")"));
}

TEST_CASE("stacked, partly stacked and separate projections: CUDA follows the CPU backend") {
  auto model = mixed_type_model();
  auto planned = repacked_weight_bytes(model->weights, model->config);
  REQUIRE(planned.ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 48; ++i) tokens.push_back(int32_t((i * 37 + 5) % model->config.n_vocab));
  // The reference: a 40-token prompt, then 8 tokens decoded one by one.
  auto run = [&](Backend& b) {
    std::vector<std::vector<float>> rows;
    REQUIRE(b.kv_pool().reserve(0, int64_t(tokens.size())));
    BatchChunk prompt;
    prompt.tokens = std::span<const int32_t>(tokens).first(40);  // the GEMM path (>= 25 tokens)
    ForwardOutput out;
    REQUIRE(b.forward(std::span<const BatchChunk>(&prompt, 1), out).ok());
    rows.emplace_back(out.logits.begin(), out.logits.end());
    for (size_t p = 40; p < tokens.size(); ++p) {  // the matvec path, decode graphs
      BatchChunk one;
      one.start_pos = int32_t(p);
      one.tokens = std::span<const int32_t>(tokens).subspan(p, 1);
      REQUIRE(b.forward(std::span<const BatchChunk>(&one, 1), out).ok());
      rows.emplace_back(out.logits.begin(), out.logits.end());
    }
    b.kv_pool().release(0);
    return rows;
  };
  CpuBackendOptions co;
  co.max_context = 256;
  auto cpu = CpuBackend::create(model, co);
  REQUIRE(cpu.ok());
  const auto want = run(*cpu.value());
  // Layer 1's separate q|k and v: on the side stream (VOLTAD_QKV_SIDE=1;
  // the rule with plain launches), one after the other (=0; the rule under
  // programmatic launch), then at one token as one paired launch
  // (kernels::launch_matvec_pair), and v first where VOLTAD_QKV_REVERSE=1
  // (the rule takes it only for narrow GEMMs of 9-32 tokens, which these
  // steps do not have). The switches are read as the backend is created.
  // The same kernels in another order or on another stream: the same bits.
  std::map<bool, std::vector<std::vector<float>>> one_after_other;
  struct Order {
    const char *side, *reverse;
  };
  // The first order's bits are the reference for the others'.
  for (const Order order : {Order{"0", nullptr}, Order{nullptr, nullptr}, Order{"1", nullptr},
                            Order{"0", "1"}, Order{"0", "0"}})
    for (bool int8 : {false, true}) {
      CAPTURE(int8);
      CAPTURE((order.side ? order.side : "rule"));
      CAPTURE((order.reverse ? order.reverse : "rule"));
      const EnvScope side_scope("VOLTAD_QKV_SIDE", order.side);
      const EnvScope reverse_scope("VOLTAD_QKV_REVERSE", order.reverse);
      CudaBackendOptions o;
      o.kernels = test_kernel_set();
      o.max_context = 256;
      o.max_sequences = 4;
      o.max_batch_tokens = 256;
      o.kv_int8 = int8;
      auto cuda = CudaBackend::create(model, o);
      REQUIRE_MESSAGE(cuda.ok(), (cuda.ok() ? "" : cuda.error().message));
      CHECK(cuda.value()->memory_use().weights == *planned);
      // head_dim 64: with auto on an sm_80+ card the fp16 cache's decode
      // steps take the tensor-core attention, checked here against the CPU.
      const std::string used = cuda.value()->kernels_in_use();
      MESSAGE("CUDA runs '" << used << "'");
      if (o.kernels == kernels::KernelSet::Auto && kernels::gemm_sm80_available() && !int8 &&
          !std::getenv("VOLTAD_ATTENTION_MMA"))
        CHECK(used.find("sm80-attention") != std::string::npos);
      const auto got = run(*cuda.value());
      REQUIRE(got.size() == want.size());
      for (size_t r = 0; r < got.size(); ++r) {
        CAPTURE(r);
        REQUIRE(got[r].size() == want[r].size());
        for (float v : want[r]) REQUIRE(std::isfinite(v));
        const double err = relative_error(got[r], want[r]);
        CHECK_MESSAGE(err < 5e-2, "step " << r << ": relative error " << err);
        if (r == 0 || r + 1 == got.size())
          MESSAGE("step " << r << ": CUDA vs CPU relative error " << err);
      }
      if (one_after_other.count(int8) == 0)
        one_after_other[int8] = got;
      else
        CHECK(got == one_after_other[int8]);
    }
}
