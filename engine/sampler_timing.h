// What the host spends choosing a token for one sequence (engine/sampler.h),
// and the log-probabilities of a request whose row comes whole
// (engine/logprobs.h): the engine thread's time a sequence a step, beside
// the GPU's. voltad-bench --sampling prints it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace voltad {

struct SamplerTiming {
  std::string setting;  // e.g. "temperature 1, top_p 0.95"
  double ms_per_token = 0;
};

// Each setting timed over `tokens` draws from one row of `vocab` logits
// (normal, standard deviation 3, a fixed seed: a flat row, whose top-p
// nucleus holds thousands of tokens; a peaked one has 16 tokens raised by
// 25, nearly all the mass). The row is copied for each draw, as the
// scheduler's is fresh each step: ~0.05 ms of each number.
std::vector<SamplerTiming> time_sampling(int64_t vocab, int tokens);

}  // namespace voltad
