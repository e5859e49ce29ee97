#include "daemon/config_machine.h"

#include "daemon/access_control.h"

namespace voltad {

AccountFindings account_findings(const config::Config& c, const std::string& path) {
  const auto& server = c.server;
  AccountFindings f;
  f.warnings = account_name_warnings(server.allow_users, server.allow_groups, server.admin_groups);
  if (!server.socket_group.empty() && !resolve_group(server.socket_group))
    f.problems.push_back(
        config::problem_at_key(path, "server", "socket_group",
                               "server.socket_group '" + server.socket_group +
                                   "' is not a group on this system: voltad would not start"));
  return f;
}

}  // namespace voltad
