// voltactl plan: the VRAM plan the daemon made at start (GET /plan,
// daemon/server_router.cpp), and the card as its VRAM guard sees it now.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "daemon/exit_codes.h"
#include "daemon/voltactl_commands.h"

namespace voltad::ctl {

using Json = nlohmann::json;

int cmd_plan(const ApiClient& client, const Args& args) {
  bool json = false;
  std::vector<std::string> positional;
  if (!parse_options("plan", args, {{"--json", nullptr, &json}}, positional) ||
      !positional.empty()) {
    std::fprintf(stderr, "usage: voltactl plan [--json]\n");
    return kExitUsage;
  }
  auto r = client.get("/plan");
  if (!r.ok()) {
    std::fprintf(stderr, "voltactl: %s\n", r.error().message.c_str());
    return kExitUnavailable;
  }
  Json body = Json::parse(r->body, nullptr, false);
  if (r->status != 200 || !body.is_object() || !body.contains("plan")) {
    std::fprintf(stderr, "voltactl plan: %s\n", error_message(r.value()).c_str());
    return r->status == 503 ? kExitUnavailable : kExitFailure;
  }
  if (json) {
    std::printf("%s\n", body.dump(2).c_str());
    return kExitOk;
  }
  std::string text = body.value("text", std::string());
  if (!text.empty() && text.back() != '\n') text += '\n';
  std::printf("the VRAM plan voltad made at start (the card measured by %s):\n%s",
              body.value("measured_with", std::string("?")).c_str(), text.c_str());
  if (body.contains("vram") && body["vram"].is_object())
    std::printf("now: %s\n", vram_line(body["vram"]).c_str());
  return kExitOk;
}

}  // namespace voltad::ctl
