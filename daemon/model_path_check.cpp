#include "daemon/model_path_check.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "daemon/exit_codes.h"

namespace voltad {

namespace {

// The first directory above `path` this process may not enter (search
// permission), or "" when every one may be: a model behind one is there
// but unreadable, which "no file is there" would misstate.
std::string unenterable_directory(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path dir;
  for (const fs::path& part : fs::path(path).parent_path()) {
    dir /= part;
    if (::faccessat(AT_FDCWD, dir.c_str(), X_OK, AT_EACCESS) != 0 && errno == EACCES)
      return dir.string();
  }
  return "";
}

}  // namespace

std::optional<ModelPathProblem> model_path_problem(const std::string& path,
                                                   const std::string& config_path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  const bool given = config_path.empty();  // --model PATH
  const std::string origin = given ? "--model" : "model.path in " + config_path;
  const std::string subject =
      given ? "--model is '" + path + "'" : "model.path is '" + path + "' in " + config_path;
  if (const std::string dir = unenterable_directory(path); !dir.empty()) {
    const bool home = dir == "/home" || dir == "/root" || dir.rfind("/run/user", 0) == 0;
    return ModelPathProblem{
        kExitModelData,
        "cannot open model file '" + path + "' (" + origin +
            "): Permission denied: the directory '" + dir + "' cannot be entered by uid " +
            std::to_string(::geteuid()) + ". " +
            (home ? "The units' ProtectHome=yes hides home directories from the service: keep "
                    "models in /var/lib/voltad/models."
                  : "Every directory above the model must be traversable (x) by the daemon's "
                    "user; /var/lib/voltad/models is.")};
  }
  const std::string set = given ? "Pass --model a GGUF file." : "Set model.path to a GGUF file.";
  if (std::filesystem::exists(path, ec))  // a directory, a FIFO, a device
    return ModelPathProblem{
        kExitNoModel, "no model to serve: " + subject + ", which is not a regular file. " + set};
  if (ec == std::errc::permission_denied)  // denied, by something else than a mode
    return ModelPathProblem{kExitModelData, "cannot open model file '" + path + "' (" + origin +
                                                "): Permission denied"};
  return ModelPathProblem{
      kExitNoModel,
      "no model to serve: " + subject + ", and no file is there. " +
          (given ? std::string("Pass --model a GGUF file")
                 : std::string("Put a GGUF file there or set model.path to one")) +
          " (to try voltad, the source tree's scripts/fetch-demo-model.sh downloads a small one "
          "and prints its path)."};
}

}  // namespace voltad
