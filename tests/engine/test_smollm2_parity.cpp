// The real model: SmolLM2-135M-Instruct (Q4_1, from scripts/fetch-demo-model.sh)
// through the CPU backend and our tokenizer, against transformers in float64
// on the same dequantized weights (tests/fixtures/models/smollm2-135m.*).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/backend_cpu.h"
#include "engine/chat_template.h"
#include "engine/generate.h"
#include "engine/tokenizer.h"

using namespace voltad;
namespace fs = std::filesystem;

namespace {

// What the daemon tells its user to set (daemon_run.cpp).
const std::string kHow = "set model.chat_template to llama3 or chatml in the configuration";

fs::path fixtures() {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  return fs::path(src ? src : ".") / "tests/fixtures/models";
}

std::string demo_model() {
  if (const char* m = std::getenv("VOLTAD_DEMO_MODEL")) return m;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/voltad/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<float> v(size_t(fs::file_size(p) / 4));
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

}  // namespace

TEST_CASE("SmolLM2: tokens, last logits and greedy text match transformers") {
  if (!fs::exists(demo_model())) {
    MESSAGE("SKIPPED: no demo model at " << demo_model() << " (run scripts/fetch-demo-model.sh)");
    return;
  }
  auto model = load_model(demo_model());
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  auto data = tokenizer_data_from_gguf(*model.value()->file);
  REQUIRE(data.ok());
  auto tok = Tokenizer::create(std::move(data).value());
  REQUIRE(tok.ok());
  auto chat = choose_chat_format(tok->data().chat_template, "auto", kHow);
  REQUIRE(chat.ok());
  CpuBackendOptions o;
  o.threads = 2;
  o.max_context = 160;
  auto backend = CpuBackend::create(model.value(), o);
  REQUIRE(backend.ok());

  std::ifstream in(fixtures() / "smollm2-135m.reference.json");
  auto ref = nlohmann::json::parse(in);
  int greedy_checked = 0;
  for (auto& p : ref.at("prompts")) {
    const std::string name = p.at("name");
    const auto expected_ids = p.at("token_ids").get<std::vector<int32_t>>();

    // Our tokenizer and chat template give the reference's prompt ids.
    std::vector<int32_t> ids;
    if (p.at("chat").get<bool>()) {
      auto options = chat_render_options_from_template(chat.value(), tok->data().chat_template);
      std::string text = render_chat(chat.value(), {{"user", p.at("user_text")}}, true, "", options);
      CHECK_MESSAGE(text == p.at("prompt_text").get<std::string>(), name);
      ids = tok->encode(text, tok->data().add_bos, true);
    } else {
      ids = tok->encode(p.at("prompt_text").get<std::string>(), tok->data().add_bos, false);
    }
    CHECK_MESSAGE(ids == expected_ids, name << ": prompt tokens differ");

    // Last-position logits: relative error well under 1e-3 (fp32 vs fp64
    // transformers was ~2e-6 on this model).
    REQUIRE(backend.value()->kv_pool().reserve(0, int64_t(expected_ids.size())));
    BatchChunk chunk;
    chunk.tokens = expected_ids;
    ForwardOutput out;
    REQUIRE(backend.value()->forward(std::span<const BatchChunk>(&chunk, 1), out).ok());
    backend.value()->kv_pool().release(0);
    auto want = read_f32(fixtures() / p.at("last_logits_file").get<std::string>());
    REQUIRE(want.size() == size_t(out.n_vocab));
    double max_diff = 0, max_ref = 0;
    for (size_t v = 0; v < want.size(); ++v) {
      max_diff = std::max(max_diff, std::abs(double(out.logits[v]) - want[v]));
      max_ref = std::max(max_ref, std::abs(double(want[v])));
    }
    MESSAGE(name << ": last-logits relative error " << max_diff / max_ref);
    CHECK(max_diff / max_ref < 1e-4);

    // Greedy generation of 32 tokens is identical (up to end of generation).
    if (!p.at("chat").get<bool>() && greedy_checked >= 1) continue;  // keep CI time down
    const auto& g = p.at("greedy");
    auto want_tokens = g.at("new_tokens").get<std::vector<int32_t>>();
    size_t n = 32;
    if (g.at("first_eos_index").is_number()) n = std::min(n, g.at("first_eos_index").get<size_t>());
    want_tokens.resize(std::min(want_tokens.size(), n));
    GenerateOptions go;
    go.max_tokens = 32;
    go.sampling.temperature = 0;
    auto result = generate(*backend.value(), tok.value(), expected_ids, go);
    REQUIRE(result.ok());
    CHECK_MESSAGE(result->tokens == want_tokens, name << ": greedy tokens differ; ours: " << result->text);
    ++greedy_checked;
  }
  CHECK(greedy_checked >= 2);
}
