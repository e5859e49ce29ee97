// A generation request as the engine sees it (token ids, limits, sampling),
// and the channel its results flow back through.
//
// Threads: a RequestStream is shared by exactly two parties. The engine
// thread pushes events; one consumer (the connection that made the request,
// on its I/O strand) takes them and may cancel. Every method is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/logprobs.h"
#include "engine/sampler.h"

namespace voltad {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // never empty
  int32_t max_tokens = 16;      // generated tokens at most (>= 1)
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings; the output ends just before the first
  bool ignore_eos = false;        // end-of-generation tokens are ordinary tokens (benchmarks)
  // -1: none. 0..kMaxTopLogprobs: each generated token's log-probability,
  // with that many of the likeliest tokens beside it (StreamEvent::logprobs).
  int32_t logprobs = -1;
};

// Why a generation ended. Stop and Length are OpenAI's finish reasons;
// the other two never reach a client that is still listening normally.
enum class EndReason {
  Stop,       // end-of-generation token or stop string
  Length,     // max_tokens
  Cancelled,  // the consumer cancelled (disconnect)
  Error,      // the engine could not continue (message in StreamEvent::error)
};

const char* end_reason_name(EndReason reason);  // "stop", "length", "cancelled", "error"

struct StreamEvent {
  std::string text;   // new text: valid UTF-8, never part of a stop string
  // With GenerationRequest::logprobs: the tokens whose text this event
  // completes (their text released, here or before), in order. A token
  // whose text all falls in a stop string is not reported; nor is the
  // end-of-generation token.
  std::vector<TokenLogprob> logprobs;
  bool done = false;  // the last event of the stream; the fields below are set
  EndReason end = EndReason::Stop;
  std::string error;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

class RequestStream {
 public:
  // `notify` runs on the engine thread when events become available to a
  // consumer that has taken everything before: one call per batch of events,
  // so a slow consumer is not flooded with wake-ups. It must not block.
  explicit RequestStream(std::function<void()> notify = {});

  // Engine side.
  void push(StreamEvent event);
  size_t pending() const;
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Consumer side. take() returns everything queued and re-arms notify.
  std::vector<StreamEvent> take();
  void cancel() { cancelled_.store(true, std::memory_order_release); }

 private:
  std::function<void()> notify_;
  mutable std::mutex mu_;
  std::deque<StreamEvent> events_;
  bool armed_ = true;  // the consumer is waiting for a notify
  std::atomic<bool> cancelled_{false};
};

}  // namespace voltad
