// The CPU reference backend: a plain fp32 forward pass that dequantizes
// weights row by row as it multiplies. It is the ground truth every faster
// path is checked against, so clarity wins over speed; it is still threaded
// and batched (a weight row is decoded once per step for all tokens), which
// makes small models usable on a couple of cores.
#pragma once

#include <memory>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/thread_pool.h"

namespace voltad {

struct CpuBackendOptions {
  int threads = 0;               // 0: every hardware thread
  int32_t max_context = 4096;    // longest sequence, in tokens
  int32_t max_sequences = 1;     // KV cache sized for this many full sequences
  int32_t kv_blocks = 0;         // explicit pool size in blocks; 0: from the two above
};

class CpuBackend final : public Backend {
 public:
  static Result<std::unique_ptr<CpuBackend>> create(std::shared_ptr<const Model> model,
                                                    const CpuBackendOptions& options);
  // Why create() would refuse the KV cache `options` ask of a model of
  // this shape on this machine (more than half its memory, at most 64
  // GiB), or "" when it fits: a setting no retry can change, which the
  // daemon refuses as it refuses a VRAM plan (exit 75).
  static std::string cache_too_large(const ModelConfig& config, const CpuBackendOptions& options);

  std::string name() const override { return "cpu"; }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override;
  KvBlockPool& kv_pool() override { return pool_; }

  // Bytes of host memory held by the KV cache.
  uint64_t kv_cache_bytes() const { return uint64_t(k_cache_.size() + v_cache_.size()) * sizeof(float); }

 private:
  CpuBackend(std::shared_ptr<const Model> model, const CpuBackendOptions& options, int32_t n_blocks);

  struct Token {  // one token of the step, with where it lives
    int32_t id, pos, seq;
  };

  // y (n x rows) = x (n x cols) . W^T for a GGUF weight of shape (rows, cols).
  void matmul(const GgufTensor& w, const float* x, int64_t n, float* y);
  void rms_norm(const float* x, const std::vector<float>& w, int64_t n, int64_t width, float* y) const;
  void rope(float* vec, int64_t n_heads, int32_t pos) const;
  void attention(int64_t layer, const std::vector<Token>& tokens, const float* q, float* out);
  float* k_at(int64_t layer, int32_t seq, int32_t pos);
  float* v_at(int64_t layer, int32_t seq, int32_t pos);

  std::shared_ptr<const Model> model_;
  ThreadPool pool_threads_;
  KvBlockPool pool_;
  // Small tensors decoded once: norms and biases.
  struct LayerVectors {
    std::vector<float> attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
  };
  std::vector<LayerVectors> layer_vectors_;
  std::vector<float> output_norm_;
  std::vector<double> inv_freq_;  // head_dim/2 RoPE frequencies, with rope_freqs applied
  // KV cache: [layer][block][slot][kv_dim], fp32.
  std::vector<float> k_cache_, v_cache_;
};

}  // namespace voltad
