// Generating one sequence to the end: prefill the prompt, then sample token
// by token until end-of-generation, a stop string or max_tokens. Used by
// voltad-run and the tests; the daemon's scheduler runs many sequences at
// once with the same pieces (backend, sampler, stream decoder, stop filter).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"
#include "engine/tokenizer.h"

namespace voltad {

// What a generated token adds to the answer: its text through the decoder
// and the stop filter. A control token adds none (the decoder drops it),
// yet ends the answer where a stop string names it. `decoded`, when given,
// receives the decoder's text (before the stop filter holds or cuts it).
std::string answer_text(const Tokenizer& tokenizer, StreamDecoder& decoder, StopStringFilter& stops,
                        int32_t token, std::string* decoded = nullptr);

struct GenerateOptions {
  int32_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;
  int32_t seq_id = 0;
  int32_t prefill_chunk = 512;  // prompt tokens per forward step
  // Called with each step's logits before sampling (for --dump-logits).
  std::function<void(std::span<const float>)> on_logits;
  // Called after each prefill chunk with the prompt tokens read so far and
  // the prompt's length (progress for a long prompt).
  std::function<void(size_t done, size_t total)> on_prefill;
};

enum class FinishReason { Stop, Length };

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (without the prompt)
  std::string text;             // everything emitted
  FinishReason finish = FinishReason::Length;
  double prefill_seconds = 0, decode_seconds = 0;
  // Forward steps after the prompt's: the first token comes from the
  // prompt's last step, so tokens.size() - 1 when none stopped it early.
  int32_t decode_steps = 0;
};

// on_text receives text as it becomes final (valid UTF-8, no part of a stop
// string); returning false cancels. The sequence's KV blocks are released
// before returning.
Result<GenerateResult> generate(Backend& backend, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options,
                                const std::function<bool(std::string_view)>& on_text = {});

}  // namespace voltad
