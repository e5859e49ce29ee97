// Log-probabilities of generated tokens (engine/logprobs.h) and how the
// scheduler hands them out (StreamEvent::logprobs): one per token whose
// text reaches the client, in order, from the model's own distribution.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string_view>

#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "engine/utf8.h"
#include "tests/engine/scheduler_fixture.h"

using namespace voltad;
using voltad::test::fixture;

TEST_CASE("token_logprob: the log-softmax of the row, the likeliest first, ties to the lower id") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(5000);
  for (float& l : logits) l = normal(rng) + 30.0f;  // large values: the max must be taken out
  logits[17] = logits[4000] = 80.0f;                // a tie at the top
  double z = 0;
  for (float l : logits) z += std::exp(double(l) - 80.0);
  const double log_z = 80.0 + std::log(z);

  const TokenLogprob t = token_logprob(logits, 123, 5);
  CHECK(t.token == 123);
  CHECK(t.logprob == doctest::Approx(double(logits[123]) - log_z).epsilon(1e-5));
  REQUIRE(t.top.size() == 5);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  CHECK(t.top[0].first == 17);
  CHECK(t.top[1].first == 4000);
  for (size_t i = 0; i < 5; ++i) {
    CHECK(t.top[i].first == order[i]);
    CHECK(t.top[i].second ==
          doctest::Approx(double(logits[size_t(order[i])]) - log_z).epsilon(1e-5));
  }
  // The probabilities of the whole row add up to 1.
  double total = 0;
  for (int32_t id = 0; id < int32_t(logits.size()); ++id)
    total += std::exp(double(token_logprob(logits, id, 0).logprob));
  CHECK(total == doctest::Approx(1.0).epsilon(1e-4));
  CHECK(token_logprob(logits, 0, 0).top.empty());
  CHECK(token_logprob(logits, 0, kMaxTopLogprobs).top.size() == size_t(kMaxTopLogprobs));
}

namespace {

struct Run {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<size_t> listed_at;  // for each of logprobs, the answer's bytes when it came
  std::optional<StreamEvent> last;
};

// Submits one request and steps until its last event: what it streamed.
Run submit_and_run(Scheduler& s, const GenerationRequest& r) {
  auto stream = std::make_shared<RequestStream>();
  const SubmitResult submitted = s.submit(r, stream);
  REQUIRE_MESSAGE(submitted.ok(), submitted.message);
  Run out;
  for (int steps = 0; steps < 1000 && !out.last; ++steps) {
    s.step();
    for (StreamEvent& e : stream->take()) {
      out.text += e.text;
      out.logprobs.insert(out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      out.listed_at.resize(out.logprobs.size(), out.text.size());
      if (e.done) out.last = e;
    }
  }
  REQUIRE(out.last);
  return out;
}

Run run_one(const GenerationRequest& r) {
  auto backend = fixture().backend(128, 1);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  return submit_and_run(s, r);
}

GenerationRequest request(int32_t max_tokens, int32_t logprobs) {
  GenerationRequest r;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(3, 319);
  for (int i = 0; i < 12; ++i) r.prompt.push_back(token(rng));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.logprobs = logprobs;
  return r;
}

// Characters (code points): text_offset's unit.
int64_t chars(std::string_view text) {
  return int64_t(utf8_length(text));
}

// The text the tokens decode to, as the stream decoder writes it.
std::string decoded(const std::vector<TokenLogprob>& logprobs) {
  StreamDecoder d(*fixture().tokenizer);
  std::string text;
  for (const TokenLogprob& t : logprobs) text += d.push(t.token);
  return text + d.flush();
}

}  // namespace

TEST_CASE("the scheduler reports every generated token once, in order, as its text") {
  const Run run = run_one(request(16, 3));
  REQUIRE(run.logprobs.size() == 16);
  CHECK(run.last->completion_tokens == 16);
  CHECK(decoded(run.logprobs) == run.text);
  for (const TokenLogprob& t : run.logprobs) {
    REQUIRE(t.top.size() == 3);
    // Greedy picks the likeliest token: the first of the top ones.
    CHECK(t.token == t.top[0].first);
    CHECK(t.logprob == t.top[0].second);
    CHECK(t.logprob <= 0.0f);
    CHECK(t.top[1].second <= t.top[0].second);
  }
  // Offsets: where each token's text starts, rising to the text's length.
  CHECK(run.logprobs[0].text_offset == 0);
  for (size_t i = 1; i < run.logprobs.size(); ++i)
    CHECK(run.logprobs[i].text_offset >= run.logprobs[i - 1].text_offset);
  CHECK(run.logprobs.back().text_offset <= chars(run.text));
  // Without logprobs asked for, none come.
  CHECK(run_one(request(16, -1)).logprobs.empty());
}

TEST_CASE("a stop string: the tokens whose text the client sees, and no more") {
  const Run full = run_one(request(24, 0));
  REQUIRE(full.text.size() >= 12);
  // Stop strings from along the text (some inside a character's bytes, some
  // at U+FFFD): the answer ends before the first, and the tokens reported
  // are those whose text starts before that end.
  for (size_t at = 1; at + 2 < full.text.size(); at += 2) {
    const std::string stop = full.text.substr(at, 2);
    CAPTURE(at);
    GenerationRequest r = request(24, 0);
    r.stop = {stop};
    const Run cut = run_one(r);
    REQUIRE(cut.text.size() <= at);
    CHECK(full.text.rfind(cut.text, 0) == 0);
    size_t expected = 0;
    while (expected < full.logprobs.size() && full.logprobs[expected].text_offset < chars(cut.text))
      ++expected;
    REQUIRE(cut.logprobs.size() == expected);
    for (size_t i = 0; i < expected; ++i) {
      CHECK(cut.logprobs[i].token == full.logprobs[i].token);
      CHECK(cut.logprobs[i].text_offset == full.logprobs[i].text_offset);
    }
  }
}

// The log-probabilities are the model's, not the sampler's: a bias that
// forces a token does not make it certain in them.
TEST_CASE("logit_bias steers the choice, not the reported log-probabilities") {
  const Run plain = run_one(request(6, 1));
  const int32_t forced = 42;
  GenerationRequest r = request(6, 1);
  r.sampling.logit_bias = {{forced, 100.0f}};
  const Run biased = run_one(r);
  REQUIRE(biased.logprobs.size() == 6);
  for (const TokenLogprob& t : biased.logprobs) CHECK(t.token == forced);
  // At the first step both runs saw the same row: its top token and the
  // forced one's log-probability as the model gave them.
  CHECK(biased.logprobs[0].top[0].first == plain.logprobs[0].top[0].first);
  CHECK(biased.logprobs[0].top[0].second ==
        doctest::Approx(plain.logprobs[0].top[0].second).epsilon(1e-5));
  CHECK(biased.logprobs[0].logprob < -0.01f);
}

TEST_CASE("candidate_logprob: the same as token_logprob from the best ids and the normalizer") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(3000);
  for (float& l : row) l = std::round(normal(rng) * 4.0f) / 4.0f;  // ties among the best
  ForwardOutput out;
  select_candidates(row, 1, int64_t(row.size()), 32, true, out);
  REQUIRE(out.candidate_log_z.size() == 1);
  CHECK(double(out.candidate_log_z[0]) == doctest::Approx(row_log_normalizer(row)).epsilon(1e-6));
  const auto ids = out.candidate_row_ids(0);
  for (int32_t top_n : {0, 1, 7, kMaxTopLogprobs})
    for (size_t pick : {size_t(0), size_t(5), size_t(31)}) {
      CAPTURE(top_n);
      CAPTURE(pick);
      const TokenLogprob a = token_logprob(row, ids[pick], top_n);
      const TokenLogprob b = candidate_logprob(ids, out.candidate_row_logits(0),
                                               out.candidate_log_z[0], ids[pick], top_n);
      CHECK(b.token == a.token);
      CHECK(b.logprob == doctest::Approx(a.logprob).epsilon(1e-5));
      REQUIRE(b.top.size() == a.top.size());
      for (size_t i = 0; i < a.top.size(); ++i) {
        CHECK(b.top[i].first == a.top[i].first);
        CHECK(b.top[i].second == doctest::Approx(a.top[i].second).epsilon(1e-5));
      }
    }
  // A row of -inf only has no finite normalizer; the kernel says the same.
  const std::vector<float> none(4, -INFINITY);
  CHECK(row_log_normalizer(none) == -INFINITY);
}

TEST_CASE("a backend gives a row's normalizer with its candidates, and only with them") {
  auto backend = fixture().backend(128, 1);
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  REQUIRE(backend->kv_pool().reserve(0, int64_t(prompt.size())));
  std::vector<BatchChunk> chunks(1);
  chunks[0].tokens = prompt;
  ForwardOutput whole, best;
  REQUIRE(backend->forward(chunks, whole).ok());
  REQUIRE(whole.n_rows == 1);
  chunks[0].log_z = true;
  const Status refused = backend->forward(chunks, best);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("log_z") != std::string::npos);
  chunks[0].top_k = 4;
  REQUIRE(backend->forward(chunks, best).ok());
  REQUIRE(best.candidate_log_z.size() == 1);
  CHECK(double(best.candidate_log_z[0]) ==
        doctest::Approx(row_log_normalizer(whole.row(0))).epsilon(1e-6));
}

namespace {

// The fixture's model, with the chunks of each step written down.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return "recording"; }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override {
    seen.insert(seen.end(), chunks.begin(), chunks.end());
    return inner_.forward(chunks, out);
  }
  KvBlockPool& kv_pool() override { return inner_.kv_pool(); }
  std::vector<BatchChunk> seen;

 private:
  Backend& inner_;
};

Run run_recorded(const GenerationRequest& r, std::vector<BatchChunk>& seen) {
  auto backend = fixture().backend(128, 1);
  RecordingBackend recording(*backend);
  Scheduler s(recording, *fixture().tokenizer, SchedulerOptions{});
  Run run = submit_and_run(s, r);
  seen = std::move(recording.seen);
  return run;
}

}  // namespace

// Greedy and top_k sampling choose among a row's best few: a request with
// logprobs then asks for those (at least as many as it lists) and the row's
// normalizer, not the whole row across PCIe. A logit_bias needs the row: the
// same answer and log-probabilities the other way.
TEST_CASE("logprobs come from the candidates and the normalizer where the sampler allows") {
  for (int32_t top_k : {0, 3, 30}) {
    CAPTURE(top_k);
    GenerationRequest r = request(8, 5);
    if (top_k > 0) r.sampling.temperature = 0.8f, r.sampling.top_k = top_k, r.sampling.seed = 9;
    std::vector<BatchChunk> seen;
    const Run fast = run_recorded(r, seen);
    REQUIRE_FALSE(seen.empty());
    for (const BatchChunk& c : seen)
      if (c.logits == BatchChunk::Logits::Last) {
        CHECK(c.top_k == std::max(top_k, 5));
        CHECK(c.log_z);
      }
    r.sampling.logit_bias = {{3, 0.0f}};
    const Run whole = run_recorded(r, seen);
    for (const BatchChunk& c : seen) CHECK(c.top_k == 0);
    CHECK(whole.text == fast.text);
    REQUIRE(whole.logprobs.size() == fast.logprobs.size());
    for (size_t i = 0; i < fast.logprobs.size(); ++i) {
      CHECK(fast.logprobs[i].token == whole.logprobs[i].token);
      CHECK(fast.logprobs[i].logprob == doctest::Approx(whole.logprobs[i].logprob).epsilon(1e-5));
      REQUIRE(fast.logprobs[i].top.size() == 5);
      for (size_t j = 0; j < 5; ++j) {
        CHECK(fast.logprobs[i].top[j].first == whole.logprobs[i].top[j].first);
        CHECK(fast.logprobs[i].top[j].second ==
              doctest::Approx(whole.logprobs[i].top[j].second).epsilon(1e-5));
      }
    }
  }
}

// A request at a temperature alone (OpenAI's default) is drawn by noise: the
// backend ranks its row by the Gumbel keys of its seed and draw
// (BatchChunk::noise) and sends one candidate, the token, with its logit and
// the row's normalizer for its logprob. With a top_logprobs list the best
// logits are needed: whole rows, drawn on the host by the same keys, so
// the same tokens.
TEST_CASE("a request at a temperature alone is drawn by noise: one candidate, whole rows' tokens") {
  std::vector<Run> runs;
  for (int32_t listed : {-1, 0, 3}) {
    CAPTURE(listed);
    GenerationRequest r = request(10, listed);
    r.sampling.temperature = 1.5f;
    r.sampling.seed = 21;
    std::vector<BatchChunk> seen;
    runs.push_back(run_recorded(r, seen));
    uint64_t draw = 0;
    for (const BatchChunk& c : seen) {
      if (c.logits != BatchChunk::Logits::Last) continue;
      CHECK(c.top_k == (listed > 0 ? 0 : 1));
      CHECK(c.log_z == (listed == 0));
      CHECK(c.noise.on == (listed > 0 ? 0u : 1u));
      if (!c.noise.on) continue;
      CHECK(c.noise.seed == 21);
      CHECK(c.noise.draw == draw++);
      CHECK(c.noise.temperature == 1.5f);
    }
  }
  CHECK(runs[0].text == runs[1].text);
  CHECK(runs[1].text == runs[2].text);
  REQUIRE(runs[1].logprobs.size() == 10);
  REQUIRE(runs[2].logprobs.size() == 10);
  for (size_t i = 0; i < 10; ++i) {
    CHECK(runs[1].logprobs[i].token == runs[2].logprobs[i].token);
    CHECK(runs[1].logprobs[i].logprob ==
          doctest::Approx(runs[2].logprobs[i].logprob).epsilon(1e-5));
  }
  // It samples: another seed, another text.
  GenerationRequest other = request(10, -1);
  other.sampling.temperature = 1.5f;
  other.sampling.seed = 22;
  std::vector<BatchChunk> seen;
  CHECK(run_recorded(other, seen).text != runs[0].text);
}

TEST_CASE("logprobs beyond the limit are refused") {
  auto backend = fixture().backend(128, 1);
  Scheduler s(*backend, *fixture().tokenizer, SchedulerOptions{});
  CHECK(s.check(request(4, kMaxTopLogprobs)).ok());
  const SubmitResult over = s.check(request(4, kMaxTopLogprobs + 1));
  CHECK_FALSE(over.ok());
  CHECK(over.message.find("logprobs") != std::string::npos);
  CHECK_FALSE(s.check(request(4, -2)).ok());
}

namespace {

// A model that says a script: each step's row is one-hot on the script's
// next token (-1 past its end: the last again), so partial characters,
// markers and stop strings can be placed exactly.
class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(std::vector<int32_t> script, int32_t n_prompt)
      : script_(std::move(script)), n_prompt_(n_prompt), pool_(64, 128) {}
  std::string name() const override { return "scripted"; }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override {
    const int64_t vocab = int64_t(fixture().tokenizer->vocab_size());
    std::vector<float> rows;
    for (const BatchChunk& c : chunks) {
      if (c.logits != BatchChunk::Logits::Last) continue;
      const size_t made = size_t(c.start_pos + int32_t(c.tokens.size()) - n_prompt_);
      const int32_t next = script_[std::min(made, script_.size() - 1)];
      for (int64_t id = 0; id < vocab; ++id) rows.push_back(id == next ? 10.0f : 0.0f);
    }
    set_output_rows(chunks, std::move(rows), vocab, out);
    return {};
  }
  KvBlockPool& kv_pool() override { return pool_; }

 private:
  std::vector<int32_t> script_;
  int32_t n_prompt_;
  KvBlockPool pool_;
};

Run run_script(std::vector<int32_t> script, std::vector<std::string> stop, bool ignore_eos = false,
               int32_t max_tokens = 12) {
  ScriptedBackend backend(std::move(script), 4);
  Scheduler s(backend, *fixture().tokenizer, SchedulerOptions{});
  GenerationRequest r;
  r.prompt = {5, 6, 7, 8};
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.stop = std::move(stop);
  r.ignore_eos = ignore_eos;
  r.logprobs = 1;
  return submit_and_run(s, r);
}

int32_t token_of(std::string_view piece) {
  const Tokenizer& t = *fixture().tokenizer;
  for (int32_t id = 0; id < int32_t(t.vocab_size()); ++id)
    if (t.token_piece(id) == piece && !t.is_marker(id)) return id;
  FAIL("no token for the piece");
  return -1;
}

// A control token that does not end generation (<|im_start|>).
int32_t a_control_token() {
  const Tokenizer& t = *fixture().tokenizer;
  for (int32_t id = 0; id < int32_t(t.vocab_size()); ++id)
    if (t.is_marker(id) && !t.is_end_of_generation(id)) return id;
  FAIL("no control token");
  return -1;
}

std::vector<int32_t> tokens_of(const Run& run) {
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : run.logprobs) ids.push_back(t.token);
  return ids;
}

}  // namespace

// A character started and never finished becomes U+FFFD before the next
// token's text: that token's offset is after it, so a stop string at that
// token takes it out (and only it).
TEST_CASE("a cut character: offsets after its U+FFFD, and a stop string there") {
  const int32_t h = token_of("H"), cut = token_of("\xe2"), in = token_of("in");
  const Run full = run_script({h, cut, in, h}, {});
  CHECK(full.text.substr(0, 7) == "H\xef\xbf\xbdinH");
  REQUIRE(full.logprobs.size() >= 4);
  CHECK(full.logprobs[0].text_offset == 0);
  CHECK(full.logprobs[1].text_offset == 1);  // the U+FFFD: the cut character's
  CHECK(full.logprobs[2].text_offset == 2);  // "in", after it (characters)
  CHECK(full.logprobs[3].text_offset == 4);
  const Run stopped = run_script({h, cut, in, h}, {"in"});
  CHECK(stopped.text == "H\xef\xbf\xbd");
  CHECK(tokens_of(stopped) == std::vector<int32_t>{h, cut});
}

// Cut characters in a row: each token is listed with its own U+FFFD, when
// the next character's start cuts it, not held until the answer ends (a
// finished token's text once looked held when it ended where the next,
// held character starts).
TEST_CASE("cut characters in a row: each token listed with its U+FFFD") {
  const int32_t h = token_of("H"), cut = token_of("\xe2");
  const Run run = run_script({cut, cut, cut, h, h}, {}, false, 5);
  CHECK(run.text == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdHH");
  REQUIRE(tokens_of(run) == std::vector<int32_t>{cut, cut, cut, h, h});
  // The third U+FFFD comes with the first H's text, in one event.
  CHECK(run.listed_at == std::vector<size_t>{3, 6, 10, 10, 11});
  for (int i = 0; i < 5; ++i) CHECK(run.logprobs[size_t(i)].text_offset == i);
}

// A character finished by the next token is shared: both start where it does.
TEST_CASE("a character split over two tokens: both start at it") {
  const int32_t h = token_of("H");
  const int32_t e2 = token_of("\xe2"), x82 = token_of("\x82"), xac = token_of("\xac");
  const Run run = run_script({h, e2, x82, xac, h}, {});
  CHECK(run.text.substr(0, 5) == "H\xe2\x82\xacH");  // H, the euro sign, H
  REQUIRE(run.logprobs.size() >= 5);
  for (int i = 1; i <= 3; ++i) CHECK(run.logprobs[size_t(i)].text_offset == 1);
  CHECK(run.logprobs[4].text_offset == 2);
  // A stop string at the euro sign: no token of it is listed.
  const Run stopped = run_script({h, e2, x82, xac, h}, {"\xe2\x82\xac"});
  CHECK(stopped.text == "H");
  CHECK(tokens_of(stopped) == std::vector<int32_t>{h});
}

// The stop at a control token releases a cut character's U+FFFD first;
// the control token itself is not listed.
TEST_CASE("a stop at a control token after a cut character") {
  const Tokenizer& t = *fixture().tokenizer;
  const int32_t marker = a_control_token();
  const int32_t h = token_of("H"), cut = token_of("\xe2");
  const Run run = run_script({h, cut, marker, h}, {t.token_piece(marker)});
  CHECK(run.text == "H\xef\xbf\xbd");
  CHECK(tokens_of(run) == std::vector<int32_t>{h, cut});
}

// The end-of-sequence token ends the answer and is not listed; every token
// before it is, once.
TEST_CASE("an answer that ends at the end-of-sequence token") {
  const Tokenizer& t = *fixture().tokenizer;
  const int32_t h = token_of("H"), in = token_of("in");
  const Run run = run_script({h, in, h, t.eos()}, {});
  CHECK(run.text == "HinH");
  CHECK(run.last->end == EndReason::Stop);
  CHECK(run.last->completion_tokens == 3);
  CHECK(tokens_of(run) == std::vector<int32_t>{h, in, h});
}

// While the stop filter holds a character's start, the tokens that made
// it are not listed: the stop string that then matches takes them too.
TEST_CASE("a held character: its tokens wait for it, and a stop string takes them") {
  const int32_t a = token_of("a"), b = token_of("b"), c = token_of("c");
  const int32_t c3 = token_of("\xc3"), a9 = token_of("\xa9");
  const int32_t e2 = token_of("\xe2"), x82 = token_of("\x82"), xac = token_of("\xac");
  Run run = run_script({a, c3, a9, b}, {"\xc3\xa9"
                                        "b"});  // "éb"
  CHECK(run.text == "a");
  CHECK(tokens_of(run) == std::vector<int32_t>{a});
  run = run_script({a, e2, x82, xac, b}, {"\xe2\x82\xac"
                                          "b"});  // "€b"
  CHECK(run.text == "a");
  CHECK(tokens_of(run) == std::vector<int32_t>{a});
  run = run_script({a, e2, b, c}, {"\xef\xbf\xbd"
                                   "bc"});  // U+FFFD, "bc"
  CHECK(run.text == "a");
  CHECK(tokens_of(run) == std::vector<int32_t>{a});
}

// A control token that decodes to nothing takes nothing from the token
// before it (which revealed a cut character's U+FFFD).
TEST_CASE("a control token after a cut character keeps its place") {
  const int32_t marker = a_control_token();
  const int32_t a = token_of("a"), e2 = token_of("\xe2"), b = token_of("b"), c = token_of("c"),
                d = token_of("d");
  const Run run = run_script({a, e2, b, marker, c, d}, {"bcx", "d"});
  CHECK(run.text ==
        "a\xef\xbf\xbd"
        "bc");
  CHECK(tokens_of(run) == std::vector<int32_t>{a, e2, b, marker, c});
}

// max_tokens ends inside a character; its U+FFFD completes a stop string:
// the answer ends there, for the stop string (not the length).
TEST_CASE("a stop string matched by the last, cut character ends for stop") {
  const int32_t a = token_of("a"), e2 = token_of("\xe2");
  const Run run = run_script({a, e2}, {"\xef\xbf\xbd"}, false, 2);
  CHECK(run.text == "a");
  CHECK(run.last->end == EndReason::Stop);
  CHECK(tokens_of(run) == std::vector<int32_t>{a});
}

namespace {

// Several requests in one scheduler (one batch a step): each one's run.
std::vector<Run> run_batch(const std::vector<GenerationRequest>& requests,
                           SchedulerOptions options) {
  auto backend = fixture().backend(128, int32_t(requests.size()));
  options.max_sequences = int32_t(requests.size());
  Scheduler s(*backend, *fixture().tokenizer, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& r : requests) {
    streams.push_back(std::make_shared<RequestStream>());
    const SubmitResult submitted = s.submit(r, streams.back());
    REQUIRE_MESSAGE(submitted.ok(), submitted.message);
  }
  std::vector<Run> runs(requests.size());
  bool all = false;
  for (int steps = 0; steps < 1000 && !all; ++steps) {
    s.step();
    all = true;
    for (size_t i = 0; i < requests.size(); ++i) {
      for (StreamEvent& e : streams[i]->take()) {
        runs[i].text += e.text;
        runs[i].logprobs.insert(runs[i].logprobs.end(), e.logprobs.begin(), e.logprobs.end());
        if (e.done) runs[i].last = e;
      }
      all = all && runs[i].last;
    }
  }
  REQUIRE(all);
  return runs;
}

void check_same(const Run& a, const Run& b) {
  CHECK(a.text == b.text);
  REQUIRE(a.logprobs.size() == b.logprobs.size());
  for (size_t j = 0; j < a.logprobs.size(); ++j) {
    CHECK(a.logprobs[j].token == b.logprobs[j].token);
    CHECK(a.logprobs[j].logprob == doctest::Approx(b.logprobs[j].logprob).epsilon(1e-5));
    REQUIRE(a.logprobs[j].top.size() == b.logprobs[j].top.size());
    for (size_t t = 0; t < a.logprobs[j].top.size(); ++t)
      CHECK(a.logprobs[j].top[t].first == b.logprobs[j].top[t].first);
  }
}

}  // namespace

// One step's rows each chosen their own way: greedy with logprobs and top-k
// sampling (candidates, some with the normalizer), temperature alone and a
// logit_bias (whole rows, drawn on several threads when there are several).
// Each request answers as it does alone, whatever the threads; top_logprobs
// 20 with top_k 3 lists 20.
TEST_CASE("a batch of requests sampled in different ways: each as alone, on 1 or 4 threads") {
  std::vector<GenerationRequest> rs(6, request(6, -1));
  rs[0].logprobs = 3;  // greedy
  rs[1].sampling.temperature = 0.8f, rs[1].sampling.top_k = 10, rs[1].sampling.seed = 4;
  rs[2].logprobs = 2, rs[2].sampling.logit_bias = {{3, 0.0f}};
  rs[3].logprobs = 20, rs[3].sampling.temperature = 1.0f, rs[3].sampling.top_k = 3;
  rs[3].sampling.seed = 5;
  rs[4].logprobs = 1, rs[4].sampling.temperature = 1.0f, rs[4].sampling.seed = 6;
  rs[5].sampling.temperature = 1.2f, rs[5].sampling.top_p = 0.9f, rs[5].sampling.seed = 7;
  for (size_t i = 0; i < rs.size(); ++i) rs[i].prompt[i] = int32_t(40 + i);  // six prompts
  SchedulerOptions serial, parallel;
  serial.row_draw_threads = 1;
  parallel.row_draw_threads = 4;
  const std::vector<Run> one = run_batch(rs, serial), four = run_batch(rs, parallel);
  for (size_t i = 0; i < rs.size(); ++i) {
    CAPTURE(i);
    check_same(one[i], four[i]);
    check_same(one[i], run_one(rs[i]));
    if (rs[i].logprobs >= 0) {
      REQUIRE_FALSE(one[i].logprobs.empty());
      CHECK(one[i].logprobs[0].top.size() == size_t(rs[i].logprobs));
    }
  }
}

// A model whose vocabulary is smaller than top_logprobs: the whole
// vocabulary listed, from candidates as from the row (no read past it).
TEST_CASE("top_logprobs beyond a tiny vocabulary lists the vocabulary") {
  std::vector<float> row = {0.5f, 2.0f, -1.0f, 2.0f, 0.0f, 1.0f};
  ForwardOutput out;
  select_candidates(row, 1, int64_t(row.size()), 20, true, out);
  REQUIRE(out.candidate_k == 6);
  const TokenLogprob t = candidate_logprob(out.candidate_row_ids(0), out.candidate_row_logits(0),
                                           out.candidate_log_z[0], 1, kMaxTopLogprobs);
  const TokenLogprob whole = token_logprob(row, 1, kMaxTopLogprobs);
  REQUIRE(t.top.size() == 6);
  REQUIRE(whole.top.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(t.top[i].first == whole.top[i].first);
    CHECK(t.top[i].second == doctest::Approx(whole.top[i].second).epsilon(1e-6));
  }
}
