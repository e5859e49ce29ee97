// Byte-level BPE tokenizer (GPT-2 style) as GGUF stores it and as Hugging
// Face's tokenizer.json describes it, for the Llama 3, Qwen2/Qwen3 and
// SmolLM2 families.
//
// The tokenizer is built from plain data (TokenizerData) so that both sources
// go through one encode path:
//   GGUF metadata  --tokenizer_data_from_gguf-->     TokenizerData
//   tokenizer.json --tokenizer_data_from_hf_json-->  TokenizerData
//   TokenizerData  --Tokenizer::create-->            Tokenizer
//
// Encoding: special/added tokens are split out of the text first (longest
// match at the leftmost position), every other stretch is optionally NFC
// normalised, cut into pieces by the family's pre-tokenizer
// (engine/pre_tokenizer.h), mapped byte by byte onto GPT-2's printable
// alphabet and merged by merge rank.
//
// Text is bytes: invalid UTF-8 is never an error. Its bytes pass through the
// pre-tokenizer as "other" characters and are encoded with the byte tokens,
// so decode(encode(s)) == s for any input (NFC-normalised first where the
// model normalises). The one loss is Hugging Face's: a byte whose symbol the
// vocabulary lacks is dropped (SmolLM2 lacks 21, e.g. 0x04 and 0xFF).
//
// A Tokenizer is immutable after create(): encode/decode may run on any
// number of threads at once. A StreamDecoder belongs to one stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/result.h"

namespace voltad {

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0, end = 0;
};

class GgufFile;

// Token types, numbered as GGUF (and llama.cpp) number them.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,      // special tokens (<|eot_id|>): parsed only when asked to
  UserDefined = 4,  // added tokens (<think>): always parsed out of the text
  Unused = 5,
  Byte = 6,
};

struct TokenizerData {
  std::string model;  // "gpt2": byte-level BPE, the only model supported
  // Pre-tokenizer, named as tokenizer.ggml.pre names it: "llama-bpe",
  // "qwen2", "smollm", "gpt2" (and the aliases pre_tokenizer.h accepts).
  std::string pre;
  std::vector<std::string> tokens;   // id -> token text (byte-level encoded for normal tokens)
  std::vector<int32_t> token_types;  // id -> TokenType value; empty means all normal
  std::vector<std::string> merges;   // "left right", highest priority first
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, pad_id = -1;
  bool add_bos = false;
  std::string chat_template;  // Jinja text, as the model ships it
  // A piece that is itself a token is emitted whole, without merging
  // (Hugging Face's BPE ignore_merges; Llama 3 sets it).
  bool ignore_merges = false;
  // Text between special tokens is NFC-normalised first (Qwen's normalizer).
  bool normalize_nfc = false;
};

// Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,
// eos_token_id,eot_token_id,padding_token_id,add_bos_token} and
// tokenizer.chat_template. ignore_merges and normalize_nfc follow the
// pre-tokenizer family (as the models' own tokenizer.json files set them).
Result<TokenizerData> tokenizer_data_from_gguf(const GgufFile& file);

// Reads a Hugging Face tokenizer.json (BPE model with byte-level
// pre-tokenizer) and, when the second path is not empty, its
// tokenizer_config.json (bos/eos/pad tokens, add_bos_token, chat_template).
Result<TokenizerData> tokenizer_data_from_hf_json(
    const std::string& tokenizer_json_path, const std::string& tokenizer_config_json_path_or_empty);

// Bytes written in GPT-2's byte-level alphabet, the form normal token texts
// and merges take ("Hello world" -> "HelloĠworld").
std::string byte_level_encode(std::string_view bytes);

class Tokenizer {
 public:
  // Validates the data (ids in range, merges made of known tokens, all 256
  // byte symbols present) and builds the lookup tables.
  static Result<Tokenizer> create(TokenizerData data);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_bos: prepend bos() (when the model has one). parse_special: control
  // tokens written in the text become their ids; otherwise they are encoded
  // as plain text. User-defined tokens are always parsed.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // As above with parse_special, except that no control token is taken
  // where it would overlap one of the `literal` byte ranges of text (a chat
  // message's content: text a user wrote, not markup): there it is encoded
  // as plain text.
  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              std::span<const TextRange> literal) const;
  // A raw prompt (a text completion's, voltad-run's without --chat): the
  // model's input as written, control tokens included (parse_special),
  // after BOS where the file asks for one (tokenizer.ggml.add_bos_token)
  // and the text does not begin with it already.
  std::vector<int32_t> encode_raw_prompt(std::string_view text) const;
  // Concatenated token bytes; may end inside a UTF-8 character (see
  // StreamDecoder for streaming). Ids out of range are skipped.
  std::string decode(std::span<const int32_t> tokens) const;
  // The bytes a token stands for ("" for ids out of range).
  std::string token_piece(int32_t token) const;

  int32_t bos() const;
  int32_t eos() const;
  // eos, eot, and whichever of <|eot_id|>, <|eom_id|>, <|im_end|>,
  // <|end_of_text|>, <|endoftext|> the vocabulary has.
  bool is_end_of_generation(int32_t token) const;
  // Markup, not text: a control token, or an end-of-generation one (also
  // where the file gives no token types).
  bool is_marker(int32_t token) const;
  size_t vocab_size() const;
  std::optional<int32_t> find_token(std::string_view text) const;
  TokenType token_type(int32_t token) const;
  const TokenizerData& data() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of generated tokens into text that is always valid UTF-8:
// a character split across tokens is held back until it is complete, and
// bytes that can never form a character become U+FFFD. Control tokens
// (<|eot_id|>, <|im_start|>) add no text.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer);
  std::string push(int32_t token);
  // Whatever is held back, as U+FFFD (the stream ended inside a character).
  std::string flush();
  // Holding the start of a character (the last tokens' text is unfinished).
  bool holding() const { return !pending_.empty(); }
  size_t held_bytes() const { return pending_.size(); }
  // How many bytes at the start of the last push()'s or flush()'s text
  // belong to earlier tokens: the U+FFFD of a character they started and
  // the last token did not finish (all of flush()'s). A character the last
  // token finished is shared, and counted as its own.
  size_t owed_to_earlier() const { return owed_; }

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // at most 3 bytes: the start of an unfinished character
  size_t owed_ = 0;
};

}  // namespace voltad
