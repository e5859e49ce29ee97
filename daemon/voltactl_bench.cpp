// voltactl bench: the number people quote for a server like this. One fixed
// prompt of about 600 characters, 200 generated tokens (end-of-generation
// ignored, so every run does the same work), streamed; time to first token,
// prompt tokens/s (prompt tokens over that time) and decode tokens/s after
// the first token. With --concurrency 1,2,4,8 each level runs that many
// clients at once and adds per-client and aggregate decode rates.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon/exit_codes.h"
#include "daemon/voltactl_commands.h"

namespace voltad::ctl {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kBenchPrompt =
    "The lighthouse keeper had kept a log for forty years. Each evening he wrote the weather, the "
    "ships that "
    "passed, and one sentence about something he had noticed: a gull with a bent wing, the smell "
    "of rain on "
    "warm stone, the way the lamp's beam caught the spray on a windy night. When he retired, the "
    "town asked "
    "him what he had learned from all those pages. He thought for a long time before answering. "
    "Then he said "
    "that the sea never repeats itself, that patience is mostly attention, and that a small light, "
    "kept "
    "burning every night, matters more than a bright one lit only once. Tell what happened next.";

struct ClientRun {
  bool ok = false;
  std::string error;
  double ttft = 0, total = 0;
  int prompt_tokens = 0, completion_tokens = 0;
};

ClientRun run_client(const ApiClient& client, int max_tokens, std::atomic<int64_t>& chunks) {
  ClientRun run;
  Json body = {{"prompt", kBenchPrompt}, {"max_tokens", max_tokens},
               {"temperature", 0},       {"ignore_eos", true},
               {"stream", true},         {"stream_options", {{"include_usage", true}}}};
  auto start = Clock::now();
  bool first = false;
  auto r = client.stream("/v1/completions", body.dump(), [&](const std::string& data) {
    Json j = Json::parse(data, nullptr, false);
    if (!j.is_object()) return true;
    if (j.contains("error")) {
      run.error = stream_error_text(j["error"]);
      return false;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const Json& u = j["usage"];
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
        run.prompt_tokens = u["prompt_tokens"].get<int>();
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
        run.completion_tokens = u["completion_tokens"].get<int>();
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
        j["choices"][0].is_object() && j["choices"][0].contains("text") &&
        j["choices"][0]["text"].is_string() &&
        !j["choices"][0]["text"].get<std::string>().empty()) {
      if (!first) run.ttft = std::chrono::duration<double>(Clock::now() - start).count();
      first = true;
      ++chunks;
    }
    return true;
  });
  run.total = std::chrono::duration<double>(Clock::now() - start).count();
  if (!r.ok())
    run.error = r.error().message;
  else if (r->status != 200)
    run.error = "HTTP " + std::to_string(r->status) + ": " + error_message(r.value());
  else if (!r->broken.empty())
    run.error = r->broken;
  run.ok = run.error.empty() && first && run.completion_tokens > 0;
  if (run.error.empty() && !run.ok) run.error = "the stream ended without tokens or usage";
  return run;
}

struct Level {
  int concurrency = 0;
  int errors = 0;
  std::string first_error;
  double ttft_mean = 0, ttft_max = 0, prompt_tps = 0, decode_tps_per_client = 0, aggregate_tps = 0,
         wall = 0;
  int prompt_tokens = 0;
};

Level run_level(const ApiClient& client, int concurrency, int max_tokens, bool progress) {
  std::vector<ClientRun> runs(static_cast<size_t>(concurrency));
  std::atomic<int64_t> chunks{0};
  std::atomic<int> finished{0};
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < concurrency; ++i)
    threads.emplace_back([&, i] {
      // A thread's exception would abort voltactl (main's catch is on its
      // own thread): an answer of an unexpected shape is that client's error.
      try {
        runs[size_t(i)] = run_client(client, max_tokens, chunks);
      } catch (const std::exception& e) {
        runs[size_t(i)].error =
            std::string("an answer that was not what was expected: ") + e.what();
      }
      ++finished;
    });
  const int64_t expected = int64_t(concurrency) * max_tokens;
  while (finished.load() < concurrency) {
    if (progress) {
      std::fprintf(stderr, "\r  %d client%s: %lld/%lld tokens", concurrency,
                   concurrency == 1 ? " " : "s", (long long)chunks.load(), (long long)expected);
      std::fflush(stderr);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : threads) t.join();
  if (progress) std::fprintf(stderr, "\r%60s\r", "");

  Level level;
  level.concurrency = concurrency;
  level.wall = std::chrono::duration<double>(Clock::now() - start).count();
  int ok = 0;
  int64_t tokens = 0;
  for (const ClientRun& r : runs) {
    if (!r.ok) {
      if (level.errors++ == 0) level.first_error = r.error;
      continue;
    }
    ++ok;
    tokens += r.completion_tokens;
    level.prompt_tokens = r.prompt_tokens;
    level.ttft_mean += r.ttft;
    level.ttft_max = std::max(level.ttft_max, r.ttft);
    level.prompt_tps += r.ttft > 0 ? r.prompt_tokens / r.ttft : 0;
    double decode = r.total - r.ttft;
    level.decode_tps_per_client += decode > 0 ? (r.completion_tokens - 1) / decode : 0;
  }
  if (ok) {
    level.ttft_mean /= ok;
    level.prompt_tps /= ok;
    level.decode_tps_per_client /= ok;
    level.aggregate_tps = level.wall > 0 ? double(tokens) / level.wall : 0;
  }
  return level;
}

}  // namespace

int cmd_bench(const ApiClient& client, const Args& args) {
  std::string concurrency_list = "1,2,4,8", max_tokens_text = "200";
  bool json = false;
  std::vector<std::string> extra;
  if (!parse_options("bench", args,
                     {{"--concurrency", &concurrency_list},
                      {"--max-tokens", &max_tokens_text},
                      {"--json", nullptr, &json}},
                     extra) ||
      !extra.empty()) {
    std::fprintf(stderr,
                 "usage: voltactl bench [--concurrency 1,2,4,8] [--max-tokens 200] [--json]\n");
    return kExitUsage;
  }
  std::vector<int> levels;
  const int max_tokens = whole_number<int>(max_tokens_text).value_or(0);
  for (size_t pos = 0; pos <= concurrency_list.size();) {
    size_t comma = concurrency_list.find(',', pos);
    if (comma == std::string::npos) comma = concurrency_list.size();
    auto level = whole_number<int>(concurrency_list.substr(pos, comma - pos));
    if (!level) {
      levels.clear();
      break;
    }
    levels.push_back(*level);
    pos = comma + 1;
  }
  if (levels.empty() ||
      std::any_of(levels.begin(), levels.end(), [](int c) { return c < 1 || c > 1024; })) {
    std::fprintf(stderr,
                 "voltactl bench: --concurrency takes a list of 1 to 1024 like 1,2,4,8, not "
                 "'%s'\n",
                 concurrency_list.c_str());
    return kExitUsage;
  }
  if (max_tokens < 1) {
    std::fprintf(
        stderr,
        "voltactl bench: --max-tokens takes a whole number from 1 to 2147483647, not '%s'\n",
        max_tokens_text.c_str());
    return kExitUsage;
  }

  // The model's name, and proof that voltad answers: a service of another
  // kind on the socket stops the bench here, not after every level failed.
  auto models = client.get("/v1/models");
  const Json m = models.ok() ? Json::parse(models->body, nullptr, false) : Json();
  if (!models.ok() || models->status != 200 || !m.is_object() || !m.contains("data") ||
      !m["data"].is_array() || m["data"].empty() || !m["data"][0].is_object() ||
      !m["data"][0].contains("id") || !m["data"][0]["id"].is_string())
    return report(models);
  const std::string model = m["data"][0]["id"].get<std::string>();

  const bool progress = !json && ::isatty(STDERR_FILENO);
  if (!json)
    std::printf("voltactl bench: %s, prompt of %zu characters, %d tokens per client, streaming\n",
                model.c_str(), std::string(kBenchPrompt).size(), max_tokens);
  if (!json)
    std::printf("%8s %9s %9s %14s %16s %16s %8s\n", "clients", "ttft_s", "ttft_max", "prompt_tok/s",
                "decode_tok/s", "aggregate_tok/s", "errors");
  Json out = {{"model", model},
              {"prompt_chars", std::string(kBenchPrompt).size()},
              {"max_tokens", max_tokens},
              {"levels", Json::array()}};
  int failures = 0;
  for (int c : levels) {
    Level l = run_level(client, c, max_tokens, progress);
    failures += l.errors;
    if (json) {
      out["prompt_tokens"] = l.prompt_tokens;
      out["levels"].push_back({{"concurrency", c},
                               {"ttft_s", l.ttft_mean},
                               {"ttft_max_s", l.ttft_max},
                               {"prompt_tokens_per_s", l.prompt_tps},
                               {"decode_tokens_per_s_per_client", l.decode_tps_per_client},
                               {"aggregate_tokens_per_s", l.aggregate_tps},
                               {"wall_s", l.wall},
                               {"errors", l.errors}});
    } else {
      std::printf("%8d %9.3f %9.3f %14.1f %16.2f %16.2f %8d\n", c, l.ttft_mean, l.ttft_max,
                  l.prompt_tps, l.decode_tps_per_client, l.aggregate_tps, l.errors);
      std::fflush(stdout);
    }
    if (l.errors)
      std::fprintf(stderr, "voltactl bench: %d client(s) failed: %s\n", l.errors,
                   l.first_error.c_str());
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return failures ? kExitFailure : kExitOk;
}

}  // namespace voltad::ctl
