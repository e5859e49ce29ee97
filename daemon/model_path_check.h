// Why a model path cannot be served, found before the file is read: the
// daemon at start and `voltad --plan` say the same thing about one path.
#pragma once

#include <optional>
#include <string>

namespace voltad {

struct ModelPathProblem {
  int exit_code;  // daemon/exit_codes.h: kExitNoModel or kExitModelData
  std::string message;
};

// Nothing when `path` names a regular file this process may reach. Else
// the problem: nothing there (66), not a regular file (66), or a directory
// above it this process may not enter, or another permission error (65).
// `config_path` names where model.path came from; empty when the path was
// given on the command line as --model.
std::optional<ModelPathProblem> model_path_problem(const std::string& path,
                                                   const std::string& config_path);

}  // namespace voltad
