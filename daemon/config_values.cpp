#include "daemon/config_values.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace voltad::config {

namespace {

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Splits "12.5GiB" into 12.5 and "GiB".
bool split_number_suffix(const std::string& text, double& number, std::string& suffix) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return false;
  std::string digits = text.substr(0, i);
  char* end = nullptr;
  number = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) return false;
  suffix = text.substr(i);
  suffix.erase(0, suffix.find_first_not_of(' '));
  return true;
}

}  // namespace

template <class T>
Check<T> range(T lo, T hi) {
  std::ostringstream d;
  d << to_yaml(lo) << " to " << to_yaml(hi);
  std::string describe = d.str();
  return Check<T>{describe, [lo, hi, describe](const T& v) -> std::string {
                    if (v < lo || v > hi) return "out of range: " + to_yaml(v) + " (allowed: " + describe + ")";
                    return "";
                  }};
}
template Check<int64_t> range(int64_t, int64_t);
template Check<double> range(double, double);
template Check<Duration> range(Duration, Duration);
template Check<ByteSize> range(ByteSize, ByteSize);

Check<std::string> one_of(std::vector<std::string> choices) {
  std::string describe = "one of: ";
  for (size_t i = 0; i < choices.size(); ++i) describe += (i ? ", " : "") + choices[i];
  return Check<std::string>{describe, [choices, describe](const std::string& v) -> std::string {
                              if (std::find(choices.begin(), choices.end(), v) != choices.end())
                                return "";
                              std::string best;
                              size_t best_d = SIZE_MAX;
                              for (auto& c : choices)
                                if (size_t d = edit_distance(v, c); d < best_d) best_d = d, best = c;
                              std::string msg = "invalid value '" + v + "' (" + describe + ")";
                              if (best_d <= 2) msg += "; did you mean '" + best + "'?";
                              return msg;
                            }};
}

Check<std::string> required_string() {
  return Check<std::string>{"required", [](const std::string& v) -> std::string {
                              return v.empty() ? "must not be empty" : "";
                            },
                            true};
}

Check<std::string> custom(std::string describe, std::function<std::string(const std::string&)> fn) {
  return Check<std::string>{std::move(describe), std::move(fn)};
}

namespace {

// Milliseconds per unit of a duration, 0 for an unknown unit.
double duration_unit_ms(const std::string& unit) {
  if (unit.empty() || unit == "s") return 1000;
  if (unit == "ms") return 1;
  if (unit == "m" || unit == "min") return 60'000;
  if (unit == "h") return 3'600'000;
  return 0;
}

}  // namespace

std::optional<Duration> parse_duration(const std::string& text) {
  double n;
  std::string unit;
  if (!split_number_suffix(text, n, unit) || !std::isfinite(n)) return std::nullopt;
  const double per = duration_unit_ms(unit);
  if (per == 0) return std::nullopt;
  const double ms = n * per;
  if (ms > 1e15) return std::nullopt;
  return Duration{std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)))};
}

std::string duration_problem(const std::string& text) {
  if (parse_duration(text)) return "";
  if (!text.empty() && text[0] == '-') return "a duration cannot be negative";
  double n;
  std::string unit;
  if (!split_number_suffix(text, n, unit)) return "not a number";
  if (duration_unit_ms(unit) == 0) return "unknown unit '" + unit + "' (ms, s, m, min or h)";
  return "too long (durations stop at 1e15 ms, 31,000 years)";
}

namespace {

constexpr struct {
  const char* name;
  double factor;
} kByteUnits[] = {{"", 1},
                  {"B", 1},
                  {"K", 1024.0},
                  {"KiB", 1024.0},
                  {"KB", 1e3},
                  {"M", 1048576.0},
                  {"MiB", 1048576.0},
                  {"MB", 1e6},
                  {"G", 1073741824.0},
                  {"GiB", 1073741824.0},
                  {"GB", 1e9},
                  {"T", 1099511627776.0},
                  {"TiB", 1099511627776.0},
                  {"TB", 1e12}};

}  // namespace

std::optional<ByteSize> parse_byte_size(const std::string& text) {
  double n;
  std::string unit;
  if (!split_number_suffix(text, n, unit) || !std::isfinite(n)) return std::nullopt;
  for (auto& u : kByteUnits)
    if (unit == u.name) {
      double bytes = n * u.factor;
      if (!(bytes >= 0 && bytes < 0x1p63)) return std::nullopt;  // llround is signed
      return ByteSize{static_cast<uint64_t>(std::llround(bytes))};
    }
  return std::nullopt;
}

std::string byte_size_problem(const std::string& text) {
  if (parse_byte_size(text)) return "";
  if (!text.empty() && text[0] == '-') return "a size cannot be negative";
  double n;
  std::string unit;
  if (!split_number_suffix(text, n, unit)) return "not a number";
  for (auto& u : kByteUnits)
    if (unit == u.name) return "too large (sizes stop below 8 EiB)";
  return "unknown unit '" + unit + "' (B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)";
}

std::string format_duration(Duration d) {
  auto ms = d.value.count();
  if (ms % 3'600'000 == 0 && ms) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0 && ms) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string format_byte_size(ByteSize s) {
  static const char* names[] = {"TiB", "GiB", "MiB", "KiB"};
  static const uint64_t factors[] = {1ull << 40, 1ull << 30, 1ull << 20, 1ull << 10};
  for (int i = 0; i < 4; ++i)
    if (s.bytes && s.bytes % factors[i] == 0) return std::to_string(s.bytes / factors[i]) + names[i];
  return std::to_string(s.bytes);
}

std::string type_name(const std::string*) { return "string"; }
std::string type_name(const int64_t*) { return "integer"; }
std::string type_name(const double*) { return "number"; }
std::string type_name(const bool*) { return "boolean"; }
std::string type_name(const Duration*) { return "duration"; }
std::string type_name(const ByteSize*) { return "size"; }
std::string type_name(const StringList*) { return "list of strings"; }

std::string to_yaml(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}
std::string to_yaml(int64_t v) { return std::to_string(v); }
std::string to_yaml(double v) { return format_number(v); }
std::string to_yaml(bool v) { return v ? "true" : "false"; }
std::string to_yaml(const Duration& v) { return format_duration(v); }
std::string to_yaml(const ByteSize& v) { return format_byte_size(v); }
std::string to_yaml(const StringList& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + to_yaml(v[i]);
  return out + "]";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace voltad::config
