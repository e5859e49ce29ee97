// From an HTTP request to a response, or to a generation that the session
// then streams. Runs on the connection's strand; touches the engine only
// through Scheduler::submit (thread-safe).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "daemon/http_response.h"
#include "daemon/openai_response.h"
#include "daemon/server_context.h"

namespace voltad {

// One chat or text completion in flight: what the session needs to turn the
// stream's events into a response.
struct GenerationJob {
  GenerationJob(CompletionFormatter f, bool is_streaming, bool usage)
      : format(std::move(f)), streaming(is_streaming), include_usage(usage) {}
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<UserSlot> user_slot;  // the user's allowance, released with the job
  CompletionFormatter format;
  bool streaming;
  bool include_usage;
  std::string text;  // accumulated for a non-streamed response
  std::vector<TokenLogprob> logprobs;  // the same, where the request asked for them
  std::string endpoint;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

struct RouteOutcome {
  std::string endpoint;  // metrics label: the route, or "other"
  std::optional<HttpResponse> response;
  std::shared_ptr<GenerationJob> job;  // set instead of response for a generation
};

// The metrics label of a request for `target`: its route ("/v1/models/{id}",
// "/admin" for the /admin/ family), or "other" for none. Requests refused
// before routing (403, 413, 429, 503) are counted under it too.
std::string endpoint_label(std::string_view target);

// `notify` is handed to the job's RequestStream (called on the engine thread).
RouteOutcome route_request(ServerContext& ctx, const HttpRequest& req, const PeerCredentials& peer,
                           std::function<void()> notify);

}  // namespace voltad
