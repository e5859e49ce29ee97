// voltactl: the client and admin tool. Talks to voltad over its Unix socket.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "daemon/exit_codes.h"
#include "daemon/voltactl_commands.h"

namespace {
constexpr const char* kUsage =
    "usage: voltactl [--socket PATH] [--timeout SECONDS] COMMAND [ARGS]\n"
    "commands:\n"
    "  generate PROMPT [--max-tokens N] [--temperature T] [--seed N]   continue PROMPT, streamed\n"
    "  chat [--system TEXT] [--max-tokens N] [--temperature T] [--seed N]\n"
    "                                                                  interactive chat; Ctrl-C "
    "stops an answer\n"
    "  status                                                          health, model, load, "
    "latency\n"
    "  models                                                          the models served\n"
    "  bench [--concurrency 1,2,4,8] [--max-tokens 200] [--json]       TTFT, prompt and decode "
    "tokens/s\n"
    "  reload                                                          re-read the daemon's config "
    "file\n"
    "  drain | resume                                                  stop / start taking new "
    "requests\n"
    "  plan [--json]                                                   the VRAM plan made at "
    "start, and the card now\n"
    "The socket is --socket, else $VOLTAD_SOCKET, else the daemon's default; here: %s.\n"
    "--timeout: how long an answer that is not a stream may take, a stream's start, and\n"
    "a silence in a stream (voltad keeps a waiting stream alive; default 30 s).\n"
    "A prompt that starts with '-' goes after --.\n";
}

static int run_command(const voltad::ctl::ApiClient& client, const std::string& cmd,
                       const voltad::ctl::Args& args, const std::string& socket) {
  if (cmd == "generate") return voltad::ctl::cmd_generate(client, args);
  if (cmd == "chat") return voltad::ctl::cmd_chat(client, args);
  if (cmd == "status") return voltad::ctl::cmd_status(client, args);
  if (cmd == "models") return voltad::ctl::cmd_models(client, args);
  if (cmd == "bench") return voltad::ctl::cmd_bench(client, args);
  if (cmd == "reload" || cmd == "drain" || cmd == "resume")
    return voltad::ctl::cmd_admin(client, cmd, args);
  if (cmd == "plan") return voltad::ctl::cmd_plan(client, args);
  std::fprintf(stderr, "voltactl: unknown command '%s'\n", cmd.c_str());
  std::fprintf(stderr, kUsage, socket.c_str());
  return voltad::kExitUsage;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string socket = voltad::ctl::default_socket_path();
  int timeout = voltad::ctl::kAnswerTimeoutSeconds;
  while (!args.empty() && (args[0].rfind("--", 0) == 0 || args[0] == "-h")) {
    if (args[0] == "--help" || args[0] == "-h") {
      std::printf(kUsage, socket.c_str());
      return voltad::kExitOk;
    }
    if (args[0] == "--version") {
      std::printf("voltactl %s\n", VOLTAD_VERSION);
      return voltad::kExitOk;
    }
    // --socket PATH, --timeout SECONDS, or their --name=VALUE forms.
    const size_t eq = args[0].find('=');
    const std::string name = args[0].substr(0, eq);
    if (name == "--socket" || name == "--timeout") {
      std::string value;
      if (eq != std::string::npos) {
        value = args[0].substr(eq + 1);
        args.erase(args.begin());
      } else if (args.size() >= 2) {
        value = args[1];
        args.erase(args.begin(), args.begin() + 2);
      } else {
        std::fprintf(stderr, "voltactl: %s needs a value\n", name.c_str());
        std::fprintf(stderr, kUsage, socket.c_str());
        return voltad::kExitUsage;
      }
      if (name == "--socket") {
        if (value.empty()) {
          std::fprintf(stderr, "voltactl: --socket needs a path, not an empty one\n");
          return voltad::kExitUsage;
        }
        socket = value;
      } else {
        char* end = nullptr;
        const long t = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || t < 1 || t > 86400) {
          std::fprintf(stderr, "voltactl: --timeout takes 1 to 86400 seconds, not '%s'\n",
                       value.c_str());
          return voltad::kExitUsage;
        }
        timeout = int(t);
      }
      continue;
    }
    std::fprintf(stderr, "voltactl: unknown option %s\n", args[0].c_str());
    std::fprintf(stderr, kUsage, socket.c_str());
    return voltad::kExitUsage;
  }
  if (args.empty()) {
    std::fprintf(stderr, kUsage, socket.c_str());
    return voltad::kExitUsage;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  // COMMAND --help: the usage, which has every command's line, before the
  // command's own parsing takes it for an unknown option ("--" ends the
  // options: a prompt "--help" goes after it).
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::printf(kUsage, socket.c_str());
      return voltad::kExitOk;
    }
  }
  voltad::ctl::ApiClient client(socket, timeout);
  // An answer of an unexpected shape (another service on the socket, a
  // daemon of another version) is an error, not an abort.
  try {
    return run_command(client, cmd, args, socket);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "voltactl %s: the answer from %s was not what was expected: %s\n",
                 cmd.c_str(), socket.c_str(), e.what());
    return voltad::kExitFailure;
  }
}
