// libFuzzer target for the API's request parser: untrusted JSON bodies ->
// native requests (daemon/openai_request.h). The first byte picks the
// endpoint; the rest is the body. Whatever the input, parsing returns a
// request or an ApiError with a 4xx status, never crashes; an accepted
// request satisfies what the engine relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/openai_request.h"
#include "daemon/openai_response.h"

using namespace voltad;

namespace {
void require(bool cond) {
  if (!cond) std::abort();
}

void check_error(const ApiError& e) {
  require(e.status >= 400 && e.status < 500);
  require(!e.message.empty());
  require(!error_body(e).empty());  // formatting any message (even invalid UTF-8) must not throw
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
    case 1: {
      CompletionRequest r;
      auto e = data[0] % 4 == 0 ? parse_chat_completion(body, r) : parse_text_completion(body, r);
      if (e) {
        check_error(*e);
        break;
      }
      require(r.sampling.validate().ok());
      require(!r.max_tokens || *r.max_tokens >= 1);
      require(r.kind != CompletionRequest::Kind::Chat || !r.messages.empty());
      for (const auto& s : r.stop) require(!s.empty());
      break;
    }
    case 2: {
      TokenizeRequest r;
      if (auto e = parse_tokenize(body, r)) check_error(*e);
      break;
    }
    default: {
      DetokenizeRequest r;
      if (auto e = parse_detokenize(body, r)) check_error(*e);
      for (int32_t t : r.tokens) require(t >= 0);
      break;
    }
  }
  return 0;
}
