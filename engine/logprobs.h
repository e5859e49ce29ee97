// Log-probabilities of generated tokens (OpenAI's `logprobs`): the
// log-softmax of the logits as the model made them, before logit_bias, the
// penalties and the temperature reshape them for sampling.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace voltad {

constexpr int32_t kMaxTopLogprobs = 20;  // OpenAI's top_logprobs limit

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  // The `top_n` likeliest tokens (the chosen one among them when it is one
  // of them), best first, ties to the lower id.
  std::vector<std::pair<int32_t, float>> top;
  // Where the token's text starts in the answer's text, in characters
  // (code points), for text completions' text_offset; set by the scheduler.
  int64_t text_offset = 0;
};

// log(sum(exp(l))) over a row (at least one value, finite or -inf): what a
// logit less is its log-probability.
double row_log_normalizer(std::span<const float> logits);

// `logits`: one row as the model made it (at least one value, finite).
// `top_n` in [0, kMaxTopLogprobs].
TokenLogprob token_logprob(std::span<const float> logits, int32_t chosen, int32_t top_n);

// The same from a row's best tokens alone (a backend's candidates: ids and
// their logits, best first, ties to the lower id, at least top_n of them or
// the whole vocabulary, and the chosen token among them) and the row's log_z (row_log_normalizer,
// or the GPU's): what a request with logprobs needs without the whole row.
TokenLogprob candidate_logprob(std::span<const int32_t> ids, std::span<const float> logits,
                               double log_z, int32_t chosen, int32_t top_n);

}  // namespace voltad
