// Reload: a file with problems changes nothing and names every problem; a
// valid one applies the live keys and keeps (and names) the restart-only ones.
#include "daemon/config_reload.h"

#include <doctest/doctest.h>

#include <algorithm>

#include "daemon/config_load.h"

using namespace voltad;
using namespace voltad::config;

namespace {

Config parse(const std::string& text) {
  auto r = load_config_text(text, "test.yaml");
  REQUIRE(r.ok());
  return r.config;
}

const std::string kBase =
    "model:\n  path: /models/a.gguf\nserver:\n  max_connections: 100\nlog:\n  level: info\n";

bool has_note(const ControlResult& r, const std::string& needle) {
  return std::any_of(r.notes.begin(), r.notes.end(),
                     [&](const std::string& n) { return n.find(needle) != std::string::npos; });
}

}  // namespace

TEST_CASE("every live key is a declared key, and the restart-only ones include the model") {
  auto all = all_key_names();
  auto live = live_keys();
  CHECK(live.size() >= 10);
  for (const auto& k : live) CHECK(std::find(all.begin(), all.end(), k) != all.end());
  CHECK(applies_live("server.max_connections"));
  CHECK(applies_live("server.max_connections_per_user"));
  CHECK(applies_live("log.level"));
  CHECK(applies_live("memory.vram_fraction"));
  for (const char* k : {"model.path", "placement.gpu", "engine.backend", "engine.max_context",
                        "server.socket_path", "log.format"})
    CHECK_FALSE(applies_live(k));
}

TEST_CASE("changed keys are listed in declaration order with their values") {
  Config a = parse(kBase);
  Config b = parse(
      "model:\n  path: /models/b.gguf\nserver:\n  max_connections: 50\nlog:\n  level: debug\n");
  auto changes = changed_keys(a, b);
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].key == "model.path");
  CHECK_FALSE(changes[0].live);
  CHECK(changes[1].key == "server.max_connections");
  CHECK(changes[1].before == "100");
  CHECK(changes[1].after == "50");
  CHECK(changes[1].live);
  CHECK(changes[2].key == "log.level");
  CHECK(changed_keys(a, a).empty());

  Config kept = keep_restart_keys(a, b);
  CHECK(kept.model.path == "/models/a.gguf");
  CHECK(kept.server.max_connections == 50);
  CHECK(kept.log.level == "debug");
}

TEST_CASE("a reload with problems changes nothing and reports every one") {
  RunningConfig rc("test.yaml", parse(kBase));
  int applied = 0;
  rc.on_apply([&](const Config&) { ++applied; });
  auto r = rc.reload_text(
      "model:\n  path: /models/a.gguf\nserver:\n  max_connections: 0\n  max_conections: 5\n"
      "log:\n  level: loud\n");
  CHECK_FALSE(r.ok);
  REQUIRE(r.problems.size() == 3);
  CHECK(r.problems[0].rfind("test.yaml:4:", 0) == 0);  // FILE:LINE:COL
  CHECK(r.summary.find("3 problems") != std::string::npos);
  CHECK(applied == 0);
  CHECK(rc.get().server.max_connections == 100);
  CHECK(rc.get().log.level == "info");
}

TEST_CASE("a valid reload applies the live keys and keeps the restart-only ones") {
  RunningConfig rc("test.yaml", parse(kBase));
  Config seen;
  rc.on_apply([&](const Config& c) { seen = c; });
  auto r = rc.reload_text(
      "model:\n  path: /models/b.gguf\nserver:\n  max_connections: 50\n"
      "engine:\n  max_context: 8192\n");
  REQUIRE(r.ok);
  CHECK(seen.server.max_connections == 50);
  CHECK(seen.model.path == "/models/a.gguf");
  CHECK(seen.engine.max_context == 4096);
  CHECK(rc.get().server.max_connections == 50);
  CHECK(rc.get().model.path == "/models/a.gguf");
  CHECK(has_note(r, "server.max_connections: 100 -> 50 (applied)"));
  CHECK(has_note(r, "model.path"));
  CHECK(has_note(r, "engine.max_context: 4096 -> 8192 needs a restart"));
  CHECK(r.summary.find("1 change applied, 2 waiting for a restart") != std::string::npos);

  // Reloading the same file again: the restart-only changes are still reported.
  auto again = rc.reload_text(
      "model:\n  path: /models/b.gguf\nserver:\n  max_connections: 50\n"
      "engine:\n  max_context: 8192\n");
  CHECK(again.ok);
  CHECK(has_note(again, "model.path"));
  CHECK_FALSE(has_note(again, "max_connections"));
}

TEST_CASE("a reload asks the machine check: its problems refuse, its warnings are noted") {
  RunningConfig rc("test.yaml", parse(kBase));
  int applied = 0;
  rc.on_apply([&](const Config&) { ++applied; });
  std::string asked_path;
  rc.set_machine_check([&](const Config& c) {
    asked_path = c.model.path;
    RunningConfig::MachineCheck m;
    if (c.server.socket_group == "nosuchgroup")
      m.problems.push_back("test.yaml:4:17: server.socket_group 'nosuchgroup' is not a group");
    if (c.model.path == "/models/gone.gguf") m.warnings.push_back("no model at /models/gone.gguf");
    return m;
  });

  // The check sees the file's values (the new model path), before anything applies.
  auto refused = rc.reload_text(
      "model:\n  path: /models/b.gguf\nserver:\n  socket_group: nosuchgroup\n"
      "  max_connections: 50\n");
  CHECK_FALSE(refused.ok);
  CHECK(asked_path == "/models/b.gguf");
  REQUIRE(refused.problems.size() == 1);
  CHECK(refused.problems[0].find("socket_group 'nosuchgroup'") != std::string::npos);
  CHECK(refused.summary.find("reload refused") != std::string::npos);
  CHECK(applied == 0);
  CHECK(rc.get().server.max_connections == 100);

  auto warned =
      rc.reload_text("model:\n  path: /models/gone.gguf\nserver:\n  max_connections: 50\n");
  REQUIRE(warned.ok);
  CHECK(applied == 1);
  CHECK(rc.get().server.max_connections == 50);
  CHECK(has_note(warned, "warning: no model at /models/gone.gguf"));
  CHECK(std::any_of(warned.notes.begin(), warned.notes.end(), [](const std::string& n) {
    return n.rfind("model.path: ", 0) == 0 && n.find("needs a restart") != std::string::npos;
  }));
}
