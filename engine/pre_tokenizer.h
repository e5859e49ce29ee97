// Pre-tokenizers: the first cut of text into pieces that BPE then merges
// within. Each family's regex is written out as a hand scanner over code
// points (std::regex has no \p{..} classes), with the Unicode classes from
// engine/unicode_data.h.
//
//   Llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2   the same with single digits: \p{N} for \p{N}{1,3}
//   Gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   SmolLM  every \p{N} on its own first, then Gpt2 on the stretches between
//           (tokenizer.json: Sequence[Digits(individual_digits), ByteLevel(use_regex)])
//
// Bytes that are not valid UTF-8 count as one "other" character each (the
// class [^\s\p{L}\p{N}]), so they stay in the text and reach the byte tokens.
#pragma once

#include <string_view>
#include <vector>

#include "engine/result.h"

namespace voltad {

enum class PreTokenizer { Llama3, Qwen2, SmolLM, Gpt2 };

// From tokenizer.ggml.pre: "llama-bpe" (also "llama3", "smaug-bpe"),
// "qwen2" (also "qwen3", "deepseek-r1-qwen"), "smollm" (also "starcoder"),
// "gpt2" (also "mpt", "olmo"). Anything else is an error naming these.
Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name);

// The canonical GGUF name ("llama-bpe", "qwen2", "smollm", "gpt2").
const char* pre_tokenizer_name(PreTokenizer kind);

// Appends the pieces of `text` to `pieces`, in order, as views into `text`;
// together they are exactly `text`, and none is empty.
void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace voltad
