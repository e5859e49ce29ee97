// One client connection: HTTP/1.1 with keep-alive over the Unix socket.
//
// Shaped like Beast's async servers: the session keeps itself alive with
// shared_from_this while an operation is pending; every handler runs on the
// connection's strand (the socket's executor); do_x starts an operation and
// on_x completes it; every read and write has a deadline (a slow client is
// cut off); fail() is the one place errors are logged.
//
// A generation's events come from the engine thread through the job's
// RequestStream, whose notify posts on_events() onto the strand. The stream
// is the bounded write queue: the session takes events only when its
// previous write has finished, and the scheduler stops decoding a sequence
// whose stream holds server.write_queue_chunks events nobody has taken.
// While a generation runs, the socket is watched for the client hanging up,
// which cancels the sequence (its KV blocks are freed at the next step).
#pragma once

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "daemon/server_router.h"

namespace voltad {

class Session : public std::enable_shared_from_this<Session> {
 public:
  // Why a connection is answered with an error and closed instead of served.
  enum class Refusal { None, Forbidden, Overloaded, UserConnections };

  // connection: the connection's place in its user's allowance
  // (server.max_connections_per_user), or a refused connection's place
  // among its user's refusals being answered; held until the session
  // closes the connection (a refused one's: until its answer is out).
  Session(boost::asio::local::stream_protocol::socket&& socket, ServerContext& ctx,
          PeerCredentials peer, Refusal refusal, std::unique_ptr<UserSlot> connection = nullptr);
  ~Session();

  void run();

 private:
  using Stream = boost::beast::basic_stream<boost::asio::local::stream_protocol>;
  using error_code = boost::beast::error_code;

  std::chrono::milliseconds read_deadline() const;
  void do_read();
  void on_read_deadline(error_code ec);
  void on_header(error_code ec, size_t bytes);
  void on_read(error_code ec, size_t bytes);
  void handle_request();
  // Whether a request for `target` is refused whatever its body (access,
  // admin rights, a connection limit): no "100 Continue" for it.
  bool refused_whatever_the_body(std::string_view target) const;
  void send(HttpResponse res, bool then_linger = false);
  void on_write(bool close, bool linger, error_code ec, size_t bytes);

  void start_job(std::shared_ptr<GenerationJob> job);
  void on_events();
  void do_write_stream(std::string data);
  void on_write_stream(error_code ec, size_t bytes);
  void arm_keepalive(std::chrono::steady_clock::time_point from);
  void on_keepalive(uint64_t serial, error_code ec);
  void time_stream();
  void end_job();

  void do_watch();
  void on_watch(uint64_t serial, error_code ec);

  void do_linger();
  void on_linger(error_code ec, size_t bytes);
  void do_close();
  void fail(error_code ec, const char* what);

  Stream stream_;
  ServerContext& ctx_;
  PeerCredentials peer_;
  Refusal refusal_;
  // A refused connection is counted in /metrics once its fate is known:
  // when its request is read (an administrator's /admin request is let
  // through, and counted accepted) or when it closes without one.
  bool counted_;
  void count_connection();
  std::unique_ptr<UserSlot> connection_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  HttpRequest req_;
  // A request's read deadline (server.read_timeout). Not the stream's own
  // timeout, which closes the socket: a client whose request has begun to
  // arrive is told 408 first.
  boost::asio::steady_timer read_deadline_;
  bool reading_ = false;               // a request is being read; the deadline applies
  bool read_timed_out_ = false;        // the deadline passed and cancelled the read
  bool linger_after_answer_ = false;   // the answer goes before the body: linger, then close
  std::shared_ptr<HttpResponse> res_;  // alive until its write completes

  // The generation in flight, if any, and the session's hold on itself
  // while it runs: the engine's notifications hold only a weak pointer, and
  // no read is pending once the client's next request (pipelined) waits in
  // the socket.
  std::shared_ptr<GenerationJob> job_;
  std::shared_ptr<Session> self_;
  std::string endpoint_;
  bool chunked_ = true;  // HTTP/1.1 streams in chunks; 1.0 streams raw and closes
  bool header_sent_ = false;
  bool writing_ = false;   // a stream write is pending
  bool job_done_ = false;  // the final event has been queued for writing
  bool keep_alive_ = true;
  std::string write_buf_;
  // A streamed answer's keep-alive comments (server.stream_keepalive): due
  // that long after the last write.
  boost::asio::steady_timer keepalive_;
  std::chrono::steady_clock::time_point last_stream_write_;
  uint64_t job_serial_ = 0;  // tells a stale watch completion from the current one
  bool watching_ = false;
  // The client half-closed or pipelined during this job: the watch waits for
  // a hang-up alone.
  bool watching_errors_ = false;
  bool stream_timed_ = false;  // this job's stream is in the duration histogram
  std::chrono::steady_clock::time_point request_started_;
  std::array<char, 4096> linger_buf_{};
};

}  // namespace voltad
