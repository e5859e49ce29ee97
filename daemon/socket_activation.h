// Socket activation: the listening socket systemd (voltad.socket) or
// systemd-socket-activate passes in, per sd_listen_fds(3). The unit owns
// that socket -- its path, mode and group come from ListenStream=,
// SocketMode= and SocketGroup= -- so the daemon neither binds nor chmods
// nor, at exit, unlinks it: the next start (or the next connection, which
// starts the service again) finds it in place.
//
// Without LISTEN_FDS the daemon binds server.socket_path itself
// (server_listener.h).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "engine/result.h"

namespace voltad {

struct ActivatedSocket {
  int fd = -1;
  std::string path;  // where it is bound (getsockname); "" for an abstract or unnamed socket
  gid_t group = 0;   // the socket file's group: who the unit lets connect
};

// The passed socket, if any. Errors: more than one socket, or one that is not
// a listening AF_UNIX stream socket (a unit mistake: say what to fix).
// Unsets $LISTEN_FDS and $LISTEN_PID so children do not inherit them.
Result<std::optional<ActivatedSocket>> take_activated_socket();

}  // namespace voltad
