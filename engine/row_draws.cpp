#include "engine/row_draws.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

#include "engine/thread_pool.h"

namespace voltad {

namespace {
void draw_one(RowDraw& d) {
  if (d.logprobs < 0) {
    d.token = d.sampler->sample(d.logits, d.history, d.n_prompt);
    return;
  }
  // The row as the model made it: sample() reshapes it in place.
  thread_local std::vector<float> raw;
  raw.assign(d.logits.begin(), d.logits.end());
  d.token = d.sampler->sample(d.logits, d.history, d.n_prompt);
  d.logprob = token_logprob(raw, d.token, d.logprobs);
}
}  // namespace

int draw_rows(std::span<RowDraw> draws, int threads) {
  // Threads pay only for big rows: starting one takes ~50 us, a row of 128k
  // ~0.5 ms, one of a tiny model's 256 ~1 us.
  size_t logits = 0;
  for (const RowDraw& d : draws) logits += d.logits.size();
  const size_t workers =
      logits < kRowDrawParallelLogits ? 1 : std::min(draws.size(), size_t(std::max(threads, 1)));
  if (workers <= 1) {
    for (RowDraw& d : draws) draw_one(d);
    return 1;
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
  try {
    for (size_t w = 1; w < workers; ++w) helpers.emplace_back(work);
  } catch (const std::system_error&) {
    // No thread to be had (a task limit): the rows left are this thread's.
  }
  work();
  return int(helpers.size()) + 1;
}

int row_draw_threads() {
  return std::clamp(ThreadPool::usable_cpus(), 1, 8);
}

}  // namespace voltad
