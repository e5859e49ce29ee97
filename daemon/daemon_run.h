// Serving: from a valid config to a daemon answering on its socket, and
// back to an exit code.
//
//   main thread    checks, creates the socket (fails fast on a live one),
//                  then runs the Asio loop (with one more I/O thread)
//   engine thread  loads model, tokenizer and backend while /health says
//                  "loading", publishes them, then runs the scheduler
//   signals        SIGTERM/SIGINT: drain (stop accepting and admitting,
//                  let running requests finish within server.shutdown_grace,
//                  then cancel the rest); a second signal cancels at once
#pragma once

#include <string>

#include "daemon/config.h"

namespace voltad {

// Returns an ExitCode (daemon/exit_codes.h).
int serve(const config::Config& config, const std::string& config_path);

}  // namespace voltad
