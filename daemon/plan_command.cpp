#include "daemon/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "daemon/config_load.h"
#include "daemon/config_paths.h"
#include "daemon/exit_codes.h"
#include "daemon/model_path_check.h"
#include "engine/model.h"

namespace voltad::plan {

const char* const kPlanUsage =
    "       voltad --plan [--config FILE] [--model FILE.gguf] --assume-vram BYTES\n"
    "                     [--assume-used BYTES] [--json]\n"
    "                                         print the VRAM plan (weights, workspace, KV cache)\n"
    "                                         for a card of --assume-vram BYTES (required:\n"
    "                                         the daemon measures the card at start), e.g.\n"
    "                                         --assume-vram 32510MiB (a V100 32 GB)\n";

namespace {

using nlohmann::json;

// The smallest --assume-vram taken: less is a unit left out, not a card.
constexpr uint64_t kSmallestCard = 256ull << 20;

Result<uint64_t> parse_bytes(const std::string& flag, const std::string& text) {
  auto size = config::parse_byte_size(text);
  if (!size) {
    return make_error(flag + ": '" + text + "' is not a size (" + config::byte_size_problem(text) +
                      "); write bytes or a number with a unit, e.g. 32510MiB, 32GiB, 34GB");
  }
  return size->bytes;
}

// Config problems about model.path do not matter when --model names the file.
bool about_model_path(const config::Problem& p) {
  return p.message == "missing required key 'model.path'" ||
         p.message.rfind("model.path: must not be empty", 0) == 0;
}

PlanOutput fail(int code, const std::string& message) {
  PlanOutput r;
  r.exit_code = code;
  r.err = "voltad --plan: " + message + "\n";
  return r;
}

}  // namespace

Result<PlanRequest> parse_plan_args(const std::vector<std::string>& args) {
  PlanRequest r;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> Result<std::string> {
      if (i + 1 >= args.size() || args[i + 1].empty()) return make_error(a + " needs a value");
      return args[++i];
    };
    if (a == "--plan") continue;
    if (a == "--json") {
      r.json = true;
    } else if (a == "--config" || a == "-c" || a == "--model") {
      auto v = value();
      if (!v) return v.error();
      (a == "--model" ? r.model_path : r.config_path) = *v;
    } else if (a == "--assume-vram" || a == "--assume-used") {
      auto v = value();
      if (!v) return v.error();
      auto bytes = parse_bytes(a, *v);
      if (!bytes) return bytes.error();
      // A bare number is bytes: "--assume-vram 32" is a typo for 32GiB, not a card.
      if (a == "--assume-vram" && *bytes < kSmallestCard)
        return make_error("--assume-vram: '" + *v + "' is " + std::to_string(*bytes) +
                          " bytes, smaller than any card (at least " +
                          config::format_byte_size(config::ByteSize{kSmallestCard}) +
                          "); a bare number is bytes: write a unit, e.g. 32GiB");
      (a == "--assume-vram" ? r.assume_vram : r.assume_used) = *bytes;
    } else {
      return make_error("unknown argument '" + a + "' for --plan");
    }
  }
  if (r.assume_vram == 0 && r.assume_used != 0)
    return make_error("--assume-used goes with --assume-vram");
  if (r.assume_vram != 0 && r.assume_used >= r.assume_vram)
    return make_error("--assume-used must be less than --assume-vram");
  return r;
}

PlanOutput render_plan(const PlanRequest& req) {
  config::Config cfg = config::Config::defaults();
  // As the daemon: --config, else the default file; where neither exists,
  // the built-in defaults, and the plan says so.
  std::string config_path = req.config_path;
  std::error_code exists_ec;  // one that cannot be looked at is read, and says why
  const bool implicit =
      config_path.empty() &&
      (std::filesystem::exists(config::default_config_path(), exists_ec) || exists_ec);
  if (implicit) config_path = config::default_config_path();
  if (!config_path.empty()) {
    auto loaded = config::load_config_file(config_path);
    std::string problems;
    for (const config::Problem& p : loaded.problems)
      if (req.model_path.empty() || !about_model_path(p)) problems += p.to_string() + "\n";
    if (!problems.empty()) {
      PlanOutput r = fail(
          kExitConfig, config_path + " is invalid; no plan printed" +
                           (implicit ? std::string(" (the daemon's config, read since no --config "
                                                   "was given; --config FILE plans with another)")
                                     : std::string()));
      r.err = problems + r.err;
      return r;
    }
    cfg = loaded.config;
  }
  const std::string model_path =
      req.model_path.empty() ? config::expand_path(cfg.model.path) : req.model_path;
  if (model_path.empty())
    return fail(kExitNoModel,
                "no model: pass --model FILE.gguf, or --config FILE whose model.path names one");
  if (auto problem = model_path_problem(model_path, req.model_path.empty() ? config_path : ""))
    return fail(problem->exit_code, problem->message);
  auto model = load_model(model_path);
  if (!model) return fail(kExitModelData, model.error().message);
  auto weight_bytes = repacked_weight_bytes(model.value()->weights, model.value()->config);
  if (!weight_bytes) return fail(kExitModelData, model_path + ": " + weight_bytes.error().message);

  if (req.assume_vram == 0) {
    return fail(kExitUnavailable,
                "--plan does not measure a card (the daemon does, at start); pass --assume-vram BYTES "
                "with the card's total as nvidia-smi shows it, e.g. 32510MiB for a V100 32 GB or "
                "16160MiB for a V100 16 GB");
  }
  DeviceMemory device;
  device.name = "an assumed card";
  device.total_bytes = req.assume_vram;
  device.used_by_others = req.assume_used;
  device.context_bytes = kAssumedCudaContextBytes;
  device.context_measured = false;

  EngineLimits limits;
  limits.max_context = cfg.engine.max_context;
  limits.max_sequences = cfg.engine.max_sequences;
  limits.max_batch_tokens = cfg.engine.max_batch_tokens;
  limits.kv_cache_type = cfg.engine.kv_cache_type == "int8" ? KvCacheType::Int8 : KvCacheType::Fp16;
  MemoryLimits memory;
  memory.vram_fraction = cfg.memory.vram_fraction;
  memory.kv_cache_bytes = cfg.memory.kv_cache_bytes.bytes;

  ModelConfig config = model.value()->config;
  if (config.name.empty()) config.name = std::filesystem::path(model_path).filename().string();
  const VramPlan plan = plan_vram(config, *weight_bytes, limits, memory, device);
  const std::string past = context_past_training(
      config, limits.max_context, "engine.max_context " + std::to_string(limits.max_context));
  PlanOutput r;
  r.exit_code = plan.fits ? kExitOk : kExitVramBudget;
  if (req.json) {
    json j = vram_plan_json(plan);
    j["model"]["path"] = model_path;
    j["config"] = config_path.empty() ? json(nullptr) : json(config_path);
    j["warnings"] = past.empty() ? json::array() : json::array({past});
    r.out = j.dump(2) + "\n";
  } else {
    r.out = "model: " + model_path + "\nconfig: " +
            (config_path.empty() ? "none (no " + config::default_config_path() +
                                       "; pass --config FILE): every key at its default"
                                 : config_path) +
            "\n" + (past.empty() ? "" : "warning: " + past + "\n") + vram_plan_text(plan);
  }
  return r;
}

json vram_plan_json(const VramPlan& p) {
  const double card = double(std::max<uint64_t>(p.device.total_bytes, 1));
  json components = json::array();
  for (const PlanComponent& c : p.components) {
    components.push_back({{"name", c.name},
                          {"bytes", c.bytes},
                          {"percent_of_card", 100.0 * double(c.bytes) / card},
                          {"note", c.note}});
  }
  const CudaWorkspace& w = p.workspace;
  return {
      {"model", {{"name", p.model_name}}},
      {"device",
       {{"name", p.device.name},
        {"total_bytes", p.device.total_bytes},
        {"used_by_others", p.device.used_by_others},
        {"context_bytes", p.device.context_bytes},
        {"context_measured", p.device.context_measured}}},
      {"limits",
       {{"max_context", p.limits.max_context},
        {"max_sequences", p.limits.max_sequences},
        {"max_batch_tokens", p.limits.max_batch_tokens},
        {"kv_cache_type", kv_cache_type_name(p.limits.kv_cache_type)}}},
      {"memory",
       {{"vram_fraction", p.memory.vram_fraction}, {"kv_cache_bytes", p.memory.kv_cache_bytes}}},
      {"budget_bytes", p.budget_bytes},
      {"planned_bytes", p.planned_bytes},
      {"components", components},
      {"workspace",
       {{"residual", w.residual},
        {"normed", w.normed},
        {"qkv", w.qkv},
        {"attention_out", w.attention_out},
        {"ffn_gate_up", w.ffn_gate_up},
        {"quantized_x", w.quantized_x},
        {"quantized_x_scales", w.quantized_x_scales},
        {"selected", w.selected},
        {"logits", w.logits},
        {"candidates", w.candidates},
        {"topk_scratch", w.topk_scratch},
        {"step_indices", w.step_indices},
        {"attention_partials", w.attention_partials},
        {"attention_arrivals", w.attention_arrivals},
        {"gemm_split", w.gemm_split},
        {"norm_pieces", w.norm_pieces},
        {"swiglu_fused", w.swiglu_fused},
        {"total", w.total()}}},
      {"kv_pool",
       {{"bytes_per_token", p.kv.bytes_per_token},
        {"block_tokens", kKvBlockTokens},
        {"block_bytes", p.kv.block_bytes},
        {"blocks", p.kv.blocks},
        {"tokens", p.kv.tokens},
        {"full_sequences", p.kv.full_sequences},
        {"bytes", p.kv.bytes},
        {"capped_by_limits", p.kv.capped}}},
      {"fits", p.fits},
      {"refusal", p.refusal},
      {"ways_out", p.ways_out}};
}

int plan_main(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("usage:\n%s", kPlanUsage);
      return kExitOk;
    }
  }
  auto request = parse_plan_args(args);
  if (!request) {
    std::fprintf(stderr, "voltad: %s\nusage:\n%s", request.error().message.c_str(), kPlanUsage);
    return kExitUsage;
  }
  PlanOutput r = render_plan(*request);
  // --json answers on stdout even when no plan was made (as
  // --print-placement --json does): a script reads why there, not nothing.
  if (request->json && r.out.empty()) {
    std::string why = r.err;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    r.out = json{{"error", why}, {"exit_code", r.exit_code}, {"fits", nullptr}}.dump(2) + "\n";
  }
  std::fputs(r.out.c_str(), stdout);
  std::fputs(r.err.c_str(), stderr);
  return r.exit_code;
}

}  // namespace voltad::plan
