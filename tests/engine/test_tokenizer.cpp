// Conformance of the tokenizer with Hugging Face `tokenizers` on the real
// Llama 3, Qwen3 and SmolLM2 vocabularies (fixtures from
// scripts/gen_tokenizer_fixtures.py), round trips and streaming decode.
#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <sstream>

#include "engine/generate.h"
#include "engine/utf8.h"
#include "test_tokenizer_support.h"

using namespace voltad;
using voltad::test::load_tokenizer_fixture;
using voltad::test::shared_tokenizer;

namespace {

std::string ids_string(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str();
}

// Every corpus string, with and without special-token parsing, must give
// exactly the reference ids. Prints each mismatch with both id lists.
void check_conformance(const std::string& name) {
  const Tokenizer* tok = shared_tokenizer(name);
  if (!tok) {
    MESSAGE(
        "SmolLM2 GGUF not found (set VOLTAD_DEMO_MODEL or run scripts/fetch-demo-model.sh): "
        "skipping "
        << name);
    return;
  }
  nlohmann::json fixture = load_tokenizer_fixture(name + "_encode.json");
  const auto& cases = fixture.at("cases");
  REQUIRE(cases.size() > 50);
  size_t mismatches = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    for (bool parse_special : {true, false}) {
      const auto expected = c.at(parse_special ? "ids" : "ids_plain").get<std::vector<int32_t>>();
      const auto got = tok->encode(text, /*add_bos=*/false, parse_special);
      if (got != expected) {
        ++mismatches;
        CHECK_MESSAGE(got == expected, name << " parse_special=" << parse_special
                                            << " text=" << nlohmann::json(text)
                                            << "\n  expected: " << ids_string(expected)
                                            << "\n  got:      " << ids_string(got));
      }
    }
  }
  CHECK(mismatches == 0);
}

// Bytes the vocabulary has no symbol for: encode drops them, as Hugging
// Face drops unknown characters (only SmolLM2 lacks some, e.g. 0x04, 0xFF).
std::string dropped_bytes(const Tokenizer& tok) {
  std::string dropped;
  for (int b = 0; b < 256; ++b)
    if (tok.encode(std::string(1, char(b)), false, false).empty()) dropped.push_back(char(b));
  return dropped;
}

std::string without(const std::string& s, const std::string& dropped) {
  std::string out;
  for (char c : s)
    if (dropped.find(c) == std::string::npos) out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE("Llama 3 tokenizer.json matches Hugging Face tokenizers") {
  check_conformance("llama3");
}
TEST_CASE("Qwen3 tokenizer.json matches Hugging Face tokenizers") {
  check_conformance("qwen3");
}
TEST_CASE("SmolLM2 GGUF tokenizer matches Hugging Face tokenizers") {
  check_conformance("smollm2");
}

TEST_CASE("decode(encode(s)) gives s back for every corpus string") {
  nlohmann::json fixture = load_tokenizer_fixture("llama3_encode.json");
  for (const std::string name : {"llama3", "qwen3", "smollm2"}) {
    const Tokenizer* tok = shared_tokenizer(name);
    if (!tok) continue;
    const std::string dropped = dropped_bytes(*tok);
    for (const auto& c : fixture.at("cases")) {
      const std::string text = c.at("text");
      // Qwen normalises to NFC first, so NFC text is what comes back.
      const std::string expected =
          without(tok->data().normalize_nfc ? nfc_normalize(text) : text, dropped);
      for (bool parse_special : {true, false}) {
        auto ids = tok->encode(text, false, parse_special);
        CHECK_MESSAGE(tok->decode(ids) == expected, name << " " << nlohmann::json(text));
      }
    }
  }
}

TEST_CASE("invalid UTF-8 is encoded through the byte tokens and decoded back unchanged") {
  // Stray continuation bytes, overlong forms, surrogates, truncated
  // sequences at the end and in the middle, bytes never used in UTF-8.
  const std::vector<std::string> inputs = {std::string("\x80"),
                                           std::string("abc\xff"),
                                           std::string("\xc0\xaf slash"),
                                           std::string("\xed\xa0\x80 surrogate"),
                                           std::string("tail \xf0\x9f\x98"),
                                           std::string("mid\xe4\xbd word"),
                                           std::string("\xfe\xfe\xff\xff"),
                                           std::string("ok \xc3\xa9 \xc3 bad"),
                                           std::string("12\x80"
                                                       "34"),
                                           std::string("<|im_end|>\x80<|eot_id|>\xf4\x90\x80\x80"),
                                           std::string(" \x85\xa0 ")};
  for (const std::string name : {"llama3", "qwen3", "smollm2"}) {
    const Tokenizer* tok = shared_tokenizer(name);
    if (!tok) continue;
    const std::string dropped = dropped_bytes(*tok);
    if (name != "smollm2") CHECK(dropped.empty());
    for (const std::string& s : inputs) {
      const std::string expected = without(s, dropped);
      for (bool parse_special : {true, false}) {
        auto ids = tok->encode(s, false, parse_special);
        CHECK_MESSAGE(ids.empty() == expected.empty(), name);
        for (int32_t id : ids) CHECK(size_t(id) < tok->vocab_size());
        CHECK_MESSAGE(tok->decode(ids) == expected, name << " " << ids_string(ids));
      }
    }
  }

  // Random bytes, biased towards UTF-8 lead and continuation bytes.
  std::mt19937 rng(1234);
  const Tokenizer* tok = shared_tokenizer("llama3");
  for (int round = 0; round < 300; ++round) {
    std::string s;
    size_t len = rng() % 40;
    for (size_t i = 0; i < len; ++i) {
      uint32_t r = rng() % 4;
      s.push_back(char(r == 0   ? 0x80 + rng() % 64
                       : r == 1 ? 0xC0 + rng() % 64
                       : r == 2 ? rng() % 128
                                : rng() % 256));
    }
    auto ids = tok->encode(s, false, true);
    CHECK(tok->decode(ids) == s);
  }
}

TEST_CASE("BOS is prepended only when asked for and the model has one") {
  const Tokenizer* llama = shared_tokenizer("llama3");
  REQUIRE(llama->bos() >= 0);
  CHECK(llama->find_token("<|begin_of_text|>") == llama->bos());
  auto with = llama->encode("Hi", true, false);
  auto without = llama->encode("Hi", false, false);
  REQUIRE(with.size() == without.size() + 1);
  CHECK(with[0] == llama->bos());
  CHECK(std::equal(without.begin(), without.end(), with.begin() + 1));

  const Tokenizer* qwen = shared_tokenizer("qwen3");
  CHECK(qwen->bos() == -1);  // Qwen has no BOS token
  CHECK(qwen->encode("Hi", true, false) == qwen->encode("Hi", false, false));
  CHECK_FALSE(qwen->data().add_bos);
}

// voltad-run encoded its prompt's control tokens as text where voltad's
// completions took them as tokens: the same prompt, two inputs.
TEST_CASE("a raw prompt: control tokens are tokens, BOS once where the file asks") {
  // As a Llama 3 GGUF says (tokenizer.json carries no add_bos_token).
  TokenizerData data = shared_tokenizer("llama3")->data();
  data.add_bos = true;
  auto made = Tokenizer::create(std::move(data));
  REQUIRE(made.ok());
  const Tokenizer* llama = &made.value();
  const auto eot = llama->find_token("<|eot_id|>");
  REQUIRE(eot);
  auto ids = llama->encode_raw_prompt("Hi<|eot_id|>");
  CHECK(ids.front() == llama->bos());
  CHECK(ids.back() == *eot);
  CHECK(ids == llama->encode("Hi<|eot_id|>", true, true));
  // A prompt that begins with BOS gets no second one.
  auto own = llama->encode_raw_prompt("<|begin_of_text|>Hi");
  CHECK(own == llama->encode("Hi", true, true));
  CHECK(std::count(own.begin(), own.end(), llama->bos()) == 1);
  // A model that asks for no BOS (Qwen) gets none.
  const Tokenizer* qwen = shared_tokenizer("qwen3");
  CHECK(qwen->encode_raw_prompt("<|im_start|>user") ==
        qwen->encode("<|im_start|>user", false, true));
  CHECK(qwen->encode_raw_prompt("<|im_start|>user").front() == qwen->find_token("<|im_start|>"));
}

TEST_CASE("end-of-generation tokens") {
  const Tokenizer* llama = shared_tokenizer("llama3");
  for (const char* t : {"<|eot_id|>", "<|end_of_text|>"}) {
    auto id = llama->find_token(t);
    REQUIRE_MESSAGE(id.has_value(), t);
    CHECK_MESSAGE(llama->is_end_of_generation(*id), t);
  }
  CHECK(llama->is_end_of_generation(llama->eos()));
  CHECK_FALSE(llama->is_end_of_generation(llama->bos()));
  CHECK_FALSE(llama->is_end_of_generation(*llama->find_token("<|start_header_id|>")));
  CHECK_FALSE(llama->is_end_of_generation(-1));
  CHECK_FALSE(llama->is_end_of_generation(int32_t(llama->vocab_size())));

  const Tokenizer* qwen = shared_tokenizer("qwen3");
  CHECK(qwen->is_end_of_generation(*qwen->find_token("<|im_end|>")));
  CHECK(qwen->is_end_of_generation(*qwen->find_token("<|endoftext|>")));
  CHECK_FALSE(qwen->is_end_of_generation(*qwen->find_token("<|im_start|>")));
  CHECK(qwen->eos() == *qwen->find_token("<|im_end|>"));  // from tokenizer_config.json
}

TEST_CASE("StreamDecoder never emits part of a character") {
  // Text whose characters are split across byte-level tokens: emoji and
  // ZWJ sequences, rare CJK, combining marks.
  const std::string text =
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 ok "
      "\xF0\x9F\xA6\x80\xF0\x9F\xAB\xA0 "
      "\xE9\xBE\x98\xE9\xBD\x89 \xF0\xA0\x80\x80 e\xCC\x81\xCC\xB2 "
      "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5";
  for (const std::string name : {"llama3", "qwen3", "smollm2"}) {
    const Tokenizer* tok = shared_tokenizer(name);
    if (!tok) continue;
    auto ids = tok->encode(text, false, false);
    StreamDecoder stream(*tok);
    std::string joined;
    size_t held_back = 0;
    for (int32_t id : ids) {
      std::string piece = tok->token_piece(id);
      std::string out = stream.push(id);
      CHECK(utf8_is_valid(out));
      if (!utf8_is_valid(piece)) ++held_back;
      joined += out;
    }
    std::string rest = stream.flush();
    CHECK(rest.empty());
    CHECK_MESSAGE(joined == (tok->data().normalize_nfc ? nfc_normalize(text) : text), name);
    // The text must really exercise the hold-back path.
    CHECK_MESSAGE(held_back > 0, name << ": no token split a character; the test text is too easy");
  }
}

TEST_CASE("StreamDecoder replaces bytes that can never form a character") {
  const Tokenizer* tok = shared_tokenizer("llama3");
  auto ids = tok->encode(std::string("a\xff"
                                     "b\xf0\x9f"),
                         false, false);
  StreamDecoder stream(*tok);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  CHECK(out ==
        "a\xEF\xBF\xBD"
        "b");                               // 0xFF -> U+FFFD, the emoji start held back
  CHECK(stream.flush() == "\xEF\xBF\xBD");  // ...and replaced when the stream ends
  CHECK(stream.flush().empty());
  CHECK(stream.push(-5).empty());  // an id out of range adds nothing
}

TEST_CASE("StreamDecoder shows no control token; user-defined tokens are text") {
  const Tokenizer* llama = shared_tokenizer("llama3");
  StreamDecoder a(*llama);
  std::string out = a.push(*llama->find_token("Hi"));
  out += a.push(*llama->find_token("<|eot_id|>"));
  out += a.push(*llama->find_token("<|start_header_id|>"));
  out += a.push(*llama->find_token("!"));
  CHECK(out == "Hi!");
  const Tokenizer* qwen = shared_tokenizer("qwen3");
  StreamDecoder q(*qwen);
  REQUIRE(qwen->token_type(*qwen->find_token("<think>")) == TokenType::UserDefined);
  out = q.push(*qwen->find_token("<|im_start|>"));
  out += q.push(*qwen->find_token("<think>"));
  out += q.push(*qwen->find_token("<|im_end|>"));
  CHECK(out == "<think>");
}

TEST_CASE("a control token adds no text but ends the answer where a stop string names it") {
  const Tokenizer* qwen = shared_tokenizer("qwen3");
  const int32_t marker = *qwen->find_token("<|im_start|>");
  REQUIRE(qwen->token_type(marker) == TokenType::Control);
  REQUIRE_FALSE(qwen->is_end_of_generation(marker));
  const auto run = [&](std::vector<std::string> stop) {
    StreamDecoder decoder(*qwen);
    StopStringFilter stops(std::move(stop));
    std::string out;
    for (int32_t id : qwen->encode("x = 1", false, false))
      out += answer_text(*qwen, decoder, stops, id);
    out += answer_text(*qwen, decoder, stops, marker);
    for (int32_t id : qwen->encode("y = 2", false, false))
      out += answer_text(*qwen, decoder, stops, id);
    if (!stops.stopped()) out += stops.finish(decoder.flush());
    return std::make_pair(out, stops.stopped());
  };
  // The stop names the marker: the answer ends before it; "x =" was held
  // back (a possible start of "x = 1!") and is released whole.
  CHECK(run({"<|im_start|>", "x = 1!"}) == std::make_pair(std::string("x = 1"), true));
  // No stop names it: the marker is dropped and the answer goes on.
  CHECK(run({"<|fim_pad|>"}) == std::make_pair(std::string("x = 1y = 2"), false));
}

TEST_CASE("loading a 150K vocabulary and encoding a few KB are fast") {
  const std::string dir = (voltad::test::tok_shared_dir() / "tokenizers" / "qwen3").string();
  auto t0 = std::chrono::steady_clock::now();
  auto data = tokenizer_data_from_hf_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  REQUIRE(data.ok());
  auto tok = Tokenizer::create(std::move(data.value()));
  REQUIRE(tok.ok());
  auto t1 = std::chrono::steady_clock::now();
  std::string text;
  nlohmann::json fixture = load_tokenizer_fixture("qwen3_encode.json");
  while (text.size() < 4096)
    for (const auto& c : fixture.at("cases")) text += c.at("text").get<std::string>();
  std::vector<int32_t> ids;
  for (int i = 0; i < 10; ++i) ids = tok->encode(text, false, true);
  auto t2 = std::chrono::steady_clock::now();
  double load_s = std::chrono::duration<double>(t1 - t0).count();
  double encode_ms = std::chrono::duration<double, std::milli>(t2 - t1).count() / 10;
  MESSAGE("qwen3 (" << tok->vocab_size() << " tokens): load " << load_s << " s, encode "
                    << text.size() << " bytes in " << encode_ms << " ms");
  // Generous bounds for a loaded 2-core CI machine; typical is several times less.
  CHECK(load_s < 3.0);
  CHECK(encode_ms < 50.0);
}
