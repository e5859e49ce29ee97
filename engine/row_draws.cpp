#include "engine/row_draws.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace voltad {

namespace {
void draw_one(RowDraw& d) {
  if (d.logprobs < 0) {
    d.token = d.sampler->sample(d.logits, d.history, d.n_prompt);
    return;
  }
  // The row as the model made it: sample() reshapes it in place.
  const std::vector<float> raw(d.logits.begin(), d.logits.end());
  d.token = d.sampler->sample(d.logits, d.history, d.n_prompt);
  d.logprob = token_logprob(raw, d.token, d.logprobs);
}
}  // namespace

void draw_rows(std::span<RowDraw> draws, int threads) {
  const size_t workers = std::min(draws.size(), size_t(std::max(threads, 1)));
  if (workers <= 1) {
    for (RowDraw& d : draws) draw_one(d);
    return;
  }
  // A row at a time to whichever thread is free (rows differ in cost: top-p
  // on a flat row sorts more). Threads per step: at ~0.5 ms a row on a slow
  // core, starting one (~50 us) pays from the second row.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < draws.size(); i = next++) draw_one(draws[i]);
  };
  std::vector<std::jthread> helpers;
  helpers.reserve(workers - 1);
  for (size_t w = 1; w < workers; ++w) helpers.emplace_back(work);
  work();
}

int row_draw_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return std::clamp(cpus, 1, 8);
}

}  // namespace voltad
