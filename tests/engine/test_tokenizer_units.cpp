// The tokenizer on small hand-made vocabularies (merge order, ignore_merges,
// special-token splitting), the pre-tokenizers on random bytes, the GGUF
// glue (same ids as tokenizer.json for the same data) and the errors bad
// files and data get.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "engine/gguf_writer.h"
#include "engine/pre_tokenizer.h"
#include "test_tokenizer_support.h"

using namespace voltad;

namespace {

// The 256 byte symbols plus `extra` tokens (in byte-level text), with merges.
TokenizerData small_vocab(const std::vector<std::string>& extra,
                          const std::vector<std::string>& merges) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) d.tokens.push_back(byte_level_encode(std::string(1, char(b))));
  for (const auto& t : extra) d.tokens.push_back(t);
  d.merges = merges;
  return d;
}

Tokenizer make(TokenizerData d) {
  auto t = Tokenizer::create(std::move(d));
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
  return std::move(t.value());
}

std::vector<int32_t> ids_of(const Tokenizer& t, std::initializer_list<const char*> texts) {
  std::vector<int32_t> out;
  for (const char* s : texts) {
    auto id = t.find_token(s);
    REQUIRE_MESSAGE(id.has_value(), s);
    out.push_back(*id);
  }
  return out;
}

std::string error_of(const Result<Tokenizer>& r) {
  REQUIRE_FALSE(r.ok());
  return r.error().message;
}

}  // namespace

TEST_CASE("merges apply lowest rank first, leftmost among equals") {
  auto by_bc = make(small_vocab({"ab", "bc", "abc"}, {"b c", "a b", "ab c"}));
  CHECK(by_bc.encode("abc", false, false) == ids_of(by_bc, {"a", "bc"}));  // no "a bc" merge
  auto by_ab = make(small_vocab({"ab", "bc", "abc"}, {"a b", "b c", "ab c"}));
  CHECK(by_ab.encode("abc", false, false) == ids_of(by_ab, {"abc"}));
  auto aa = make(small_vocab({"aa"}, {"a a"}));
  CHECK(aa.encode("aaa", false, false) == ids_of(aa, {"aa", "a"}));
  CHECK(aa.encode("aaaa", false, false) == ids_of(aa, {"aa", "aa"}));
  // Pieces are merged separately: the space starts a new piece (GPT-2 regex).
  const std::string space = byte_level_encode(" ");
  CHECK(aa.encode("a a", false, false) == ids_of(aa, {"a", space.c_str(), "a"}));
}

TEST_CASE("ignore_merges emits a piece that is itself a token") {
  auto data = small_vocab({"xy", "xyz"}, {"x y"});
  CHECK(make(data).encode("xyz", false, false).size() == 2);  // xy + z: no merge makes xyz
  data.ignore_merges = true;
  auto t = make(data);
  CHECK(t.encode("xyz", false, false) == ids_of(t, {"xyz"}));
}

TEST_CASE("special tokens: longest match, control only when parsing specials") {
  auto data = small_vocab({"<|c|>", "<|c|>x", "<u>"}, {});
  data.token_types.assign(data.tokens.size(), int32_t(TokenType::Normal));
  data.token_types[256] = int32_t(TokenType::Control);
  data.token_types[257] = int32_t(TokenType::Control);
  data.token_types[258] = int32_t(TokenType::UserDefined);
  auto t = make(data);
  CHECK(t.encode("<|c|>xy", false, true) ==
        std::vector<int32_t>{257, t.encode("y", false, false)[0]});
  CHECK(t.encode("a<|c|>", false, true).back() == 256);
  auto plain = t.encode("<|c|><u>", false, false);
  CHECK(plain.back() == 258);  // user-defined: always parsed
  CHECK(std::find(plain.begin(), plain.end(), 256) == plain.end());
  CHECK(t.decode(plain) == "<|c|><u>");
  CHECK(t.token_type(256) == TokenType::Control);
  CHECK(t.token_type(9999) == TokenType::Undefined);
}

TEST_CASE("decode skips ids out of range; token_piece of one is empty") {
  auto t = make(small_vocab({}, {}));
  std::vector<int32_t> ids = {int32_t('h'), -1, 100000, int32_t('i')};
  CHECK(t.decode(ids) == "hi");
  CHECK(t.token_piece(-3).empty());
  CHECK(t.token_piece(int32_t(t.vocab_size())).empty());
  CHECK(t.encode("", true, true).empty());  // no BOS in this vocabulary
}

TEST_CASE("Tokenizer::create refuses inconsistent data with a message saying what") {
  auto bad_model = small_vocab({}, {});
  bad_model.model = "llama";
  CHECK(error_of(Tokenizer::create(bad_model)).find("\"llama\"") != std::string::npos);

  auto bad_pre = small_vocab({}, {});
  bad_pre.pre = "falcon";
  CHECK(error_of(Tokenizer::create(bad_pre)).find("falcon") != std::string::npos);

  CHECK(error_of(Tokenizer::create(small_vocab({}, {"a zz"}))).find("merge 0") !=
        std::string::npos);
  CHECK(error_of(Tokenizer::create(small_vocab({}, {"a b"}))).find("not in the vocabulary") !=
        std::string::npos);
  CHECK(error_of(Tokenizer::create(small_vocab({}, {"ab"}))).find("space") != std::string::npos);

  auto bad_types = small_vocab({}, {});
  bad_types.token_types = {1, 1};
  CHECK(error_of(Tokenizer::create(bad_types)).find("token types") != std::string::npos);

  auto bad_bos = small_vocab({}, {});
  bad_bos.bos_id = 256;
  CHECK(error_of(Tokenizer::create(bad_bos)).find("bos") != std::string::npos);

  TokenizerData few_bytes;
  few_bytes.model = "gpt2";
  few_bytes.pre = "gpt2";
  few_bytes.tokens = {"a", "b"};
  CHECK(error_of(Tokenizer::create(few_bytes)).find("bytes") != std::string::npos);
  few_bytes.tokens.clear();
  CHECK(error_of(Tokenizer::create(few_bytes)).find("no tokens") != std::string::npos);
}

TEST_CASE("pre-tokenizers cut any bytes into non-empty pieces that add up to the text") {
  std::mt19937 rng(99);
  const std::string alphabet[] = {"a",
                                  "Z",
                                  "1",
                                  "7",
                                  " ",
                                  "  ",
                                  "\t",
                                  "\n",
                                  "\r\n",
                                  "'",
                                  "'s",
                                  "'LL",
                                  "!",
                                  ".",
                                  "\xc3\xa9",
                                  "\xe4\xb8\xad",
                                  "\xf0\x9f\x98\x80",
                                  "\xd9\xa3",
                                  "\xcc\x81",
                                  "\xc2\xa0",
                                  "\xe3\x80\x80",
                                  "\x80",
                                  "\xff",
                                  "\xe2\x82"};
  for (PreTokenizer kind :
       {PreTokenizer::Llama3, PreTokenizer::Qwen2, PreTokenizer::SmolLM, PreTokenizer::Gpt2}) {
    for (int round = 0; round < 500; ++round) {
      std::string text;
      for (size_t n = rng() % 16; n > 0; --n) text += alphabet[rng() % std::size(alphabet)];
      std::vector<std::string_view> pieces;
      pre_tokenize(kind, text, pieces);
      std::string joined;
      for (auto p : pieces) {
        CHECK_FALSE(p.empty());
        joined += p;
      }
      REQUIRE_MESSAGE(joined == text, pre_tokenizer_name(kind));
    }
  }
}

TEST_CASE("pre-tokenizer digit grouping per family") {
  auto cut = [](PreTokenizer kind, std::string_view text) {
    std::vector<std::string_view> pieces;
    pre_tokenize(kind, text, pieces);
    return std::vector<std::string>(pieces.begin(), pieces.end());
  };
  using V = std::vector<std::string>;
  CHECK(cut(PreTokenizer::Llama3, "1234567") == V{"123", "456", "7"});
  CHECK(cut(PreTokenizer::Qwen2, "123") == V{"1", "2", "3"});
  CHECK(cut(PreTokenizer::Gpt2, " 123") == V{" 123"});
  CHECK(cut(PreTokenizer::SmolLM, " 123") == V{" ", "1", "2", "3"});
  CHECK(pre_tokenizer_from_name("llama-bpe").value() == PreTokenizer::Llama3);
  CHECK(pre_tokenizer_from_name("qwen2").value() == PreTokenizer::Qwen2);
  CHECK(pre_tokenizer_from_name("smollm").value() == PreTokenizer::SmolLM);
  CHECK(pre_tokenizer_from_name("gpt2").value() == PreTokenizer::Gpt2);
  CHECK_FALSE(pre_tokenizer_from_name("").ok());
}

TEST_CASE("GGUF metadata with the same data gives the same ids as tokenizer.json") {
  const std::string dir = (voltad::test::tok_shared_dir() / "tokenizers" / "llama3").string();
  auto hf = tokenizer_data_from_hf_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  REQUIRE(hf.ok());
  const TokenizerData& d = hf.value();

  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "llama-bpe");
  w.add_string_array("tokenizer.ggml.tokens", d.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", d.token_types);
  w.add_string_array("tokenizer.ggml.merges", d.merges);
  w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(d.bos_id));
  w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(d.eos_id));
  w.add_string("tokenizer.chat_template", d.chat_template);
  auto file = GgufFile::from_bytes(w.to_bytes(), "llama3-tokenizer.gguf");
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  auto from_gguf = tokenizer_data_from_gguf(*file.value());
  REQUIRE_MESSAGE(from_gguf.ok(), (from_gguf.ok() ? "" : from_gguf.error().message));
  CHECK(from_gguf->ignore_merges);  // the llama-bpe family sets it, as its tokenizer.json does
  CHECK(from_gguf->add_bos);        // llama.cpp's default for Llama 3 when the key is absent
  CHECK(from_gguf->chat_template == d.chat_template);
  Tokenizer a = make(std::move(from_gguf.value()));
  const Tokenizer* b = voltad::test::shared_tokenizer("llama3");
  nlohmann::json fixture = voltad::test::load_tokenizer_fixture("llama3_encode.json");
  for (const auto& c : fixture.at("cases")) {
    const std::string text = c.at("text");
    CHECK(a.encode(text, false, true) == b->encode(text, false, true));
    CHECK(a.encode(text, false, false) == c.at("ids_plain").get<std::vector<int32_t>>());
  }
}

TEST_CASE("bad GGUF tokenizer metadata is an error naming the key") {
  auto load = [](const std::function<void(GgufWriter&)>& fill) {
    GgufWriter w;
    fill(w);
    auto file = GgufFile::from_bytes(w.to_bytes(), "bad.gguf");
    REQUIRE(file.ok());
    auto data = tokenizer_data_from_gguf(*file.value());
    REQUIRE_FALSE(data.ok());
    return data.error().message;
  };
  const std::vector<std::string> tokens = {"a", "b", "ab"};
  CHECK(load([](GgufWriter&) {}).find("tokenizer.ggml.model") != std::string::npos);
  CHECK(load([](GgufWriter& w) { w.add_string("tokenizer.ggml.model", "llama"); }).find("gpt2") !=
        std::string::npos);
  CHECK(load([](GgufWriter& w) {
          w.add_string("tokenizer.ggml.model", "gpt2");
        }).find("tokenizer.ggml.pre") != std::string::npos);
  CHECK(load([](GgufWriter& w) {
          w.add_string("tokenizer.ggml.model", "gpt2");
          w.add_string("tokenizer.ggml.pre", "qwen2");
          w.add_u32("tokenizer.ggml.tokens", 3);
        }).find("tokenizer.ggml.tokens") != std::string::npos);
  CHECK(load([&](GgufWriter& w) {
          w.add_string("tokenizer.ggml.model", "gpt2");
          w.add_string("tokenizer.ggml.pre", "qwen2");
          w.add_string_array("tokenizer.ggml.tokens", tokens);
          w.add_string_array("tokenizer.ggml.merges", {"a b"});
          w.add_u32("tokenizer.ggml.eos_token_id", 7);
        }).find("tokenizer.ggml.eos_token_id") != std::string::npos);
}

TEST_CASE("bad tokenizer.json files are errors naming the file and the problem") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("voltad-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto load = [&](const std::string& json) {
    const std::string path = (dir / "tokenizer.json").string();
    std::ofstream(path) << json;
    auto r = tokenizer_data_from_hf_json(path, "");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(path) != std::string::npos);
    return r.error().message;
  };
  const std::string bytelevel =
      R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true})";
  CHECK(load("{\"model\": ").find("byte") != std::string::npos);
  CHECK(load(R"({"model":{"type":"Unigram"}})").find("BPE") != std::string::npos);
  CHECK(load(R"({"model":{"type":"BPE","merges":[]},)" + bytelevel + "}").find("model.vocab") !=
        std::string::npos);
  CHECK(load(R"({"model":{"type":"BPE","vocab":{"a":"x"},"merges":[]},)" + bytelevel + "}")
            .find("integer") != std::string::npos);
  CHECK(load(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[["a"]]},)" + bytelevel + "}")
            .find("merges[0]") != std::string::npos);
  CHECK(
      load(
          R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Metaspace"}})")
          .find("Metaspace") != std::string::npos);
  CHECK(load(R"({"model":{"type":"BPE","vocab":{"a":-4},"merges":[]},)" + bytelevel + "}")
            .find("-4") != std::string::npos);
  CHECK(load(R"({"normalizer":{"type":"NFKC"},"model":{"type":"BPE","vocab":{},"merges":[]},)" +
             bytelevel + "}")
            .find("NFKC") != std::string::npos);

  auto missing = tokenizer_data_from_hf_json((dir / "absent.json").string(), "");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("absent.json") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("merges in either tokenizer.json form give the same tokenizer") {
  // Qwen3's file writes merges as ["a", "b"], Llama 3's as "a b"; both are
  // loaded into "a b" strings.
  const auto shared = voltad::test::tok_shared_dir() / "tokenizers";
  auto qwen = tokenizer_data_from_hf_json((shared / "qwen3" / "tokenizer.json").string(), "");
  auto llama = tokenizer_data_from_hf_json((shared / "llama3" / "tokenizer.json").string(), "");
  REQUIRE(qwen.ok());
  REQUIRE(llama.ok());
  CHECK(qwen->merges.size() > 100000);
  CHECK(qwen->merges[0] == byte_level_encode(" ") + " " + byte_level_encode(" "));
  CHECK(llama->merges[0] == byte_level_encode(" ") + " " + byte_level_encode(" "));
  CHECK(qwen->pre == "qwen2");
  CHECK(llama->pre == "llama-bpe");
  CHECK(qwen->normalize_nfc);
  CHECK_FALSE(llama->normalize_nfc);
  CHECK(llama->ignore_merges);
  CHECK_FALSE(qwen->ignore_merges);
}

// A file without token types has every token Normal: its end-of-generation
// tokens are markup all the same (ignore_eos runs past them unseen).
TEST_CASE("end-of-generation tokens add no text, typed or not") {
  TokenizerData d = small_vocab({"<|im_end|>"}, {});
  REQUIRE(d.token_types.empty());
  Tokenizer t = make(std::move(d));
  const int32_t end = *t.find_token("<|im_end|>");
  REQUIRE(t.token_type(end) != TokenType::Control);
  CHECK(t.is_end_of_generation(end));
  CHECK(t.is_marker(end));
  CHECK_FALSE(t.is_marker(*t.find_token("a")));
  StreamDecoder decoder(t);
  std::string out = decoder.push(*t.find_token("a"));
  out += decoder.push(end);
  out += decoder.push(*t.find_token("b"));
  CHECK(out == "ab");
}
