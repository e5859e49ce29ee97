// A decode step's tokens chosen from whole rows of logits (the sampler
// needs every logit: no top-k, penalties, logit_bias), the rows shared by
// several threads when there are many. Each row has its own sampler, so the
// tokens are those one thread would choose, in any order of work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "engine/logprobs.h"
#include "engine/sampler.h"

namespace voltad {

struct RowDraw {
  Sampler* sampler = nullptr;
  std::span<float> logits;  // reshaped in place by the sampler
  std::span<const int32_t> history;
  size_t n_prompt = 0;
  int32_t logprobs = -1;  // >= 0: also the token's log-probability, that many listed
  // Out:
  int32_t token = -1;
  std::optional<TokenLogprob> logprob;
};

// A step's rows hold at least this many logits in all before other threads
// share them (two rows of Llama 3's 128k do; a tiny model's never).
constexpr size_t kRowDrawParallelLogits = size_t(1) << 17;

// Fills each draw's token (and logprob), on up to `threads` threads (this
// one among them; 1: this one alone), where the rows are big enough.
// Returns the threads that drew.
int draw_rows(std::span<RowDraw> draws, int threads);

// The threads draw_rows is given by default: the CPUs this thread may run
// on (its affinity, which the daemon's placement binds to the GPU's socket,
// hwloc_set_cpubind), at most 8.
int row_draw_threads();

}  // namespace voltad
