// Stop strings over streamed text: text is released only when it cannot be
// the start of a stop string, so a client never sees part of one, and the
// stream ends exactly before the first stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace voltad {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);

  // Adds generated text; returns what may be emitted now. After a stop string
  // is seen, stopped() is true and nothing more is emitted.
  std::string push(std::string_view text);
  // End of generation (not by a stop string): the held-back remainder.
  std::string flush();
  // End of generation with the decoder's last text (the U+FFFD of a cut
  // character): push(last), then flush(), in that order, so the last text
  // follows the held one and is checked against the stop strings with it.
  std::string finish(std::string_view last);
  // A control token (<|im_start|>) adds no text, but it ends the stream
  // where it is one of the stop strings, whole (a client that stops at the
  // next turn's marker): names_marker says whether it is, stop_at_marker
  // ends the stream there, releasing the held text and then `last` (the
  // decoder's unfinished character, as in finish).
  bool names_marker(std::string_view marker) const;
  std::string stop_at_marker(std::string_view last);
  bool stopped() const { return stopped_; }
  // Bytes pushed and not yet released (they may start a stop string).
  size_t held() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace voltad
