// voltactl reload | drain | resume: the admin endpoints (daemon/server_admin.h).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "daemon/exit_codes.h"
#include "daemon/voltactl_commands.h"

namespace voltad::ctl {

using Json = nlohmann::json;

int cmd_admin(const ApiClient& client, const std::string& action, const Args& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "usage: voltactl %s\n", action.c_str());
    return kExitUsage;
  }
  auto r = client.post("/admin/" + action, "{}");
  if (!r.ok()) {
    std::fprintf(stderr, "voltactl: %s\n", r.error().message.c_str());
    return kExitUnavailable;
  }
  Json body = Json::parse(r->body, nullptr, false);
  if (r->status == 0) {  // not HTTP: the body says what came instead
    std::fprintf(stderr, "voltactl %s: %s\n", action.c_str(), r->body.c_str());
    return kExitFailure;
  }
  if (!body.is_object() || !body.contains("ok")) {
    std::fprintf(stderr, "voltactl %s: the server answered %d: %s\n", action.c_str(), r->status,
                 error_message(r.value()).c_str());
    return kExitFailure;
  }
  auto lines = [&](const char* key) {
    std::vector<std::string> out;
    if (body.contains(key) && body[key].is_array())
      for (const Json& l : body[key])
        if (l.is_string()) out.push_back(l.get<std::string>());
    return out;
  };
  const std::string summary = body.value("summary", std::string());
  if (body.value("ok", false)) {
    std::printf("%s\n", summary.c_str());
    for (const auto& n : lines("notes")) std::printf("  %s\n", n.c_str());
    std::printf("state: %s\n", body.value("state", std::string("?")).c_str());
    return kExitOk;
  }
  std::fprintf(stderr, "voltactl %s: %s\n", action.c_str(), summary.c_str());
  for (const auto& p : lines("problems")) std::fprintf(stderr, "%s\n", p.c_str());
  return r->status == 422 ? kExitConfig : kExitFailure;
}

}  // namespace voltad::ctl
