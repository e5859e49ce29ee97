// Value types and checks for config keys. A key is declared once, in
// config.h, as `v(field, "name", default, "help", check)`; the visitors in
// config_visitors.h turn that one declaration into parsing, validation,
// --dump-config and docs/CONFIG.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace voltad::config {

// "30s", "500ms", "2m", "1h", or a bare number of seconds.
struct Duration {
  std::chrono::milliseconds value{0};
  friend auto operator<=>(const Duration&, const Duration&) = default;
  double seconds() const { return value.count() / 1000.0; }
};

// "16GiB", "512MiB", "4096", "1.5GB": bytes.
struct ByteSize {
  uint64_t bytes = 0;
  friend auto operator<=>(const ByteSize&, const ByteSize&) = default;
};

using StringList = std::vector<std::string>;

// A check on a value: returns "" when fine, else what is wrong. `describe`
// goes into the docs ("0.1 to 0.98", "one of: fp16, int8").
template <class T>
struct Check {
  std::string describe;
  std::function<std::string(const T&)> fn;
  bool required = false;  // must appear in the file; there is no default
};

template <class T>
Check<T> range(T lo, T hi);
Check<std::string> one_of(std::vector<std::string> choices);
Check<std::string> required_string();
Check<std::string> custom(std::string describe, std::function<std::string(const std::string&)> fn);

// Parsing and printing of each value type, used by every visitor.
std::optional<Duration> parse_duration(const std::string& text);
// Why `text` is not a duration ("" when it is one), as byte_size_problem.
std::string duration_problem(const std::string& text);
std::optional<ByteSize> parse_byte_size(const std::string& text);
// Why `text` is not a size ("" when it is one): negative, too large, not a
// number, or an unknown unit.
std::string byte_size_problem(const std::string& text);
std::string format_duration(Duration d);
std::string format_byte_size(ByteSize s);
std::string type_name(const std::string*);
std::string type_name(const int64_t*);
std::string type_name(const double*);
std::string type_name(const bool*);
std::string type_name(const Duration*);
std::string type_name(const ByteSize*);
std::string type_name(const StringList*);
std::string to_yaml(const std::string& v);
std::string to_yaml(int64_t v);
std::string to_yaml(double v);
std::string to_yaml(bool v);
std::string to_yaml(const Duration& v);
std::string to_yaml(const ByteSize& v);
std::string to_yaml(const StringList& v);

// Edit distance, for "did you mean ...?".
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace voltad::config
