#include "engine/backend_cpu.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <system_error>

#include <unistd.h>

#include "engine/cpu_clones.h"
#include "engine/dequantize.h"

namespace voltad {

namespace {

std::vector<float> decode_vector(const GgufTensor* t) {
  if (!t) return {};
  return dequantize_tensor(*t);
}

// Sixteen partial sums, lane k taking the elements k mod 16: two vectors of
// 8 in the AVX2 clone (cpu_clones.h), four of 4 in the baseline; a loop
// whose lanes are independent vectorizes without reordering any one sum,
// and with no fused multiply-adds (engine/CMakeLists.txt) both clones give
// the same bits.
VOLTAD_CPU_CLONES VOLTAD_CPU_NO_TSAN float dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += a[i + k] * b[i + k];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int k = 0; k < width; ++k) acc[k] += acc[k + width];
  return acc[0] + tail;
}

// out += weight * v, element by element (attention's weighted sum of values).
VOLTAD_CPU_NO_TSAN void add_scaled(float* out, float weight, const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += weight * v[i];
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

struct CacheSize {
  int64_t blocks = 0;
  double bytes = 0, limit = 0;
};

CacheSize cache_size(const ModelConfig& c, const CpuBackendOptions& options) {
  CacheSize s;
  s.blocks = options.kv_blocks > 0
                 ? options.kv_blocks
                 : int64_t(KvBlockPool::blocks_for(options.max_context)) * options.max_sequences;
  s.bytes = double(s.blocks) * KvBlockPool::kBlockTokens * double(c.kv_dim()) * double(c.n_layers) *
            2 * 4;
  // At most 64 GiB, and at most half of this machine's memory (the weights
  // and everything else need the rest).
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  s.limit = std::min(64.0 * (1ull << 30), memory > 0 ? memory / 2 : 64.0 * (1ull << 30));
  return s;
}

std::string too_large(const CacheSize& s, const std::string& why) {
  return "cpu backend: a KV cache of " + std::to_string(int64_t(s.bytes / (1 << 20))) + " MiB " +
         why + "; lower the context or the sequences (engine.max_context, " +
         "engine.max_sequences; voltad-run --ctx)";
}

}  // namespace

std::string CpuBackend::cache_too_large(const ModelConfig& config,
                                        const CpuBackendOptions& options) {
  const CacheSize s = cache_size(config, options);
  if (s.bytes <= s.limit) return "";
  return too_large(s, "is more than " + std::to_string(int64_t(s.limit / (1 << 20))) +
                          " MiB (half of this machine's memory, at most 64 GiB)");
}

Result<std::unique_ptr<CpuBackend>> CpuBackend::create(std::shared_ptr<const Model> model,
                                                       const CpuBackendOptions& options) {
  if (options.max_context <= 0 || options.max_sequences <= 0)
    return make_error("cpu backend: max_context and max_sequences must be positive");
  if (std::string why = cache_too_large(model->config, options); !why.empty())
    return make_error(std::move(why));
  const CacheSize size = cache_size(model->config, options);
  // What the limit lets through can still fail (ulimit -v, memory in use):
  // an error, not an abort.
  try {
    return std::unique_ptr<CpuBackend>(
        new CpuBackend(std::move(model), options, int32_t(size.blocks)));
  } catch (const std::bad_alloc&) {
    return make_error(too_large(size, "could not be allocated"));
  } catch (const std::system_error& e) {
    return make_error("cpu backend: cannot start its " + std::to_string(options.threads) +
                      " threads: " + e.what() + "; use fewer");
  }
}

CpuBackend::CpuBackend(std::shared_ptr<const Model> model, const CpuBackendOptions& options, int32_t n_blocks)
    : model_(std::move(model)), pool_threads_(options.threads), pool_(n_blocks, options.max_context) {
  const ModelConfig& c = model_->config;
  const ModelWeights& w = model_->weights;
  for (const LayerWeights& l : w.layers) {
    layer_vectors_.push_back({decode_vector(l.attn_norm), decode_vector(l.ffn_norm), decode_vector(l.bq),
                              decode_vector(l.bk), decode_vector(l.bv), decode_vector(l.q_norm),
                              decode_vector(l.k_norm)});
  }
  output_norm_ = decode_vector(w.output_norm);
  std::vector<float> factors = decode_vector(w.rope_freqs);
  for (int64_t i = 0; i < c.head_dim / 2; ++i) {
    double f = std::pow(double(c.rope_theta), -2.0 * double(i) / double(c.head_dim));
    if (!factors.empty()) f /= factors[size_t(i)];
    inv_freq_.push_back(f * c.rope_freq_scale);
  }
  size_t per_cache = size_t(c.n_layers) * size_t(n_blocks) * KvBlockPool::kBlockTokens * size_t(c.kv_dim());
  k_cache_.assign(per_cache, 0.0f);
  v_cache_.assign(per_cache, 0.0f);
}

void CpuBackend::matmul(const GgufTensor& w, const float* x, int64_t n, float* y) {
  const int64_t cols = int64_t(w.ne[0]), rows = int64_t(w.n_rows());
  const uint64_t row_bytes = ggml_row_bytes(w.type, cols);
  pool_threads_.parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      dequantize_row(w.type, w.data + uint64_t(r) * row_bytes, row.data(), cols);
      for (int64_t t = 0; t < n; ++t) y[t * rows + r] = dot(row.data(), x + t * cols, cols);
    }
  });
}

void CpuBackend::rms_norm(const float* x, const std::vector<float>& w, int64_t n, int64_t width,
                          float* y) const {
  const float eps = model_->config.rms_eps;
  for (int64_t t = 0; t < n; ++t) {
    const float* xi = x + t * width;
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += double(xi[i]) * xi[i];
    float scale = float(1.0 / std::sqrt(ss / double(width) + eps));
    for (int64_t i = 0; i < width; ++i) y[t * width + i] = xi[i] * scale * w[size_t(i)];
  }
}

void CpuBackend::rope(float* vec, int64_t n_heads, int32_t pos) const {
  const int64_t hd = model_->config.head_dim, half = hd / 2;
  const bool neox = model_->config.rope_style == RopeStyle::Neox;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = vec + h * hd;
    for (int64_t i = 0; i < half; ++i) {
      double angle = double(pos) * inv_freq_[size_t(i)];
      double c = std::cos(angle), s = std::sin(angle);
      int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      double x0 = v[a], x1 = v[b];
      v[a] = float(x0 * c - x1 * s);
      v[b] = float(x0 * s + x1 * c);
    }
  }
}

float* CpuBackend::k_at(int64_t layer, int32_t seq, int32_t pos) {
  const int64_t kv_dim = model_->config.kv_dim();
  size_t block = size_t(pool_.block_of(seq, pos));
  size_t index = ((size_t(layer) * size_t(pool_.n_blocks()) + block) * KvBlockPool::kBlockTokens +
                  size_t(pos % KvBlockPool::kBlockTokens)) * size_t(kv_dim);
  return &k_cache_[index];
}

float* CpuBackend::v_at(int64_t layer, int32_t seq, int32_t pos) {
  return v_cache_.data() + (k_at(layer, seq, pos) - k_cache_.data());
}

void CpuBackend::attention(int64_t layer, const std::vector<Token>& tokens, const float* q, float* out) {
  const ModelConfig& c = model_->config;
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const int64_t units = int64_t(tokens.size()) * c.n_heads;
  pool_threads_.parallel_for(units, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t u = begin; u < end; ++u) {
      const Token& tok = tokens[size_t(u / c.n_heads)];
      const int64_t h = u % c.n_heads, kvh = h / group;
      const float* qh = q + (u / c.n_heads) * c.q_dim() + h * hd;
      scores.resize(size_t(tok.pos) + 1);
      float max_score = -INFINITY;
      for (int32_t p = 0; p <= tok.pos; ++p) {
        scores[size_t(p)] = dot(qh, k_at(layer, tok.seq, p) + kvh * hd, hd) * scale;
        max_score = std::max(max_score, scores[size_t(p)]);
      }
      double sum = 0;
      for (auto& s : scores) sum += (s = std::exp(s - max_score));
      float* o = out + (u / c.n_heads) * c.q_dim() + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (int32_t p = 0; p <= tok.pos; ++p) {
        add_scaled(o, float(scores[size_t(p)] / sum), v_at(layer, tok.seq, p) + kvh * hd, hd);
      }
    }
  });
}

Status CpuBackend::forward(std::span<const BatchChunk> chunks, ForwardOutput& out) {
  const ModelConfig& c = model_->config;
  const ModelWeights& w = model_->weights;
  VOLTAD_TRY(validate_chunks(chunks, c.n_vocab, pool_));

  std::vector<Token> tokens;
  std::vector<int64_t> logit_rows;  // indices into tokens whose logits are wanted
  for (const BatchChunk& chunk : chunks)
    for (size_t i = 0; i < chunk.tokens.size(); ++i) {
      bool want = chunk.logits == BatchChunk::Logits::All ||
                  (chunk.logits == BatchChunk::Logits::Last && i + 1 == chunk.tokens.size());
      if (want) logit_rows.push_back(int64_t(tokens.size()));
      tokens.push_back({chunk.tokens[i], chunk.start_pos + int32_t(i), chunk.seq_id});
    }
  const int64_t n = int64_t(tokens.size()), dim = c.dim;

  std::vector<float> x(size_t(n * dim)), xn(size_t(n * dim));
  std::vector<float> q(size_t(n * c.q_dim())), k(size_t(n * c.kv_dim())), v(size_t(n * c.kv_dim()));
  std::vector<float> attn(size_t(n * c.q_dim())), proj(size_t(n * dim));
  std::vector<float> gate(size_t(n * c.ffn_dim)), up(size_t(n * c.ffn_dim));

  for (int64_t t = 0; t < n; ++t) dequantize_rows(*w.token_embd, uint64_t(tokens[size_t(t)].id), 1, &x[size_t(t * dim)]);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    const LayerVectors& lv = layer_vectors_[size_t(l)];
    rms_norm(x.data(), lv.attn_norm, n, dim, xn.data());
    matmul(*lw.wq, xn.data(), n, q.data());
    matmul(*lw.wk, xn.data(), n, k.data());
    matmul(*lw.wv, xn.data(), n, v.data());
    for (int64_t t = 0; t < n; ++t) {
      float* qt = &q[size_t(t * c.q_dim())];
      float* kt = &k[size_t(t * c.kv_dim())];
      float* vt = &v[size_t(t * c.kv_dim())];
      if (c.qkv_bias) {
        for (int64_t i = 0; i < c.q_dim(); ++i) qt[i] += lv.bq[size_t(i)];
        for (int64_t i = 0; i < c.kv_dim(); ++i) kt[i] += lv.bk[size_t(i)], vt[i] += lv.bv[size_t(i)];
      }
      if (c.qk_norm) {
        rms_norm(qt, lv.q_norm, c.n_heads, c.head_dim, qt);
        rms_norm(kt, lv.k_norm, c.n_kv_heads, c.head_dim, kt);
      }
      const Token& tok = tokens[size_t(t)];
      rope(qt, c.n_heads, tok.pos);
      rope(kt, c.n_kv_heads, tok.pos);
      std::copy(kt, kt + c.kv_dim(), k_at(l, tok.seq, tok.pos));
      std::copy(vt, vt + c.kv_dim(), v_at(l, tok.seq, tok.pos));
    }
    attention(l, tokens, q.data(), attn.data());
    matmul(*lw.wo, attn.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];

    rms_norm(x.data(), lv.ffn_norm, n, dim, xn.data());
    matmul(*lw.w_gate, xn.data(), n, gate.data());
    matmul(*lw.w_up, xn.data(), n, up.data());
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
    matmul(*lw.w_down, gate.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }

  // Final norm and logits, only for the rows asked for.
  const int64_t n_out = int64_t(logit_rows.size());
  std::vector<float> selected(size_t(n_out * dim));
  for (int64_t r = 0; r < n_out; ++r)
    std::copy_n(&x[size_t(logit_rows[size_t(r)] * dim)], dim, &selected[size_t(r * dim)]);
  rms_norm(selected.data(), output_norm_, n_out, dim, selected.data());
  std::vector<float> logits(size_t(n_out * c.n_vocab));
  if (n_out > 0) matmul(*w.output, selected.data(), n_out, logits.data());
  set_output_rows(chunks, std::move(logits), c.n_vocab, out);
  return {};
}

}  // namespace voltad
