#include "daemon/server_router.h"

#include <ctime>

#include <nlohmann/json.hpp>

#include "daemon/server_admin.h"
#include "daemon/vram_guard.h"

namespace voltad {

namespace http = boost::beast::http;
using Json = nlohmann::json;

MetricsSnapshot ServerContext::snapshot() const {
  MetricsSnapshot s;
  s.state = health_state_name(lifecycle.state());
  s.open_connections = open_connections.load();
  s.info = {{"version", VOLTAD_VERSION}, {"model", model_name}, {"backend", backend_name}};
  // Where it runs (the placement applied at start).
  s.info.emplace_back("gpu_bus_id", placement.gpu_bus_id.empty() ? "none" : placement.gpu_bus_id);
  s.info.emplace_back("numa_node", placement.numa_nodes.empty() ? "none" : placement.numa_nodes);
  s.info.emplace_back("cpus", placement.cpus);
  s.info.emplace_back("memory_policy", placement.memory_policy);
  if (const ServedModel* m = loaded()) {
    s.engine_ready = true;
    s.scheduler = m->scheduler->stats();
    s.kv_cache_bytes = m->kv_cache_bytes;
    s.device_memory_bytes = m->device_memory_bytes;
    s.info.emplace_back("chat_format", chat_format_name(m->chat_format));
    s.info.emplace_back("max_context", std::to_string(m->max_context));
  }
  if (const VramMonitor* v = vram.load(std::memory_order_acquire)) {
    s.vram_monitored = true;
    s.vram = v->status();
  }
  return s;
}

namespace {

struct Call {
  ServerContext& ctx;
  const HttpRequest& req;
  const PeerCredentials& peer;
  unsigned version() const { return req.version(); }
  bool keep_alive() const { return req.keep_alive(); }
  HttpResponse json(unsigned status, const Json& body) const {
    return json_response(status, body.dump(-1, ' ', false, Json::error_handler_t::replace),
                         version(), keep_alive());
  }
  HttpResponse error(const ApiError& e) const { return error_response(e, version(), keep_alive()); }
};

ApiError not_ready(const ServerContext& ctx) {
  HealthState s = ctx.lifecycle.state();
  if (s == HealthState::Starting || s == HealthState::Loading)
    return unavailable("the model is still loading; retry shortly", 5);
  if (s == HealthState::Degraded) {
    if (const VramMonitor* v = ctx.vram.load(std::memory_order_acquire))
      return unavailable(vram_refusal_message(v->status()), vram_retry_after_seconds(*v));
    return unavailable("the server is degraded and takes no new requests; retry shortly", 5);
  }
  if (s == HealthState::Draining)
    return unavailable(
        "the server is draining (an administrator paused it) and takes no new requests", 10);
  return unavailable("the server is shutting down and takes no new requests", 10);
}

std::optional<ApiError> check_model_name(const std::string& requested, const ServedModel& m) {
  if (requested.empty() || requested == m.name) return std::nullopt;
  ApiError e = not_found(
      "the model '" + requested + "' does not exist here; this server serves '" + m.name + "'",
      "model_not_found");
  e.param = "model";
  return e;
}

// null for what is not known or not bound.
Json placement_json(const PlacementSummary& p) {
  auto text = [](const std::string& v) { return v.empty() ? Json(nullptr) : Json(v); };
  auto node = [](int32_t n) { return n < 0 ? Json(nullptr) : Json(n); };
  return {{"gpu_bus_id", text(p.gpu_bus_id)},
          {"gpu_uuid", text(p.gpu_uuid)},
          {"gpu_model", text(p.gpu_model)},
          {"gpu_numa_node", node(p.gpu_numa_node)},
          {"numa_node", node(p.numa_node)},
          {"numa_nodes", text(p.numa_nodes)},
          {"memory_policy", p.memory_policy},
          {"cpus", p.cpus},
          {"cpus_bound", p.cpus_bound},
          {"threads", p.threads},
          {"warnings", p.warnings}};
}

HttpResponse health(const Call& c) {
  HealthState s = c.ctx.lifecycle.state();
  Json body = {{"status", health_state_name(s)},
               {"model", c.ctx.model_name},
               {"backend", c.ctx.backend_name}};
  if (const ServedModel* m = c.ctx.loaded()) {
    SchedulerStats st = m->scheduler->stats();
    body["running"] = st.running;
    body["waiting"] = st.waiting;
    body["kv_blocks_used"] = st.kv_blocks_used;
    body["kv_blocks_total"] = st.kv_blocks_total;
    body["max_context"] = m->max_context;
  }
  body["placement"] = placement_json(c.ctx.placement);
  if (const VramMonitor* v = c.ctx.vram.load(std::memory_order_acquire))
    body["vram"] = vram_health_json(v->status());
  // Only ready takes new requests. Loading, degraded (the card is past the
  // VRAM budget; running requests go on), draining and stopping answer 503,
  // with the Retry-After a refused request would get.
  bool serving = s == HealthState::Ready;
  HttpResponse res = c.json(serving ? 200 : 503, body);
  if (!serving)
    res.set(http::field::retry_after, std::to_string(not_ready(c.ctx).retry_after_seconds));
  return res;
}

Json model_object(const ServerContext& ctx) {
  Json m = {{"id", ctx.model_name}, {"object", "model"}, {"owned_by", "voltad"}, {"created", 0}};
  if (const ServedModel* s = ctx.loaded()) {
    m["created"] = s->created;
    m["max_model_len"] = s->max_context;
  }
  return m;
}

// The prompt's token ids: chat messages through the model's template, or the text as given.
std::vector<int32_t> prompt_tokens(const ServedModel& m, const CompletionRequest& r) {
  if (r.kind == CompletionRequest::Kind::Chat) {
    const RenderedChat chat =
        render_chat_parts(m.chat_format, r.messages, true, m.bos_text, m.chat_options);
    // The template's own markers are control tokens; what the messages hold
    // is text, whatever it spells (a user cannot close a turn with it).
    return m.tokenizer->encode(chat.text, m.add_bos, chat.literal);
  }
  if (!r.prompt_tokens.empty()) return r.prompt_tokens;
  return m.tokenizer->encode_raw_prompt(r.prompt);
}

RouteOutcome generation(const Call& c, CompletionRequest::Kind kind, std::function<void()> notify) {
  RouteOutcome out;
  out.endpoint = kind == CompletionRequest::Kind::Chat ? "/v1/chat/completions" : "/v1/completions";
  const ServedModel* m = c.ctx.serving();
  if (!m) {
    out.response = c.error(not_ready(c.ctx));
    return out;
  }
  CompletionRequest r;
  auto parsed = kind == CompletionRequest::Kind::Chat ? parse_chat_completion(c.req.body(), r)
                                                      : parse_text_completion(c.req.body(), r);
  if (parsed) {
    out.response = c.error(*parsed);
    return out;
  }
  if (auto e = check_model_name(r.model, *m)) {
    out.response = c.error(*e);
    return out;
  }
  GenerationRequest g;
  g.prompt = prompt_tokens(*m, r);
  const int64_t room = int64_t(m->max_context) - int64_t(g.prompt.size());
  if (room < 1 || (r.max_tokens && *r.max_tokens > room)) {
    // The prompt alone fills the context: only a shorter one helps, so the
    // error names it, not max_tokens.
    const std::string prompt_field = kind == CompletionRequest::Kind::Chat ? "messages" : "prompt";
    std::string msg = "this model's context is " + std::to_string(m->max_context) +
                      " tokens; the prompt has " + std::to_string(g.prompt.size());
    if (room < 1)
      msg += ", which leaves no room to generate: shorten the prompt";
    else
      msg += " and " + r.max_tokens_field + " asks for " +
             (r.max_tokens_text.empty() ? std::to_string(*r.max_tokens) : r.max_tokens_text) +
             " more: shorten the prompt or lower " + r.max_tokens_field;
    out.response = c.error(
        bad_request(msg, room < 1 ? prompt_field : r.max_tokens_field, "context_length_exceeded"));
    return out;
  }
  // Without max_tokens: a chat answer may run to the end of the context (as
  // OpenAI's chat API); a text completion stops after 16 tokens, the legacy
  // completions API's default, or where the context ends.
  if (r.max_tokens)
    g.max_tokens = int32_t(*r.max_tokens);  // within the room (above)
  else if (kind == CompletionRequest::Kind::Chat)
    g.max_tokens = int32_t(room);
  else
    g.max_tokens = int32_t(std::min<int64_t>(kTextCompletionDefaultMaxTokens, room));
  g.sampling = r.sampling;
  for (auto [token, bias] : g.sampling.logit_bias)
    if (size_t(token) >= m->tokenizer->vocab_size()) {
      out.response = c.error(bad_request("'logit_bias' key " + std::to_string(token) +
                                             " is outside the vocabulary (" +
                                             std::to_string(m->tokenizer->vocab_size()) + ")",
                                         "logit_bias"));
      return out;
    }
  g.stop = r.stop;
  g.ignore_eos = r.ignore_eos;
  g.logprobs = r.logprobs;
  if (auto checked = m->scheduler->check(g); !checked.ok()) {
    // What the scheduler refuses is the prompt (empty, a token id outside
    // the vocabulary, longer than the KV cache).
    out.response = c.error(bad_request(
        checked.message, kind == CompletionRequest::Kind::Chat ? "messages" : "prompt"));
    return out;
  }
  auto slot = c.ctx.user_limiter->try_acquire(c.peer.uid);
  if (!slot) {
    out.response =
        c.error(rate_limited("user " + c.peer.user + " already has " +
                             std::to_string(c.ctx.user_limiter->max_per_user()) +
                             (c.ctx.user_limiter->max_per_user() == 1 ? " request" : " requests") +
                             " in flight (server.max_requests_per_user); wait for one to finish"));
    return out;
  }
  auto job = std::make_shared<GenerationJob>(
      CompletionFormatter(kind, new_completion_id(kind), m->name, int64_t(std::time(nullptr)),
                          r.logprobs >= 0 ? m->tokenizer : nullptr),
      r.stream, r.include_usage);
  job->stream = std::make_shared<RequestStream>(std::move(notify));
  job->user_slot = std::move(slot);
  job->endpoint = out.endpoint;
  SubmitResult submitted = m->scheduler->submit(std::move(g), job->stream);
  if (!submitted.ok()) {
    ApiError e = submitted.code == SubmitResult::Code::Invalid ? bad_request(submitted.message)
                 : submitted.code == SubmitResult::Code::Busy  ? unavailable(submitted.message, 1)
                                                               : not_ready(c.ctx);
    out.response = c.error(e);
    return out;
  }
  out.job = std::move(job);
  return out;
}

HttpResponse tokenize(const Call& c) {
  const ServedModel* m = c.ctx.loaded();
  if (!m) return c.error(not_ready(c.ctx));
  TokenizeRequest r;
  if (auto e = parse_tokenize(c.req.body(), r)) return c.error(*e);
  if (auto e = check_model_name(r.model, *m)) return c.error(*e);
  std::vector<int32_t> tokens;
  if (r.prompt) {
    tokens = r.add_special ? m->tokenizer->encode_raw_prompt(*r.prompt)
                           : m->tokenizer->encode(*r.prompt, false, true);
  } else {
    const RenderedChat chat = render_chat_parts(m->chat_format, r.messages, true,
                                                r.add_special ? m->bos_text : "", m->chat_options);
    tokens = m->tokenizer->encode(chat.text, r.add_special && m->add_bos, chat.literal);
  }
  return c.json(200,
                {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", m->max_context}});
}

HttpResponse detokenize(const Call& c) {
  const ServedModel* m = c.ctx.loaded();
  if (!m) return c.error(not_ready(c.ctx));
  DetokenizeRequest r;
  if (auto e = parse_detokenize(c.req.body(), r)) return c.error(*e);
  if (auto e = check_model_name(r.model, *m)) return c.error(*e);
  for (size_t i = 0; i < r.tokens.size(); ++i)
    if (size_t(r.tokens[i]) >= m->tokenizer->vocab_size())
      return c.error(bad_request("'tokens[" + std::to_string(i) + "]' is " +
                                     std::to_string(r.tokens[i]) + ", outside the vocabulary (" +
                                     std::to_string(m->tokenizer->vocab_size()) + ")",
                                 "tokens"));
  return c.json(200, {{"prompt", m->tokenizer->decode(r.tokens)}});
}

// GET /plan: the VRAM plan the daemon made at start, and the card now.
HttpResponse vram_plan(const Call& c) {
  const ServedModel* m = c.ctx.loaded();
  if (!m) return c.error(not_ready(c.ctx));
  if (m->vram_plan_json.empty())
    return c.error(not_found("the " + m->backend +
                                 " backend holds no VRAM plan (only the CUDA backend plans the "
                                 "card); `voltad --plan --assume-vram BYTES` shows what a card "
                                 "would hold",
                             "no_vram_plan"));
  Json body = {{"plan", Json::parse(m->vram_plan_json, nullptr, false)},
               {"text", m->vram_plan_text},
               {"measured_with", m->vram_measured_with}};
  if (const VramMonitor* v = c.ctx.vram.load(std::memory_order_acquire))
    body["vram"] = vram_health_json(v->status());
  return c.json(200, body);
}

HttpResponse method_not_allowed(const Call& c, const char* allow) {
  ApiError e;
  e.status = 405;
  e.message = std::string(c.req.method_string()) + " is not allowed on " +
              std::string(c.req.target()) + "; use " + allow;
  e.code = "method_not_allowed";
  HttpResponse res = c.error(e);
  res.set(http::field::allow, allow);
  return res;
}

}  // namespace

std::string endpoint_label(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  for (std::string_view route : {"/v1/chat/completions", "/v1/completions", "/health", "/metrics",
                                 "/v1/models", "/plan", "/tokenize", "/detokenize"})
    if (path == route) return std::string(route);
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  if (path.starts_with("/admin/")) return "/admin";
  return "other";
}

RouteOutcome route_request(ServerContext& ctx, const HttpRequest& req, const PeerCredentials& peer,
                           std::function<void()> notify) {
  Call c{ctx, req, peer};
  std::string path(req.target());
  if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  const bool post = req.method() == http::verb::post;
  RouteOutcome out;
  out.endpoint = endpoint_label(path);

  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!post) {
      out.response = method_not_allowed(c, "POST");
      return out;
    }
    return generation(c,
                      path == "/v1/chat/completions" ? CompletionRequest::Kind::Chat
                                                     : CompletionRequest::Kind::Text,
                      std::move(notify));
  }
  if (path == "/health" || path == "/metrics" || path == "/v1/models" || path == "/plan") {
    if (!get)
      out.response = method_not_allowed(c, "GET");
    else if (path == "/health")
      out.response = health(c);
    else if (path == "/plan")
      out.response = vram_plan(c);
    else if (path == "/metrics")
      out.response =
          make_response(200, "text/plain; version=0.0.4; charset=utf-8",
                        ctx.metrics.render(ctx.snapshot()), req.version(), req.keep_alive());
    else
      out.response = c.json(200, {{"object", "list"}, {"data", Json::array({model_object(ctx)})}});
    return out;
  }
  if (path.rfind("/v1/models/", 0) == 0) {
    if (!get)
      out.response = method_not_allowed(c, "GET");
    else if (const std::string id = percent_decoded(path.substr(11)); id == ctx.model_name)
      out.response = c.json(200, model_object(ctx));
    else if (id.empty())
      out.response = c.error(
          not_found("no model id after /v1/models/ (GET /v1/models lists the models served)"));
    else {
      // As a completion naming it: param "model".
      ApiError e = not_found(
          "the model '" + id + "' does not exist here; this server serves '" + ctx.model_name + "'",
          "model_not_found");
      e.param = "model";
      out.response = c.error(e);
    }
    return out;
  }
  if (path == "/tokenize" || path == "/detokenize") {
    if (!post)
      out.response = method_not_allowed(c, "POST");
    else
      out.response = path == "/tokenize" ? tokenize(c) : detokenize(c);
    return out;
  }
  if (path.rfind("/admin/", 0) == 0) {
    out.response = admin_request(ctx, req, peer, path);
    return out;
  }
  out.response = c.error(
      not_found("no route " + std::string(req.method_string()) + " " + path +
                "; this server has /v1/chat/completions, /v1/completions, /v1/models, /tokenize, "
                "/detokenize, /health, /metrics and /plan"));
  return out;
}

}  // namespace voltad
