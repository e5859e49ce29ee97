// GET /plan (daemon/server_router.cpp): the VRAM plan the daemon made at
// start, as voltactl plan reads it. The CUDA path needs a card to reach in
// the daemon; here the served model carries a plan as the CUDA backend's
// start leaves it, and one without (the CPU backend's).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "daemon/plan_command.h"
#include "daemon/server_router.h"
#include "engine/vram_plan.h"
#include "tests/engine/plan_shapes.h"

using namespace voltad;
using Json = nlohmann::json;

namespace {

RouteOutcome get(ServerContext& ctx, const char* target,
                 boost::beast::http::verb verb = boost::beast::http::verb::get) {
  HttpRequest req{verb, target, 11};
  return route_request(ctx, req, PeerCredentials{}, [] {});
}

Json body_of(const RouteOutcome& r) {
  REQUIRE(r.response.has_value());
  return Json::parse(r.response->body(), nullptr, false);
}

}  // namespace

TEST_CASE("GET /plan: 503 while loading, 404 without a plan, the plan and its table with one") {
  ServerContext ctx;
  RouteOutcome r = get(ctx, "/plan");
  CHECK(r.endpoint == "/plan");
  REQUIRE(r.response.has_value());
  CHECK(r.response->result_int() == 503);  // no model yet

  ServedModel cpu;
  cpu.name = "m";
  cpu.backend = "cpu";
  ctx.served.store(&cpu);
  r = get(ctx, "/plan");
  CHECK(r.response->result_int() == 404);
  Json j = body_of(r);
  CHECK(j["error"]["code"] == "no_vram_plan");
  CHECK(j["error"]["message"].get<std::string>().find("voltad --plan") != std::string::npos);

  // A plan as the daemon keeps it: an 8B model's on a 32 GB card.
  const ModelConfig c = test::plan_shape(4096, 32, 32, 8, 14336, 128256);
  const DeviceMemory card = test::plan_card("Tesla V100-SXM2-32GB", 32510);
  const VramPlan plan = plan_vram(
      c, 4'900'000'000ull, EngineLimits{4096, 16, 2048, KvCacheType::Fp16}, MemoryLimits{}, card);
  ServedModel cuda = cpu;
  cuda.backend = "cuda";
  cuda.vram_plan_text = vram_plan_text(plan);
  cuda.vram_plan_json = plan::vram_plan_json(plan).dump();
  cuda.vram_measured_with = "nvml";
  ctx.served.store(&cuda);
  r = get(ctx, "/plan");
  CHECK(r.response->result_int() == 200);
  j = body_of(r);
  CHECK(j["text"] == cuda.vram_plan_text);
  CHECK(j["measured_with"] == "nvml");
  CHECK(j["plan"]["fits"] == plan.fits);
  CHECK(j["plan"]["device"]["total_bytes"] == card.total_bytes);
  CHECK(j["plan"]["planned_bytes"] == plan.planned_bytes);
  CHECK_FALSE(j.contains("vram"));  // no VRAM guard in this context

  r = get(ctx, "/plan", boost::beast::http::verb::post);
  CHECK(r.response->result_int() == 405);
  ctx.served.store(nullptr);
}
