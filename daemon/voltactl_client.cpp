#include "daemon/voltactl_client.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <sys/un.h>

#include <nlohmann/json.hpp>

#include "daemon/config.h"
#include "daemon/config_paths.h"

namespace voltad::ctl {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using local = net::local::stream_protocol;

std::atomic<int> ApiClient::active_fd{-1};

namespace {

// No limit on an answer's body. Not boost::none: Boost 1.74's parser then
// refuses every answer with a Content-Length read by read_header ("body
// limit exceeded"), which hid the daemon's error answers to a stream.
constexpr std::uint64_t kNoBodyLimit = std::numeric_limits<std::uint64_t>::max();

Error no_answer(const std::string& path, int timeout_s);

// Connects within timeout_s: a daemon that no longer accepts (stopped, its
// listen queue full) blocks a plain connect for good.
Result<local::socket> connect(net::io_context& ioc, const std::string& path, int timeout_s) {
  // A Unix socket's path fits sockaddr_un (local::endpoint throws otherwise).
  constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;
  if (path.empty() || path.size() > kMaxPath)
    return make_error("cannot connect to '" + path + "': a Unix socket's path is 1 to " +
                      std::to_string(kMaxPath) + " bytes (this one has " +
                      std::to_string(path.size()) + ")");
  local::socket socket(ioc);
  boost::system::error_code ec = net::error::would_block;
  socket.async_connect(local::endpoint(path), [&](boost::system::error_code done) { ec = done; });
  ioc.run_for(std::chrono::seconds(timeout_s));
  const bool pending = ec == net::error::would_block;
  if (pending) {
    boost::system::error_code ignored;
    socket.close(ignored);  // its handler runs (aborted) before the context is reused
    ioc.restart();
    ioc.run();
  }
  ioc.restart();
  if (pending) return no_answer(path, timeout_s);
  if (ec) {
    // Something other than a socket at the path: said as such.
    std::error_code fec;
    const auto type = std::filesystem::status(path, fec).type();
    if (!fec && type != std::filesystem::file_type::socket &&
        type != std::filesystem::file_type::not_found)
      return make_error("cannot connect to " + path + ": it is " +
                        (type == std::filesystem::file_type::directory ? "a directory"
                         : type == std::filesystem::file_type::regular ? "a regular file"
                                                                       : "not a socket") +
                        ", not voltad's socket (pass --socket PATH or set VOLTAD_SOCKET)");
    std::string hint = ec == net::error::connection_refused || ec == net::error::not_found ||
                               ec == boost::system::errc::no_such_file_or_directory
                           ? " (is voltad running? pass --socket PATH or set VOLTAD_SOCKET)"
                       : ec == boost::system::errc::permission_denied
                           ? " (you need write access to the socket: ask for its group)"
                       : ec == net::error::no_buffer_space || ec == net::error::would_block
                           ? " (the daemon is not taking connections: stopped, or overloaded?)"
                           : "";
    return make_error("cannot connect to " + path + ": " + ec.message() + hint);
  }
  return socket;
}

http::request<http::string_body> make_request(http::verb verb, const std::string& target,
                                              const std::string& body) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "voltad");
  req.set(http::field::user_agent, "voltactl/" VOLTAD_VERSION);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.keep_alive(false);
  req.prepare_payload();
  return req;
}

Error no_answer(const std::string& path, int timeout_s) {
  return Error{"no answer from " + path + " within " + std::to_string(timeout_s) +
               " s (is the daemon stopped or hung? its log, or systemctl status voltad)"};
}

// Sends `req` and reads what `read` reads (the whole answer, or its
// header) on `stream`, within timeout_s; the error that ended it, if any.
template <class Read>
boost::system::error_code exchange(net::io_context& ioc, beast::basic_stream<local>& stream,
                                   http::request<http::string_body>& req, int timeout_s,
                                   Read read) {
  boost::system::error_code result;
  stream.expires_after(std::chrono::seconds(timeout_s));
  http::async_write(stream, req, [&](boost::system::error_code ec, size_t) {
    if (ec) {
      result = ec;
      return;
    }
    read([&](boost::system::error_code rec, size_t) { result = rec; });
  });
  ioc.run();
  return result;
}

// An answer that is not HTTP at all (an SSH banner, another protocol): a
// status of 0, as the answer "not what voltactl expects" (exit 1), not an
// unreachable daemon.
bool is_http_error(const boost::system::error_code& ec) {
  return ec && ec.category() == make_error_code(http::error::bad_version).category();
}
ApiResponse not_http(const std::string& path, const boost::system::error_code& ec) {
  ApiResponse r;
  r.body = "the answer on " + path +
           " is not HTTP (is another service listening there?): " + ec.message();
  return r;
}

// The connection closed (or reset) before an answer's header was whole.
// With nothing read, voltad refused it without a word, which it does to a
// user's connections past server.max_connections_per_user once a few of
// those have been answered (docs/API.md), and when it stops.
bool closed_early(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == net::error::broken_pipe || ec == net::error::connection_reset ||
         ec == net::error::eof;
}
Error closed_without_answer(const std::string& path, bool got_some) {
  if (got_some)
    return Error{"the daemon at " + path +
                 " closed the connection in the middle of the answer: did it stop? Its log "
                 "says why"};
  return Error{"the daemon at " + path +
               " closed the connection without answering: too many connections of yours "
               "open at once (server.max_connections_per_user), or it stopped; its log says "
               "which"};
}

Result<ApiResponse> call(const std::string& path, int timeout_s, http::verb verb,
                         const std::string& target, const std::string& body) {
  net::io_context ioc;
  auto socket = connect(ioc, path, timeout_s);
  if (!socket.ok()) return socket.error();
  // The whole exchange within the timeout: asynchronous, so that the
  // deadline can end it.
  beast::basic_stream<local> stream(std::move(*socket));
  auto req = make_request(verb, target, body);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kNoBodyLimit);
  const auto ec = exchange(ioc, stream, req, timeout_s,
                           [&](auto done) { http::async_read(stream, buffer, parser, done); });
  if (ec == beast::error::timeout) return no_answer(path, timeout_s);
  if (closed_early(ec)) return closed_without_answer(path, parser.got_some());
  if (is_http_error(ec)) return not_http(path, ec);
  if (ec) return make_error("talking to " + path + ": " + ec.message());
  ApiResponse r;
  r.status = int(parser.get().result_int());
  r.body = parser.get().body();
  r.retry_after = std::string(parser.get()[http::field::retry_after]);
  return r;
}

}  // namespace

Result<ApiResponse> ApiClient::get(const std::string& target) const {
  return call(socket_path_, answer_timeout_s_, http::verb::get, target, "");
}

Result<ApiResponse> ApiClient::post(const std::string& target, const std::string& json) const {
  return call(socket_path_, answer_timeout_s_, http::verb::post, target, json);
}

Result<ApiResponse> ApiClient::stream(
    const std::string& target, const std::string& json,
    const std::function<bool(const std::string&)>& on_data) const {
  net::io_context ioc;
  auto socket = connect(ioc, socket_path_, answer_timeout_s_);
  if (!socket.ok()) return socket.error();
  beast::basic_stream<local> stream(std::move(*socket));

  struct ActiveFd {  // published for the Ctrl-C handler while the stream runs
    explicit ActiveFd(int fd) { active_fd = fd; }
    ~ActiveFd() { active_fd = -1; }
  } active(stream.socket().native_handle());

  // The request and the answer's header within the answer timeout (a
  // stopped or hung daemon is reported); the streamed body takes as long
  // as the generation does, but no more than the answer timeout passes
  // without a word from the daemon: while it has nothing to send, voltad
  // sends keep-alive comments (server.stream_keepalive, 10 s by default).
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kNoBodyLimit);
  auto req = make_request(http::verb::post, target, json);
  const auto head_ec = exchange(ioc, stream, req, answer_timeout_s_, [&](auto done) {
    http::async_read_header(stream, buffer, parser, done);
  });
  if (head_ec == beast::error::timeout) return no_answer(socket_path_, answer_timeout_s_);
  if (closed_early(head_ec)) return closed_without_answer(socket_path_, parser.got_some());
  if (is_http_error(head_ec)) return not_http(socket_path_, head_ec);
  if (head_ec) return make_error("talking to " + socket_path_ + ": " + head_ec.message());
  stream.expires_never();
  boost::system::error_code ec;
  ApiResponse r;
  r.status = int(parser.get().result_int());
  r.retry_after = std::string(parser.get()[http::field::retry_after]);
  if (r.status != 200) {
    http::read(stream, buffer, parser, ec);
    r.body = parser.get().body();
    return r;
  }
  // voltad streams events and ends every stream with [DONE], an error's
  // too: an answer without them is another service's (or cut short).
  const std::string type(parser.get()[http::field::content_type]);
  if (type.rfind("text/event-stream", 0) != 0) {
    r.broken = "the answer on " + socket_path_ + " is not an event stream (Content-Type '" + type +
               "'): is another service listening there?";
    return r;
  }
  // Events are separated by a blank line; the body grows as chunks arrive
  // and what has been handed out is erased.
  std::string pending;
  while (!parser.is_done()) {
    ec = {};
    stream.expires_after(std::chrono::seconds(answer_timeout_s_));
    http::async_read_some(stream, buffer, parser,
                          [&](boost::system::error_code rec, size_t) { ec = rec; });
    ioc.restart();
    ioc.run();
    if (ec == beast::error::timeout) {
      r.broken = "no word from the daemon at " + socket_path_ + " for " +
                 std::to_string(answer_timeout_s_) +
                 " s in the middle of the answer (voltad sends a keep-alive every "
                 "server.stream_keepalive while it has nothing else to send; is it hung, or "
                 "is that longer than --timeout?)";
      r.daemon_gone = true;
      return r;
    }
    if (ec) {
      r.broken = "the daemon at " + socket_path_ +
                 " closed the connection in the middle of the answer (" + ec.message() +
                 "): did it stop? Its log says why";
      r.daemon_gone = true;
      return r;
    }
    pending += parser.get().body();
    parser.get().body().clear();
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      std::string data = event.substr(6);
      if (data == "[DONE]") return r;
      if (!on_data(data)) {
        stream.socket().shutdown(local::socket::shutdown_both, ec);
        return r;
      }
    }
  }
  r.broken = "the stream from " + socket_path_ +
             " ended without its closing [DONE]: is another service listening there?";
  return r;
}

std::string error_message(const ApiResponse& response) {
  auto j = nlohmann::json::parse(response.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string())
    return j["error"]["message"].get<std::string>();
  return response.body.empty() ? "HTTP " + std::to_string(response.status) : response.body;
}

std::string stream_error_text(const nlohmann::json& e) {
  if (e.is_object() && e.contains("message") && e["message"].is_string())
    return e["message"].get<std::string>();
  return e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string default_socket_path() {
  if (const char* env = std::getenv("VOLTAD_SOCKET"); env && *env) return env;
  config::Config defaults = config::Config::defaults();
  return pick_socket_path(config::expand_path(defaults.server.socket_path), kSystemSocketPath);
}

std::string pick_socket_path(const std::string& own, const std::string& system) {
  // A user's own default lives under $XDG_RUNTIME_DIR; with no daemon of
  // their own there, the machine's service (the packaged voltad.socket) is
  // the one they mean.
  std::error_code ec;
  if (!std::filesystem::exists(own, ec) && std::filesystem::exists(system, ec)) return system;
  return own;
}

}  // namespace voltad::ctl
