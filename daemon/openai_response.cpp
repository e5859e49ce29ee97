#include "daemon/openai_response.h"

#include <random>

#include <nlohmann/json.hpp>

namespace voltad {

using Json = nlohmann::json;

namespace {

Json usage_json(const StreamEvent& last) {
  return {{"prompt_tokens", last.prompt_tokens},
          {"completion_tokens", last.completion_tokens},
          {"total_tokens", last.prompt_tokens + last.completion_tokens}};
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
                                         std::string model, int64_t created)
    : kind_(kind), id_(std::move(id)), model_(std::move(model)), created_(created) {}

std::string CompletionFormatter::chunk_object() const {
  return kind_ == CompletionRequest::Kind::Chat ? "chat.completion.chunk" : "text_completion";
}

std::string CompletionFormatter::response(const std::string& text, const StreamEvent& last) const {
  Json choice;
  if (kind_ == CompletionRequest::Kind::Chat) {
    choice = {{"index", 0},
              {"message", {{"role", "assistant"}, {"content", text}}},
              {"logprobs", nullptr},
              {"finish_reason", finish_reason_name(last.end)}};
  } else {
    choice = {{"index", 0},
              {"text", text},
              {"logprobs", nullptr},
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

std::string CompletionFormatter::text_chunk(const std::string& text) const {
  Json choice;
  if (kind_ == CompletionRequest::Kind::Chat)
    choice = {{"index", 0},
              {"delta", {{"content", text}}},
              {"logprobs", nullptr},
              {"finish_reason", nullptr}};
  else
    choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  return sse({{"id", id_},
              {"object", chunk_object()},
              {"created", created_},
              {"model", model_},
              {"choices", Json::array({choice})}});
}

std::string CompletionFormatter::final_chunks(const StreamEvent& last, bool include_usage) const {
  std::string out;
  if (!last.text.empty()) out += text_chunk(last.text);
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
