// A failed engine step -- above all a CUDA out-of-memory error -- must cost
// the requests in that step and nothing else (issue 8): the scheduler ends
// exactly those sequences with an error, which their clients get as 503
// (daemon/server_session.cpp), and the daemon goes on serving. This wrapper
// around the backend adds what the engine layer cannot: one log line per
// failed step, with the VRAM plan when the card ran out of memory, so the
// operator sees why and what was planned.
//
// Threads: the engine thread only, like the backend it wraps.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "engine/backend.h"

namespace voltad {

// True for the CUDA runtime's out-of-memory errors as the backend words
// them ("cudaErrorMemoryAllocation (out of memory)").
bool is_out_of_memory(const std::string& message);

class StepFailureLog final : public Backend {
 public:
  // `plan_text`: the start-up plan's table ("" on the CPU backend).
  StepFailureLog(Backend& inner, std::string plan_text)
      : inner_(inner), plan_text_(std::move(plan_text)) {}

  std::string name() const override { return inner_.name(); }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override;
  KvBlockPool& kv_pool() override { return inner_.kv_pool(); }
  std::string unusable_reason() const override { return inner_.unusable_reason(); }

  uint64_t failed_steps() const { return failed_steps_.load(); }
  uint64_t out_of_memory_steps() const { return oom_steps_.load(); }

 private:
  Backend& inner_;
  const std::string plan_text_;
  std::atomic<uint64_t> failed_steps_{0}, oom_steps_{0};
};

}  // namespace voltad
