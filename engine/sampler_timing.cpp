#include "engine/sampler_timing.h"

#include <chrono>
#include <functional>
#include <random>

#include "engine/logprobs.h"
#include "engine/sampler.h"

namespace voltad {

std::vector<SamplerTiming> time_sampling(int64_t vocab, int tokens) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& l : row) l = normal(rng);
  // A model's usual row is more peaked: 16 tokens with nearly all the mass.
  std::vector<float> peaked = row;
  for (size_t i = 0; i < 16; ++i) peaked[i * 997 % peaked.size()] += 25.0f;
  std::vector<float> work;
  const std::vector<int32_t> history = {1, 2, 3};
  int64_t sink = 0;  // the choices, so that none is optimized away

  auto timed = [&](const std::function<int32_t()>& choose, const std::vector<float>& from) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < tokens; ++i) {
      work = from;
      sink += choose();
    }
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    return took.count() / tokens;
  };
  struct Setting {
    std::string name;
    SamplingParams params;
    const std::vector<float>* row;
  };
  auto with = [](float temperature, int32_t top_k, float top_p, float min_p, float presence) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.presence_penalty = presence;
    p.seed = 7;
    return p;
  };
  const std::vector<Setting> settings = {
      {"greedy", with(0.0f, 0, 1.0f, 0.0f, 0.0f), &row},
      {"temperature 1 (OpenAI's default)", with(1.0f, 0, 1.0f, 0.0f, 0.0f), &row},
      {"temperature 1, top_p 0.95, a flat row", with(1.0f, 0, 0.95f, 0.0f, 0.0f), &row},
      {"temperature 1, top_p 0.95, a peaked row", with(1.0f, 0, 0.95f, 0.0f, 0.0f), &peaked},
      {"temperature 1, min_p 0.05", with(1.0f, 0, 1.0f, 0.05f, 0.0f), &row},
      {"temperature 0.8, top_k 40, presence_penalty 0.5 (the row comes whole)",
       with(0.8f, 40, 1.0f, 0.0f, 0.5f), &row},
  };
  std::vector<SamplerTiming> out;
  for (const Setting& s : settings) {
    Sampler sampler(s.params);
    out.push_back({s.name, timed([&] { return sampler.sample(work, history, 0); }, *s.row)});
  }
  out.push_back(
      {"logprobs from the whole row (5 listed)",
       timed([&] { return token_logprob(work, int32_t(sink % vocab), 5).top[0].first; }, row)});
  if (sink == -1) out.clear();  // never: keeps sink alive
  return out;
}

}  // namespace voltad
