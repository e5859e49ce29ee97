// TokenizerData from a GGUF file's metadata or from Hugging Face's
// tokenizer.json (+ tokenizer_config.json). Both end in the same plain
// struct; everything after that is one code path (engine/tokenizer.cpp).
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/gguf_file.h"
#include "engine/pre_tokenizer.h"
#include "engine/tokenizer.h"

namespace voltad {

namespace {

using Json = nlohmann::json;

// The Split regexes of the families we implement, exactly as their
// tokenizer.json files write them.
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Derived from the family, as the families' own tokenizer.json files set it
// (GGUF does not store these).
void apply_family_defaults(PreTokenizer pre, TokenizerData& data) {
  data.ignore_merges = pre == PreTokenizer::Llama3;
  data.normalize_nfc = pre == PreTokenizer::Qwen2;
}

Result<std::string> read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error("cannot read " + path + ": it is a directory; check the path");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return make_error("cannot open " + path + " for reading: " + std::strerror(errno) +
                      "; check the path");
  std::string bytes(size_t(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), std::streamsize(bytes.size())))
    return make_error("cannot read " + path);
  return bytes;
}

Result<Json> read_json(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes) return bytes.error();
  try {
    return Json::parse(bytes.value());
  } catch (const Json::parse_error& e) {
    return make_error(path + ": not valid JSON at byte " + std::to_string(e.byte) + ": " +
                      e.what());
  }
}

// Reads tokenizer.json in one SAX pass. model.vocab and model.merges, the
// bulk of the file (about 150K entries each for Qwen), go straight into
// vectors; everything else becomes a small DOM. A full DOM of the file
// takes several times longer to build (a std::map node per vocab entry).
class TokenizerJsonReader final : public nlohmann::json_sax<Json> {
 public:
  Json root;
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::string> merges;
  bool saw_vocab = false, saw_merges = false;
  std::string error;  // why the handler stopped the parse

  bool null() override { return value(Json()); }
  bool boolean(bool v) override { return value(Json(v)); }
  bool number_integer(number_integer_t v) override { return integer(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return integer(v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(Json(v)); }
  bool binary(binary_t&) override { return fail("unexpected binary value"); }
  bool string(string_t& v) override {
    if (mode_ == Mode::Merges) {
      merges.push_back(std::move(v));
      return true;
    }
    if (mode_ == Mode::MergePair) {
      if (++pair_parts_ > 2)
        return fail("model.merges[" + std::to_string(merges.size()) + "] has more than two parts");
      if (pair_parts_ == 2) pair_ += ' ';
      pair_ += v;
      return true;
    }
    return value(Json(std::move(v)));
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (mode_ == Mode::Dom && dom_.size() == 2 && keys_.back() == "model" && key_ == "vocab") {
      mode_ = Mode::Vocab;
      saw_vocab = true;
      return true;
    }
    if (mode_ != Mode::Dom)
      return fail(where() + " holds an object where a token or an id belongs");
    return open(Json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::Vocab) {
      mode_ = Mode::Dom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::Dom && dom_.size() == 2 && keys_.back() == "model" && key_ == "merges") {
      mode_ = Mode::Merges;
      saw_merges = true;
      return true;
    }
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_.clear();
      pair_parts_ = 0;
      return true;
    }
    if (mode_ != Mode::Dom) return fail(where() + " holds an array where a token belongs");
    return open(Json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::MergePair) {
      if (pair_parts_ != 2)
        return fail("model.merges[" + std::to_string(merges.size()) + "] is not a pair");
      merges.push_back(std::move(pair_));
      mode_ = Mode::Merges;
      return true;
    }
    if (mode_ == Mode::Merges) {
      mode_ = Mode::Dom;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    return fail("not valid JSON at byte " + std::to_string(position) + ": " + e.what());
  }

 private:
  enum class Mode { Dom, Vocab, Merges, MergePair };

  bool fail(std::string why) {
    if (error.empty()) error = std::move(why);
    return false;
  }
  std::string where() const { return mode_ == Mode::Vocab ? "model.vocab" : "model.merges"; }
  bool integer(int64_t v) {
    if (mode_ == Mode::Vocab) {
      vocab.emplace_back(std::move(key_), v);
      return true;
    }
    return value(Json(v));
  }
  // Places a value in the DOM: under the last key in an object, appended in
  // an array, or as the root.
  Json* place(Json v) {
    if (dom_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json& parent = *dom_.back();
    if (parent.is_object()) {
      Json& slot = parent[key_];
      slot = std::move(v);
      return &slot;
    }
    parent.push_back(std::move(v));
    return &parent.back();
  }
  bool value(Json v) {
    if (mode_ == Mode::Vocab) return fail("model.vocab[\"" + key_ + "\"] is not an integer id");
    if (mode_ != Mode::Dom)
      return fail("model.merges[" + std::to_string(merges.size()) + "] is not a string");
    place(std::move(v));
    return true;
  }
  bool open(Json container) {
    std::string key = !dom_.empty() && dom_.back()->is_object() ? key_ : std::string("[]");
    dom_.push_back(place(std::move(container)));
    keys_.push_back(std::move(key));
    return true;
  }
  bool close() {
    dom_.pop_back();
    keys_.pop_back();
    return true;
  }

  Mode mode_ = Mode::Dom;
  std::vector<Json*> dom_;         // open containers, outermost first
  std::vector<std::string> keys_;  // the key each open container sits under ("[]" in arrays)
  std::string key_;
  std::string pair_;
  int pair_parts_ = 0;
};

const Json* member(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

bool is_string(const Json* j, const char* text) {
  return j && j->is_string() && j->get<std::string>() == text;
}
bool is_true(const Json* j) {
  return j && j->is_boolean() && j->get<bool>();
}

// Names the family of a tokenizer.json pre_tokenizer, or says what it is.
Result<std::string> family_of(const Json& pre, const std::string& path) {
  auto byte_level = [](const Json& j, bool use_regex) {
    return is_string(member(j, "type"), "ByteLevel") && !is_true(member(j, "add_prefix_space")) &&
           is_true(member(j, "use_regex")) == use_regex;
  };
  if (byte_level(pre, true)) return std::string("gpt2");
  const Json* steps = member(pre, "pretokenizers");
  if (is_string(member(pre, "type"), "Sequence") && steps && steps->is_array() &&
      steps->size() == 2) {
    const Json& first = (*steps)[0];
    const Json& second = (*steps)[1];
    if (is_string(member(first, "type"), "Digits") && is_true(member(first, "individual_digits")) &&
        byte_level(second, true))
      return std::string("smollm");
    const Json* pattern = member(first, "pattern");
    const Json* regex = pattern ? member(*pattern, "Regex") : nullptr;
    if (is_string(member(first, "type"), "Split") &&
        is_string(member(first, "behavior"), "Isolated") && !is_true(member(first, "invert")) &&
        byte_level(second, false)) {
      if (is_string(regex, kLlama3Regex)) return std::string("llama-bpe");
      if (is_string(regex, kQwen2Regex)) return std::string("qwen2");
    }
  }
  return make_error(path + ": unsupported pre_tokenizer " + pre.dump().substr(0, 300) +
                    "; voltad knows the Llama 3, Qwen2/3, SmolLM2 (Digits + ByteLevel) and GPT-2 "
                    "(ByteLevel) ones");
}

// A special token in tokenizer_config.json: "text", {"content": "text"} or null.
std::string config_token_text(const Json& config, const char* key) {
  const Json* j = member(config, key);
  if (!j) return {};
  if (j->is_string()) return j->get<std::string>();
  if (const Json* content = member(*j, "content"); content && content->is_string())
    return content->get<std::string>();
  return {};
}

Status read_hf_config(const std::string& path, TokenizerData& data) {
  auto parsed = read_json(path);
  if (!parsed) return parsed.error();
  const Json& config = parsed.value();
  if (!config.is_object()) return make_error(path + ": expected a JSON object");

  auto id_of = [&](const char* key, int32_t& id) -> Status {
    std::string text = config_token_text(config, key);
    if (text.empty()) return {};
    for (size_t i = 0; i < data.tokens.size(); ++i) {
      if (data.tokens[i] == text) {
        id = int32_t(i);
        return {};
      }
    }
    return make_error(path + ": " + key + " \"" + text + "\" is not a token of the tokenizer");
  };
  VOLTAD_TRY(id_of("bos_token", data.bos_id));
  VOLTAD_TRY(id_of("eos_token", data.eos_id));
  VOLTAD_TRY(id_of("pad_token", data.pad_id));
  if (const Json* add_bos = member(config, "add_bos_token"); add_bos && add_bos->is_boolean())
    data.add_bos = add_bos->get<bool>();

  // chat_template is a string, or a list of {name, template} (use "default").
  if (const Json* t = member(config, "chat_template")) {
    if (t->is_string()) {
      data.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      for (const Json& entry : *t) {
        const Json* name = member(entry, "name");
        const Json* text = member(entry, "template");
        if (text && text->is_string() && (data.chat_template.empty() || is_string(name, "default")))
          data.chat_template = text->get<std::string>();
      }
    }
  }
  return {};
}

// True when tokenizer.json's post-processor puts a special token first
// (TemplateProcessing), which is how HF adds BOS without a config flag.
bool post_processor_adds_prefix(const Json& post) {
  if (is_string(member(post, "type"), "Sequence")) {
    if (const Json* list = member(post, "processors"); list && list->is_array())
      for (const Json& p : *list)
        if (post_processor_adds_prefix(p)) return true;
    return false;
  }
  const Json* single = member(post, "single");
  return is_string(member(post, "type"), "TemplateProcessing") && single && single->is_array() &&
         !single->empty() && member((*single)[0], "SpecialToken") != nullptr;
}

}  // namespace

Result<TokenizerData> tokenizer_data_from_hf_json(
    const std::string& tokenizer_json_path,
    const std::string& tokenizer_config_json_path_or_empty) {
  const std::string& path = tokenizer_json_path;
  auto bytes = read_file(path);
  if (!bytes) return bytes.error();
  TokenizerJsonReader reader;
  bool parsed_ok = Json::sax_parse(bytes.value(), &reader);
  if (!parsed_ok || !reader.error.empty())
    return make_error(path + ": " + (reader.error.empty() ? "not valid JSON" : reader.error));
  const Json& root = reader.root;
  const Json* model = member(root, "model");
  if (!model || !is_string(member(*model, "type"), "BPE"))
    return make_error(path +
                      ": model.type is not \"BPE\"; voltad reads byte-level BPE tokenizers only");
  if (!reader.saw_vocab) return make_error(path + ": model.vocab is missing or not an object");
  if (!reader.saw_merges) return make_error(path + ": model.merges is missing or not an array");

  TokenizerData data;
  data.model = "gpt2";
  const Json* pre = member(root, "pre_tokenizer");
  if (!pre) return make_error(path + ": has no pre_tokenizer");
  auto family = family_of(*pre, path);
  if (!family) return family.error();
  data.pre = family.value();

  const Json* normalizer = member(root, "normalizer");
  if (normalizer && !normalizer->is_null()) {
    if (!is_string(member(*normalizer, "type"), "NFC"))
      return make_error(path + ": unsupported normalizer " + normalizer->dump().substr(0, 200) +
                        "; only none or NFC is implemented");
    data.normalize_nfc = true;
  }
  data.ignore_merges = is_true(member(*model, "ignore_merges"));

  // Ids come from the vocab and the added tokens; a gap stays an unused token.
  constexpr int64_t kMaxTokens = 1 << 24;
  auto place = [&](int64_t id, std::string text, TokenType type) -> Status {
    if (id < 0 || id >= kMaxTokens)
      return make_error(path + ": token \"" + text + "\" has id " + std::to_string(id) +
                        ", outside 0.." + std::to_string(kMaxTokens - 1));
    if (size_t(id) >= data.tokens.size()) {
      data.tokens.resize(size_t(id) + 1);
      data.token_types.resize(size_t(id) + 1, int32_t(TokenType::Unused));
    }
    data.tokens[size_t(id)] = std::move(text);
    data.token_types[size_t(id)] = int32_t(type);
    return {};
  };
  for (auto& [text, id] : reader.vocab) VOLTAD_TRY(place(id, std::move(text), TokenType::Normal));
  if (const Json* added = member(root, "added_tokens"); added && added->is_array()) {
    for (const Json& token : *added) {
      const Json* id = member(token, "id");
      const Json* content = member(token, "content");
      if (!id || !id->is_number_integer() || !content || !content->is_string())
        return make_error(path +
                          ": an added_tokens entry lacks an integer id or a string content: " +
                          token.dump().substr(0, 200));
      bool special = is_true(member(token, "special"));
      VOLTAD_TRY(place(id->get<int64_t>(), content->get<std::string>(),
                       special ? TokenType::Control : TokenType::UserDefined));
    }
  }

  // Merges: "a b" (older files) or ["a", "b"] (newer ones), both joined by the reader.
  data.merges = std::move(reader.merges);

  if (const Json* post = member(root, "post_processor"); post && !post->is_null())
    data.add_bos = post_processor_adds_prefix(*post);
  if (!tokenizer_config_json_path_or_empty.empty())
    VOLTAD_TRY(read_hf_config(tokenizer_config_json_path_or_empty, data));
  return data;
}

Result<TokenizerData> tokenizer_data_from_gguf(const GgufFile& file) {
  auto where = [&](const std::string& key) { return file.path() + ": metadata " + key; };
  auto wrong_type = [&](const std::string& key, const char* expected) {
    return make_error(where(key) + " is " + file.key_type_name(key) + ", expected " + expected +
                      "; the file's tokenizer metadata is malformed");
  };

  TokenizerData data;
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model) return wrong_type("tokenizer.ggml.model", "a string such as \"gpt2\"");
  data.model = *model;
  if (data.model != "gpt2")
    return make_error(
        where("tokenizer.ggml.model") + " is \"" + data.model +
        "\": voltad implements byte-level BPE (gpt2) only (Llama 3, Qwen2/3, SmolLM2)");
  auto pre_name = file.get_string("tokenizer.ggml.pre");
  if (!pre_name)
    return make_error(
        where("tokenizer.ggml.pre") + " is " + file.key_type_name("tokenizer.ggml.pre") +
        "; files without it predate llama.cpp's pre-tokenizer support: convert the model again "
        "with a current convert_hf_to_gguf.py");
  data.pre = *pre_name;
  auto pre = pre_tokenizer_from_name(data.pre);
  if (!pre) return make_error(where("tokenizer.ggml.pre") + ": " + pre.error().message);
  apply_family_defaults(pre.value(), data);

  auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return wrong_type("tokenizer.ggml.tokens", "an array of strings");
  data.tokens = std::move(*tokens);
  if (file.has("tokenizer.ggml.token_type")) {
    auto types = file.get_int_array("tokenizer.ggml.token_type");
    if (!types) return wrong_type("tokenizer.ggml.token_type", "an array of integers");
    data.token_types = std::move(*types);
  }
  auto merges = file.get_string_array("tokenizer.ggml.merges");
  if (!merges) return wrong_type("tokenizer.ggml.merges", "an array of strings");
  data.merges = std::move(*merges);

  struct IdKey {
    const char* key;
    int32_t* id;
  };
  for (IdKey k : {IdKey{"tokenizer.ggml.bos_token_id", &data.bos_id},
                  IdKey{"tokenizer.ggml.eos_token_id", &data.eos_id},
                  IdKey{"tokenizer.ggml.eot_token_id", &data.eot_id},
                  IdKey{"tokenizer.ggml.padding_token_id", &data.pad_id}}) {
    if (!file.has(k.key)) continue;
    auto v = file.get_uint(k.key);
    if (!v || *v >= data.tokens.size())
      return make_error(where(k.key) + " is not a token id below the vocabulary size " +
                        std::to_string(data.tokens.size()));
    *k.id = int32_t(*v);
  }
  // llama.cpp adds BOS for Llama 3 unless the file says otherwise.
  data.add_bos = pre.value() == PreTokenizer::Llama3;
  if (file.has("tokenizer.ggml.add_bos_token")) {
    auto add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
    if (!add_bos) return wrong_type("tokenizer.ggml.add_bos_token", "a bool");
    data.add_bos = *add_bos;
  }
  if (file.has("tokenizer.chat_template")) {
    auto chat_template = file.get_string("tokenizer.chat_template");
    if (!chat_template) return wrong_type("tokenizer.chat_template", "a string");
    data.chat_template = std::move(*chat_template);
  }
  return data;
}

}  // namespace voltad
