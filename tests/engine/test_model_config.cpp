// Hyperparameters and weight binding for each architecture, the errors for
// missing or inconsistent metadata, and the real SmolLM2 file when present.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/gguf_file.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/model_info.h"
#include "engine/model_weights.h"
#include "tests/engine/test_gguf_support.h"

using namespace voltad;

namespace {

std::unique_ptr<GgufFile> open_tiny(const test::TinyModelSpec& spec,
                                    void (*extend)(GgufWriter&) = nullptr) {
  GgufWriter w = test::tiny_model_writer(spec);
  if (extend) extend(w);
  auto file = GgufFile::from_bytes(w.to_bytes(), "tiny.gguf");
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  return std::move(file).value();
}

// The error of load_model, which reads the config and then binds the
// weights ("" if none).
std::string load_error(const test::TinyModelSpec& spec, void (*extend)(GgufWriter&) = nullptr) {
  auto model = load_model(open_tiny(spec, extend));
  return model ? "" : model.error().message;
}

// The message names the file once, first.
void expect_load_error(const test::TinyModelSpec& spec, const std::string& substring,
                       void (*extend)(GgufWriter&) = nullptr) {
  const std::string message = load_error(spec, extend);
  INFO("message: " << message);
  CHECK(message.find(substring) != std::string::npos);
  CHECK(message.rfind("tiny.gguf: ", 0) == 0);
  CHECK(message.find("tiny.gguf", 1) == std::string::npos);
}

}  // namespace

TEST_CASE("llama: config and weights bind with the GGUF shapes") {
  test::TinyModelSpec spec;
  auto file = open_tiny(spec);
  auto config = read_model_config(*file);
  REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().message));
  const ModelConfig& c = *config;
  CHECK(c.arch == Arch::Llama);
  CHECK(c.arch_name == "llama");
  CHECK(c.name == "tiny llama");
  CHECK(c.dim == spec.dim);
  CHECK(c.n_layers == spec.n_layers);
  CHECK(c.n_heads == spec.n_heads);
  CHECK(c.n_kv_heads == spec.n_kv_heads);
  CHECK(c.head_dim == spec.dim / spec.n_heads);
  CHECK(c.ffn_dim == spec.ffn_dim);
  CHECK(c.n_vocab == spec.n_vocab);
  CHECK(c.context_length == spec.context_length);
  CHECK(c.rms_eps == 1e-6f);
  CHECK(c.rope_theta == 1e6f);
  CHECK(c.rope_freq_scale == 1.0f);
  CHECK(c.rope_style == RopeStyle::Normal);
  CHECK_FALSE(c.tied_embeddings);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK_FALSE(c.has_rope_freqs);

  auto weights = bind_model_weights(*file, c);
  REQUIRE_MESSAGE(weights.ok(), (weights.ok() ? "" : weights.error().message));
  const ModelWeights& w = *weights;
  CHECK(w.token_embd == file->find_tensor("token_embd.weight"));
  CHECK(w.output == file->find_tensor("output.weight"));
  CHECK(w.rope_freqs == nullptr);
  REQUIRE(w.layers.size() == size_t(spec.n_layers));
  const LayerWeights& l1 = w.layers[1];
  CHECK(l1.wq == file->find_tensor("blk.1.attn_q.weight"));
  CHECK(l1.wq->ne[0] == uint64_t(c.dim));
  CHECK(l1.wq->ne[1] == uint64_t(c.q_dim()));
  CHECK(l1.wk->ne[1] == uint64_t(c.kv_dim()));
  CHECK(l1.w_down == file->find_tensor("blk.1.ffn_down.weight"));
  CHECK(l1.w_down->ne[0] == uint64_t(c.ffn_dim));
  CHECK(l1.bq == nullptr);
  CHECK(l1.q_norm == nullptr);
  for (const GgufTensor* t : {l1.attn_norm, l1.wv, l1.wo, l1.ffn_norm, l1.w_gate, l1.w_up})
    CHECK(t != nullptr);
}

TEST_CASE("qwen2: QKV biases, NeoX RoPE") {
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  auto file = open_tiny(spec);
  auto config = read_model_config(*file);
  REQUIRE(config.ok());
  CHECK(config->arch == Arch::Qwen2);
  CHECK(config->qkv_bias);
  CHECK(config->rope_style == RopeStyle::Neox);
  auto weights = bind_model_weights(*file, *config);
  REQUIRE(weights.ok());
  CHECK(weights->layers[0].bq == file->find_tensor("blk.0.attn_q.bias"));
  CHECK(weights->layers[0].bk->ne[0] == uint64_t(config->kv_dim()));
  CHECK(weights->layers[0].bv != nullptr);
}

TEST_CASE("qwen3: q/k norms, head_dim from key_length, tied embeddings") {
  test::TinyModelSpec spec;
  spec.arch = "qwen3";
  spec.key_length = 32;  // n_heads * head_dim = 128 != dim = 64
  spec.tied = true;
  auto file = open_tiny(spec);
  auto config = read_model_config(*file);
  REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().message));
  CHECK(config->arch == Arch::Qwen3);
  CHECK(config->head_dim == 32);
  CHECK(config->q_dim() == 128);
  CHECK(config->qk_norm);
  CHECK_FALSE(config->qkv_bias);
  CHECK(config->tied_embeddings);
  auto weights = bind_model_weights(*file, *config);
  REQUIRE_MESSAGE(weights.ok(), (weights.ok() ? "" : weights.error().message));
  CHECK(weights->output == weights->token_embd);
  CHECK(weights->layers[1].q_norm->ne[0] == 32);
  CHECK(weights->layers[1].wo->ne[0] == 128);
}

TEST_CASE("llama 3 style: rope_freqs and linear RoPE scaling") {
  test::TinyModelSpec spec;
  spec.rope_freqs = true;
  auto file = open_tiny(spec, [](GgufWriter& w) {
    w.add_string("llama.rope.scaling.type", "linear");
    w.add_f32("llama.rope.scaling.factor", 4.0f);
  });
  auto config = read_model_config(*file);
  REQUIRE(config.ok());
  CHECK(config->has_rope_freqs);
  CHECK(config->rope_freq_scale == 0.25f);
  auto weights = bind_model_weights(*file, *config);
  REQUIRE(weights.ok());
  CHECK(weights->rope_freqs == file->find_tensor("rope_freqs.weight"));
}

TEST_CASE("missing and inconsistent hyperparameters name the key") {
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.attention.head_count"};
    expect_load_error(spec, "metadata key 'llama.attention.head_count' is missing");
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.attention.layer_norm_rms_epsilon"};
    expect_load_error(spec, "'llama.attention.layer_norm_rms_epsilon' is missing");
  }
  {
    test::TinyModelSpec spec;
    spec.dim = 72;
    spec.n_heads = 9;
    spec.n_kv_heads = 5;
    spec.matrix_type = GgmlType::F32;
    expect_load_error(spec,
                      "llama.attention.head_count_kv = 5 does not divide "
                      "llama.attention.head_count = 9");
  }
  {
    test::TinyModelSpec spec;
    spec.n_heads = 5;
    spec.n_kv_heads = 5;
    spec.matrix_type = GgmlType::F32;
    expect_load_error(spec,
                      "llama.attention.head_count = 5 does not divide llama.embedding_length = 64");
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"general.architecture"};
    expect_load_error(spec, "'general.architecture' is missing");
  }
  {
    test::TinyModelSpec spec;
    spec.arch = "gemma2";
    CHECK(load_error(spec) ==
          "tiny.gguf: architecture 'gemma2' is not supported (supported: llama, qwen2, qwen3)");
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.block_count"};
    expect_load_error(spec, "'llama.block_count' has type string; expected an integer",
                      [](GgufWriter& w) { w.add_string("llama.block_count", "2"); });
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.context_length"};
    expect_load_error(spec, "llama.context_length = 0 is not a sensible size",
                      [](GgufWriter& w) { w.add_u32("llama.context_length", 0); });
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.attention.head_count_kv"};
    expect_load_error(spec, "'llama.attention.head_count_kv' is an array (per-layer values)",
                      [](GgufWriter& w) {
                        w.add_i32_array("llama.attention.head_count_kv", {2, 2});
                      });
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.attention.layer_norm_rms_epsilon"};
    expect_load_error(
        spec, "llama.attention.layer_norm_rms_epsilon = -0.001000 must be a positive",
        [](GgufWriter& w) { w.add_f64("llama.attention.layer_norm_rms_epsilon", -1e-3); });
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.rope.freq_base"};
    expect_load_error(spec, "'llama.rope.freq_base' has type u32; expected a float",
                      [](GgufWriter& w) { w.add_u32("llama.rope.freq_base", 10000); });
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"llama.block_count"};
    expect_load_error(spec, "llama.block_count = 1000000, but the file has only",
                      [](GgufWriter& w) { w.add_u32("llama.block_count", 1000000); });
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"blk.1.attn_norm.weight", "blk.1.attn_q.weight"};
    spec.n_layers = 2;
    expect_load_error(spec, "tensor 'blk.1.attn_norm.weight' is missing");
  }
  {
    test::TinyModelSpec spec;
    expect_load_error(spec, "llama.rope.scaling.type = 'yarn' is not supported",
                      [](GgufWriter& w) { w.add_string("llama.rope.scaling.type", "yarn"); });
  }
  {
    test::TinyModelSpec spec;
    expect_load_error(spec, "llama.rope.dimension_count = 8 differs from the head size 16",
                      [](GgufWriter& w) { w.add_u32("llama.rope.dimension_count", 8); });
  }
}

TEST_CASE("missing, misshapen and unsupported tensors are named") {
  {
    test::TinyModelSpec spec;
    spec.omit = {"blk.1.ffn_down.weight"};
    expect_load_error(spec, "tensor 'blk.1.ffn_down.weight' is missing (expected shape {96, 64})");
  }
  {
    test::TinyModelSpec spec;
    spec.reshape["blk.0.attn_k.weight"] = {64, 64};
    expect_load_error(spec, "tensor 'blk.0.attn_k.weight' has shape {64, 64}, expected {64, 32}");
  }
  {
    test::TinyModelSpec spec;
    spec.ffn_dim = 256;
    spec.retype["blk.0.ffn_down.weight"] = GgmlType::IQ2_XXS;
    expect_load_error(spec,
                      "tensor 'blk.0.ffn_down.weight' has type IQ2_XXS, which voltad does not "
                      "support (supported: F32, F16, BF16, Q8_0");
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"token_embd.weight"};
    expect_load_error(spec, "tensor 'token_embd.weight' (the token embeddings) is missing");
  }
  {
    test::TinyModelSpec spec;
    spec.omit = {"tokenizer.ggml.tokens"};
    expect_load_error(spec,
                      "token_embd.weight' has 40 rows but tokenizer.ggml.tokens has 3 entries",
                      [](GgufWriter& w) {
                        w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
                      });
  }
  {
    test::TinyModelSpec spec;
    spec.arch = "qwen2";
    spec.omit = {"blk.1.attn_v.bias"};
    expect_load_error(spec, "tensor 'blk.1.attn_v.bias' is missing");
  }
  {
    test::TinyModelSpec spec;
    spec.arch = "qwen3";
    spec.omit = {"blk.0.attn_k_norm.weight"};
    expect_load_error(spec, "tensor 'blk.0.attn_k_norm.weight' is missing");
  }
}

TEST_CASE("describe_model summarises a tiny model") {
  test::TinyModelSpec spec;
  auto file = open_tiny(spec);
  auto config = read_model_config(*file);
  REQUIRE(config.ok());
  const std::string info = describe_model(*file, &*config);
  INFO(info);
  CHECK(info.find("llama") != std::string::npos);
  CHECK(info.find("dim 64, layers 2, heads 4 (kv 2, head_dim 16)") != std::string::npos);
  CHECK(info.find("Q8_0") != std::string::npos);
  CHECK(info.find("F32") != std::string::npos);
  CHECK(info.find("gpt2") != std::string::npos);
  CHECK(info.find("chatml") != std::string::npos);
  CHECK(describe_model(*file, nullptr).find("llama") != std::string::npos);
  CHECK(chat_template_family("<|start_header_id|>user<|end_header_id|>") == "llama3");
  CHECK(chat_template_family("{{ bos_token }}[INST]") == "");
  // An empty template is said as such, not as an unrecognised one of no text.
  spec.chat_template = "";
  auto empty = open_tiny(spec);
  CHECK(describe_model(*empty, nullptr)
            .find("chat template: empty (the key is there, with no text)") != std::string::npos);
}

TEST_CASE("the real SmolLM2-135M-Instruct file") {
  const std::string path = test::demo_model_path();
  if (path.empty()) {
    MESSAGE(
        "SKIPPED: SmolLM2 not found (set VOLTAD_DEMO_MODEL or run scripts/fetch-demo-model.sh)");
    return;
  }
  auto file = GgufFile::open(path);
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  auto config = read_model_config(**file);
  REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().message));
  // SmolLM2-135M's published architecture (its config.json).
  CHECK(config->arch == Arch::Llama);
  CHECK(config->dim == 576);
  CHECK(config->n_layers == 30);
  CHECK(config->n_heads == 9);
  CHECK(config->n_kv_heads == 3);
  CHECK(config->head_dim == 64);
  CHECK(config->ffn_dim == 1536);
  CHECK(config->n_vocab == 49152);
  CHECK(config->tied_embeddings);
  auto weights = bind_model_weights(**file, *config);
  REQUIRE_MESSAGE(weights.ok(), (weights.ok() ? "" : weights.error().message));
  // Decoded weights are finite and not all zero (last layer, biggest matrix).
  const std::vector<float> down = dequantize_tensor(*weights->layers.back().w_down);
  double sum_sq = 0;
  bool finite = true;
  for (float v : down) finite = finite && std::isfinite(v), sum_sq += double(v) * v;
  CHECK(finite);
  CHECK(sum_sq > 0);
  const std::string info = describe_model(**file, &*config);
  CHECK(info.find("chatml") != std::string::npos);
  CHECK(info.find("Q4_1") != std::string::npos);
}

TEST_CASE("context_past_training: a warning only past the trained positions") {
  ModelConfig c{};
  c.context_length = 8192;
  CHECK(context_past_training(c, 8192, "engine.max_context 8192").empty());
  CHECK(context_past_training(c, 100, "x").empty());
  CHECK(context_past_training(c, 8193, "engine.max_context 8193") ==
        "engine.max_context 8193 is past the 8192 positions the model was trained on: text past "
        "them degrades");
  c.context_length = 0;  // the file gives none: nothing to say
  CHECK(context_past_training(c, 1 << 20, "x").empty());
}
