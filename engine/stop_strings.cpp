#include "engine/stop_strings.h"

#include <algorithm>

namespace voltad {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringFilter::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // The earliest complete stop string ends the stream.
  size_t first = std::string::npos;
  for (auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (auto& s : stops_)
    for (size_t len = std::min(s.size() - 1, held_.size()); len > hold; --len)
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

bool StopStringFilter::names_marker(std::string_view marker) const {
  return std::find(stops_.begin(), stops_.end(), marker) != stops_.end();
}

std::string StopStringFilter::stop_at_marker(std::string_view last) {
  std::string out = finish(last);  // empty if already stopped
  stopped_ = true;
  return out;
}

std::string StopStringFilter::finish(std::string_view last) {
  std::string out = push(last);  // first: a + b would leave the order to the compiler
  out += flush();
  return out;
}

std::string StopStringFilter::flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace voltad
