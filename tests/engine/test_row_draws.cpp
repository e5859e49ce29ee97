// A step's whole rows of logits sampled on several threads
// (engine/row_draws.h): the tokens and log-probabilities one thread gives,
// row for row, whatever the threads; tiny rows stay on the caller's thread.
#include <doctest/doctest.h>

#include <random>

#include "engine/row_draws.h"

using namespace voltad;

namespace {

struct Step {
  std::vector<std::vector<float>> rows;
  std::vector<Sampler> samplers;
  std::vector<int32_t> history = {4, 5, 6};
  std::vector<RowDraw> draws;

  // Six rows of `vocab` logits, each with its own sampling (seeded) and
  // every second one with logprobs.
  explicit Step(int64_t vocab) {
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (int r = 0; r < 6; ++r) {
      std::vector<float> row(static_cast<size_t>(vocab));
      for (float& l : row) l = normal(rng);
      rows.push_back(std::move(row));
      SamplingParams p;
      p.temperature = 0.7f + 0.1f * float(r);
      p.top_p = r % 3 == 0 ? 0.9f : 1.0f;
      p.presence_penalty = r == 5 ? 0.5f : 0.0f;
      p.seed = uint64_t(100 + r);
      samplers.emplace_back(p);
    }
    for (int r = 0; r < 6; ++r) {
      RowDraw d;
      d.sampler = &samplers[size_t(r)];
      d.logits = rows[size_t(r)];
      d.history = history;
      d.n_prompt = 1;
      d.logprobs = r % 2 == 0 ? 3 : -1;
      draws.push_back(d);
    }
  }
};

}  // namespace

TEST_CASE("draw_rows: the same tokens and log-probabilities on 1 and 4 threads") {
  for (int64_t vocab : {int64_t(256), int64_t(60000)}) {
    CAPTURE(vocab);
    Step one(vocab), four(vocab);
    draw_rows(one.draws, 1);
    draw_rows(four.draws, 4);
    for (size_t r = 0; r < 6; ++r) {
      CAPTURE(r);
      REQUIRE(one.draws[r].token >= 0);
      CHECK(four.draws[r].token == one.draws[r].token);
      CHECK(four.draws[r].logprob.has_value() == (r % 2 == 0));
      if (one.draws[r].logprob) {
        CHECK(four.draws[r].logprob->logprob == one.draws[r].logprob->logprob);
        CHECK(four.draws[r].logprob->top == one.draws[r].logprob->top);
        CHECK(one.draws[r].logprob->token == one.draws[r].token);
      }
    }
  }
}

// Which threads draw: the caller alone for a tiny model's rows, as many as
// asked (up to the rows) for big ones.
TEST_CASE("draw_rows: other threads only for big rows") {
  static_assert(6 * 60000 >= kRowDrawParallelLogits && 6 * 256 < kRowDrawParallelLogits);
  Step tiny(256), big(60000), big_too(60000);
  CHECK(draw_rows(tiny.draws, 4) == 1);
  CHECK(draw_rows(big.draws, 4) == 4);
  CHECK(draw_rows(big_too.draws, 16) == 6);  // no more threads than rows
  for (const RowDraw& d : big.draws) CHECK(d.token >= 0);
  CHECK(row_draw_threads() >= 1);
  CHECK(row_draw_threads() <= 8);
}
