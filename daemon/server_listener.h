// The listening Unix socket and its accept loop.
//
// Creating it: the parent directory is made (0755) when missing; a socket
// file nobody listens on (a daemon that died) is replaced; a live one is
// left alone and start-up fails; mode and group come from the config.
//
// Accepting: each connection's peer credentials are read once (SO_PEERCRED)
// and checked against the access policy; a refused peer, or one over
// server.max_connections, still gets a session that answers its request
// with 403 / 503 and closes, so the client sees why.
//
// Threads: the acceptor lives on its own strand. It accepts until the
// io_context stops (the daemon's stop): during a graceful drain a new
// client still gets a session, which answers 503 while the daemon stops.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/server_context.h"
#include "engine/result.h"

namespace voltad {

struct UnixSocketOptions {
  std::string path;
  mode_t mode = 0660;
  std::optional<gid_t> group;  // none: the daemon's own group
};

// Binds and listens; every failure says what to do (the caller exits with kExitCantCreate).
Result<boost::asio::local::stream_protocol::acceptor> open_unix_listener(
    boost::asio::strand<boost::asio::io_context::executor_type> strand,
    const UnixSocketOptions& options);

// Takes over a socket that is already listening (socket activation,
// daemon/socket_activation.h); the acceptor owns the descriptor from then on.
Result<boost::asio::local::stream_protocol::acceptor> adopt_unix_listener(
    boost::asio::strand<boost::asio::io_context::executor_type> strand, int fd);

// Which refusals to log: the first of a uid, then at most one a uid every
// `every`, so that a client retrying in a loop does not flood the journal.
// admit() returns how many of that uid's refusals went unlogged since its
// last logged one (log this one and say so), or -1 (do not log it).
// Past 4,096 uids it forgets, at most once a period, those with nothing
// left out and no refusal for a period. A count left out is told at the
// uid's next logged refusal, or by due() once its period is over, so that
// the last burst of a client that then stops is told too. Not thread-safe
// (the accept loop is one strand).
class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RefusalLog(Clock::duration every = std::chrono::seconds(10)) : every_(every) {}
  int64_t admit(uid_t uid, Clock::time_point now);
  // The uids whose period since their last logged line is over with
  // refusals left out, and how many: each now counts as logged.
  std::vector<std::pair<uid_t, int64_t>> due(Clock::time_point now);
  // Every uid with refusals left out, due or not (the daemon stops).
  std::vector<std::pair<uid_t, int64_t>> left_out();
  // When the next uid with refusals left out falls due (possibly a uid
  // logged since, for which due() then finds nothing); nullopt if none.
  std::optional<Clock::time_point> next_due() const;
  size_t uids() const { return entries_.size(); }

 private:
  struct Entry {
    Clock::time_point logged, last;
    int64_t unlogged = 0;
  };
  using Due = std::pair<Clock::time_point, uid_t>;
  Clock::duration every_;
  Clock::time_point purged_{};
  std::unordered_map<uid_t, Entry> entries_;
  // (logged + every, uid) for each uid whose count left out went from 0 to
  // 1, earliest first: due() and next_due() cost a log of their number,
  // not a walk of every uid. An element whose uid was logged since is
  // stale and skipped.
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(boost::asio::io_context& ioc, boost::asio::local::stream_protocol::acceptor acceptor,
           ServerContext& ctx);
  void run();
  // Logs the refusals still left out (RefusalLog), as the daemon stops:
  // after the io_context's threads have ended.
  void log_refusals_left_out();

 private:
  void do_accept();
  void arm_refusal_timer();
  static void log_refusals(const std::vector<std::pair<uid_t, int64_t>>& counts, const char* when);
  void on_accept(boost::system::error_code ec, boost::asio::local::stream_protocol::socket socket);

  boost::asio::io_context& ioc_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;
  ServerContext& ctx_;
  RefusalLog refusal_log_;
  boost::asio::steady_timer refusal_timer_;  // tells the counts left out (RefusalLog::due)
  bool refusal_timer_armed_ = false;
  uint64_t refusal_timer_waits_ = 0;  // the current wait's number (an older one's handler returns)
};

}  // namespace voltad
