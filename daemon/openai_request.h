// OpenAI request bodies -> native structs. Everything here is untrusted
// client input: a problem is an ApiError (HTTP status + OpenAI error object
// naming the field), never an exception or an abort. Pure functions: any
// thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/logprobs.h"
#include "engine/sampler.h"

namespace voltad {

// The OpenAI error object with its HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;            // the offending field, when one is to blame
  std::string code;             // machine-readable, e.g. "context_length_exceeded"
  int retry_after_seconds = 0;  // sent as Retry-After when > 0
};

ApiError bad_request(std::string message, std::string param = {}, std::string code = {});

// max_tokens of a text completion (/v1/completions) that names none: the
// legacy completions API's default. A chat answer runs to the end of the
// context instead.
constexpr int32_t kTextCompletionDefaultMaxTokens = 16;

// A chat or text completion request, before tokenization.
struct CompletionRequest {
  enum class Kind { Chat, Text } kind = Kind::Chat;
  std::string model;                   // empty: whatever is served
  std::vector<ChatMessage> messages;   // Chat
  std::string prompt;                  // Text: prompt as text...
  std::vector<int32_t> prompt_tokens;  // ...or as token ids
  std::optional<int64_t> max_tokens;   // none: the kind's default (above); past the
                                       // context: refused with the numbers (server_router)
  std::string max_tokens_field = "max_tokens";  // or max_completion_tokens: what set it
  std::string
      max_tokens_text;  // as the client wrote it, where past int64 (max_tokens is its largest)
  SamplingParams sampling;             // temperature defaults to 1, as in OpenAI's API
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;     // extension (benchmarks): generate exactly max_tokens
  // -1: none; else each token's log-probability and this many of the
  // likeliest tokens beside it (chat: top_logprobs; completions: logprobs).
  int32_t logprobs = -1;
};

std::optional<ApiError> parse_chat_completion(std::string_view body, CompletionRequest& out);
std::optional<ApiError> parse_text_completion(std::string_view body, CompletionRequest& out);

// POST /tokenize {"prompt": "..."} or {"messages": [...]} (rendered with the
// chat template first), optional "add_special"; POST /detokenize {"tokens": [...]}.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  std::vector<ChatMessage> messages;
  bool add_special = true;
};
std::optional<ApiError> parse_tokenize(std::string_view body, TokenizeRequest& out);

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
std::optional<ApiError> parse_detokenize(std::string_view body, DetokenizeRequest& out);

// A path segment with its %XX escapes decoded (GET /v1/models/{id}: the SDKs
// send "org/name" as "org%2Fname"). A '%' not followed by two hex digits is
// kept as it is.
std::string percent_decoded(std::string_view segment);

}  // namespace voltad
