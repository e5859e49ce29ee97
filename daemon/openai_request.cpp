#include "daemon/openai_request.h"

#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

namespace voltad {

using Json = nlohmann::json;

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

namespace {

// nlohmann's parser is iterative, but deep nesting still costs memory and a
// recursive destructor on older releases; no OpenAI body nests past a few
// levels, so anything deeper is refused before parsing.
constexpr int kMaxDepth = 64;
// Tokens one request may bias (OpenAI documents no limit; this bounds the
// host's work a step).
constexpr size_t kMaxLogitBias = 1024;

std::optional<ApiError> check_depth(std::string_view body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth)
        return bad_request(
            "the JSON body nests deeper than " + std::to_string(kMaxDepth) + " levels", {},
            "invalid_json");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_object(std::string_view body, Json& out) {
  // No body at all: most often one sent without Content-Length (or
  // chunked), which HTTP reads as none; what followed it reads as the next
  // request.
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return bad_request(
        "the request has no body: send the JSON object with a Content-Length header, or "
        "chunked",
        {}, "invalid_json");
  if (auto e = check_depth(body)) return e;
  try {
    out = Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    // parse_error, and out_of_range for numbers too large for a double.
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> from "parse
    // error".
    auto at = what.find("] ");
    return bad_request("the request body is not valid JSON: " +
                           (at == std::string::npos ? what : what.substr(at + 2)),
                       {}, "invalid_json");
  }
  if (!out.is_object())
    return bad_request(std::string("the request body must be a JSON object, not ") +
                           (out.is_array() ? "an array" : "a " + std::string(out.type_name())),
                       {}, "invalid_json");
  return std::nullopt;
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && d != std::trunc(d) ? "a number with a fraction" : "a number";
    }
    default:
      return "a number";
  }
}

ApiError wrong_type(const std::string& field, const char* expected, const Json& got) {
  return bad_request("'" + field + "' must be " + expected + ", not " + type_name(got), field);
}

// A token id: an integer from 0 to INT32_MAX, written as such or as a whole
// number with a fraction or an exponent (2.0; as the integer fields take).
std::optional<int32_t> token_id(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  if (!std::isfinite(d) || d != std::trunc(d) || d < 0 || d > double(INT32_MAX))
    return std::nullopt;
  return int32_t(d);
}

// Typed access to optional fields; null counts as absent, as OpenAI's API treats it.
class Fields {
 public:
  explicit Fields(const Json& object) : obj_(object) {}

  const Json* find(const char* name) const {
    auto it = obj_.find(name);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<ApiError> get(const char* name, bool& out) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return wrong_type(name, "a boolean", *v);
    out = v->get<bool>();
    return std::nullopt;
  }
  std::optional<ApiError> get(const char* name, std::string& out) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) return wrong_type(name, "a string", *v);
    out = v->get<std::string>();
    return std::nullopt;
  }
  std::optional<ApiError> get(const char* name, float& out) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) return wrong_type(name, "a number", *v);
    double d = v->get<double>();
    // Converting an out-of-range double to float is undefined: refuse first.
    if (!std::isfinite(d) || std::fabs(d) > 1e30)
      return bad_request("'" + std::string(name) + "' is out of range", name);
    out = float(d);
    return std::nullopt;
  }
  std::optional<ApiError> get(const char* name, int64_t lo, int64_t hi,
                              std::optional<int64_t>& out) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    // A whole number written with a fraction or an exponent (5.0, 1e2;
    // Python's json.dumps of a float) is that integer.
    const bool whole_float = v->is_number_float() && std::isfinite(v->get<double>()) &&
                             v->get<double>() == std::trunc(v->get<double>());
    if (!v->is_number_integer() && !whole_float) return wrong_type(name, "an integer", *v);
    auto outside = [&](const std::string& shown) {
      return bad_request("'" + std::string(name) + "' must be between " + std::to_string(lo) +
                             " and " + std::to_string(hi) + ", not " + shown,
                         name);
    };
    if (whole_float) {
      const double d = v->get<double>();
      if (d < double(lo) || d > double(hi) || d >= 0x1p63) return outside(v->dump());
      out = int64_t(d);
      return std::nullopt;
    }
    // Past INT64_MAX: out of every field's range, said with its own value
    // (a seed was once taken as INT64_MAX instead).
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      return outside(std::to_string(v->get<uint64_t>()));
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return outside(std::to_string(x));
    out = x;
    return std::nullopt;
  }

 private:
  const Json& obj_;
};

#define VOLTAD_API_TRY(expr)         \
  do {                               \
    if (auto e_ = (expr)) return e_; \
  } while (0)

std::optional<ApiError> parse_messages(const Json& object, std::vector<ChatMessage>& out) {
  auto it = object.find("messages");
  if (it == object.end() || it->is_null()) return bad_request("'messages' is required", "messages");
  if (!it->is_array()) return wrong_type("messages", "an array of message objects", *it);
  if (it->empty()) return bad_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(where, "an object", m);
    ChatMessage msg;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return bad_request("'" + where + ".role' must be a string", where + ".role");
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system prompt
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      return bad_request("'" + where + ".role' is '" + msg.role +
                             "'; supported: system, developer, user, assistant",
                         where + ".role");
    // An earlier answer's tool calls (function_call, OpenAI's older
    // field): this server calls no tools, so none of its answers has them,
    // and dropping them would change the conversation unseen.
    for (const char* calls : {"tool_calls", "function_call"})
      if (auto c = m.find(calls); c != m.end() && !c->is_null() && !(c->is_array() && c->empty()))
        return bad_request(
            "'" + where + "." + calls + "': tool calls are not supported by this server",
            where + "." + calls);
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (msg.role != "assistant")
        return bad_request("'" + where + ".content' is required", where + ".content");
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: only text can be fed to a text model.
      for (size_t j = 0; j < content->size(); ++j) {
        const Json& part = (*content)[j];
        const std::string pw = where + ".content[" + std::to_string(j) + "]";
        if (!part.is_object()) return wrong_type(pw, "an object", part);
        auto type = part.find("type");
        if (type == part.end() || !type->is_string() || type->get<std::string>() != "text")
          return bad_request("'" + pw + ".type' must be \"text\": this model reads text only",
                             pw + ".type");
        auto text = part.find("text");
        if (text == part.end() || !text->is_string())
          return bad_request("'" + pw + ".text' must be a string", pw + ".text");
        // Parts are separate pieces of text: a line break between them.
        if (j > 0) msg.content += '\n';
        msg.content += text->get<std::string>();
      }
    } else {
      return wrong_type(where + ".content", "a string or an array of text parts", *content);
    }
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

// {"TOKEN_ID": BIAS, ...}: ids as decimal strings (JSON keys are strings),
// biases -100 to 100. Whether an id is in the vocabulary is the router's
// to check (it knows the model).
std::optional<ApiError> parse_logit_bias(const Fields& f,
                                         std::vector<std::pair<int32_t, float>>& out) {
  const Json* v = f.find("logit_bias");
  if (!v) return std::nullopt;
  if (!v->is_object())
    return wrong_type("logit_bias", "an object of token ids to biases from -100 to 100", *v);
  if (v->size() > kMaxLogitBias)
    return bad_request("'logit_bias' has " + std::to_string(v->size()) + " tokens; at most " +
                           std::to_string(kMaxLogitBias),
                       "logit_bias");
  for (const auto& [key, bias] : v->items()) {
    int32_t id = -1;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    // One spelling an id ("07" is not 7's): two keys must not bias one token twice.
    const bool number =
        !key.empty() && ec == std::errc() && end == key.data() + key.size() && id >= 0;
    if (!number || key != std::to_string(id))
      return bad_request("'logit_bias' key '" + key.substr(0, 40) + (key.size() > 40 ? "..." : "") +
                             (number ? "' is not written as a token id (" + std::to_string(id) +
                                           ", with no leading zeros)"
                                     : std::string("' is not a token id (a whole number)")),
                         "logit_bias");
    if (!bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100))
      return bad_request("'logit_bias." + key + "' must be a number between -100 and 100",
                         "logit_bias");
    out.emplace_back(id, bias.get<float>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const Fields& f, std::vector<std::string>& out) {
  const Json* v = f.find("stop");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    if (v->get<std::string>().size() > 1024)
      return bad_request("'stop' strings are at most 1024 bytes", "stop");
    if (!v->get<std::string>().empty()) out.push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return wrong_type("stop", "a string or an array of strings", *v);
  if (v->size() > 16)
    return bad_request("'stop' has " + std::to_string(v->size()) + " strings; at most 16", "stop");
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& s = (*v)[i];
    if (!s.is_string()) return wrong_type("stop[" + std::to_string(i) + "]", "a string", s);
    if (s.get<std::string>().size() > 1024)
      return bad_request("'stop' strings are at most 1024 bytes", "stop");
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// Chat: `logprobs` (a boolean) and `top_logprobs` (0 to 20, with logprobs
// true), as OpenAI's. Text completions: `logprobs`, how many of the
// likeliest tokens to give beside each chosen one (0 to 20; OpenAI's limit
// is 5), where false or null asks for none.
std::optional<ApiError> parse_logprobs(const Fields& f, CompletionRequest& r) {
  std::optional<int64_t> top;
  if (r.kind == CompletionRequest::Kind::Chat) {
    bool on = false;
    VOLTAD_API_TRY(f.get("logprobs", on));
    VOLTAD_API_TRY(f.get("top_logprobs", 0, kMaxTopLogprobs, top));
    if (top && !on) return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    r.logprobs = on ? int32_t(top.value_or(0)) : -1;
    return std::nullopt;
  }
  if (f.find("top_logprobs"))
    return bad_request(
        "'top_logprobs' is a chat completion's field; a text completion's 'logprobs' is the "
        "number of likeliest tokens (0 to " +
            std::to_string(kMaxTopLogprobs) + ")",
        "top_logprobs");
  if (const Json* lp = f.find("logprobs"); lp && lp->is_boolean() && !lp->get<bool>()) return {};
  VOLTAD_API_TRY(f.get("logprobs", 0, kMaxTopLogprobs, top));
  r.logprobs = top ? int32_t(*top) : -1;
  return std::nullopt;
}

// Fields chat and text completions share.
std::optional<ApiError> parse_common(const Json& object, CompletionRequest& r) {
  Fields f(object);
  VOLTAD_API_TRY(f.get("model", r.model));
  std::optional<int64_t> max_tokens, n, seed, top_k;
  // Any positive count: one past the room left in the context is refused
  // with the numbers and context_length_exceeded, however large (a whole
  // number past int64_t's range too: its largest value stands for it).
  auto get_count = [&](const char* name) -> std::optional<ApiError> {
    if (const Json* v = f.find(name); v && v->is_number()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) >= 0x1p63) {
        if (d < 1)
          return bad_request("'" + std::string(name) + "' must be at least 1, not " + v->dump(),
                             name);
        max_tokens = INT64_MAX;
        r.max_tokens_text = v->dump();  // the error quotes what was sent
        return std::nullopt;
      }
    }
    return f.get(name, INT64_MIN, INT64_MAX, max_tokens);
  };
  VOLTAD_API_TRY(get_count("max_tokens"));
  const char* tokens_field = "max_tokens";
  if (r.kind == CompletionRequest::Kind::Chat && object.contains("max_completion_tokens") &&
      !object.at("max_completion_tokens").is_null()) {
    VOLTAD_API_TRY(get_count("max_completion_tokens"));
    tokens_field = "max_completion_tokens";
  }
  if (max_tokens && *max_tokens < 1)
    return bad_request("'" + std::string(tokens_field) + "' must be at least 1, not " +
                           std::to_string(*max_tokens),
                       tokens_field);
  r.max_tokens = max_tokens;
  r.max_tokens_field = tokens_field;
  VOLTAD_API_TRY(f.get("n", 1, 128, n));
  if (n && *n != 1) return bad_request("'n' must be 1: one choice per request is supported", "n");
  std::optional<int64_t> best_of;  // completions' field; on chat too, not silently ignored
  VOLTAD_API_TRY(f.get("best_of", 1, 128, best_of));
  if (best_of && *best_of != 1) return bad_request("'best_of' must be 1", "best_of");
  VOLTAD_API_TRY(f.get("seed", INT64_MIN, INT64_MAX, seed));
  if (seed) r.sampling.seed = uint64_t(*seed);
  VOLTAD_API_TRY(f.get("top_k", -1, 1 << 20, top_k));
  if (top_k)
    r.sampling.top_k = int32_t(std::max<int64_t>(*top_k, 0));  // -1: off, as vLLM spells it
  VOLTAD_API_TRY(f.get("temperature", r.sampling.temperature));
  VOLTAD_API_TRY(f.get("top_p", r.sampling.top_p));
  if (r.sampling.top_p == 0.0f) {  // OpenAI takes 0: only the likeliest token, i.e. greedy
    r.sampling.top_p = 1.0f;
    r.sampling.temperature = 0.0f;
  }
  VOLTAD_API_TRY(f.get("min_p", r.sampling.min_p));
  VOLTAD_API_TRY(f.get("presence_penalty", r.sampling.presence_penalty));
  VOLTAD_API_TRY(f.get("frequency_penalty", r.sampling.frequency_penalty));
  VOLTAD_API_TRY(f.get("repetition_penalty", r.sampling.repetition_penalty));
  VOLTAD_API_TRY(parse_logit_bias(f, r.sampling.logit_bias));
  if (auto status = r.sampling.validate(); !status.ok()) {
    // validate() says "field: why"; a range ("must be ...") is said with
    // the value sent, as the integer fields say theirs.
    const std::string& m = status.error().message;
    const std::string field = m.substr(0, m.find(':'));
    const std::string why = m.substr(std::min(m.size(), m.find(':') + 2));
    if (why.rfind("must ", 0) != 0) return bad_request("'" + field + "': " + why, field);
    const Json* sent = f.find(field.c_str());
    return bad_request("'" + field + "' " + why + (field == "top_p" ? ", or 0 (greedy)" : "") +
                           (sent ? ", not " + sent->dump() : std::string()),
                       field);
  }
  VOLTAD_API_TRY(parse_stop(f, r.stop));
  VOLTAD_API_TRY(f.get("stream", r.stream));
  VOLTAD_API_TRY(f.get("ignore_eos", r.ignore_eos));
  if (const Json* so = f.find("stream_options"); so && !so->is_null()) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    if (!r.stream)  // as OpenAI answers
      return bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
    auto iu = so->find("include_usage");
    if (iu != so->end() && !iu->is_null()) {
      if (!iu->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *iu);
      r.include_usage = iu->get<bool>();
    }
  }
  // Features that would silently change the answer's meaning are refused, not ignored.
  if (const Json* tools = f.find("tools"); tools && !(tools->is_array() && tools->empty()))
    return bad_request("'tools' are not supported by this server", "tools");
  if (const Json* rf = f.find("response_format")) {
    bool text = false;  // a "type" that is not a string is refused, not thrown on
    if (rf->is_object()) {
      const auto type = rf->find("type");
      text = type != rf->end() && type->is_string() && type->get_ref<const std::string&>() == "text";
    }
    if (!text)
      return bad_request("'response_format' other than {\"type\": \"text\"} is not supported",
                         "response_format");
  }
  VOLTAD_API_TRY(parse_logprobs(f, r));
  if (const Json* fn = f.find("functions");
      fn && !fn->is_null() && !(fn->is_array() && fn->empty()))
    return bad_request("'functions' are not supported by this server", "functions");
  // Only the choices that need no tool: "none", and "auto" (with no tools, none is called).
  for (const char* name : {"tool_choice", "function_call"}) {
    const Json* choice = f.find(name);
    if (choice && !choice->is_null() &&
        !(choice->is_string() && (*choice == "none" || *choice == "auto")))
      return bad_request("'" + std::string(name) + "' can only be \"none\" or \"auto\": this " +
                             "server calls no tools",
                         name);
  }
  if (const Json* mod = f.find("modalities"); mod && !mod->is_null()) {
    if (!mod->is_array()) return wrong_type("modalities", "an array of strings", *mod);
    for (const Json& m : *mod)
      if (!(m.is_string() && m == "text"))
        return bad_request("'modalities' can only be [\"text\"]: this model writes text only",
                           "modalities");
  }
  if (const Json* audio = f.find("audio"); audio && !audio->is_null())
    return bad_request("'audio' output is not supported: this model writes text only", "audio");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_chat_completion(std::string_view body, CompletionRequest& out) {
  Json object;
  VOLTAD_API_TRY(parse_object(body, object));
  out = CompletionRequest{};
  out.kind = CompletionRequest::Kind::Chat;
  VOLTAD_API_TRY(parse_messages(object, out.messages));
  return parse_common(object, out);
}

std::optional<ApiError> parse_text_completion(std::string_view body, CompletionRequest& out) {
  Json object;
  VOLTAD_API_TRY(parse_object(body, object));
  out = CompletionRequest{};
  out.kind = CompletionRequest::Kind::Text;
  auto it = object.find("prompt");
  if (it == object.end() || it->is_null()) return bad_request("'prompt' is required", "prompt");
  const Json& p = *it;
  if (p.is_string()) {
    out.prompt = p.get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    out.prompt = p[0].get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string at = "prompt[" + std::to_string(i) + "]";
      if (!p[i].is_number()) return wrong_type(at, "a token id", p[i]);
      const std::optional<int32_t> t = token_id(p[i]);
      if (!t)
        return bad_request("'" + at + "' is not a token id (a whole number from 0 to " +
                               std::to_string(INT32_MAX) + "), it is " + p[i].dump(),
                           "prompt");
      out.prompt_tokens.push_back(*t);
    }
  } else if (p.is_array() && p.size() > 1 && (p[0].is_string() || p[0].is_array())) {
    return bad_request("'prompt' holds several prompts; send one per request", "prompt");
  } else if (p.is_array() && p.empty()) {
    return bad_request("'prompt' is an empty array; send a string or at least one token id",
                       "prompt");
  } else if (p.is_array() && !p[0].is_array()) {
    return wrong_type("prompt[0]", "a string or a token id", p[0]);
  } else {
    return wrong_type("prompt", "a string, or an array of token ids", p);
  }
  Fields f(object);
  bool echo = false;
  VOLTAD_API_TRY(f.get("echo", echo));
  if (echo) return bad_request("'echo' is not supported by this server", "echo");
  std::string suffix;
  VOLTAD_API_TRY(f.get("suffix", suffix));
  if (!suffix.empty())
    return bad_request("'suffix' (insertion) is not supported by this server", "suffix");
  return parse_common(object, out);
}

std::optional<ApiError> parse_tokenize(std::string_view body, TokenizeRequest& out) {
  Json object;
  VOLTAD_API_TRY(parse_object(body, object));
  out = TokenizeRequest{};
  Fields f(object);
  VOLTAD_API_TRY(f.get("model", out.model));
  VOLTAD_API_TRY(f.get("add_special", out.add_special));
  if (const Json* p = f.find("prompt")) {
    if (f.find("messages")) return bad_request("give 'prompt' or 'messages', not both", "messages");
    if (!p->is_string()) return wrong_type("prompt", "a string", *p);
    out.prompt = p->get<std::string>();
    return std::nullopt;
  }
  if (f.find("messages")) return parse_messages(object, out.messages);
  return bad_request("'prompt' (a string) or 'messages' is required", "prompt");
}

std::optional<ApiError> parse_detokenize(std::string_view body, DetokenizeRequest& out) {
  Json object;
  VOLTAD_API_TRY(parse_object(body, object));
  out = DetokenizeRequest{};
  Fields f(object);
  VOLTAD_API_TRY(f.get("model", out.model));
  const Json* tokens = f.find("tokens");
  if (!tokens) return bad_request("'tokens' is required", "tokens");
  if (!tokens->is_array()) return wrong_type("tokens", "an array of token ids", *tokens);
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::optional<int32_t> t = token_id((*tokens)[i]);
    if (!t)
      return bad_request("'tokens[" + std::to_string(i) +
                             "]' must be a token id (a whole number from 0 to " +
                             std::to_string(INT32_MAX) + "), not " + (*tokens)[i].dump(),
                         "tokens");
    out.tokens.push_back(*t);
  }
  return std::nullopt;
}

std::string percent_decoded(std::string_view segment) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '%' && i + 2 < segment.size() && hex(segment[i + 1]) >= 0 &&
        hex(segment[i + 2]) >= 0) {
      out += char(hex(segment[i + 1]) * 16 + hex(segment[i + 2]));
      i += 2;
    } else {
      out += segment[i];
    }
  }
  return out;
}

}  // namespace voltad
