// `voltad --plan`: the VRAM plan (engine/vram_plan.h) for a model file and a
// config, printed for people or as JSON, without allocating anything on a
// card, so an operator can size a GPU before trying:
//
//   voltad --plan [--config FILE] [--model FILE.gguf] [--assume-vram BYTES]
//                 [--assume-used BYTES] [--json]
//
// Exit codes: 0 when the plan fits, kExitVramBudget when it does not; usage,
// config and model errors as elsewhere (daemon/exit_codes.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/vram_plan.h"

namespace voltad::plan {

struct PlanRequest {
  std::string config_path;   // empty: the default config file where it exists
                             // (config::default_config_path), else every key at its default
  std::string model_path;    // overrides model.path when not empty
  uint64_t assume_vram = 0;  // the card's total bytes; 0: measure the card
  uint64_t assume_used = 0;  // bytes other processes hold on the assumed card
  bool json = false;
};

struct PlanOutput {
  int exit_code = 0;  // daemon/exit_codes.h
  std::string out;    // for stdout
  std::string err;    // for stderr
};

// The arguments of `voltad --plan ...` (argv without the program name; the
// --plan flag itself among them). Error: a usage message.
Result<PlanRequest> parse_plan_args(const std::vector<std::string>& args);

// Loads the config and the model (mapped, validated, never uploaded) and plans.
PlanOutput render_plan(const PlanRequest& request);

nlohmann::json vram_plan_json(const VramPlan& plan);

// The whole mode: parse, render, print; returns the exit code.
int plan_main(const std::vector<std::string>& args);

// The usage lines of the mode, for voltad --help.
extern const char* const kPlanUsage;

}  // namespace voltad::plan
