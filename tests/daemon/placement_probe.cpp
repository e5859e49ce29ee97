// placement_probe: applies a placement to itself on this machine and checks,
// from /proc and from inside its threads, that it holds; or checks another
// process (a running voltad) against expected CPUs and nodes.
//
//   placement_probe [KEY=VALUE...]
//       KEY: gpu numa cpus threads membind strict (placement.*) and backend
//       (engine.backend; default cpu, so a machine without a GPU is probed).
//       The probe's own keys: cpus=narrow (the last CPU of the plan, so that
//       the binding is visibly narrower than the default affinity);
//       early_thread=true (a thread exists before the placement is applied,
//       as in a daemon that binds too late); expect=refused (success is
//       placement.strict refusing).
//       Plans with this machine's topology, applies (before any thread
//       exists), starts the worker threads, allocates a node-local staging
//       buffer, then checks every thread's Cpus_allowed_list and
//       Mems_allowed_list, each worker's own affinity and memory policy, the
//       environment, and the buffer's numa_maps entry.
//   placement_probe --pid PID --cpus LIST [--nodes LIST]
//       Checks every thread of PID, and every numa_maps mapping of it that
//       has a node policy.
//
// Exit: 0 all as planned, 1 something differs, 2 usage or planning error,
// 74 (kExitPlacement) placement.strict refused.
#include <numaif.h>
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "daemon/exit_codes.h"
#include "daemon/placement_observe.h"
#include "daemon/placement_print.h"

using namespace voltad::placement;

namespace {

int usage(const std::string& why) {
  std::fprintf(stderr,
               "placement_probe: %s\nusage: placement_probe "
               "[gpu=|numa=|cpus=|threads=|membind=|strict=|backend=VALUE...]\n"
               "       placement_probe --pid PID --cpus LIST [--nodes LIST]\n",
               why.c_str());
  return 2;
}

struct Report {
  int problems = 0;
  void check(bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "ok      " : "MISMATCH", what.c_str());
    problems += !ok;
  }
  void all(const std::vector<std::string>& diffs, const std::string& what) {
    for (auto& d : diffs) check(false, d);
    if (diffs.empty()) check(true, what);
  }
};

// What a worker thread sees from the inside.
struct WorkerView {
  IndexList affinity;
  MemoryPolicy policy = MemoryPolicy::off;
  IndexList policy_nodes;
  bool read = false;
};

WorkerView look_from_inside() {
  WorkerView v;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return v;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) v.affinity.push_back(c);
  std::vector<unsigned long> mask(1024 / (8 * sizeof(unsigned long)), 0);
  int mode = 0;
  if (get_mempolicy(&mode, mask.data(), mask.size() * 8 * sizeof(unsigned long), nullptr, 0) != 0)
    return v;
  switch (mode & 0xff) {
    case MPOL_BIND:
      v.policy = MemoryPolicy::bind;
      break;
    case MPOL_PREFERRED:
      v.policy = MemoryPolicy::preferred;
      break;
    case MPOL_INTERLEAVE:
      v.policy = MemoryPolicy::interleave;
      break;
    default:
      v.policy = MemoryPolicy::off;
  }
  for (unsigned n = 0; n < mask.size() * 8 * sizeof(unsigned long); ++n)
    if (mask[n / (8 * sizeof(unsigned long))] >> (n % (8 * sizeof(unsigned long))) & 1)
      v.policy_nodes.push_back(n);
  v.read = true;
  return v;
}

int probe_self(const std::vector<std::string>& args) {
  voltad::config::Config cfg = voltad::config::Config::defaults();
  cfg.engine.backend = "cpu";
  bool narrow = false, early_thread = false, expect_refusal = false;
  for (auto& a : args) {
    size_t eq = a.find('=');
    if (eq == std::string::npos) return usage("'" + a + "' is not KEY=VALUE");
    std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    auto& p = cfg.placement;
    if (k == "gpu")
      p.gpu = v;
    else if (k == "numa")
      p.numa = v;
    else if (k == "cpus" && v == "narrow")
      narrow = true;
    else if (k == "cpus")
      p.cpus = v;
    else if (k == "threads")
      p.threads = std::atoi(v.c_str());
    else if (k == "membind")
      p.membind = v;
    else if (k == "strict")
      p.strict = v == "true";
    else if (k == "backend")
      cfg.engine.backend = v;
    else if (k == "early_thread")
      early_thread = v == "true";
    else if (k == "expect")
      expect_refusal = v == "refused";
    else
      return usage("unknown key '" + k + "'");
  }
  auto topology = load_system_topology();
  if (!topology) return usage(topology.error().message);
  PlanOptions options;
  options.gpu_required = cfg.engine.backend != "cpu";
  auto plan = plan_placement(*topology, cfg.placement, options);
  if (plan && narrow) {
    cfg.placement.cpus = std::to_string(plan->cpus.back());
    plan = plan_placement(*topology, cfg.placement, options);
  }
  if (!plan) return usage(plan.error().message);
  std::fputs(plan_text(*plan).c_str(), stdout);

  std::latch early_done(1);
  std::thread early;
  if (early_thread) early = std::thread([&] { early_done.wait(); });
  auto applied = apply_placement(*plan, cfg.placement.strict);
  if (!applied || expect_refusal) {
    early_done.count_down();
    if (early.joinable()) early.join();
    std::printf("%s: %s\n", applied ? "applied, but a refusal was expected" : "refused",
                applied ? "" : applied.error().message.c_str());
    if (expect_refusal) return applied ? 1 : 0;
    return voltad::kExitPlacement;
  }

  // Workers start only now, as in the daemon: they inherit what was applied.
  unsigned n = std::max(1u, plan->threads);
  std::vector<WorkerView> views(n);
  std::latch looked(n), done(1);
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < n; ++i)
    workers.emplace_back([&, i] {
      pthread_setname_np(pthread_self(),
                         ("probe-worker-" + std::to_string(i)).substr(0, 15).c_str());
      views[i] = look_from_inside();
      looked.count_down();
      done.wait();  // stay alive while /proc is read
    });
  looked.wait();

  auto buffer = allocate_node_local(64u << 20, *plan);
  Report r;
  if (early_thread) {
    bool warned = false;
    for (auto& w : applied->warnings) warned |= w.find("threads already run") != std::string::npos;
    r.check(warned, "applying with a thread already running warned about it");
  }
  r.check(buffer.ok(),
          buffer.ok() ? "allocated a 64 MiB node-local staging buffer" : buffer.error().message);

  auto tasks = read_task_placements(0);
  r.check(tasks.ok(), tasks.ok() ? "read /proc/self/task" : tasks.error().message);
  if (tasks) {
    size_t expected = n + 1 + (early_thread ? 1 : 0);
    r.check(tasks->size() == expected,
            std::to_string(tasks->size()) + " threads in /proc/self/task, expected " +
                std::to_string(expected) + " (main, workers, early thread)");
    r.all(check_tasks_against(*tasks, plan->cpus, plan->nodes),
          "every thread's Cpus_allowed_list is " + format_index_list(plan->cpus) +
              " and its Mems_allowed_list holds " + format_index_list(plan->nodes));
  }
  MemoryPolicy want = plan->policy;
  IndexList want_nodes = want == MemoryPolicy::off ? IndexList{} : plan->nodes;
  for (unsigned i = 0; i < n; ++i) {
    const WorkerView& v = views[i];
    std::string who = "worker " + std::to_string(i);
    r.check(v.read && v.affinity == plan->cpus,
            who + " sees affinity " + format_index_list(v.affinity));
    r.check(v.read && v.policy == want && v.policy_nodes == want_nodes,
            who + " inherited memory policy " + to_string(v.policy) + " on nodes '" +
                format_index_list(v.policy_nodes) + "' (planned " + to_string(want) + " on '" +
                format_index_list(want_nodes) + "')");
  }
  for (auto& [key, value] : plan->environment) {
    const char* now = std::getenv(key.c_str());
    r.check(now && value == now, key + "=" + (now ? now : "<unset>"));
  }
  if (buffer && want != MemoryPolicy::off && !plan->nodes.empty()) {
    auto maps = read_numa_maps(0);
    r.check(maps.ok(), maps.ok() ? "read /proc/self/numa_maps" : maps.error().message);
    if (maps)
      r.all(check_mapping_against(*maps, buffer->data(), want, plan->nodes),
            "numa_maps: the staging buffer's " + std::to_string(buffer->pages()) +
                " pages are on node(s) " + format_index_list(plan->nodes));
  }
  if (buffer)
    r.check(buffer->pages_off_node() == 0, "move_pages: no staging page off the planned node");

  done.count_down();
  early_done.count_down();
  for (auto& w : workers) w.join();
  if (early.joinable()) early.join();
  std::printf("%s\n", r.problems ? "placement differs from the plan" : "placement holds");
  return r.problems ? 1 : 0;
}

int probe_pid(const std::vector<std::string>& args) {
  int pid = 0;
  IndexList cpus, nodes;
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    auto list = [&](IndexList& out) {
      auto l = parse_index_list(args[i + 1], args[i]);
      if (l) out = *l;
      return l.ok();
    };
    if (args[i] == "--pid")
      pid = std::atoi(args[i + 1].c_str());
    else if (args[i] == "--cpus" ? !list(cpus) : args[i] == "--nodes" ? !list(nodes) : true)
      return usage("bad argument '" + args[i] + " " + args[i + 1] + "'");
  }
  if (pid <= 0 || cpus.empty() || args.size() % 2)
    return usage("--pid PID and --cpus LIST are needed");
  Report r;
  auto tasks = read_task_placements(pid);
  if (!tasks) return usage(tasks.error().message);
  r.all(check_tasks_against(*tasks, cpus, nodes), std::to_string(tasks->size()) + " threads of " +
                                                      std::to_string(pid) + " run on CPUs " +
                                                      format_index_list(cpus));
  if (!nodes.empty()) {
    auto maps = read_numa_maps(pid);
    r.check(maps.ok(), maps.ok() ? "read numa_maps" : maps.error().message);
    if (maps)
      for (auto& m : *maps)
        if (!m.policy_nodes.empty()) {
          IndexList on;
          for (auto& [node, pages] : m.pages_on_node) on.push_back(node);
          r.check(m.policy_nodes == nodes && contains_all(nodes, on),
                  "mapping " + std::to_string(m.start) + " " + m.policy + ":" +
                      format_index_list(m.policy_nodes) + " pages on " + format_index_list(on));
        }
  }
  std::printf("%s\n", r.problems ? "placement differs" : "placement holds");
  return r.problems ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--pid") return probe_pid(args);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) return usage("help");
  return probe_self(args);
}
