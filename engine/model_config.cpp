#include "engine/model_config.h"

#include <cmath>
#include <limits>

#include "engine/gguf_file.h"

namespace voltad {
namespace {

// Sizes beyond this are corrupt metadata, not models; the cap keeps every
// product of two sizes (e.g. n_heads * head_dim) far from overflow.
constexpr int64_t kMaxSize = int64_t{1} << 31;

struct ArchEntry {
  const char* name;
  Arch arch;
};
constexpr ArchEntry kArchs[] = {
    {"llama", Arch::Llama}, {"qwen2", Arch::Qwen2}, {"qwen3", Arch::Qwen3}};

class ConfigReader {
 public:
  ConfigReader(const GgufFile& file, std::string prefix)
      : file_(file), prefix_(std::move(prefix)) {}

  Error error(const std::string& message) const {
    return make_error(file_.path() + ": " + message);
  }

  // A positive integer under kMaxSize at `<arch>.<suffix>`.
  Result<int64_t> size(const std::string& suffix) const {
    const std::string key = prefix_ + suffix;
    if (!file_.has(key)) {
      return error("metadata key '" + key + "' is missing; " + prefix_ +
                   "* models need it (the file was converted incompletely?)");
    }
    return size_value(key);
  }

  // Like size(), but `fallback` when the key is absent.
  Result<int64_t> size_or(const std::string& suffix, int64_t fallback) const {
    const std::string key = prefix_ + suffix;
    if (!file_.has(key)) return fallback;
    return size_value(key);
  }

  Result<float> real_or(const std::string& suffix, std::optional<float> fallback) const {
    const std::string key = prefix_ + suffix;
    if (!file_.has(key)) {
      if (fallback) return *fallback;
      return error("metadata key '" + key + "' is missing; " + prefix_ + "* models need it");
    }
    const std::optional<double> v = file_.get_float(key);
    if (!v) {
      return error("metadata key '" + key + "' has type " + file_.key_type_name(key) +
                   "; expected a float (f32)");
    }
    // Checked in double first: a double beyond float range has no float value.
    if (!(*v > 0 && *v <= std::numeric_limits<float>::max()) || static_cast<float>(*v) == 0) {
      return error(key + " = " + std::to_string(*v) + " must be a positive (float) number");
    }
    return static_cast<float>(*v);
  }

  const std::string& prefix() const { return prefix_; }

 private:
  Result<int64_t> size_value(const std::string& key) const {
    if (file_.find_key(key)->type == GgufValueType::Array) {
      return error("metadata key '" + key +
                   "' is an array (per-layer values), which voltad "
                   "does not support: all layers must share one value");
    }
    const std::optional<int64_t> v = file_.get_int(key);
    if (!v) {
      return error("metadata key '" + key + "' has type " + file_.key_type_name(key) +
                   "; expected an integer");
    }
    if (*v <= 0 || *v >= kMaxSize) {
      return error(key + " = " + std::to_string(*v) + " is not a sensible size (1 to 2^31)");
    }
    return *v;
  }

  const GgufFile& file_;
  std::string prefix_;
};

// Reads the optional RoPE scaling keys into config.rope_freq_scale.
Status read_rope_scaling(const GgufFile& file, const ConfigReader& r, ModelConfig& config) {
  config.rope_freq_scale = 1.0f;
  const std::string type_key = r.prefix() + "rope.scaling.type";
  const std::string factor_key = r.prefix() + "rope.scaling.factor";
  std::string type = "none";
  if (file.has(type_key)) {
    const std::optional<std::string> t = file.get_string(type_key);
    if (!t)
      return r.error("metadata key '" + type_key + "' has type " + file.key_type_name(type_key) +
                     "; expected a string");
    type = *t;
  } else if (file.has(r.prefix() + "rope.scale_linear")) {
    type = "linear";  // the older spelling: the factor itself
    Result<float> factor = r.real_or("rope.scale_linear", std::nullopt);
    if (!factor) return factor.error();
    config.rope_freq_scale = 1.0f / *factor;
    return {};
  }
  if (type == "none") return {};
  if (type == "linear") {
    Result<float> factor = r.real_or("rope.scaling.factor", 1.0f);
    if (!factor) return factor.error();
    config.rope_freq_scale = 1.0f / *factor;
    return {};
  }
  return r.error(type_key + " = '" + type +
                 "' is not supported (voltad supports 'none' and "
                 "'linear'); " +
                 factor_key +
                 " extends the context in a way voltad cannot "
                 "reproduce");
}

}  // namespace

std::string context_past_training(const ModelConfig& c, int64_t positions,
                                  const std::string& what) {
  if (c.context_length <= 0 || positions <= c.context_length) return "";
  return what + " is past the " + std::to_string(c.context_length) +
         " positions the model was trained on: text past them degrades";
}

std::string supported_arch_names() {
  std::string names;
  for (const ArchEntry& e : kArchs) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return names;
}

std::string arch_name(Arch arch) {
  for (const ArchEntry& e : kArchs)
    if (e.arch == arch) return e.name;
  VOLTAD_CHECK(!"Arch without a name");
  return "";
}

Result<ModelConfig> read_model_config(const GgufFile& file) {
  const std::string fail = file.path() + ": ";
  const std::optional<std::string> arch = file.get_string("general.architecture");
  if (!arch) {
    return make_error(
        fail + "metadata key 'general.architecture' is " +
        (file.has("general.architecture") ? "of type " + file.key_type_name("general.architecture")
                                          : std::string("missing")) +
        "; it must name the model architecture (supported: " + supported_arch_names() + ")");
  }
  ModelConfig c{};
  c.arch_name = *arch;
  const ArchEntry* entry = nullptr;
  for (const ArchEntry& e : kArchs)
    if (c.arch_name == e.name) entry = &e;
  if (!entry) {
    return make_error(fail + "architecture '" + c.arch_name +
                      "' is not supported (supported: " + supported_arch_names() + ")");
  }
  c.arch = entry->arch;
  c.name = file.get_string("general.name").value_or("");

  ConfigReader r(file, c.arch_name + ".");
  const std::string& p = r.prefix();
#define VOLTAD_READ(field, expr)                    \
  do {                                              \
    auto field##_read = (expr);                     \
    if (!field##_read) return field##_read.error(); \
    c.field = *field##_read;                        \
  } while (0)
  VOLTAD_READ(dim, r.size("embedding_length"));
  VOLTAD_READ(n_layers, r.size("block_count"));
  VOLTAD_READ(n_heads, r.size("attention.head_count"));
  VOLTAD_READ(n_kv_heads, r.size_or("attention.head_count_kv", c.n_heads));
  VOLTAD_READ(ffn_dim, r.size("feed_forward_length"));
  VOLTAD_READ(context_length, r.size("context_length"));
  VOLTAD_READ(rms_eps, r.real_or("attention.layer_norm_rms_epsilon", std::nullopt));
  VOLTAD_READ(rope_theta, r.real_or("rope.freq_base", 10000.0f));

  // Each layer has at least 9 tensors (2 norms, 4 attention and 3 MLP matrices).
  const uint64_t n_tensors = file.tensors().size();
  if (uint64_t(c.n_layers) > n_tensors / 9) {
    return r.error(p + "block_count = " + std::to_string(c.n_layers) + ", but the file has only " +
                   std::to_string(n_tensors) + " tensors (each layer needs at least 9)");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return r.error(p + "attention.head_count_kv = " + std::to_string(c.n_kv_heads) +
                   " does not divide " + p + "attention.head_count = " + std::to_string(c.n_heads));
  }
  if (file.has(p + "attention.key_length")) {
    VOLTAD_READ(head_dim, r.size("attention.key_length"));
  } else {
    if (c.dim % c.n_heads != 0) {
      return r.error(p + "attention.head_count = " + std::to_string(c.n_heads) +
                     " does not divide " + p + "embedding_length = " + std::to_string(c.dim) +
                     ", and " + p + "attention.key_length (the head size) is missing");
    }
    c.head_dim = c.dim / c.n_heads;
  }
  Result<int64_t> value_length = r.size_or("attention.value_length", c.head_dim);
  if (!value_length) return value_length.error();
  if (*value_length != c.head_dim) {
    return r.error(p + "attention.value_length = " + std::to_string(*value_length) +
                   " differs from the key length " + std::to_string(c.head_dim) +
                   "; voltad needs equal key and value head sizes");
  }
  if (c.head_dim % 2 != 0) {
    return r.error("the head size " + std::to_string(c.head_dim) + " is odd; RoPE needs pairs");
  }
  Result<int64_t> rope_dims = r.size_or("rope.dimension_count", c.head_dim);
  if (!rope_dims) return rope_dims.error();
  if (*rope_dims != c.head_dim) {
    return r.error(p + "rope.dimension_count = " + std::to_string(*rope_dims) +
                   " differs from the head size " + std::to_string(c.head_dim) +
                   "; voltad applies RoPE to whole heads only");
  }
  VOLTAD_TRY(read_rope_scaling(file, r, c));
#undef VOLTAD_READ

  // The vocabulary is the tokenizer's list; the embedding must have a row per token.
  const GgufTensor* embd = file.find_tensor("token_embd.weight");
  if (!embd) return r.error("tensor 'token_embd.weight' (the token embeddings) is missing");
  if (embd->n_dims != 2 || embd->ne[0] != uint64_t(c.dim)) {
    return r.error("tensor 'token_embd.weight' has shape " + embd->shape_string() + ", expected {" +
                   std::to_string(c.dim) + ", n_vocab} (" + p +
                   "embedding_length = " + std::to_string(c.dim) + ")");
  }
  c.n_vocab = static_cast<int64_t>(embd->ne[1]);
  if (const std::optional<uint64_t> n_tokens = file.get_array_size("tokenizer.ggml.tokens")) {
    if (*n_tokens != embd->ne[1]) {
      return r.error("tensor 'token_embd.weight' has " + std::to_string(embd->ne[1]) +
                     " rows but tokenizer.ggml.tokens has " + std::to_string(*n_tokens) +
                     " entries; they must agree");
    }
  }

  c.rope_style = c.arch == Arch::Llama ? RopeStyle::Normal : RopeStyle::Neox;
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  c.qkv_bias = c.arch == Arch::Qwen2 || file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = c.arch == Arch::Qwen3;
  c.has_rope_freqs = file.find_tensor("rope_freqs.weight") != nullptr;
  return c;
}

}  // namespace voltad
