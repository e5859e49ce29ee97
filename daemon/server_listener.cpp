#include "daemon/server_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "daemon/log.h"
#include "daemon/server_session.h"

namespace voltad {

namespace net = boost::asio;
using local = net::local::stream_protocol;

namespace {

// Is something accepting connections on `path`? ECONNREFUSED means the file
// is a leftover of a daemon that is gone.
Result<bool> socket_is_live(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(std::string("socket(): ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  ::close(fd);
  if (rc == 0) return true;
  if (err == ECONNREFUSED || err == ENOENT) return false;
  return make_error("cannot tell whether " + path + " is in use: connect(): " + std::strerror(err));
}

}  // namespace

Result<local::acceptor> open_unix_listener(net::strand<net::io_context::executor_type> strand,
                                           const UnixSocketOptions& o) {
  namespace fs = std::filesystem;
  if (o.path.empty()) return make_error("server.socket_path is empty");
  if (o.path.size() >= sizeof(sockaddr_un::sun_path))
    return make_error(
        "server.socket_path '" + o.path + "' is longer than a Unix socket path may be (" +
        std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes); choose a shorter path");
  std::error_code fec;
  fs::path parent = fs::path(o.path).parent_path();
  if (!parent.empty() && !fs::exists(parent, fec)) {
    fs::create_directories(parent, fec);
    if (fec)
      return make_error("cannot create the socket's directory " + parent.string() + ": " +
                        fec.message());
    fs::permissions(parent, fs::perms(0755), fec);
  }
  struct stat st {};
  if (::lstat(o.path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return make_error(
          o.path + " exists and is not a socket; remove it or choose another server.socket_path");
    auto live = socket_is_live(o.path);
    if (!live.ok()) return live.error();
    if (*live)
      return make_error(
          "another process is already listening on " + o.path +
          " (a voltad already running?); stop it or choose another server.socket_path");
    spdlog::info("replacing stale socket {} (nothing listens on it)", o.path);
    if (::unlink(o.path.c_str()) != 0 && errno != ENOENT)
      return make_error("cannot remove the stale socket " + o.path + ": " + std::strerror(errno));
  }

  local::acceptor acceptor(strand);
  boost::system::error_code ec;
  acceptor.open(local(), ec);
  if (!ec) acceptor.bind(local::endpoint(o.path), ec);
  if (ec) return make_error("cannot create the socket " + o.path + ": " + ec.message());
  // The file is born with the umask's mode (no write bit for others with the
  // usual 022, so nobody else can connect yet); then it gets the configured one.
  if (o.group && ::chown(o.path.c_str(), uid_t(-1), *o.group) != 0) {
    int err = errno;
    ::unlink(o.path.c_str());
    return make_error("cannot give the socket " + o.path + " to group " + group_name(*o.group) +
                      ": " + std::strerror(err) +
                      " (is the daemon a member of server.socket_group?)");
  }
  if (::chmod(o.path.c_str(), o.mode) != 0) {
    int err = errno;
    ::unlink(o.path.c_str());
    return make_error("cannot set the mode of " + o.path + ": " + std::strerror(err));
  }
  acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    ::unlink(o.path.c_str());
    return make_error("cannot listen on " + o.path + ": " + ec.message());
  }
  return acceptor;
}

Result<local::acceptor> adopt_unix_listener(net::strand<net::io_context::executor_type> strand,
                                            int fd) {
  local::acceptor acceptor(strand);
  boost::system::error_code ec;
  acceptor.assign(local(), fd, ec);
  if (ec) return make_error("cannot use the socket systemd passed: " + ec.message());
  return acceptor;
}

Listener::Listener(net::io_context& ioc, local::acceptor acceptor, ServerContext& ctx)
    : ioc_(ioc),
      acceptor_(std::move(acceptor)),
      retry_timer_(acceptor_.get_executor()),
      ctx_(ctx),
      refusal_timer_(acceptor_.get_executor()) {}

void Listener::run() {
  net::post(acceptor_.get_executor(), [self = shared_from_this()] { self->do_accept(); });
}

void Listener::do_accept() {
  if (!acceptor_.is_open()) return;
  // Each connection gets its own strand: its handlers never run concurrently.
  acceptor_.async_accept(net::make_strand(ioc_),
                         [self = shared_from_this()](auto ec, local::socket socket) {
                           self->on_accept(ec, std::move(socket));
                         });
}

void Listener::on_accept(boost::system::error_code ec, local::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) {
    // Out of file descriptors and the like: wait a little instead of spinning.
    spdlog::warn("accept failed: {}; retrying in 100 ms", ec.message());
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([self = shared_from_this()](auto wait_ec) {
      if (!wait_ec) self->do_accept();
    });
    return;
  }
  const auto limits = ctx_.limits();
  if (ctx_.open_connections.load() >= 2 * limits->max_connections) {
    // Far over the limit even refusals cost too much: close at once.
    ctx_.metrics.count_connection(false, "max_connections");
    return do_accept();
  }
  auto creds = peer_credentials(socket.native_handle());
  if (!creds.ok()) {
    spdlog::warn("closing a connection whose credentials cannot be read: {}",
                 creds.error().message);
    ctx_.metrics.count_connection(false, "credentials");
    return do_accept();
  }
  Session::Refusal refusal = Session::Refusal::None;
  std::unique_ptr<UserSlot> connection;
  AccessDecision access = ctx_.access()->check(*creds);
  // A refused connection holds a connection for a few seconds while its
  // answer goes out; a user may have kRefusedPerUser of them, and the rest
  // are closed at once, so that one user's flood of refused connections
  // cannot fill server.max_connections either.
  // One that gets its answer is counted by its Session, which knows
  // whether an administrator's /admin request got past the limit after all.
  auto refused_slot = [&](const char* reason) {
    connection = ctx_.refused_limiter->try_acquire(creds->uid);
    if (!connection) ctx_.metrics.count_connection(false, reason);
    return connection != nullptr;
  };
  // At most one line a uid every 10 s (RefusalLog): a client that retries
  // in a loop must not flood the journal.
  auto log_refusal = [&](const std::string& why) {
    const int64_t unlogged = refusal_log_.admit(creds->uid, RefusalLog::Clock::now());
    if (unlogged < 0) return arm_refusal_timer();
    spdlog::warn("refused a connection from uid {} ({}) pid {}: {}{}", creds->uid, creds->user,
                 creds->pid, why,
                 unlogged > 0 ? " (and " + std::to_string(unlogged) +
                                    " more from this uid since the last such line)"
                              : std::string());
  };
  if (!access.allowed) {
    log_refusal(access.reason);
    if (!refused_slot("forbidden")) return do_accept();
    refusal = Session::Refusal::Forbidden;
  } else if (ctx_.open_connections.load() >= limits->max_connections) {
    log_refusal("server.max_connections (" + std::to_string(limits->max_connections) +
                ") are open");
    refusal = Session::Refusal::Overloaded;
  } else if (!(connection = ctx_.connection_limiter->try_acquire(creds->uid))) {
    log_refusal("it has server.max_connections_per_user (" +
                std::to_string(ctx_.connection_limiter->max_per_user()) + ") open");
    if (!refused_slot("max_connections_per_user")) return do_accept();
    refusal = Session::Refusal::UserConnections;
  } else {
    spdlog::debug("connection from uid {} ({}) pid {}: allowed as {}", creds->uid, creds->user,
                  creds->pid, access.reason);
    ctx_.metrics.count_connection(true);
  }
  std::make_shared<Session>(std::move(socket), ctx_, std::move(*creds), refusal,
                           std::move(connection))
      ->run();
  do_accept();
}

// Once the first uid with refusals left out falls due: a line for each
// that is, then again for the next.
// Armed already for an earlier time: left as it is; for a later one (a uid
// logged longer ago has just had a refusal left out): set earlier, and the
// superseded wait's handler returns without a word.
void Listener::arm_refusal_timer() {
  if (!acceptor_.is_open()) return;
  const auto when = refusal_log_.next_due();
  if (!when || (refusal_timer_armed_ && *when >= refusal_timer_.expiry())) return;
  refusal_timer_armed_ = true;
  const uint64_t wait = ++refusal_timer_waits_;
  refusal_timer_.expires_at(*when);  // cancels a pending wait
  refusal_timer_.async_wait([self = shared_from_this(), wait](boost::system::error_code ec) {
    if (wait != self->refusal_timer_waits_) return;
    self->refusal_timer_armed_ = false;
    if (ec) return;
    self->log_refusals(self->refusal_log_.due(RefusalLog::Clock::now()), "");
    self->arm_refusal_timer();
  });
}

void Listener::log_refusals(const std::vector<std::pair<uid_t, int64_t>>& counts,
                            const char* when) {
  for (const auto& [uid, count] : counts)
    spdlog::warn("refused {} more connection{} from uid {} since the last such line{}", count,
                 count == 1 ? "" : "s", uid, when);
}

void Listener::log_refusals_left_out() {
  log_refusals(refusal_log_.left_out(), " (the daemon stops)");
}

std::vector<std::pair<uid_t, int64_t>> RefusalLog::due(Clock::time_point now) {
  std::vector<std::pair<uid_t, int64_t>> out;
  while (!due_.empty() && due_.top().first <= now) {
    const auto [when, uid] = due_.top();
    due_.pop();
    const auto it = entries_.find(uid);
    if (it == entries_.end()) continue;
    Entry& e = it->second;
    if (e.unlogged == 0 || e.logged + every_ != when) continue;  // logged since
    out.emplace_back(uid, e.unlogged);
    e.logged = now;
    e.unlogged = 0;
  }
  return out;
}

std::vector<std::pair<uid_t, int64_t>> RefusalLog::left_out() {
  std::vector<std::pair<uid_t, int64_t>> out;
  for (auto& [uid, e] : entries_) {
    if (e.unlogged == 0) continue;
    out.emplace_back(uid, e.unlogged);
    e.unlogged = 0;
  }
  due_ = {};
  return out;
}

std::optional<RefusalLog::Clock::time_point> RefusalLog::next_due() const {
  if (due_.empty()) return std::nullopt;
  return due_.top().first;
}

int64_t RefusalLog::admit(uid_t uid, Clock::time_point now) {
  if (entries_.size() > 4096 && now - purged_ >= every_) {
    purged_ = now;
    std::erase_if(entries_, [&](const auto& e) {
      return e.second.unlogged == 0 && now - e.second.last >= every_;
    });
  }
  auto [it, first] = entries_.try_emplace(uid);
  Entry& e = it->second;
  e.last = now;
  if (!first && now - e.logged < every_) {
    if (e.unlogged++ == 0) due_.emplace(e.logged + every_, uid);
    return -1;
  }
  const int64_t unlogged = e.unlogged;
  e.logged = now;
  e.unlogged = 0;
  return unlogged;
}

}  // namespace voltad
