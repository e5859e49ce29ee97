#include "engine/utf8.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/unicode_data.h"

namespace voltad {

namespace {

// Valid second bytes for each lead byte (Unicode table 3-7): the narrower
// ranges exclude overlong forms, surrogates and values past U+10FFFF.
struct LeadInfo {
  unsigned length;  // 0: not a lead byte
  uint8_t second_lo, second_hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Hangul syllables decompose and compose by formula (Unicode 3.12).
constexpr char32_t kHangulBase = 0xAC00, kJamoL = 0x1100, kJamoV = 0x1161, kJamoT = 0x11A7;
constexpr char32_t kCountL = 19, kCountV = 21, kCountT = 28, kCountN = kCountV * kCountT,
                   kCountSyllables = kCountL * kCountN;

// Invalid input bytes travel through normalisation as values past Unicode.
constexpr char32_t kRawByteBase = 0x110000;

uint8_t combining_class(char32_t c) {
  return c >= kRawByteBase ? 0 : unicode_combining_class(c);
}

void decompose_into(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kHangulBase && cp < kHangulBase + kCountSyllables) {
    char32_t s = cp - kHangulBase;
    out.push_back(kJamoL + s / kCountN);
    out.push_back(kJamoV + (s % kCountN) / kCountT);
    if (s % kCountT != 0) out.push_back(kJamoT + s % kCountT);
    return;
  }
  std::u32string_view d = unicode_canonical_decomposition(cp);
  if (d.empty()) {
    out.push_back(cp);
  } else {
    out.insert(out.end(), d.begin(), d.end());
  }
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kJamoL && a < kJamoL + kCountL && b >= kJamoV && b < kJamoV + kCountV)
    return kHangulBase + ((a - kJamoL) * kCountV + (b - kJamoV)) * kCountT;
  if (a >= kHangulBase && a < kHangulBase + kCountSyllables && (a - kHangulBase) % kCountT == 0 &&
      b > kJamoT && b < kJamoT + kCountT)
    return a + (b - kJamoT);
  if (a >= kRawByteBase || b >= kRawByteBase) return 0;
  return unicode_canonical_composition(a, b);
}

}  // namespace

Utf8Char utf8_decode(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  size_t left = s.size() - pos;
  uint8_t b0 = p[0];
  if (b0 < 0x80) return {b0, 1, true};
  LeadInfo info = lead_info(b0);
  if (info.length == 0) return {0xFFFD, 1, false};
  if (left < 2 || p[1] < info.second_lo || p[1] > info.second_hi) return {0xFFFD, 1, false};
  for (unsigned i = 2; i < info.length; ++i)
    if (i >= left || !is_continuation(p[i])) return {0xFFFD, i, false};
  char32_t cp;
  switch (info.length) {
    case 2:
      cp = (char32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
      break;
    case 3:
      cp = (char32_t(b0 & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
      break;
    default:
      cp = (char32_t(b0 & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
           (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
  return {cp, info.length, true};
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_decode(s, i);
    if (!c.valid) return false;
    i += c.length;
  }
  return true;
}

size_t utf8_length(std::string_view s) {
  return size_t(
      std::count_if(s.begin(), s.end(), [](char c) { return !is_continuation(uint8_t(c)); }));
}

size_t utf8_incomplete_tail(std::string_view s) {
  // The last lead byte within 3 bytes of the end, if what follows it is a
  // valid but short prefix of its sequence.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto b = uint8_t(s[n - back]);
    if (is_continuation(b)) continue;
    LeadInfo info = lead_info(b);
    if (info.length <= back) return 0;  // ASCII, invalid, or already complete
    if (back >= 2) {
      auto second = uint8_t(s[n - back + 1]);
      if (second < info.second_lo || second > info.second_hi) return 0;
    }
    return back;
  }
  return 0;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_decode(s, i);
    if (c.valid) {
      out.append(s.substr(i, c.length));
    } else {
      utf8_append(out, 0xFFFD);
    }
    i += c.length;
  }
  return out;
}

std::string nfc_normalize(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return uint8_t(c) < 0x80; }))
    return std::string(s);

  // 1. Full canonical decomposition.
  std::vector<char32_t> chars;
  chars.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_decode(s, i);
    if (c.valid) {
      decompose_into(c.cp, chars);
    } else {
      for (unsigned k = 0; k < c.length; ++k) chars.push_back(kRawByteBase + uint8_t(s[i + k]));
    }
    i += c.length;
  }

  // 2. Canonical ordering: a stable sort of each run of non-starters.
  for (size_t i = 0; i < chars.size();) {
    if (combining_class(chars[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < chars.size() && combining_class(chars[j]) != 0) ++j;
    std::stable_sort(chars.begin() + long(i), chars.begin() + long(j), [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }

  // 3. Canonical composition: each character joins the last starter unless
  // a character between them blocks it (class 0, or a class >= its own).
  std::vector<char32_t> out;
  out.reserve(chars.size());
  size_t starter = SIZE_MAX;
  for (char32_t c : chars) {
    uint8_t cc = combining_class(c);
    if (starter != SIZE_MAX) {
      bool adjacent = out.size() - 1 == starter;
      uint8_t last_cc = combining_class(out.back());
      if (adjacent || (last_cc != 0 && last_cc < cc)) {
        if (char32_t composite = compose(out[starter], c)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = out.size();
    out.push_back(c);
  }

  std::string text;
  text.reserve(s.size());
  for (char32_t c : out) {
    if (c >= kRawByteBase) {
      text.push_back(char(c - kRawByteBase));
    } else {
      utf8_append(text, c);
    }
  }
  return text;
}

}  // namespace voltad
