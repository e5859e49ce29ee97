// The config declarations drive parsing, validation, --dump-config and
// docs/CONFIG.md; these tests hold each of those to account.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "daemon/config_load.h"
#include "daemon/config_paths.h"

using namespace voltad::config;

namespace {

LoadResult load(const std::string& text) { return load_config_text(text, "test.yaml"); }

std::string problems_text(const LoadResult& r) {
  std::string s;
  for (auto& p : r.problems) s += p.to_string() + "\n";
  return s;
}

const std::string kMinimal = "model:\n  path: /models/m.gguf\n";

}  // namespace

TEST_CASE("a minimal file is valid and fills in defaults") {
  auto r = load(kMinimal);
  REQUIRE_MESSAGE(r.ok(), problems_text(r));
  CHECK(r.config.model.path == "/models/m.gguf");
  CHECK(r.config.memory.vram_fraction == doctest::Approx(0.90));
  CHECK(r.config.server.socket_mode == "0660");
  CHECK(r.config.server.read_timeout.value == std::chrono::seconds(30));
  CHECK(r.config.engine.backend == "cuda");
}

TEST_CASE("values of every type are read") {
  auto r = load(kMinimal +
                "server:\n  allow_users: [alice, \"1001\"]\n  max_body_bytes: 2MiB\n"
                "  read_timeout: 1500ms\n  max_connections: 12\n  max_connections_per_user: 3\n"
                "memory:\n  vram_fraction: 0.5\n  kv_cache_bytes: 3GiB\n"
                "placement:\n  strict: true\n  gpu: 0000:b7:00.0\n");
  REQUIRE_MESSAGE(r.ok(), problems_text(r));
  CHECK(r.config.server.allow_users == StringList{"alice", "1001"});
  CHECK(r.config.server.max_body_bytes.bytes == 2u << 20);
  CHECK(r.config.server.read_timeout.value == std::chrono::milliseconds(1500));
  CHECK(r.config.server.max_connections == 12);
  CHECK(r.config.server.max_connections_per_user == 3);
  CHECK(load(kMinimal).config.server.max_connections_per_user == 32);  // the default
  CHECK(load(kMinimal + "server:\n  max_connections_per_user: 0\n").problems.size() == 1);
  CHECK(r.config.memory.vram_fraction == doctest::Approx(0.5));
  CHECK(r.config.memory.kv_cache_bytes.bytes == 3ull << 30);
  CHECK(r.config.placement.strict);
  CHECK(r.config.placement.gpu == "0000:b7:00.0");
}

TEST_CASE("an unknown key is reported at its position with the nearest name") {
  auto r = load(kMinimal + "memory:\n  vram_fraktion: 0.9\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].line == 4);
  CHECK(r.problems[0].column == 3);
  CHECK(r.problems[0].message.find("unknown key 'memory.vram_fraktion'") != std::string::npos);
  CHECK(r.problems[0].message.find("did you mean 'vram_fraction'?") != std::string::npos);
}

TEST_CASE("a repeated key or section is a problem (yaml-cpp would keep the first silently)") {
  auto key = load(kMinimal + "  path: /models/other.gguf\n");
  REQUIRE_MESSAGE(key.problems.size() == 1, problems_text(key));
  CHECK(key.problems[0].line == 3);
  CHECK(key.problems[0].message == "duplicate key 'model.path' (first at line 2); keep one");
  auto section = load(kMinimal + "engine:\n  backend: cpu\nengine:\n  max_context: 1024\n");
  REQUIRE_MESSAGE(section.problems.size() == 1, problems_text(section));
  CHECK(section.problems[0].line == 5);
  CHECK(section.problems[0].message.find("duplicate section 'engine' (first at line 3)") !=
        std::string::npos);
}

TEST_CASE("a key in the wrong section names the right one") {
  auto r = load(kMinimal + "server:\n  vram_fraction: 0.9\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].message.find("did you mean 'memory.vram_fraction'?") != std::string::npos);
}

TEST_CASE("an unknown section is reported with the nearest section") {
  auto r = load(kMinimal + "placment:\n  gpu: auto\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].line == 3);
  CHECK(r.problems[0].message.find("did you mean 'placement'?") != std::string::npos);
}

TEST_CASE("wrong types are reported with the expected type") {
  auto r = load(kMinimal +
                "server:\n  max_connections: many\n  allow_users: alice\n"
                "placement:\n  strict: maybe\n"
                "memory:\n  monitor_interval: fast\n  kv_cache_bytes: lots\n");
  REQUIRE_MESSAGE(r.problems.size() == 5, problems_text(r));
  std::string all = problems_text(r);
  CHECK(all.find("test.yaml:4:20: server.max_connections: expected an integer, got 'many'") != std::string::npos);
  CHECK(all.find("server.allow_users: expected a list of strings") != std::string::npos);
  CHECK(all.find("placement.strict: expected true or false") != std::string::npos);
  CHECK(all.find("memory.monitor_interval: expected a duration") != std::string::npos);
  CHECK(all.find("memory.kv_cache_bytes: expected a size") != std::string::npos);
  CHECK(all.find("got 'lots': not a number") != std::string::npos);
  CHECK(all.find("got 'fast': not a number") != std::string::npos);
}

TEST_CASE("out-of-range values and bad choices are reported") {
  auto r = load(kMinimal +
                "memory:\n  vram_fraction: 1.5\n"
                "engine:\n  kv_cache_type: int4\n  max_sequences: 0\n"
                "placement:\n  gpu: my-favourite\n  membind: bnid\n");
  REQUIRE_MESSAGE(r.problems.size() == 5, problems_text(r));
  std::string all = problems_text(r);
  CHECK(all.find("memory.vram_fraction: out of range: 1.5 (allowed: 0.1 to 0.98)") != std::string::npos);
  CHECK(all.find("engine.kv_cache_type: invalid value 'int4' (one of: fp16, int8)") != std::string::npos);
  CHECK(all.find("engine.max_sequences: out of range: 0") != std::string::npos);
  CHECK(all.find("placement.gpu: invalid GPU 'my-favourite'") != std::string::npos);
  CHECK(all.find("did you mean 'bind'?") != std::string::npos);
}

TEST_CASE("a timeout or size of 0 that would refuse every request is out of range") {
  // read_timeout 0 closed every connection at once (voltactl could not
  // even reload it back); the sizes at 0 refused every request.
  auto r = load(kMinimal +
                "server:\n  read_timeout: 0\n  write_timeout: 500ms\n  max_header_bytes: 0\n"
                "  max_body_bytes: 100\n  shutdown_grace: 0\n"
                "memory:\n  monitor_interval: 0\n");
  REQUIRE_MESSAGE(r.problems.size() == 5, problems_text(r));
  std::string all = problems_text(r);
  CHECK(all.find("server.read_timeout: out of range: 0s (allowed: 1s to 24h)") != std::string::npos);
  CHECK(all.find("server.write_timeout: out of range: 500ms (allowed: 1s to 24h)") !=
        std::string::npos);
  CHECK(all.find("server.max_header_bytes: out of range: 0 (allowed: 1KiB to 64MiB)") !=
        std::string::npos);
  CHECK(all.find("server.max_body_bytes: out of range: 100 (allowed: 1KiB to 1GiB)") !=
        std::string::npos);
  CHECK(all.find("memory.monitor_interval: out of range: 0s (allowed: 100ms to 1h)") !=
        std::string::npos);
  CHECK(all.find("shutdown_grace") == std::string::npos);  // 0: cancel at once, allowed
  auto edges = load(kMinimal +
                    "server:\n  read_timeout: 1s\n  max_header_bytes: 1KiB\n"
                    "  max_body_bytes: 1GiB\nmemory:\n  monitor_interval: 100ms\n");
  CHECK_MESSAGE(edges.problems.empty(), problems_text(edges));
}

TEST_CASE("server.socket_path must fit a Unix socket address (1 to 107 bytes)") {
  // sun_path holds 108 bytes with the terminating NUL; the daemon could
  // not bind a longer path (exit 73), so --verify-config refuses it.
  const std::string fits = "/tmp/" + std::string(97, 's') + ".sock";
  REQUIRE(fits.size() == 108 - 1);
  auto ok = load(kMinimal + "server:\n  socket_path: " + fits + "\n");
  CHECK_MESSAGE(ok.ok(), problems_text(ok));
  auto long_path = load(kMinimal + "server:\n  socket_path: " + fits + "x\n");
  REQUIRE(long_path.problems.size() == 1);
  CHECK(long_path.problems[0].to_string() ==
        "test.yaml:4:16: server.socket_path: '" + fits +
            "x' is 108 bytes; a Unix socket path is at most 107; choose a shorter path");
  auto empty = load(kMinimal + "server:\n  socket_path: \"\"\n");
  REQUIRE(empty.problems.size() == 1);
  CHECK(empty.problems[0].message.find(
            "server.socket_path: empty (0 bytes); a Unix socket path is 1 to 107 bytes") == 0);
  // A path with variables is not measured: they expand in the daemon's
  // environment, which the checking process need not share (an admin's
  // ${RUNTIME_DIRECTORY} is not the unit's /run/voltad).
  auto with_variable =
      load(kMinimal + "server:\n  socket_path: ${RUNTIME_DIRECTORY}/" + std::string(120, 'v') + "\n");
  CHECK_MESSAGE(with_variable.ok(), problems_text(with_variable));
}

TEST_CASE("a missing required key is reported") {
  auto r = load("log:\n  level: debug\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].message == "missing required key 'model.path'");
  auto r2 = load("model:\n  name: x\n");
  REQUIRE(r2.problems.size() == 1);
  CHECK(r2.problems[0].message == "missing required key 'model.path'");
  CHECK(r2.problems[0].line == 2);
}

TEST_CASE("YAML syntax errors carry their position") {
  auto r = load("model:\n  path: [unclosed\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].message.find("YAML syntax error") == 0);
  CHECK(r.problems[0].line >= 2);
}

TEST_CASE("YAML nested past yaml-cpp's guard says so, not 'bad file'") {
  const int n = 100000;
  auto r = load("model:\n  path: x\n  name: " + std::string(n, '[') + std::string(n, ']') + "\n");
  REQUIRE(r.problems.size() == 1);
  CHECK_MESSAGE(r.problems[0].message.find("YAML nested too deeply (") == 0, r.problems[0].message);
  CHECK(r.problems[0].line == 3);
}

// YAML lets a quoted string run on over lines (yaml-cpp even to the end of
// the file, with no closing quote): a forgotten quote would swallow the
// keys below it into one value, and the file would check as valid.
TEST_CASE("a quoted string that does not end on its line is a problem") {
  auto r = load(
      "model:\n  path: \"/models/m.gguf\nserver:\n  allow_users: [nobody]\nlog:\n  level: "
      "loud\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].line == 2);
  CHECK(r.problems[0].column == 9);
  CHECK(r.problems[0].message.find("model.path: the string opened with \" here does not end") == 0);
  // Single quotes too; here model.path went into the string as well.
  r = load("server:\n  socket_group: 'voltad\nmodel:\n  path: /models/m.gguf\n");
  REQUIRE(r.problems.size() == 2);
  CHECK(r.problems[1].line == 2);
  CHECK(r.problems[1].message.find("server.socket_group: the string opened with '") == 0);
  // Closed quotes with escaped quotes inside are fine.
  r = load("model:\n  path: \"/m \\\" x.gguf\"\n  name: 'it''s'\n");
  REQUIRE_MESSAGE(r.ok(), problems_text(r));
  CHECK(r.config.model.path == "/m \" x.gguf");
  CHECK(r.config.model.name == "it's");
}

TEST_CASE("a second YAML document is a problem, not dropped unread") {
  auto r = load(kMinimal + "---\nserver:\n  max_connections: notanumber\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].line == 4);
  CHECK(r.problems[0].message.find("a second YAML document") == 0);
}

TEST_CASE("strings must be UTF-8 (a model name clients could not send back)") {
  auto r = load(kMinimal +
                "  name: \"caf\xe9\"\nserver:\n  allow_users: [alice, \"b\xff"
                "b\"]\n");
  REQUIRE(r.problems.size() == 2);
  CHECK(r.problems[0].message == "model.name: not valid UTF-8");
  CHECK(r.problems[1].message == "server.allow_users: not valid UTF-8");
  CHECK(r.problems[1].line == 5);
}

TEST_CASE("a value of the wrong form says what is allowed; an empty one is placed at its key") {
  auto r = load(kMinimal + "server:\n  max_connections: 99999999999999999999\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].message ==
        "server.max_connections: integer out of range: 99999999999999999999 (allowed: 1 to "
        "65536)");
  // yaml-cpp marks an empty value at the next token (here past the file's
  // end): the problem goes to the key.
  r = load("model:\n  path:\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].line == 2);
  CHECK(r.problems[0].column == 3);
}

TEST_CASE("paths may hold only the known ${...} variables") {
  auto r = load(
      "model:\n  path: ${STATE_DIRCTORY}/m.gguf\nserver:\n  socket_path: "
      "${RUNTIME_DIRECTORY/v.sock\n");
  REQUIRE(r.problems.size() == 2);
  CHECK(r.problems[0].message.find("model.path: unknown variable ${STATE_DIRCTORY}") == 0);
  CHECK(r.problems[1].message.find("server.socket_path: '${' at byte 0 has no closing '}'") == 0);
  r = load(
      "model:\n  path: ${HOME}/${STATE_DIRECTORY}/m.gguf\nserver:\n  socket_path: "
      "${CONFIGURATION_DIRECTORY}/${RUNTIME_DIRECTORY}.sock\n");
  CHECK_MESSAGE(r.ok(), problems_text(r));
}

TEST_CASE("three different mistakes give three problems in file order") {
  auto r = load(kMinimal + "memory:\n  vram_fraction: 2\nengine:\n  max_contxt: 100\nlog:\n  level: loud\n");
  REQUIRE_MESSAGE(r.problems.size() == 3, problems_text(r));
  CHECK(r.problems[0].line == 4);
  CHECK(r.problems[1].line == 6);
  CHECK(r.problems[2].line == 8);
}

TEST_CASE("a section that is not a mapping is an error, not a crash") {
  auto r = load(kMinimal + "memory: 5\n");
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].message.find("section 'memory' must be a mapping") != std::string::npos);
  auto r2 = load("- just\n- a list\n");
  CHECK_FALSE(r2.ok());
}

TEST_CASE("--dump-config output is itself a valid config with the same values") {
  auto r = load(kMinimal + "server:\n  allow_groups: [\"we \\\"quote\\\"\", b]\nmemory:\n  kv_cache_bytes: 1536MiB\n"
                "  monitor_interval: 250ms\n");
  REQUIRE_MESSAGE(r.ok(), problems_text(r));
  std::string dumped = dump_config(r.config);
  CHECK(dumped.find("# Share of the card's total memory") != std::string::npos);
  auto again = load(dumped);
  REQUIRE_MESSAGE(again.ok(), problems_text(again));
  CHECK(dump_config(again.config) == dumped);
  CHECK(again.config.server.allow_groups == StringList{"we \"quote\"", "b"});
  CHECK(again.config.memory.kv_cache_bytes.bytes == 1536ull << 20);
  CHECK(again.config.memory.monitor_interval.value == std::chrono::milliseconds(250));
}

TEST_CASE("docs/CONFIG.md is generated from the declarations and up to date") {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  REQUIRE(src != nullptr);
  std::ifstream in(std::string(src) + "/docs/CONFIG.md");
  REQUIRE_MESSAGE(in.good(), "docs/CONFIG.md is missing: run scripts/gen-config-doc.sh");
  std::stringstream text;
  text << in.rdbuf();
  CHECK_MESSAGE(text.str() == config_reference_markdown(),
                "docs/CONFIG.md is stale: run scripts/gen-config-doc.sh");
  for (auto& key : all_key_names()) CHECK(text.str().find("`" + key + "`") != std::string::npos);
}

TEST_CASE("the example config in etc/ is valid") {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  REQUIRE(src != nullptr);
  auto r = load_config_file(std::string(src) + "/etc/voltad.yaml");
  CHECK_MESSAGE(r.ok(), problems_text(r));
}

TEST_CASE("systemd's directory variables are honoured in paths") {
  setenv("RUNTIME_DIRECTORY", "/run/voltad-test:/run/other", 1);
  setenv("STATE_DIRECTORY", "/var/lib/voltad-test", 1);
  CHECK(expand_path("${RUNTIME_DIRECTORY}/voltad.sock") == "/run/voltad-test/voltad.sock");
  CHECK(expand_path("${STATE_DIRECTORY}/models/m.gguf") == "/var/lib/voltad-test/models/m.gguf");
  unsetenv("RUNTIME_DIRECTORY");
  unsetenv("STATE_DIRECTORY");
  CHECK(expand_path("${RUNTIME_DIRECTORY}/x") != "${RUNTIME_DIRECTORY}/x");
}

TEST_CASE("durations and sizes parse and print back") {
  CHECK(parse_duration("2m")->value == std::chrono::minutes(2));
  CHECK(parse_duration("0.5")->value == std::chrono::milliseconds(500));
  CHECK_FALSE(parse_duration("5 parsecs"));
  CHECK_FALSE(parse_duration(""));
  CHECK(parse_byte_size("16GiB")->bytes == 16ull << 30);
  CHECK(parse_byte_size("1.5GB")->bytes == 1'500'000'000ull);
  CHECK_FALSE(parse_byte_size("-1"));
  CHECK_FALSE(parse_byte_size("99999999999TB"));
  // Past 2^63 bytes llround had no answer: 1e19 came out as 2^63 (8 EiB).
  CHECK_FALSE(parse_byte_size("10000000000000000000"));
  CHECK(parse_byte_size("9000000000000000000")->bytes == 9'000'000'000'000'000'000ull);
  CHECK(duration_problem("2m").empty());
  CHECK(duration_problem("-1s") == "a duration cannot be negative");
  CHECK(duration_problem("99999999999999999999s").find("too long") == 0);
  CHECK(duration_problem("fast") == "not a number");
  CHECK(duration_problem("5 parsecs").find("unknown unit 'parsecs'") == 0);
  // What is wrong with a size that is not one, for the messages.
  CHECK(byte_size_problem("16GiB").empty());
  CHECK(byte_size_problem("-1") == "a size cannot be negative");
  CHECK(byte_size_problem("99999999999TB") == "too large (sizes stop below 8 EiB)");
  CHECK(byte_size_problem("lots") == "not a number");
  CHECK(byte_size_problem("4Gb").find("unknown unit 'Gb'") == 0);
  CHECK(format_byte_size(ByteSize{3ull << 30}) == "3GiB");
  CHECK(format_duration(Duration{std::chrono::milliseconds(1500)}) == "1500ms");
}

TEST_CASE("placement.cpus: lists of any length are checked without recursion") {
  for (const char* good : {"auto", "all-threads", "0", "0-7", "0-7,16", "1,3,5-9,12"}) {
    auto r = load(kMinimal + "placement:\n  cpus: \"" + good + "\"\n");
    CHECK_MESSAGE(r.ok(), good << ": " << problems_text(r));
  }
  // What placement's parser refuses at start, --verify-config refuses too:
  // ranges that run backwards, numbers past any machine's.
  for (const char* bad : {"", "0-", "-1", "1,,2", "1,", ",1", "1-2-3", "a", "0x1", "1 ,2", "5-2",
                          "0-99999999999", "70000"}) {
    auto r = load(kMinimal + "placement:\n  cpus: \"" + bad + "\"\n");
    CHECK_MESSAGE(problems_text(r).find("placement.cpus: invalid CPU list") != std::string::npos,
                  "'" << bad << "': " << problems_text(r));
  }
  // A 60 KB list (std::regex recursed once a character: a stack overflow,
  // at a reload the serving daemon's), valid and then not; the bad one's
  // message shows its start, not 60 KB.
  std::string list;
  for (int i = 0; i < 20000; ++i) list += (i ? "," : "") + std::to_string(i % 64);
  CHECK(load(kMinimal + "placement:\n  cpus: \"" + list + "\"\n").ok());
  auto r = load(kMinimal + "placement:\n  cpus: \"" + list + ",x\"\n");
  const std::string text = problems_text(r);
  CHECK(text.find("invalid CPU list: 'x' in '0,1,2,") != std::string::npos);
  CHECK(text.size() < 400);
  const auto huge = load(kMinimal + "placement:\n  cpus: \"" + std::string(100000, '7') + "\"\n");
  CHECK(problems_text(huge).find("is far beyond any machine's CPU numbers (at most 65536)") !=
        std::string::npos);
  CHECK(problems_text(huge).size() < 400);
  // Ranges that repeat cost no more than one (5,000 times 0-65536).
  std::string ranges;
  for (int i = 0; i < 5000; ++i) ranges += (i ? "," : "") + std::string("0-65536");
  CHECK(load(kMinimal + "placement:\n  cpus: \"" + ranges + "\"\n").ok());
}
