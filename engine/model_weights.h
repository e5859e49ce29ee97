// The tensors of a model, bound by GGUF name and checked for shape and type.
//
// Shapes are written as (rows, row length) = (ne[1], ne[0]): a weight that
// maps x (length ne[0]) to y (length ne[1]) has ne = {in, out}. Every bound
// tensor has a supported type; pointers stay valid while the GgufFile lives.
#pragma once

#include <vector>

#include "engine/gguf_file.h"
#include "engine/model_config.h"
#include "engine/result.h"

namespace voltad {

struct LayerWeights {
  const GgufTensor* attn_norm;  // (dim)                           blk.N.attn_norm.weight
  const GgufTensor* wq;         // (n_heads*head_dim, dim)         blk.N.attn_q.weight
  const GgufTensor* wk;         // (n_kv_heads*head_dim, dim)      blk.N.attn_k.weight
  const GgufTensor* wv;         // (n_kv_heads*head_dim, dim)      blk.N.attn_v.weight
  const GgufTensor* wo;         // (dim, n_heads*head_dim)         blk.N.attn_output.weight
  const GgufTensor* bq;         // (n_heads*head_dim)   qkv_bias only, else null
  const GgufTensor* bk;         // (n_kv_heads*head_dim) qkv_bias only, else null
  const GgufTensor* bv;         // (n_kv_heads*head_dim) qkv_bias only, else null
  const GgufTensor* q_norm;     // (head_dim)  qk_norm (qwen3) only, else null
  const GgufTensor* k_norm;     // (head_dim)  qk_norm (qwen3) only, else null
  const GgufTensor* ffn_norm;   // (dim)                           blk.N.ffn_norm.weight
  const GgufTensor* w_gate;     // (ffn_dim, dim)                  blk.N.ffn_gate.weight
  const GgufTensor* w_up;       // (ffn_dim, dim)                  blk.N.ffn_up.weight
  const GgufTensor* w_down;     // (dim, ffn_dim)                  blk.N.ffn_down.weight
};

struct ModelWeights {
  const GgufTensor* token_embd;      // (n_vocab, dim)  token_embd.weight
  const GgufTensor* output_norm;     // (dim)           output_norm.weight
  const GgufTensor* output;          // (n_vocab, dim)  output.weight; == token_embd when tied
  const GgufTensor* rope_freqs;      // (head_dim/2)    rope_freqs.weight, optional (else null)
  std::vector<LayerWeights> layers;  // n_layers
};

Result<ModelWeights> bind_model_weights(const GgufFile& file, const ModelConfig& config);

// Error unless the tensor's type is one voltad can run, naming it:
// "tensor 'x' has type IQ2_XXS, which voltad does not support (supported: ...)".
Status check_supported_type(const GgufFile& file, const GgufTensor& tensor);

}  // namespace voltad
