// voltad: the daemon. Command-line modes that inspect and exit, then serving.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/config_load.h"
#include "daemon/config_machine.h"
#include "daemon/config_paths.h"
#include "daemon/daemon_run.h"
#include "daemon/exit_codes.h"
#include "daemon/log.h"
#include "daemon/placement_print.h"
#include "daemon/plan_command.h"
#include "daemon/systemd_notify.h"

namespace {

constexpr const char* kUsage =
    "usage: voltad [--config FILE]             run the daemon\n"
    "       voltad --verify-config FILE       check a config file; every problem as FILE:LINE:COL\n"
    "       voltad --dump-config [--config FILE]  print the effective config as YAML\n"
    "       voltad --config-reference         print docs/CONFIG.md (generated from the key "
    "declarations)\n"
    "       voltad --print-placement [--config FILE] [--topology-xml FILE] [--gpu SPEC] [--json]\n"
    "                                         print the machine and the GPU/CPU/memory placement "
    "plan\n"
    "       voltad --plan [--config FILE] [--model FILE] --assume-vram BYTES [--assume-used "
    "BYTES]\n"
    "                     [--json]            print the VRAM plan without allocating (--plan "
    "--help)\n"
    "       voltad --version | --help\n";

struct Args {
  std::string mode;  // empty: run the daemon
  std::string mode_flag;
  std::string config_path;
  std::string config_flag;
  voltad::placement::PrintPlacementRequest placement;  // --print-placement
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "voltad: %s\n%s", message.c_str(), kUsage);
  return voltad::kExitUsage;
}

void print_problems(const std::vector<voltad::config::Problem>& problems) {
  for (auto& p : problems) std::fprintf(stderr, "%s\n", p.to_string().c_str());
}

// Every problem, then their count; the exit code of a config with problems.
int refuse_config(const std::string& path, const std::vector<voltad::config::Problem>& problems) {
  print_problems(problems);
  std::fprintf(stderr, "voltad: %s: %zu problem%s\n", path.c_str(), problems.size(),
               problems.size() == 1 ? "" : "s");
  return voltad::kExitConfig;
}

int verify_config(const std::string& path) {
  auto r = voltad::config::load_config_file(path);
  if (!r.ok()) return refuse_config(path, r.problems);
  // What only this machine can say: the account names and the model file.
  // An unknown socket_group stops the daemon at start; unknown names in the
  // access lists are ignored by it, and a missing model is a warning.
  const auto found = voltad::machine_findings(r.config, path);
  const auto& warnings = found.warnings;
  for (const auto& w : warnings) std::fprintf(stderr, "%s: warning: %s\n", path.c_str(), w.c_str());
  if (!found.problems.empty()) return refuse_config(path, found.problems);
  if (warnings.empty())
    std::printf("%s: ok\n", path.c_str());
  else
    std::printf("%s: ok, %zu warning%s\n", path.c_str(), warnings.size(),
                warnings.size() == 1 ? "" : "s");
  return voltad::kExitOk;
}

// path: --config's, or "" for the daemon's default file, which need not
// exist: then the built-in defaults are the effective values (said in a
// comment first, and on stderr).
int dump_config(const std::string& path) {
  const std::string default_path = voltad::config::default_config_path();
  std::error_code ec;  // a default file that cannot be looked at is read, and says why
  if (path.empty() && !std::filesystem::exists(default_path, ec) && !ec) {
    auto defaults = voltad::config::Config::defaults();
    std::fprintf(stderr, "voltad: %s does not exist; these are the built-in defaults\n",
                 default_path.c_str());
    std::printf(
        "# %s does not exist: the built-in defaults. model.path has none: set it to a GGUF "
        "file.\n",
        default_path.c_str());
    std::fputs(voltad::config::dump_config(defaults).c_str(), stdout);
    return voltad::kExitOk;
  }
  auto r = voltad::config::load_config_file(path.empty() ? default_path : path);
  if (!r.ok()) {
    print_problems(r.problems);
    return voltad::kExitConfig;
  }
  std::fputs(voltad::config::dump_config(r.config).c_str(), stdout);
  return voltad::kExitOk;
}

int run_daemon(const std::string& path) {
  auto r = voltad::config::load_config_file(path);
  if (!r.ok()) {
    print_problems(r.problems);
    std::fprintf(stderr,
                 "voltad: not starting: %s is invalid (check it with voltad --verify-config)\n",
                 path.c_str());
    voltad::sd::notify_exit(voltad::kExitConfig);
    return voltad::kExitConfig;
  }
  auto& cfg = r.config;
  voltad::log::setup(cfg.log.format, cfg.log.level);
  int rc = voltad::serve(cfg, path);
  voltad::sd::notify_exit(rc);  // ERRNO= for systemd; the lifecycle said what failed, if it knew
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  // Every CUDA kernel loaded with the context, none at its first launch
  // during serving (engine/backend_cuda.h, prefer_eager_kernel_loading).
  setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  Args args;
  std::vector<std::string> argv_list(argv + 1, argv + argc);
  if (std::find(argv_list.begin(), argv_list.end(), "--plan") != argv_list.end())
    return voltad::plan::plan_main(argv_list);
  // One mode a run: a second one would silently win over the first.
  auto set_mode = [&](const std::string& flag, const char* mode) -> bool {
    if (!args.mode.empty() && args.mode != mode) return false;
    args.mode = mode;
    args.mode_flag = flag;
    return true;
  };
  for (size_t i = 0; i < argv_list.size(); ++i) {
    const std::string& a = argv_list[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argv_list.size()) return {};
      (void)flag;
      return argv_list[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return voltad::kExitOk;
    } else if (a == "--version") {
      std::printf("voltad %s\n", VOLTAD_VERSION);
      return voltad::kExitOk;
    } else if (a == "--config" || a == "-c" || a == "--verify-config") {
      if (!args.config_path.empty())
        return usage_error("one config file a run: " + a + " after " + args.config_flag);
      args.config_flag = a;
      args.config_path = value(a.c_str());
      if (args.config_path.empty()) return usage_error(a + " needs a FILE");
      if (a == "--verify-config" && !set_mode(a, "verify"))
        return usage_error(a + " and " + args.mode_flag + " do not go together");
    } else if (a == "--dump-config" || a == "--config-reference" || a == "--print-placement") {
      const char* mode = a == "--dump-config"        ? "dump"
                         : a == "--config-reference" ? "reference"
                                                     : "placement";
      if (!set_mode(a, mode))
        return usage_error(a + " and " + args.mode_flag + " do not go together");
    } else if (a == "--topology-xml" || a == "--gpu") {
      std::string v = value(a.c_str());
      if (v.empty()) return usage_error(a + (a == "--gpu" ? " needs a SPEC" : " needs a FILE"));
      (a == "--gpu" ? args.placement.gpu : args.placement.topology_xml) = v;
    } else if (a == "--json") {
      args.placement.json = true;
    } else if (a == "--model" || a == "--assume-vram" || a == "--assume-used") {
      return usage_error(a + " goes with --plan");
    } else {
      return usage_error("unknown argument '" + a + "'");
    }
  }
  if (args.mode != "placement" &&
      (args.placement.json || !args.placement.gpu.empty() || !args.placement.topology_xml.empty()))
    return usage_error("--topology-xml, --gpu and --json go with --print-placement");
  if (args.mode == "placement") {
    args.placement.config_path = args.config_path;  // none: every key at its default
    return voltad::placement::print_placement(args.placement);
  }
  if (args.mode == "dump") return dump_config(args.config_path);
  if (args.config_path.empty()) args.config_path = voltad::config::default_config_path();

  if (args.mode == "verify") return verify_config(args.config_path);
  if (args.mode == "reference") {
    std::fputs(voltad::config::config_reference_markdown().c_str(), stdout);
    return voltad::kExitOk;
  }
  return run_daemon(args.config_path);
}
