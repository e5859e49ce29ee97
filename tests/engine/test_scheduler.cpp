// The continuous-batching scheduler on the CPU backend with a tiny Llama
// fixture: batched, chunked, preempted and cancelled sequences must produce
// exactly what each would produce alone (greedy), and every KV block must
// come back.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include "engine/backend_cpu.h"
#include "engine/generate.h"
#include "engine/gguf_file.h"
#include "engine/model.h"
#include "engine/scheduler.h"
#include "tests/engine/scheduler_fixture.h"

using namespace voltad;
using voltad::test::fixture;

namespace {

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> token(3, 319);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(token(rng));
  return p;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;  // random weights: do not let an early EOS hide a difference
  return r;
}

// What one sequence produces alone, through generate().
std::string solo_text(const GenerationRequest& r) {
  auto backend = fixture().backend(128, 1);
  GenerateOptions o;
  o.max_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.stop = r.stop;
  // generate() stops at EOS; the fixture prompts are checked to not hit it.
  auto g = generate(*backend, *fixture().tokenizer, r.prompt, o);
  REQUIRE(g.ok());
  return g->text;
}

}  // namespace

// A long prompt is read in chunks; each is reported (voltad-run's progress).
TEST_CASE("generate reports prefill progress chunk by chunk, to the prompt's length") {
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = random_prompt(rng, 70);
  auto backend = fixture().backend(128, 1);
  GenerateOptions o;
  o.max_tokens = 1;
  o.sampling.temperature = 0;
  o.prefill_chunk = 32;
  std::vector<std::pair<size_t, size_t>> calls;
  o.on_prefill = [&](size_t done, size_t total) { calls.push_back({done, total}); };
  REQUIRE(generate(*backend, *fixture().tokenizer, prompt, o).ok());
  const std::vector<std::pair<size_t, size_t>> expected = {{32, 70}, {64, 70}, {70, 70}};
  CHECK(calls == expected);
}

namespace {

struct Collected {
  std::string text;
  std::optional<StreamEvent> last;
};

Collected collect(RequestStream& stream) {
  Collected c;
  for (StreamEvent& e : stream.take()) {
    c.text += e.text;
    if (e.done) c.last = e;
  }
  return c;
}

// Steps until every stream has its final event (or a step limit).
std::vector<Collected> run_to_end(Scheduler& s,
                                  std::vector<std::shared_ptr<RequestStream>>& streams) {
  std::vector<Collected> out(streams.size());
  for (int steps = 0; steps < 10000; ++steps) {
    bool all_done = true;
    for (size_t i = 0; i < streams.size(); ++i) {
      Collected c = collect(*streams[i]);
      out[i].text += c.text;
      if (c.last) out[i].last = c.last;
      all_done = all_done && out[i].last.has_value();
    }
    if (all_done) break;
    s.step();
  }
  return out;
}

}  // namespace

TEST_CASE("a single greedy sequence matches generate()") {
  auto backend = fixture().backend(128, 4);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(1);
  GenerationRequest r = greedy(random_prompt(rng, 20), 12);
  r.ignore_eos = false;
  std::string expect = solo_text(r);
  std::vector<std::shared_ptr<RequestStream>> streams{std::make_shared<RequestStream>()};
  REQUIRE(s.submit(r, streams[0]).ok());
  auto got = run_to_end(s, streams);
  REQUIRE(got[0].last);
  CHECK(got[0].text == expect);
  CHECK(got[0].last->prompt_tokens == 20);
  CHECK(backend->kv_pool().used_blocks() == 0);
}

// A client that asks for the stats as soon as its last event is there
// (the stream's notify, on the engine thread) finds its sequence gone from
// them and its KV blocks free, not counted until the step ends.
TEST_CASE("the stats leave a sequence out before its end reaches the client") {
  auto backend = fixture().backend(128, 4);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(3);
  std::vector<std::shared_ptr<RequestStream>> streams(2);
  std::vector<std::optional<SchedulerStats>> at_end(2);
  for (size_t i = 0; i < 2; ++i) {
    // The consumer takes every event as it comes (notify, on the engine
    // thread), and reads the stats where it sees its end.
    streams[i] = std::make_shared<RequestStream>([&, i] {
      for (const StreamEvent& e : streams[i]->take())
        if (e.done) at_end[i] = s.stats();
    });
    // Different lengths: the first ends while the second runs.
    GenerationRequest r = greedy(random_prompt(rng, 8), int32_t(3 + 6 * i));
    REQUIRE(s.submit(r, streams[i]).ok());
  }
  for (int steps = 0; steps < 1000 && !(at_end[0] && at_end[1]); ++steps) s.step();
  REQUIRE(at_end[0]);
  REQUIRE(at_end[1]);
  CHECK(at_end[0]->running == 1);  // the second sequence alone
  CHECK(at_end[1]->running == 0);
  CHECK(at_end[1]->waiting == 0);
  CHECK(at_end[1]->kv_blocks_used == 0);
}

TEST_CASE("batched, chunked prefill and preemption leave every output unchanged") {
  std::mt19937 rng(7);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(greedy(random_prompt(rng, 5 + 9 * i), 10 + i));
  std::vector<std::string> expect;
  // generate() has no ignore_eos: it may stop earlier, so its text is a prefix.
  for (auto& r : requests) expect.push_back(solo_text(r));

  struct Case {
    const char* name;
    int32_t kv_blocks, max_sequences, max_batch_tokens;
  };
  for (Case c : {Case{"roomy", 0, 3, 2048}, Case{"small batches", 0, 4, 7},
                 Case{"scarce blocks", 9, 6, 64}}) {
    CAPTURE(c.name);
    auto backend = fixture().backend(128, 6, c.kv_blocks);
    SchedulerOptions o;
    o.max_sequences = c.max_sequences;
    o.max_batch_tokens = c.max_batch_tokens;
    Scheduler s(*backend, *fixture().tokenizer, o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (auto& r : requests) {
      streams.push_back(std::make_shared<RequestStream>());
      REQUIRE(s.submit(r, streams.back()).ok());
    }
    auto got = run_to_end(s, streams);
    size_t compared_bytes = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got[i].last);
      CHECK(got[i].last->end == EndReason::Length);
      CHECK(got[i].last->completion_tokens == requests[i].max_tokens);
      CHECK(got[i].text.substr(0, expect[i].size()) == expect[i]);
      compared_bytes += expect[i].size();
    }
    CHECK(compared_bytes > 20);
    CHECK(backend->kv_pool().used_blocks() == 0);
    if (c.kv_blocks) CHECK(s.stats().preemptions > 0);
  }
}

TEST_CASE("a cancelled sequence frees its blocks at the next step; the others go on") {
  auto backend = fixture().backend(128, 4);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(3);
  auto a = std::make_shared<RequestStream>(), b = std::make_shared<RequestStream>();
  REQUIRE(s.submit(greedy(random_prompt(rng, 40), 30), a).ok());
  REQUIRE(s.submit(greedy(random_prompt(rng, 8), 30), b).ok());
  for (int i = 0; i < 3; ++i) s.step();
  int32_t used_both = backend->kv_pool().used_blocks();
  CHECK(used_both >= 4);
  a->cancel();
  s.step();
  CHECK(backend->kv_pool().used_blocks() < used_both);
  CHECK(s.stats().running == 1);
  auto last_a = collect(*a).last;
  REQUIRE(last_a);
  CHECK(last_a->end == EndReason::Cancelled);
  std::vector<std::shared_ptr<RequestStream>> rest{b};
  auto got = run_to_end(s, rest);
  REQUIRE(got[0].last);
  CHECK(got[0].last->end == EndReason::Length);
  CHECK(got[0].last->completion_tokens == 30);
  CHECK(backend->kv_pool().used_blocks() == 0);
}

TEST_CASE("the observer hears of a prompt once it is read, not of one cancelled in the queue") {
  struct Counting : SchedulerObserver {
    std::vector<int32_t> first_token_prompts;
    int finished = 0;
    void on_first_token(double, int32_t prompt_tokens) override {
      first_token_prompts.push_back(prompt_tokens);
    }
    void on_next_token(double) override {}
    void on_finished(const StreamEvent&) override { ++finished; }
  } observer;
  auto backend = fixture().backend(128, 2);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{}, &observer);
  std::mt19937 rng(5);
  auto a = std::make_shared<RequestStream>(), b = std::make_shared<RequestStream>();
  REQUIRE(s.submit(greedy(random_prompt(rng, 11), 6), a).ok());
  REQUIRE(s.submit(greedy(random_prompt(rng, 9), 6), b).ok());
  b->cancel();  // before any step: b never leaves the queue
  std::vector<std::shared_ptr<RequestStream>> both{a, b};
  auto got = run_to_end(s, both);
  REQUIRE(got[1].last);
  CHECK(got[1].last->end == EndReason::Cancelled);
  CHECK(observer.first_token_prompts == std::vector<int32_t>{11});
  CHECK(observer.finished == 2);
}

TEST_CASE("requests beyond the context are refused with the numbers") {
  auto backend = fixture().backend(64, 2);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(5);
  auto r = s.submit(greedy(random_prompt(rng, 50), 20), std::make_shared<RequestStream>());
  CHECK(r.code == SubmitResult::Code::Invalid);
  CHECK(r.message.find("64") != std::string::npos);
  CHECK(r.message.find("50") != std::string::npos);
  CHECK(r.message.find("20") != std::string::npos);
  GenerationRequest bad = greedy(random_prompt(rng, 5), 4);
  bad.prompt[2] = 100000;
  CHECK(s.submit(bad, std::make_shared<RequestStream>()).code == SubmitResult::Code::Invalid);
  bad = greedy(random_prompt(rng, 5), 4);
  bad.sampling.top_p = 3;
  auto sampling = s.submit(bad, std::make_shared<RequestStream>());
  CHECK(sampling.code == SubmitResult::Code::Invalid);
  CHECK(sampling.message.find("top_p") != std::string::npos);
}

TEST_CASE("a stream the consumer does not read pauses its sequence") {
  auto backend = fixture().backend(128, 2);
  SchedulerOptions o;
  o.stream_queue_limit = 4;
  Scheduler s(*backend, *fixture().tokenizer, o);
  std::mt19937 rng(11);
  auto a = std::make_shared<RequestStream>();
  REQUIRE(s.submit(greedy(random_prompt(rng, 6), 40), a).ok());
  for (int i = 0; i < 60; ++i) s.step();
  CHECK(a->pending() <= 4);
  CHECK(s.stats().running == 1);
  CHECK_FALSE(s.step());  // nothing computable until the consumer reads
  std::vector<std::shared_ptr<RequestStream>> streams{a};
  auto got = run_to_end(s, streams);
  REQUIRE(got[0].last);
  CHECK(backend->kv_pool().used_blocks() == 0);
}

TEST_CASE("draining refuses new work; cancel_all ends the rest; run() stops on shutdown") {
  auto backend = fixture().backend(128, 2);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(13);
  int notified = 0;
  auto a = std::make_shared<RequestStream>([&] { ++notified; });
  REQUIRE(s.submit(greedy(random_prompt(rng, 6), 100), a).ok());
  s.step();
  s.stop_admitting();
  CHECK(s.submit(greedy(random_prompt(rng, 6), 4), std::make_shared<RequestStream>()).code ==
        SubmitResult::Code::Draining);
  CHECK_FALSE(s.idle());
  s.cancel_all("shutting down");
  s.step();
  auto last = collect(*a).last;
  REQUIRE(last);
  CHECK(last->end == EndReason::Error);
  CHECK(last->error == "shutting down");
  CHECK(s.idle());
  CHECK(notified >= 1);

  Scheduler t(*backend, *fixture().tokenizer, SchedulerOptions{});
  std::thread engine([&] { t.run(); });
  auto b = std::make_shared<RequestStream>();
  REQUIRE(t.submit(greedy(random_prompt(rng, 6), 5), b).ok());
  Collected got;
  for (int i = 0; i < 2000 && !got.last; ++i) {
    auto c = collect(*b);
    got.text += c.text;
    if (c.last) got.last = c.last;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  t.shutdown();
  engine.join();
  REQUIRE(got.last);
  CHECK(got.last->completion_tokens == 5);
  CHECK(backend->kv_pool().used_blocks() == 0);
}

TEST_CASE("the queue's limit refuses as busy, and a new limit applies to the next submit") {
  auto backend = fixture().backend(128, 1);
  SchedulerOptions o;
  o.max_waiting = 2;
  Scheduler s(*backend, *fixture().tokenizer, o);  // no step: everything stays queued
  std::mt19937 rng(17);
  auto submit = [&] {
    return s.submit(greedy(random_prompt(rng, 4), 2), std::make_shared<RequestStream>()).code;
  };
  CHECK(submit() == SubmitResult::Code::Accepted);
  CHECK(submit() == SubmitResult::Code::Accepted);
  CHECK(submit() == SubmitResult::Code::Busy);
  s.set_max_waiting(4);  // a reload raised server.max_connections
  CHECK(submit() == SubmitResult::Code::Accepted);
  CHECK(submit() == SubmitResult::Code::Accepted);
  CHECK(submit() == SubmitResult::Code::Busy);
  s.set_max_waiting(1);  // lowered: the queued stay, new ones wait for room
  CHECK(submit() == SubmitResult::Code::Busy);
  s.cancel_all("done");
  s.step();
  CHECK(s.idle());
}

TEST_CASE("resume_admitting undoes a drain; an idle run() still beats its heartbeat") {
  auto backend = fixture().backend(128, 2);
  SchedulerOptions o;
  o.heartbeat_interval = std::chrono::milliseconds(20);
  Scheduler s(*backend, *fixture().tokenizer, o);
  std::mt19937 rng(17);
  s.stop_admitting();
  CHECK(s.submit(greedy(random_prompt(rng, 4), 2), std::make_shared<RequestStream>()).code ==
        SubmitResult::Code::Draining);
  s.resume_admitting();
  CHECK(s.stats().admitting);
  CHECK(s.submit(greedy(random_prompt(rng, 4), 2), std::make_shared<RequestStream>()).ok());
  s.cancel_all("done");

  CHECK(s.last_heartbeat() == std::chrono::steady_clock::time_point{});  // not running yet
  std::thread engine([&] { s.run(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // idle once the cancel is taken
  auto first = s.last_heartbeat();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto second = s.last_heartbeat();
  s.shutdown();
  engine.join();
  CHECK(first != std::chrono::steady_clock::time_point{});
  CHECK(second > first);  // idle, yet the loop went round
  CHECK(std::chrono::steady_clock::now() - second < std::chrono::milliseconds(500));
}

namespace {
// A backend that works for `good_steps` steps, then fails every step and
// reports itself unusable (as a GPU whose context a kernel fault broke).
class BreakingBackend final : public Backend {
 public:
  BreakingBackend(Backend& inner, int good_steps) : inner_(inner), left_(good_steps) {}
  std::string name() const override { return "breaking"; }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override {
    if (left_-- > 0) return inner_.forward(chunks, out);
    return make_error("cudaErrorIllegalAddress: an illegal memory access was encountered");
  }
  KvBlockPool& kv_pool() override { return inner_.kv_pool(); }
  std::string unusable_reason() const override { return left_ < 0 ? "the device faulted" : ""; }

 private:
  Backend& inner_;
  int left_;
};
}  // namespace

TEST_CASE("an unusable backend stops the engine: every request fails with the reason") {
  auto inner = fixture().backend(128, 4);
  BreakingBackend backend(*inner, 3);
  Scheduler s(backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(17);
  auto running = std::make_shared<RequestStream>();
  REQUIRE(s.submit(greedy(random_prompt(rng, 6), 50), running).ok());
  std::thread engine([&] { s.run(); });  // returns by itself once the backend breaks
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto queued = std::make_shared<RequestStream>();
  SubmitResult late = s.submit(greedy(random_prompt(rng, 6), 5), queued);  // before or after the break
  engine.join();
  SubmitResult after = s.submit(greedy(random_prompt(rng, 6), 5), std::make_shared<RequestStream>());
  CHECK(after.code == SubmitResult::Code::Draining);
  CHECK(after.message == "the engine stopped: the device faulted");
  CHECK(s.fatal_error() == "the device faulted");
  auto first = collect(*running).last;
  REQUIRE(first);
  CHECK(first->end == EndReason::Error);
  CHECK(first->error.find("cudaErrorIllegalAddress") != std::string::npos);
  if (late.ok()) {  // accepted before the break: ended with the error, not left waiting
    auto second = collect(*queued).last;
    REQUIRE(second);
    CHECK(second->end == EndReason::Error);
  }
  CHECK(inner->kv_pool().used_blocks() == 0);
}

namespace {
// A backend that takes `per_token` for every token of a step and records
// each step's tokens and the scheduler's stats during it.
class SlowBackend final : public Backend {
 public:
  SlowBackend(Backend& inner, std::chrono::milliseconds per_token)
      : inner_(inner), per_token_(per_token) {}
  std::string name() const override { return "slow"; }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override {
    int64_t n = 0;
    for (const BatchChunk& c : chunks) n += int64_t(c.tokens.size());
    steps.push_back(n);
    if (scheduler) stats_during.push_back(scheduler->stats());
    std::this_thread::sleep_for(per_token_ * n);
    return inner_.forward(chunks, out);
  }
  KvBlockPool& kv_pool() override { return inner_.kv_pool(); }

  std::vector<int64_t> steps;
  std::vector<SchedulerStats> stats_during;
  const Scheduler* scheduler = nullptr;

 private:
  Backend& inner_;
  std::chrono::milliseconds per_token_;
};
}  // namespace

// On a slow backend (the CPU) a long prompt read in one step froze every
// other stream and the watchdog's heartbeat for minutes.
TEST_CASE("a step time target reads a long prompt in chunks of about that long") {
  auto inner = fixture().backend(128, 2);
  SlowBackend backend(*inner, std::chrono::milliseconds(2));
  SchedulerOptions o;
  o.step_time_target = std::chrono::milliseconds(100);  // about 50 tokens at 2 ms
  Scheduler s(backend, *fixture().tokenizer, o);
  backend.scheduler = &s;
  std::mt19937 rng(23);
  const GenerationRequest r = greedy(random_prompt(rng, 120), 3);
  std::vector<std::shared_ptr<RequestStream>> streams = {std::make_shared<RequestStream>()};
  REQUIRE(s.submit(r, streams[0]).ok());
  auto out = run_to_end(s, streams);
  REQUIRE(out[0].last);
  CHECK(out[0].text == solo_text(r));  // chunks change nothing in the answer
  REQUIRE(backend.steps.size() >= 3);
  CHECK(backend.steps[0] == kMinPrefillChunk);  // the first measures
  // Then about 50 (fewer on a loaded machine; never below the floor), not
  // the 104 left: the prompt takes several steps.
  CHECK(backend.steps[1] >= kMinPrefillChunk);
  CHECK(backend.steps[1] <= 60);
  CHECK(std::count(backend.steps.begin(), backend.steps.end(), 1) == 2);  // then the decodes
  // While its prompt is read the request counts as running, not waiting.
  CHECK(backend.stats_during[0].running == 1);
  CHECK(backend.stats_during[0].waiting == 0);
}

TEST_CASE("without a step time target a prompt is read in one step") {
  auto inner = fixture().backend(128, 2);
  SlowBackend backend(*inner, std::chrono::milliseconds(0));
  Scheduler s(backend, *fixture().tokenizer, SchedulerOptions{});
  std::mt19937 rng(23);
  std::vector<std::shared_ptr<RequestStream>> streams = {std::make_shared<RequestStream>()};
  REQUIRE(s.submit(greedy(random_prompt(rng, 120), 2), streams[0]).ok());
  run_to_end(s, streams);
  REQUIRE_FALSE(backend.steps.empty());
  CHECK(backend.steps[0] == 120);
}
