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
#include "kernels/gumbel.h"

namespace voltad {

struct ModelConfig;

struct BatchChunk {
  int32_t seq_id = 0;               // KV slot in the block pool
  int32_t start_pos = 0;            // position of tokens[0]
  std::span<const int32_t> tokens;  // consecutive tokens of this sequence
  // Logits wanted: none, the last token's (generation), or every token's
  // (parity tests, perplexity).
  enum class Logits { None, Last, All } logits = Logits::Last;
  // With Logits::Last: when > 0, only the top_k best of the last row are
  // returned, as candidates (see ForwardOutput), so a GPU backend sends
  // top_k pairs across PCIe instead of the whole vocabulary. At most
  // kMaxCandidates.
  int32_t top_k = 0;
  // With top_k > 0: also the log of the row's softmax normalizer,
  // ForwardOutput::candidate_log_z (log-probabilities without the row).
  bool log_z = false;
  // With top_k > 0 and noise.on: the candidates are ranked by their
  // Gumbel keys (kernels/gumbel.h), so the first is a draw at
  // noise.temperature, the same on every backend; their values are still
  // the logits. How a sampler at a temperature alone chooses without the
  // whole row (Sampler::noise).
  kernels::RowNoise noise;
};

constexpr int32_t kMaxCandidates = 64;

// Output of one forward step.
// - Full rows: one per requested token of chunks with top_k == 0, in chunk
//   order, each n_vocab floats.
// - Candidate rows: one per chunk with top_k > 0, in chunk order, each
//   candidate_k (the largest top_k of the step) pairs of token id and logit,
//   best first, ties to the lower id (the order argmax and the CPU sampler
//   use; by Gumbel key for a chunk with noise). A chunk that asked for fewer
//   reads the first top_k of its row.
struct ForwardOutput {
  std::vector<float> logits;
  int64_t n_rows = 0;
  int64_t n_vocab = 0;
  std::vector<int32_t> candidate_ids;
  std::vector<float> candidate_logits;
  int64_t n_candidate_rows = 0;
  int32_t candidate_k = 0;
  // One per candidate row when a chunk of the step asked for it
  // (BatchChunk::log_z), else empty: log(sum(exp(logit))) over the row.
  std::vector<double> candidate_log_z;

  std::span<const float> row(int64_t i) const {
    return std::span<const float>(logits).subspan(size_t(i * n_vocab), size_t(n_vocab));
  }
  std::span<const int32_t> candidate_row_ids(int64_t i) const {
    return std::span<const int32_t>(candidate_ids)
        .subspan(size_t(i * candidate_k), size_t(candidate_k));
  }
  std::span<const float> candidate_row_logits(int64_t i) const {
    return std::span<const float>(candidate_logits)
        .subspan(size_t(i * candidate_k), size_t(candidate_k));
  }
};

// The largest top_k among chunks that ask for candidates (0: none do).
int32_t candidate_k_of(std::span<const BatchChunk> chunks);

// Whether a chunk of the step asks for its row's normalizer (log_z).
bool log_z_wanted(std::span<const BatchChunk> chunks);

// Fills out's candidate rows from full logits rows: row r of `rows`
// (n_vocab floats each) becomes candidate row r, the k best (at most
// n_vocab), best first, ties to the lower id, and with `log_z` its
// normalizer too; a row whose noise (one a row, or none for all) is on is
// ranked by its Gumbel keys. What a backend without a faster way does.
void select_candidates(std::span<const float> rows, int64_t n_rows, int64_t n_vocab, int32_t k,
                       bool log_z, ForwardOutput& out,
                       std::span<const kernels::RowNoise> noise = {});

// Sets out from the logits of every requested row (chunk order, n_vocab
// each): full rows where chunks want them, candidates where they ask for top_k.
void set_output_rows(std::span<const BatchChunk> chunks, std::vector<float>&& all_rows,
                     int64_t n_vocab, ForwardOutput& out);

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

  // Non-empty once the backend can run no more steps at all (a GPU whose
  // context an earlier fault broke): what happened. The scheduler then stops,
  // and the daemon exits with a code that makes systemd restart it.
  virtual std::string unusable_reason() const { return {}; }
};

// Checks chunk shapes against the model and pool: shared by backends so that
// every backend refuses the same bad input with the same message.
Status validate_chunks(std::span<const BatchChunk> chunks, int64_t n_vocab,
                       const KvBlockPool& pool);

}  // namespace voltad
