#include "daemon/socket_activation.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace voltad {

Result<std::optional<ActivatedSocket>> take_activated_socket() {
  int n = sd_listen_fds(1);
  if (n < 0)
    return make_error(std::string("cannot read the sockets systemd passed (LISTEN_FDS): ") +
                      std::strerror(-n));
  if (n == 0) return std::optional<ActivatedSocket>();
  if (n > 1)
    return make_error("systemd passed " + std::to_string(n) +
                      " sockets; voltad listens on one (check ListenStream= in voltad.socket)");
  ActivatedSocket s;
  s.fd = SD_LISTEN_FDS_START;
  int r = sd_is_socket_unix(s.fd, SOCK_STREAM, 1, nullptr, 0);
  if (r < 0)
    return make_error(std::string("cannot inspect the socket systemd passed: ") +
                      std::strerror(-r));
  if (r == 0)
    return make_error(
        "the socket systemd passed is not a listening Unix stream socket; voltad.socket must use "
        "ListenStream= with a path");
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
      len > offsetof(sockaddr_un, sun_path) && addr.sun_path[0] != '\0')
    s.path.assign(addr.sun_path, ::strnlen(addr.sun_path, len - offsetof(sockaddr_un, sun_path)));
  struct stat st {};
  if (!s.path.empty() && ::stat(s.path.c_str(), &st) == 0)
    s.group = st.st_gid;
  else
    s.group = ::getegid();
  return std::optional<ActivatedSocket>(s);
}

}  // namespace voltad
