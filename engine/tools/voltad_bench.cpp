// voltad-bench: how fast the engine runs a model on this GPU.
//
//   voltad-bench -m MODEL.gguf [-p 512] [-n 128] [-b 1,2,4,8,16] [--ctx N] [--json]
//   voltad-bench --sampling [--vocab 128256] [--json]
//
// Prefill: tokens/s for one prompt of -p tokens. Decode: for each batch size
// b, b sequences at context --ctx decode -n steps together; tokens/s per
// sequence and in aggregate, the bytes one step must read (weights except
// the embedding table, plus each sequence's KV cache), the GB/s that makes,
// and that as a fraction of the device's copy bandwidth measured first.
// Warm-up steps are excluded; times are medians. Speed does not depend on
// the values, so random-weight models (voltad-mkmodel) measure real shapes.
// --sampling times the host's side of a step instead: choosing a token for
// one sequence under several sampling settings (engine/sampler_timing.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifdef VOLTAD_HAVE_CUDA
#include "engine/backend_cuda.h"
#include "engine/kv_block_pool.h"
#endif
#include "engine/model.h"
#include "engine/sampler_timing.h"
#include "engine/whole_number.h"

namespace {

constexpr const char* kUsage =
    "usage: voltad-bench -m MODEL.gguf [-p 512] [-n 128] [-b 1,2,4,8,16] [--ctx 512] [--repeat 3]\n"
    "                    [--kv fp16|int8] [--kernels auto|portable] [--no-graphs] [--top-k K] "
    "[--noise] [--json]\n"
    "                    [--max-context N] [--device-time]\n"
    "                    [--omit norms,rope,attention,swiglu,matvecs|qkv,wo,gate_up,down,output]\n"
    "       voltad-bench --sampling [--vocab N] [--json]\n"
    "  --kernels: auto (per-architecture variants where the card has them, the\n"
    "             default) or portable (only what a V100 runs)\n"
    "  --top-k K: each decode step returns the K best logits per sequence, as the\n"
    "             server does for greedy (1) or top-k sampling (0: whole rows)\n"
    "  --noise:   the K candidates ranked by Gumbel keys at temperature 1, as the\n"
    "             server asks for a request at a temperature alone (OpenAI's\n"
    "             default): the token is drawn on the GPU\n"
    "  --max-context N: the longest sequence the engine is made for, as a\n"
    "             daemon's engine.max_context (default and least: the larger of\n"
    "             --ctx + -n + 1 and -p + 1); the decode graphs plan their\n"
    "             attention for it, the KV cache holds what the run needs\n"
    "  --omit:    timing only: every step leaves these kernels out, so the time\n"
    "             they cost inside the decode graph shows as the difference from\n"
    "             a run without --omit; the outputs are meaningless (matvecs:\n"
    "             all five kinds of matrix product, qkv to output)\n"
    "  --device-time: events around each decode step's device work; the rows\n"
    "             add the median device time and the median of the rest, the\n"
    "             host's time outside the events (preparing the step, waking\n"
    "             from its sync; launches after the first event count as device)\n"
    "  --sampling: no model or GPU: the host's time to choose one sequence's token\n"
    "             (and its logprobs from a whole row), per sampling setting, for a\n"
    "             row of --vocab logits (default 128256, Llama 3's; 64 to 1048576)\n";
constexpr const char* kOmitKinds[] = {"norms", "rope", "attention", "swiglu", "matvecs",
                                      "qkv",   "wo",   "gate_up",   "down",   "output"};

// A whole number in [lo, hi]; else a message naming the option (exit 64).
std::optional<int> number_option(const char* option, const std::string& text, int lo, int hi) {
  auto v = voltad::whole_number<int>(text);
  if (!v || *v < lo || *v > hi) {
    std::fprintf(stderr, "voltad-bench: %s takes a whole number from %d to %d, not '%s'\n", option,
                 lo, hi, text.c_str());
    return std::nullopt;
  }
  return v;
}

std::optional<std::vector<int>> parse_list(const char* option, const std::string& s, int hi) {
  std::vector<int> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    auto n = number_option(option, item, 1, hi);
    if (!n) return std::nullopt;
    v.push_back(*n);
  }
  if (v.empty() || s.back() == ',') {
    std::fprintf(stderr, "voltad-bench: %s takes a list like 1,8,32, not '%s'\n", option,
                 s.c_str());
    return std::nullopt;
  }
  return v;
}

[[maybe_unused]] double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
#ifdef VOLTAD_HAVE_CUDA
  voltad::prefer_eager_kernel_loading();  // before any CUDA call
#endif
  std::string model_path;
  int prompt = 512, steps = 128, ctx = 512, repeat = 3, top_k = 1, max_context = 0;
  std::vector<int> batches = {1, 2, 4, 8, 16};
  bool json = false, kv_int8 = false, graphs = true, device_time = false, noise = false;
  std::string kernel_set = "auto", omit_list;
  bool sampling = false;
  int vocab = 128256;
  std::vector<std::string> given;  // the options, as typed
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    given.push_back(a);
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    // Counts up to 2^20 (tokens, steps), so that ctx + steps + 1 fits an int.
    auto count = [&](int& out, int lo, int hi) {
      auto n = number_option(a.c_str(), next(), lo, hi);
      if (n) out = *n;
      return n.has_value();
    };
    if (a == "-m") model_path = next();
    else if (a == "-p") { if (!count(prompt, 0, 1 << 20)) return 64; }
    else if (a == "-n") { if (!count(steps, 1, 1 << 20)) return 64; }
    else if (a == "-b") {
      auto list = parse_list("-b", next(), 1024);
      if (!list) return 64;
      batches = *list;
    }
    else if (a == "--ctx") { if (!count(ctx, 1, 1 << 20)) return 64; }
    else if (a == "--repeat") { if (!count(repeat, 1, 1000)) return 64; }
    else if (a == "--max-context") { if (!count(max_context, 16, 1 << 20)) return 64; }
    else if (a == "--json") json = true;
    else if (a == "--sampling")
      sampling = true;
    else if (a == "--vocab") {
      if (!count(vocab, 64, 1 << 20)) return 64;
    } else if (a == "--no-graphs")
      graphs = false;
    else if (a == "--device-time")
      device_time = true;
    else if (a == "--top-k") { if (!count(top_k, 0, 64)) return 64;
    } else if (a == "--noise")
      noise = true;
    else if (a == "--omit") {
      if (i + 1 >= argc)
        return std::fprintf(stderr,
                            "voltad-bench: --omit needs a value (a list of kernel kinds)\n"),
               64;
      omit_list = next();
      if (omit_list.empty() || omit_list.front() == ',' || omit_list.back() == ',' ||
          omit_list.find(",,") != std::string::npos)
        return std::fprintf(stderr,
                            "voltad-bench: --omit takes a comma-separated list of kernel kinds "
                            "(no empty item), not '%s'\n",
                            omit_list.c_str()),
               64;
      std::stringstream in(omit_list);
      for (std::string item; std::getline(in, item, ',');)
        if (std::find(std::begin(kOmitKinds), std::end(kOmitKinds), item) == std::end(kOmitKinds)) {
          std::string kinds;
          for (const char* k : kOmitKinds) kinds += (kinds.empty() ? "" : ", ") + std::string(k);
          std::fprintf(stderr, "voltad-bench: --omit takes %s; not '%s'\n", kinds.c_str(),
                       item.c_str());
          return 64;
        }
    }
    else if (a == "--kv") {
      std::string k = next();
      if (k != "fp16" && k != "int8") return std::fprintf(stderr, "voltad-bench: --kv must be fp16 or int8\n"), 64;
      kv_int8 = k == "int8";
    }
    else if (a == "--kernels") {
      kernel_set = next();
      if (kernel_set != "auto" && kernel_set != "portable")
        return std::fprintf(stderr, "voltad-bench: --kernels must be auto or portable\n"), 64;
    }
    else if (a == "-h" || a == "--help") return std::fputs(kUsage, stdout), 0;
    else if (a == "--version")
      return std::printf("voltad-bench %s\n", VOLTAD_VERSION), 0;
    else return std::fprintf(stderr, "voltad-bench: unknown argument '%s'\n%s", a.c_str(), kUsage), 64;
  }
  // An option that would change nothing is a mistake, not a choice: say so.
  for (const std::string& g : given) {
    const bool sampling_own = g == "--sampling" || g == "--vocab" || g == "--json";
    if (sampling && !sampling_own && g.rfind("-", 0) == 0)
      return std::fprintf(stderr,
                          "voltad-bench: %s has no effect with --sampling (it times the host's "
                          "choice of a token alone: --vocab and --json only)\n",
                          g.c_str()),
             64;
    if (!sampling && g == "--vocab")
      return std::fprintf(stderr, "voltad-bench: --vocab goes with --sampling\n"), 64;
  }
  if (sampling) {
    const auto timings = voltad::time_sampling(vocab, 200);
    if (json) {
      std::printf("{\"vocab\": %d, \"sampling_ms_per_token\": {", vocab);
      for (size_t i = 0; i < timings.size(); ++i)
        std::printf("%s\"%s\": %.4f", i ? ", " : "", timings[i].setting.c_str(),
                    timings[i].ms_per_token);
      std::printf("}}\n");
    } else {
      std::printf("host time to choose one sequence's token, a row of %d logits:\n", vocab);
      for (const auto& t : timings)
        std::printf("  %8.3f ms  %s\n", t.ms_per_token, t.setting.c_str());
    }
    return 0;
  }
  if (top_k < 0 || top_k > 64) return std::fprintf(stderr, "voltad-bench: --top-k must be 0..64\n"), 64;
  if (model_path.empty() || prompt < 0 || steps < 1 || ctx < 1 || repeat < 1 || batches.empty() ||
      *std::min_element(batches.begin(), batches.end()) < 1)
    return std::fprintf(stderr, "voltad-bench: %s\n%s",
                        model_path.empty() ? "no model: pass -m MODEL.gguf (or --sampling)"
                                           : "every size must be positive",
                        kUsage),
           64;
  // What a run needs: its decode steps past --ctx, and its prompt.
  const int needed = std::max(ctx + steps + 1, prompt + 1);
  if (needed > (1 << 20))
    return std::fprintf(stderr,
                        "voltad-bench: the run needs %d positions (the larger of --ctx + -n + 1 "
                        "and -p + 1); the engine takes at most 1048576\n",
                        needed),
           64;
  if (max_context == 0) max_context = std::max(needed, 16);  // the documented least
  if (max_context < needed)
    return std::fprintf(stderr,
                        "voltad-bench: --max-context %d is shorter than the run needs (%d: the "
                        "larger of --ctx + -n + 1 and -p + 1)\n",
                        max_context, needed),
           64;
#ifndef VOLTAD_HAVE_CUDA
  (void)json, (void)kv_int8, (void)top_k, (void)noise, (void)graphs, (void)prompt, (void)steps,
      (void)ctx, (void)repeat, (void)device_time;
  std::fprintf(stderr, "voltad-bench: this build has no CUDA backend (configure with -DVOLTAD_CUDA=ON)\n");
  return 69;
#else
  using namespace voltad;
  using clock = std::chrono::steady_clock;
  // The model first (a bad file is 65 on any machine), then the card: no
  // driver or no GPU said as voltad-run says it, before the copy benchmark.
  auto model = load_model(model_path);
  if (!model) return std::fprintf(stderr, "voltad-bench: %s\n", model.error().message.c_str()), 65;
  if (auto device = describe_cuda_device(0); !device)
    return std::fprintf(stderr, "voltad-bench: %s\n", device.error().message.c_str()), 69;
  auto bandwidth = measure_copy_bandwidth(0);
  if (!bandwidth)
    return std::fprintf(stderr, "voltad-bench: %s\n", bandwidth.error().message.c_str()), 69;
  const ModelConfig& c = model.value()->config;
  const int max_b = *std::max_element(batches.begin(), batches.end());

  CudaBackendOptions o;
  o.max_sequences = max_b;
  o.max_context = max_context;
  // The KV cache the run needs, not max_context for every sequence: a
  // daemon sizes its pool from the memory plan, whatever max_context says.
  o.kv_blocks = max_b * KvBlockPool::blocks_for(needed);
  o.max_batch_tokens = std::max(prompt, max_b);
  o.kv_int8 = kv_int8;
  o.use_graphs = graphs;
  o.time_steps = device_time;
  o.kernels = *kernels::parse_kernel_set(kernel_set);
  {
    std::stringstream in(omit_list);
    for (std::string item; std::getline(in, item, ',');) {
      if (item == "norms") o.omit.norms = true;
      else if (item == "rope") o.omit.rope = true;
      else if (item == "attention") o.omit.attention = true;
      else if (item == "swiglu") o.omit.swiglu = true;
      else if (item == "matvecs")
        o.omit.qkv = o.omit.wo = o.omit.gate_up = o.omit.down = o.omit.output = true;
      else if (item == "qkv") o.omit.qkv = true;
      else if (item == "wo") o.omit.wo = true;
      else if (item == "gate_up") o.omit.gate_up = true;
      else if (item == "down") o.omit.down = true;
      else if (item == "output") o.omit.output = true;
    }
    if (o.omit.any())
      std::fprintf(stderr, "voltad-bench: --omit %s: timing only, the outputs are meaningless\n", omit_list.c_str());
  }
  o.on_progress = [json](uint64_t done, uint64_t total, const std::string&) {
    if (!json) std::fprintf(stderr, "\rvoltad-bench: loading %3d%%", int(100.0 * double(done) / double(total)));
  };
  auto t_load = clock::now();
  auto backend = CudaBackend::create(model.value(), o);
  if (!json) std::fprintf(stderr, "\n");
  if (!backend) return std::fprintf(stderr, "voltad-bench: %s\n", backend.error().message.c_str()), 69;
  const double load_s = std::chrono::duration<double>(clock::now() - t_load).count();
  CudaBackend& b = *backend.value();
  std::mt19937 rng(7);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(c.n_vocab));
    return t;
  };
  ForwardOutput out;

  // Prefill: one sequence, the whole prompt in one step.
  double prefill_tps = 0;
  if (prompt > 0) {
    auto tokens = random_tokens(prompt);
    std::vector<double> times;
    for (int r = 0; r < repeat + 1; ++r) {
      if (!b.kv_pool().reserve(0, prompt)) return std::fprintf(stderr, "voltad-bench: KV pool too small\n"), 1;
      BatchChunk chunk;
      chunk.tokens = tokens;
      auto t0 = clock::now();
      auto st = b.forward(std::span<const BatchChunk>(&chunk, 1), out);
      double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (!st) return std::fprintf(stderr, "voltad-bench: %s\n", st.error().message.c_str()), 1;
      if (r > 0) times.push_back(dt);  // the first run warms up
      b.kv_pool().release(0);
    }
    prefill_tps = prompt / median(times);
  }

  struct Row {
    int batch;
    double step_s, tps_seq, tps_total, bytes, gbps, efficiency;
    // --device-time: the medians of the steps' device time and of the rest
    // of each step's (the host's).
    double device_s = -1.0, host_s = -1.0;
  };
  std::vector<Row> rows;
  // K and V per token: fp16 values, or int8 values plus an fp16 scale per head.
  const double kv_bytes_per_token = kv_int8 ? 2.0 * double(c.n_layers) * double(c.kv_dim() + 2 * c.n_kv_heads)
                                            : 2.0 * double(c.n_layers) * double(c.kv_dim()) * 2.0;
  for (int batch : batches) {
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int s = 0; s < batch; ++s)
      if (!b.kv_pool().reserve(s, ctx + steps + 1)) return std::fprintf(stderr, "voltad-bench: KV pool too small\n"), 1;
    std::vector<double> times, device_times, host_times;
    const int warmup = 3;
    for (int i = 0; i < steps + warmup; ++i) {
      std::vector<BatchChunk> chunks(static_cast<size_t>(batch));
      for (int s = 0; s < batch; ++s) {
        next[size_t(s)] = int32_t(rng() % uint32_t(c.n_vocab));
        chunks[size_t(s)].seq_id = s;
        chunks[size_t(s)].start_pos = ctx + std::max(0, i - warmup);
        chunks[size_t(s)].tokens = std::span<const int32_t>(&next[size_t(s)], 1);
        chunks[size_t(s)].top_k = top_k;
        if (noise && top_k > 0) chunks[size_t(s)].noise = {uint64_t(s), uint64_t(i), 1.0f, 1};
      }
      auto t0 = clock::now();
      auto st = b.forward(chunks, out);
      double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (!st) return std::fprintf(stderr, "voltad-bench: %s\n", st.error().message.c_str()), 1;
      if (i >= warmup) {
        times.push_back(dt);
        if (device_time) {
          device_times.push_back(b.last_step_device_seconds());
          host_times.push_back(dt - device_times.back());
        }
      }
    }
    for (int s = 0; s < batch; ++s) b.kv_pool().release(s);
    Row r;
    r.batch = batch;
    r.step_s = median(times);
    if (device_time) {
      r.device_s = median(device_times);
      r.host_s = median(host_times);
    }
    r.tps_seq = 1.0 / r.step_s;
    r.tps_total = batch / r.step_s;
    r.bytes = double(b.decode_weight_bytes()) + batch * kv_bytes_per_token * (ctx + 1);
    r.gbps = r.bytes / r.step_s / 1e9;
    r.efficiency = r.bytes / r.step_s / bandwidth.value();
    rows.push_back(r);
  }

  const CudaMemoryUse& mem = b.memory_use();
  if (json) {
    std::printf("{\n  \"model\": \"%s\",\n  \"device\": \"%s\",\n  \"copy_bandwidth_gbps\": %.1f,\n", model_path.c_str(),
                b.device_name().c_str(), bandwidth.value() / 1e9);
    std::printf("  \"top_k\": %d,\n  \"noise\": %s,\n  \"kernels\": \"%s\",\n", top_k,
                noise && top_k > 0 ? "true" : "false", b.kernels_in_use().c_str());
    if (o.omit.any()) std::printf("  \"omitted_kernels_timing_only\": \"%s\",\n", omit_list.c_str());
    std::printf("  \"max_context\": %d,\n  \"device_time\": %s,\n", max_context,
                device_time ? "true" : "false");
    std::printf("  \"kv_cache_type\": \"%s\",\n  \"cuda_graphs\": %s,\n  \"load_seconds\": %.2f,\n  \"weights_bytes\": %llu,\n  \"decode_weight_bytes\": %llu,\n", kv_int8 ? "int8" : "fp16", graphs ? "true" : "false", load_s,
                (unsigned long long)mem.weights, (unsigned long long)b.decode_weight_bytes());
    std::printf("  \"gguf_tensor_bytes\": %llu,\n  \"workspace_bytes\": %llu,\n  \"kv_cache_bytes\": %llu,\n",
                (unsigned long long)[&] {
                  uint64_t t = 0;
                  for (auto& x : model.value()->file->tensors()) t += x.n_bytes;
                  return t;
                }(),
                (unsigned long long)mem.workspace, (unsigned long long)mem.kv_cache);
    std::printf("  \"prefill\": {\"tokens\": %d, \"tokens_per_second\": %.1f},\n  \"context\": %d,\n  \"decode\": [\n", prompt,
                prefill_tps, ctx);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "    {\"batch\": %d, \"step_ms\": %.4f, \"tokens_per_second_per_sequence\": %.1f, "
          "\"tokens_per_second\": %.1f, \"bytes_per_step\": %.0f, \"gbps\": %.1f, \"efficiency\": "
          "%.3f",
          r.batch, r.step_s * 1e3, r.tps_seq, r.tps_total, r.bytes, r.gbps, r.efficiency);
      if (r.device_s >= 0)
        std::printf(", \"device_step_ms\": %.4f, \"host_ms\": %.4f", r.device_s * 1e3,
                    r.host_s * 1e3);
      std::printf("}%s\n", i + 1 < rows.size() ? "," : "");
    }
    std::printf("  ]\n}\n");
  } else {
    std::printf("model       %s\ndevice      %s, copy bandwidth %.0f GB/s; kernels %s\n", model_path.c_str(),
                b.device_name().c_str(), bandwidth.value() / 1e9, b.kernels_in_use().c_str());
    std::printf("memory      weights %.3f GB (GGUF tensors %.3f GB), workspace %.3f GB, KV cache %.3f GB; load %.1f s\n",
                mem.weights / 1e9, [&] {
                  double t = 0;
                  for (auto& x : model.value()->file->tensors()) t += double(x.n_bytes);
                  return t / 1e9;
                }(), mem.workspace / 1e9, mem.kv_cache / 1e9, load_s);
    if (prompt > 0) std::printf("prefill     %d tokens: %.0f tokens/s\n", prompt, prefill_tps);
    if (o.omit.any()) std::printf("omitted     %s (timing only: outputs meaningless)\n", omit_list.c_str());
    std::printf("decode      context %d, %d steps (median); engine made for %d positions\n", ctx,
                steps, max_context);
    std::printf("  batch   step ms   tok/s/seq   tok/s total   MB/step    GB/s   efficiency%s\n",
                device_time ? "   device ms   host us" : "");
    for (const Row& r : rows) {
      // With the device columns, efficiency as wide as its heading.
      std::printf(r.device_s >= 0 ? "  %5d  %8.3f  %10.1f  %12.1f  %8.1f  %6.0f   %-10.3f"
                                  : "  %5d  %8.3f  %10.1f  %12.1f  %8.1f  %6.0f   %.3f",
                  r.batch, r.step_s * 1e3, r.tps_seq, r.tps_total, r.bytes / 1e6, r.gbps,
                  r.efficiency);
      if (r.device_s >= 0) std::printf("   %9.3f  %8.1f", r.device_s * 1e3, r.host_s * 1e6);
      std::printf("\n");
    }
  }
  return 0;
#endif
}
