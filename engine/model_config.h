// The hyperparameters of a supported model, read from GGUF metadata.
//
// Keys come from the `<arch>.` namespace (general.architecture names it).
// Mistral and SmolLM2 files use arch "llama". A missing or inconsistent key
// is an error that names it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/result.h"

namespace voltad {

class GgufFile;

enum class Arch { Llama, Qwen2, Qwen3 };

// How RoPE pairs the elements of a head vector.
enum class RopeStyle {
  Normal,  // adjacent pairs (2i, 2i+1): llama GGUFs (the converter un-permutes Q/K)
  Neox,    // halves (i, i + head_dim/2): qwen2, qwen3
};

struct ModelConfig {
  Arch arch;
  std::string arch_name;   // general.architecture, e.g. "llama"
  std::string name;        // general.name, or "" when absent
  int64_t n_vocab;         // rows of token_embd / logits per token
  int64_t dim;             // residual stream width (embedding_length)
  int64_t n_layers;        // block_count
  int64_t n_heads;         // query heads
  int64_t n_kv_heads;      // key/value heads (GQA: divides n_heads)
  int64_t head_dim;        // attention.key_length, else dim / n_heads (qwen3: may differ)
  int64_t ffn_dim;         // feed_forward_length: hidden width of the SwiGLU MLP
  int64_t context_length;  // trained context length (positions)
  float rms_eps;           // attention.layer_norm_rms_epsilon
  float rope_theta;        // rope.freq_base (10000 when absent)
  float rope_freq_scale;   // 1 / rope.scaling.factor for linear scaling, else 1
  RopeStyle rope_style;
  bool tied_embeddings;  // no output.weight: logits use token_embd
  bool qkv_bias;         // attn_q/k/v.bias present (qwen2)
  bool qk_norm;          // per-head RMSNorm of q and k before RoPE (qwen3)
  bool has_rope_freqs;   // rope_freqs.weight present (llama 3.1+): divides each frequency

  int64_t q_dim() const { return n_heads * head_dim; }      // rows of wq
  int64_t kv_dim() const { return n_kv_heads * head_dim; }  // rows of wk, wv
};

// "llama, qwen2, qwen3".
std::string supported_arch_names();
std::string arch_name(Arch arch);

Result<ModelConfig> read_model_config(const GgufFile& file);

// A context past the positions the model was trained on (context_length)
// runs, but its text degrades past them. The warning for `what` (e.g.
// "engine.max_context 65536") where `positions` is past them, else "" (also
// where the file gives no trained length).
std::string context_past_training(const ModelConfig& c, int64_t positions, const std::string& what);

}  // namespace voltad
