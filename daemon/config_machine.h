// What only this machine can say about a config file that parsed: whether
// its account names resolve, and whether model.path names a file it could
// serve. voltad --verify-config and a reload say the same thing about one
// file.
#pragma once

#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/config_load.h"

namespace voltad {

struct MachineFindings {
  // voltad would not start with the file: server.socket_group names no
  // group (at its FILE:LINE:COL).
  std::vector<config::Problem> problems;
  // Names the daemon would ignore, and what that leaves
  // (account_name_warnings); a model.path the daemon would stop at
  // (model_path_problem: 66 or 65), a warning only, since a packaged file
  // names the model an administrator copies there later.
  std::vector<std::string> warnings;
};

MachineFindings machine_findings(const config::Config& c, const std::string& path);

}  // namespace voltad
