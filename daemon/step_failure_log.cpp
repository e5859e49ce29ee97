#include "daemon/step_failure_log.h"

#include <spdlog/spdlog.h>

namespace voltad {

bool is_out_of_memory(const std::string& message) {
  return message.find("cudaErrorMemoryAllocation") != std::string::npos ||
         message.find("out of memory") != std::string::npos;
}

Status StepFailureLog::forward(std::span<const BatchChunk> chunks, ForwardOutput& out) {
  Status s = inner_.forward(chunks, out);
  if (s.ok()) return s;
  ++failed_steps_;
  int64_t tokens = 0;
  for (const BatchChunk& c : chunks) tokens += int64_t(c.tokens.size());
  if (is_out_of_memory(s.error().message)) {
    ++oom_steps_;
    spdlog::error(
        "the card ran out of memory in an engine step ({} sequences, {} tokens): {}. Those "
        "requests fail with 503; the daemon keeps serving. Every buffer was allocated at start, "
        "so something outside the plan took the memory (another process, or a driver "
        "allocation the plan does not count).{}{}",
        chunks.size(), tokens, s.error().message, plan_text_.empty() ? "" : " The plan at start:\n",
        plan_text_);
  } else {
    spdlog::error("an engine step failed ({} sequences, {} tokens): {}; those requests fail",
                  chunks.size(), tokens, s.error().message);
  }
  return s;
}

}  // namespace voltad
