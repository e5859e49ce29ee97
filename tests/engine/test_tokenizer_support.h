// Helpers for the tokenizer tests: where the fixtures, the shared Hugging
// Face tokenizers and the SmolLM2 GGUF are, and loaders that keep one
// tokenizer of each kind for the whole test binary.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/gguf_file.h"
#include "engine/tokenizer.h"

namespace voltad::test {

inline std::filesystem::path tok_source_dir() {
  if (const char* env = std::getenv("VOLTAD_SOURCE_DIR")) return env;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

inline std::filesystem::path tok_shared_dir() {
  if (const char* env = std::getenv("VOLTAD_SHARED_DIR")) return env;
  return tok_source_dir().parent_path() / "shared";
}

inline nlohmann::json load_tokenizer_fixture(const std::string& name) {
  std::filesystem::path path = tok_source_dir() / "tests" / "fixtures" / "tokenizer" / name;
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(),
                  "missing fixture " << path << " (scripts/gen_tokenizer_fixtures.py writes it)");
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

// The SmolLM2 GGUF ($VOLTAD_DEMO_MODEL, else the fetch script's cache
// path), or "" when it is not on this machine.
inline std::string smollm2_gguf_path() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("VOLTAD_DEMO_MODEL")) candidates.emplace_back(env);
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path cache_dir = cache ? std::filesystem::path(cache)
                                          : std::filesystem::path(home ? home : "/root") / ".cache";
  candidates.push_back(cache_dir / "voltad" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf");
  candidates.emplace_back("/root/.cache/voltad/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  for (const auto& c : candidates)
    if (std::filesystem::is_regular_file(c)) return c.string();
  return {};
}

// "llama3", "qwen3" (shared tokenizer.json) or "smollm2" (GGUF); null when
// the SmolLM2 file is absent. Loaded once per binary.
inline const Tokenizer* shared_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  Result<TokenizerData> data = make_error("unknown tokenizer " + name);
  if (name == "smollm2") {
    std::string path = smollm2_gguf_path();
    if (path.empty()) return nullptr;
    auto file = GgufFile::open(path);
    REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
    data = tokenizer_data_from_gguf(*file.value());
  } else {
    std::filesystem::path dir = tok_shared_dir() / "tokenizers" / name;
    data = tokenizer_data_from_hf_json((dir / "tokenizer.json").string(),
                                       (dir / "tokenizer_config.json").string());
  }
  REQUIRE_MESSAGE(data.ok(), (data.ok() ? "" : data.error().message));
  auto tok = Tokenizer::create(std::move(data.value()));
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().message));
  auto owned = std::make_unique<Tokenizer>(std::move(tok.value()));
  const Tokenizer* raw = owned.get();
  cache.emplace(name, std::move(owned));
  return raw;
}

}  // namespace voltad::test
