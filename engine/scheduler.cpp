#include "engine/scheduler.h"

#include <algorithm>

#include "engine/generate.h"
#include "engine/row_draws.h"
#include "engine/stop_strings.h"
#include "engine/utf8.h"

namespace voltad {

using Clock = std::chrono::steady_clock;

namespace {
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

struct Scheduler::Sequence {
  Sequence(GenerationRequest r, std::shared_ptr<RequestStream> st, const Tokenizer& tokenizer,
           uint64_t ord)
      : order(ord),
        stream(std::move(st)),
        tokens(r.prompt),
        n_prompt(int32_t(r.prompt.size())),
        sampler(r.sampling),
        decoder(tokenizer),
        stops(r.stop),
        request(std::move(r)),
        submitted(Clock::now()) {}

  uint64_t order;       // submission order: the newest has the largest
  int32_t seq_id = -1;  // KV slot while it holds blocks; -1 while waiting
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt;
  int64_t n_cached = 0;  // leading tokens whose keys and values are in the cache
  Sampler sampler;
  StreamDecoder decoder;
  StopStringFilter stops;
  GenerationRequest request;
  Clock::time_point submitted, last_token;
  bool finished = false;
  // With request.logprobs: tokens whose text is not all released yet; the
  // answer's bytes released, and decoded (released, or held by the stop
  // filter), and its characters decoded.
  struct HeldLogprob {
    int64_t start, end;  // the token's text in the answer, in bytes
    TokenLogprob logprob;
    bool in_char = false;  // some of its bytes are in the character the decoder holds
  };
  std::deque<HeldLogprob> held_logprobs;
  int64_t text_released = 0, text_made = 0, chars_made = 0;

  int32_t generated() const { return int32_t(tokens.size()) - n_prompt; }
  int64_t uncached() const { return int64_t(tokens.size()) - n_cached; }
};

Scheduler::Scheduler(Backend& backend, const Tokenizer& tokenizer, SchedulerOptions options,
                     SchedulerObserver* observer)
    : backend_(backend),
      pool_(backend.kv_pool()),
      tokenizer_(tokenizer),
      options_(options),
      observer_(observer),
      max_context_(pool_.max_seq_tokens()),
      pool_blocks_(pool_.n_blocks()),
      row_draw_threads_(options.row_draw_threads > 0 ? options.row_draw_threads
                                                     : voltad::row_draw_threads()) {
  VOLTAD_CHECK(options_.max_sequences > 0 && options_.max_batch_tokens > 0 &&
               options_.stream_queue_limit > 0);
  max_waiting_ = options_.max_waiting;
  stats_.kv_blocks_total = pool_blocks_;
  stats_.kv_blocks_used = pool_.used_blocks();
}

Scheduler::~Scheduler() {
  for (auto& s : running_) pool_.release(s->seq_id);
}

SubmitResult Scheduler::check(const GenerationRequest& r) const {
  using Code = SubmitResult::Code;
  if (r.prompt.empty())
    return {Code::Invalid, "the prompt is empty: there is nothing to continue from"};
  if (r.max_tokens < 1) return {Code::Invalid, "max_tokens must be at least 1"};
  const int64_t total = int64_t(r.prompt.size()) + r.max_tokens;
  if (total > max_context_)
    return {Code::Invalid, "this model's context is " + std::to_string(max_context_) +
                               " tokens; the prompt has " + std::to_string(r.prompt.size()) +
                               " and max_tokens asks for " + std::to_string(r.max_tokens) +
                               " more (" + std::to_string(total) +
                               "): shorten the prompt or lower max_tokens"};
  if (KvBlockPool::blocks_for(total) > pool_blocks_)
    return {Code::Invalid, "the KV cache holds " +
                               std::to_string(int64_t(pool_blocks_) * KvBlockPool::kBlockTokens) +
                               " tokens in all; this request needs " + std::to_string(total)};
  const int64_t vocab = int64_t(tokenizer_.vocab_size());
  for (int32_t t : r.prompt)
    if (t < 0 || t >= vocab)
      return {Code::Invalid, "token id " + std::to_string(t) + " is outside the vocabulary (" +
                                 std::to_string(vocab) + " tokens)"};
  if (r.logprobs < -1 || r.logprobs > kMaxTopLogprobs)
    return {Code::Invalid, "logprobs: at most " + std::to_string(kMaxTopLogprobs) +
                               " of the likeliest tokens, not " + std::to_string(r.logprobs)};
  auto sampling = r.sampling.validate();
  if (!sampling.ok()) return {Code::Invalid, sampling.error().message};
  return {};
}

SubmitResult Scheduler::submit(GenerationRequest request, std::shared_ptr<RequestStream> stream) {
  SubmitResult checked = check(request);
  if (!checked.ok()) return checked;
  std::lock_guard lock(mu_);
  if (!fatal_.empty()) return {SubmitResult::Code::Draining, "the engine stopped: " + fatal_};
  if (!admitting_ || shutdown_)
    return {SubmitResult::Code::Draining, "the server is shutting down"};
  if (stats_.waiting + int32_t(inbox_.size()) >= max_waiting_)
    return {SubmitResult::Code::Busy, "too many requests are queued; retry shortly"};
  inbox_.push_back(
      std::make_unique<Sequence>(std::move(request), std::move(stream), tokenizer_, next_order_++));
  cv_.notify_one();
  return {};
}

void Scheduler::stop_admitting() {
  std::lock_guard lock(mu_);
  admitting_ = false;
  stats_.admitting = false;
}

void Scheduler::resume_admitting() {
  std::lock_guard lock(mu_);
  admitting_ = true;
  stats_.admitting = true;
}

void Scheduler::set_max_waiting(int32_t max_waiting) {
  std::lock_guard lock(mu_);
  max_waiting_ = max_waiting;
}

void Scheduler::cancel_all(std::string message) {
  std::lock_guard lock(mu_);
  cancel_all_message_ = message.empty() ? "cancelled" : std::move(message);
  cv_.notify_one();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mu_);
  SchedulerStats s = stats_;
  s.waiting += int32_t(inbox_.size());
  return s;
}

bool Scheduler::idle() const {
  std::lock_guard lock(mu_);
  return inbox_.empty() && stats_.waiting == 0 && stats_.running == 0;
}

void Scheduler::shutdown() {
  std::lock_guard lock(mu_);
  shutdown_ = true;
  cv_.notify_one();
}

std::string Scheduler::fatal_error() const {
  std::lock_guard lock(mu_);
  return fatal_;
}

void Scheduler::run() {
  for (;;) {
    heartbeat_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    {
      std::lock_guard lock(mu_);
      if (shutdown_) break;
    }
    if (step()) continue;
    // Nothing computable. With sequences paused by backpressure (or waiting
    // on a cancel to be noticed), poll briefly; otherwise sleep until a
    // submit, cancel_all or shutdown, waking for the heartbeat meanwhile.
    std::unique_lock lock(mu_);
    auto woken = [&] { return shutdown_ || !inbox_.empty() || !cancel_all_message_.empty(); };
    if (running_.empty() && waiting_.empty())
      cv_.wait_for(lock, options_.heartbeat_interval, woken);
    else
      cv_.wait_for(lock, std::chrono::milliseconds(3), woken);
  }
  // Whatever is left when the engine stops is ended, so no consumer waits forever.
  take_inbox();
  const std::string fatal = fatal_error();
  const std::string why = fatal.empty() ? "the server stopped" : "the engine stopped: " + fatal;
  for (auto& s : running_) finish(*s, EndReason::Error, why);
  for (auto& s : waiting_) finish(*s, EndReason::Error, why);
  remove_finished();
  publish_stats();
}

void Scheduler::take_inbox() {
  std::string cancel_message;
  {
    std::lock_guard lock(mu_);
    stats_.waiting += int32_t(inbox_.size());  // idle() must not see a gap
    for (auto& s : inbox_) waiting_.push_back(std::move(s));
    inbox_.clear();
    cancel_message.swap(cancel_all_message_);
  }
  if (!cancel_message.empty()) {
    for (auto& s : running_) finish(*s, EndReason::Error, cancel_message);
    for (auto& s : waiting_) finish(*s, EndReason::Error, cancel_message);
    remove_finished();
  }
}

void Scheduler::drop_cancelled() {
  for (auto& s : running_)
    if (s->stream->cancelled()) finish(*s, EndReason::Cancelled);
  for (auto& s : waiting_)
    if (s->stream->cancelled()) finish(*s, EndReason::Cancelled);
  remove_finished();
}

int32_t Scheduler::next_seq_id() {
  // Ids are KV slots in the pool's table; skip any still held (after a wrap).
  do {
    seq_id_counter_ = seq_id_counter_ == INT32_MAX ? 0 : seq_id_counter_ + 1;
  } while (pool_.has_sequence(seq_id_counter_));
  return seq_id_counter_;
}

void Scheduler::admit() {
  bool admitted = false;
  while (!waiting_.empty() && int32_t(running_.size()) < options_.max_sequences) {
    Sequence& s = *waiting_.front();
    int32_t id = next_seq_id();
    // Blocks for everything the sequence must (re)compute now; decoding
    // later takes one block at a time.
    if (!pool_.reserve(id, int64_t(s.tokens.size()))) break;  // oldest first: no overtaking
    s.seq_id = id;
    s.n_cached = 0;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    admitted = true;
  }
  if (admitted)
    std::sort(running_.begin(), running_.end(),
              [](const SeqPtr& a, const SeqPtr& b) { return a->order < b->order; });
}

Scheduler::Sequence* Scheduler::newest_running() {
  Sequence* newest = nullptr;
  for (auto& s : running_)
    if (!s->finished && s->seq_id >= 0 && (!newest || s->order > newest->order)) newest = s.get();
  return newest;
}

void Scheduler::preempt(Sequence& victim) {
  pool_.release(victim.seq_id);
  victim.seq_id = -1;
  victim.n_cached = 0;
  ++preemptions_;
}

bool Scheduler::step() {
  take_inbox();
  drop_cancelled();
  admit();

  struct Planned {
    Sequence* seq;
    int64_t n;
  };
  std::vector<Planned> plan;
  int64_t budget = options_.max_batch_tokens;
  bool preempted = false;

  // Decodes first: one token each for sequences that have a sampled token to feed.
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (s.seq_id < 0 || s.uncached() != 1 || budget == 0) continue;
    if (s.stream->pending() >= size_t(options_.stream_queue_limit))
      continue;  // the client is behind
    while (s.seq_id >= 0 && !pool_.reserve(s.seq_id, s.n_cached + 1)) {
      Sequence* victim = newest_running();
      VOLTAD_CHECK(victim != nullptr);
      preempt(*victim);
      preempted = true;
    }
    if (s.seq_id < 0) continue;  // it was the newest itself
    plan.push_back({&s, 1});
    --budget;
  }
  // Then prefill chunks (new prompts, or recomputation after a preemption),
  // within the step time target where there is one.
  if (options_.step_time_target.count() > 0) {
    const double target = std::chrono::duration<double>(options_.step_time_target).count();
    const int64_t fits = seconds_per_token_ > 0 ? int64_t(target / seconds_per_token_) : 0;
    budget = std::min(budget, std::max(kMinPrefillChunk, fits));
  }
  int64_t prefill_tokens = 0;
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (s.seq_id < 0 || s.uncached() <= 1 || budget == 0) continue;
    int64_t n = std::min(s.uncached(), budget);
    prefill_tokens += n;
    VOLTAD_CHECK(pool_.reserve(s.seq_id, s.n_cached + n));  // reserved at admission
    plan.push_back({&s, n});
    budget -= n;
  }
  if (preempted) {
    // Preempted sequences go back to the queue, in submission order.
    for (auto& sp : running_)
      if (sp->seq_id < 0) waiting_.push_back(std::move(sp));
    std::erase(running_, nullptr);
    std::sort(waiting_.begin(), waiting_.end(),
              [](const SeqPtr& a, const SeqPtr& b) { return a->order < b->order; });
    std::erase_if(plan, [](const Planned& p) { return p.seq->seq_id < 0; });
  }
  if (plan.empty()) {
    publish_stats();
    return false;
  }

  std::vector<BatchChunk> chunks;
  chunks.reserve(plan.size());
  for (const Planned& p : plan) {
    BatchChunk c;
    c.seq_id = p.seq->seq_id;
    c.start_pos = int32_t(p.seq->n_cached);
    c.tokens =
        std::span<const int32_t>(p.seq->tokens).subspan(size_t(p.seq->n_cached), size_t(p.n));
    c.logits = p.n == p.seq->uncached() ? BatchChunk::Logits::Last : BatchChunk::Logits::None;
    if (c.logits == BatchChunk::Logits::Last) {
      // Where the sampler chooses among the best few (greedy, top_k), so can
      // log-probabilities: those few, at least as many as the request lists,
      // and the row's normalizer, not the whole row. A sampler that draws by
      // noise takes the first of its row ranked by its keys, which are not
      // the best logits a top_logprobs list needs: with one, the whole row.
      const Sampler& sampler = p.seq->sampler;
      const int32_t wanted = sampler.candidates_needed(kMaxCandidates);
      const int32_t listed = p.seq->request.logprobs;
      const bool noise = sampler.draws_by_noise();
      c.top_k = listed < 0 || wanted == 0 ? wanted
                : noise && listed > 0     ? 0
                                          : std::max(wanted, std::max(listed, 1));
      c.log_z = listed >= 0 && c.top_k > 0;
      if (noise && c.top_k > 0) c.noise = sampler.noise();
    }
    chunks.push_back(c);
  }
  // The admitted count as running while the step reads their prompts
  // (minutes on the CPU), not as waiting.
  publish_stats();
  const Clock::time_point started = Clock::now();
  Status forwarded = backend_.forward(chunks, out_);
  ++steps_;
  if (forwarded.ok() && prefill_tokens > 0) {
    int64_t tokens = 0;
    for (const Planned& p : plan) tokens += p.n;
    const double per_token =
        std::chrono::duration<double>(Clock::now() - started).count() / double(tokens);
    seconds_per_token_ =
        seconds_per_token_ > 0 ? 0.5 * seconds_per_token_ + 0.5 * per_token : per_token;
  }
  if (!forwarded.ok()) {
    for (const Planned& p : plan)
      finish(*p.seq, EndReason::Error, "the engine failed: " + forwarded.error().message);
    remove_finished();
    if (std::string why = backend_.unusable_reason(); !why.empty()) {
      std::lock_guard lock(mu_);
      fatal_ = std::move(why);
      shutdown_ = true;  // run() ends the rest with the reason
    }
    publish_stats();
    return true;
  }
  // The tokens first: from the candidates here; from whole rows on several
  // threads when there are many (independent samplers); then handed out in
  // the plan's order.
  std::vector<int32_t> tokens(plan.size(), -1);
  std::vector<std::optional<TokenLogprob>> logprobs(plan.size());
  std::vector<RowDraw> draws;
  std::vector<size_t> drawn;  // the plan index of each draw
  int64_t row = 0, candidate_row = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].seq;
    s.n_cached += plan[i].n;
    if (chunks[i].logits != BatchChunk::Logits::Last) continue;
    if (chunks[i].top_k > 0) {
      VOLTAD_CHECK(candidate_row < out_.n_candidate_rows);
      const auto ids = out_.candidate_row_ids(candidate_row);
      const auto values = out_.candidate_row_logits(candidate_row);
      if (std::string why = non_finite_logit_error(values[0], s.generated()); !why.empty()) {
        finish(s, EndReason::Error, why);
        ++candidate_row;
        continue;
      }
      tokens[i] = s.sampler.sample_candidates(ids, values);
      if (s.request.logprobs >= 0) {
        VOLTAD_CHECK(size_t(candidate_row) < out_.candidate_log_z.size());
        logprobs[i] = candidate_logprob(ids, values, out_.candidate_log_z[size_t(candidate_row)],
                                        tokens[i], s.request.logprobs);
      }
      ++candidate_row;
    } else {
      VOLTAD_CHECK(row < out_.n_rows);
      RowDraw d;
      d.sampler = &s.sampler;
      d.logits = std::span<float>(out_.logits.data() + row * out_.n_vocab, size_t(out_.n_vocab));
      d.history = s.tokens;
      d.n_prompt = size_t(s.n_prompt);
      d.logprobs = s.request.logprobs;
      draws.push_back(d);
      drawn.push_back(i);
      ++row;
    }
  }
  draw_rows(draws, row_draw_threads_);
  for (size_t d = 0; d < draws.size(); ++d) {
    Sequence& s = *plan[drawn[d]].seq;
    if (std::string why =
            non_finite_logit_error(draws[d].logits[size_t(draws[d].token)], s.generated());
        !why.empty()) {
      finish(s, EndReason::Error, why);
      continue;
    }
    tokens[drawn[d]] = draws[d].token;
    logprobs[drawn[d]] = std::move(draws[d].logprob);
  }
  for (size_t i = 0; i < plan.size(); ++i)
    if (tokens[i] >= 0) handle_token(*plan[i].seq, tokens[i], std::move(logprobs[i]));
  remove_finished();
  publish_stats();
  return true;
}

// The held log-probabilities whose tokens' text is all released (not the
// last tokens while the decoder holds the start of their character). At the
// end: all of them, or after a stop string those whose text starts before
// it (the client saw some of it).
std::vector<TokenLogprob> Scheduler::release_logprobs(Sequence& s, bool end) {
  std::vector<TokenLogprob> out;
  while (!s.held_logprobs.empty()) {
    Sequence::HeldLogprob& h = s.held_logprobs.front();
    const bool released = end ? !s.stops.stopped() || h.start < s.text_released
                              : h.end <= s.text_released && !h.in_char;
    if (!released) break;
    out.push_back(std::move(h.logprob));
    s.held_logprobs.pop_front();
  }
  if (end) s.held_logprobs.clear();
  return out;
}

void Scheduler::handle_token(Sequence& s, int32_t token, std::optional<TokenLogprob> logprob) {
  Clock::time_point now = Clock::now();
  const bool end = !s.request.ignore_eos && tokenizer_.is_end_of_generation(token);
  if (observer_) {
    // The end-of-sequence token is no token of the answer: no inter-token
    // sample for it (the samples then match usage's completion_tokens).
    if (s.generated() == 0 && s.last_token == Clock::time_point{})
      observer_->on_first_token(seconds_between(s.submitted, now), s.n_prompt);
    else if (!end)
      observer_->on_next_token(seconds_between(s.last_token, now));
  }
  s.last_token = now;
  if (end) {
    finish(s, EndReason::Stop);
    return;
  }
  s.tokens.push_back(token);
  StreamEvent event;
  std::string decoded;
  const bool was_holding = s.decoder.holding();
  const size_t held_before = s.decoder.held_bytes();
  event.text = answer_text(tokenizer_, s.decoder, s.stops, token, &decoded);
  s.text_released += int64_t(event.text.size());
  if (logprob) {
    // The token's text starts after what its decoded text owes to earlier
    // tokens (the U+FFFD of a character they started and it did not finish).
    // A control token that decodes nothing has left the decoder as it was.
    const size_t owed = decoded.empty() ? 0 : s.decoder.owed_to_earlier();
    if (was_holding && !decoded.empty()) {
      // The tokens that started the held character (ending where it
      // starts) end after it now: the character finished, or its U+FFFD.
      const int64_t first = owed ? int64_t(owed) : int64_t(utf8_decode(decoded, 0).length);
      for (Sequence::HeldLogprob& h : s.held_logprobs)
        if (h.in_char) h.end = s.text_made + first, h.in_char = false;
    }
    // This token is in the character held now if it started it, or added
    // to one it did not finish (a control token leaves the decoder as it
    // was and is in none).
    const bool in_char = s.decoder.holding() &&
                         (!was_holding || !decoded.empty() || s.decoder.held_bytes() > held_before);
    const int64_t start = s.text_made + int64_t(owed);
    logprob->text_offset =
        s.chars_made + int64_t(utf8_length(std::string_view(decoded).substr(0, owed)));
    s.text_made += int64_t(decoded.size());
    s.chars_made += int64_t(utf8_length(decoded));
    s.held_logprobs.push_back({start, s.text_made, std::move(*logprob), in_char});
    event.logprobs = release_logprobs(s, s.stops.stopped());
  }
  if (!event.text.empty() || !event.logprobs.empty()) s.stream->push(std::move(event));
  if (s.stops.stopped())
    finish(s, EndReason::Stop);
  else if (s.generated() >= s.request.max_tokens)
    finish(s, EndReason::Length);
}

void Scheduler::finish(Sequence& s, EndReason reason, std::string error) {
  if (s.finished) return;
  s.finished = true;
  if (s.seq_id >= 0) pool_.release(s.seq_id);
  s.seq_id = -1;
  StreamEvent last;
  // Text held back (an unfinished character, a possible stop-string start)
  // is released when the generation ends normally.
  if ((reason == EndReason::Stop || reason == EndReason::Length) && !s.stops.stopped()) {
    last.text = s.stops.finish(s.decoder.flush());
    // The flushed text (a cut character's U+FFFD) may complete a stop string.
    if (s.stops.stopped()) reason = EndReason::Stop;
    s.text_released += int64_t(last.text.size());
    last.logprobs = release_logprobs(s, true);
  }
  last.done = true;
  last.end = reason;
  last.error = std::move(error);
  last.prompt_tokens = s.n_prompt;
  last.completion_tokens = s.generated();
  if (observer_) observer_->on_finished(last);
  // The stats without this sequence before its client can see the end: a
  // client that asks /health right after its answer finds it gone.
  publish_stats();
  s.stream->push(std::move(last));
}

void Scheduler::remove_finished() {
  std::erase_if(running_, [](const SeqPtr& s) { return s->finished; });
  std::erase_if(waiting_, [](const SeqPtr& s) { return s->finished; });
}

void Scheduler::publish_stats() {
  std::lock_guard lock(mu_);
  // Finished sequences are out (they leave the lists at the step's end).
  auto unfinished = [](const auto& v) {
    return int32_t(std::count_if(v.begin(), v.end(), [](const SeqPtr& s) { return !s->finished; }));
  };
  stats_.waiting = unfinished(waiting_);
  stats_.running = unfinished(running_);
  stats_.kv_blocks_used = pool_.used_blocks();
  stats_.kv_blocks_total = pool_blocks_;
  stats_.steps = steps_;
  stats_.preemptions = preemptions_;
}

}  // namespace voltad
