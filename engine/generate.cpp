#include "engine/generate.h"

#include <chrono>

#include "engine/stop_strings.h"

namespace voltad {

std::string answer_text(const Tokenizer& tokenizer, StreamDecoder& decoder, StopStringFilter& stops,
                        int32_t token, std::string* decoded) {
  std::string scratch;
  std::string& text = decoded ? *decoded : scratch;
  text.clear();
  if (tokenizer.is_marker(token)) {
    if (stops.stopped() || !stops.names_marker(tokenizer.token_piece(token))) return {};
    text = decoder.flush();
    return stops.stop_at_marker(text);
  }
  text = decoder.push(token);
  return stops.push(text);
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

Result<GenerateResult> generate(Backend& backend, const Tokenizer& tokenizer,
                                const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                const std::function<bool(std::string_view)>& on_text) {
  if (prompt.empty()) return make_error("the prompt is empty: nothing to continue from");
  VOLTAD_TRY(options.sampling.validate());
  KvBlockPool& pool = backend.kv_pool();
  const int64_t total = int64_t(prompt.size()) + options.max_tokens;
  if (total > pool.max_seq_tokens())
    return make_error("prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" +
                      std::to_string(options.max_tokens) + ") exceeds the context of " +
                      std::to_string(pool.max_seq_tokens()) + " tokens");
  if (!pool.reserve(options.seq_id, total))
    return make_error("the KV cache has no room for " + std::to_string(total) + " tokens (" +
                      std::to_string(pool.free_blocks()) + " blocks free)");
  struct Release {
    KvBlockPool& pool;
    int32_t seq;
    ~Release() { pool.release(seq); }
  } release{pool, options.seq_id};

  GenerateResult result;
  Sampler sampler(options.sampling);
  StreamDecoder decoder(tokenizer);
  StopStringFilter stops(options.stop);
  std::vector<int32_t> history = prompt;
  ForwardOutput out;
  bool cancelled = false;
  auto emit = [&](const std::string& text) {
    if (text.empty() || cancelled) return;
    result.text += text;
    if (on_text && !on_text(text)) cancelled = true;
  };

  // Only the candidates the sampler needs cross from the device, unless the
  // caller watches whole rows.
  const int32_t top_k = options.on_logits ? 0 : sampler.candidates_needed(kMaxCandidates);

  auto t0 = std::chrono::steady_clock::now();
  for (size_t start = 0; start < prompt.size(); start += size_t(options.prefill_chunk)) {
    size_t n = std::min(prompt.size() - start, size_t(options.prefill_chunk));
    BatchChunk chunk;
    chunk.seq_id = options.seq_id;
    chunk.start_pos = int32_t(start);
    chunk.tokens = std::span<const int32_t>(prompt).subspan(start, n);
    chunk.logits = start + n == prompt.size() ? BatchChunk::Logits::Last : BatchChunk::Logits::None;
    if (chunk.logits == BatchChunk::Logits::Last) {
      chunk.top_k = top_k;
      if (top_k > 0) chunk.noise = sampler.noise();  // off unless it draws by noise
    }
    VOLTAD_TRY(backend.forward(std::span<const BatchChunk>(&chunk, 1), out));
    if (options.on_prefill) options.on_prefill(start + n, prompt.size());
  }
  result.prefill_seconds = seconds_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < options.max_tokens && !cancelled; ++i) {
    int32_t token;
    float logit;  // the drawn token's, or the best candidate's
    if (top_k > 0) {
      token = sampler.sample_candidates(out.candidate_row_ids(0), out.candidate_row_logits(0));
      logit = out.candidate_row_logits(0)[0];
    } else {
      if (options.on_logits) options.on_logits(out.row(0));
      token = sampler.sample(std::span<float>(out.logits.data(), size_t(out.n_vocab)), history,
                             prompt.size());
      logit = out.logits[size_t(token)];
    }
    if (std::string why = non_finite_logit_error(logit, i); !why.empty()) return make_error(why);
    if (tokenizer.is_end_of_generation(token)) {
      result.finish = FinishReason::Stop;
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    emit(answer_text(tokenizer, decoder, stops, token));
    if (stops.stopped()) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (i + 1 == options.max_tokens) break;
    BatchChunk chunk;
    chunk.seq_id = options.seq_id;
    chunk.start_pos = int32_t(history.size() - 1);
    chunk.tokens = std::span<const int32_t>(&history.back(), 1);
    chunk.top_k = top_k;
    if (top_k > 0) chunk.noise = sampler.noise();
    VOLTAD_TRY(backend.forward(std::span<const BatchChunk>(&chunk, 1), out));
    ++result.decode_steps;
  }
  if (!stops.stopped()) {
    emit(stops.finish(decoder.flush()));
    // The flushed text (a cut character's U+FFFD) may complete a stop string.
    if (stops.stopped()) result.finish = FinishReason::Stop;
  }
  result.decode_seconds = seconds_since(t1);
  return result;
}

}  // namespace voltad
