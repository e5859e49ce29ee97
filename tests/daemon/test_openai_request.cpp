// OpenAI request bodies -> native structs, and native results -> response
// bodies: every field, every wrong type naming its field, and the shapes the
// SDKs parse.
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "daemon/metrics.h"
#include "daemon/openai_request.h"
#include "daemon/openai_response.h"
#include "tests/engine/scheduler_fixture.h"

using namespace voltad;
using Json = nlohmann::json;

namespace {

CompletionRequest chat_ok(const std::string& body) {
  CompletionRequest r;
  auto e = parse_chat_completion(body, r);
  INFO(body);
  REQUIRE_MESSAGE(!e, (e ? e->message : ""));
  return r;
}

ApiError chat_error(const std::string& body) {
  CompletionRequest r;
  auto e = parse_chat_completion(body, r);
  INFO(body);
  REQUIRE(e.has_value());
  return *e;
}

}  // namespace

TEST_CASE("a full chat request maps onto the native struct") {
  auto r = chat_ok(R"({"model":"m","messages":[{"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]},
      {"role":"assistant","content":null}],
      "max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":42,
      "presence_penalty":0.5,"frequency_penalty":-0.5,"stop":["\n","END"],"stream":true,
      "stream_options":{"include_usage":true},"n":1,"user":"ignored","logprobs":false})");
  CHECK(r.kind == CompletionRequest::Kind::Chat);
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].content == "hel\nlo");  // parts joined by a line break
  CHECK(r.messages[2].content.empty());
  CHECK(r.max_tokens == 7);
  CHECK(r.sampling.temperature == doctest::Approx(0.5));
  CHECK(r.sampling.top_p == doctest::Approx(0.9));
  CHECK(r.sampling.top_k == 40);
  CHECK(r.sampling.min_p == doctest::Approx(0.1));
  CHECK(r.sampling.seed == 42u);
  CHECK(r.sampling.presence_penalty == doctest::Approx(0.5));
  CHECK(r.sampling.frequency_penalty == doctest::Approx(-0.5));
  CHECK(r.stop == std::vector<std::string>{"\n", "END"});
  CHECK(r.stream);
  CHECK(r.include_usage);
}

TEST_CASE("defaults: no max_tokens, temperature 1, no stop; null is absent") {
  auto r = chat_ok(
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":null,"stop":null,"seed":null})");
  CHECK_FALSE(r.max_tokens.has_value());
  CHECK(r.sampling.temperature == 1.0f);
  CHECK(r.stop.empty());
  CHECK_FALSE(r.sampling.seed.has_value());
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":3})")
            .max_tokens == 3);
  // Below 1: named, with the field the value came from.
  CHECK(chat_error(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-3})")
            .message == "'max_completion_tokens' must be at least 1, not -3");
  // However large: the context check refuses it later, with the number.
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":100000000000})")
            .max_tokens == int64_t(100000000000));
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}],"stop":"##"})").stop ==
        std::vector<std::string>{"##"});
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}],"top_k":-1})").sampling.top_k == 0);
  // top_p 0 (OpenAI takes it): the likeliest token only, i.e. greedy.
  auto greedy = chat_ok(R"({"messages":[{"role":"user","content":"x"}],"top_p":0})");
  CHECK(greedy.sampling.temperature == 0.0f);
  CHECK(greedy.sampling.top_p == 1.0f);
  auto biased = chat_ok(
      R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"28":100,"7":-1.5,"0":-100}})");
  REQUIRE(biased.sampling.logit_bias.size() == 3);
  std::map<int32_t, float> bias(biased.sampling.logit_bias.begin(),
                                biased.sampling.logit_bias.end());
  CHECK(bias == std::map<int32_t, float>{{0, -100.0f}, {7, -1.5f}, {28, 100.0f}});
  // What changes nothing is accepted: no tools to call, text out, empty maps.
  chat_ok(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"none","tools":[],)"
          R"("function_call":"auto","logit_bias":{},"functions":[],"modalities":["text"],)"
          R"("top_logprobs":null,"audio":null,"user":"u1"})");
  // Text parts are separate pieces: joined with a line break.
  auto parts = chat_ok(R"({"messages":[{"role":"user","content":[{"type":"text","text":"Hello"},)"
                       R"({"type":"text","text":"world"}]}]})");
  CHECK(parts.messages[0].content == "Hello\nworld");
}

TEST_CASE("a path segment's escapes decoded (GET /v1/models/{id})") {
  CHECK(percent_decoded("HuggingFaceTB%2FSmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M");
  CHECK(percent_decoded("a%2fb%20c") == "a/b c");
  CHECK(percent_decoded("plain") == "plain");
  CHECK(percent_decoded("100%") == "100%");
  CHECK(percent_decoded("%zz%4") == "%zz%4");
  CHECK(percent_decoded("%41%") == "A%");
}

TEST_CASE("every wrong type or value is a 400 naming its field") {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":{}})", "messages"},
      {R"({"messages":[5]})", "messages[0]"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"tool","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2.5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"1"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":101})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":1.5})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":-0.5})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"min_p":2})", "min_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":3})", "presence_penalty"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop[0]"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":1})", "stream"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":"y"}})",
       "stream_options.include_usage"},
      // As OpenAI: stream_options without a stream.
      {R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})",
       "stream_options"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":3})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})", "tools"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":"yes"})", "logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":1})", "logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
       "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":-1})",
       "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":false,"top_logprobs":0})",
       "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"best_of":2})", "best_of"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})",
       "response_format"},
      // A type that is not a string, or none: refused, not thrown on.
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":5}})",
       "response_format"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":null}})",
       "response_format"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{}})", "response_format"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":"text"})",
       "response_format"},
      // What would change the answer is refused, not ignored.
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs"},
      // logit_bias: token ids (as strings) to numbers in [-100, 100].
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"28":101}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"28":"5"}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"a":5}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"-3":5}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"3x":5}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"7":5,"07":-5}})",
       "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"+7":5}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"":5}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"99999999999":5}})",
       "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":[1,2]})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]})", "functions"},
      {R"({"messages":[{"role":"user","content":"x"}],"function_call":{"name":"f"}})",
       "function_call"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function"}})",
       "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"modalities":["text","audio"]})",
       "modalities"},
      {R"({"messages":[{"role":"user","content":"x"}],"modalities":"text"})", "modalities"},
      {R"({"messages":[{"role":"user","content":"x"}],"audio":{"voice":"alloy"}})", "audio"},
  };
  for (const Case& c : cases) {
    ApiError e = chat_error(c.body);
    CAPTURE(c.body);
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
    CHECK(e.message.find(c.param) != std::string::npos);
    CHECK(e.type == "invalid_request_error");
  }
}

// A whole number written as a float (5.0, 1e2: Python's json.dumps of a
// float) is that integer; a fraction is refused as one, a huge one as out
// of range, each said as such.
TEST_CASE("integer fields: whole floats taken, fractions and huge values said for what they are") {
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  CompletionRequest r;
  REQUIRE_FALSE(parse_chat_completion(chat + R"("max_tokens":5.0,"seed":1e2})", r));
  CHECK(r.max_tokens == 5);
  CHECK(r.sampling.seed == 100);
  const ApiError fraction = chat_error(chat + R"("max_tokens":2.5})");
  CHECK(fraction.message.find("must be an integer, not a number with a fraction") !=
        std::string::npos);
  for (const char* huge : {R"("seed":184467440737095516150})", R"("seed":9223372036854775808.0})",
                           R"("seed":9223372036854775808})", R"("seed":18446744073709551615})"}) {
    const ApiError e = chat_error(chat + huge);
    CAPTURE(std::string(huge));
    CHECK(e.status == 400);
    CHECK_MESSAGE(e.message.find("must be between") != std::string::npos, e.message);
    CHECK(e.message.find("fraction") == std::string::npos);
  }
  CHECK(chat_error(chat + R"("max_tokens":-3.0})").message.find("at least 1, not -3") !=
        std::string::npos);
  // A count past int64_t is past every context's room: taken as the
  // largest, which the router refuses as context_length_exceeded with the
  // numbers (not as a range of int64_t's bounds); a negative one is below 1.
  for (const char* huge :
       {R"("max_tokens":1e300})", R"("max_tokens":1e23})", R"("max_tokens":18446744073709551615})",
        R"("max_completion_tokens":9223372036854775808.0})"}) {
    CAPTURE(std::string(huge));
    REQUIRE_FALSE(parse_chat_completion(chat + huge, r));
    CHECK(r.max_tokens == INT64_MAX);
  }
  const ApiError below = chat_error(chat + R"("max_tokens":-1e23})");
  CHECK_MESSAGE(
      below.message.find("'max_tokens' must be at least 1, not -9.99") != std::string::npos,
      below.message);
  // A whole float in a field that is not a number is "a number", not one
  // with a fraction.
  CHECK(chat_error(chat + R"("stream":1.0})").message.find("not a number") != std::string::npos);
}

// At most 16 stop strings of at most 1,024 bytes each, whether `stop` is
// one string or a list (docs/API.md).
// Messages that say what is wrong: a key with leading zeros is a whole
// number, only not written as the id; top_p's 0 (greedy) is in range.
TEST_CASE("errors for logit_bias keys and top_p say what would do") {
  const ApiError zeros =
      chat_error(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"05":1}})");
  CHECK(zeros.message.find("'05' is not written as a token id (5, with no leading zeros)") !=
        std::string::npos);
  const ApiError word =
      chat_error(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"a":1}})");
  CHECK(word.message.find("'a' is not a token id (a whole number)") != std::string::npos);
  const ApiError top_p = chat_error(R"({"messages":[{"role":"user","content":"x"}],"top_p":1.5})");
  CHECK(top_p.message == "'top_p' must be in (0, 1], or 0 (greedy), not 1.5");
  const ApiError temperature =
      chat_error(R"({"messages":[{"role":"user","content":"x"}],"temperature":-1})");
  CHECK(temperature.param == "temperature");
  CHECK(temperature.message == "'temperature' must be between 0 and 100, not -1");
}

TEST_CASE("stop strings: their number and length are limited, alone or in a list") {
  auto body = [](const std::string& stop) {
    return R"({"messages":[{"role":"user","content":"x"}],"stop":)" + stop + "}";
  };
  const std::string fits(1024, 'a'), over(1025, 'a');
  CHECK(chat_ok(body('"' + fits + '"')).stop == std::vector<std::string>{fits});
  CHECK(chat_ok(body("[\"" + fits + "\"]")).stop == std::vector<std::string>{fits});
  for (const std::string& stop : {'"' + over + '"', "[\"x\",\"" + over + "\"]"}) {
    const ApiError e = chat_error(body(stop));
    CHECK(e.status == 400);
    CHECK(e.param == "stop");
    CHECK(e.message.find("1024 bytes") != std::string::npos);
  }
  std::string sixteen = "[", seventeen;
  for (int i = 0; i < 16; ++i)
    sixteen += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  seventeen = sixteen + ",\"s16\"]";
  sixteen += "]";
  CHECK(chat_ok(body(sixteen)).stop.size() == 16);
  CHECK(chat_error(body(seventeen)).param == "stop");
}

TEST_CASE("bodies that are not JSON objects") {
  CHECK(chat_error("{").code == "invalid_json");
  CHECK(chat_error("").code == "invalid_json");
  // No body (sent without Content-Length, which HTTP reads as none): said.
  for (const char* none : {"", " \r\n"})
    CHECK(chat_error(none).message.find("the request has no body: send the JSON object with a "
                                        "Content-Length header") != std::string::npos);
  CHECK(chat_error("[1,2]").message.find("JSON object") != std::string::npos);
  CHECK(chat_error(std::string(1000, '[')).message.find("nests deeper") != std::string::npos);
  CHECK(chat_error(std::string(1000, '[')).code == "invalid_json");  // as the other bad bodies
  CHECK(chat_error("\"\xff\"").status == 400);
  // Found by the fuzzer: a number too large for a double threw out_of_range.
  CHECK(chat_error(R"({"messages":[{"role":"user","content":"x"}],"top_p":7e7777777777})").status ==
        400);
  CHECK(chat_error(R"({"messages":[{"role":"user","content":"x"}],"top_p":1e38})").param ==
        "top_p");
}

TEST_CASE("text completion prompts: a string, one string in a list, or token ids") {
  CompletionRequest r;
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":"abc"})", r));
  CHECK(r.prompt == "abc");
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":["abc"],"ignore_eos":true})", r));
  CHECK(r.prompt == "abc");
  CHECK(r.ignore_eos);
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":[1,2,3]})", r));
  CHECK(r.prompt_tokens == std::vector<int32_t>{1, 2, 3});
  CHECK(parse_text_completion(R"({"prompt":["a","b"]})", r)->param == "prompt");
  CHECK(parse_text_completion(R"({"prompt":[1,"b"]})", r)->param == "prompt[1]");
  CHECK(parse_text_completion(R"({"prompt":[-1]})", r)->param == "prompt");
  // Token ids written as whole floats (Python's json.dumps of a float) are
  // those ids, as the integer fields take them; a fraction is said to be one.
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":[2.0,5,1e1]})", r));
  CHECK(r.prompt_tokens == std::vector<int32_t>{2, 5, 10});
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":[2.0]})", r));
  CHECK(r.prompt_tokens == std::vector<int32_t>{2});
  auto fraction = parse_text_completion(R"({"prompt":[2,2.5]})", r);
  REQUIRE(fraction);
  CHECK_MESSAGE(fraction->message.find("'prompt[1]' is not a token id") != std::string::npos,
                fraction->message);
  CHECK(fraction->message.find("2.5") != std::string::npos);
  // A list of something else is named by its first element, not taken for
  // several prompts.
  auto flag = parse_text_completion(R"({"prompt":[true,3]})", r);
  REQUIRE(flag);
  CHECK(flag->param == "prompt[0]");
  CHECK(flag->message.find("several") == std::string::npos);
  CHECK(parse_text_completion(R"({"prompt":[[1],[2]]})", r)->message.find("several prompts") !=
        std::string::npos);
  CHECK(parse_text_completion(R"({"prompt":5})", r)->param == "prompt");
  // An empty list is said to be empty (not "not an array": it is one).
  auto empty = parse_text_completion(R"({"prompt":[]})", r);
  REQUIRE(empty);
  CHECK(empty->param == "prompt");
  CHECK(empty->message.find("empty array") != std::string::npos);
  CHECK(parse_text_completion(R"({})", r)->param == "prompt");
  CHECK(parse_text_completion(R"({"prompt":"x","echo":true})", r)->param == "echo");
  CHECK(parse_text_completion(R"({"prompt":"x","best_of":2})", r)->param == "best_of");
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":"x","logprobs":null,"best_of":1})", r));
  CHECK(r.logprobs == -1);
}

// Chat: logprobs true, top_logprobs 0-20 beside it; text completions:
// logprobs N (0-20), false or null for none.
TEST_CASE("logprobs requests: chat's two fields, completions' count") {
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}]})").logprobs == -1);
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}],"logprobs":false})").logprobs == -1);
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})").logprobs == 0);
  CHECK(chat_ok(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20})")
            .logprobs == 20);
  CompletionRequest r;
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":"x","logprobs":0})", r));
  CHECK(r.logprobs == 0);
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":"x","logprobs":5})", r));
  CHECK(r.logprobs == 5);
  REQUIRE_FALSE(parse_text_completion(R"({"prompt":"x","logprobs":false})", r));
  CHECK(r.logprobs == -1);
  CHECK(parse_text_completion(R"({"prompt":"x","logprobs":21})", r)->param == "logprobs");
  CHECK(parse_text_completion(R"({"prompt":"x","logprobs":true})", r)->param == "logprobs");
  CHECK(parse_text_completion(R"({"prompt":"x","top_logprobs":2})", r)->param == "top_logprobs");
}

TEST_CASE("tokenize and detokenize bodies") {
  TokenizeRequest t;
  REQUIRE_FALSE(parse_tokenize(R"({"prompt":"hi","add_special":false})", t));
  CHECK(t.prompt == "hi");
  CHECK_FALSE(t.add_special);
  REQUIRE_FALSE(parse_tokenize(R"({"messages":[{"role":"user","content":"hi"}]})", t));
  CHECK(t.messages.size() == 1);
  CHECK(parse_tokenize(R"({})", t)->param == "prompt");
  // Both: which one to count is the caller's to say, not taken silently.
  auto both = parse_tokenize(R"({"prompt":"hi","messages":[{"role":"user","content":"x"}]})", t);
  REQUIRE(both);
  CHECK(both->message.find("not both") != std::string::npos);
  DetokenizeRequest d;
  REQUIRE_FALSE(parse_detokenize(R"({"tokens":[1,2]})", d));
  CHECK(d.tokens == std::vector<int32_t>{1, 2});
  CHECK(parse_detokenize(R"({"tokens":[1,"x"]})", d)->param == "tokens");
  REQUIRE_FALSE(parse_detokenize(R"({"tokens":[2.0,3]})", d));
  CHECK(d.tokens == std::vector<int32_t>{2, 3});
  CHECK(parse_detokenize(R"({"tokens":[0.5]})", d)->message.find("not 0.5") != std::string::npos);
  CHECK(parse_detokenize(R"({"tokens":7})", d)->param == "tokens");
}

TEST_CASE("response shapes: full, streamed chunks, usage, errors") {
  StreamEvent last;
  last.done = true;
  last.end = EndReason::Length;
  last.prompt_tokens = 5;
  last.completion_tokens = 3;
  CompletionFormatter chat(CompletionRequest::Kind::Chat, "chatcmpl-1", "m", 100);
  Json full = Json::parse(chat.response("hi", {}, last));
  CHECK(full["object"] == "chat.completion");
  CHECK(full["choices"][0]["message"]["content"] == "hi");
  CHECK(full["choices"][0]["finish_reason"] == "length");
  CHECK(full["usage"]["total_tokens"] == 8);

  auto data_of = [](const std::string& event) {
    REQUIRE(event.rfind("data: ", 0) == 0);
    REQUIRE(event.size() >= 8);
    REQUIRE(event.substr(event.size() - 2) == "\n\n");
    return Json::parse(event.substr(6, event.size() - 8));
  };
  CHECK(data_of(chat.first_chunk())["choices"][0]["delta"]["role"] == "assistant");
  CHECK(data_of(chat.text_chunk("x"))["choices"][0]["delta"]["content"] == "x");
  std::string tail = chat.final_chunks(last, false);
  CHECK(tail.substr(tail.size() - 14) == "data: [DONE]\n\n");
  Json finish = data_of(tail.substr(0, tail.find("\n\n") + 2));
  CHECK(finish["choices"][0]["finish_reason"] == "length");
  CHECK(finish["usage"]["completion_tokens"] == 3);
  std::string with_usage = chat.final_chunks(last, true);
  size_t second = with_usage.find("\n\n") + 2;
  Json usage = data_of(with_usage.substr(second, with_usage.find("\n\n", second) + 2 - second));
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["prompt_tokens"] == 5);

  CompletionFormatter text(CompletionRequest::Kind::Text, "cmpl-1", "m", 100);
  CHECK(text.first_chunk().empty());
  CHECK(data_of(text.text_chunk("y"))["choices"][0]["text"] == "y");
  CHECK(Json::parse(text.response("t", {}, last))["object"] == "text_completion");

  ApiError e = bad_request("bad", "max_tokens", "c");
  Json err = Json::parse(error_body(e));
  CHECK(err["error"]["message"] == "bad");
  CHECK(err["error"]["param"] == "max_tokens");
  CHECK(err["error"]["code"] == "c");
  CHECK(err["error"]["type"] == "invalid_request_error");
  CHECK(Json::parse(error_body(ApiError{}))["error"]["param"].is_null());
  CHECK(new_completion_id(CompletionRequest::Kind::Chat).rfind("chatcmpl-", 0) == 0);
}

// The tokens spelled by the model's tokenizer: text (U+FFFD where a token
// is part of a character) and exact bytes; OpenAI's two shapes.
TEST_CASE("logprobs in responses: chat's content list, completions' four lists") {
  const Tokenizer& tok = *voltad::test::fixture().tokenizer;
  const int32_t a = *tok.find_token("H"), b = *tok.find_token("in");
  const int32_t partial = 186;  // one byte of a character: no text alone
  REQUIRE(tok.token_piece(partial).size() == 1);
  const int byte = int(static_cast<unsigned char>(tok.token_piece(partial)[0]));
  REQUIRE(byte >= 0x80);
  std::vector<TokenLogprob> lps(3);
  lps[0] = {a, -0.5f, {{a, -0.5f}, {b, -1.5f}}, 0};
  lps[1] = {b, -2.0f, {{a, -0.25f}, {b, -2.0f}}, 1};
  lps[2] = {partial, -3.0f, {{partial, -3.0f}, {a, -4.0f}}, 3};
  StreamEvent last;
  last.done = true;
  last.completion_tokens = 3;

  CompletionFormatter chat(CompletionRequest::Kind::Chat, "chatcmpl-1", "m", 100, &tok);
  Json content = Json::parse(chat.response("Hin", lps, last))["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 3);
  CHECK(content[0]["token"] == "H");
  CHECK(content[0]["logprob"] == -0.5);
  CHECK(content[0]["bytes"] == Json::array({int('H')}));
  CHECK(content[0]["top_logprobs"].size() == 2);
  CHECK(content[0]["top_logprobs"][1]["token"] == "in");
  CHECK(content[0]["top_logprobs"][1]["logprob"] == -1.5);
  CHECK(content[2]["token"] == "\xef\xbf\xbd");  // U+FFFD
  CHECK(content[2]["bytes"] == Json::array({byte}));
  // Streamed: the chunk's tokens; without logprobs asked for, null.
  auto data_of = [](const std::string& event) { return Json::parse(event.substr(6)); };
  Json chunk = data_of(chat.text_chunk("in", {lps[1]}));
  CHECK(chunk["choices"][0]["logprobs"]["content"][0]["token"] == "in");
  CompletionFormatter plain(CompletionRequest::Kind::Chat, "chatcmpl-2", "m", 100);
  CHECK(data_of(plain.text_chunk("in", {lps[1]}))["choices"][0]["logprobs"].is_null());
  CHECK(Json::parse(plain.response("Hin", lps, last))["choices"][0]["logprobs"].is_null());
  // The last event's tokens ride on a text chunk before the finish.
  StreamEvent tail = last;
  tail.logprobs = {lps[2]};
  const std::string end = chat.final_chunks(tail, false);
  CHECK(data_of(end.substr(0, end.find("\n\n")))["choices"][0]["logprobs"]["content"][0]["bytes"] ==
        Json::array({byte}));

  CompletionFormatter text(CompletionRequest::Kind::Text, "cmpl-1", "m", 100, &tok);
  Json lp = Json::parse(text.response("Hin", lps, last))["choices"][0]["logprobs"];
  // A token that is not UTF-8 is spelled by its bytes, as OpenAI's are.
  static const char* hex = "0123456789abcdef";
  const std::string spelled = std::string("bytes:\\x") + hex[byte >> 4] + hex[byte & 15];
  CHECK(lp["tokens"] == Json::array({"H", "in", spelled}));
  CHECK(lp["token_logprobs"] == Json::array({-0.5, -2.0, -3.0}));
  CHECK(lp["top_logprobs"][1] == Json({{"H", -0.25}, {"in", -2.0}}));
  CHECK(lp["top_logprobs"][2] == Json({{spelled, -3.0}, {"H", -4.0}}));
  CHECK(lp["text_offset"] == Json::array({0, 1, 3}));
  // Likeliest first in the text, and the chosen token always among them.
  std::vector<TokenLogprob> unlikely = {{b, -5.0f, {{a, -0.125f}}, 0}};
  const std::string body = text.response("in", unlikely, last);
  CHECK(body.find(R"("top_logprobs":[{"H":-0.125,"in":-5.0}])") != std::string::npos);
  CHECK(Json::parse(body)["choices"][0]["logprobs"]["top_logprobs"][0] ==
        Json({{"H", -0.125}, {"in", -5.0}}));
}

TEST_CASE("metrics exposition: cumulative buckets, sum and count, escaped labels") {
  Metrics m;
  m.on_first_token(0.003, 5);
  m.on_first_token(0.2, 7);
  m.on_first_token(100, 0);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/x\"y", 404);
  MetricsSnapshot s;
  s.state = "ready";
  s.info = {{"model", "a\"b"}};
  std::string text = m.render(s);
  CHECK(text.find("voltad_time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n") !=
        std::string::npos);
  CHECK(text.find("voltad_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("voltad_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n") !=
        std::string::npos);
  CHECK(text.find("voltad_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n") !=
        std::string::npos);
  CHECK(text.find("voltad_time_to_first_token_seconds_count 3\n") != std::string::npos);
  CHECK(text.find("voltad_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n") !=
        std::string::npos);
  CHECK(text.find("endpoint=\"/x\\\"y\"") != std::string::npos);
  CHECK(text.find("voltad_info{model=\"a\\\"b\"} 1\n") != std::string::npos);
  CHECK(text.find("voltad_health_state{state=\"ready\"} 1\n") != std::string::npos);
  CHECK(text.find("# TYPE voltad_inter_token_latency_seconds histogram\n") != std::string::npos);
  // Prompt tokens count at the first token, not again at the end.
  CHECK(text.find("voltad_prompt_tokens_total 12\n") != std::string::npos);
  StreamEvent last;
  last.done = true;
  last.prompt_tokens = 5;
  last.completion_tokens = 4;
  m.on_finished(last);
  text = m.render(s);
  CHECK(text.find("voltad_prompt_tokens_total 12\n") != std::string::npos);
  CHECK(text.find("voltad_generated_tokens_total 4\n") != std::string::npos);
}

// An assistant turn's tool calls cannot be fed to the model and would be
// dropped unseen: refused, as tools are, whatever the content beside them.
TEST_CASE("earlier tool calls in the messages are refused, not dropped") {
  for (const char* msg : {R"({"role":"assistant","content":null,"tool_calls":[{"id":"1"}]})",
                          R"({"role":"assistant","content":"x","tool_calls":[{"id":"1"}]})",
                          R"({"role":"assistant","function_call":{"name":"f"}})"}) {
    CAPTURE(std::string(msg));
    const ApiError e =
        chat_error(std::string(R"({"messages":[{"role":"user","content":"hi"},)") + msg + "]}");
    CHECK(e.status == 400);
    CHECK(e.param.rfind("messages[1].", 0) == 0);
    CHECK(e.message.find("tool calls are not supported") != std::string::npos);
  }
  // Empty or null: nothing is dropped.
  CHECK(chat_ok(R"({"messages":[{"role":"assistant","content":"x","tool_calls":[]},)"
                R"({"role":"user","content":"hi","tool_calls":null}]})")
            .messages.size() == 2);
}
