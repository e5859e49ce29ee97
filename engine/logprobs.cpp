#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "engine/result.h"

namespace voltad {

double row_log_normalizer(std::span<const float> logits) {
  VOLTAD_CHECK(!logits.empty());
  // log(sum(exp(l))) = max + log(sum(exp(l - max))): each term in float
  // (in (0, 1]), summed in double over 8 lanes. About 0.4 ms for a row of
  // 128k on a slow core, paid only by a request that asks and whose row
  // comes whole (double exp took half as long again).
  float max = logits[0];
  for (float l : logits) max = l > max ? l : max;
  if (max == -INFINITY) return -INFINITY;
  double lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= logits.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) lanes[j] += double(std::exp(logits[i + j] - max));
  for (; i < logits.size(); ++i) lanes[0] += double(std::exp(logits[i] - max));
  double sum = 0;
  for (double lane : lanes) sum += lane;
  return double(max) + std::log(sum);
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t chosen, int32_t top_n) {
  VOLTAD_CHECK(!logits.empty() && chosen >= 0 && size_t(chosen) < logits.size() && top_n >= 0 &&
               top_n <= kMaxTopLogprobs);
  const double log_z = row_log_normalizer(logits);
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

TokenLogprob candidate_logprob(std::span<const int32_t> ids, std::span<const float> logits,
                               double log_z, int32_t chosen, int32_t top_n) {
  VOLTAD_CHECK(ids.size() == logits.size() && top_n >= 0 && top_n <= kMaxTopLogprobs);
  top_n = int32_t(std::min(size_t(top_n), ids.size()));  // a vocabulary smaller than top_n
  const auto at = std::find(ids.begin(), ids.end(), chosen);
  VOLTAD_CHECK(at != ids.end());  // the sampler chose among the candidates
  auto logprob = [&](size_t i) { return float(double(logits[i]) - log_z); };
  TokenLogprob out;
  out.token = chosen;
  out.logprob = logprob(size_t(at - ids.begin()));
  out.top.reserve(size_t(top_n));
  for (size_t i = 0; i < size_t(top_n); ++i) out.top.emplace_back(ids[i], logprob(i));
  return out;
}

}  // namespace voltad
