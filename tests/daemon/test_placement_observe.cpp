// The /proc readers the placement probe checks a process with.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/placement_observe.h"

using namespace voltad::placement;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/voltad-placement-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

bool has(const std::vector<std::string>& lines, const std::string& text) {
  for (auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("numa_maps lines: policy, its nodes, pages per node") {
  auto bind =
      parse_numa_maps_line("7f5e2c000000 bind:0 anon=256 dirty=256 N0=256 kernelpagesize_kB=4");
  REQUIRE(bind.ok());
  CHECK(bind->start == 0x7f5e2c000000ull);
  CHECK(bind->policy == "bind");
  CHECK(bind->policy_nodes == IndexList{0});
  CHECK(bind->pages_on_node.at(0) == 256);

  auto def = parse_numa_maps_line(
      "55d0a0e00000 default file=/usr/bin/voltad mapped=3 N0=3 kernelpagesize_kB=4");
  REQUIRE(def.ok());
  CHECK(def->policy == "default");
  CHECK(def->policy_nodes.empty());

  auto many = parse_numa_maps_line("7f0000000000 prefer (many):0-1 anon=3 N0=1 N1=2");
  REQUIRE(many.ok());
  CHECK(many->policy == "prefer (many)");
  CHECK(many->policy_nodes == IndexList{0, 1});
  CHECK(many->pages_on_node.at(1) == 2);

  auto flags = parse_numa_maps_line("7f0000000000 interleave=static:0-1 anon=2 N0=1 N1=1");
  REQUIRE(flags.ok());
  CHECK(flags->policy == "interleave");
  CHECK(flags->policy_nodes == IndexList{0, 1});

  CHECK_FALSE(parse_numa_maps_line("zzz bind:0").ok());
  CHECK_FALSE(parse_numa_maps_line("7f00").ok());
}

TEST_CASE("thread placements from a /proc tree") {
  TempDir proc;
  for (int tid : {100, 101}) {
    auto dir = proc.path / "100" / "task" / std::to_string(tid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "status") << "Name:\t" << (tid == 100 ? "voltad" : "engine")
                                  << "\nState:\tS\n"
                                  << "Cpus_allowed:\tff\nCpus_allowed_list:\t"
                                  << (tid == 100 ? "8-15" : "8-9")
                                  << "\nMems_allowed:\t3\nMems_allowed_list:\t0-1\n";
  }
  auto tasks = read_task_placements(100, proc.path.string());
  REQUIRE(tasks.ok());
  REQUIRE(tasks->size() == 2);
  CHECK((*tasks)[0].name == "voltad");
  CHECK((*tasks)[0].cpus_allowed == parse_index_list("8-15", "x").value());
  CHECK((*tasks)[1].tid == 101);
  CHECK((*tasks)[1].mems_allowed == IndexList{0, 1});

  auto diffs = check_tasks_against(*tasks, parse_index_list("8-15", "x").value(), {1});
  REQUIRE(diffs.size() == 1);
  CHECK(diffs[0] == "thread 101 (engine) runs on CPUs 8-9, the plan says 8-15");
  CHECK(has(check_tasks_against(*tasks, parse_index_list("8-9", "x").value(), {2}),
            "may use memory nodes 0-1 only"));

  auto missing = read_task_placements(999, proc.path.string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("/999/task") != std::string::npos);
}

TEST_CASE("this process's threads and maps can be read") {
  auto tasks = read_task_placements(0);
  REQUIRE(tasks.ok());
  CHECK_FALSE(tasks->empty());
  CHECK_FALSE(tasks->front().cpus_allowed.empty());
  CHECK_FALSE(tasks->front().mems_allowed.empty());
  auto maps = read_numa_maps(0);
  REQUIRE_MESSAGE(maps.ok(), (maps.ok() ? "" : maps.error().message));
  CHECK_FALSE(maps->empty());
}

TEST_CASE("a mapping is checked for policy and where its pages are") {
  std::vector<NumaMapsEntry> maps = {parse_numa_maps_line("1000 bind:1 anon=4 N1=3 N0=1").value(),
                                     parse_numa_maps_line("2000 prefer:1 anon=4 N1=4").value()};
  CHECK(has(check_mapping_against(maps, reinterpret_cast<void*>(0x1000), MemoryPolicy::bind, {1}),
            "1 of the buffer's pages are on node 0"));
  CHECK(check_mapping_against(maps, reinterpret_cast<void*>(0x2000), MemoryPolicy::preferred, {1})
            .empty());
  CHECK(has(check_mapping_against(maps, reinterpret_cast<void*>(0x2000), MemoryPolicy::bind, {1}),
            "the buffer's policy is prefer:1, the plan says bind:1"));
  CHECK(has(check_mapping_against(maps, reinterpret_cast<void*>(0x3000), MemoryPolicy::bind, {1}),
            "no numa_maps entry"));
}
