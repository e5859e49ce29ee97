#include "engine/request.h"

namespace voltad {

const char* end_reason_name(EndReason reason) {
  switch (reason) {
    case EndReason::Stop:
      return "stop";
    case EndReason::Length:
      return "length";
    case EndReason::Cancelled:
      return "cancelled";
    case EndReason::Error:
      return "error";
  }
  return "error";
}

RequestStream::RequestStream(std::function<void()> notify) : notify_(std::move(notify)) {}

void RequestStream::push(StreamEvent event) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
    if (armed_) {
      armed_ = false;
      wake = true;
    }
  }
  // Outside the lock: the callback may post work that calls take() at once.
  if (wake && notify_) notify_();
}

size_t RequestStream::pending() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

std::vector<StreamEvent> RequestStream::take() {
  std::lock_guard lock(mu_);
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()),
                               std::make_move_iterator(events_.end()));
  events_.clear();
  armed_ = true;
  return out;
}

}  // namespace voltad
