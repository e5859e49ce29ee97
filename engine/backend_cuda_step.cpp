// The kernels of one step of the CUDA backend, on its stream: what a decode
// graph captures (enqueue_step), and the attention between the projections.
// State in engine/backend_cuda_impl.h.
#include <cstdlib>
#include <string>

#include "engine/backend_cuda_impl.h"

namespace voltad {

bool CudaBackend::Impl::attention(const Layer& layer, int first, int n_tokens, int max_position, AttnOut out,
                                  bool own_position_only, bool rope) {
  const ModelConfig& c = model->config;
  const bool fused = out.kind != AttnOut::Plain && c.head_dim % kernels::kActivationBlock == 0;
  const int T = options.max_batch_tokens;
  const int32_t* positions = d_ints + T + first;
  const int32_t* token_tables = d_ints + 3 * T + first;
  // Tokens go in groups small enough for the split-K scratch. A run longer
  // than the scratch holds at full split (a prompt chunk over the INT8
  // cache, which has no tensor-core prefill attention) takes fewer pieces
  // per token instead of more launches: its many tokens fill the GPU anyway.
  const size_t per_piece = size_t(c.n_heads) * size_t(kernels::kAttentionPartialHeader + c.head_dim);
  const int full_splits = kernels::attention_splits(max_position);
  const int splits = int(std::clamp<size_t>(partial_floats / (size_t(n_tokens) * per_piece), 1, size_t(full_splits)));
  const int group = int(std::max<size_t>(1, partial_floats / (size_t(splits) * per_piece)));
  for (int t0 = 0; t0 < n_tokens; t0 += group) {
    kernels::AttentionArgs a;
    const int64_t row = first + t0;  // xq rows follow the step's token rows
    a.n_tokens = std::min(group, n_tokens - t0);
    a.q = q + row * ld_qkv();
    a.ldq = ld_qkv();
    a.out = attn + row * c.q_dim();
    a.ldo = c.q_dim();
    a.cache = layer.kv;
    a.positions = positions + t0;
    a.token_tables = token_tables + t0;
    a.block_tables = d_ints + 5 * options.max_batch_tokens;
    a.table_stride = table_stride;
    a.n_heads = int(c.n_heads);
    a.n_kv_heads = int(c.n_kv_heads);
    a.head_dim = int(c.head_dim);
    a.max_position = max_position;
    a.max_splits = attention_max_splits > 0 ? std::min(splits, attention_max_splits) : splits;
    a.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    a.partials = partials;
    a.own_position_only = own_position_only;
    a.tensor_cores = attention_mma;
    // Measured at 1-32 sequences (runs 46-47: +1.1% to +4.5% on the H200);
    // launches of more tokens keep the portable pass 1 until measured.
    a.wmma = attention_wmma && a.n_tokens <= attention_wmma_max_tokens;
    if (rope) {
      a.rope.inv_freq = inv_freq;
      a.rope.neox = c.rope_style == RopeStyle::Neox;
      a.rope.k = k + row * ld_qkv();
      a.rope.v = v + row * ld_qkv();
      a.rope.ldkv = ld_qkv();
      a.rope.slots = d_ints + 2 * T + row;
      a.rope.q_norm = c.qk_norm ? layer.q_norm : nullptr;
      a.rope.k_norm = c.qk_norm ? layer.k_norm : nullptr;
      a.rope.eps = c.rms_eps;
    }
    // The combine in pass 1's last block (kernels/attention.h) from 8
    // tokens a launch: measured on the H200 (docs/PERFORMANCE-RUNS-13-17.md, run 14),
    // b8 and b32 +1%, but batch 1 -5%: there one block per KV head does the
    // work of 4 combine blocks at the end of the attention. The counters
    // hold S tokens; longer runs of prompt tokens take the two launches.
    a.arrivals = a.n_tokens >= combine_min_tokens && a.n_tokens <= options.max_sequences
                     ? arrivals
                     : nullptr;
    if (fused && out.kind == AttnOut::Quantized) {
      a.out_q.q = xq.q + row * kernels::quantized_activation_q_row(c.q_dim());
      a.out_q.scales = xq.scales + row * kernels::quantized_activation_scale_row(c.q_dim());
    } else if (fused) {
      a.narrow_x = static_cast<uint32_t*>(gemm_scratch.data);
      a.narrow_n8 = (out.step_tokens + 7) / 8 * 8;
      a.narrow_row0 = int(row);
    }
    if (options.kv_int8) kernels::launch_attention_int8(a, layer.kv8, stream);
    else kernels::launch_attention(a, stream);
  }
  return fused;
}

void CudaBackend::Impl::enqueue_step(int n, int n_out, int max_position, const std::vector<Span>* spans) {
  const ModelConfig& c = model->config;
  cudaStream_t st = stream;
  const int T = options.max_batch_tokens;
  const int32_t* d_tokens = d_ints;
  const int32_t* d_positions = d_tokens + T;
  const int32_t* d_slots = d_positions + T;
  const int32_t* d_token_tables = d_slots + T;
  const int32_t* d_logit_rows = d_token_tables + T;
  const int dim = int(c.dim), ffn = int(c.ffn_dim), qd = int(c.q_dim());
  const int64_t ldqkv = ld_qkv(), ldgu = ld_gate_up();
  // Below gemm_min_tokens (4; 2 with the sm_80 narrow GEMM): the dp4a
  // matvecs. From there (prefill, batches): the tensor-core GEMMs, which
  // take fp32 activations directly, so nothing is quantized for them.
  // The x the GEMM scratch holds in the narrow GEMMs' fp16 layout (written
  // by RMSNorm, SwiGLU or the attention combine; see below), else null.
  const float* scratch_holds = nullptr;
  // Whether xn is, for now, the norm's pieces (norm_pieces: made by wo or
  // w_down, product_with_norm below) rather than written.
  bool pieces_hold = false;
  auto pieces_scratch = [&] {
    kernels::GemmScratch s{norm_pieces.x, norm_pieces.x_bytes};
    s.holds_x = xn;
    return s;
  };
  auto gemm_args = [&](const kernels::PackedMatrixView& w, const float* xin, int64_t ldx, int rows, float* y,
                       int64_t ldy, const float* bias, bool accumulate) {
    kernels::GemmArgs g;
    g.w = w;
    g.x = xin;
    g.ldx = ldx;
    g.n = rows;
    g.y = y;
    g.ldy = ldy;
    g.bias = bias;
    g.accumulate = accumulate;
    return g;
  };
  // The quantized x the matvecs read: xq, or xq_norm where o or down made
  // the norm (below).
  kernels::QuantizedActivations x_in = xq;
  auto matvec_args = [&](const kernels::PackedMatrixView& w, const float* xin, int64_t ldx,
                         int rows, float* y, int64_t ldy, const float* bias, bool accumulate) {
    kernels::MatvecArgs a;
    a.w = w;
    a.batch = rows;
    a.x = xin;
    a.ldx = ldx;
    a.xq = x_in;
    a.y = y;
    a.ldy = ldy;
    a.bias = bias;
    a.accumulate = accumulate;
    return a;
  };
  // Whether w_down's fp16 x is, for now, made by gate|up's blocks
  // (swiglu_fused; below) rather than by SwiGLU's launch.
  bool swiglu_hold = false;
  // A GEMM's arguments and the scratch that holds its x.
  struct GemmCall {
    kernels::GemmArgs args;
    kernels::GemmScratch scratch;
  };
  auto gemm_call = [&](cudaStream_t on, const kernels::PackedMatrixView& w, const float* xin,
                       int64_t ldx, int rows, float* y, int64_t ldy, const float* bias,
                       bool accumulate) {
    GemmCall call{gemm_args(w, xin, ldx, rows, y, ldy, bias, accumulate), gemm_scratch};
    call.scratch.holds_x = scratch_holds;
    if (on != st) call.scratch.split = nullptr;  // the split memory serves one stream
    if (pieces_hold && xin == xn) {              // a reader of the norm's pieces
      call.scratch = pieces_scratch();
      call.args.norm_scale = norm_pieces.scale;
    }
    if (swiglu_hold && xin == gate) {
      call.scratch.data = swiglu_fused.x;
      call.scratch.bytes = swiglu_fused.x_bytes;
      call.scratch.holds_x = gate;
    }
    return call;
  };
  auto matvec_on = [&](cudaStream_t on, const kernels::PackedMatrixView& w, const float* xin,
                       int64_t ldx, int rows, float* y, int64_t ldy, const float* bias,
                       bool accumulate) {
    if (rows >= gemm_min_tokens) {
      const GemmCall call = gemm_call(on, w, xin, ldx, rows, y, ldy, bias, accumulate);
      return kernels::launch_gemm_for(options.kernels, call.args, call.scratch, on);
    }
    kernels::launch_matvec(matvec_args(w, xin, ldx, rows, y, ldy, bias, accumulate), on);
  };
  const CudaBackendOptions::Omit& omit = options.omit;  // timing only
  // `skip`: the kind is omitted (timing only).
  auto matvec = [&](bool skip, const kernels::PackedMatrixView& w, const float* xin, int64_t ldx, int rows,
                    float* y, int64_t ldy, const float* bias, bool accumulate) {
    if (skip) return;
    matvec_on(st, w, xin, ldx, rows, y, ldy, bias, accumulate);
  };

  // Below the GEMM's threshold the matvecs read int8 activations: the
  // kernels that make their inputs (RMSNorm, SwiGLU, the attention combine)
  // quantize them on the way out, saving a launch each.
  const bool quantized = n < gemm_min_tokens;
  // Where every matrix that reads the norm's output runs a narrow GEMM that
  // reads fp16 x (batched decode: the sm_80 one with `auto`, the portable
  // one where it takes the shape), RMSNorm also writes that x into the
  // scratch: the sm_80 GEMMs skip their conversion launch, the portable
  // ones half of x's loads and all of its conversions.
  auto narrow_readers = [&](const std::vector<ProjectionStack>& readers) {
    if (quantized) return false;
    for (const ProjectionStack& p : readers)
      if (!kernels::gemm_for_reads_narrow_x(
              options.kernels, gemm_args(p.w, xn, dim, n, q, ldqkv, nullptr, false), gemm_scratch))
        return false;
    return !readers.empty();
  };
  auto norm = [&](const float* weight, const std::vector<ProjectionStack>& readers) {
    scratch_holds = nullptr;
    pieces_hold = false;
    if (omit.norms) return;
    if (quantized) kernels::launch_rmsnorm_quantize(x, dim, weight, xn, dim, n, dim, c.rms_eps, xq, st);
    else if (!narrow_readers(readers)) kernels::launch_rmsnorm(x, dim, weight, xn, dim, n, dim, c.rms_eps, st);
    // False only for n == 0 (nothing launched).
    else if (kernels::launch_rmsnorm_narrow_x(x, dim, weight, xn, dim, n, dim, c.rms_eps, gemm_scratch.data, st))
      scratch_holds = xn;
  };

  // At one token, o and down make the next RMSNorm's input as they write
  // the residual row, each block for its own 32 rows
  // (kernels::launch_matvec_norm_units): the readers take g * h and its
  // sums of squares (xq_norm) and scale their sums by 1 / rms themselves,
  // and the norm's launch is left out. Only where every matrix that reads
  // it takes quantized x (not F16 / F32 weights, which read xn), and for
  // the products of the rule in product_with_norm.
  const bool units = quantized && n == 1 && xq_norm.q != nullptr && !omit.norms && norm_units != 0;
  auto unscaled_readers = [&](const std::vector<ProjectionStack>& readers) {
    for (const ProjectionStack& p : readers)
      if (p.w.layout.format == kernels::PackedFormat::F16 ||
          p.w.layout.format == kernels::PackedFormat::F32)
        return false;
    return units && !readers.empty();
  };
  // From gemm_min_tokens to norm_pieces_max (8), the same under `portable`
  // (and wherever every product involved runs the portable narrow GEMM):
  // o and down write the next norm's pieces in the epilogue
  // (kernels::NormPieces: g * h in the narrow GEMMs' fp16 x, each 32 rows'
  // sums of squares and, from their last block, each token's scale), and
  // its readers scale their outputs by 1 / rms; the norm's launch is left
  // out (runs 63-64: even to +0.6% at batch 4-8, lost from 12).
  const bool pieces = !quantized && n <= norm_pieces_max && !omit.norms && norm_pieces_on &&
                      norm_pieces.x != nullptr;
  auto pieces_args = [&](const kernels::PackedMatrixView& w, const float* xin, int64_t ldx,
                         const float* weight) {
    kernels::GemmArgs g = gemm_args(w, xin, ldx, n, x, dim, nullptr, true);
    g.norm_out = {
        weight,   norm_pieces.x, norm_pieces.sumsq, norm_pieces.scale, norm_pieces.arrivals,
        c.rms_eps};
    return g;
  };
  auto readers_take_pieces = [&](const std::vector<ProjectionStack>& readers) {
    for (const ProjectionStack& p : readers) {
      kernels::GemmArgs g = gemm_args(p.w, xn, dim, n, q, ldqkv, nullptr, false);
      g.norm_scale = norm_pieces.scale;
      if (!kernels::gemm_for_takes_norm_pieces(options.kernels, g, pieces_scratch())) return false;
    }
    return !readers.empty();
  };
  // VOLTAD_NORM_UNITS_AT=ffn|attn: only that norm (comparisons).
  static const std::string units_at = [] {
    const char* v = std::getenv("VOLTAD_NORM_UNITS_AT");
    return std::string(v ? v : "");
  }();
  // The product that writes h, making `weight`'s norm for `readers` where it
  // can; false: it ran as a plain matvec (or was omitted), and the norm is
  // still to launch.
  auto product_with_norm = [&](bool skip, const kernels::PackedMatrixView& w, const float* xin,
                               int64_t ldx, const float* weight,
                               const std::vector<ProjectionStack>* readers, const char* which) {
    // The rule: Q4_K products (auto b1 +1.0-1.1%, portable +2.0-2.3%),
    // Q4_0 under plain launches (portable +3.4%; auto -0.4%, where its
    // plain kernel is the dp4a one); docs/PERFORMANCE-RUNS-38-39.md run 38.
    const bool rule = w.layout.format == kernels::PackedFormat::Int4K256 ||
                      (w.layout.format == kernels::PackedFormat::Int4Sym32 && !programmatic);
    const bool at = units_at.empty() || units_at == which;
    if (!skip && pieces && weight && readers && readers_take_pieces(*readers)) {
      const kernels::GemmScratch scratch =
          gemm_call(st, w, xin, ldx, n, x, dim, nullptr, true).scratch;
      const kernels::GemmArgs g = pieces_args(w, xin, ldx, weight);
      if (kernels::gemm_for_takes_norm_pieces(options.kernels, g, scratch)) {
        kernels::launch_gemm_for(options.kernels, g, scratch, st);
        pieces_hold = true;
        return true;
      }
    }
    if (!skip && at && (rule || norm_units == 1) && readers && unscaled_readers(*readers) &&
        kernels::launch_matvec_norm_units(matvec_args(w, xin, ldx, n, x, dim, nullptr, true),
                                          weight, xq_norm, st))
      return true;
    matvec(skip, w, xin, ldx, n, x, dim, nullptr, true);  // residual add fused
    return false;
  };

  // A decode graph's step (every token its sequence's only one) runs the
  // head norms, RoPE and the KV write inside the attention: one to three
  // launches a layer fewer.
  const bool rope_in = rope_in_attention && !spans && !omit.attention && !omit.rope;
  // The side stream for separate q|k|v stacks (see the layer loop).
  const bool side_qkv = qkv_side >= 0 ? qkv_side == 1 : !programmatic;

  kernels::launch_embedding_gather(token_embd, d_tokens, n, x, dim, st);
  const auto ordering = c.rope_style == RopeStyle::Neox ? kernels::RopeOrdering::NeoX : kernels::RopeOrdering::Normal;
  bool attn_norm_made = false;  // by the previous layer's down
  for (size_t li = 0; li < layers.size(); ++li) {
    const Impl::Layer& l = layers[li];
    if (attn_norm_made) {
      scratch_holds = nullptr;
      x_in = xq_norm;
    } else {
      norm(l.attn_norm, l.qkv);
    }
    // q, k and v of a token side by side in one row of ldqkv. Where they are
    // separate stacks (a Q6_K attn_v beside Q4_K q|k) and launches are
    // plain, the later ones run on a second stream beside the first: alone,
    // v's few blocks leave most SMs idle (portable b8 +3.4-3.8%, b1
    // +1.4-2.2%). Under programmatic launch no step forks (auto b1
    // +0.5-1.7%, b8 +0.2-1.1% against the fork, b16 and b32 -0.6 to -0.9%):
    // the join is an ordinary graph edge, so the attention cannot start
    // before v has completed. Not per batch size: with the fork kept in the
    // graphs of 9-32 tokens only, batch 1 and 8 ran as slowly as with it
    // everywhere (docs/PERFORMANCE-RUNS-31-33.md run 33). The side stream only where
    // neither reader writes what both read (the dp4a matvecs read xq; the
    // narrow GEMM the x the norm wrote).
    //
    // Without the side stream (the rule under programmatic launch, or
    // VOLTAD_QKV_SIDE=0), a Q4_K q|k and a Q6_K v run as one launch where
    // one kernel takes both: at one token the streaming matvecs
    // (kernels::launch_matvec_pair; auto b1 +1.0-1.2%), at 2-8 tokens the
    // sm_80 narrow GEMMs (kernels::launch_gemm_narrow_sm80_pair; b8
    // +1.1-1.8%). Beside the side stream of plain launches (portable) the
    // batch-1 pair was 0.2% slower, so those keep it (docs/PERFORMANCE-RUNS-34-37.md
    // run 34).
    kernels::GemmScratch qkv_scratch = gemm_scratch;
    qkv_scratch.holds_x = scratch_holds;
    auto stack_gemm = [&](const ProjectionStack& p) {
      return gemm_args(p.w, xn, dim, n, q + p.column, ldqkv, p.bias, false);
    };
    // Both stacks on the narrow GEMM (1-32 tokens under auto).
    auto both_narrow = [&] {
      return l.qkv.size() == 2 &&
             kernels::gemm_for_takes_narrow_sm80(options.kernels, stack_gemm(l.qkv[0]),
                                                 qkv_scratch) &&
             kernels::gemm_for_takes_narrow_sm80(options.kernels, stack_gemm(l.qkv[1]),
                                                 qkv_scratch);
    };
    bool paired = false;
    if (!omit.qkv && l.qkv.size() == 2 && !side_qkv) {
      if (quantized && n == 1) {
        auto args = [&](const ProjectionStack& p) {
          return matvec_args(p.w, xn, dim, n, q + p.column, ldqkv, p.bias, false);
        };
        paired = kernels::launch_matvec_pair(args(l.qkv[0]), args(l.qkv[1]), st);
      } else if (!quantized && n <= 8 && both_narrow()) {
        paired = kernels::launch_gemm_narrow_sm80_pair(stack_gemm(l.qkv[0]), stack_gemm(l.qkv[1]),
                                                       qkv_scratch, st);
      }
    }
    if (omit.qkv || paired) {
      // launched, or omitted (timing only)
    } else if (l.qkv.size() > 1 && side_qkv && (quantized || scratch_holds == xn || pieces_hold)) {
      CUDA_CHECK(cudaEventRecord(fork_event, st));
      CUDA_CHECK(cudaStreamWaitEvent(side, fork_event, 0));
      for (size_t i = 1; i < l.qkv.size(); ++i) {
        const ProjectionStack& p = l.qkv[i];
        matvec_on(side, p.w, xn, dim, n, q + p.column, ldqkv, p.bias, false);
      }
      matvec(false, l.qkv[0].w, xn, dim, n, q + l.qkv[0].column, ldqkv, l.qkv[0].bias, false);
      CUDA_CHECK(cudaEventRecord(join_event, side));
      CUDA_CHECK(cudaStreamWaitEvent(st, join_event, 0));
    } else {
      // Where both are narrow GEMMs of 9-32 tokens under programmatic
      // launch, v goes first, and q|k's blocks, released at v's wait, load
      // their first weights while it runs: b16 +0.5% and +1.2%, b32 +0.5%
      // and +0.8% (Llama-3-8B, Qwen3-8B Q4_K_M); b8 (before its pair) -0.6%
      // and -0.3% (docs/PERFORMANCE-RUNS-34-37.md run 34). Prefill's GEMMs keep the
      // order: they release nothing early.
      const bool reverse =
          qkv_reverse >= 0 ? qkv_reverse == 1 : programmatic && n > 8 && both_narrow();
      for (size_t i = 0; i < l.qkv.size(); ++i) {
        const ProjectionStack& p = l.qkv[reverse ? l.qkv.size() - 1 - i : i];
        matvec(false, p.w, xn, dim, n, q + p.column, ldqkv, p.bias, false);
      }
    }
    x_in = xq;
    pieces_hold = false;
    if (c.qk_norm && !rope_in) {
      kernels::launch_head_rmsnorm(q, ldqkv, n, int(c.n_heads), int(c.head_dim), l.q_norm,
                                   c.rms_eps, st);
      kernels::launch_head_rmsnorm(k, ldqkv, n, int(c.n_kv_heads), int(c.head_dim), l.k_norm,
                                   c.rms_eps, st);
    }
    if (omit.rope || rope_in) {
    } else if (options.kv_int8) {
      kernels::launch_rope(q, ldqkv, n, int(c.n_heads), int(c.head_dim), int(c.head_dim),
                           d_positions, inv_freq, ordering, st);
      kernels::launch_rope(k, ldqkv, n, int(c.n_kv_heads), int(c.head_dim), int(c.head_dim),
                           d_positions, inv_freq, ordering, st);
      kernels::launch_kv_write_int8(k, v, ldqkv, n, int(c.n_kv_heads), int(c.head_dim), d_slots,
                                    l.kv8, st);
    } else {
      kernels::launch_rope_qk_kv_write(q, ldqkv, k, v, ldqkv, n, int(c.n_heads), int(c.n_kv_heads),
                                       int(c.head_dim), d_positions, inv_freq, ordering, d_slots,
                                       l.kv, st);
    }
    // Its output quantized for the dp4a matvec, or in the narrow GEMM's form
    // where wo runs that kernel (then wo skips its conversion).
    AttnOut attn_out{quantized ? AttnOut::Quantized : AttnOut::Plain, n};
    if (!quantized &&
        kernels::gemm_for_reads_narrow_x(
            options.kernels, gemm_args(l.wo, attn, qd, n, x, dim, nullptr, true), gemm_scratch))
      attn_out.kind = AttnOut::NarrowX;
    const bool attn_written = omit.attention ? true
                              : spans        ? attention_spans(l, *spans, max_position, attn_out)
                                             : attention(l, 0, n, max_position, attn_out, true, rope_in);
    if (quantized && !attn_written) kernels::launch_quantize_activations(attn, qd, n, qd, xq, st);
    scratch_holds = attn_out.kind == AttnOut::NarrowX && attn_written ? attn : nullptr;
    if (product_with_norm(omit.wo, l.wo, attn, qd, l.ffn_norm, &l.gate_up, "ffn")) {
      scratch_holds = nullptr;
      x_in = xq_norm;
    } else {
      norm(l.ffn_norm, l.gate_up);
    }
    // gate and up side by side in one row of ldgu; SwiGLU's output over gate.
    // Where gate|up is one portable narrow GEMM on fp16 x and a portable
    // kernel reads w_down's fp16 x (the sm_80 one reads the x sums, which
    // gate|up does not make), up to swiglu_fused_max tokens, gate|up's
    // blocks make SwiGLU (kernels::SwigluOut) and its launch is left out.
    const bool fuse = !quantized && n <= swiglu_fused_max && !omit.gate_up && !omit.swiglu &&
                      l.gate_up.size() == 1 && ffn % 32 == 0 && swiglu_fused.x != nullptr;
    if (fuse) {
      GemmCall up_call = gemm_call(st, l.gate_up[0].w, xn, dim, n, gate, ldgu, nullptr, false);
      up_call.args.swiglu_out = {ffn, swiglu_fused.x};
      swiglu_hold = true;
      const GemmCall down = gemm_call(st, l.w_down, gate, ldgu, n, x, dim, nullptr, true);
      swiglu_hold =
          kernels::gemm_for_takes_swiglu(options.kernels, up_call.args, up_call.scratch) &&
          kernels::gemm_for_reads_narrow_x(options.kernels, down.args, down.scratch) &&
          !kernels::gemm_for_takes_narrow_sm80(options.kernels, down.args, down.scratch);
      if (swiglu_hold) kernels::launch_gemm_for(options.kernels, up_call.args, up_call.scratch, st);
    }
    if (!swiglu_hold)
      for (const ProjectionStack& p : l.gate_up)
        matvec(omit.gate_up, p.w, xn, dim, n, gate + p.column, ldgu, nullptr, false);
    x_in = xq;
    pieces_hold = false;
    scratch_holds = nullptr;
    if (omit.swiglu || swiglu_hold) {
    } else if (quantized) {
      kernels::launch_swiglu_quantize(gate, ldgu, up, ldgu, gate, ldgu, n, ffn, xq, st);
    } else if (ffn % kernels::kActivationBlock == 0 &&
               kernels::gemm_for_reads_narrow_x(
                   options.kernels, gemm_args(l.w_down, gate, ldgu, n, x, dim, nullptr, true),
                   gemm_scratch)) {
      kernels::launch_swiglu_narrow_x(gate, ldgu, up, ldgu, gate, ldgu, n, ffn, gemm_scratch.data, st);
      scratch_holds = gate;  // w_down skips its conversion
    } else {
      kernels::launch_swiglu(gate, ldgu, up, ldgu, gate, ldgu, n, ffn, st);
    }
    const Impl::Layer* next = li + 1 < layers.size() ? &layers[li + 1] : nullptr;
    attn_norm_made =
        product_with_norm(omit.down, l.w_down, gate, ldgu, next ? next->attn_norm : nullptr,
                          next ? &next->qkv : nullptr, "attn");
    swiglu_hold = false;
  }

  scratch_holds = nullptr;
  pieces_hold = false;
  if (n_out > 0) {
    kernels::launch_gather_rows(x, dim, d_logit_rows, n_out, dim, selected, dim, st);
    // Out of place: the norm's blocks of a row all read the whole row.
    // Where the lm head reads fp16 x (a narrow GEMM, or from 9 tokens the
    // 32-token tiles), the norm writes it into the scratch; otherwise it
    // quantizes for the matvecs into xq, which takes the scratch's bytes.
    const bool head_x16 =
        head_x16_on && n_out >= gemm_min_tokens &&
        kernels::gemm_for_reads_narrow_x(
            options.kernels, gemm_args(output, xn, dim, n_out, logits, c.n_vocab, nullptr, false),
            gemm_scratch);
    if (head_x16 && kernels::launch_rmsnorm_narrow_x(selected, dim, output_norm, xn, dim, n_out,
                                                     dim, c.rms_eps, gemm_scratch.data, st))
      scratch_holds = xn;
    else
      kernels::launch_rmsnorm_quantize(selected, dim, output_norm, xn, dim, n_out, dim, c.rms_eps,
                                       xq, st);
    matvec(omit.output, output, xn, dim, n_out, logits, c.n_vocab, nullptr, false);
  }
}

// Long prompt chunks go to the tensor-core prefill attention; everything
// else (decode tokens, short chunks) to the split-K kernel, in runs of
// consecutive tokens.
bool CudaBackend::Impl::attention_spans(const Layer& layer, const std::vector<Span>& spans, int max_position,
                                        AttnOut out) {
  const ModelConfig& c = model->config;
  constexpr int kPrefillMinTokens = 16;
  const bool tensor_cores = !options.kv_int8 && kernels::prefill_attention_supported(int(c.head_dim));
  const int T = options.max_batch_tokens;
  const int32_t* d_tables = d_ints + 5 * T;
  int run_first = -1, run_end = -1;
  bool run_single = true;  // every span of the run one token: decode tokens
  bool all_written = true;
  auto flush = [&] {
    if (run_first < 0) return;
    all_written &= attention(layer, run_first, run_end - run_first, max_position, out, run_single);
    run_first = -1;
    run_single = true;
  };
  for (const Span& sp : spans) {
    if (tensor_cores && sp.count >= kPrefillMinTokens) {
      flush();
      kernels::PrefillAttentionArgs a;
      a.q = q + int64_t(sp.first) * ld_qkv();
      a.ldq = ld_qkv();
      a.out = attn + int64_t(sp.first) * c.q_dim();
      a.ldo = c.q_dim();
      a.cache = layer.kv;
      a.block_table = d_tables + int64_t(sp.table_row) * table_stride;
      a.start = sp.start_pos;
      a.n = sp.count;
      a.n_heads = int(c.n_heads);
      a.n_kv_heads = int(c.n_kv_heads);
      a.head_dim = int(c.head_dim);
      a.scale = float(1.0 / std::sqrt(double(c.head_dim)));
      kernels::launch_attention_prefill(a, stream);
      all_written = false;
    } else {
      if (run_first < 0) run_first = sp.first;
      run_end = sp.first + sp.count;
      run_single &= sp.count == 1;
    }
  }
  flush();
  return all_written;
}

}  // namespace voltad
