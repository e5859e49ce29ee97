// voltactl: the client and admin tool. Talks to voltad over its Unix socket.
#include <cstdio>
#include <string>

#include "daemon/exit_codes.h"

namespace {
constexpr const char* kUsage =
    "usage: voltactl [--socket PATH] COMMAND [ARGS]\n"
    "commands: generate PROMPT | chat | status | models | bench | plan | reload\n";
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return voltad::kExitUsage;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return voltad::kExitOk;
  }
  std::fprintf(stderr, "voltactl: '%s' is not available in this build: voltad does not serve yet\n",
               cmd.c_str());
  return voltad::kExitUsage;
}
