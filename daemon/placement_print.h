// `voltad --print-placement`: the machine and the plan, as text for people
// or JSON for scripts (and for `voltactl status` / metrics, through
// applied_json()).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "daemon/placement_apply.h"

namespace voltad::placement {

std::string machine_text(const Topology& topology);
std::string plan_text(const PlacementPlan& plan);
nlohmann::json machine_json(const Topology& topology);
nlohmann::json plan_json(const PlacementPlan& plan);
nlohmann::json applied_json(const AppliedPlacement& applied);

struct PrintPlacementRequest {
  std::string config_path;   // empty: every key at its default
  std::string topology_xml;  // empty: this machine
  std::string gpu;           // overrides placement.gpu when not empty
  bool json = false;
};

struct PrintPlacementOutput {
  int exit_code = 0;  // daemon/exit_codes.h
  std::string out;    // for stdout
  std::string err;    // for stderr
};

// Plans (never binds) and renders. A config without model.path is fine
// here: the mode looks at placement only.
PrintPlacementOutput render_placement(const PrintPlacementRequest& request);

// render_placement() written to stdout/stderr; returns the exit code.
int print_placement(const PrintPlacementRequest& request);

}  // namespace voltad::placement
