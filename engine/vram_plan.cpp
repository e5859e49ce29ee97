#include "engine/vram_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "engine/backend.h"
#include "engine/weight_repack.h"

#if VOLTAD_HAVE_CUDA
#include "kernels/attention.h"
#include "kernels/matvec.h"
static_assert(voltad::kActivationBlockValues == voltad::kernels::kActivationBlock);
static_assert(voltad::kAttentionMaxSplits == voltad::kernels::kAttentionMaxSplits);
static_assert(voltad::kAttentionMinSplitTokens == voltad::kernels::kAttentionMinSplitTokens);
static_assert(voltad::kAttentionPartialHeader == voltad::kernels::kAttentionPartialHeader);
#include "kernels/gemm_sm80.h"
static_assert(voltad::kNarrowSplitCount == voltad::kernels::kNarrowSplits);
static_assert(voltad::kNormPiecesMaxTokens == voltad::kernels::kNormPiecesMaxTokens);
static_assert(voltad::kSwigluFusedMaxTokens == voltad::kernels::kGemmNarrowMaxTokens);
#include "kernels/topk.h"
static_assert(voltad::kTopKChunkValues == voltad::kernels::kTopKChunk);
static_assert(voltad::kMaxCandidates == voltad::kernels::kTopKMax);
#endif

namespace voltad {
namespace {

uint64_t align256(uint64_t n) {
  return (n + 255) / 256 * 256;
}
uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

// Bytes a plan is over its budget (0 when it is not).
uint64_t over_budget(const VramPlan& p) {
  return p.planned_bytes > p.budget_bytes ? p.planned_bytes - p.budget_bytes : 0;
}

// Why a plan that does not fit does not: the bytes over its budget, or,
// where none are (memory.kv_cache_bytes fixes a pool that holds less than
// one sequence), its refusal.
std::string why_not(const VramPlan& p) {
  const uint64_t over = over_budget(p);
  return over > 0 ? format_bytes(over) + " over" : p.refusal;
}

uint64_t kv_blocks_per_sequence(const EngineLimits& l) {
  return ceil_div(uint64_t(l.max_context), uint64_t(kKvBlockTokens));
}

// The plan without ways out: what the ways out are computed from.
VramPlan plan_core(const ModelConfig& config, uint64_t weight_bytes, const EngineLimits& limits,
                   const MemoryLimits& memory, const DeviceMemory& device) {
  VramPlan p;
  p.model_name = config.name;
  p.limits = limits;
  p.memory = memory;
  p.device = device;
  p.budget_bytes = uint64_t(memory.vram_fraction * double(device.total_bytes));
  p.workspace = cuda_workspace_bytes(config, limits);
  const int64_t graphs = cuda_graph_count(limits.max_sequences);

  p.components = {
      {"other processes", device.used_by_others,
       device.context_measured ? "measured at start" : "assumed"},
      {"CUDA context + libraries", device.context_bytes,
       device.context_measured ? "measured at start" : "estimate (no GPU measured)"},
      {"weights (repacked)", weight_bytes, "exact, from the model file"},
      {"workspace", p.workspace.total(),
       std::to_string(limits.max_batch_tokens) + " batch tokens, " +
           std::to_string(limits.max_sequences) + " sequences"},
      {"CUDA graphs", uint64_t(graphs) * kGraphBytes,
       "estimate: " + std::to_string(graphs) + (graphs == 1 ? " decode graph x " : " decode graphs x ") +
           format_bytes(kGraphBytes)},
  };
  uint64_t fixed = 0;
  for (const PlanComponent& c : p.components) fixed += c.bytes;

  KvPoolPlan& kv = p.kv;
  kv.bytes_per_token = kv_bytes_per_token(config, limits.kv_cache_type);
  kv.block_bytes = kv.bytes_per_token * uint64_t(kKvBlockTokens);
  const uint64_t per_sequence = kv_blocks_per_sequence(limits);
  const uint64_t one_sequence = per_sequence * kv.block_bytes;
  const uint64_t available = p.budget_bytes > fixed ? p.budget_bytes - fixed : 0;
  const std::string kv_name =
      std::string("KV cache pool (") + kv_cache_type_name(limits.kv_cache_type) + ")";
  const std::string sequence_text =
      "one full-context sequence (" + std::to_string(limits.max_context) + " tokens)";

  uint64_t blocks = 0;
  if (memory.kv_cache_bytes != 0) {
    blocks = memory.kv_cache_bytes / kv.block_bytes;
    if (blocks < per_sequence) {
      p.refusal = "memory.kv_cache_bytes = " + format_bytes(memory.kv_cache_bytes) + " holds " +
                  std::to_string(blocks * kKvBlockTokens) + " tokens, less than " + sequence_text +
                  " needs (" + format_bytes(one_sequence) + ")";
    } else if (blocks * kv.block_bytes > available) {
      p.refusal = "memory.kv_cache_bytes = " + format_bytes(memory.kv_cache_bytes) +
                  " is more than the " + format_bytes(available) +
                  " the budget leaves for the KV cache";
    }
  } else if (available < one_sequence) {
    p.refusal = "the weights, context, workspace and graphs (" + format_bytes(fixed) + ") plus " +
                sequence_text + " of KV cache (" + format_bytes(one_sequence) + ") need " +
                format_bytes(fixed + one_sequence) + ", " +
                format_bytes(fixed + one_sequence - p.budget_bytes) + " more than the budget of " +
                format_bytes(p.budget_bytes);
  } else {
    const uint64_t cap = per_sequence * uint64_t(limits.max_sequences);
    blocks = std::min(available / kv.block_bytes, cap);
    kv.capped = available / kv.block_bytes > cap;
  }
  p.fits = p.refusal.empty();
  if (p.fits) {
    kv.blocks = int64_t(blocks);
    kv.tokens = kv.blocks * kKvBlockTokens;
    kv.full_sequences = int64_t(blocks / per_sequence);
    kv.bytes = blocks * kv.block_bytes;
    p.components.push_back({kv_name, kv.bytes,
                            memory.kv_cache_bytes ? "memory.kv_cache_bytes"
                            : kv.capped           ? "capped by max_context x max_sequences"
                                                  : "what the budget leaves"});
  } else {
    const uint64_t needed =
        memory.kv_cache_bytes && blocks >= per_sequence ? blocks * kv.block_bytes : one_sequence;
    p.components.push_back(
        {kv_name, needed,
         needed == one_sequence ? "needed: " + sequence_text : "memory.kv_cache_bytes"});
  }
  for (const PlanComponent& c : p.components) p.planned_bytes += c.bytes;
  return p;
}

// Largest value in [lo, hi] for which fits(v) holds, assuming fits is
// monotone (true up to some point); lo - 1 when none does.
template <class Fits>
int64_t largest_fitting(int64_t lo, int64_t hi, Fits fits) {
  if (hi < lo || !fits(lo)) return lo - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

std::string pool_text(const KvPoolPlan& kv) {
  return std::to_string(kv.blocks) + " blocks = " + std::to_string(kv.tokens) + " tokens, " +
         std::to_string(kv.full_sequences) + " full-context sequence" +
         (kv.full_sequences == 1 ? "" : "s");
}

void add_ways_out(VramPlan& p, const ModelConfig& config, uint64_t weight_bytes) {
  const EngineLimits& limits = p.limits;
  const MemoryLimits& memory = p.memory;
  auto fits_with = [&](const EngineLimits& l, const MemoryLimits& m, const DeviceMemory& d) {
    return plan_core(config, weight_bytes, l, m, d);
  };
  const uint64_t over = over_budget(p);
  std::vector<std::string>& out = p.ways_out;

  const uint64_t one_sequence = kv_blocks_per_sequence(limits) * p.kv.block_bytes;
  if (memory.kv_cache_bytes != 0 && memory.kv_cache_bytes < one_sequence)
    out.push_back("a KV cache that holds one full-context sequence: memory.kv_cache_bytes: " +
                  std::to_string(one_sequence) + " (" + format_bytes(one_sequence) + ") or more");
  if (memory.kv_cache_bytes != 0) {
    MemoryLimits automatic = memory;
    automatic.kv_cache_bytes = 0;
    const VramPlan a = fits_with(limits, automatic, p.device);
    out.push_back(
        "let the budget size the KV cache: memory.kv_cache_bytes: 0" +
        (a.fits ? " fits (" + pool_text(a.kv) + ")" : std::string(" does not fit either")));
  }

  // Shorter context, in whole blocks.
  const int64_t max_blocks = (limits.max_context - 1) / kKvBlockTokens;
  const int64_t blocks = largest_fitting(1, max_blocks, [&](int64_t b) {
    EngineLimits l = limits;
    l.max_context = b * kKvBlockTokens;
    return fits_with(l, memory, p.device).fits;
  });
  if (blocks >= 1)
    out.push_back(
        "shorter context: engine.max_context: " + std::to_string(blocks * kKvBlockTokens) +
        " fits (now " + std::to_string(limits.max_context) + ")");
  else if (memory.kv_cache_bytes != 0) {
    EngineLimits l = limits;
    l.max_context = kKvBlockTokens;
    out.push_back("shorter context: no context length fits; even engine.max_context: " +
                  std::to_string(kKvBlockTokens) + " is refused (" +
                  why_not(fits_with(l, memory, p.device)) + ")");
  } else
    out.push_back(
        "shorter context: no context length fits; the weights, context and workspace alone are too "
        "large");

  if (limits.kv_cache_type == KvCacheType::Fp16) {
    EngineLimits l = limits;
    l.kv_cache_type = KvCacheType::Int8;
    const VramPlan q = fits_with(l, memory, p.device);
    out.push_back(
        "INT8 KV cache (half the bytes per token): engine.kv_cache_type: int8 " +
        (q.fits ? "fits (" + pool_text(q.kv) + ")" : "is not enough alone (" + why_not(q) + ")"));
  }

  if (limits.max_sequences > 1) {
    const int64_t n = largest_fitting(1, limits.max_sequences - 1, [&](int64_t s) {
      EngineLimits l = limits;
      l.max_sequences = s;
      return fits_with(l, memory, p.device).fits;
    });
    if (n >= 1) {
      out.push_back("fewer sequences: engine.max_sequences: " + std::to_string(n) + " fits (now " +
                    std::to_string(limits.max_sequences) + ")");
    } else {
      EngineLimits l = limits;
      l.max_sequences = 1;
      const VramPlan one = fits_with(l, memory, p.device);
      out.push_back(
          "fewer sequences is not enough alone: even engine.max_sequences: 1 does not "
          "fit (" +
          why_not(one) + ")");
    }
  }

  if (limits.max_batch_tokens > 16) {
    const int64_t steps = largest_fitting(1, (limits.max_batch_tokens - 1) / 16, [&](int64_t n) {
      EngineLimits l = limits;
      l.max_batch_tokens = n * 16;
      return fits_with(l, memory, p.device).fits;
    });
    if (steps >= 1)
      out.push_back("a smaller workspace: engine.max_batch_tokens: " + std::to_string(steps * 16) +
                    " fits (now " + std::to_string(limits.max_batch_tokens) +
                    "; prefill takes more steps)");
  }

  if (over > 0) {
    if (over < weight_bytes)
      out.push_back("a smaller quantization: the weights (" + format_bytes(weight_bytes) +
                    ") must shrink by at least " + format_bytes(over) + ", to " +
                    format_bytes(weight_bytes - over) + " or less");
    else
      out.push_back("a smaller quantization cannot help: the plan is " + format_bytes(over) +
                    " over even without weights");
    if (p.device.used_by_others >= over)
      out.push_back("other processes use " + format_bytes(p.device.used_by_others) +
                    " of the card; it fits if they free " + format_bytes(over));
    const double fraction =
        std::ceil(double(p.planned_bytes) / double(p.device.total_bytes) * 100.0) / 100.0;
    if (fraction <= 0.98 && fraction > memory.vram_fraction)
      out.push_back(
          "a larger budget: memory.vram_fraction: " + std::to_string(fraction).substr(0, 4) +
          " fits (now " + std::to_string(memory.vram_fraction).substr(0, 4) +
          "; leaves less room for others)");
  }
}

}  // namespace

const char* kv_cache_type_name(KvCacheType type) {
  return type == KvCacheType::Int8 ? "int8" : "fp16";
}

uint64_t CudaWorkspace::total() const {
  return residual + normed + qkv + attention_out + ffn_gate_up + quantized_x + quantized_x_scales +
         selected + logits + candidates + topk_scratch + step_indices + attention_partials +
         attention_arrivals + gemm_split + norm_pieces + swiglu_fused;
}

// {d1, d2, sum_x, 0} per block of activations (kernels/matvec.h; checked
// against it below when CUDA is built).
constexpr int kActivationRecordFloats = 4;
#if VOLTAD_HAVE_CUDA
static_assert(kActivationRecordFloats == kernels::kActivationRecordFloats);
#endif

int64_t topk_chunks(int64_t n_vocab) {
  return int64_t(ceil_div(uint64_t(n_vocab), uint64_t(kTopKChunkValues)));
}

bool gpu_topk_fits(int64_t n_vocab) {
  return n_vocab >= kMaxCandidates && topk_chunks(n_vocab) * kMaxCandidates <= kTopKMaxPairs;
}

CudaWorkspace cuda_workspace_bytes(const ModelConfig& m, const EngineLimits& l) {
  const uint64_t t = uint64_t(l.max_batch_tokens), s = uint64_t(l.max_sequences);
  // The widest input of any quantized matvec: dim (wq/wk/wv, w_gate/w_up,
  // output), q_dim (wo; wider than dim in e.g. Qwen3-32B), ffn_dim (w_down).
  const uint64_t widest = uint64_t(std::max({m.dim, m.q_dim(), m.ffn_dim}));
  CudaWorkspace w{};
  w.residual = align256(t * uint64_t(m.dim) * 4);
  w.normed = align256(t * uint64_t(m.dim) * 4);
  w.qkv = align256(t * uint64_t(m.q_dim() + 2 * m.kv_dim()) * 4);
  w.attention_out = align256(t * uint64_t(m.q_dim()) * 4);
  w.ffn_gate_up = align256(t * 2 * uint64_t(m.ffn_dim) * 4);
  // Two int8 levels per value, a {d1, d2, sum_x, 0} record per 32 (kernels/matvec.h).
  // The same bytes are the sm_80 narrow GEMM's scratch: its steps of n tokens
  // take n rounded up to 8 rows of fp16 x plus a 4-byte x sum per 32 values
  // (gemm_narrow_sm80_scratch_bytes, kernels/gemm_sm80.h); hence the rows
  // rounded up to 8 and the sums.
  w.quantized_x = align256(ceil_div(t, 8) * 8 * (widest * 2 + ceil_div(widest, 32) * 4));
  w.quantized_x_scales = align256(t * ceil_div(widest, kActivationBlockValues) *
                                  uint64_t(kActivationRecordFloats) * 4);
  w.selected = align256(s * uint64_t(m.dim) * 4);
  w.logits = align256(s * uint64_t(m.n_vocab) * 4);
  // Per sequence: its candidates, its log_z and its noise (kernels/gumbel.h's
  // RowNoise, 24 bytes).
  w.candidates = align256(s * (uint64_t(kMaxCandidates) * 8 + 8 + 24));
  w.topk_scratch = gpu_topk_fits(m.n_vocab) && topk_chunks(m.n_vocab) > 1
                       ? align256(s * uint64_t(topk_chunks(m.n_vocab)) * uint64_t(kMaxCandidates) * 8)
                       : 0;
  w.step_indices = align256((5 * t + s * kv_blocks_per_sequence(l)) * 4);
  const uint64_t splits =
      std::min<uint64_t>(uint64_t(kAttentionMaxSplits), ceil_div(uint64_t(l.max_context), kAttentionMinSplitTokens));
  w.attention_partials = align256(s * uint64_t(m.n_heads) * splits * uint64_t(kAttentionPartialHeader + m.head_dim) * 4);
  w.attention_arrivals = align256(s * uint64_t(m.n_kv_heads) * 4);
  const uint64_t row_blocks = ceil_div(uint64_t(m.dim), kNarrowSplitRows);
  const uint64_t block_sums = kNarrowSplitCount * kNarrowSplitTokens * kNarrowSplitRows * 4;
  w.gemm_split = align256(row_blocks * 4) + align256(row_blocks * block_sums);
  const uint64_t pieces_n8 = std::min<uint64_t>(ceil_div(t, 8) * 8, kNormPiecesMaxTokens);
  const uint64_t dim_chunks = ceil_div(uint64_t(m.dim), 32);
  w.norm_pieces = align256(pieces_n8 * (uint64_t(m.dim) * 2 + dim_chunks * 4)) +
                  align256((dim_chunks + 1) * pieces_n8 * 4 + 4);
  const uint64_t swiglu_n8 = std::min<uint64_t>(ceil_div(t, 8) * 8, kSwigluFusedMaxTokens);
  const uint64_t ffn_chunks = ceil_div(uint64_t(m.ffn_dim), 32);
  w.swiglu_fused = align256(swiglu_n8 * (uint64_t(m.ffn_dim) * 2 + ffn_chunks * 4));
  return w;
}

uint64_t kv_bytes_per_token(const ModelConfig& m, KvCacheType type) {
  const uint64_t per_layer = type == KvCacheType::Int8
                                 ? uint64_t(m.kv_dim()) + 2 * uint64_t(m.n_kv_heads)
                                 : 2 * uint64_t(m.kv_dim());
  return 2 * uint64_t(m.n_layers) * per_layer;
}

int64_t cuda_graph_count(int64_t max_sequences) {
  return std::max<int64_t>(1, max_sequences);  // batch sizes 1..max_sequences
}

Result<uint64_t> repacked_weight_bytes(const ModelWeights& w, const ModelConfig& config) {
  uint64_t total = 0;
  std::set<const GgufTensor*> seen;
  auto add = [&](const GgufTensor* t) -> Status {
    if (t == nullptr || !seen.insert(t).second) return {};
    const bool vector = t->n_dims == 1;
    auto layout = vector ? packed_layout_for(GgmlType::F32, 1, int64_t(t->ne[0]))
                         : packed_layout_for(t->type, int64_t(t->n_rows()), int64_t(t->ne[0]));
    if (!layout)
      return Error{"tensor '" + t->name + "': " + layout.error().message,
                   layout.error().model_data};
    total += layout->total_bytes;
    return {};
  };
  for (const GgufTensor* t : {w.token_embd, w.output_norm, w.output}) VOLTAD_TRY(add(t));
  auto inverse_frequencies = packed_layout_for(GgmlType::F32, 1, std::max<int64_t>(config.head_dim / 2, 1));
  if (!inverse_frequencies) return inverse_frequencies.error();
  total += inverse_frequencies->total_bytes;
  // Projections as the backend stacks them: one matrix, and one bias
  // vector, per stack (engine/weight_repack.h).
  auto add_stacks = [&](std::initializer_list<Projection> projections) -> Status {
    for (const auto& stack : projection_stacks(projections)) {
      std::vector<GgufMatrix> parts;
      int64_t rows = 0;
      for (const Projection& p : stack) {
        parts.push_back(gguf_matrix(*p.weight));
        rows += parts.back().rows;
      }
      auto layout = stacked_layout_for(parts);
      if (!layout)
        return Error{"tensor '" + stack[0].weight->name + "': " + layout.error().message,
                     layout.error().model_data};
      total += layout->total_bytes;
      if (stack[0].bias)
        total += kernels::make_packed_layout(kernels::PackedFormat::F32, 1, rows).total_bytes;
    }
    return {};
  };
  for (const LayerWeights& l : w.layers) {
    for (const GgufTensor* t : {l.attn_norm, l.wo, l.q_norm, l.k_norm, l.ffn_norm, l.w_down})
      VOLTAD_TRY(add(t));
    VOLTAD_TRY(add_stacks({{l.wq, l.bq}, {l.wk, l.bk}, {l.wv, l.bv}}));
    VOLTAD_TRY(add_stacks({{l.w_gate, nullptr}, {l.w_up, nullptr}}));
  }
  return total;
}

VramPlan plan_vram(const ModelConfig& config, uint64_t weight_bytes, const EngineLimits& limits,
                   const MemoryLimits& memory, const DeviceMemory& device) {
  VramPlan p = plan_core(config, weight_bytes, limits, memory, device);
  if (!p.fits) add_ways_out(p, config, weight_bytes);
  return p;
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1ull << 20));
  else if (bytes >= (1ull << 10))
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(bytes) / double(1ull << 10));
  else
    std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

std::string vram_plan_text(const VramPlan& p) {
  std::string out;
  char line[256];
  const double card = double(std::max<uint64_t>(p.device.total_bytes, 1));
  auto row = [&](const std::string& name, uint64_t bytes, const std::string& note) {
    std::snprintf(line, sizeof line, "  %-28s %16llu %11s %6.1f%%", name.c_str(),
                  (unsigned long long)bytes, format_bytes(bytes).c_str(),
                  100.0 * double(bytes) / card);
    out += line + (note.empty() ? "" : "  " + note) + "\n";
  };
  out += "VRAM plan for " +
         (p.model_name.empty() ? std::string("the model") : "'" + p.model_name + "'") + " on " +
         p.device.name + " (" + format_bytes(p.device.total_bytes) + ")\n";
  out += "  engine: max_context " + std::to_string(p.limits.max_context) + ", max_sequences " +
         std::to_string(p.limits.max_sequences) + ", max_batch_tokens " +
         std::to_string(p.limits.max_batch_tokens) + ", kv_cache_type " +
         kv_cache_type_name(p.limits.kv_cache_type) + "\n\n";
  std::snprintf(line, sizeof line, "  %-28s %16s %11s %7s\n", "component", "bytes", "", "of card");
  out += line;
  for (const PlanComponent& c : p.components) row(c.name, c.bytes, c.note);
  row("total", p.planned_bytes, "");
  char budget_name[64];
  std::snprintf(budget_name, sizeof budget_name, "budget (%.0f%% of card)",
                p.memory.vram_fraction * 100);
  row(budget_name, p.budget_bytes, "memory.vram_fraction");
  if (p.fits) row("left within the budget", p.budget_bytes - p.planned_bytes, "");
  out += "\n";
  const KvPoolPlan& kv = p.kv;
  out += "KV cache: " + format_bytes(kv.bytes_per_token) + " per token (" +
         kv_cache_type_name(p.limits.kv_cache_type) + "), blocks of " +
         std::to_string(kKvBlockTokens) + " tokens = " + format_bytes(kv.block_bytes) + "\n";
  if (p.fits) {
    out += "  pool: " + pool_text(kv) + " of " + std::to_string(p.limits.max_context) + " tokens\n";
    out += "Fits: yes.\n";
    return out;
  }
  out += "Does not fit: " + p.refusal + ".\nWays out:\n";
  for (const std::string& w : p.ways_out) out += "  - " + w + "\n";
  return out;
}

}  // namespace voltad
