#include "engine/model_weights.h"

#include <initializer_list>

namespace voltad {
namespace {

std::string shape_str(std::initializer_list<int64_t> ne) {
  std::string s = "{";
  for (int64_t d : ne) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "}";
}

class Binder {
 public:
  Binder(const GgufFile& file) : file_(file) {}

  // The tensor `name` with exactly the GGUF shape `ne` (ne[0] first) and a
  // supported type; null without error when optional and absent.
  Result<const GgufTensor*> bind(const std::string& name, std::initializer_list<int64_t> ne,
                                 bool required = true) const {
    const GgufTensor* t = file_.find_tensor(name);
    if (!t) {
      if (!required) return static_cast<const GgufTensor*>(nullptr);
      return make_error(file_.path() + ": tensor '" + name + "' is missing (expected shape " +
                        shape_str(ne) + "); the file is incomplete or not a " +
                        "supported model layout");
    }
    bool same = t->n_dims == ne.size();
    uint32_t d = 0;
    for (int64_t n : ne) same = same && t->ne[d++] == uint64_t(n);
    if (!same) {
      return make_error(file_.path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                        ", expected " + shape_str(ne) + " from the model's hyperparameters");
    }
    VOLTAD_TRY(check_supported_type(file_, *t));
    return t;
  }

 private:
  const GgufFile& file_;
};

}  // namespace

Status check_supported_type(const GgufFile& file, const GgufTensor& tensor) {
  const GgmlTypeInfo* info = ggml_type_info(tensor.type);
  if (info && info->supported) return {};
  return make_error(file.path() + ": tensor " + gguf_quoted(tensor.name) + " has type " +
                    ggml_type_name(tensor.type) + ", which voltad does not support (supported: " +
                    supported_ggml_type_names() + "); use a file quantized to one of those");
}

Result<ModelWeights> bind_model_weights(const GgufFile& file, const ModelConfig& c) {
  const Binder b(file);
  ModelWeights w{};
#define VOLTAD_BIND(dst, ...)           \
  do {                                  \
    auto bound_ = b.bind(__VA_ARGS__);  \
    if (!bound_) return bound_.error(); \
    dst = *bound_;                      \
  } while (0)
  VOLTAD_BIND(w.token_embd, "token_embd.weight", {c.dim, c.n_vocab});
  VOLTAD_BIND(w.output_norm, "output_norm.weight", {c.dim});
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    VOLTAD_BIND(w.output, "output.weight", {c.dim, c.n_vocab});
  }
  VOLTAD_BIND(w.rope_freqs, "rope_freqs.weight", {c.head_dim / 2}, c.has_rope_freqs);

  // Grown layer by layer: a block_count larger than the file's tensors fails
  // at the first missing tensor instead of allocating for all of them.
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers.emplace_back();
    const std::string blk = "blk." + std::to_string(i) + ".";
    VOLTAD_BIND(l.attn_norm, blk + "attn_norm.weight", {c.dim});
    VOLTAD_BIND(l.wq, blk + "attn_q.weight", {c.dim, c.q_dim()});
    VOLTAD_BIND(l.wk, blk + "attn_k.weight", {c.dim, c.kv_dim()});
    VOLTAD_BIND(l.wv, blk + "attn_v.weight", {c.dim, c.kv_dim()});
    VOLTAD_BIND(l.wo, blk + "attn_output.weight", {c.q_dim(), c.dim});
    if (c.qkv_bias) {
      VOLTAD_BIND(l.bq, blk + "attn_q.bias", {c.q_dim()});
      VOLTAD_BIND(l.bk, blk + "attn_k.bias", {c.kv_dim()});
      VOLTAD_BIND(l.bv, blk + "attn_v.bias", {c.kv_dim()});
    }
    if (c.qk_norm) {
      VOLTAD_BIND(l.q_norm, blk + "attn_q_norm.weight", {c.head_dim});
      VOLTAD_BIND(l.k_norm, blk + "attn_k_norm.weight", {c.head_dim});
    }
    VOLTAD_BIND(l.ffn_norm, blk + "ffn_norm.weight", {c.dim});
    VOLTAD_BIND(l.w_gate, blk + "ffn_gate.weight", {c.dim, c.ffn_dim});
    VOLTAD_BIND(l.w_up, blk + "ffn_up.weight", {c.dim, c.ffn_dim});
    VOLTAD_BIND(l.w_down, blk + "ffn_down.weight", {c.ffn_dim, c.dim});
  }
#undef VOLTAD_BIND
  return w;
}

}  // namespace voltad
