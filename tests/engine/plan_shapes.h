// Model shapes and cards for the VRAM plan's tests (tests/engine,
// tests/daemon): only what the plan reads of a model, and a card as
// nvidia-smi reports its total.
#pragma once

#include <cstdint>

#include "engine/model_config.h"
#include "engine/vram_plan.h"

namespace voltad::test {

inline ModelConfig plan_shape(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                              int64_t ffn, int64_t vocab) {
  ModelConfig c{};
  c.arch = Arch::Llama;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = 128;
  c.ffn_dim = ffn;
  c.n_vocab = vocab;
  c.context_length = 8192;
  return c;
}

// Card totals in MiB.
inline DeviceMemory plan_card(const char* name, uint64_t mib) {
  DeviceMemory d;
  d.name = name;
  d.total_bytes = mib << 20;
  return d;
}

}  // namespace voltad::test
