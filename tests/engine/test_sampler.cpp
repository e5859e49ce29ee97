#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "engine/sampler.h"

using namespace voltad;

namespace {
std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }
}  // namespace

TEST_CASE("greedy picks the largest logit, lowest index among ties") {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  auto l = logits_of({0.1f, 3.0f, -1.0f, 3.0f});
  CHECK(s.sample(l, {}, 0) == 1);
}

TEST_CASE("the same seed gives the same tokens, another seed other tokens") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  std::vector<float> base(200);
  for (size_t i = 0; i < base.size(); ++i) base[i] = float(std::sin(double(i)));
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      auto l = base;
      out.push_back(s.sample(l, {}, 0));
    }
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

TEST_CASE("top-k 1 is greedy at any temperature") {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  p.seed = 1;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) {
    auto l = logits_of({0.0f, 0.5f, 0.4f});
    CHECK(s.sample(l, {}, 0) == 1);
  }
}

TEST_CASE("top-p keeps only the nucleus") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  p.seed = 7;
  Sampler s(p);
  // p(0) ~ 0.84: the nucleus at 0.5 is token 0 alone.
  for (int i = 0; i < 50; ++i) {
    auto l = logits_of({3.0f, 1.0f, 0.0f, 0.0f});
    CHECK(s.sample(l, {}, 0) == 0);
  }
}

TEST_CASE("min-p drops tokens far below the best") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;
  p.seed = 3;
  Sampler s(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 300; ++i) {
    auto l = logits_of({2.0f, 2.0f, -3.0f});  // token 2 has p ~ 0.003 < 0.2 * 0.5
    ++seen[s.sample(l, {}, 0)];
  }
  CHECK(seen[2] == 0);
  CHECK(seen[0] > 0);
  CHECK(seen[1] > 0);
}

TEST_CASE("sampling follows the distribution") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 11;
  Sampler s(p);
  int ones = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    auto l = logits_of({0.0f, float(std::log(3.0))});  // p(1) = 0.75
    ones += s.sample(l, {}, 0) == 1;
  }
  CHECK(double(ones) / n == doctest::Approx(0.75).epsilon(0.05));
}

TEST_CASE("penalties push seen tokens down") {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 1.0f;
  Sampler s(p);
  auto l = logits_of({1.0f, 0.5f});
  std::vector<int32_t> history = {0, 0};
  CHECK(s.sample(l, history, 0) == 1);
  CHECK(l[0] == doctest::Approx(-1.0f));

  SamplingParams r;
  r.temperature = 0;
  r.repetition_penalty = 4.0f;
  Sampler s2(r);
  auto l2 = logits_of({2.0f, 1.0f, -1.0f});
  std::vector<int32_t> h2 = {0, 2};
  CHECK(s2.sample(l2, h2, 2) == 1);  // the prompt's tokens too
  CHECK(l2[0] == doctest::Approx(0.5f));
  CHECK(l2[2] == doctest::Approx(-4.0f));
}

TEST_CASE("logit_bias moves the tokens it names, and asks for every logit") {
  SamplingParams p;
  p.temperature = 0;
  CHECK(Sampler(p).candidates_needed(64) == 1);
  p.logit_bias = {{0, -100.0f}, {2, 1.5f}, {99, 100.0f}};  // 99: past the vocabulary, skipped
  Sampler s(p);
  CHECK(s.candidates_needed(64) == 0);  // the GPU's top-k would miss a raised token
  auto l = logits_of({3.0f, 2.0f, 1.0f});
  CHECK(s.sample(l, {}, 0) == 2);  // 3 - 100, 2, 1 + 1.5
  CHECK(l[0] == doctest::Approx(-97.0f));
  // Sampled at a temperature, a banned token never comes up.
  SamplingParams q;
  q.seed = 1;
  q.logit_bias = {{1, -100.0f}};
  Sampler t(q);
  for (int i = 0; i < 200; ++i) {
    auto lq = logits_of({0.0f, 5.0f, 0.0f});
    CHECK(t.sample(lq, {}, 0) != 1);
  }
}

TEST_CASE("parameters out of range are named") {
  SamplingParams p;
  p.top_p = 0;
  CHECK(p.validate().error().message.find("top_p") == 0);
  p = {};
  p.temperature = -1;
  CHECK(p.validate().error().message.find("temperature") == 0);
  p = {};
  p.logit_bias = {{3, 100.5f}};
  CHECK(p.validate().error().message.find("logit_bias") == 0);
  p.logit_bias = {{-1, 1.0f}};
  CHECK(p.validate().error().message.find("logit_bias") == 0);
  p = {};
  CHECK(p.validate().ok());
}

// OpenAI's presence and frequency penalties count the output only: a chat
// prompt holds the end-of-turn token several times, and penalising it
// there kept answers from ever ending.
TEST_CASE("presence and frequency penalties skip the prompt's tokens") {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  Sampler s(p);
  // Token 0 three times in the prompt, once in the output; token 2 only in
  // the prompt.
  const std::vector<int32_t> history = {0, 0, 2, 0, 1, 0};
  auto l = logits_of({1.0f, 0.9f, 0.8f});
  CHECK(s.sample(l, history, 4) == 2);
  CHECK(l[0] == doctest::Approx(1.0f - 0.5f - 2.0f));  // once in the output
  CHECK(l[1] == doctest::Approx(0.9f - 0.5f - 2.0f));  // once in the output
  CHECK(l[2] == doctest::Approx(0.8f));                // the prompt's only
  // All prompt: nothing penalised, the best logit wins.
  auto l2 = logits_of({1.0f, 0.9f, 0.8f});
  CHECK(s.sample(l2, history, history.size()) == 0);
  CHECK(l2[0] == doctest::Approx(1.0f));
}
