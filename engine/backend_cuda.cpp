#include "engine/backend_cuda.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>

#include "engine/backend_cuda_impl.h"

namespace voltad {

using backend_cuda_detail::cuda_error;
using backend_cuda_detail::gib;

namespace {

bool driver_library_loads() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

}  // namespace

Result<std::string> describe_cuda_device(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
    return make_error("no CUDA device is visible (check the driver, nvidia-smi, and CUDA_VISIBLE_DEVICES)");
  // The runtime says "insufficient driver" also where there is no driver
  // at all: told apart by whether the driver's library loads.
  if (e == cudaErrorInsufficientDriver && !driver_library_loads())
    return make_error(
        "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded): install the driver; "
        "nvidia-smi must list the card");
  if (e != cudaSuccess) return cuda_error("the CUDA driver cannot be used", e);
  if (device >= count)
    return make_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                      " visible)");
  cudaDeviceProp p{};
  if ((e = cudaGetDeviceProperties(&p, device)) != cudaSuccess) return cuda_error("cudaGetDeviceProperties", e);
  std::string s = std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
                  gib(p.totalGlobalMem) + ")";
  if (p.major < 7)
    return make_error(s + ": voltad needs compute capability 7.0 (V100) or newer");
  return s;
}

Status CudaBackend::Impl::upload_vector(const GgufTensor* t, float*& dst) {
  if (!t) return {};
  return upload_vectors(std::span<const GgufTensor* const>(&t, 1), dst);
}

Status CudaBackend::Impl::upload_vectors(std::span<const GgufTensor* const> parts, float*& dst) {
  std::vector<float> host;
  for (const GgufTensor* t : parts) {
    const size_t at = host.size();
    host.resize(at + t->n_elements);
    dequantize_rows(*t, 0, t->n_rows(), host.data() + at);
  }
  auto p = alloc<float>(host.size(), parts[0]->name.c_str(), memory.weights);
  if (!p) return p.error();
  dst = p.value();
  decode_bytes += host.size() * sizeof(float);
  CUDA_CHECK(cudaMemcpy(dst, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return {};
}

Status CudaBackend::Impl::upload_matrix(std::span<const GgufTensor* const> parts,
                                        kernels::PackedMatrixView& dst, ThreadPool& threads,
                                        std::vector<uint8_t>& staging, uint64_t& done,
                                        uint64_t total) {
  const GgufTensor& first = *parts[0];
  std::vector<GgufMatrix> matrices;
  for (const GgufTensor* t : parts) matrices.push_back(gguf_matrix(*t));
  auto layout = stacked_layout_for(matrices);
  if (!layout)
    return Error{"tensor '" + first.name + "': " + layout.error().message,
                 layout.error().model_data};
  staging.assign(layout->total_bytes, 0);
  int64_t at = 0;
  for (const GgufTensor* t : parts) {
    Status failed;
    std::mutex mu;
    threads.parallel_for(int64_t(t->n_rows()), [&](int64_t begin, int64_t end) {
      Status s =
          repack_rows_at(t->type, t->data, layout.value(), at, begin, end - begin, staging.data());
      if (!s) {
        std::lock_guard<std::mutex> lock(mu);
        failed = s;
      }
    });
    if (!failed)
      return Error{"tensor '" + t->name + "': " + failed.error().message,
                   failed.error().model_data};
    at += int64_t(t->n_rows());
  }
  auto p = alloc<uint8_t>(layout->total_bytes, first.name.c_str(), memory.weights);
  if (!p) return p.error();
  CUDA_CHECK(cudaMemcpy(p.value(), staging.data(), layout->total_bytes, cudaMemcpyHostToDevice));
  dst.layout = layout.value();
  dst.data = p.value();
  if (&first != model->weights.token_embd || model->weights.output == &first)
    decode_bytes += kernels::packed_payload_bytes(dst.layout);
  for (const GgufTensor* t : parts) {
    done += t->n_bytes;
    if (options.on_progress) options.on_progress(done, total, t->name);
  }
  return {};
}

Status CudaBackend::Impl::upload_projections(std::initializer_list<Projection> projections,
                                             std::vector<ProjectionStack>& dst, ThreadPool& threads,
                                             std::vector<uint8_t>& staging, uint64_t& done,
                                             uint64_t total) {
  int64_t column = 0;
  for (const auto& stack : projection_stacks(projections)) {
    std::vector<const GgufTensor*> weights, biases;
    for (const Projection& p : stack) {
      weights.push_back(p.weight);
      if (p.bias) biases.push_back(p.bias);
    }
    ProjectionStack& out = dst.emplace_back();
    out.column = column;
    VOLTAD_TRY(upload_matrix(weights, out.w, threads, staging, done, total));
    if (!biases.empty()) VOLTAD_TRY(upload_vectors(biases, out.bias));
    column += out.w.layout.rows;
  }
  return {};
}

Status CudaBackend::Impl::load_weights() {
  const ModelWeights& w = model->weights;
  // Every tensor goes into one allocation of exactly the VRAM plan's size:
  // no per-tensor cudaMalloc rounding (up to 2 MiB each) outside the plan.
  auto planned = repacked_weight_bytes(w, model->config);
  if (!planned) return planned.error();
  uint64_t not_counted = 0;  // the pieces are counted as they are carved
  auto block = alloc<uint8_t>(*planned, "weights", not_counted);
  if (!block) return block.error();
  arena = block.value();
  arena_left = *planned;
  Status placed = load_weight_tensors();
  const uint64_t left = arena_left;
  arena = nullptr;
  arena_left = 0;
  if (!placed) return placed;
  if (left != 0)
    return make_error("cuda backend: the VRAM plan counts " + std::to_string(left) +
                      " bytes of weights more than were placed (engine/vram_plan.cpp and the backend "
                      "disagree: a bug)");
  return {};
}

Status CudaBackend::Impl::load_weight_tensors() {
  const ModelWeights& w = model->weights;
  uint64_t total = 0, done = 0;
  for (const auto& t : model->file->tensors()) total += t.n_bytes;
  ThreadPool threads(0);
  std::vector<uint8_t> staging;
  auto matrix = [&](const GgufTensor* t, kernels::PackedMatrixView& dst) {
    return upload_matrix(std::span<const GgufTensor* const>(&t, 1), dst, threads, staging, done,
                         total);
  };
  VOLTAD_TRY(matrix(w.token_embd, token_embd));
  if (w.output == w.token_embd) output = token_embd;
  else VOLTAD_TRY(matrix(w.output, output));
  VOLTAD_TRY(upload_vector(w.output_norm, output_norm));
  layers.resize(w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& lw = w.layers[i];
    Layer& l = layers[i];
    VOLTAD_TRY(upload_projections({{lw.wq, lw.bq}, {lw.wk, lw.bk}, {lw.wv, lw.bv}}, l.qkv, threads,
                                  staging, done, total));
    VOLTAD_TRY(matrix(lw.wo, l.wo));
    VOLTAD_TRY(upload_projections({{lw.w_gate, nullptr}, {lw.w_up, nullptr}}, l.gate_up, threads,
                                  staging, done, total));
    VOLTAD_TRY(matrix(lw.w_down, l.w_down));
    VOLTAD_TRY(upload_vector(lw.attn_norm, l.attn_norm));
    VOLTAD_TRY(upload_vector(lw.ffn_norm, l.ffn_norm));
    VOLTAD_TRY(upload_vector(lw.q_norm, l.q_norm));
    VOLTAD_TRY(upload_vector(lw.k_norm, l.k_norm));
  }
  // RoPE frequencies, with Llama 3's per-dimension factors folded in.
  const ModelConfig& c = model->config;
  std::vector<float> factors;
  if (w.rope_freqs) factors = dequantize_tensor(*w.rope_freqs);
  std::vector<float> inv = kernels::rope_inverse_frequencies(int(c.head_dim), c.rope_theta, c.rope_freq_scale,
                                                             factors.empty() ? nullptr : factors.data());
  auto p = alloc<float>(inv.size(), "rope frequencies", memory.weights);
  if (!p) return p.error();
  inv_freq = p.value();
  CUDA_CHECK(cudaMemcpy(inv_freq, inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
  return {};
}

Status CudaBackend::Impl::allocate_workspace() {
  const ModelConfig& c = model->config;
  const size_t T = size_t(options.max_batch_tokens), S = size_t(options.max_sequences);
  const size_t widest = size_t(std::max({c.dim, c.ffn_dim, c.q_dim()}));
  // One allocation laid out as the VRAM plan counts it (engine/vram_plan.h),
  // so the plan's workspace row is exactly what the card holds here. Each
  // region is checked against what the kernels need: a plan that drifted
  // from the code fails here, at start, not as an overrun later.
  EngineLimits limits;
  limits.max_context = options.max_context;
  limits.max_sequences = options.max_sequences;
  limits.max_batch_tokens = options.max_batch_tokens;
  limits.kv_cache_type = options.kv_int8 ? KvCacheType::Int8 : KvCacheType::Fp16;
  const CudaWorkspace ws = cuda_workspace_bytes(c, limits);
  auto base = alloc<uint8_t>(ws.total(), "workspace", memory.workspace);
  if (!base) return base.error();
  uint8_t* next = base.value();
  std::string drift;
  auto check = [&](uint64_t planned, size_t needed, const char* what) {
    if (needed > planned && drift.empty())
      drift = std::string("the VRAM plan gives the ") + what + " " + std::to_string(planned) +
              " bytes, the kernels need " + std::to_string(needed) +
              " (engine/vram_plan.cpp and the CUDA backend disagree: a bug)";
  };
  auto take = [&](uint64_t planned, size_t needed, const char* what) {
    check(planned, needed, what);
    uint8_t* p = next;
    next += planned;
    return p;
  };
  const size_t f = sizeof(float);
  x = reinterpret_cast<float*>(take(ws.residual, T * size_t(c.dim) * f, "residual stream"));
  xn = reinterpret_cast<float*>(take(ws.normed, T * size_t(c.dim) * f, "normed activations"));
  q = reinterpret_cast<float*>(take(ws.qkv, T * size_t(ld_qkv()) * f, "queries, keys and values"));
  k = q + c.q_dim();
  v = k + c.kv_dim();
  attn = reinterpret_cast<float*>(take(ws.attention_out, T * size_t(c.q_dim()) * f, "attention output"));
  gate = reinterpret_cast<float*>(
      take(ws.ffn_gate_up, T * size_t(ld_gate_up()) * f, "ffn gate and up"));
  up = gate + c.ffn_dim;
  xq.q = reinterpret_cast<int8_t*>(take(
      ws.quantized_x, kernels::quantized_activation_q_bytes(int(T), int64_t(widest)), "quantized activations"));
  // The sm_80 GEMMs' fp16 copy of x borrows the same bytes: steps that run
  // GEMMs (gemm_min_tokens+ tokens) quantize no activations until the final
  // norm, after the last GEMM (kernels/gemm_sm80.h).
  gemm_scratch = {xq.q, size_t(ws.quantized_x)};
  check(ws.quantized_x,
        std::max(kernels::gemm_sm80_scratch_bytes(int(T), int64_t(widest)),
                 kernels::gemm_narrow_sm80_scratch_bytes(int(std::min<size_t>(T, 32)), int64_t(widest))),
        "sm_80 GEMMs' fp16 x");  // (the narrow one: 1..32 tokens)
  xq.scales = reinterpret_cast<float*>(take(ws.quantized_x_scales,
                                            kernels::quantized_activation_scale_bytes(int(T), int64_t(widest)),
                                            "activation scales"));
  if (T >= 3) {
    xq_norm.q = xq.q + kernels::quantized_activation_q_row(int64_t(widest));
    xq_norm.scales = xq.scales + kernels::quantized_activation_scale_row(int64_t(widest));
    xq_norm.sumsq = xq.scales + 2 * kernels::quantized_activation_scale_row(int64_t(widest));
    xq_norm.eps = c.rms_eps;
  }
  selected = reinterpret_cast<float*>(take(ws.selected, S * size_t(c.dim) * f, "final activations"));
  logits = reinterpret_cast<float*>(take(ws.logits, S * size_t(c.n_vocab) * f, "logits"));
  // ids, then logits, then the rows' normalizers (log_z, doubles), then
  // their noise (kernels::RowNoise, 24 bytes; 8-byte aligned after the rest)
  const size_t candidate_ints = 2 * S * size_t(kMaxCandidates) + 2 * S + 6 * S;
  candidates = reinterpret_cast<int32_t*>(take(ws.candidates, candidate_ints * sizeof(int32_t), "top-k candidates"));
  topk_fits = gpu_topk_fits(c.n_vocab);
  const size_t scratch = topk_fits ? kernels::topk_scratch_bytes(int(S), c.n_vocab, kMaxCandidates) : 0;
  uint8_t* scratch_at = take(ws.topk_scratch, scratch, "top-k scratch");
  topk_scratch = scratch > 0 ? scratch_at : nullptr;
  table_stride = KvBlockPool::blocks_for(options.max_context);
  h_ints_count = 5 * T + S * size_t(table_stride);
  d_ints = reinterpret_cast<int32_t*>(take(ws.step_indices, h_ints_count * sizeof(int32_t), "step indices"));
  partial_floats = kernels::attention_partial_floats(int(S), int(c.n_heads), int(c.head_dim), options.max_context - 1);
  partials = reinterpret_cast<float*>(take(ws.attention_partials, partial_floats * f, "attention partials"));
  arrivals = reinterpret_cast<uint32_t*>(take(ws.attention_arrivals, S * size_t(c.n_kv_heads) * 4, "attention arrivals"));
  gemm_scratch.split = take(ws.gemm_split, kernels::gemm_narrow_sm80_split_bytes(c.dim, kernels::kNarrowSplits),
                            "narrow GEMM split");
  gemm_scratch.split_bytes = size_t(ws.gemm_split);
  gemm_scratch.split_rows = c.dim;
  {
    // The next norm made in pieces by a narrow wo or w_down (enqueue_step):
    // the readers' fp16 x for up to 16 tokens, then the sums of squares,
    // each token's scale and the blocks' counter.
    const size_t n8 = std::min<size_t>((T + 7) / 8 * 8, size_t(kernels::kNormPiecesMaxTokens));
    const size_t chunks = (size_t(c.dim) + 31) / 32;
    const size_t x_bytes = kernels::gemm_narrow_sm80_scratch_bytes(int(n8), c.dim);
    const size_t x_planned = (x_bytes + 255) / 256 * 256;
    const size_t tail = (chunks + 1) * n8 * sizeof(float) + sizeof(uint32_t);
    uint8_t* at = take(ws.norm_pieces, x_planned + tail, "norm pieces");
    norm_pieces.x = reinterpret_cast<uint32_t*>(at);
    norm_pieces.x_bytes = x_bytes;
    norm_pieces.sumsq = reinterpret_cast<float*>(at + x_planned);
    norm_pieces.scale = norm_pieces.sumsq + chunks * n8;
    norm_pieces.arrivals = reinterpret_cast<uint32_t*>(norm_pieces.scale + n8);
  }
  {
    // SwiGLU made by gate|up (enqueue_step): w_down's fp16 x for up to 32
    // tokens, in the narrow GEMM scratch's layout and size.
    const size_t n8 = std::min<size_t>((T + 7) / 8 * 8, size_t(kernels::kGemmNarrowMaxTokens));
    const size_t x_bytes = kernels::gemm_narrow_sm80_scratch_bytes(int(n8), c.ffn_dim);
    uint8_t* at = take(ws.swiglu_fused, (x_bytes + 255) / 256 * 256, "SwiGLU's x");
    swiglu_fused.x = reinterpret_cast<uint32_t*>(at);
    swiglu_fused.x_bytes = x_bytes;
  }
  VOLTAD_CHECK(next == base.value() + ws.total());
  // Zero once; every attention launch leaves them zero (kernels/attention.h),
  // and so does every narrow GEMM's split (kernels/gemm_sm80.h).
  if (cudaError_t z = cudaMemsetAsync(arrivals, 0, ws.attention_arrivals, stream); z != cudaSuccess)
    return cuda_error("zeroing the attention arrivals", z);
  if (cudaError_t z = cudaMemsetAsync(gemm_scratch.split, 0, ws.gemm_split, stream); z != cudaSuccess)
    return cuda_error("zeroing the narrow GEMM's split counters", z);
  if (cudaError_t z = cudaMemsetAsync(norm_pieces.arrivals, 0, sizeof(uint32_t), stream);
      z != cudaSuccess)
    return cuda_error("zeroing the norm pieces' counter", z);
  if (!drift.empty()) return make_error("cuda backend: " + drift);
  cudaError_t e = alloc_pinned(h_logits, S * size_t(c.n_vocab) * sizeof(float));
  if (e != cudaSuccess) return cuda_error("allocating pinned host memory for logits", e);
  e = alloc_pinned(h_candidates, candidate_ints * sizeof(int32_t));
  if (e != cudaSuccess) return cuda_error("allocating pinned host memory for top-k candidates", e);
  e = alloc_pinned(h_ints, h_ints_count * sizeof(int32_t));
  if (e != cudaSuccess) return cuda_error("allocating pinned host memory for step indices", e);

  // The KV cache: per layer, K and V of every block.
  const size_t per_layer = size_t(pool.n_blocks()) * KvBlockPool::kBlockTokens * size_t(c.kv_dim());
  if (options.kv_int8) {
    const size_t values = kernels::kv_int8_value_bytes(pool.n_blocks(), int(c.kv_dim()));
    const size_t scales = kernels::kv_int8_scale_bytes(pool.n_blocks(), int(c.n_kv_heads));
    for (Layer& l : layers) {
      auto k8 = alloc<int8_t>(values, "KV cache (int8 keys)", memory.kv_cache);
      if (!k8) return k8.error();
      auto v8 = alloc<int8_t>(values, "KV cache (int8 values)", memory.kv_cache);
      if (!v8) return v8.error();
      auto ks = alloc<uint16_t>(scales / 2, "KV cache (key scales)", memory.kv_cache);
      if (!ks) return ks.error();
      auto vs = alloc<uint16_t>(scales / 2, "KV cache (value scales)", memory.kv_cache);
      if (!vs) return vs.error();
      l.kv8 = {k8.value(), v8.value(), ks.value(), vs.value()};
    }
    return {};
  }
  for (Layer& l : layers) {
    auto kc = alloc<uint16_t>(per_layer, "KV cache (keys)", memory.kv_cache);
    if (!kc) return kc.error();
    auto vc = alloc<uint16_t>(per_layer, "KV cache (values)", memory.kv_cache);
    if (!vc) return vc.error();
    l.kv = {kc.value(), vc.value()};
  }
  return {};
}

// kGemmMinTokensNarrowSm80 with `auto` where the sm_80 narrow GEMM takes every
// matrix of a decode step (faster than the matvecs from there: KERNEL-NOTES).
// Elsewhere (`portable`, and `auto` on cards without it, the V100) the
// portable narrow GEMM from kGemmMinTokens. VOLTAD_GEMM_MIN_TOKENS=N (2..9)
// in the environment moves either threshold (comparisons; read once; 9 is
// the dp4a matvecs up to 8 tokens).
int CudaBackend::Impl::choose_gemm_min_tokens() const {
  static const int from_env = [] {
    const char* v = std::getenv("VOLTAD_GEMM_MIN_TOKENS");
    const int n = v ? std::atoi(v) : 0;
    return n >= 2 && n <= kernels::kMatvecMaxBatch + 1 ? n : 0;
  }();
  if (from_env) return from_env;
  return narrow_sm80_takes_all() ? kernels::kGemmMinTokensNarrowSm80 : kernels::kGemmMinTokens;
}

// Whether `auto` runs the sm_80 narrow GEMM for every matrix of a decode step
// of kMatvecMaxBatch tokens (false under `portable` and on the V100).
bool CudaBackend::Impl::narrow_sm80_takes_all() const {
  if (options.kernels != kernels::KernelSet::Auto) return false;
  auto takes = [&](const kernels::PackedMatrixView& w) {
    return kernels::gemm_narrow_sm80_supports({.w = w, .n = kernels::kMatvecMaxBatch},
                                              gemm_scratch);
  };
  bool all = takes(output);
  for (const Layer& l : layers) {
    for (const ProjectionStack& p : l.qkv) all = all && takes(p.w);
    for (const ProjectionStack& p : l.gate_up) all = all && takes(p.w);
    all = all && takes(l.wo) && takes(l.w_down);
  }
  return all;
}

bool CudaBackend::Impl::choose_rope_in_attention() const {
  const char* v = std::getenv("VOLTAD_ROPE_IN_ATTENTION");
  return !options.kv_int8 && !(v && std::string(v) == "0");
}

bool CudaBackend::Impl::choose_attention_mma() const {
  const char* v = std::getenv("VOLTAD_ATTENTION_MMA");
  return options.kernels == kernels::KernelSet::Auto && !(v && std::string(v) == "0");
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(std::shared_ptr<const Model> model,
                                                         const CudaBackendOptions& options) {
  auto device = describe_cuda_device(options.device);
  if (!device) return device.error();
  if (options.max_context <= 0 || options.max_sequences <= 0 || options.max_batch_tokens < options.max_sequences)
    return make_error("cuda backend: max_context and max_sequences must be positive and max_batch_tokens >= max_sequences");
  const ModelConfig& c = model->config;
  if (c.n_heads / c.n_kv_heads > kernels::kAttentionMaxGroup)
    return make_error("cuda backend: " + std::to_string(c.n_heads / c.n_kv_heads) +
                      " query heads per KV head; the attention kernel handles at most 8");
  if (c.head_dim != 16 && c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    return make_error("cuda backend: head_dim " + std::to_string(c.head_dim) + " is not supported (16, 32, 64, 128, 256)");
  int64_t blocks = options.kv_blocks > 0 ? options.kv_blocks
                                         : int64_t(KvBlockPool::blocks_for(options.max_context)) * options.max_sequences;
  auto impl = std::make_unique<Impl>(std::move(model), options, int32_t(blocks));
  impl->device_name = device.value();
  cudaError_t e = cudaSetDevice(options.device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&impl->side, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&impl->fork_event, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&impl->join_event, cudaEventDisableTiming);
  if (e == cudaSuccess && options.time_steps)
    e = cudaEventCreateWithFlags(&impl->step_begin, cudaEventDefault);
  if (e == cudaSuccess && options.time_steps)
    e = cudaEventCreateWithFlags(&impl->step_end, cudaEventDefault);
  if (e != cudaSuccess)
    return cuda_error("creating the CUDA streams and events on " + impl->device_name, e);
  VOLTAD_TRY(impl->load_weights());
  VOLTAD_TRY(impl->allocate_workspace());
  impl->gemm_min_tokens = impl->choose_gemm_min_tokens();
  kernels::gemm_narrow_pairs();  // its probe runs now, before any graph is captured
  impl->rope_in_attention = impl->choose_rope_in_attention();
  impl->attention_mma = impl->choose_attention_mma();
  if (const char* v = std::getenv("VOLTAD_ATTENTION_WMMA"))
    impl->attention_wmma = std::string(v) != "0";
  if (const char* v = std::getenv("VOLTAD_ATTENTION_WMMA_MAX_TOKENS"))
    impl->attention_wmma_max_tokens = std::max(1, std::atoi(v));
  if (const char* v = std::getenv("VOLTAD_COMBINE_MIN_TOKENS"))
    impl->combine_min_tokens = std::max(1, std::atoi(v));
  if (const char* v = std::getenv("VOLTAD_ATTENTION_MAX_SPLITS"))
    impl->attention_max_splits = std::max(0, std::atoi(v));
  impl->programmatic =
      options.kernels == kernels::KernelSet::Auto && kernels::programmatic_launch_supported();
  if (const char* v = std::getenv("VOLTAD_QKV_SIDE")) {
    impl->qkv_side = std::string(v) == "0" ? 0 : std::string(v) == "1" ? 1 : -1;
    if (impl->qkv_side < 0)
      std::fprintf(stderr, "voltad: VOLTAD_QKV_SIDE=%s is neither 0 nor 1; the rule decides\n", v);
  }
  if (const char* v = std::getenv("VOLTAD_NORM_PIECES")) impl->norm_pieces_on = v[0] != '0';
  if (const char* v = std::getenv("VOLTAD_NORM_PIECES_MAX"))
    impl->norm_pieces_max = std::clamp(std::atoi(v), 0, kernels::kNormPiecesMaxTokens);
  if (const char* v = std::getenv("VOLTAD_HEAD_X16")) impl->head_x16_on = v[0] != '0';
  if (const char* v = std::getenv("VOLTAD_SWIGLU_FUSED_MAX"))
    impl->swiglu_fused_max = std::clamp(std::atoi(v), 0, kernels::kGemmNarrowMaxTokens);
  if (const char* v = std::getenv("VOLTAD_NORM_UNITS")) {
    impl->norm_units = std::string(v) == "0" ? 0 : std::string(v) == "1" ? 1 : -1;
    if (impl->norm_units < 0)
      std::fprintf(stderr, "voltad: VOLTAD_NORM_UNITS=%s is neither 0 nor 1; the rule decides\n",
                   v);
  }
  if (const char* v = std::getenv("VOLTAD_QKV_REVERSE")) {
    impl->qkv_reverse = std::string(v) == "0" ? 0 : std::string(v) == "1" ? 1 : -1;
    if (impl->qkv_reverse < 0)
      std::fprintf(stderr, "voltad: VOLTAD_QKV_REVERSE=%s is neither 0 nor 1; the rule decides\n",
                   v);
  }
  impl->decode_graphs.assign(size_t(options.max_sequences) + 1, nullptr);
  if (options.use_graphs)
    for (int n = 1; n <= options.max_sequences; ++n) VOLTAD_TRY(impl->capture_decode_graph(n));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(impl)));
  VOLTAD_TRY(backend->warm_up());
  backend->impl_->last_step_device_s = -1.0;  // no step of the caller's yet
  return backend;
}

Status CudaBackend::Impl::capture_decode_graph(int n) {
  // Graphs bake in their launch shapes: attention is sized for the longest
  // context (its blocks past a token's position exit at once). Nothing is
  // read at capture, so the step indices need no contents yet.
  const kernels::KernelSetScope kernel_set(options.kernels);  // captured as they will replay
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return cuda_error("capturing the decode graph", e);
  enqueue_step(n, n, options.max_context - 1);
  e = cudaStreamEndCapture(stream, &graph);
  if (e != cudaSuccess) return cuda_error("capturing the decode graph", e);
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess)
    return cuda_error("instantiating the decode graph for " + std::to_string(n) + " sequences on " + device_name, e);
  decode_graphs[size_t(n)] = exec;
  // The graph's device-side resources now, not at its first launch: memory
  // taken while serving is memory the VRAM plan did not see at start.
  e = cudaGraphUpload(exec, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess)
    return cuda_error("uploading the decode graph for " + std::to_string(n) + " sequences to " + device_name, e);
  return {};
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;
KvBlockPool& CudaBackend::kv_pool() { return impl_->pool; }
std::string CudaBackend::unusable_reason() const { return impl_->unusable; }
const CudaMemoryUse& CudaBackend::memory_use() const { return impl_->memory; }
std::string CudaBackend::device_name() const { return impl_->device_name; }
std::string CudaBackend::kernels_in_use() const {
  // Paired B: the narrow GEMM's 4-bit weights into wmma fragments in
  // registers (kernels/wmma_pairs.h; the order the probe found).
  // 32-token blocks named where they are on (the default; VOLTAD_NARROW_TOKENS32=0 off).
  if (impl_->options.kernels == kernels::KernelSet::Portable)
    return kernels::gemm_narrow_pairs() == kernels::WmmaPairs::None
               ? "portable"
               : std::string("portable + paired-b (") +
                     kernels::wmma_pairs_name(kernels::gemm_narrow_pairs()) +
                     (kernels::gemm_narrow_tokens32() ? ", 32-token blocks)" : ")");
  std::string variants;
  if (kernels::gemm_sm80_available()) variants += "sm80-gemm";
  if (impl_->narrow_sm80_takes_all()) variants += " + sm80-narrow";
  kernels::AttentionArgs attention;  // what the decode steps' attention gets
  attention.tensor_cores = impl_->attention_mma && !impl_->options.kv_int8;
  attention.head_dim = int(impl_->model->config.head_dim);
  if (kernels::attention_mma_applies(attention)) variants += variants.empty() ? "sm80-attention" : " + sm80-attention";
  // The batch-1 bulk-copy matvec where it takes a matrix of the model
  // (gate|up of the 8B models' shapes).
  bool bulk = false;
  {
    const kernels::KernelSetScope scope(impl_->options.kernels);
    int8_t q = 0;
    float scale = 0.0f;
    if (!impl_->layers.empty())
      for (const auto& p : impl_->layers[0].gate_up) {
        kernels::MatvecArgs a;
        a.w = p.w;
        a.batch = 1;
        a.xq = {&q, &scale};
        bulk = bulk || kernels::matvec_bulk_applies(a);
      }
  }
  if (bulk) variants += variants.empty() ? "sm90-bulk" : " + sm90-bulk";
  // The narrow GEMM's streaming blocks where they take gate|up at 8 tokens.
  bool narrow_bulk = false;
  if (impl_->gemm_min_tokens <= 8 && !impl_->layers.empty()) {
    const kernels::KernelSetScope scope(impl_->options.kernels);
    for (const auto& p : impl_->layers[0].gate_up) {
      kernels::GemmArgs g;
      g.w = p.w;
      g.n = 8;
      narrow_bulk = narrow_bulk || kernels::gemm_narrow_sm80_bulk_taken(g);
    }
  }
  if (narrow_bulk) variants += " + sm90-narrow-bulk";
  if (kernels::programmatic_launch_supported()) variants += variants.empty() ? "pdl" : " + pdl";
  return "auto: " + (variants.empty() ? std::string("portable") : variants);
}
uint64_t CudaBackend::decode_weight_bytes() const { return impl_->decode_bytes; }
double CudaBackend::last_step_device_seconds() const {
  return impl_->last_step_device_s;
}

// Every kind of step once, at creation: a prompt chunk of max_batch_tokens
// tokens (the GEMM path), then decode steps of 1..max_sequences sequences
// (the graphs), with full logits rows and with the top-k on the device.
// Whatever the driver takes lazily at a first launch (seen on the H200: 2
// MiB of device memory at the first steps, though kernels load eagerly and
// graphs are uploaded) is then taken before the VRAM plan is compared with
// the card, not while serving. The KV cache is written and then released.
Status CudaBackend::warm_up() {
  Impl& m = *impl_;
  // As much as the KV pool holds (a pool planned smaller than one chunk).
  const int32_t blocks = m.pool.free_blocks();
  const int32_t T = std::min({m.options.max_batch_tokens, m.options.max_context,
                              int32_t(int64_t(blocks) * KvBlockPool::kBlockTokens)});
  const int32_t S = std::min(m.options.max_sequences, blocks);
  if (T < 1) return {};
  std::vector<int32_t> zeros(size_t(std::max(T, S)), 0);
  ForwardOutput out;
  for (int32_t top_k : {0, m.topk_fits ? 1 : 0}) {
    if (!m.pool.reserve(0, T)) return make_error("cuda backend warm-up: no KV blocks for one prompt chunk");
    BatchChunk prompt;
    prompt.tokens = std::span<const int32_t>(zeros.data(), size_t(T));
    prompt.top_k = top_k;
    prompt.log_z = top_k > 0;  // the normalizer's kernel (logprobs) loaded and run once too
    VOLTAD_TRY(forward(std::span<const BatchChunk>(&prompt, 1), out));
    m.pool.release(0);
    for (int32_t n = 1; n <= S; ++n) {
      std::vector<BatchChunk> decode(static_cast<size_t>(n));
      for (int32_t s = 0; s < n; ++s) {
        if (!m.pool.reserve(s, 1)) return make_error("cuda backend warm-up: no KV blocks for a decode step");
        decode[size_t(s)].seq_id = s;
        decode[size_t(s)].tokens = std::span<const int32_t>(zeros.data(), 1);
        decode[size_t(s)].top_k = top_k;
        if (top_k > 0) decode[size_t(s)].noise = {uint64_t(s), 0, 1.0f, 1};  // drawn on the GPU
      }
      VOLTAD_TRY(forward(decode, out));
      for (int32_t s = 0; s < n; ++s) m.pool.release(s);
    }
  }
  cudaError_t e = cudaStreamSynchronize(m.stream);
  if (e != cudaSuccess) return cuda_error("cuda backend warm-up", e);
  return {};
}

Status CudaBackend::forward(std::span<const BatchChunk> chunks, ForwardOutput& out) {
  if (!impl_->unusable.empty()) return make_error("the GPU context is unusable: " + impl_->unusable);
  Status done = step(chunks, out);
  if (!done.ok()) {
    // A fault in a kernel (illegal address, ECC, a trap) is sticky: every
    // later call fails with it. An error that is not (a bad launch, out of
    // memory) leaves the device able to synchronize.
    cudaError_t probe = cudaDeviceSynchronize();
    if (probe != cudaSuccess)
      impl_->unusable = std::string(cudaGetErrorName(probe)) + " on " + impl_->device_name + " after: " +
                        done.error().message;
  }
  return done;
}

Status CudaBackend::step(std::span<const BatchChunk> chunks, ForwardOutput& out) {
  Impl& m = *impl_;
  m.last_step_device_s = -1.0;  // until this step's events say otherwise
  // The calling thread's current device may not be the one this backend
  // lives on (a backend made on one thread and stepped on another).
  if (cudaError_t e = cudaSetDevice(m.options.device); e != cudaSuccess)
    return cuda_error("cudaSetDevice(" + std::to_string(m.options.device) + ")", e);
  const kernels::KernelSetScope kernel_set(m.options.kernels);  // how this step's kernels launch
  const ModelConfig& c = m.model->config;
  VOLTAD_TRY(validate_chunks(chunks, c.n_vocab, m.pool));
  if (int64_t(chunks.size()) > m.options.max_sequences)
    return make_error("a step of " + std::to_string(chunks.size()) + " sequences exceeds max_sequences (" +
                      std::to_string(m.options.max_sequences) + ")");
  int n = 0;
  for (auto& ch : chunks) n += int(ch.tokens.size());
  if (n > m.options.max_batch_tokens)
    return make_error("a step of " + std::to_string(n) + " tokens exceeds max_batch_tokens (" +
                      std::to_string(m.options.max_batch_tokens) + ")");

  // Host-side indices, uploaded in one copy: tokens, positions, KV slots,
  // each token's block-table row, the rows whose logits are wanted, tables.
  const int T = m.options.max_batch_tokens, S = m.options.max_sequences;
  int32_t* tokens = m.h_ints;
  int32_t* positions = tokens + T;
  int32_t* slots = positions + T;
  int32_t* token_tables = slots + T;
  int32_t* logit_rows = token_tables + T;
  int32_t* tables = tokens + 5 * T;
  // Logits rows: full rows first, then the rows whose top-k is taken on the
  // device (their last tokens), each group in chunk order.
  const int32_t k = m.topk_fits ? candidate_k_of(chunks) : 0;
  int n_full = 0;
  for (auto& ch : chunks)
    n_full += ch.logits == BatchChunk::Logits::All ? int(ch.tokens.size())
              : ch.logits == BatchChunk::Logits::Last && (k == 0 || ch.top_k == 0) ? 1
                                                                                     : 0;
  int n_out = 0, n_candidate = 0, t = 0, max_position = 0;
  for (size_t s = 0; s < chunks.size(); ++s) {
    const BatchChunk& ch = chunks[s];
    const auto& table = m.pool.block_table(ch.seq_id);
    std::copy(table.begin(), table.end(), tables + s * size_t(m.table_stride));
    for (size_t i = 0; i < ch.tokens.size(); ++i, ++t) {
      const int32_t pos = ch.start_pos + int32_t(i);
      tokens[t] = ch.tokens[i];
      positions[t] = pos;
      slots[t] = table[size_t(pos / KvBlockPool::kBlockTokens)] * KvBlockPool::kBlockTokens + pos % KvBlockPool::kBlockTokens;
      token_tables[t] = int32_t(s);
      max_position = std::max(max_position, pos);
      const bool last = ch.logits == BatchChunk::Logits::Last && i + 1 == ch.tokens.size();
      if (last && k > 0 && ch.top_k > 0)
        logit_rows[n_full + n_candidate++] = t;
      else if (last || ch.logits == BatchChunk::Logits::All)
        logit_rows[n_out++] = t;
    }
  }
  n_out += n_candidate;
  if (n_out > S)
    return make_error("logits for " + std::to_string(n_out) + " tokens requested; at most max_sequences (" +
                      std::to_string(S) + ") per step");
  cudaStream_t st = m.stream;
  if (m.step_begin) CUDA_CHECK(cudaEventRecord(m.step_begin, st));
  CUDA_CHECK(cudaMemcpyAsync(m.d_ints, m.h_ints, m.h_ints_count * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  out.n_vocab = c.n_vocab;
  const bool decode = n == int(chunks.size()) && n_out == n;
  if (decode && m.options.use_graphs) {
    // Every graph was made by create(); a missing one (a failed capture is
    // not kept) is made now.
    if (!m.decode_graphs[size_t(n)]) VOLTAD_TRY(m.capture_decode_graph(n));
    CUDA_CHECK(cudaGraphLaunch(m.decode_graphs[size_t(n)], st));
  } else {
    std::vector<Impl::Span> spans;
    int first = 0;
    for (size_t s = 0; s < chunks.size(); ++s) {
      spans.push_back({first, int(chunks[s].tokens.size()), chunks[s].start_pos, int(s)});
      first += int(chunks[s].tokens.size());
    }
    m.enqueue_step(n, n_out, max_position, &spans);
  }
  const size_t vocab = size_t(c.n_vocab);
  const size_t n_cand_values = size_t(n_candidate) * size_t(k);
  // The normalizers (doubles, 8-byte aligned: 2 * n_cand_values ints
  // before them) follow the values: one copy brings all three.
  const size_t n_log_z = n_candidate > 0 && log_z_wanted(chunks) ? size_t(n_candidate) : 0;
  if (n_candidate > 0) {
    int32_t* ids = m.candidates;
    float* values = reinterpret_cast<float*>(m.candidates + n_cand_values);
    const float* rows = m.logits + size_t(n_full) * vocab;
    // Rows sampled by their noise (BatchChunk::noise): one RowNoise each,
    // uploaded from the pinned buffer's tail (the copy back does not reach it).
    const size_t noise_at = 2 * size_t(S) * size_t(kMaxCandidates) + 2 * size_t(S);
    auto* h_noise = reinterpret_cast<kernels::RowNoise*>(m.h_candidates + noise_at);
    auto* d_noise = reinterpret_cast<kernels::RowNoise*>(m.candidates + noise_at);
    bool noisy = false;
    int r = 0;
    for (const BatchChunk& ch : chunks) {
      if (ch.logits != BatchChunk::Logits::Last || ch.top_k == 0) continue;
      h_noise[r++] = ch.noise;
      noisy = noisy || ch.noise.on;
    }
    VOLTAD_CHECK(r == n_candidate);
    if (noisy)
      CUDA_CHECK(cudaMemcpyAsync(d_noise, h_noise, size_t(n_candidate) * sizeof(kernels::RowNoise),
                                 cudaMemcpyHostToDevice, st));
    kernels::launch_topk(rows, c.n_vocab, n_candidate, c.n_vocab, k, ids, values, m.topk_scratch,
                         st, noisy ? d_noise : nullptr);
    if (n_log_z > 0)
      kernels::launch_row_log_sum_exp(rows, c.n_vocab, n_candidate, c.n_vocab,
                                      reinterpret_cast<double*>(m.candidates + 2 * n_cand_values),
                                      st);
    CUDA_CHECK(cudaMemcpyAsync(m.h_candidates, m.candidates,
                               2 * n_cand_values * sizeof(int32_t) + n_log_z * sizeof(double),
                               cudaMemcpyDeviceToHost, st));
  }
  if (n_full > 0)
    CUDA_CHECK(cudaMemcpyAsync(m.h_logits, m.logits, size_t(n_full) * vocab * sizeof(float),
                               cudaMemcpyDeviceToHost, st));
  if (m.step_end) CUDA_CHECK(cudaEventRecord(m.step_end, st));
  cudaError_t e = cudaStreamSynchronize(st);
  if (e != cudaSuccess) return cuda_error("the forward step failed on " + m.device_name, e);
  // Timing only: a failure to read the events leaves the step unmeasured.
  if (float ms = 0.0f;
      m.step_end && cudaEventElapsedTime(&ms, m.step_begin, m.step_end) == cudaSuccess)
    m.last_step_device_s = double(ms) * 1e-3;
  if (candidate_k_of(chunks) > 0 && k == 0) {
    // The vocabulary is beyond the GPU top-k's limits: choose on the host.
    set_output_rows(chunks, std::vector<float>(m.h_logits, m.h_logits + size_t(n_full) * vocab),
                    c.n_vocab, out);
    return {};
  }
  // Into the rows' storage of the last step (a scheduler's output is reused):
  // no fresh 16 MB to fault in at batch 32 (1.9 -> 1.2 ms on a slow core).
  out.logits.assign(m.h_logits, m.h_logits + size_t(n_full) * vocab);
  out.n_rows = n_full;
  out.candidate_k = k;
  out.n_candidate_rows = n_candidate;
  out.candidate_ids.assign(m.h_candidates, m.h_candidates + n_cand_values);
  const float* h_values = reinterpret_cast<const float*>(m.h_candidates + n_cand_values);
  out.candidate_logits.assign(h_values, h_values + n_cand_values);
  const auto* h_log_z = reinterpret_cast<const double*>(m.h_candidates + 2 * n_cand_values);
  out.candidate_log_z.assign(h_log_z, h_log_z + n_log_z);
  return {};
}

}  // namespace voltad
