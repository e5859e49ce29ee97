#include "daemon/config_machine.h"

#include "daemon/access_control.h"
#include "daemon/config_paths.h"
#include "daemon/model_path_check.h"

namespace voltad {

MachineFindings machine_findings(const config::Config& c, const std::string& path) {
  const auto& server = c.server;
  MachineFindings f;
  f.warnings = account_name_warnings(server.allow_users, server.allow_groups, server.admin_groups);
  if (!server.socket_group.empty() && !resolve_group(server.socket_group))
    f.problems.push_back(
        config::problem_at_key(path, "server", "socket_group",
                               "server.socket_group '" + server.socket_group +
                                   "' is not a group on this system: voltad would not start"));
  if (auto problem = model_path_problem(config::expand_path(c.model.path), path))
    f.warnings.push_back(problem->message + " voltad would stop there at start (exit " +
                         std::to_string(problem->exit_code) + ").");
  return f;
}

}  // namespace voltad
