#include "engine/pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "engine/unicode_data.h"
#include "engine/utf8.h"

namespace voltad {

namespace {

constexpr uint8_t kLetter = kUnicodeLetter;
constexpr uint8_t kNumber = kUnicodeNumber;
constexpr uint8_t kSpace = kUnicodeWhitespace;
constexpr uint8_t kNewline = 8;  // \r or \n (also kSpace)

uint8_t class_of(char32_t cp) {
  static const std::array<uint8_t, 128> ascii = [] {
    std::array<uint8_t, 128> table{};
    for (char32_t c = 0; c < 128; ++c) table[c] = unicode_class(c);
    table['\r'] |= kNewline;
    table['\n'] |= kNewline;
    return table;
  }();
  return cp < 128 ? ascii[cp] : unicode_class(cp);
}

// The text as code points; `offset` of element i is where it starts in the
// bytes, and one extra element marks the end, so piece [i, j) is bytes
// [offset[i], offset[j]).
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> offset;
  size_t size() const { return cp.size(); }
};

CodePoints decode(std::string_view text) {
  CodePoints out;
  out.cp.reserve(text.size());
  out.cls.reserve(text.size());
  out.offset.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    Utf8Char c = utf8_decode(text, i);
    // An invalid sequence is one "other" unit per byte.
    unsigned length = c.valid ? c.length : 1;
    char32_t cp = c.valid ? c.cp : 0xFFFD;
    uint8_t cls = 0;
    if (c.valid) {
      cls = class_of(cp);
    }
    out.cp.push_back(cp);
    out.cls.push_back(cls);
    out.offset.push_back(uint32_t(i));
    i += length;
  }
  out.offset.push_back(uint32_t(text.size()));
  return out;
}

bool is_other(uint8_t cls) {
  return (cls & (kLetter | kNumber | kSpace)) == 0;
}

// ASCII case folding only: the reference regex engine does not fold
// U+017F LONG S into s for (?i:'s) (checked against Hugging Face tokenizers).
char32_t fold_contraction_letter(char32_t c) {
  return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
}

// 's 't 're 've 'm 'll 'd at i: the match length, or 0.
size_t match_contraction(const CodePoints& t, size_t i, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= t.size()) return 0;
  auto letter = [&](size_t k) { return ignore_case ? fold_contraction_letter(t.cp[k]) : t.cp[k]; };
  char32_t a = letter(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= t.size()) return 0;
  char32_t b = letter(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t run_end(const CodePoints& t, size_t i, uint8_t mask) {
  while (i < t.size() && (t.cls[i] & mask)) ++i;
  return i;
}

size_t other_run_end(const CodePoints& t, size_t i) {
  while (i < t.size() && is_other(t.cls[i])) ++i;
  return i;
}

// `\s+(?!\S)|\s+` at the start of a whitespace run [i, j): the run, less
// its last character when a non-space follows and the run is longer than one.
size_t trailing_space_rule(const CodePoints& t, size_t i, size_t j) {
  if (j < t.size() && j - i >= 2) return j - 1;
  return j;
}

// The end of the piece starting at i, for Llama 3 (max_digits 3) and
// Qwen2 (max_digits 1).
size_t next_llama3(const CodePoints& t, size_t i, size_t max_digits) {
  const size_t n = t.size();
  if (size_t len = match_contraction(t, i, /*ignore_case=*/true)) return i + len;
  uint8_t c = t.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c & kLetter) return run_end(t, i, kLetter);
  if (!(c & (kNewline | kNumber)) && i + 1 < n && (t.cls[i + 1] & kLetter))
    return run_end(t, i + 1, kLetter);
  // \p{N}{1,max_digits}
  if (c & kNumber) {
    size_t j = i;
    while (j < n && j - i < max_digits && (t.cls[j] & kNumber)) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t start = (t.cp[i] == ' ' && i + 1 < n && is_other(t.cls[i + 1])) ? i + 1 : i;
  if (is_other(t.cls[start])) return run_end(t, other_run_end(t, start), kNewline);
  // Whitespace from here on. \s*[\r\n]+ ends after the run's last newline.
  size_t j = run_end(t, i, kSpace);
  for (size_t k = j; k > i; --k)
    if (t.cls[k - 1] & kNewline) return k;
  return trailing_space_rule(t, i, j);
}

// The end of the GPT-2 piece starting at i, within [i, end).
size_t next_gpt2(const CodePoints& t, size_t i, size_t end) {
  if (size_t len = match_contraction(t, i, /*ignore_case=*/false)) return std::min(i + len, end);
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+'
  size_t start = (t.cp[i] == ' ' && i + 1 < end && !(t.cls[i + 1] & kSpace)) ? i + 1 : i;
  uint8_t c = t.cls[start];
  size_t j = start;
  if (c & kLetter) {
    while (j < end && (t.cls[j] & kLetter)) ++j;
    return j;
  }
  if (c & kNumber) {
    while (j < end && (t.cls[j] & kNumber)) ++j;
    return j;
  }
  if (is_other(c)) {
    while (j < end && is_other(t.cls[j])) ++j;
    return j;
  }
  j = i;
  while (j < end && (t.cls[j] & kSpace)) ++j;
  if (j < end && j - i >= 2) return j - 1;
  return j;
}

void emit(std::string_view text, const CodePoints& t, size_t i, size_t j,
          std::vector<std::string_view>& pieces) {
  pieces.push_back(text.substr(t.offset[i], t.offset[j] - t.offset[i]));
}

}  // namespace

Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  if (name == "llama-bpe" || name == "llama3" || name == "smaug-bpe") return PreTokenizer::Llama3;
  if (name == "qwen2" || name == "qwen3" || name == "deepseek-r1-qwen") return PreTokenizer::Qwen2;
  if (name == "smollm" || name == "starcoder") return PreTokenizer::SmolLM;
  if (name == "gpt2" || name == "mpt" || name == "olmo") return PreTokenizer::Gpt2;
  return make_error(
      "unsupported pre-tokenizer \"" + std::string(name) +
      "\" (tokenizer.ggml.pre); voltad knows llama-bpe (Llama 3), qwen2 (Qwen2/Qwen3), smollm "
      "(SmolLM2, StarCoder) and gpt2");
}

const char* pre_tokenizer_name(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::Llama3:
      return "llama-bpe";
    case PreTokenizer::Qwen2:
      return "qwen2";
    case PreTokenizer::SmolLM:
      return "smollm";
    case PreTokenizer::Gpt2:
      return "gpt2";
  }
  return "?";
}

void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces) {
  if (text.empty()) return;
  CodePoints t = decode(text);
  const size_t n = t.size();
  switch (kind) {
    case PreTokenizer::Llama3:
    case PreTokenizer::Qwen2: {
      size_t max_digits = kind == PreTokenizer::Llama3 ? 3 : 1;
      for (size_t i = 0; i < n;) {
        size_t j = next_llama3(t, i, max_digits);
        emit(text, t, i, j, pieces);
        i = j;
      }
      return;
    }
    case PreTokenizer::SmolLM:
    case PreTokenizer::Gpt2: {
      bool split_digits = kind == PreTokenizer::SmolLM;
      for (size_t i = 0; i < n;) {
        if (split_digits && (t.cls[i] & kNumber)) {
          emit(text, t, i, i + 1, pieces);
          ++i;
          continue;
        }
        // The stretch up to the next digit is what the GPT-2 regex sees.
        size_t end = split_digits ? i : n;
        if (split_digits)
          while (end < n && !(t.cls[end] & kNumber)) ++end;
        while (i < end) {
          size_t j = next_gpt2(t, i, end);
          emit(text, t, i, j, pieces);
          i = j;
        }
      }
      return;
    }
  }
}

}  // namespace voltad
