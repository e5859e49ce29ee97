// voltad's configuration: every key declared once. Each section's visit()
// is the single declaration (name, default, help, check) that drives YAML
// parsing and validation, --dump-config, and docs/CONFIG.md.
//
// Paths may use ${RUNTIME_DIRECTORY}, ${STATE_DIRECTORY} and
// ${CONFIGURATION_DIRECTORY}; systemd sets them, and expand_path() falls back
// to sensible places when it does not (config_paths.h).
#pragma once

#include <string>

#include "daemon/config_values.h"

namespace voltad::config {

std::string check_gpu_spec(const std::string& spec);
std::string check_numa_spec(const std::string& spec);
std::string check_cpus_spec(const std::string& spec);
std::string check_octal_mode(const std::string& mode);
std::string check_instance_name(const std::string& name);
std::string check_socket_path(const std::string& path);
// model.path: not empty, and only the known ${...} variables.
std::string check_model_path(const std::string& path);

struct ModelSection {
  std::string path;
  std::string name;
  std::string chat_template;

  template <class V>
  void visit(V& v) {
    v(path, "path", std::string(), "GGUF model file to serve (Llama or Qwen family).",
      Check<std::string>{"required", check_model_path, true});
    v(name, "name", std::string(),
      "Model name shown in /v1/models and accepted in requests; empty: the file name without .gguf.");
    v(chat_template, "chat_template", std::string("auto"),
      "Chat template: auto (recognise the file's tokenizer.chat_template), llama3 or chatml.",
      one_of({"auto", "llama3", "chatml"}));
  }
};

struct ServerSection {
  std::string socket_path;
  std::string socket_mode;
  std::string socket_group;
  StringList allow_users;
  StringList allow_groups;
  StringList admin_groups;
  int64_t max_connections = 0;
  int64_t max_connections_per_user = 0;
  ByteSize max_header_bytes;
  ByteSize max_body_bytes;
  Duration read_timeout;
  Duration write_timeout;
  Duration stream_keepalive;
  int64_t max_requests_per_user = 0;
  int64_t write_queue_chunks = 0;
  Duration shutdown_grace;
  std::string dbus;
  std::string instance;

  template <class V>
  void visit(V& v) {
    v(socket_path, "socket_path", std::string("${RUNTIME_DIRECTORY}/voltad.sock"),
      "Unix socket the HTTP API listens on.",
      custom("a path of 1 to 107 bytes once variables are expanded", check_socket_path));
    v(socket_mode, "socket_mode", std::string("0660"), "Permissions of the socket file (octal).",
      custom("octal mode such as 0660", check_octal_mode));
    v(socket_group, "socket_group", std::string(),
      "Group that owns the socket file; empty: the daemon's own group.");
    v(allow_users, "allow_users", StringList{},
      "Users (names or uids) allowed to use the API, besides root, the daemon's own user and "
      "allow_groups.");
    v(allow_groups, "allow_groups", StringList{},
      "Groups (names or gids) whose members may use the API; empty: the socket's group.");
    v(admin_groups, "admin_groups", StringList{},
      "Groups (names or gids) whose members may also reload, drain and resume the daemon "
      "(voltactl reload/drain/resume); root and the daemon's own user always may.");
    v(max_connections, "max_connections", int64_t{256}, "Connections open at once; more are refused.",
      range<int64_t>(1, 65536));
    v(max_connections_per_user, "max_connections_per_user", int64_t{32},
      "Connections one user may have open at once; more are refused (429), so that one user "
      "cannot take every connection.",
      range<int64_t>(1, 65536));
    v(max_header_bytes, "max_header_bytes", ByteSize{16 << 10},
      "Largest HTTP request header accepted (431 beyond).",
      range(ByteSize{1 << 10}, ByteSize{64 << 20}));
    v(max_body_bytes, "max_body_bytes", ByteSize{4 << 20},
      "Largest HTTP request body accepted (413 beyond).",
      range(ByteSize{1 << 10}, ByteSize{1 << 30}));
    v(read_timeout, "read_timeout", Duration{std::chrono::seconds(30)},
      "Deadline for reading one request, idle time before it included; an idle connection is "
      "closed, and a request still incomplete at the deadline is answered 408 "
      "(`request_timeout`) and closed.",
      range(Duration{std::chrono::seconds(1)}, Duration{std::chrono::hours(24)}));
    v(write_timeout, "write_timeout", Duration{std::chrono::seconds(30)},
      "Deadline for writing one response or streamed chunk.",
      range(Duration{std::chrono::seconds(1)}, Duration{std::chrono::hours(24)}));
    v(stream_keepalive, "stream_keepalive", Duration{std::chrono::seconds(10)},
      "A streamed answer with nothing to send for this long (queued behind other requests, or "
      "its prompt being read) gets an SSE comment line, `: keep-alive`, which clients skip, so "
      "that a client or proxy with an idle timeout keeps the stream (voltactl's --timeout is "
      "one). 0s: never.",
      range(Duration{}, Duration{std::chrono::hours(1)}));
    v(max_requests_per_user, "max_requests_per_user", int64_t{8},
      "Requests one user may have running or queued at once (429 beyond).", range<int64_t>(1, 4096));
    v(write_queue_chunks, "write_queue_chunks", int64_t{256},
      "Streamed chunks queued per connection before the sequence waits for the client.",
      range<int64_t>(4, 65536));
    v(shutdown_grace, "shutdown_grace", Duration{std::chrono::seconds(30)},
      "On stop, how long running requests may finish before they are cancelled (under systemd, "
      "voltad stretches the unit's stop timeout to this plus 15s).",
      range(Duration{}, Duration{std::chrono::hours(24)}));
    v(dbus, "dbus", std::string("auto"),
      "D-Bus interface org.voltad.Daemon1 (docs/DBUS.md): auto (the system bus for a system "
      "service or root, the user bus for a user instance), system, user, or off. A bus that "
      "cannot be reached is a warning, not a failure.",
      one_of({"auto", "system", "user", "off"}));
    v(instance, "instance", std::string(),
      "Instance name when one daemon runs per GPU (voltad@0.service reads /etc/voltad/gpu0.yaml, "
      "which sets instance: gpu0): the D-Bus name becomes org.voltad.Daemon1.NAME. Empty: the "
      "single instance.",
      custom("empty, or letters, digits and _ not starting with a digit (gpu0)",
             check_instance_name));
  }
};

struct PlacementSection {
  std::string gpu;
  std::string numa;
  std::string cpus;
  int64_t threads = 0;
  std::string membind;
  bool strict = false;

  template <class V>
  void visit(V& v) {
    v(gpu, "gpu", std::string("auto"),
      "GPU to serve: auto (the first NVIDIA GPU in PCI order), an index in PCI order, a PCI bus "
      "id (0000:b7:00.0) or GPU-<uuid>.",
      custom("auto, an index, a PCI bus id or GPU-<uuid>", check_gpu_spec));
    v(numa, "numa", std::string("auto"),
      "NUMA node to bind to: auto (the GPU's own node), off, or a node number.",
      custom("auto, off or a node number", check_numa_spec));
    v(cpus, "cpus", std::string("auto"),
      "CPUs to run on: auto (one thread per physical core of the node), all-threads, or a list "
      "such as 0-7,16.",
      custom("auto, all-threads or a CPU list", check_cpus_spec));
    v(threads, "threads", int64_t{0}, "Worker threads; 0: one per chosen physical core.",
      range<int64_t>(0, 1024));
    v(membind, "membind", std::string("bind"),
      "Memory policy on the node: bind, preferred, interleave or off.",
      one_of({"bind", "preferred", "interleave", "off"}));
    v(strict, "strict", false,
      "Refuse to start when the placement cannot be applied (default: warn and continue).");
  }
};

struct MemorySection {
  double vram_fraction = 0;
  ByteSize kv_cache_bytes;
  Duration monitor_interval;
  double hysteresis = 0;

  template <class V>
  void visit(V& v) {
    v(vram_fraction, "vram_fraction", 0.90,
      "Share of the card's total memory voltad may plan for, counting what others use.",
      range(0.10, 0.98));
    v(kv_cache_bytes, "kv_cache_bytes", ByteSize{0},
      "KV cache pool size on the GPU; 0: what the budget leaves, capped by max_context x "
      "max_sequences (the cpu backend always takes max_context x max_sequences).");
    v(monitor_interval, "monitor_interval", Duration{std::chrono::seconds(1)},
      "How often the card's total memory use is sampled.",
      range(Duration{std::chrono::milliseconds(100)}, Duration{std::chrono::hours(1)}));
    v(hysteresis, "hysteresis", 0.02,
      "Leave degraded when usage falls this far below vram_fraction.", range(0.0, 0.5));
  }
};

struct EngineSection {
  std::string backend;
  std::string kernels;
  int64_t max_context = 0;
  int64_t max_sequences = 0;
  int64_t max_batch_tokens = 0;
  std::string kv_cache_type;

  template <class V>
  void visit(V& v) {
    v(backend, "backend", std::string("cuda"),
      "Compute backend: cuda, or cpu (the reference; never chosen on its own).",
      one_of({"cuda", "cpu"}));
    v(kernels, "kernels", std::string("auto"),
      "CUDA kernels: auto (fastest for the card) or portable (what a V100 runs).",
      one_of({"auto", "portable"}));
    v(max_context, "max_context", int64_t{4096}, "Longest sequence (prompt + output) in tokens.",
      range<int64_t>(16, 1 << 20));
    v(max_sequences, "max_sequences", int64_t{16}, "Sequences decoded together at most.",
      range<int64_t>(1, 1024));
    v(max_batch_tokens, "max_batch_tokens", int64_t{2048},
      "Tokens processed in one engine step (prefill chunks plus decodes). On the CPU backend "
      "prompt chunks are also held to about a second each (the watchdog's heartbeat).",
      range<int64_t>(16, 1 << 20));
    v(kv_cache_type, "kv_cache_type", std::string("fp16"),
      "KV cache element type: fp16, or int8 (half the memory).", one_of({"fp16", "int8"}));
  }
};

struct LogSection {
  std::string level;
  std::string format;

  template <class V>
  void visit(V& v) {
    v(level, "level", std::string("info"), "Least severe level logged.",
      one_of({"trace", "debug", "info", "warn", "error"}));
    v(format, "format", std::string("auto"),
      "auto (journal priorities under systemd, plain text otherwise), plain or journal.",
      one_of({"auto", "plain", "journal"}));
  }
};

struct Config {
  ModelSection model;
  ServerSection server;
  PlacementSection placement;
  MemorySection memory;
  EngineSection engine;
  LogSection log;

  template <class V>
  void visit(V& v) {
    v.section(model, "model", "The model file served.");
    v.section(server, "server", "The Unix socket, who may use it, and request limits.");
    v.section(placement, "placement", "Which GPU, and the CPUs and memory near it.");
    v.section(memory, "memory", "The VRAM budget and its guard.");
    v.section(engine, "engine", "Context, batching and kernels.");
    v.section(log, "log", "Logging.");
  }

  // Every key at its default (required keys empty).
  static Config defaults();
};

}  // namespace voltad::config
