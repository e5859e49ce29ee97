// voltactl's commands. Each takes the arguments after its name and returns
// an exit code; output goes to stdout, problems to stderr.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/voltactl_client.h"
#include "engine/whole_number.h"

namespace voltad::ctl {

using Args = std::vector<std::string>;

int cmd_generate(const ApiClient& client, const Args& args);
int cmd_chat(const ApiClient& client, const Args& args);
int cmd_status(const ApiClient& client, const Args& args);
int cmd_models(const ApiClient& client, const Args& args);
int cmd_bench(const ApiClient& client, const Args& args);  // voltactl_bench.cpp
// reload | drain | resume (voltactl_admin.cpp): administrators only.
int cmd_admin(const ApiClient& client, const std::string& action, const Args& args);
// plan [--json] (voltactl_plan.cpp): the VRAM plan the daemon made at start.
int cmd_plan(const ApiClient& client, const Args& args);

// The VRAM guard's view of the card (/health's and /plan's "vram"), one
// line: every process's use, and where the daemon turns degraded.
std::string vram_line(const nlohmann::json& vram);

// A failed request said on stderr: no daemon (exit 69), or an answer that
// is an error or not voltad's (exit 1).
int report(const Result<ApiResponse>& r);

// "--name VALUE" option parsing shared by the commands: false (and a message
// on stderr) for an unknown option or a missing value.
struct OptionSpec {
  const char* name;
  std::string* value;  // nullptr: a flag
  bool* flag = nullptr;
};
bool parse_options(const char* command, const Args& args, const std::vector<OptionSpec>& specs,
                   std::vector<std::string>& positional);

}  // namespace voltad::ctl
