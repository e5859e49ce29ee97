#include "daemon/metrics.h"

#include <charconv>

namespace voltad {

namespace {

// Shortest text that reads back as the same double: "0.005", not "0.0050000000000000001".
std::string number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void gauge(std::string& out, const char* name, const char* help, double value) {
  header(out, name, "gauge", help);
  out += std::string(name) + ' ' + number(value) + '\n';
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace

std::string prometheus_escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  // The name may already carry labels: name{a="b"} -> name_bucket{a="b",le=...}.
  std::string base = name, labels;
  if (auto brace = name.find('{'); brace != std::string::npos) {
    base = name.substr(0, brace);
    labels = name.substr(brace + 1, name.size() - brace - 2) + ",";
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += base + "_bucket{" + labels + "le=\"" + le + "\"} " + std::to_string(cumulative) + '\n';
  }
  // labels without the trailing comma, braced; appended, as GCC 12 warns
  // falsely (-Wrestrict) on "{" + std::string&& in a Release build.
  std::string suffix_labels;
  if (!labels.empty()) {
    suffix_labels = "{";
    suffix_labels.append(labels, 0, labels.size() - 1);
    suffix_labels += '}';
  }
  out += base + "_sum" + suffix_labels + ' ' + number(sum_) + '\n';
  out += base + "_count" + suffix_labels + ' ' + std::to_string(count_) + '\n';
}

Metrics::Metrics() : ttft_(latency_buckets()), itl_(latency_buckets()) {}

void Metrics::count_request(std::string_view endpoint, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(endpoint), status}];
}

void Metrics::observe_request_seconds(std::string_view endpoint, double seconds) {
  std::lock_guard lock(mu_);
  auto it = request_seconds_.find(std::string(endpoint));
  if (it == request_seconds_.end())
    it = request_seconds_.emplace(std::string(endpoint), Histogram(latency_buckets())).first;
  it->second.observe(seconds);
}

void Metrics::count_connection(bool accepted, std::string_view refusal_reason) {
  std::lock_guard lock(mu_);
  if (accepted)
    ++connections_accepted_;
  else
    ++connections_refused_[std::string(refusal_reason)];
}

void Metrics::count_disconnect_cancel() {
  std::lock_guard lock(mu_);
  ++disconnect_cancels_;
}

void Metrics::on_first_token(double seconds, int32_t prompt_tokens) {
  tokens_sampled_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
  prompt_tokens_ += uint64_t(prompt_tokens);
}

void Metrics::on_next_token(double seconds) {
  tokens_sampled_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
}

void Metrics::on_finished(const StreamEvent& last) {
  std::lock_guard lock(mu_);
  generated_tokens_ += uint64_t(last.completion_tokens);
  ++finished_[end_reason_name(last.end)];
}

std::string Metrics::render(const MetricsSnapshot& s) const {
  std::string out;
  header(out, "voltad_info", "gauge", "The daemon, its model and backend (value always 1).");
  out += "voltad_info{";
  for (size_t i = 0; i < s.info.size(); ++i)
    out += (i ? "," : "") + s.info[i].first + "=\"" + prometheus_escape(s.info[i].second) + "\"";
  out += "} 1\n";
  header(out, "voltad_health_state", "gauge",
         "1 for the current state (daemon/lifecycle.h).");
  for (const char* state : {"starting", "loading", "ready", "degraded", "draining", "stopping"})
    out += std::string("voltad_health_state{state=\"") + state + "\"} " +
           (s.state == state ? "1" : "0") + '\n';

  std::lock_guard lock(mu_);
  header(out, "voltad_requests_total", "counter",
         "HTTP requests answered, by endpoint and status.");
  for (auto& [key, n] : requests_)
    out += "voltad_requests_total{endpoint=\"" + prometheus_escape(key.first) + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + '\n';
  header(out, "voltad_request_duration_seconds", "histogram",
         "Time from request to the end of its response.");
  for (auto& [endpoint, h] : request_seconds_)
    h.render("voltad_request_duration_seconds{endpoint=\"" + prometheus_escape(endpoint) + "\"}",
             out);
  header(out, "voltad_generations_finished_total", "counter", "Generations ended, by reason.");
  for (const char* reason : {"stop", "length", "cancelled", "error"}) {
    auto it = finished_.find(reason);
    out += std::string("voltad_generations_finished_total{reason=\"") + reason + "\"} " +
           std::to_string(it == finished_.end() ? 0 : it->second) + '\n';
  }
  header(out, "voltad_prompt_tokens_total", "counter",
         "Prompt tokens read, counted as each generation samples its first token (a request "
         "cancelled while it waited adds none).");
  out += "voltad_prompt_tokens_total " + std::to_string(prompt_tokens_) + '\n';
  header(out, "voltad_generated_tokens_total", "counter",
         "Tokens generated by finished generations.");
  out += "voltad_generated_tokens_total " + std::to_string(generated_tokens_) + '\n';
  header(out, "voltad_time_to_first_token_seconds", "histogram",
         "From submission to the first generated token.");
  ttft_.render("voltad_time_to_first_token_seconds", out);
  header(out, "voltad_inter_token_latency_seconds", "histogram",
         "Between consecutive tokens of one sequence.");
  itl_.render("voltad_inter_token_latency_seconds", out);
  header(out, "voltad_connections_total", "counter",
         "Connections accepted, and refused by reason.");
  out += "voltad_connections_total{result=\"accepted\"} " + std::to_string(connections_accepted_) +
         '\n';
  for (auto& [reason, n] : connections_refused_)
    out += "voltad_connections_total{result=\"refused\",reason=\"" + prometheus_escape(reason) +
           "\"} " + std::to_string(n) + '\n';
  header(out, "voltad_disconnect_cancels_total", "counter",
         "Generations cancelled because the client went away or stopped reading (write_timeout).");
  out += "voltad_disconnect_cancels_total " + std::to_string(disconnect_cancels_) + '\n';

  gauge(out, "voltad_open_connections", "Connections open now.", double(s.open_connections));
  gauge(out, "voltad_queue_depth", "Requests waiting for a sequence slot or KV blocks.",
        s.scheduler.waiting);
  gauge(out, "voltad_running_sequences", "Sequences in the running batch.", s.scheduler.running);
  gauge(out, "voltad_kv_cache_blocks_used", "KV cache blocks held by sequences.",
        s.scheduler.kv_blocks_used);
  gauge(out, "voltad_kv_cache_blocks_free", "KV cache blocks free.",
        s.scheduler.kv_blocks_total - s.scheduler.kv_blocks_used);
  gauge(out, "voltad_kv_cache_blocks_total", "KV cache blocks in the pool.",
        s.scheduler.kv_blocks_total);
  gauge(out, "voltad_kv_cache_bytes",
        "Memory held by the KV cache (device memory on a GPU backend).", double(s.kv_cache_bytes));
  if (s.device_memory_bytes > 0)
    gauge(out, "voltad_device_memory_used_bytes",
          "Device memory voltad holds: weights, KV cache and workspace.",
          double(s.device_memory_bytes));
  if (s.vram_monitored && s.vram.sampled) {
    // The whole card, every process included: what the VRAM guard compares
    // with memory.vram_fraction (docs/PLANNING.md, "While serving").
    gauge(out, "voltad_vram_card_used_bytes", "Memory in use on the card by all processes.",
          double(s.vram.used_bytes));
    gauge(out, "voltad_vram_card_total_bytes", "The card's memory.", double(s.vram.total_bytes));
    gauge(out, "voltad_vram_degraded_above_bytes",
          "Card usage above which voltad is degraded (memory.vram_fraction).",
          double(s.vram.enter_above_bytes));
    gauge(out, "voltad_vram_ready_below_bytes",
          "Card usage below which a degraded voltad is ready again (minus memory.hysteresis).",
          double(s.vram.leave_below_bytes));
  }
  if (s.vram_monitored) {
    header(out, "voltad_vram_degraded_total", "counter",
           "Times the card's usage crossed memory.vram_fraction (ready -> degraded).");
    out += "voltad_vram_degraded_total " + std::to_string(s.vram.degraded_total) + '\n';
    header(out, "voltad_vram_sample_errors_total", "counter",
           "Samples of the card's memory that failed.");
    out += "voltad_vram_sample_errors_total " + std::to_string(s.vram.sample_errors) + '\n';
  }
  header(out, "voltad_engine_steps_total", "counter", "Forward steps the engine has run.");
  out += "voltad_engine_steps_total " + std::to_string(s.scheduler.steps) + '\n';
  header(out, "voltad_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.");
  out += "voltad_preemptions_total " + std::to_string(s.scheduler.preemptions) + '\n';
  return out;
}

}  // namespace voltad
