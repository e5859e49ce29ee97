#include "daemon/voltactl_commands.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/exit_codes.h"
#include "engine/utf8.h"

namespace voltad::ctl {

using Json = nlohmann::json;

bool parse_options(const char* command, const Args& args, const std::vector<OptionSpec>& specs,
                   std::vector<std::string>& positional) {
  bool options_end = false;  // after "--" every word is text
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_end) {
      positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_end = true;
      continue;
    }
    // "-n", "-x": an option mistyped, not text (a prompt that starts with a
    // dash goes after "--"); "-5" and "-" are text.
    if (a.size() >= 2 && a[0] == '-' && a[1] != '-' && std::isalpha((unsigned char)a[1])) {
      std::fprintf(stderr,
                   "voltactl %s: unknown option %s (text that starts with '-' goes after --)\n",
                   command, a.c_str());
      return false;
    }
    if (a.size() < 2 || a.compare(0, 2, "--") != 0) {
      positional.push_back(a);
      continue;
    }
    // --name VALUE or --name=VALUE.
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    bool known = false;
    for (const OptionSpec& s : specs) {
      if (name != s.name) continue;
      known = true;
      if (s.flag) {
        if (eq != std::string::npos) {
          std::fprintf(stderr, "voltactl %s: %s takes no value\n", command, s.name);
          return false;
        }
        *s.flag = true;
      } else if (eq != std::string::npos) {
        *s.value = a.substr(eq + 1);
      } else {
        if (i + 1 >= args.size()) {
          std::fprintf(stderr, "voltactl %s: %s needs a value\n", command, s.name);
          return false;
        }
        *s.value = args[++i];
      }
    }
    if (!known) {
      std::fprintf(stderr, "voltactl %s: unknown option %s\n", command, name.c_str());
      return false;
    }
  }
  return true;
}

std::string vram_line(const nlohmann::json& g) {
  auto gib = [&](const char* key) { return g.value(key, 0.0) / double(1 << 30); };
  char line[256];
  std::snprintf(line, sizeof line,
                "%.2f of %.2f GiB in use by all processes (%s); degraded above %.2f GiB, ready "
                "again below %.2f GiB%s",
                gib("card_used_bytes"), gib("card_total_bytes"),
                g.value("source", std::string("?")).c_str(), gib("degraded_above_bytes"),
                gib("ready_below_bytes"),
                g.value("degraded", false) ? ": DEGRADED, new requests get 503" : "");
  return line;
}

int report(const Result<ApiResponse>& r) {
  if (!r.ok()) {
    std::fprintf(stderr, "voltactl: %s\n", r.error().message.c_str());
    return kExitUnavailable;
  }
  if (r->status == 0) {  // not HTTP
    std::fprintf(stderr, "voltactl: %s\n", r->body.c_str());
  } else if (r->status == 200) {  // HTTP, but not what voltad answers
    std::fprintf(stderr,
                 "voltactl: the answer is not voltad's (is another service on the socket?): %s\n",
                 r->body.substr(0, 200).c_str());
  } else {
    std::fprintf(stderr, "voltactl: the server answered %d: %s\n", r->status,
                 error_message(r.value()).c_str());
  }
  return kExitFailure;
}

namespace {

// Sampling options common to generate and chat, as request fields.
bool add_sampling(const char* command, const std::string& max_tokens,
                  const std::string& temperature, const std::string& seed, Json& body) {
  auto bad = [&](const char* option, const char* what, const std::string& text) {
    std::fprintf(stderr, "voltactl %s: %s takes %s, not '%s'\n", command, option, what,
                 text.c_str());
    return false;
  };
  if (!max_tokens.empty()) {
    auto n = whole_number<int>(max_tokens);
    if (!n || *n < 1) return bad("--max-tokens", "a whole number from 1 to 2147483647", max_tokens);
    body["max_tokens"] = *n;
  }
  if (!temperature.empty()) {
    auto t = whole_number<double>(temperature);
    if (!t) return bad("--temperature", "a number", temperature);
    body["temperature"] = *t;
  }
  if (!seed.empty()) {
    auto s = whole_number<long long>(seed);
    if (!s) return bad("--seed", "a whole number of at most 64 bits, signed", seed);
    body["seed"] = *s;
  }
  return true;
}

// The text of a streamed chunk: chat's delta.content or completions' text.
// An error object inside the stream is returned through `error`.
std::string chunk_text(const std::string& data, std::string& error) {
  Json j = Json::parse(data, nullptr, false);
  if (!j.is_object()) return {};
  if (j.contains("error")) {  // {"error": {"message": ...}}, or anything else said as it is
    error = stream_error_text(j["error"]);
    return {};
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return {};
  const Json& c = j["choices"][0];
  if (!c.is_object()) return {};
  if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
      c["delta"]["content"].is_string())
    return c["delta"]["content"].get<std::string>();
  if (c.contains("text") && c["text"].is_string()) return c["text"].get<std::string>();
  return {};
}

volatile sig_atomic_t g_interrupted = 0;

// Ctrl-C during an answer closes its connection (voltad cancels the
// generation); at the prompt it leaves. Only async-signal-safe calls here.
void on_sigint(int) {
  int fd = ApiClient::active_fd.load();
  if (fd >= 0) {
    g_interrupted = 1;
    ::shutdown(fd, SHUT_RDWR);
    return;
  }
  const char nl = '\n';
  (void)!::write(STDOUT_FILENO, &nl, 1);
  _exit(130);
}

}  // namespace

namespace {

// The API takes UTF-8 text: the byte where `text` stops being UTF-8, if it does.
std::optional<size_t> invalid_utf8_at(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_decode(text, i);
    if (!c.valid) return i;
    i += c.length;
  }
  return std::nullopt;
}

bool refuse_invalid_utf8(const char* command, const char* what, const std::string& text) {
  const auto at = invalid_utf8_at(text);
  if (!at) return false;
  std::fprintf(stderr, "voltactl %s: %s is not valid UTF-8 (byte %zu); the API takes UTF-8 text\n",
               command, what, *at);
  return true;
}

// The daemon's count from a /tokenize answer: the prompt's tokens and the
// context's length; none from a daemon that cannot count (an older one).
struct TokenCount {
  int64_t count = 0;
  int64_t context = 0;
};
std::optional<TokenCount> token_count(const ApiResponse& tokenized) {
  if (tokenized.status != 200) return std::nullopt;
  const Json j = Json::parse(tokenized.body, nullptr, false);
  if (!j.is_object() || !j.contains("max_model_len") || !j.contains("count") ||
      !j["max_model_len"].is_number_integer() || !j["count"].is_number_integer())
    return std::nullopt;
  return TokenCount{j["count"].get<int64_t>(), j["max_model_len"].get<int64_t>()};
}

// generate's default length: 256 tokens, or what the context leaves after
// the prompt where that is less (a small engine.max_context refused 256),
// from the daemon's count (/tokenize, its answer `tokenized`). nullopt:
// send none, and the daemon's answer says what does not fit (a prompt that
// fills the context); a daemon that cannot count (an older one), 256.
std::optional<int64_t> default_max_tokens(const ApiResponse& tokenized) {
  constexpr int64_t kDefault = 256;
  const auto n = token_count(tokenized);
  if (!n) return kDefault;
  const int64_t room = n->context - n->count;
  if (room < 1) return std::nullopt;
  return std::min(kDefault, room);
}

// chat keeps the whole conversation and sends it each turn; one that
// outgrows the context would be refused from then on. So before a turn the
// oldest exchanges (a user line and the answers after it; the system
// message stays) are forgotten while the conversation and the answer's
// room (--max-tokens, else kChatAnswerRoom or half the context) are more
// than the context, by the daemon's count (/tokenize). The new line is
// kept: alone too long, its request says so. Returns the exchanges
// forgotten and the context's length; a daemon that cannot count, none.
struct Forgotten {
  int exchanges = 0;
  int64_t context = 0;
};
constexpr int64_t kChatAnswerRoom = 256;

Forgotten fit_history(const ApiClient& client, Json& history, std::optional<int64_t> max_tokens) {
  Forgotten out;
  for (;;) {
    auto t = client.post("/tokenize", Json{{"messages", history}}.dump());
    const auto n = t.ok() ? token_count(*t) : std::nullopt;
    if (!n) return out;
    out.context = n->context;
    const int64_t room = max_tokens.value_or(std::min(kChatAnswerRoom, out.context / 2));
    if (n->count + room <= out.context) return out;
    const size_t first = !history.empty() && history[0].value("role", "") == "system" ? 1 : 0;
    if (history.size() <= first + 1) return out;  // only the new line is left
    size_t end = first + 1;
    while (end + 1 < history.size() && history[end].value("role", "") != "user") ++end;
    history.erase(history.begin() + std::ptrdiff_t(first), history.begin() + std::ptrdiff_t(end));
    ++out.exchanges;
  }
}

}  // namespace

int cmd_generate(const ApiClient& client, const Args& args) {
  std::string max_tokens, temperature, seed;
  std::vector<std::string> prompt;
  if (!parse_options(
          "generate", args,
          {{"--max-tokens", &max_tokens}, {"--temperature", &temperature}, {"--seed", &seed}},
          prompt))
    return kExitUsage;
  if (prompt.empty()) {
    std::fprintf(stderr,
                 "usage: voltactl generate PROMPT [--max-tokens N] [--temperature T] [--seed N]\n");
    return kExitUsage;
  }
  std::string text;
  for (auto& p : prompt) text += (text.empty() ? "" : " ") + p;
  if (refuse_invalid_utf8("generate", "the prompt", text)) return kExitUsage;
  Json body = {{"prompt", text}, {"stream", true}};
  if (!add_sampling("generate", max_tokens, temperature, seed, body)) return kExitUsage;
  if (max_tokens.empty()) {
    // A daemon that cannot be reached (or does not answer) is reported here.
    auto tokenized = client.post("/tokenize", Json{{"prompt", text}}.dump());
    if (!tokenized.ok()) return report(tokenized);
    if (auto n = default_max_tokens(*tokenized)) body["max_tokens"] = *n;
  }
  std::string error;
  bool printed = false;  // the line is ended only if text was written
  auto r = client.stream("/v1/completions", body.dump(), [&](const std::string& data) {
    std::string t = chunk_text(data, error);
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
    printed = printed || !t.empty();
    return error.empty();
  });
  if (printed) std::fputc('\n', stdout);
  if (!r.ok() || r->status != 200) return report(r);
  if (!r->broken.empty()) {
    std::fprintf(stderr, "voltactl: %s\n", r->broken.c_str());
    return r->daemon_gone ? kExitUnavailable : kExitFailure;
  }
  if (!error.empty()) {
    std::fprintf(stderr, "voltactl: the generation failed: %s\n", error.c_str());
    return kExitFailure;
  }
  return kExitOk;
}

int cmd_chat(const ApiClient& client, const Args& args) {
  std::string max_tokens, temperature, seed, system;
  std::vector<std::string> extra;
  if (!parse_options("chat", args,
                     {{"--max-tokens", &max_tokens},
                      {"--temperature", &temperature},
                      {"--seed", &seed},
                      {"--system", &system}},
                     extra) ||
      !extra.empty()) {
    std::fprintf(
        stderr,
        "usage: voltactl chat [--system TEXT] [--max-tokens N] [--temperature T] [--seed N]\n");
    return kExitUsage;
  }
  if (Json probe; !add_sampling("chat", max_tokens, temperature, seed, probe)) return kExitUsage;
  if (refuse_invalid_utf8("chat", "--system", system)) return kExitUsage;
  const bool tty = ::isatty(STDIN_FILENO);
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  if (tty)
    std::printf("Chatting with voltad at %s. Ctrl-C stops an answer; Ctrl-D or /exit leaves.\n",
                client.socket_path().c_str());

  Json history = Json::array();
  if (!system.empty()) history.push_back({{"role", "system"}, {"content", system}});
  std::string line;
  int status = kExitOk;
  for (;;) {
    if (tty) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line.empty()) continue;
    if (refuse_invalid_utf8("chat", "that line", line)) continue;  // not sent; the chat goes on
    history.push_back({{"role", "user"}, {"content", line}});
    Json body = {{"stream", true}};
    if (!add_sampling("chat", max_tokens, temperature, seed, body)) return kExitUsage;
    const Forgotten forgotten =
        fit_history(client, history,
                    body.contains("max_tokens") ? std::optional(body["max_tokens"].get<int64_t>())
                                                : std::nullopt);
    if (forgotten.exchanges)
      std::fprintf(stderr,
                   "voltactl chat: the conversation outgrew the model's context (%lld tokens); "
                   "forgot the oldest %s\n",
                   static_cast<long long>(forgotten.context),
                   forgotten.exchanges == 1
                       ? "exchange"
                       : (std::to_string(forgotten.exchanges) + " exchanges").c_str());
    body["messages"] = history;
    std::string answer, error;
    g_interrupted = 0;
    auto r = client.stream("/v1/chat/completions", body.dump(), [&](const std::string& data) {
      std::string t = chunk_text(data, error);
      answer += t;
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return error.empty();
    });
    if (!answer.empty()) std::fputc('\n', stdout);  // a refused line prints nothing to stdout
    if (g_interrupted) {
      // The exchange is dropped: the model never finished its answer.
      std::printf("[cancelled]\n");
      history.erase(history.size() - 1);
      continue;
    }
    if (r.ok() && !r->broken.empty()) {  // the daemon is gone, or was never voltad
      std::fprintf(stderr, "voltactl: %s\n", r->broken.c_str());
      return r->daemon_gone ? kExitUnavailable : kExitFailure;
    }
    if (!r.ok() || r->status != 200 || !error.empty()) {
      if (!error.empty())
        std::fprintf(stderr, "voltactl: the generation failed: %s\n", error.c_str());
      else
        status = report(r);
      history.erase(history.size() - 1);
      if (!r.ok()) return status;  // the daemon is gone
      continue;
    }
    history.push_back({{"role", "assistant"}, {"content", answer}});
  }
  return status;
}

namespace {

// Unlabelled samples and the labels of voltad_info, from /metrics text.
struct MetricsText {
  std::map<std::string, double> values;
  std::vector<std::pair<std::string, std::string>> info;
};

MetricsText parse_metrics(const std::string& text) {
  MetricsText m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("voltad_info{", 0) == 0) {
      std::string labels = line.substr(12, line.rfind('}') - 12);
      for (size_t pos = 0; pos < labels.size();) {
        size_t eq = labels.find("=\"", pos);
        if (eq == std::string::npos) break;
        size_t end = labels.find('"', eq + 2);
        while (end != std::string::npos && labels[end - 1] == '\\') end = labels.find('"', end + 1);
        if (end == std::string::npos) break;
        m.info.emplace_back(labels.substr(pos, eq - pos), labels.substr(eq + 2, end - eq - 2));
        pos = end + 2;
      }
      continue;
    }
    size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      m.values[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
    }
  }
  return m;
}

// "GPU 0000:b7:00.0 (Tesla V100-SXM2-32GB, node 1); memory bind to node 1;
// CPUs 20-39; 20 worker threads", from /health's placement object.
std::string placement_line(const Json& p) {
  auto text = [&](const char* key) {
    return p.contains(key) && p[key].is_string() ? p[key].get<std::string>() : std::string();
  };
  std::string gpu = text("gpu_bus_id");
  std::string line = gpu.empty() ? "no GPU" : "GPU " + gpu;
  std::string about = text("gpu_model");
  if (p.contains("gpu_numa_node") && p["gpu_numa_node"].is_number())
    about += (about.empty() ? "node " : ", node ") + std::to_string(p["gpu_numa_node"].get<int>());
  if (!gpu.empty() && !about.empty()) line += " (" + about + ")";
  std::string policy = text("memory_policy"), nodes = text("numa_nodes");
  line += policy.empty() || policy == "off" || nodes.empty()
              ? "; memory not bound"
              : "; memory " + policy + " to node" +
                    (nodes.find_first_of(",-") == std::string::npos ? " " : "s ") + nodes;
  line += "; CPUs " + text("cpus");
  if (p.value("cpus_bound", false) == false) line += " (not bound)";
  if (int threads = p.value("threads", 0); threads > 0)
    line += "; " + std::to_string(threads) + " worker thread" + (threads == 1 ? "" : "s");
  return line;
}

}  // namespace

int cmd_status(const ApiClient& client, const Args& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "usage: voltactl status\n");
    return kExitUsage;
  }
  auto health = client.get("/health");
  if (!health.ok()) return report(health);
  Json h = Json::parse(health->body, nullptr, false);
  // An answer without a state is an error answer (403 for a refused user).
  // A daemon too busy to answer (429 past the user's connections, 503 past
  // all) is not ready for this caller: 69, as a health check expects.
  if (!h.is_object() || !h.contains("status")) {
    const int code = report(health);
    return health->status == 429 || health->status == 503 ? kExitUnavailable : code;
  }
  std::printf("voltad at %s: %s\n", client.socket_path().c_str(),
              h.value("status", std::string("?")).c_str());
  auto metrics = client.get("/metrics");
  MetricsText m =
      metrics.ok() && metrics->status == 200 ? parse_metrics(metrics->body) : MetricsText{};
  auto v = [&](const char* name) { return m.values.count(name) ? m.values[name] : 0.0; };
  // Model, backend and placement have lines of their own.
  auto elsewhere = [](const std::string& k) {
    for (const char* own : {"model", "backend", "gpu_bus_id", "numa_node", "cpus", "memory_policy"})
      if (k == own) return true;
    return false;
  };
  std::string labels;
  for (auto& [k, val] : m.info)
    if (!elsewhere(k)) labels += (labels.empty() ? "" : ", ") + k + " " + val;
  std::printf("  model       %s (backend %s)\n", h.value("model", std::string("?")).c_str(),
              h.value("backend", std::string("?")).c_str());
  if (!labels.empty()) std::printf("  details     %s\n", labels.c_str());
  if (h.contains("placement") && h["placement"].is_object()) {
    const Json& p = h["placement"];
    std::printf("  placement   %s\n", placement_line(p).c_str());
    if (size_t n = p.value("warnings", Json::array()).size(); n > 0)
      std::printf("              %zu warning%s at start (the daemon's log says which)\n", n,
                  n == 1 ? "" : "s");
  }
  if (h.contains("running")) {
    std::printf("  sequences   %d running, %d waiting\n", h.value("running", 0),
                h.value("waiting", 0));
    int used = h.value("kv_blocks_used", 0), total = h.value("kv_blocks_total", 0);
    std::printf("  kv cache    %d of %d blocks used, %.1f MiB in all\n", used, total,
                v("voltad_kv_cache_bytes") / (1 << 20));
  }
  if (h.contains("vram") && h["vram"].is_object())
    std::printf("  gpu memory  %s\n", vram_line(h["vram"]).c_str());
  std::printf("  served      %.0f prompt tokens, %.0f generated tokens, %.0f connections\n",
              v("voltad_prompt_tokens_total"), v("voltad_generated_tokens_total"),
              v("voltad_connections_total{result=\"accepted\"}"));
  double ttft_n = v("voltad_time_to_first_token_seconds_count"),
         itl_n = v("voltad_inter_token_latency_seconds_count");
  if (ttft_n > 0 && itl_n > 0) {
    double itl = v("voltad_inter_token_latency_seconds_sum") / itl_n;
    std::printf(
        "  latency     first token %.3f s on average, then %.1f ms per token (%.1f tokens/s per "
        "sequence)\n",
        v("voltad_time_to_first_token_seconds_sum") / ttft_n, itl * 1000, itl > 0 ? 1 / itl : 0.0);
  }
  return health->status == 200 ? kExitOk : kExitUnavailable;
}

int cmd_models(const ApiClient& client, const Args& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "usage: voltactl models\n");
    return kExitUsage;
  }
  auto r = client.get("/v1/models");
  if (!r.ok() || r->status != 200) return report(r);
  Json j = Json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) {
    std::fprintf(stderr, "voltactl: unexpected answer from /v1/models: %s\n", r->body.c_str());
    return kExitFailure;
  }
  for (const Json& m : j["data"]) {
    std::printf("%s", m.value("id", std::string("?")).c_str());
    if (m.contains("max_model_len"))
      std::printf("  (context %d tokens)", m.value("max_model_len", 0));
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace voltad::ctl
