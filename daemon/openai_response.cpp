#include "daemon/openai_response.h"

#include <random>

#include <nlohmann/json.hpp>

#include "engine/utf8.h"

namespace voltad {

// Ordered: fields stay in the order written (top_logprobs likeliest first).
using Json = nlohmann::ordered_json;

namespace {

Json usage_json(const StreamEvent& last) {
  return {{"prompt_tokens", last.prompt_tokens},
          {"completion_tokens", last.completion_tokens},
          {"total_tokens", last.prompt_tokens + last.completion_tokens}};
}

// "\xe2": a byte as Python writes it in a bytes literal.
std::string fmt_byte(unsigned char b) {
  static const char* hex = "0123456789abcdef";
  return std::string("\\x") + hex[b >> 4] + hex[b & 15];
}

std::string sse(const Json& j) {
  // Invalid UTF-8 cannot reach here (the stream decoder replaces it), but a
  // client's own strings echoed back might: replace rather than throw.
  return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

}  // namespace

std::string error_body(const ApiError& e) {
  Json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
              {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}};
  return Json{{"error", err}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string new_completion_id(CompletionRequest::Kind kind) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = kind == CompletionRequest::Kind::Chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

const char* finish_reason_name(EndReason reason) {
  return reason == EndReason::Length ? "length" : "stop";
}

CompletionFormatter::CompletionFormatter(CompletionRequest::Kind kind, std::string id,
                                         std::string model, int64_t created,
                                         const Tokenizer* logprobs_tokenizer)
    : kind_(kind),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      tokenizer_(logprobs_tokenizer) {}

Json CompletionFormatter::logprobs_json(const std::vector<TokenLogprob>& logprobs) const {
  if (!tokenizer_) return nullptr;
  // A token's bytes may be part of a character: "token" is them as text
  // (U+FFFD where they are not UTF-8, when written), "bytes" exactly.
  auto bytes = [](const std::string& piece) {
    Json out = Json::array();
    for (unsigned char b : piece) out.push_back(int(b));
    return out;
  };
  if (kind_ == CompletionRequest::Kind::Chat) {
    Json content = Json::array();
    for (const TokenLogprob& t : logprobs) {
      const std::string piece = tokenizer_->token_piece(t.token);
      Json top = Json::array();
      for (auto [id, lp] : t.top) {
        const std::string p = tokenizer_->token_piece(id);
        top.push_back({{"token", p}, {"logprob", lp}, {"bytes", bytes(p)}});
      }
      content.push_back({{"token", piece},
                         {"logprob", t.logprob},
                         {"bytes", bytes(piece)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  // Completions spell a token that is not UTF-8 by its bytes, as OpenAI's
  // do ("bytes:\xe2\x82"), so that two such tokens stay apart as keys.
  auto spell = [&](int32_t id) {
    std::string piece = tokenizer_->token_piece(id);
    if (utf8_is_valid(piece)) return piece;
    std::string out = "bytes:";
    for (unsigned char b : piece) out += fmt_byte(b);
    return out;
  };
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
       offsets = Json::array();
  for (const TokenLogprob& t : logprobs) {
    tokens.push_back(spell(t.token));
    token_logprobs.push_back(t.logprob);
    // Likeliest first (an ordered object), the first of two tokens spelled
    // alike kept, and the chosen token always there (OpenAI's: up to N + 1).
    Json top = Json::object();
    for (auto [id, lp] : t.top) top.emplace(spell(id), lp);
    top.emplace(spell(t.token), t.logprob);
    top_logprobs.push_back(top);
    offsets.push_back(t.text_offset);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

std::string CompletionFormatter::chunk_object() const {
  return kind_ == CompletionRequest::Kind::Chat ? "chat.completion.chunk" : "text_completion";
}

std::string CompletionFormatter::response(const std::string& text,
                                          const std::vector<TokenLogprob>& logprobs,
                                          const StreamEvent& last) const {
  Json choice;
  if (kind_ == CompletionRequest::Kind::Chat) {
    choice = {{"index", 0},
              {"message", {{"role", "assistant"}, {"content", text}}},
              {"logprobs", logprobs_json(logprobs)},
              {"finish_reason", finish_reason_name(last.end)}};
  } else {
    choice = {{"index", 0},
              {"text", text},
              {"logprobs", logprobs_json(logprobs)},
              {"finish_reason", finish_reason_name(last.end)}};
  }
  Json j = {
      {"id", id_},
      {"object", kind_ == CompletionRequest::Kind::Chat ? "chat.completion" : "text_completion"},
      {"created", created_},
      {"model", model_},
      {"choices", Json::array({choice})},
      {"usage", usage_json(last)}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string CompletionFormatter::first_chunk() const {
  if (kind_ != CompletionRequest::Kind::Chat) return {};
  Json choice = {{"index", 0},
                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  return sse({{"id", id_},
              {"object", chunk_object()},
              {"created", created_},
              {"model", model_},
              {"choices", Json::array({choice})}});
}

std::string CompletionFormatter::text_chunk(const std::string& text,
                                            const std::vector<TokenLogprob>& logprobs) const {
  Json choice;
  if (kind_ == CompletionRequest::Kind::Chat)
    choice = {{"index", 0},
              {"delta", {{"content", text}}},
              {"logprobs", logprobs_json(logprobs)},
              {"finish_reason", nullptr}};
  else
    choice = {{"index", 0},
              {"text", text},
              {"logprobs", logprobs_json(logprobs)},
              {"finish_reason", nullptr}};
  return sse({{"id", id_},
              {"object", chunk_object()},
              {"created", created_},
              {"model", model_},
              {"choices", Json::array({choice})}});
}

std::string CompletionFormatter::final_chunks(const StreamEvent& last, bool include_usage) const {
  std::string out;
  if (!last.text.empty() || !last.logprobs.empty()) out += text_chunk(last.text, last.logprobs);
  Json choice;
  if (kind_ == CompletionRequest::Kind::Chat)
    choice = {{"index", 0},
              {"delta", Json::object()},
              {"logprobs", nullptr},
              {"finish_reason", finish_reason_name(last.end)}};
  else
    choice = {{"index", 0},
              {"text", ""},
              {"logprobs", nullptr},
              {"finish_reason", finish_reason_name(last.end)}};
  Json finish = {{"id", id_},
                 {"object", chunk_object()},
                 {"created", created_},
                 {"model", model_},
                 {"choices", Json::array({choice})}};
  if (include_usage) {
    finish["usage"] = nullptr;
    out += sse(finish);
    out += sse({{"id", id_},
                {"object", chunk_object()},
                {"created", created_},
                {"model", model_},
                {"choices", Json::array()},
                {"usage", usage_json(last)}});
  } else {
    finish["usage"] = usage_json(last);
    out += sse(finish);
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string CompletionFormatter::error_chunk(const ApiError& error) const {
  return "data: " + error_body(error) + "\n\ndata: [DONE]\n\n";
}

}  // namespace voltad
