#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "engine/result.h"

namespace voltad {

TokenLogprob token_logprob(std::span<const float> logits, int32_t chosen, int32_t top_n) {
  VOLTAD_CHECK(!logits.empty() && chosen >= 0 && size_t(chosen) < logits.size() && top_n >= 0 &&
               top_n <= kMaxTopLogprobs);
  // log(sum(exp(l))) = max + log(sum(exp(l - max))), in double: 150k terms.
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - double(max));
  const double log_z = double(max) + std::log(sum);
  auto logprob = [&](int32_t id) { return float(double(logits[size_t(id)]) - log_z); };

  TokenLogprob out;
  out.token = chosen;
  out.logprob = logprob(chosen);
  if (top_n == 0) return out;
  // The top_n best ids, best first, ties to the lower id: a bounded list kept
  // sorted as the row is scanned (top_n <= 20: cheaper than sorting the row).
  std::vector<int32_t> best;
  best.reserve(size_t(top_n) + 1);
  auto better = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  for (int32_t id = 0; id < int32_t(logits.size()); ++id) {
    if (int32_t(best.size()) == top_n && !better(id, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
    if (int32_t(best.size()) > top_n) best.pop_back();
  }
  out.top.reserve(best.size());
  for (int32_t id : best) out.top.emplace_back(id, logprob(id));
  return out;
}

}  // namespace voltad
