// Where things live: systemd's directory variables, with fallbacks for a
// daemon started by hand.
#pragma once

#include <string>

namespace voltad::config {

// ${RUNTIME_DIRECTORY}, ${STATE_DIRECTORY}, ${CONFIGURATION_DIRECTORY} and
// ${HOME} replaced. systemd may pass several colon-separated directories;
// the first is used.
std::string expand_path(const std::string& path);

// Empty when every "${" in `path` opens one of the four variables above;
// else what is wrong ("unknown variable ${X} ...", "'${' with no '}'"), for
// the config's checks: expand_path leaves anything else as it is.
std::string path_variable_problem(const std::string& path);

std::string runtime_directory();
std::string state_directory();
std::string configuration_directory();

// $CONFIGURATION_DIRECTORY/voltad.yaml, else /etc/voltad/voltad.yaml.
std::string default_config_path();

}  // namespace voltad::config
