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

namespace {
// Best first, ties to the lower id.
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}
}  // namespace

int32_t argmax(std::span<const float> values) {
  return int32_t(std::max_element(values.begin(), values.end()) - values.begin());
}

std::string non_finite_logit_error(float logit, int64_t at) {
  if (std::isfinite(logit)) return "";
  return "the model's logits are not numbers (" +
         std::string(std::isnan(logit) ? "NaN" : "infinite") + ") at answer token " +
         std::to_string(at) + ": its weights are corrupt, or its values pass fp16's range";
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
  if (draws_by_noise()) {
    // The largest key (NaN last, ties to the lower id), as the top-k does.
    const kernels::RowNoise rn = noise();
    const uint64_t base = kernels::noise_base(rn);
    ++draws_;
    int32_t best = -1;
    float best_key = 0;
    for (int32_t i = 0; i < n; ++i) {
      const float key = kernels::noise_key(logits[size_t(i)], rn.temperature, base, i);
      if (std::isnan(key)) continue;
      if (best < 0 || key > best_key) best = i, best_key = key;
    }
    return best < 0 ? 0 : best;
  }
  // Without top-k or top-p no order is needed: the softmax and the draw in
  // one pass over the row. Sorting a row of 128k took ~13 ms a token on a
  // slow core, more than a batched decode step on the GPU.
  // With top-k (even one past the vocabulary) the sorted draw, as
  // sample_candidates does from a backend's candidates.
  const bool top_k = params_.top_k > 0;
  if (!top_k && params_.top_p >= 1.0f) return draw_row(logits);

  candidates_.clear();
  candidates_.reserve(logits.size());
  for (int32_t i = 0; i < n; ++i) candidates_.push_back({logits[size_t(i)], i});
  if (!top_k) return draw_nucleus();
  // The top-k best, best first, ties to the lower id (what sample_candidates
  // gets from a backend); then the softmax at the temperature.
  const auto keep = std::ptrdiff_t(std::min(params_.top_k, n));
  std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  candidates_.resize(size_t(keep));
  return draw();
}

int32_t Sampler::draw_row(std::span<const float> logits) {
  // p_i = exp((l_i - max) / T) / sum. min-p keeps p_i >= min_p * p_max,
  // where p_max = 1 / sum: the weights of at least min_p.
  float max_logit = logits[0];
  for (float l : logits) max_logit = l > max_logit ? l : max_logit;
  // Divided by T, as draw() does (a multiply by 1 / T overflows for T near
  // the smallest float).
  const float t = params_.temperature;
  weights_.resize(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    float w = std::exp((logits[i] - max_logit) / t);
    if (!(w >= params_.min_p)) w = 0;  // NaN too
    weights_[i] = w;
    total += double(w);
  }
  // In the row's order: the same distribution as in the order of the logits.
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  int32_t last = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (weights_[i] <= 0) continue;
    last = int32_t(i);
    r -= double(weights_[i]);
    if (r <= 0) return last;
  }
  return last;
}

int32_t Sampler::draw_nucleus() {
  // As draw() over the whole row sorted, sorting only the prefix the
  // nucleus needs: a few hundred tokens for a model's usual distribution,
  // the whole row for a flat one.
  float max_logit = candidates_[0].first;
  for (const auto& c : candidates_) max_logit = c.first > max_logit ? c.first : max_logit;
  const float t = params_.temperature;  // divided by, as in draw()
  double sum = 0;
  for (const auto& c : candidates_) sum += std::exp((c.first - max_logit) / t);
  const float floor = params_.min_p * float(1.0 / sum);  // p_max is 1 / sum
  size_t sorted = 0, kept = 0;
  double cumulative = 0;
  bool done = false;
  while (!done) {
    // The next stretch of the order: 512 more, then each time 8x as many.
    // (A heap for the first, which most rows stop in: it passes over the
    // many small logits fast; a selection, then a sort, for the longer.)
    const size_t end = std::min(candidates_.size(), sorted == 0 ? size_t(512) : sorted * 8);
    const auto first = candidates_.begin() + std::ptrdiff_t(sorted);
    const auto last = candidates_.begin() + std::ptrdiff_t(end);
    if (sorted == 0) {
      std::partial_sort(first, last, candidates_.end(), by_logit);
    } else {
      std::nth_element(first, last, candidates_.end(), by_logit);
      std::sort(first, last, by_logit);
    }
    for (; sorted < end && !done; ++sorted) {
      const float p = float(std::exp((candidates_[sorted].first - max_logit) / t) / sum);
      if (p < floor && sorted > 0) {
        done = true;
        break;
      }
      candidates_[sorted].first = p;
      cumulative += p;
      kept = sorted + 1;
      done = cumulative >= params_.top_p;
    }
    done = done || sorted == candidates_.size();
  }
  candidates_.resize(std::max<size_t>(kept, 1));
  return pick();
}

int32_t Sampler::candidates_needed(int32_t max_candidates) const {
  // Penalties and biases change the order: every logit is needed.
  if (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
      params_.frequency_penalty != 0.0f || !params_.logit_bias.empty())
    return 0;
  if (params_.temperature == 0.0f || draws_by_noise()) return 1;
  return params_.top_k > 0 && params_.top_k <= max_candidates ? params_.top_k : 0;
}

bool Sampler::draws_by_noise() const {
  return params_.temperature > 0.0f && params_.top_k == 0 && params_.top_p >= 1.0f &&
         params_.min_p == 0.0f && params_.repetition_penalty == 1.0f &&
         params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f &&
         params_.logit_bias.empty();
}

kernels::RowNoise Sampler::noise() const {
  kernels::RowNoise n;
  if (!draws_by_noise()) return n;
  n.seed = seed_;
  n.draw = draws_;
  n.temperature = params_.temperature;
  n.on = 1;
  return n;
}

int32_t Sampler::sample_candidates(std::span<const int32_t> ids, std::span<const float> logits) {
  VOLTAD_CHECK(!ids.empty() && ids.size() == logits.size());
  if (params_.temperature == 0.0f) return ids[0];
  if (draws_by_noise()) {
    ++draws_;
    return ids[0];
  }
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
  return pick();
}

int32_t Sampler::pick() {
  double total = 0;
  for (const auto& c : candidates_) total += c.first;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& c : candidates_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace voltad
