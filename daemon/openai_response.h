// Native results -> OpenAI response bodies and SSE chunks (the shapes the
// official SDKs parse). Pure formatting: any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/openai_request.h"
#include "engine/request.h"
#include "engine/tokenizer.h"

namespace voltad {

// {"error": {"message", "type", "param", "code"}}
std::string error_body(const ApiError& error);

// "chatcmpl-..." / "cmpl-..." with 24 random hex digits.
std::string new_completion_id(CompletionRequest::Kind kind);

class CompletionFormatter {
 public:
  // `logprobs_tokenizer`: set where the request asked for logprobs (it
  // spells their tokens; it must outlive the formatter); null: "logprobs": null.
  CompletionFormatter(CompletionRequest::Kind kind, std::string id, std::string model,
                      int64_t created, const Tokenizer* logprobs_tokenizer = nullptr);

  // Non-streamed: the whole response.
  std::string response(const std::string& text, const std::vector<TokenLogprob>& logprobs,
                       const StreamEvent& last) const;

  // Streamed, each a complete "data: ...\n\n" event.
  std::string first_chunk() const;  // chat: the assistant role; text completions: ""
  std::string text_chunk(const std::string& text,
                         const std::vector<TokenLogprob>& logprobs = {}) const;
  // The chunk carrying finish_reason, then (include_usage) OpenAI's separate
  // usage chunk with empty choices, then "data: [DONE]". Without
  // include_usage the usage rides on the finish chunk, which the SDKs accept.
  std::string final_chunks(const StreamEvent& last, bool include_usage) const;
  // An error in the middle of a stream (the SDKs raise it), then [DONE].
  std::string error_chunk(const ApiError& error) const;

 private:
  std::string chunk_object() const;  // "chat.completion.chunk" / "text_completion"
  // OpenAI's logprobs object for these tokens (chat: {"content": [...]};
  // completions: tokens, token_logprobs, top_logprobs, text_offset), or null.
  nlohmann::ordered_json logprobs_json(const std::vector<TokenLogprob>& logprobs) const;

  CompletionRequest::Kind kind_;
  std::string id_, model_;
  int64_t created_;
  const Tokenizer* tokenizer_;
};

const char* finish_reason_name(EndReason reason);  // "stop" | "length"

}  // namespace voltad
