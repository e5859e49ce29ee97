#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "engine/result.h"

namespace voltad {

TokenLogprob token_logprob(std::span<const float> logits, int32_t chosen, int32_t top_n) {
  VOLTAD_CHECK(!logits.empty() && chosen >= 0 && size_t(chosen) < logits.size() && top_n >= 0 &&
               top_n <= kMaxTopLogprobs);
  // log(sum(exp(l))) = max + log(sum(exp(l - max))): each term in float
  // (in (0, 1]), summed in double over 8 lanes. About 0.4 ms for a row of
  // 128k on a slow core, paid only by a request that asks (double exp took
  // half as long again).
  float max = logits[0];
  for (float l : logits) max = l > max ? l : max;
  double lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= logits.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) lanes[j] += double(std::exp(logits[i + j] - max));
  for (; i < logits.size(); ++i) lanes[0] += double(std::exp(logits[i] - max));
  double sum = 0;
  for (double lane : lanes) sum += lane;
  const double log_z = double(max) + std::log(sum);
  auto logprob = [&](int32_t id) { return float(double(logits[size_t(id)]) - log_z); };

  TokenLogprob out;
  out.token = chosen;
  out.logprob = logprob(chosen);
  if (top_n == 0) return out;
  // The top_n best ids, best first, ties to the lower id: a bounded list kept
  // sorted as the row is scanned (top_n <= 20: cheaper than sorting the row).
  // An id must beat the list's last to enter (a later id never wins a tie).
  std::vector<int32_t> best;
  best.reserve(size_t(top_n) + 1);
  auto better = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  bool full = false;
  float floor = 0;  // the list's last value, once it is full
  for (int32_t id = 0; id < int32_t(logits.size()); ++id) {
    if (full && logits[size_t(id)] <= floor) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
    if (int32_t(best.size()) > top_n) best.pop_back();
    full = int32_t(best.size()) == top_n;
    if (full) floor = logits[size_t(best.back())];
  }
  out.top.reserve(best.size());
  for (int32_t id : best) out.top.emplace_back(id, logprob(id));
  return out;
}

}  // namespace voltad
