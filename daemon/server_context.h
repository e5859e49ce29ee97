// What the connections share: limits, access policy, metrics, the lifecycle
// (daemon/lifecycle.h: the state /health reports), and (once loaded) the
// served model and its scheduler.
//
// Threads: the immutable parts are set before the first connection. Limits
// and the access policy change on reload: read them through limits() and
// access(), which return a snapshot that stays valid while held. `served`
// is published once by the engine thread (an atomic pointer to data that is
// immutable from then on) and stays valid until every connection is gone. Counters are atomics;
// Metrics, AccessPolicy and UserLimiter state their own thread-safety.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/access_control.h"
#include "daemon/lifecycle.h"
#include "daemon/metrics.h"
#include "engine/chat_template.h"
#include "engine/scheduler.h"
#include "engine/tokenizer.h"

namespace voltad {

struct ServerLimits {
  int64_t max_connections = 256;
  uint64_t max_header_bytes = 16 << 10;
  uint64_t max_body_bytes = 4 << 20;
  std::chrono::milliseconds read_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds stream_keepalive{10000};  // 0: none
};

// The model as the API shows it, with what requests need to be turned into
// token ids. Immutable once published.
struct ServedModel {
  std::string name;     // /v1/models id; requests may name it
  std::string backend;  // "cpu", "cuda"
  int64_t created = 0;  // unix time the daemon loaded it
  const Tokenizer* tokenizer = nullptr;
  ChatFormat chat_format = ChatFormat::ChatML;
  ChatRenderOptions chat_options;
  std::string bos_text;  // written by the template (Llama 3); "" when BOS is a token id
  bool add_bos = false;  // prepend BOS as a token id to a chat (raw prompts: encode_raw_prompt)
  Scheduler* scheduler = nullptr;
  int32_t max_context = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t device_memory_bytes = 0;  // weights + KV cache + workspace on the GPU; 0 on the CPU
  // The VRAM plan the daemon made at start (GET /plan, voltactl plan): its
  // table (engine/vram_plan.h vram_plan_text), its JSON (voltad --plan
  // --json's) and what measured the card; all "" on the CPU backend.
  std::string vram_plan_text;
  std::string vram_plan_json;
  std::string vram_measured_with;
};

// The placement applied at start (daemon/placement_startup.h), as /health,
// /metrics and D-Bus report it. Plain data, set before the first connection.
struct PlacementSummary {
  std::string gpu_bus_id;      // "0000:b7:00.0"; empty: no GPU chosen (CPU backend, none found)
  std::string gpu_uuid;        // "GPU-..."; empty when unknown
  std::string gpu_model;       // "Tesla V100-SXM2-32GB"
  int32_t gpu_numa_node = -1;  // the GPU's own NUMA node; -1 when unknown or several
  int32_t numa_node = -1;      // the node memory is bound to; -1 when not bound to one node
  std::string numa_nodes;      // the memory policy's nodes, "1" or "0-1"; empty: not bound
  std::string memory_policy = "off";  // bind, preferred, interleave, off
  std::string cpus;                   // the process's CPU affinity, "20-39"
  bool cpus_bound = false;            // that affinity is the planned one
  uint32_t threads = 0;               // worker threads (CPU backend); 0: every hardware thread
  std::vector<std::string> warnings;  // each logged once at start
};

struct ServerContext {
  // Thread-safe snapshots of what a reload replaces (set_* swaps them).
  std::shared_ptr<const ServerLimits> limits() const {
    std::lock_guard lock(settings_mu_);
    return limits_;
  }
  std::shared_ptr<const AccessPolicy> access() const {
    std::lock_guard lock(settings_mu_);
    return access_;
  }
  void set_limits(ServerLimits limits) {
    auto p = std::make_shared<const ServerLimits>(std::move(limits));
    std::lock_guard lock(settings_mu_);
    limits_ = std::move(p);
  }
  void set_access(AccessPolicy access) {
    auto p = std::make_shared<const AccessPolicy>(std::move(access));
    std::lock_guard lock(settings_mu_);
    access_ = std::move(p);
  }

  std::shared_ptr<UserLimiter> user_limiter;        // requests in flight, per uid
  std::shared_ptr<UserLimiter> connection_limiter;  // connections open, per uid
  // Refused connections still being answered, per uid (server_listener.cpp).
  static constexpr int64_t kRefusedPerUser = 4;
  std::shared_ptr<UserLimiter> refused_limiter = std::make_shared<UserLimiter>(kRefusedPerUser);
  Metrics metrics;
  std::string model_name;    // known from the config before the model loads
  std::string backend_name;  // likewise
  Lifecycle lifecycle;       // the state machine; thread-safe
  std::atomic<int64_t> open_connections{0};
  std::atomic<int64_t> active_generations{0};
  std::atomic<const ServedModel*> served{nullptr};  // see the thread note above
  // The VRAM guard (daemon/vram_guard.h), published by the engine thread
  // once the backend exists; nullptr on the CPU backend. Lives as long as
  // `served`. Its methods are thread-safe; a reload reconfigures it.
  std::atomic<VramMonitor*> vram{nullptr};

  // Applied by serve() before any other thread exists; immutable afterwards.
  PlacementSummary placement;

  // The model when new generations are admitted (ready); nullptr otherwise.
  // Degraded (the card is past the VRAM budget) admits none: requests already
  // running finish, new ones get 503 until the guard says ready again.
  const ServedModel* serving() const {
    return lifecycle.state() == HealthState::Ready ? loaded() : nullptr;
  }
  // The model once loaded, whatever the state (nullptr while loading).
  const ServedModel* loaded() const { return served.load(std::memory_order_acquire); }
  MetricsSnapshot snapshot() const;

 private:
  mutable std::mutex settings_mu_;
  std::shared_ptr<const ServerLimits> limits_ = std::make_shared<const ServerLimits>();
  std::shared_ptr<const AccessPolicy> access_ = std::make_shared<const AccessPolicy>();
};

}  // namespace voltad
