// The scheduler's side of the VRAM guard (issue 8), on the CPU backend with
// the tiny Llama fixture: a request that could never fit is refused up front
// with the numbers, and a failed engine step (a CUDA out-of-memory error on
// a GPU) ends exactly the sequences in that step while the rest go on and
// later requests are served. Logits that are not numbers end a sequence
// with an error, not token 0.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "engine/backend_cpu.h"
#include "engine/generate.h"
#include "engine/gguf_file.h"
#include "engine/model.h"
#include "engine/scheduler.h"
#include "tests/engine/scheduler_fixture.h"

using namespace voltad;
using voltad::test::fixture;

namespace {

GenerationRequest greedy(std::mt19937& rng, int n_prompt, int32_t max_tokens) {
  std::uniform_int_distribution<int32_t> token(3, 319);
  GenerationRequest r;
  for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(token(rng));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

// A backend whose chosen steps fail the way a CUDA backend reports running
// out of device memory.
class FailingBackend final : public Backend {
 public:
  explicit FailingBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  KvBlockPool& kv_pool() override { return inner_.kv_pool(); }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override {
    ++steps;
    if (steps == fail_at) {
      failed_seq_ids.clear();
      for (const BatchChunk& c : chunks) failed_seq_ids.push_back(c.seq_id);
      return make_error(
          "the forward step failed on NVIDIA H200: cudaErrorMemoryAllocation (out of memory)");
    }
    return inner_.forward(chunks, out);
  }
  int steps = 0, fail_at = -1;
  std::vector<int32_t> failed_seq_ids;

 private:
  Backend& inner_;
};

std::optional<StreamEvent> last_event(RequestStream& s, std::string* text = nullptr) {
  std::optional<StreamEvent> last;
  for (StreamEvent& e : s.take()) {
    if (text) *text += e.text;
    if (e.done) last = e;
  }
  return last;
}

}  // namespace

TEST_CASE("a request beyond the whole KV pool is refused up front with the numbers") {
  // The context is 128 tokens, but the pool holds 5 blocks = 80 tokens.
  auto backend = fixture().backend(128, 2, 5);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(21);
  auto r = s.check(greedy(rng, 60, 40));
  CHECK(r.code == SubmitResult::Code::Invalid);
  CHECK(r.message.find("80 tokens") != std::string::npos);
  CHECK(r.message.find("100") != std::string::npos);
  CHECK(s.submit(greedy(rng, 60, 40), std::make_shared<RequestStream>()).code ==
        SubmitResult::Code::Invalid);
  // One that fits the pool is taken.
  CHECK(s.submit(greedy(rng, 40, 40), std::make_shared<RequestStream>()).ok());
  // And beyond the context itself: both numbers and their sum.
  auto c = s.check(greedy(rng, 100, 29));
  CHECK(c.code == SubmitResult::Code::Invalid);
  CHECK(c.message.find("128") != std::string::npos);
  CHECK(c.message.find("129") != std::string::npos);
}

TEST_CASE("an out-of-memory step fails only its own sequences; the daemon's engine goes on") {
  auto cpu = fixture().backend(128, 4);
  FailingBackend backend(*cpu);
  SchedulerOptions o;
  o.max_sequences = 4;
  o.stream_queue_limit = 4;
  Scheduler s(backend, *fixture().tokenizer, o);
  std::mt19937 rng(22);
  // `paused` is admitted and prefilled, then stops being scheduled while its
  // reader is behind (backpressure), so it is not in the failing step.
  auto paused = std::make_shared<RequestStream>();
  REQUIRE(s.submit(greedy(rng, 8, 30), paused).ok());
  for (int i = 0; i < 10; ++i) s.step();
  REQUIRE(paused->pending() >= 4);
  auto a = std::make_shared<RequestStream>(), b = std::make_shared<RequestStream>();
  REQUIRE(s.submit(greedy(rng, 12, 20), a).ok());
  REQUIRE(s.submit(greedy(rng, 20, 20), b).ok());
  backend.fail_at = backend.steps + 1;
  REQUIRE(s.step());
  CHECK(backend.failed_seq_ids.size() == 2);
  auto la = last_event(*a), lb = last_event(*b);
  REQUIRE(la);
  REQUIRE(lb);
  CHECK(la->end == EndReason::Error);
  CHECK(lb->end == EndReason::Error);
  CHECK(la->error.find("out of memory") != std::string::npos);
  CHECK(s.stats().running == 1);  // the paused one is untouched

  // The paused sequence finishes normally once read, and a new request is served.
  auto c = std::make_shared<RequestStream>();
  REQUIRE(s.submit(greedy(rng, 10, 12), c).ok());
  std::optional<StreamEvent> lp, lc;
  std::string text_c;
  for (int i = 0; i < 2000 && !(lp && lc); ++i) {
    if (auto e = last_event(*paused)) lp = e;
    if (auto e = last_event(*c, &text_c)) lc = e;
    s.step();
  }
  REQUIRE(lp);
  REQUIRE(lc);
  CHECK(lp->end == EndReason::Length);
  CHECK(lp->completion_tokens == 30);
  CHECK(lc->end == EndReason::Length);
  CHECK(lc->completion_tokens == 12);
  CHECK(cpu->kv_pool().used_blocks() == 0);
}

namespace {
// A backend whose logits are all NaN from the chosen step on (corrupt
// weights: a NaN scale, a norm of NaN), in whole rows and candidates.
class NanBackend final : public Backend {
 public:
  explicit NanBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  KvBlockPool& kv_pool() override { return inner_.kv_pool(); }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override {
    VOLTAD_TRY(inner_.forward(chunks, out));
    if (++steps >= nan_from) {
      std::fill(out.logits.begin(), out.logits.end(), std::nanf(""));
      std::fill(out.candidate_logits.begin(), out.candidate_logits.end(), std::nanf(""));
    }
    return {};
  }
  int steps = 0, nan_from = 1;

 private:
  Backend& inner_;
};
}  // namespace

// NaN logits drew token 0 (the end of text on SmolLM2): an empty answer,
// "stop", and nothing said.
TEST_CASE("logits that are not numbers end the sequence with an error that says so") {
  auto inner = fixture().backend(128, 4);
  NanBackend backend(*inner);
  backend.nan_from = 2;  // the prompts and their first tokens, then NaN
  Scheduler s(backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(5);
  // Greedy (candidates), a temperature (whole rows by noise) and top-p
  // (whole rows, sorted): every way a token is drawn.
  std::vector<GenerationRequest> requests(3, greedy(rng, 6, 10));
  requests[1].sampling.temperature = 0.8f;
  requests[2].sampling.temperature = 0.8f;
  requests[2].sampling.top_p = 0.9f;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& r : requests) {
    streams.push_back(std::make_shared<RequestStream>());
    REQUIRE(s.submit(r, streams.back()).ok());
  }
  for (int i = 0; i < 20 && !s.idle(); ++i) s.step();
  for (auto& stream : streams) {
    auto last = last_event(*stream);
    REQUIRE(last);
    CHECK(last->end == EndReason::Error);
    CHECK_MESSAGE(last->error.find("the model's logits are not numbers (NaN) at answer token 1") !=
                      std::string::npos,
                  last->error);
    CHECK(last->completion_tokens == 1);
  }
  CHECK(inner->kv_pool().used_blocks() == 0);
}

// voltad-run's path: generate() fails with the same words (it said
// "0 generated" and exited 0).
TEST_CASE("generate() refuses logits that are not numbers") {
  auto inner = fixture().backend(128, 1);
  NanBackend backend(*inner);
  std::mt19937 rng(6);
  GenerateOptions o;
  o.max_tokens = 4;
  for (float temperature : {0.0f, 0.8f}) {
    o.sampling.temperature = temperature;
    auto g = generate(backend, *fixture().tokenizer, greedy(rng, 6, 4).prompt, o);
    REQUIRE_FALSE(g.ok());
    CHECK(g.error().message.find("the model's logits are not numbers (NaN) at answer token 0") !=
          std::string::npos);
  }
}
