// CPU and node lists in the kernel's list syntax ("0-7,16"), as sorted
// vectors: placement works with small sets and wants them printable and
// comparable, which hwloc bitmaps are not without a topology at hand.
#include <algorithm>
#include <charconv>

#include "daemon/placement_topology.h"

namespace voltad::placement {

std::string format_index_list(const IndexList& list) {
  std::string out;
  for (size_t i = 0; i < list.size();) {
    size_t j = i;
    while (j + 1 < list.size() && list[j + 1] == list[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(list[i]);
    if (j > i) out += '-' + std::to_string(list[j]);
    i = j + 1;
  }
  return out;
}

namespace {

// The largest CPU number accepted: far above any machine, low enough that a
// typo such as 0-4000000000 cannot allocate a huge list.
constexpr unsigned kMaxIndex = 1u << 16;

// A number past unsigned (all digits, too many) comes back as kMaxIndex + 1:
// "far beyond any machine", not "not a number".
std::optional<unsigned> parse_number(std::string_view s) {
  unsigned v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || p != s.data() + s.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range) return kMaxIndex + 1;
  if (ec != std::errc()) return std::nullopt;
  return v;
}

// The list as an error message quotes it: its start, if it is long.
std::string shown(const std::string& text) {
  return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

}  // namespace

Result<IndexList> parse_index_list(const std::string& text, const std::string& what) {
  // Marked, then gathered: ranges that repeat (0-65536 a thousand times)
  // take no more memory than one.
  std::vector<bool> marked(kMaxIndex + 1);
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty() || (rest.empty() && comma != std::string_view::npos))
      return make_error(what + ": '" + shown(text) +
                        "' has an empty item (two commas, or a trailing comma)");
    size_t dash = item.find('-');
    auto lo = parse_number(item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : parse_number(item.substr(dash + 1));
    if (!lo || !hi)
      return make_error(what + ": '" + shown(std::string(item)) + "' in '" + shown(text) +
                        "' is not a number or a range such as 0-7");
    if (*hi > kMaxIndex || *lo > kMaxIndex)
      return make_error(what + ": '" + shown(std::string(item)) +
                        "' is far beyond any machine's CPU numbers (at most " +
                        std::to_string(kMaxIndex) + ")");
    if (*hi < *lo)
      return make_error(what + ": the range '" + std::string(item) + "' runs backwards");
    for (unsigned v = *lo; v <= *hi; ++v) marked[v] = true;
  }
  IndexList out;
  for (unsigned v = 0; v <= kMaxIndex; ++v)
    if (marked[v]) out.push_back(v);
  if (out.empty()) return make_error(what + ": the list is empty");
  return out;
}

IndexList intersect(const IndexList& a, const IndexList& b) {
  IndexList out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

IndexList subtract(const IndexList& a, const IndexList& b) {
  IndexList out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

bool contains_all(const IndexList& haystack, const IndexList& needles) {
  return std::includes(haystack.begin(), haystack.end(), needles.begin(), needles.end());
}

}  // namespace voltad::placement
