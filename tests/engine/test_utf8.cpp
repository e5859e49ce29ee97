// UTF-8 decoding, validation, streaming tails, lossy sanitising, NFC (against
// Python's unicodedata via tests/fixtures/tokenizer/nfc.json) and the
// generated Unicode class table.
#include <doctest/doctest.h>

#include <random>

#include "engine/unicode_data.h"
#include "engine/utf8.h"
#include "test_tokenizer_support.h"

using namespace voltad;

TEST_CASE("decode and append agree on every scalar value") {
  size_t bad = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    std::string s;
    utf8_append(s, cp);
    Utf8Char c = utf8_decode(s, 0);
    size_t expected_size = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (!c.valid || c.cp != cp || c.length != s.size() || s.size() != expected_size) {
      if (++bad <= 5) CHECK_MESSAGE(false, "code point " << uint32_t(cp) << " does not round-trip");
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("ill-formed sequences are invalid, one maximal subpart at a time") {
  struct Case {
    std::string bytes;
    unsigned length;  // of the first invalid unit
  };
  const Case cases[] = {
      {"\x80", 1},              // lone continuation
      {"\xc0\xaf", 1},          // overlong '/'
      {"\xe0\x80\xaf", 1},      // overlong, 3 bytes
      {"\xed\xa0\x80", 1},      // surrogate D800
      {"\xf4\x90\x80\x80", 1},  // above U+10FFFF
      {"\xf5\x80\x80\x80", 1},  // never a lead byte
      {"\xe2\x82", 2},          // truncated at the end
      {"\xe2\x82x", 2},         // truncated before ASCII
      {"\xf0\x9f\x98", 3},      // 3 of 4
      {"\xff", 1},
  };
  for (const Case& c : cases) {
    Utf8Char d = utf8_decode(c.bytes, 0);
    CHECK_FALSE(d.valid);
    CHECK(d.length == c.length);
    CHECK_FALSE(utf8_is_valid(c.bytes));
  }
  CHECK(utf8_is_valid(""));
  CHECK(utf8_is_valid("plain \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
}

TEST_CASE("sanitize replaces each invalid unit with U+FFFD and keeps the rest") {
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(utf8_sanitize("ok") == "ok");
  CHECK(utf8_sanitize("a\xffz") == "a" + fffd + "z");
  CHECK(utf8_sanitize("\xe2\x82x") == fffd + "x");  // one replacement for the truncated pair
  CHECK(utf8_sanitize("\xc0\xaf") == fffd + fffd);  // overlong: two units
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    for (size_t n = rng() % 12; n > 0; --n) s.push_back(char(rng()));
    std::string clean = utf8_sanitize(s);
    CHECK(utf8_is_valid(clean));
    if (utf8_is_valid(s)) CHECK(clean == s);
  }
}

TEST_CASE("incomplete tail: only a valid, unfinished prefix is held back") {
  const std::string euro = "\xe2\x82\xac", emoji = "\xf0\x9f\x98\x80";
  for (size_t cut = 0; cut < euro.size(); ++cut)
    CHECK(utf8_incomplete_tail("ab" + euro.substr(0, cut)) == cut);
  for (size_t cut = 0; cut < emoji.size(); ++cut)
    CHECK(utf8_incomplete_tail(emoji.substr(0, cut)) == cut);
  CHECK(utf8_incomplete_tail("ab" + euro) == 0);
  CHECK(utf8_incomplete_tail(emoji) == 0);
  CHECK(utf8_incomplete_tail("\xff") == 0);      // can never complete
  CHECK(utf8_incomplete_tail("\xed\xa0") == 0);  // would be a surrogate
  CHECK(utf8_incomplete_tail("\xe0\x80") == 0);  // would be overlong
  CHECK(utf8_incomplete_tail("\x80\x80") == 0);  // continuations without a lead
  CHECK(utf8_incomplete_tail("") == 0);
}

TEST_CASE("NFC equals Python's unicodedata on the corpus and every decomposable character") {
  nlohmann::json fixture = voltad::test::load_tokenizer_fixture("nfc.json");
  MESSAGE("fixture from Unicode " << fixture.at("unicode_version").get<std::string>()
                                  << ", tables from " << std::string(kUnicodeVersion));
  CHECK(fixture.at("unicode_version").get<std::string>() == kUnicodeVersion);
  const auto& cases = fixture.at("cases");
  REQUIRE(cases.size() > 100);
  size_t failures = 0;
  for (const auto& c : cases) {
    const std::string in = c.at("in"), expected = c.at("nfc");
    std::string got = nfc_normalize(in);
    if (got != expected && ++failures <= 5)
      CHECK_MESSAGE(got == expected, "in " << nlohmann::json(in) << "\n  expected "
                                           << nlohmann::json(expected) << "\n  got      "
                                           << nlohmann::json(got));
    CHECK(nfc_normalize(expected) == expected);  // NFC is idempotent
  }
  CHECK(failures == 0);
}

TEST_CASE("NFC carries invalid bytes through unchanged") {
  const std::string s = "e\xcc\x81\xff\xcc\x81 \xe2\x82";
  std::string n = nfc_normalize(s);
  CHECK(n == "\xc3\xa9\xff\xcc\x81 \xe2\x82");  // e+acute composes; the acute after 0xFF stays
}

TEST_CASE("the class table agrees with the definitions it was generated from") {
  for (char32_t c = 'a'; c <= 'z'; ++c) CHECK(unicode_class(c) == kUnicodeLetter);
  for (char32_t c = '0'; c <= '9'; ++c) CHECK(unicode_class(c) == kUnicodeNumber);
  for (char32_t c :
       {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u0085', U'\u00a0', U'\u2028', U'\u3000'})
    CHECK(unicode_class(c) == kUnicodeWhitespace);
  for (char32_t c : {U'!', U'_', U'\u200b', U'\u0301', U'\U0001F600', char32_t(0x1C)})
    CHECK(unicode_class(c) == 0);
  CHECK(unicode_class(U'\u4e2d') == kUnicodeLetter);  // CJK: Lo
  CHECK(unicode_class(U'\u216b') == kUnicodeNumber);  // Roman numeral twelve: Nl
  CHECK(unicode_class(U'\u00bd') == kUnicodeNumber);  // one half: No
  CHECK(unicode_class(0x110000) == 0);
  CHECK(unicode_class(0xFFFFFFFF) == 0);
  CHECK(unicode_combining_class(U'\u0301') == 230);
  CHECK(unicode_combining_class(U'a') == 0);
  CHECK(unicode_canonical_composition(U'e', U'\u0301') == U'\u00e9');
  CHECK(unicode_canonical_composition(U'e', U'e') == 0);
  CHECK(unicode_canonical_decomposition(U'a').empty());
}

TEST_CASE("utf8_length counts characters, not bytes") {
  CHECK(utf8_length("") == 0);
  CHECK(utf8_length("abc") == 3);
  CHECK(utf8_length("caf\xc3\xa9") == 4);                   // é: 2 bytes
  CHECK(utf8_length("\xe2\x82\xac\xf0\x9f\x98\x80") == 2);  // €, 😀
  CHECK(utf8_length("a\xef\xbf\xbd"
                    "b") == 3);  // U+FFFD
}
