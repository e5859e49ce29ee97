// voltactl's side of the API: blocking HTTP/1.1 over voltad's Unix socket
// (Beast, one connection per call), with SSE streams delivered event by
// event. Each ApiClient is used by one thread at a time.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/result.h"

namespace voltad::ctl {

struct ApiResponse {
  int status = 0;  // 0: the answer was not HTTP (body says what: another service?)
  std::string body;
  std::string retry_after;
  // A stream that began (200) and broke off before its end: why. The text
  // received until then went to on_data.
  std::string broken;
  // Broken because the daemon closed the connection or fell silent in the
  // middle of the answer (voltactl exits 69, as with no daemon at all),
  // not because the answer was not voltad's (exit 1).
  bool daemon_gone = false;
};

// How long a request that is not a stream may wait for its whole answer
// (status, models, plan, an admin request) unless --timeout says otherwise:
// a daemon that accepts and never answers (stopped, hung) is reported, not
// waited for.
inline constexpr int kAnswerTimeoutSeconds = 30;

class ApiClient {
 public:
  explicit ApiClient(std::string socket_path, int answer_timeout_s = kAnswerTimeoutSeconds)
      : socket_path_(std::move(socket_path)), answer_timeout_s_(answer_timeout_s) {}
  const std::string& socket_path() const { return socket_path_; }

  // GET when body is empty, POST (JSON) otherwise; the answer timeout for
  // the whole exchange.
  Result<ApiResponse> get(const std::string& target) const;
  Result<ApiResponse> post(const std::string& target, const std::string& json) const;

  // POSTs a streaming request; on_data receives each SSE "data:" payload
  // except [DONE] and returns false to stop early (closing the connection,
  // which cancels the generation). A non-200 answer comes back whole.
  // While the stream runs, `active_fd` holds its socket so a signal handler
  // can shut it down (Ctrl-C in chat).
  Result<ApiResponse> stream(const std::string& target, const std::string& json,
                             const std::function<bool(const std::string&)>& on_data) const;

  static std::atomic<int> active_fd;

 private:
  std::string socket_path_;
  int answer_timeout_s_;
};

// The message of an OpenAI error body, or the body itself.
std::string error_message(const ApiResponse& response);

// The text of a streamed event's "error" member: its message where it is
// OpenAI's {"message": ...}, else the member itself as JSON.
std::string stream_error_text(const nlohmann::json& error);

// The system service's socket (systemd/voltad.socket).
inline constexpr const char* kSystemSocketPath = "/run/voltad/voltad.sock";

// $VOLTAD_SOCKET, else the daemon's default (server.socket_path expanded for
// this user), else -- when nothing is there -- the system service's socket.
std::string default_socket_path();
// OWN when something is there or SYSTEM is not; else SYSTEM.
std::string pick_socket_path(const std::string& own, const std::string& system);

}  // namespace voltad::ctl
