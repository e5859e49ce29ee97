// UTF-8 as the tokenizer meets it: text is bytes, and invalid sequences are
// data to carry through (or to replace when text must be valid), never an
// error or a crash.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace voltad {

// One step of decoding. For an invalid sequence `valid` is false, `cp` is
// 0xFFFD and `length` covers its maximal subpart (at least one byte), the
// unit that becomes one U+FFFD in utf8_sanitize.
struct Utf8Char {
  char32_t cp;
  unsigned length;
  bool valid;
};

// Decodes the character starting at s[pos]; pos < s.size().
Utf8Char utf8_decode(std::string_view s, size_t pos);

// Appends cp (a scalar value: not a surrogate, at most 0x10FFFF) as UTF-8.
void utf8_append(std::string& out, char32_t cp);

bool utf8_is_valid(std::string_view s);

// Characters (code points) in valid UTF-8: the bytes that start one.
size_t utf8_length(std::string_view s);

// How many bytes at the end of s begin a character that more bytes could
// still complete (0 to 3).
size_t utf8_incomplete_tail(std::string_view s);

// s with each invalid sequence replaced by U+FFFD (as Rust's
// String::from_utf8_lossy does).
std::string utf8_sanitize(std::string_view s);

// Unicode Normalization Form C. Invalid bytes are copied through unchanged
// and act as starters that compose with nothing.
std::string nfc_normalize(std::string_view s);

}  // namespace voltad
