// The admin endpoints on the API socket, for `voltactl reload|drain|resume`:
//
//   POST /admin/reload   re-read the config file (daemon/config_reload.h)
//   POST /admin/drain    take no new requests; running ones finish
//   POST /admin/resume   take requests again
//
// Only administrators (AccessPolicy::check_admin: root, the daemon's user,
// members of server.admin_groups) may call them; others get 403. Each
// answers what the lifecycle answered (the same as the D-Bus methods):
// 200 {"ok": true, "state", "summary", "notes": [...]}, or for a refused
// request 422 (reload: the file has problems) / 409 (the daemon is
// stopping) with {"ok": false, "state", "summary", "problems": [...]}.
#pragma once

#include <string>

#include "daemon/http_response.h"
#include "daemon/server_context.h"

namespace voltad {

// `path` starts with /admin/.
HttpResponse admin_request(ServerContext& ctx, const HttpRequest& req, const PeerCredentials& peer,
                           const std::string& path);

}  // namespace voltad
