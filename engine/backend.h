// The interface every compute backend implements (CPU reference, CUDA).
//
// A step processes a batch of chunks; each chunk is a run of consecutive
// tokens of one sequence starting at `start_pos` (a prompt, a piece of a
// prompt under chunked prefill, or one decoded token). The KV cache is
// paged: a sequence's keys and values live in fixed-size blocks that the
// KvBlockPool (kv_block_pool.h) hands out; the caller reserves blocks for
// every position a chunk writes before calling forward().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/kv_block_pool.h"
#include "engine/result.h"

namespace voltad {

struct ModelConfig;

struct BatchChunk {
  int32_t seq_id = 0;               // KV slot in the block pool
  int32_t start_pos = 0;            // position of tokens[0]
  std::span<const int32_t> tokens;  // consecutive tokens of this sequence
  // Logits wanted: none, the last token's (generation), or every token's
  // (parity tests, perplexity).
  enum class Logits { None, Last, All } logits = Logits::Last;
};

// Output of one forward step: logits rows, one per requested token, in
// chunk order, each n_vocab floats.
struct ForwardOutput {
  std::vector<float> logits;
  int64_t n_rows = 0;
  int64_t n_vocab = 0;
  std::span<const float> row(int64_t i) const {
    return std::span<const float>(logits).subspan(size_t(i * n_vocab), size_t(n_vocab));
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Runs one step. Fails (without side effects on other sequences) when a
  // chunk is malformed: token out of range, positions past the reserved
  // blocks, seq_id unknown.
  virtual Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) = 0;

  // The block pool whose tables the backend reads; the scheduler reserves
  // and releases blocks through it.
  virtual KvBlockPool& kv_pool() = 0;
};

// Checks chunk shapes against the model and pool: shared by backends so that
// every backend refuses the same bad input with the same message.
Status validate_chunks(std::span<const BatchChunk> chunks, int64_t n_vocab, const KvBlockPool& pool);

}  // namespace voltad
