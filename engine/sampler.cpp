#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace voltad {

Status SamplingParams::validate() const {
  auto bad = [](const char* field, const std::string& why) {
    return make_error(std::string(field) + ": " + why);
  };
  if (!std::isfinite(temperature) || temperature < 0 || temperature > 100)
    return bad("temperature", "must be between 0 and 100");
  if (top_k < 0) return bad("top_k", "must be 0 (off) or positive");
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p", "must be in (0, 1]");
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0 && repetition_penalty <= 10))
    return bad("repetition_penalty", "must be in (0, 10]");
  if (!(presence_penalty >= -2 && presence_penalty <= 2))
    return bad("presence_penalty", "must be in [-2, 2]");
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2))
    return bad("frequency_penalty", "must be in [-2, 2]");
  for (auto [token, bias] : logit_bias)
    if (token < 0 || !(bias >= -100 && bias <= 100))
      return bad("logit_bias",
                 "token " + std::to_string(token) + ": " +
                     (token < 0 ? "not a token id" : "the bias must be in [-100, 100]"));
  return {};
}

int32_t argmax(std::span<const float> values) {
  return int32_t(std::max_element(values.begin(), values.end()) - values.begin());
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : std::random_device{}()), rng_(seed_) {}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history,
                        size_t n_prompt) {
  const int32_t n = int32_t(logits.size());
  n_prompt = std::min(n_prompt, history.size());
  for (auto [token, bias] : params_.logit_bias)
    if (token >= 0 && token < n) logits[size_t(token)] += bias;
  if (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
      params_.frequency_penalty != 0.0f) {
    // Per token seen: its count in the output (0 for the prompt's alone).
    std::unordered_map<int32_t, int32_t> counts;
    for (size_t i = 0; i < history.size(); ++i) {
      const int32_t t = history[i];
      if (t >= 0 && t < n) counts[t] += i >= n_prompt;
    }
    for (auto [token, count] : counts) {
      float& l = logits[size_t(token)];
      if (params_.repetition_penalty != 1.0f)
        l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      if (count > 0) l -= params_.presence_penalty + params_.frequency_penalty * float(count);
    }
  }
  if (params_.temperature == 0.0f) return argmax(logits);

  // Candidates sorted by logit, cut by top-k; then softmax at the temperature.
  candidates_.clear();
  candidates_.reserve(logits.size());
  for (int32_t i = 0; i < n; ++i) candidates_.push_back({logits[size_t(i)], i});
  size_t keep = candidates_.size();
  if (params_.top_k > 0) keep = std::min(keep, size_t(params_.top_k));
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::partial_sort(candidates_.begin(), candidates_.begin() + std::ptrdiff_t(keep),
                    candidates_.end(), by_logit);
  candidates_.resize(keep);

  return draw();
}

int32_t Sampler::candidates_needed(int32_t max_candidates) const {
  // Penalties and biases change the order: every logit is needed.
  if (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
      params_.frequency_penalty != 0.0f || !params_.logit_bias.empty())
    return 0;
  if (params_.temperature == 0.0f) return 1;
  return params_.top_k > 0 && params_.top_k <= max_candidates ? params_.top_k : 0;
}

int32_t Sampler::sample_candidates(std::span<const int32_t> ids, std::span<const float> logits) {
  VOLTAD_CHECK(!ids.empty() && ids.size() == logits.size());
  if (params_.temperature == 0.0f) return ids[0];
  const size_t keep = std::min(ids.size(), size_t(params_.top_k));
  candidates_.clear();
  for (size_t i = 0; i < keep; ++i) candidates_.push_back({logits[i], ids[i]});
  return draw();
}

int32_t Sampler::draw() {
  const float max_logit = candidates_[0].first;
  double sum = 0;
  for (auto& c : candidates_)
    sum += (c.first = std::exp((c.first - max_logit) / params_.temperature));
  for (auto& c : candidates_) c.first = float(c.first / sum);

  // min-p, relative to the most likely token; then the top-p nucleus.
  if (params_.min_p > 0) {
    float floor = params_.min_p * candidates_[0].first;
    size_t k = 1;
    while (k < candidates_.size() && candidates_[k].first >= floor) ++k;
    candidates_.resize(k);
  }
  if (params_.top_p < 1.0f) {
    double cumulative = 0;
    size_t k = 0;
    while (k < candidates_.size()) {
      cumulative += candidates_[k++].first;
      if (cumulative >= params_.top_p) break;
    }
    candidates_.resize(std::max<size_t>(k, 1));
  }
  double total = 0;
  for (auto& c : candidates_) total += c.first;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (auto& c : candidates_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace voltad
