// Continuous batching over one backend: many sequences share every forward
// step. The engine thread owns the scheduler's sequences, the backend and its
// KV block pool; other threads only submit, stop admitting, cancel and read
// statistics (the methods marked thread-safe below).
//
// One step:
//   1. take newly submitted requests; drop cancelled sequences (their KV
//      blocks are freed here, so a disconnect frees memory within a step);
//   2. admit waiting requests, oldest first, while fewer than max_sequences
//      run and the pool can reserve blocks for the whole prompt;
//   3. batch: every running sequence that has a sampled token to feed
//      decodes it (1 token each), then sequences still in prefill take
//      chunks of their prompt from what is left of max_batch_tokens, so a
//      long prompt never stalls the others' decoding;
//   4. forward, sample, stream text out.
// A decode that crosses a block boundary reserves one more block. When the
// pool is empty the newest running sequence is preempted: its blocks are
// freed and it waits at the front of the queue; when readmitted it
// recomputes prompt + output so far (one prefill) and continues where it
// left off, so its client only notices a pause.
//
// Backpressure: a sequence whose stream already holds `stream_queue_limit`
// events the consumer has not taken is not decoded this step (it keeps its
// blocks), so a slow reader bounds its own queue instead of the daemon's
// memory.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/request.h"
#include "engine/tokenizer.h"

namespace voltad {

struct SchedulerOptions {
  int32_t max_sequences = 16;        // running at once
  int32_t max_batch_tokens = 2048;   // tokens per forward step
  int32_t max_waiting = 1024;        // queued beyond the running ones; more are refused as busy
  int32_t stream_queue_limit = 256;  // untaken events per stream before its sequence pauses
  // An idle engine loop still wakes this often to beat its heartbeat, so a
  // watchdog can tell "idle" from "stuck in a forward pass".
  std::chrono::milliseconds heartbeat_interval{1000};
  // Threads that choose tokens from whole rows of logits in a step with
  // several (engine/row_draws.h); 0: row_draw_threads().
  int32_t row_draw_threads = 0;
  // 0: none. Otherwise prompts are read in chunks sized, from the steps so
  // far, to take about this long (at least kMinPrefillChunk tokens; the
  // first chunk is that many, to measure): on a backend slow enough that
  // max_batch_tokens of prompt takes minutes (the CPU), one long prompt
  // would freeze every other stream, outlast the watchdog and make a
  // disconnect wait for the step's end.
  std::chrono::milliseconds step_time_target{0};
};

// The smallest prompt chunk a step_time_target holds a step to.
inline constexpr int64_t kMinPrefillChunk = 16;

// A snapshot for /metrics and /health.
struct SchedulerStats {
  int32_t waiting = 0;  // submitted, not running (new or preempted)
  int32_t running = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_total = 0;
  uint64_t steps = 0;
  uint64_t preemptions = 0;
  bool admitting = true;
};

// Hooks the engine thread calls as tokens are made, for latency metrics.
// Implementations must be thread-safe and must not block.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  // Once a sequence: its prompt (prompt_tokens long) has been read and its
  // first token sampled. A sequence cancelled or failed while it waited
  // never gets here.
  virtual void on_first_token(double seconds_since_submit, int32_t prompt_tokens) = 0;
  virtual void on_next_token(double seconds_since_previous_token) = 0;
  virtual void on_finished(const StreamEvent& final_event) = 0;
};

struct SubmitResult {
  enum class Code { Accepted, Invalid, Busy, Draining } code = Code::Accepted;
  std::string message;  // for Invalid: what is wrong, with the numbers
  bool ok() const { return code == Code::Accepted; }
};

class Scheduler {
 public:
  // The backend and tokenizer must outlive the scheduler.
  Scheduler(Backend& backend, const Tokenizer& tokenizer, SchedulerOptions options,
            SchedulerObserver* observer = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Thread-safe. Checks the request against the context and the pool
  // (prompt + max_tokens) and queues it; events arrive on `stream`.
  SubmitResult submit(GenerationRequest request, std::shared_ptr<RequestStream> stream);
  // Thread-safe. Checks only (what submit would call Invalid).
  SubmitResult check(const GenerationRequest& request) const;
  // Thread-safe. Later submits are refused as Draining; running work goes on.
  void stop_admitting();
  // Thread-safe. Undoes stop_admitting (an administrator's drain ended).
  void resume_admitting();
  // Thread-safe. Replaces options.max_waiting (a reload's new limit); what
  // is queued already stays.
  void set_max_waiting(int32_t max_waiting);
  // Thread-safe. Every queued and running sequence ends at the next step
  // with EndReason::Error and this message.
  void cancel_all(std::string message);
  // Thread-safe.
  SchedulerStats stats() const;
  // Thread-safe: no sequence queued or running.
  bool idle() const;

  // Engine thread: steps until shutdown() is called (from any thread).
  void run();
  void shutdown();

  // Engine thread: one step. False when there was nothing to compute.
  bool step();

  int32_t max_context() const { return max_context_; }

  // Thread-safe: when the engine loop last went round (a step, or an idle
  // wake-up at least every heartbeat_interval); the epoch before run().
  std::chrono::steady_clock::time_point last_heartbeat() const {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(heartbeat_.load(std::memory_order_relaxed)));
  }

  // Thread-safe. Non-empty when run() stopped because the backend became
  // unusable (Backend::unusable_reason): every request was failed with it.
  std::string fatal_error() const;

 private:
  struct Sequence;
  using SeqPtr = std::unique_ptr<Sequence>;

  void take_inbox();
  void drop_cancelled();
  void admit();
  void preempt(Sequence& victim);
  Sequence* newest_running();
  void handle_token(Sequence& s, int32_t token, std::optional<TokenLogprob> logprob);
  std::vector<TokenLogprob> release_logprobs(Sequence& s, bool end);
  void finish(Sequence& s, EndReason reason, std::string error = {});
  void remove_finished();
  void publish_stats();
  int32_t next_seq_id();

  Backend& backend_;
  KvBlockPool& pool_;
  const Tokenizer& tokenizer_;
  const SchedulerOptions options_;
  SchedulerObserver* observer_;
  const int32_t max_context_;
  const int32_t pool_blocks_;

  // Shared with other threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SeqPtr> inbox_;
  bool admitting_ = true;
  bool shutdown_ = false;
  int32_t max_waiting_;  // options_.max_waiting until set_max_waiting
  std::string fatal_;  // see fatal_error()
  std::string cancel_all_message_;  // non-empty: cancel everything at the next step
  SchedulerStats stats_;
  uint64_t next_order_ = 0;

  // Engine thread only.
  std::deque<SeqPtr> waiting_;   // oldest first; preempted sequences keep their place
  std::vector<SeqPtr> running_;  // oldest first
  int32_t seq_id_counter_ = 0;
  uint64_t steps_ = 0, preemptions_ = 0;
  double seconds_per_token_ = 0;  // steps with a prompt chunk, averaged; 0: none yet
  std::atomic<std::chrono::steady_clock::rep> heartbeat_{0};  // written by the engine thread
  ForwardOutput out_;
  const int row_draw_threads_;
};

}  // namespace voltad
