#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

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

namespace {

// The sampler as first written: the whole row sorted by logit (ties to the
// lower id), the softmax at the temperature, min-p, top-p, and the draw in
// that order, from a generator seeded alike: what the faster paths
// (no order without top-k and top-p; a sorted prefix for top-p) must match.
int32_t sorted_reference(std::vector<float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  std::vector<std::pair<float, int32_t>> c;
  for (int32_t i = 0; i < int32_t(logits.size()); ++i) c.push_back({logits[size_t(i)], i});
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (p.top_k > 0 && size_t(p.top_k) < c.size()) c.resize(size_t(p.top_k));
  const float max_logit = c[0].first;
  double sum = 0;
  for (auto& x : c) sum += (x.first = std::exp((x.first - max_logit) / p.temperature));
  for (auto& x : c) x.first = float(x.first / sum);
  if (p.min_p > 0) {
    size_t k = 1;
    while (k < c.size() && c[k].first >= p.min_p * c[0].first) ++k;
    c.resize(k);
  }
  if (p.top_p < 1.0f) {
    double cumulative = 0;
    size_t k = 0;
    while (k < c.size()) {
      cumulative += c[k++].first;
      if (cumulative >= p.top_p) break;
    }
    c.resize(std::max<size_t>(k, 1));
  }
  double total = 0;
  for (auto& x : c) total += x.first;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (auto& x : c)
    if ((r -= x.first) <= 0) return x.second;
  return c.back().second;
}

}  // namespace

// Top-p (with or without min-p) sorts only as much of the row as the
// nucleus needs: a nucleus inside the first stretch of 512, one that needs
// several stretches (a flat row), and the whole row. The same token as the
// sorted reference from the same seed, but where float sums in another
// order move a draw across a boundary (rare).
TEST_CASE("top-p over a long row: the tokens of the fully sorted sampler") {
  std::mt19937 rng(3);
  struct Case {
    float spread, top_p, min_p;
  };
  for (Case k : {Case{4.0f, 0.9f, 0.0f}, Case{0.3f, 0.95f, 0.0f}, Case{0.05f, 0.999f, 0.0f},
                 Case{1.0f, 0.9f, 0.02f}}) {
    CAPTURE(k.spread);
    CAPTURE(k.top_p);
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = k.top_p;
    p.min_p = k.min_p;
    p.seed = 77;
    Sampler fast(p);
    std::mt19937_64 reference_rng(77);
    std::normal_distribution<float> normal(0.0f, k.spread);
    int same = 0;
    const int draws = 200;
    for (int i = 0; i < draws; ++i) {
      std::vector<float> row(20000);
      for (float& l : row) l = std::round(normal(rng) * 64.0f) / 64.0f;  // ties too
      std::vector<float> copy = row;
      same += fast.sample(copy, {}, 0) == sorted_reference(row, p, reference_rng);
    }
    CHECK(same >= draws - 4);
  }
}

// Without top-k and top-p the draw needs no order: the distribution is the
// softmax (with min-p, of the tokens it keeps), the seed reproduces it.
TEST_CASE("sampling without top-k or top-p follows the softmax, min-p too") {
  for (float min_p : {0.0f, 0.3f}) {
    CAPTURE(min_p);
    SamplingParams p;
    p.temperature = 0.5f;
    p.min_p = min_p;
    p.seed = 5;
    Sampler s(p);
    // At T = 0.5 a token's weight is e^(2 l): p = {0.5, 0.25, 0.125, 0.125}
    // without min-p.
    const std::vector<float> row = {0.0f, float(std::log(0.5) / 2), float(std::log(0.25) / 2),
                                    float(std::log(0.25) / 2)};
    std::map<int32_t, int> seen;
    const int n = 8000;
    for (int i = 0; i < n; ++i) {
      std::vector<float> l = row;
      ++seen[s.sample(l, {}, 0)];
    }
    if (min_p == 0.0f) {
      CHECK(double(seen[0]) / n == doctest::Approx(0.5).epsilon(0.05));
      CHECK(double(seen[1]) / n == doctest::Approx(0.25).epsilon(0.08));
      CHECK(double(seen[2] + seen[3]) / n == doctest::Approx(0.25).epsilon(0.08));
    } else {
      // min-p 0.3 keeps p >= 0.3 x 0.5: tokens 0 and 1, renormalized.
      CHECK(seen[2] + seen[3] == 0);
      CHECK(double(seen[0]) / n == doctest::Approx(2.0 / 3).epsilon(0.05));
    }
  }
}

// At a temperature alone the sampler draws by Gumbel keys (kernels/gumbel.h):
// the softmax at the temperature, a NaN or -inf logit never, the same
// tokens for the same seed, from the draw's number and not from a state
// (a sampler made again at draw n gives what the first gave there).
TEST_CASE("drawing by noise follows the softmax at the temperature") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float t : {1.0f, 0.5f, 2.0f}) {
    CAPTURE(t);
    SamplingParams p;
    p.temperature = t;
    p.seed = 17;
    Sampler s(p), again(p);
    REQUIRE(s.draws_by_noise());
    const std::vector<float> row = {0.0f, float(std::log(2.0)), float(std::log(4.0)), nan, -inf,
                                    -1.0f};
    double z = 0;
    std::vector<double> want;
    for (float l : row) want.push_back(std::isfinite(l) ? std::exp(double(l) / t) : 0.0);
    for (double w : want) z += w;
    std::map<int32_t, int> seen;
    const int n = 40000;
    std::vector<int32_t> first;
    for (int i = 0; i < n; ++i) {
      std::vector<float> l = row;
      const int32_t tok = s.sample(l, {}, 0);
      ++seen[tok];
      if (i < 50) first.push_back(tok);
    }
    CHECK(seen[3] == 0);
    CHECK(seen[4] == 0);
    for (int32_t tok : {0, 1, 2, 5}) {
      CAPTURE(tok);
      const double pr = want[size_t(tok)] / z;
      // Four standard deviations of a binomial count.
      CHECK(std::abs(double(seen[tok]) / n - pr) < 4 * std::sqrt(pr * (1 - pr) / n));
    }
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l = row;
      CHECK(again.sample(l, {}, 0) == first[size_t(i)]);
    }
  }
}

// A logit far above the rest of a vocabulary-sized row is always drawn: no
// token's noise is infinite (a uniform of exactly 1 would make it so).
TEST_CASE("drawing by noise: a dominant logit of a 128k row is always drawn") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 3;
  Sampler s(p);
  std::vector<float> row(128256, 0.0f);
  row[4242] = 40.0f;  // the rest together: about 128k e^-40, 5e-13
  for (int i = 0; i < 400; ++i) {
    std::vector<float> l = row;
    CHECK(s.sample(l, {}, 0) == 4242);
  }
  // The uniform's extremes stay inside (0, 1), and so the keys finite.
  CHECK(kernels::uniform_of_bits(~uint64_t(0)) < 1.0f);
  CHECK(kernels::uniform_of_bits(0) > 0.0f);
  CHECK(std::isfinite(std::log(-std::log(kernels::uniform_of_bits(~uint64_t(0))))));
  CHECK(std::isfinite(std::log(-std::log(kernels::uniform_of_bits(0)))));
}

// A temperature near the smallest float (valid: above 0) is all but greedy
// on every path: 1 / T would overflow, so the weights divide by T.
TEST_CASE("a tiny temperature picks the best token with top-p, min-p or neither") {
  for (float top_p : {1.0f, 0.9f})
    for (float min_p : {0.0f, 0.1f}) {
      CAPTURE(top_p);
      CAPTURE(min_p);
      SamplingParams p;
      p.temperature = 1e-39f;
      p.top_p = top_p;
      p.min_p = min_p;
      p.seed = 2;
      REQUIRE(p.validate().ok());
      Sampler s(p);
      for (int i = 0; i < 20; ++i) {
        auto l = logits_of({1.0f, 5.0f, 2.0f, -3.0f, 0.5f});
        CHECK(s.sample(l, {}, 0) == 1);
      }
    }
}
