// Helpers shared by the GGUF tests: fixture paths, the demo model, and a
// builder of tiny but complete model files (random weights) whose every
// key and tensor a test can drop, override or corrupt.
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/dequantize.h"
#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"

namespace voltad::test {

inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("VOLTAD_SOURCE_DIR")) return env;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

inline std::string fixture_path(const std::string& name) {
  return (source_dir() / "tests" / "fixtures" / "gguf" / name).string();
}

// The real SmolLM2 file (scripts/fetch-demo-model.sh), or "" when absent.
inline std::string demo_model_path() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("VOLTAD_DEMO_MODEL")) candidates.emplace_back(env);
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::filesystem::path cache_dir =
      cache ? std::filesystem::path(cache)
            : std::filesystem::path(home ? home : "/root") / ".cache";
  candidates.push_back(cache_dir / "voltad" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf");
  for (const auto& p : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// Random bytes of a tensor of `type` with `n_elements` values: valid for
// every type once the fp16 scales are finite, which random F32 data and
// Q8_0 (scale overwritten) guarantee; other quant types get whatever bytes.
inline std::vector<uint8_t> random_tensor_bytes(GgmlType type, uint64_t n_elements,
                                                std::mt19937& rng) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  std::vector<uint8_t> bytes(n_elements / info->block_elems * info->block_bytes);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  if (type == GgmlType::F32) {
    for (size_t i = 0; i < bytes.size(); i += 4) {
      const float v = uniform(rng);
      std::memcpy(bytes.data() + i, &v, 4);
    }
    return bytes;
  }
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  if (type == GgmlType::Q8_0) {
    for (size_t i = 0; i < bytes.size(); i += 34) {
      const uint16_t d = fp32_to_fp16(std::abs(uniform(rng)) / 64);
      std::memcpy(bytes.data() + i, &d, 2);
    }
  }
  return bytes;
}

struct TinyModelSpec {
  std::string arch = "llama";
  int64_t dim = 64, n_layers = 2, n_heads = 4, n_kv_heads = 2, ffn_dim = 96, n_vocab = 40;
  int64_t key_length = 0;  // 0: don't write attention.key_length
  int64_t context_length = 256;
  bool tied = false;
  bool rope_freqs = false;
  GgmlType matrix_type = GgmlType::Q8_0;
  std::string chat_template = "{% for m in messages %}<|im_start|>...{% endfor %}";
  std::set<std::string> omit;              // keys and tensor names to leave out
  std::map<std::string, GgmlType> retype;  // tensor name -> type (bytes follow the type)
  std::map<std::string, std::vector<uint64_t>> reshape;  // tensor name -> ne
  uint32_t seed = 7;
};

inline int64_t tiny_head_dim(const TinyModelSpec& s) {
  return s.key_length ? s.key_length : s.dim / s.n_heads;
}

// A complete model of spec.arch with random weights, as a GGUF writer that
// the caller may extend before serialising.
inline GgufWriter tiny_model_writer(const TinyModelSpec& s) {
  GgufWriter w;
  auto key = [&](const std::string& k) { return !s.omit.count(k); };
  const std::string p = s.arch + ".";
  if (key("general.architecture")) w.add_string("general.architecture", s.arch);
  if (key("general.name")) w.add_string("general.name", "tiny " + s.arch);
  if (key(p + "embedding_length")) w.add_u32(p + "embedding_length", uint32_t(s.dim));
  if (key(p + "block_count")) w.add_u32(p + "block_count", uint32_t(s.n_layers));
  if (key(p + "attention.head_count")) w.add_u32(p + "attention.head_count", uint32_t(s.n_heads));
  if (key(p + "attention.head_count_kv"))
    w.add_u32(p + "attention.head_count_kv", uint32_t(s.n_kv_heads));
  if (s.key_length) w.add_u32(p + "attention.key_length", uint32_t(s.key_length));
  if (key(p + "feed_forward_length")) w.add_u32(p + "feed_forward_length", uint32_t(s.ffn_dim));
  if (key(p + "context_length")) w.add_u32(p + "context_length", uint32_t(s.context_length));
  if (key(p + "attention.layer_norm_rms_epsilon"))
    w.add_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (key(p + "rope.freq_base")) w.add_f32(p + "rope.freq_base", 1e6f);
  if (key("tokenizer.ggml.model")) w.add_string("tokenizer.ggml.model", "gpt2");
  if (key("tokenizer.ggml.tokens")) {
    std::vector<std::string> tokens;
    for (int64_t i = 0; i < s.n_vocab; ++i) tokens.push_back("tok" + std::to_string(i));
    w.add_string_array("tokenizer.ggml.tokens", tokens);
  }
  if (key("tokenizer.chat_template")) w.add_string("tokenizer.chat_template", s.chat_template);

  std::mt19937 rng(s.seed);
  auto tensor = [&](const std::string& name, GgmlType type, std::vector<uint64_t> ne) {
    if (s.omit.count(name)) return;
    if (auto it = s.retype.find(name); it != s.retype.end()) type = it->second;
    if (auto it = s.reshape.find(name); it != s.reshape.end()) ne = it->second;
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    w.add_tensor(name, type, ne, random_tensor_bytes(type, n, rng));
  };
  const uint64_t dim = s.dim, hd = tiny_head_dim(s), q = s.n_heads * hd, kv = s.n_kv_heads * hd;
  const uint64_t ffn = s.ffn_dim, vocab = s.n_vocab;
  tensor("token_embd.weight", s.matrix_type, {dim, vocab});
  tensor("output_norm.weight", GgmlType::F32, {dim});
  if (!s.tied) tensor("output.weight", s.matrix_type, {dim, vocab});
  if (s.rope_freqs) tensor("rope_freqs.weight", GgmlType::F32, {hd / 2});
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    tensor(b + "attn_norm.weight", GgmlType::F32, {dim});
    tensor(b + "attn_q.weight", s.matrix_type, {dim, q});
    tensor(b + "attn_k.weight", s.matrix_type, {dim, kv});
    tensor(b + "attn_v.weight", s.matrix_type, {dim, kv});
    tensor(b + "attn_output.weight", s.matrix_type, {q, dim});
    if (s.arch == "qwen2") {
      tensor(b + "attn_q.bias", GgmlType::F32, {q});
      tensor(b + "attn_k.bias", GgmlType::F32, {kv});
      tensor(b + "attn_v.bias", GgmlType::F32, {kv});
    }
    if (s.arch == "qwen3") {
      tensor(b + "attn_q_norm.weight", GgmlType::F32, {hd});
      tensor(b + "attn_k_norm.weight", GgmlType::F32, {hd});
    }
    tensor(b + "ffn_norm.weight", GgmlType::F32, {dim});
    tensor(b + "ffn_gate.weight", s.matrix_type, {dim, ffn});
    tensor(b + "ffn_up.weight", s.matrix_type, {dim, ffn});
    tensor(b + "ffn_down.weight", s.matrix_type, {ffn, dim});
  }
  return w;
}

inline std::vector<uint8_t> tiny_model_bytes(const TinyModelSpec& spec) {
  return tiny_model_writer(spec).to_bytes();
}

}  // namespace voltad::test
