#include "daemon/server_admin.h"

#include <nlohmann/json.hpp>

#include "daemon/log.h"

namespace voltad {

namespace http = boost::beast::http;
using Json = nlohmann::json;

HttpResponse admin_request(ServerContext& ctx, const HttpRequest& req, const PeerCredentials& peer,
                           const std::string& path) {
  const std::string action = path.substr(7);  // after "/admin/"
  if (action != "reload" && action != "drain" && action != "resume")
    return error_response(not_found("no admin action '" + action +
                                    "'; there are /admin/reload, /admin/drain and /admin/resume"),
                          req.version(), req.keep_alive());
  if (req.method() != http::verb::post) {
    ApiError e;
    e.status = 405;
    e.code = "method_not_allowed";
    e.message = std::string(req.method_string()) + " is not allowed on " + path + "; use POST";
    HttpResponse res = error_response(e, req.version(), req.keep_alive());
    res.set(http::field::allow, "POST");
    return res;
  }
  AccessDecision admin = ctx.access()->check_admin(peer);
  if (!admin.allowed) {
    spdlog::warn("refused {} from uid {} pid {}: {}", path, peer.uid, peer.pid, admin.reason);
    ApiError e;
    e.status = 403;
    e.type = "permission_error";
    e.code = "not_an_administrator";
    e.message = admin.reason;
    return error_response(e, req.version(), req.keep_alive());
  }
  // Any client of the socket may send it (voltactl, curl): named by its
  // credentials, as refusals are.
  const std::string who = "uid " + std::to_string(peer.uid) + " (" + peer.user + ") pid " +
                          std::to_string(peer.pid) + " on the socket";
  spdlog::info("{} requested by {}", path, who);
  ControlResult r = action == "reload"  ? ctx.lifecycle.request_reload()
                    : action == "drain" ? ctx.lifecycle.request_drain(who)
                                        : ctx.lifecycle.request_resume(who);
  Json body = {
      {"ok", r.ok}, {"state", health_state_name(ctx.lifecycle.state())}, {"summary", r.summary}};
  if (r.ok)
    body["notes"] = r.notes;
  else
    body["problems"] = r.problems;
  unsigned status = r.ok ? 200 : action == "reload" && !r.problems.empty() ? 422 : 409;
  return json_response(status, body.dump(-1, ' ', false, Json::error_handler_t::replace),
                       req.version(), req.keep_alive());
}

}  // namespace voltad
