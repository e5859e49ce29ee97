#include "daemon/server_session.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <cctype>
#include <cerrno>
#include <iterator>
#include <optional>
#include <sstream>

#include "daemon/log.h"

namespace voltad {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

namespace {

// One HTTP/1.1 chunk.
std::string chunk(const std::string& data) {
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

ApiError status_error(int status, std::string message) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  return e;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A Transfer-Encoding other than chunked (501) or a Content-Encoding other
// than identity (415) in a request's header, or nothing.
std::optional<ApiError> unsupported_coding(const HttpRequest::header_type& header) {
  struct Coding {
    http::field field;
    const char* plain;
    int status;
    const char* instead;
  };
  for (const Coding& c :
       {Coding{http::field::transfer_encoding, "chunked", 501,
               "send the body as it is, with Content-Length, or chunked"},
        Coding{http::field::content_encoding, "identity", 415, "send the body uncompressed"}}) {
    auto it = header.find(c.field);
    if (it != header.end() && !beast::iequals(it->value(), c.plain))
      return status_error(c.status, std::string(it->name_string()) + " '" +
                                        std::string(it->value()) +
                                        "' is not supported: " + c.instead);
  }
  return std::nullopt;
}

// An absolute-form target (RFC 9112 3.2.2: "http://host/v1/models", which a
// server must accept) as its path and query; "http://host" alone is "/".
void origin_form(HttpRequest& req) {
  const std::string target(req.target());
  const std::string_view t = target;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (t.size() < scheme.size()) continue;
    std::string head(t.substr(0, scheme.size()));
    for (char& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (head != scheme) continue;
    const size_t path = t.find_first_of("/?", scheme.size());
    std::string rest = path == std::string_view::npos ? "/" : std::string(t.substr(path));
    if (rest.front() == '?') rest.insert(0, "/");
    req.target(rest);
    return;
  }
}

}  // namespace

Session::Session(net::local::stream_protocol::socket&& socket, ServerContext& ctx,
                 PeerCredentials peer, Refusal refusal, std::unique_ptr<UserSlot> connection)
    : stream_(std::move(socket)),
      ctx_(ctx),
      peer_(std::move(peer)),
      refusal_(refusal),
      counted_(refusal == Refusal::None),  // the listener counted it accepted
      connection_(std::move(connection)),
      read_deadline_(stream_.get_executor()),
      keepalive_(stream_.get_executor()) {
  ++ctx_.open_connections;
}

Session::~Session() {
  count_connection();
  if (job_) {
    job_->stream->cancel();
    --ctx_.active_generations;
  }
  --ctx_.open_connections;
}

static const char* refusal_reason(Session::Refusal refusal) {
  switch (refusal) {
    case Session::Refusal::Forbidden:
      return "forbidden";
    case Session::Refusal::Overloaded:
      return "max_connections";
    case Session::Refusal::UserConnections:
      return "max_connections_per_user";
    case Session::Refusal::None:
      break;
  }
  return "";
}

void Session::count_connection() {
  if (counted_) return;
  counted_ = true;
  ctx_.metrics.count_connection(refusal_ == Refusal::None, refusal_reason(refusal_));
}

void Session::run() {
  // Start on the strand: the socket's executor is the connection's strand.
  net::dispatch(stream_.get_executor(),
                beast::bind_front_handler(&Session::do_read, shared_from_this()));
}

std::chrono::milliseconds Session::read_deadline() const {
  const auto limit =
      std::chrono::duration_cast<std::chrono::milliseconds>(ctx_.limits()->read_timeout);
  return refusal_ == Refusal::None ? limit : std::min(limit, std::chrono::milliseconds(3000));
}

void Session::do_read() {
  parser_.emplace();
  parser_->header_limit(uint32_t(std::min<uint64_t>(ctx_.limits()->max_header_bytes, UINT32_MAX)));
  parser_->body_limit(ctx_.limits()->max_body_bytes);
  // The whole request, idle time before it included, must arrive within the
  // deadline: a client that trickles bytes (slow loris) is cut off. A
  // refused connection gets a few seconds, not the whole read_timeout: it
  // holds a connection slot meanwhile.
  const auto deadline = read_deadline();
  // The stream's own timeout stays as a backstop well past the deadline:
  // should the timer's cancel find no operation pending (a read step just
  // completing), the retry below covers it, and this the unforeseen.
  stream_.expires_after(deadline + std::chrono::seconds(10));
  reading_ = true;
  read_timed_out_ = false;
  read_deadline_.expires_after(deadline);
  read_deadline_.async_wait(
      beast::bind_front_handler(&Session::on_read_deadline, shared_from_this()));
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Session::on_header, shared_from_this()));
}

void Session::on_read_deadline(error_code ec) {
  // Cancelled; or expired just as the request completed (this handler was
  // already queued when on_read cancelled it), maybe with the next
  // request's read started since, whose timer then lies ahead.
  if (ec || !reading_ || read_deadline_.expiry() > net::steady_timer::clock_type::now()) return;
  read_timed_out_ = true;
  error_code ignored;
  stream_.socket().cancel(ignored);  // the pending read (or 100 Continue) ends aborted
  // A read step that had just completed was not pending, and beast goes on
  // to the next: cancel again shortly until on_header or on_read sees it.
  read_deadline_.expires_after(std::chrono::milliseconds(100));
  read_deadline_.async_wait(
      beast::bind_front_handler(&Session::on_read_deadline, shared_from_this()));
}

// A client that sent "Expect: 100-continue" (curl does for large bodies)
// waits for "100 Continue" before the body, or for a timeout of its own.
void Session::on_header(error_code ec, size_t bytes) {
  // No time left for a body (a header complete without one is served).
  if (!ec && read_timed_out_ && !parser_->is_done()) ec = net::error::operation_aborted;
  if (ec) return on_read(ec, bytes);  // a header too large, a timeout, a hang-up
  auto self = shared_from_this();
  auto read_body = [this, self](error_code write_ec, size_t) {
    if (!write_ec && read_timed_out_) write_ec = net::error::operation_aborted;
    if (write_ec) return on_read(write_ec, 0);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, self));
  };
  const auto& header = parser_->get();
  // Codings voltad cannot undo: refused before the body (RFC 9112 6.1:
  // 501 for a transfer coding it does not know; RFC 9110 15.5.16: 415 for
  // a content coding), not read as if it were plain JSON.
  if (std::optional<ApiError> e = unsupported_coding(header)) {
    reading_ = false;
    read_deadline_.cancel();
    request_started_ = std::chrono::steady_clock::now();
    endpoint_ = endpoint_label(std::string(header.target()));  // not the last request's
    return send(error_response(*e, 11, false), true);
  }
  if (header.version() >= 11 && !parser_->is_done() &&
      beast::iequals(header[http::field::expect], "100-continue")) {
    // No "100 Continue" (an invitation to send up to max_body_bytes) for a
    // request that is refused whatever its body: the refusal now, the body
    // never read, the connection closed after it.
    if (refused_whatever_the_body(std::string(header.target()))) {
      reading_ = false;
      read_deadline_.cancel();
      request_started_ = std::chrono::steady_clock::now();
      req_ = parser_->release();
      req_.keep_alive(false);
      linger_after_answer_ = true;
      return handle_request();
    }
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    return net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                            std::move(read_body));
  }
  read_body({}, 0);
}

bool Session::refused_whatever_the_body(std::string_view target) const {
  const bool admin_route = target.starts_with("/admin/");
  if (!ctx_.access()->check(peer_).allowed) return true;
  if (admin_route && !ctx_.access()->check_admin(peer_).allowed) return true;
  // Past a connection limit only an administrator's /admin request is served.
  return refusal_ != Refusal::None && !admin_route;
}

void Session::on_read(error_code ec, size_t) {
  reading_ = false;
  read_deadline_.cancel();
  request_started_ = std::chrono::steady_clock::now();
  // Counted under the route its request line named (a 413 for a
  // Content-Length past the limit: the header was parsed), or "other" where
  // none was parsed (a 431: a header past the limit is not parsed at all).
  endpoint_ = endpoint_label(std::string(parser_->get().target()));
  if (ec == http::error::end_of_stream) return do_close();
  if (ec == http::error::header_limit) {
    return send(
        error_response(
            status_error(431, "the request header is larger than server.max_header_bytes (" +
                                  std::to_string(ctx_.limits()->max_header_bytes) + " bytes)"),
            11, false),
        true);
  }
  if (ec == http::error::body_limit) {
    return send(
        error_response(
            status_error(413, "the request body is larger than server.max_body_bytes (" +
                                  std::to_string(ctx_.limits()->max_body_bytes) + " bytes)"),
            11, false),
        true);
  }
  if (ec && ec.category() == http::make_error_code(http::error::bad_method).category() &&
      ec != http::error::partial_message) {
    return send(error_response(bad_request("malformed HTTP request: " + ec.message()), 11, false),
                true);
  }
  if (ec && read_timed_out_) {
    if (!parser_->got_some() || ec == beast::error::timeout) {  // the backstop closed it
      spdlog::debug("connection from uid {} pid {}: idle past server.read_timeout; closing it",
                    peer_.uid, peer_.pid);
      return do_close();
    }
    spdlog::info(
        "connection from uid {} pid {}: request incomplete at server.read_timeout; "
        "answering 408 and closing it",
        peer_.uid, peer_.pid);
    ApiError e = status_error(408, "the request did not arrive whole within " +
                                       std::to_string(read_deadline().count()) + " ms" +
                                       (refusal_ == Refusal::None ? " (server.read_timeout)" : ""));
    e.code = "request_timeout";
    return send(error_response(e, 11, false), true);
  }
  if (ec) return fail(ec, "read");
  req_ = parser_->release();
  handle_request();
}

void Session::handle_request() {
  origin_form(req_);
  endpoint_ = endpoint_label(std::string(req_.target()));  // refusals below are counted under it
  // Access is checked again for every request, so a reload that takes a
  // user off server.allow_users reaches connections already open.
  if (refusal_ == Refusal::None && !ctx_.access()->check(peer_).allowed) {
    spdlog::warn("refused a request from uid {} ({}) pid {}: no longer allowed", peer_.uid,
                 peer_.user, peer_.pid);
    refusal_ = Refusal::Forbidden;
  }
  // An administrator's /admin request (voltactl reload, drain, resume) gets
  // past the connection limits (the administrator's own, and
  // server.max_connections), once: the connection then closes. An
  // emergency drain must not wait for the clients that fill them.
  if ((refusal_ == Refusal::UserConnections || refusal_ == Refusal::Overloaded) &&
      std::string(req_.target()).rfind("/admin/", 0) == 0 &&
      ctx_.access()->check_admin(peer_).allowed) {
    spdlog::info("uid {} ({}) pid {}: {} let past {}", peer_.uid, peer_.user, peer_.pid,
                 std::string(req_.target()),
                 refusal_ == Refusal::Overloaded ? "server.max_connections"
                                                 : "server.max_connections_per_user");
    refusal_ = Refusal::None;
    req_.keep_alive(false);
  }
  count_connection();
  if (refusal_ == Refusal::Forbidden) {
    ApiError e = status_error(
        403, "access denied: user " + peer_.user + " (uid " + std::to_string(peer_.uid) +
                 ") may not use this server; ask its administrator to add you to "
                 "server.allow_users or server.allow_groups");
    e.type = "permission_error";
    e.code = "forbidden";
    return send(error_response(e, req_.version(), false));
  }
  if (refusal_ == Refusal::Overloaded) {
    return send(error_response(
        unavailable("too many connections are open (server.max_connections); retry shortly", 1),
        req_.version(), false));
  }
  if (refusal_ == Refusal::UserConnections) {
    return send(error_response(
        rate_limited("user " + peer_.user + " (uid " + std::to_string(peer_.uid) +
                     ") already has " + std::to_string(ctx_.connection_limiter->max_per_user()) +
                     " connections open (server.max_connections_per_user); close one, or send "
                     "requests on a connection already open (keep-alive)"),
        req_.version(), false));
  }
  // The engine thread calls this when events arrive; it only posts.
  auto notify = [weak = weak_from_this(), ex = stream_.get_executor()] {
    net::post(ex, [weak] {
      if (auto self = weak.lock()) self->on_events();
    });
  };
  RouteOutcome outcome;
  try {
    outcome = route_request(ctx_, req_, peer_, std::move(notify));
  } catch (const std::exception& e) {  // a bug; this request fails, the server goes on
    spdlog::error("request {} {} from uid {} pid {} failed: {}", std::string(req_.method_string()),
                  std::string(req_.target()), peer_.uid, peer_.pid, e.what());
    ApiError err = status_error(500, std::string("internal error: ") + e.what());
    err.type = "server_error";
    err.code = "internal_error";
    return send(error_response(err, req_.version(), false));
  }
  endpoint_ = outcome.endpoint;
  if (outcome.job) return start_job(std::move(outcome.job));
  // HEAD: the GET answer's header (its Content-Length included), no body.
  if (req_.method() == http::verb::head) {
    outcome.response->prepare_payload();
    const std::string length(outcome.response->at(http::field::content_length));
    outcome.response->body().clear();
    outcome.response->set(http::field::content_length, length);
  }
  send(std::move(*outcome.response));
}

void Session::send(HttpResponse res, bool then_linger) {
  // A refusal sent before the body was read: what the client sends after
  // it is read and dropped before the close, so the answer is not lost to a
  // reset.
  then_linger = then_linger || std::exchange(linger_after_answer_, false);
  ctx_.metrics.count_request(endpoint_, int(res.result_int()));
  ctx_.metrics.observe_request_seconds(endpoint_, seconds_since(request_started_));
  res_ = std::make_shared<HttpResponse>(std::move(res));
  const bool close = res_->need_eof();
  stream_.expires_after(ctx_.limits()->write_timeout);
  http::async_write(
      stream_, *res_,
      beast::bind_front_handler(&Session::on_write, shared_from_this(), close, then_linger));
}

void Session::on_write(bool close, bool linger, error_code ec, size_t) {
  res_.reset();
  if (ec) return fail(ec, "write");
  if (linger) return do_linger();
  if (close) return do_close();
  do_read();
}

void Session::start_job(std::shared_ptr<GenerationJob> job) {
  job_ = std::move(job);
  self_ = shared_from_this();  // until end_job or do_close
  ++ctx_.active_generations;
  ++job_serial_;
  job_done_ = false;
  watching_errors_ = false;
  header_sent_ = false;
  stream_timed_ = false;
  keep_alive_ = req_.keep_alive();
  chunked_ = req_.version() >= 11;
  do_watch();
  if (!job_->streaming) return on_events();

  http::response<http::empty_body> head{http::status::ok, req_.version()};
  head.set(http::field::server, "voltad/" VOLTAD_VERSION);
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  // HTTP/1.0 has no chunks: the stream's end is the connection's end.
  head.keep_alive(keep_alive_ && chunked_);
  if (chunked_) head.chunked(true);
  std::ostringstream os;
  os << head.base();
  ctx_.metrics.count_request(endpoint_, 200);
  header_sent_ = true;
  std::string first = job_->format.first_chunk();
  do_write_stream(os.str() + (first.empty() ? "" : chunked_ ? chunk(first) : first));
  arm_keepalive(last_stream_write_);
}

// While a stream has nothing to send (its request queued, its prompt being
// read), an SSE comment every server.stream_keepalive, counted from the
// last write, so that idle timeouts on the client's side (voltactl's
// --timeout, a proxy's) are not taken for a hung daemon.
void Session::arm_keepalive(std::chrono::steady_clock::time_point from) {
  const auto every = ctx_.limits()->stream_keepalive;
  if (every.count() <= 0) return;
  keepalive_.expires_at(from + every);
  keepalive_.async_wait(
      beast::bind_front_handler(&Session::on_keepalive, shared_from_this(), job_serial_));
}

void Session::on_keepalive(uint64_t serial, error_code ec) {
  if (ec || serial != job_serial_ || !job_ || job_done_) return;
  const auto every = ctx_.limits()->stream_keepalive;
  if (every.count() <= 0) return;  // turned off by a reload
  const auto now = std::chrono::steady_clock::now();
  if (!writing_ && now - last_stream_write_ >= every) {
    static const std::string comment = ": keep-alive\n\n";
    do_write_stream(chunked_ ? chunk(comment) : comment);
  }
  // Due `every` after the last write; while a write is pending (a slow
  // reader's, up to server.write_timeout), `every` from now, not at once
  // and again until the write ends.
  arm_keepalive(writing_ ? now : last_stream_write_);
}

void Session::on_events() {
  if (!job_ || writing_ || job_done_) return;  // a finished write takes what is queued
  std::vector<StreamEvent> events = job_->stream->take();
  if (events.empty()) return;

  if (!job_->streaming) {
    for (StreamEvent& e : events) {
      job_->text += e.text;
      std::move(e.logprobs.begin(), e.logprobs.end(), std::back_inserter(job_->logprobs));
      if (!e.done) continue;
      HttpResponse res =
          e.end == EndReason::Error
              ? error_response(unavailable(e.error, 5), req_.version(), keep_alive_)
              : json_response(200, job_->format.response(job_->text, job_->logprobs, e),
                              req_.version(), keep_alive_);
      end_job();
      return send(std::move(res));
    }
    return;
  }

  std::string data;
  for (StreamEvent& e : events) {
    if (!e.done) {
      data += job_->format.text_chunk(e.text, e.logprobs);
      continue;
    }
    if (e.end == EndReason::Error) {
      if (!e.text.empty()) data += job_->format.text_chunk(e.text);
      data += job_->format.error_chunk(unavailable(e.error, 5));
    } else {
      data += job_->format.final_chunks(e, job_->include_usage);
    }
    job_done_ = true;
    break;
  }
  if (!chunked_) return do_write_stream(std::move(data));
  do_write_stream(chunk(data) + (job_done_ ? "0\r\n\r\n" : ""));
}

void Session::do_write_stream(std::string data) {
  write_buf_ = std::move(data);
  writing_ = true;
  last_stream_write_ = std::chrono::steady_clock::now();
  stream_.expires_after(ctx_.limits()->write_timeout);
  net::async_write(stream_, net::buffer(write_buf_),
                   beast::bind_front_handler(&Session::on_write_stream, shared_from_this()));
}

void Session::on_write_stream(error_code ec, size_t) {
  writing_ = false;
  if (ec) {
    if (job_ && !job_done_) ctx_.metrics.count_disconnect_cancel();
    return fail(ec, "stream write");
  }
  if (job_done_) {
    end_job();
    if (keep_alive_ && chunked_) return do_read();
    return do_close();
  }
  on_events();
}

void Session::end_job() {
  if (!job_) return;
  // A non-streamed answer is timed by send(), which follows.
  time_stream();
  --ctx_.active_generations;
  ++job_serial_;  // a watch still pending is stale now
  if (watching_) {
    // Only the watch can be pending here (the job's last write has finished).
    error_code ignored;
    stream_.socket().cancel(ignored);
    watching_ = false;
  }
  keepalive_.cancel();
  job_.reset();
  self_.reset();  // (every caller holds the session too)
}

void Session::do_watch() {
  watching_ = true;
  stream_.socket().async_wait(
      net::socket_base::wait_read,
      beast::bind_front_handler(&Session::on_watch, shared_from_this(), job_serial_));
}

void Session::on_watch(uint64_t serial, error_code ec) {
  if (serial != job_serial_ || !job_) return;
  watching_ = false;
  if (ec == net::error::operation_aborted) return;
  // The generation has ended and its last chunk is being written: a client
  // that read it all and hung up has cancelled nothing (the write's end
  // closes the connection or reads the next request).
  if (job_done_) return;
  bool gone = bool(ec);
  if (!gone) {
    // Readable while we are answering: the client hung up (EOF), shut down
    // its sending side, or pipelined its next request (which stays in the
    // socket for later).
    const int fd = stream_.socket().native_handle();
    char c;
    ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return do_watch();
    // A Unix socket whose peer closed reports POLLHUP, with or without
    // unread bytes; a half-closed one, or one holding a pipelined request,
    // does not. Those clients are answered; their sockets stay readable, so
    // from then on the watch waits for the error state alone, which a later
    // hang-up sets (once: should that wait end without a hang-up, the watch
    // ends there, not in a loop).
    pollfd p{fd, POLLIN, 0};
    const bool hung_up = n < 0 || (::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)));
    if (!hung_up) {
      if (watching_errors_) return;
      watching_errors_ = true;
      spdlog::debug("client uid {} pid {} {} its connection; answering it", peer_.uid, peer_.pid,
                    n == 0 ? "half-closed" : "pipelined a request on");
      watching_ = true;
      stream_.socket().async_wait(
          net::socket_base::wait_error,
          beast::bind_front_handler(&Session::on_watch, shared_from_this(), job_serial_));
      return;
    }
    gone = true;
  }
  spdlog::info("client uid {} pid {} hung up during a generation; cancelling it", peer_.uid,
               peer_.pid);
  ctx_.metrics.count_disconnect_cancel();
  do_close();  // times the stream, then cancels it
}

void Session::do_linger() {
  // After an error answer to a request we did not read whole, keep reading
  // (and discarding) briefly so the client sees our answer instead of a
  // broken pipe; the deadline bounds it.
  // A refused connection's answer is out: its slot is free before the
  // client can see the end of it (one that connects again at once must not
  // find it taken). A served connection keeps its place in the user's
  // allowance while it lingers (at most a second).
  if (refusal_ != Refusal::None) connection_.reset();
  error_code ignored;
  stream_.socket().shutdown(net::socket_base::shutdown_send, ignored);
  stream_.expires_after(std::chrono::seconds(1));
  stream_.async_read_some(net::buffer(linger_buf_),
                          beast::bind_front_handler(&Session::on_linger, shared_from_this()));
}

void Session::on_linger(error_code ec, size_t) {
  if (ec) return do_close();
  // Same deadline as before: not reset, so a trickling client cannot extend it.
  stream_.async_read_some(net::buffer(linger_buf_),
                          beast::bind_front_handler(&Session::on_linger, shared_from_this()));
}

// A stream counted in voltad_requests_total when its header went out is
// timed once, when it ends or is cut off, so the two metrics agree.
void Session::time_stream() {
  if (!job_ || !job_->streaming || !header_sent_ || stream_timed_) return;
  stream_timed_ = true;
  ctx_.metrics.observe_request_seconds(endpoint_, seconds_since(request_started_));
}

void Session::do_close() {
  const std::shared_ptr<Session> keep = std::move(self_);  // alive to the end of this call
  // Timed before the cancel: the engine then frees the sequence, and one who
  // sees it gone from /health finds the stream in the histogram too.
  time_stream();
  if (job_) job_->stream->cancel();
  keepalive_.cancel();
  // The slot is free before our close reaches the client (where a deadline
  // passed, the stream has closed the socket already).
  connection_.reset();
  error_code ignored;
  stream_.socket().shutdown(net::socket_base::shutdown_both, ignored);
  stream_.close();
}

void Session::fail(error_code ec, const char* what) {
  if (ec == beast::error::timeout)
    spdlog::info("connection from uid {} pid {}: {} deadline passed; closing it", peer_.uid,
                 peer_.pid, what);
  else if (ec == net::error::operation_aborted || ec == net::error::broken_pipe ||
           ec == net::error::connection_reset || ec == net::error::eof ||
           ec == net::error::bad_descriptor || ec == http::error::partial_message)
    spdlog::debug("connection from uid {} pid {}: {}: {}", peer_.uid, peer_.pid, what,
                  ec.message());
  else
    spdlog::warn("connection from uid {} pid {}: {}: {}", peer_.uid, peer_.pid, what, ec.message());
  do_close();
}

}  // namespace voltad
