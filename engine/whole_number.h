// A command-line number: the whole text, nothing before or after it, and
// finite for floating point ("12abc", " 5", "nan" and "" are not numbers).
// Shared by the tools' and voltactl's option parsing.
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace voltad {

template <class T>
std::optional<T> whole_number(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [at, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || at != end) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(value)) return std::nullopt;
  return value;
}

// The same into `out` (left as it was when the text is not a number).
template <class T>
bool whole_number(std::string_view text, T& out) {
  auto value = whole_number<T>(text);
  if (value) out = *value;
  return value.has_value();
}

}  // namespace voltad
