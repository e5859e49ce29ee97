// Choosing the next token from logits: greedy, or temperature sampling
// filtered by top-k, top-p and min-p, after repetition, presence and
// frequency penalties. A seed makes a run reproducible.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/result.h"
#include "kernels/gumbel.h"

namespace voltad {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keeps tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1: off; >1 discourages tokens of the prompt or output
  // OpenAI's: over the tokens generated so far only (never the prompt's,
  // whose chat template repeats the end-of-turn token the answer must end on).
  float presence_penalty = 0.0f;    // subtracted once from every token generated so far
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the output so far
  std::optional<uint64_t> seed;     // none: a random seed
  // OpenAI's logit_bias: added to a token's logit before anything else
  // (-100 all but bans it, 100 all but forces it); ids past the vocabulary
  // are the caller's to refuse (they are skipped here).
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Error naming the first parameter out of range (what an API returns as 400).
  Status validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks a token. `history` is the sequence so far, its first `n_prompt`
  // tokens the prompt, for the penalties (repetition: all of it; presence
  // and frequency: the output). `logits` is modified (penalties,
  // temperature).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history, size_t n_prompt);

  // How many of the best logits this sampler needs to choose exactly as
  // sample() would (1 when greedy or when it draws by noise; top_k when it
  // is on), or 0 when it needs the whole row (penalties, or no top_k while
  // sampling with top-p or min-p). A backend can then send only those
  // candidates (BatchChunk::top_k).
  int32_t candidates_needed(int32_t max_candidates) const;
  // Picks from candidates: the best `candidates_needed()` (or more) token
  // ids and logits, best first, ties to the lower id (where it draws by
  // noise: ranked by the keys of noise(), as BatchChunk::noise asks a
  // backend to). The same token sample() picks from the whole row, given
  // the same random state.
  int32_t sample_candidates(std::span<const int32_t> ids, std::span<const float> logits);

  // Whether it samples at a temperature with no other filter or change
  // (OpenAI's default: top_p 1, no penalties): then it draws by the Gumbel
  // keys of kernels/gumbel.h, the token with the largest logit / T + G,
  // which a backend can rank on the GPU (one candidate a row).
  bool draws_by_noise() const;
  // The noise of its next draw (on where draws_by_noise()): its seed and the
  // number of draws so far.
  kernels::RowNoise noise() const;

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }

 private:
  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  uint64_t draws_ = 0;  // tokens picked so far (the noise's counter)

  // Softmax at the temperature over candidates_ (sorted, cut to top-k), then
  // min-p, top-p, and the draw.
  int32_t draw();
  // The same over a whole row without top-k: no order (no top-p either),
  // or candidates_ (the row, unsorted) with top-p.
  int32_t draw_row(std::span<const float> logits);
  int32_t draw_nucleus();
  // One of candidates_ (probabilities, not yet normalized), drawn in order.
  int32_t pick();
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<float> weights_;
};

// The index of the largest value (the lowest index among ties).
int32_t argmax(std::span<const float> values);

// Why a token drawn with logit `logit` cannot be trusted ("" when it can):
// a logit that is not a finite number (NaN, or infinite) means every
// logit is (corrupt weights, or values past fp16's range), and a draw from
// them is token 0 or noise, not the model's answer. `at`: the answer's
// token index, for the message.
std::string non_finite_logit_error(float logit, int64_t at);

}  // namespace voltad
