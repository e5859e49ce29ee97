#include "daemon/daemon_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <thread>

#include "daemon/config_paths.h"
#include "daemon/config_reload.h"
#include "daemon/dbus_provider.h"
#include "daemon/engine_warmup.h"
#include "daemon/exit_codes.h"
#include "daemon/log.h"
#include "daemon/model_path_check.h"
#include "daemon/placement_startup.h"
#include "daemon/plan_command.h"
#include "daemon/server_listener.h"
#include "daemon/service_control.h"
#include "daemon/socket_activation.h"
#include "daemon/step_failure_log.h"
#include "daemon/vram_guard.h"
#include "daemon/vram_start.h"
#include "engine/backend_cpu.h"
#ifdef VOLTAD_HAVE_CUDA
#include "engine/backend_cuda.h"
#endif
#include "engine/gguf_file.h"
#include "engine/model.h"

namespace voltad {

namespace net = boost::asio;

namespace {

// I/O threads beside the engine: parsing and streaming are light; two keep
// one slow handler (a big tokenization) from stalling every connection.
constexpr int kIoThreads = 2;

// Everything the engine thread builds, owned here so it outlives the
// connections that point into it.
struct Engine {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<StepFailureLog> step_log;  // the backend as the scheduler sees it
  std::unique_ptr<Scheduler> scheduler;
  ServedModel served;
  std::string plan_text;              // the VRAM plan at start (CUDA); "" on the CPU
  std::unique_ptr<VramMonitor> vram;  // the VRAM guard; none on the CPU backend
};

struct Failure {
  int code;
  std::string message;
};

std::optional<Failure> load_engine(const config::Config& cfg, const std::string& model_path,
                                   [[maybe_unused]] const placement::PlacementPlan& plan,
                                   ServerContext& ctx, Engine& e) {
  ctx.lifecycle.report_progress("reading " + model_path, -1);
  auto model = load_model(model_path);
  if (!model.ok()) return Failure{kExitModelData, model.error().message};
  e.model = model.value();
  auto data = tokenizer_data_from_gguf(*e.model->file);
  if (!data.ok())
    return Failure{kExitModelData, "tokenizer: " + data.error().message};  // names the file
  std::string chat_template = data->chat_template;
  auto tokenizer = Tokenizer::create(std::move(data.value()));
  if (!tokenizer.ok())
    return Failure{kExitModelData, model_path + ": tokenizer: " + tokenizer.error().message};
  e.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer.value()));
  auto format =
      choose_chat_format(chat_template, cfg.model.chat_template,
                         "set model.chat_template to llama3 or chatml in the configuration");
  if (!format.ok()) return Failure{kExitModelData, model_path + ": " + format.error().message};
  if (std::string why = chat_markers_missing(format.value(), *e.tokenizer); !why.empty()) {
    // Chosen by the configuration: its fault (78); recognised from the
    // file's own template: the file's (65).
    if (cfg.model.chat_template != "auto")
      return Failure{kExitConfig, "model.chat_template is " + cfg.model.chat_template + ", but " +
                                      why + " (" + model_path + "); set it to auto"};
    return Failure{kExitModelData, model_path + ": " + why};
  }

  if (auto w =
          context_past_training(e.model->config, cfg.engine.max_context,
                                "engine.max_context " + std::to_string(cfg.engine.max_context));
      !w.empty())
    spdlog::warn("{}: {}", model_path, w);
  ctx.lifecycle.report_progress("creating the " + cfg.engine.backend + " backend", -1);
  if (cfg.engine.backend == "cpu") {
    // The memory section plans a GPU's memory: the CPU backend's cache is
    // max_context x max_sequences, whatever it says.
    if (cfg.memory.kv_cache_bytes.bytes != 0)
      spdlog::warn(
          "memory.kv_cache_bytes ({}) applies to a GPU's cache; the cpu backend sizes "
          "its cache from engine.max_context x engine.max_sequences and ignores it",
          config::format_byte_size(cfg.memory.kv_cache_bytes));
    CpuBackendOptions options;
    options.threads = int(ctx.placement.threads);  // the plan's: one per physical core
    options.max_context = int32_t(cfg.engine.max_context);
    options.max_sequences = int32_t(cfg.engine.max_sequences);
    // A cache past the machine's memory is a setting a restart cannot
    // change: refused as a VRAM plan that does not fit is (exit 75).
    if (std::string why = CpuBackend::cache_too_large(e.model->config, options); !why.empty())
      return Failure{kExitVramBudget, why};
    auto backend = CpuBackend::create(e.model, options);
    if (!backend.ok()) return Failure{kExitFailure, backend.error().message};
    e.served.kv_cache_bytes = backend.value()->kv_cache_bytes();
    e.backend = std::move(backend.value());
  } else {
#ifdef VOLTAD_HAVE_CUDA
    CudaBackendOptions options;
    options.max_context = int32_t(cfg.engine.max_context);
    options.max_sequences = int32_t(cfg.engine.max_sequences);
    options.max_batch_tokens =
        int32_t(std::max(cfg.engine.max_batch_tokens, cfg.engine.max_sequences));
    options.kv_int8 = cfg.engine.kv_cache_type == "int8";
    options.kernels =
        kernels::parse_kernel_set(cfg.engine.kernels).value_or(kernels::KernelSet::Auto);
    auto host_memory = placement::node_local_host_memory(plan);
    options.host_allocate = host_memory.allocate;
    options.host_release = host_memory.release;
    options.on_progress = [last = -1, &ctx](uint64_t done, uint64_t total,
                                            const std::string& tensor) mutable {
      double fraction = double(done) / double(std::max<uint64_t>(total, 1));
      ctx.lifecycle.report_progress("loading weights", fraction);  // STATUS=, EXTEND_TIMEOUT_USEC=
      int pct = int(100.0 * fraction);
      if (pct / 10 != last / 10) spdlog::info("loading weights: {}% ({})", pct, tensor);
      last = pct;
    };
    // The VRAM plan first: refuse to start (exit 75, the table, the ways out)
    // rather than fail at the first long request; else size the KV pool from
    // it, so that what is allocated is what was planned.
    auto vram = plan_vram_at_start(cfg, *e.model, options.device, ctx.placement.gpu_bus_id);
    // A weight type or value the CUDA engine cannot run is the file's fault:
    // exit 65, which the units do not restart (the rest may pass: 69).
    auto cuda_exit = [](const Error& error) {
      return error.model_data ? kExitModelData : kExitUnavailable;
    };
    if (!vram.ok())
      return Failure{cuda_exit(vram.error()), "engine.backend is cuda: " + vram.error().message +
                                                  " (voltad does not fall back to the CPU)"};
    if (!vram->plan.fits) return Failure{kExitVramBudget, vram_refusal_text(vram.value())};
    e.plan_text = vram_plan_text(vram->plan);
    e.served.vram_plan_text = e.plan_text;  // for GET /plan
    e.served.vram_plan_json = plan::vram_plan_json(vram->plan).dump();
    e.served.vram_measured_with = vram->measured_with;
    spdlog::info("VRAM plan (measured with {}):\n{}", vram->measured_with, e.plan_text);
    options.kv_blocks = int32_t(vram->plan.kv.blocks);
    auto backend = CudaBackend::create(e.model, options);
    // Never a silent fallback to the CPU: serving a big model there by surprise is worse than not
    // starting.
    if (!backend.ok())
      return Failure{cuda_exit(backend.error()),
                     "engine.backend is cuda: " + backend.error().message +
                         " (voltad does not fall back to the CPU; set engine.backend: cpu to "
                         "serve on the CPU reference backend)"};
    spdlog::info("CUDA backend on {}: kernels {} (engine.kernels: {})",
                 backend.value()->device_name(), backend.value()->kernels_in_use(),
                 cfg.engine.kernels);
    const CudaMemoryUse& use = backend.value()->memory_use();
    e.served.kv_cache_bytes = use.kv_cache;
    e.served.device_memory_bytes = use.weights + use.kv_cache + use.workspace;
    e.backend = std::move(backend.value());
#else
    return Failure{
        kExitUnavailable,
        "engine.backend is cuda, but this voltad was built without CUDA; rebuild with CUDA or set "
        "engine.backend: cpu"};
#endif
  }

  if (auto hang_file = hang_file_for_tests())
    e.backend = make_hanging_backend_for_tests(std::move(e.backend), *hang_file);

  SchedulerOptions so;
  so.heartbeat_interval = ServiceControl::heartbeat_interval();  // the watchdog reads the beats
  // The CPU reads a prompt at tens of milliseconds a token: chunks of about
  // one beat keep the watchdog fed, other streams moving and a disconnect
  // prompt (the GPU's steps take milliseconds).
  if (cfg.engine.backend == "cpu") so.step_time_target = so.heartbeat_interval;
  so.max_sequences = int32_t(cfg.engine.max_sequences);
  so.max_batch_tokens = int32_t(cfg.engine.max_batch_tokens);
  so.stream_queue_limit = int32_t(cfg.server.write_queue_chunks);
  so.max_waiting = queued_request_limit(cfg.server.max_connections);
  e.step_log = std::make_unique<StepFailureLog>(*e.backend, e.plan_text);
  e.scheduler = std::make_unique<Scheduler>(*e.step_log, *e.tokenizer, so, &ctx.metrics);

  ServedModel& s = e.served;
  s.name = ctx.model_name;
  s.backend = e.backend->name();
  s.created = int64_t(std::time(nullptr));
  s.tokenizer = e.tokenizer.get();
  s.chat_format = format.value();
  s.chat_options = chat_render_options_from_template(s.chat_format, chat_template);
  // Llama 3's template writes BOS itself; the others get it as a token id when the model asks for
  // one.
  if (s.chat_format == ChatFormat::Llama3 && e.tokenizer->bos() >= 0)
    s.bos_text = e.tokenizer->token_piece(e.tokenizer->bos());
  else
    s.add_bos = e.tokenizer->data().add_bos;
  s.scheduler = e.scheduler.get();
  s.max_context = e.scheduler->max_context();

  // The VRAM guard samples from now on: a card already past the budget
  // makes the daemon come up degraded rather than ready. The CUDA backend
  // runs on visible device 0 (placement narrows CUDA_VISIBLE_DEVICES).
  if (auto source = daemon_vram_source(cfg.engine.backend, 0, ctx.placement.gpu_bus_id)) {
    e.vram = make_vram_guard(cfg, std::move(*source), ctx.lifecycle);
    e.vram->start();
    ctx.vram.store(e.vram.get(), std::memory_order_release);
  }
  return std::nullopt;
}

std::string default_model_name(const std::string& model_path) {
  std::string stem = std::filesystem::path(model_path).filename().string();
  if (stem.size() > 5 && stem.substr(stem.size() - 5) == ".gguf") stem.resize(stem.size() - 5);
  return stem;
}

}  // namespace

int serve(const config::Config& cfg, const std::string& config_path) {
  // A client that hangs up must cost a failed write, not the process
  // (Asio sends with MSG_NOSIGNAL; this covers every other path too).
  std::signal(SIGPIPE, SIG_IGN);
  const std::string model_path = config::expand_path(cfg.model.path);
  if (auto problem = model_path_problem(model_path, config_path)) {
    spdlog::error("{}", problem->message);
    return problem->exit_code;
  }
  // Before any thread exists (threads inherit the memory policy; it cannot
  // be imposed on them later) and before CUDA reads CUDA_VISIBLE_DEVICES:
  // keep this first.
  auto placed = placement::place_process(cfg);
  if (!placed) {
    spdlog::error("placement: {}", placed.error().message);
    return kExitPlacement;
  }

  UnixSocketOptions socket;
  socket.path = config::expand_path(cfg.server.socket_path);
  socket.mode = mode_t(std::stoul(cfg.server.socket_mode, nullptr, 8));  // checked by the config
  if (!cfg.server.socket_group.empty()) {
    socket.group = resolve_group(cfg.server.socket_group);
    if (!socket.group) {
      spdlog::error("server.socket_group '{}' in {} is not a group on this system",
                    cfg.server.socket_group, config_path);
      return kExitConfig;
    }
  }

  // Under socket activation the unit owns the socket (its path, mode and group).
  auto activated = take_activated_socket();
  if (!activated.ok()) {
    spdlog::error("{}", activated.error().message);
    return kExitCantCreate;
  }
  if (*activated && !(*activated)->path.empty()) socket.path = (*activated)->path;

  ServerContext ctx;
  const gid_t socket_gid = *activated     ? (*activated)->group
                           : socket.group ? *socket.group
                                          : ::getegid();
  apply_server_settings(cfg, socket_gid, ctx);
  ctx.model_name = cfg.model.name.empty() ? default_model_name(model_path) : cfg.model.name;
  ctx.backend_name = cfg.engine.backend;
  ctx.placement = placement::summarize(*placed);

  // Declared before the I/O loop: sessions still queued in it when it is
  // destroyed may point into both.
  Engine engine;
  net::io_context ioc(kIoThreads);
  auto acceptor = *activated ? adopt_unix_listener(net::make_strand(ioc), (*activated)->fd)
                             : open_unix_listener(net::make_strand(ioc), socket);
  if (!acceptor.ok()) {
    spdlog::error("{}", acceptor.error().message);
    return kExitCantCreate;
  }
  struct stat socket_stat {};
  ::stat(socket.path.c_str(), &socket_stat);
  auto listener = std::make_shared<Listener>(ioc, std::move(acceptor.value()), ctx);
  listener->run();
  spdlog::info("listening on {} ({}, allowed: {}); loading {}", socket.path,
               *activated ? "passed by systemd" : "mode " + cfg.server.socket_mode,
               ctx.access()->describe(), model_path);

  // Signals, reload, drain, the graceful stop and the watchdog; before the
  // engine thread, whose failures stop the daemon through the lifecycle.
  RunningConfig running_config(config_path, cfg);
  ServiceControl control(ioc, ctx, running_config, socket_gid);
  control.start();

  std::atomic<int> exit_code{kExitOk};
  ctx.lifecycle.begin_loading("loading " + model_path);
  std::thread engine_thread([&] {
    auto failure = load_engine(cfg, model_path, placed->plan, ctx, engine);
    if (!failure) {
      // READY=1 only after one forward pass has worked.
      ctx.lifecycle.report_progress("warming up: one forward pass", -1);
      int32_t bos = engine.tokenizer->bos();
      if (Status warm = warm_up(*engine.backend, bos >= 0 ? bos : 0); !warm.ok())
        failure = Failure{kExitInternal, warm.error().message};
    }
    if (failure) {
      spdlog::error("{}", failure->message);
      exit_code = failure->code;
      ctx.lifecycle.fail(failure->code, failure->message);  // stopping: the loop ends
      return;
    }
    // Requests reach the scheduler only once the state says ready (ServerContext::serving).
    ctx.served.store(&engine.served, std::memory_order_release);
    // A reload while loading changed the limits without a scheduler to tell.
    engine.scheduler->set_max_waiting(queued_request_limit(ctx.limits()->max_connections));
    // A stop requested during loading wins: nothing is served.
    // The state names itself ("ready: ..." in STATUS= and the log).
    if (!ctx.lifecycle.finish_loading("serving " + ctx.model_name)) return;
    spdlog::info(
        "ready: serving {} on {} (backend {}, context {} tokens, up to {} sequence{}, {} KV "
        "blocks)",
        ctx.model_name, socket.path, engine.served.backend, engine.served.max_context,
        cfg.engine.max_sequences, cfg.engine.max_sequences == 1 ? "" : "s",
        engine.scheduler->stats().kv_blocks_total);
    engine.scheduler->run();
    if (std::string fatal = engine.scheduler->fatal_error(); !fatal.empty()) {
      exit_code = kExitInternal;
      ctx.lifecycle.fail(kExitInternal, "the engine stopped: " + fatal);
    }
  });

  // org.voltad.Daemon1 on this loop (a strand of its own); nullptr without a bus.
  auto dbus = start_dbus(ioc, cfg, ctx);

  std::vector<std::thread> io_threads;
  for (int i = 1; i < kIoThreads; ++i) io_threads.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : io_threads) t.join();
  listener->log_refusals_left_out();
  if (dbus) dbus->close();  // announces the last state

  // The engine thread either failed, saw the stop while loading, or runs the scheduler.
  if (const ServedModel* m = ctx.loaded()) m->scheduler->shutdown();
  engine_thread.join();
  // Remove the socket only if it is still ours: not the unit's (socket
  // activation), not a successor's.
  struct stat now {};
  if (!*activated && ::stat(socket.path.c_str(), &now) == 0 && now.st_ino == socket_stat.st_ino &&
      now.st_dev == socket_stat.st_dev)
    ::unlink(socket.path.c_str());
  spdlog::info("stopped");
  return exit_code.load();
}

}  // namespace voltad
