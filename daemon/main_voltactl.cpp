// voltactl: the client and admin tool. Talks to voltad over its Unix socket.
#include <cstdio>
#include <string>
#include <vector>

#include "daemon/exit_codes.h"
#include "daemon/voltactl_commands.h"

namespace {
constexpr const char* kUsage =
    "usage: voltactl [--socket PATH] COMMAND [ARGS]\n"
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
    "The socket is --socket, else $VOLTAD_SOCKET, else the daemon's default (%s).\n";
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string socket = voltad::ctl::default_socket_path();
  while (!args.empty() && args[0].rfind("--", 0) == 0) {
    if (args[0] == "--help" || args[0] == "-h") {
      std::printf(kUsage, socket.c_str());
      return voltad::kExitOk;
    }
    if (args[0] == "--version") {
      std::printf("voltactl %s\n", VOLTAD_VERSION);
      return voltad::kExitOk;
    }
    if (args[0] == "--socket") {
      if (args.size() < 2) {
        std::fprintf(stderr, "voltactl: --socket needs a value (the daemon's socket PATH)\n");
        std::fprintf(stderr, kUsage, socket.c_str());
        return voltad::kExitUsage;
      }
      socket = args[1];
      args.erase(args.begin(), args.begin() + 2);
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
  voltad::ctl::ApiClient client(socket);
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
