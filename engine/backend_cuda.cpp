#include "engine/backend_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <span>
#include <vector>

#include "engine/dequantize.h"
#include "engine/thread_pool.h"
#include "engine/vram_plan.h"
#include "engine/weight_repack.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/attention_int8.h"
#include "kernels/attention_prefill.h"
#include "kernels/cuda_check.h"
#include "kernels/embedding.h"
#include "kernels/gather.h"
#include "kernels/gemm_sm80.h"
#include "kernels/gemm_wmma.h"
#include "kernels/matvec.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/topk.h"

namespace voltad {

namespace {

Error cuda_error(const std::string& what, cudaError_t e) {
  return make_error(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1ull << 30));
  return buf;
}

}  // namespace

Result<std::string> describe_cuda_device(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
    return make_error("no CUDA device is visible (check the driver, nvidia-smi, and CUDA_VISIBLE_DEVICES)");
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

struct CudaBackend::Impl {
  std::shared_ptr<const Model> model;
  CudaBackendOptions options;
  KvBlockPool pool;
  cudaStream_t stream = nullptr;
  std::string device_name;
  CudaMemoryUse memory;
  std::vector<void*> allocations;

  // A stack of projections (engine/weight_repack.h): one matvec writes
  // columns [column, column + w.layout.rows) of the step's q|k|v or
  // gate|up rows.
  struct ProjectionStack {
    kernels::PackedMatrixView w;
    float* bias = nullptr;  // (w.layout.rows) or null
    int64_t column = 0;
  };
  struct Layer {
    // q, k, v: one stack when wq, wk, wv share a type, else up to three.
    std::vector<ProjectionStack> qkv;
    // gate, up: one stack when they share a type, else two.
    std::vector<ProjectionStack> gate_up;
    kernels::PackedMatrixView wo, w_down;
    float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    kernels::KvLayerView kv;
    kernels::KvInt8LayerView kv8;
  };
  std::vector<Layer> layers;
  kernels::PackedMatrixView token_embd, output;
  float* output_norm = nullptr;
  uint64_t decode_bytes = 0;  // what one decode step reads of the weights
  float* inv_freq = nullptr;

  // Step buffers, sized for max_batch_tokens tokens (T). A token's q, k
  // and v are one row of ld_qkv() floats (k and v point into row 0), its
  // gate and up one row of 2 ffn_dim: what the stacked projections write.
  float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr;
  float *gate = nullptr, *up = nullptr, *selected = nullptr, *logits = nullptr, *partials = nullptr;
  int64_t ld_qkv() const { return model->config.q_dim() + 2 * model->config.kv_dim(); }
  int64_t ld_gate_up() const { return 2 * model->config.ffn_dim; }
  size_t partial_floats = 0;
  kernels::QuantizedActivations xq;
  kernels::GemmScratch gemm_scratch;  // aliases xq.q (allocate_workspace)
  int gemm_min_tokens = kernels::kGemmMinTokens;  // GEMMs from here, else dp4a matvecs
  int32_t *d_ints = nullptr;  // tokens, positions, slots, token_tables, logit_rows, block tables
  std::vector<int32_t> h_ints;
  float* h_logits = nullptr;  // pinned
  // GPU top-k: (S, kMaxCandidates) ids then logits, on the device and pinned
  // on the host; scratch for the first pass over long vocabularies.
  int32_t* candidates = nullptr;
  int32_t* h_candidates = nullptr;
  void* topk_scratch = nullptr;
  bool topk_fits = false;  // the vocabulary is within launch_topk's limits
  int32_t table_stride = 0;
  // Set when a failed step left the context broken (see forward()).
  std::string unusable;
  // Decode graphs by batch size (index = number of sequences).
  std::vector<cudaGraphExec_t> decode_graphs;

  Impl(std::shared_ptr<const Model> m, const CudaBackendOptions& o, int32_t n_blocks)
      : model(std::move(m)), options(o), pool(n_blocks, o.max_context) {}
  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    for (cudaGraphExec_t g : decode_graphs)
      if (g) cudaGraphExecDestroy(g);
    for (void* p : allocations) cudaFree(p);
    free_pinned(h_logits);
    free_pinned(h_candidates);
    if (stream) cudaStreamDestroy(stream);
  }

  // Pinned host memory: options.host_allocate's (on the GPU's NUMA node),
  // registered with CUDA; else cudaMallocHost's.
  template <class T>
  cudaError_t alloc_pinned(T*& p, size_t bytes) {
    void* raw = nullptr;
    cudaError_t e = cudaSuccess;
    if (!options.host_allocate) {
      e = cudaMallocHost(&raw, bytes);
    } else if (!(raw = options.host_allocate(bytes))) {
      e = cudaErrorMemoryAllocation;
    } else if ((e = cudaHostRegister(raw, bytes, cudaHostRegisterDefault)) != cudaSuccess) {
      if (options.host_release) options.host_release(raw);
      raw = nullptr;
    }
    p = static_cast<T*>(raw);
    return e;
  }
  void free_pinned(void* p) {
    if (!p) return;
    if (!options.host_allocate) {
      cudaFreeHost(p);
      return;
    }
    cudaHostUnregister(p);
    if (options.host_release) options.host_release(p);
  }

  // While set (load_weights), alloc() carves from this one allocation, at
  // 256-byte boundaries, instead of calling cudaMalloc per tensor.
  uint8_t* arena = nullptr;
  uint64_t arena_left = 0;

  template <class T>
  Result<T*> alloc(size_t count, const char* what, uint64_t& counter) {
    void* p = nullptr;
    size_t bytes = std::max<size_t>(count * sizeof(T), 256);
    if (arena) {
      bytes = (bytes + 255) / 256 * 256;
      if (bytes > arena_left)
        return make_error(std::string("cuda backend: ") + what +
                          " does not fit the weights' allocation that the VRAM plan sized "
                          "(engine/vram_plan.cpp and the backend disagree: a bug)");
      p = arena;
      arena += bytes;
      arena_left -= bytes;
      counter += bytes;
      return static_cast<T*>(p);
    }
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      // A failed allocation stays the runtime's "last error" until read; the
      // next launch's check would take it for its own failure.
      cudaGetLastError();
      return cuda_error(std::string("allocating ") + what + " (" + gib(bytes) + ") on " + device_name, e);
    }
    allocations.push_back(p);
    counter += bytes;
    return static_cast<T*>(p);
  }

  Status upload_vector(const GgufTensor* t, float*& dst);
  // The vectors one after another (a stack's biases).
  Status upload_vectors(std::span<const GgufTensor* const> parts, float*& dst);
  // The matrices as one stack (engine/weight_repack.h); one: as it is.
  Status upload_matrix(std::span<const GgufTensor* const> parts, kernels::PackedMatrixView& dst,
                       ThreadPool& threads, std::vector<uint8_t>& staging, uint64_t& done,
                       uint64_t total);
  Status upload_projections(std::initializer_list<Projection> projections,
                            std::vector<ProjectionStack>& dst, ThreadPool& threads,
                            std::vector<uint8_t>& staging, uint64_t& done, uint64_t total);
  Status load_weights();
  Status load_weight_tensors();  // into the arena load_weights sets up
  Status allocate_workspace();
  int choose_gemm_min_tokens() const;
  // The decode graph for n sequences (n tokens, n logits rows), into
  // decode_graphs[n]. Instantiating a graph allocates device memory, so
  // create() makes every one up front: the request path allocates nothing.
  Status capture_decode_graph(int n);
  // A run of consecutive tokens of one sequence in the step.
  struct Span {
    int first, count, start_pos, table_row;
  };
  // What the attention writes besides its fp32 output: nothing, the int8
  // activations of the dp4a matvecs (xq), or the narrow sm_80 GEMM's x (in
  // the GEMM scratch) for a step of step_tokens tokens.
  struct AttnOut {
    enum Kind { Plain, Quantized, NarrowX } kind = Plain;
    int step_tokens = 0;
  };
  // Split-K attention for the n_tokens consecutive tokens from row `first`.
  // The output also goes out as `out` asks when the kernel can do it;
  // returns whether it did.
  bool attention(const Layer& layer, int first, int n_tokens, int max_position, AttnOut out);
  // Returns whether every token's output went out as `out` asks (see attention()).
  bool attention_spans(const Layer& layer, const std::vector<Span>& spans, int max_position, AttnOut out);
  // Every kernel of one step, on the stream (no copies, no syncs): what a
  // decode graph captures (spans == nullptr). Inputs are read from d_ints.
  void enqueue_step(int n, int n_out, int max_position, const std::vector<Span>* spans = nullptr);
};

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
  if (!layout) return make_error("tensor '" + first.name + "': " + layout.error().message);
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
    if (!failed) return make_error("tensor '" + t->name + "': " + failed.error().message);
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
  auto take = [&](uint64_t planned, size_t needed, const char* what) {
    if (needed > planned && drift.empty())
      drift = std::string("the VRAM plan gives the ") + what + " " + std::to_string(planned) +
              " bytes, the kernels need " + std::to_string(needed) +
              " (engine/vram_plan.cpp and the CUDA backend disagree: a bug)";
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
  xq.scales = reinterpret_cast<float*>(take(ws.quantized_x_scales,
                                            kernels::quantized_activation_scale_bytes(int(T), int64_t(widest)),
                                            "activation scales"));
  selected = reinterpret_cast<float*>(take(ws.selected, S * size_t(c.dim) * f, "final activations"));
  logits = reinterpret_cast<float*>(take(ws.logits, S * size_t(c.n_vocab) * f, "logits"));
  const size_t candidate_ints = 2 * S * size_t(kMaxCandidates);  // ids, then logits
  candidates = reinterpret_cast<int32_t*>(take(ws.candidates, candidate_ints * sizeof(int32_t), "top-k candidates"));
  topk_fits = gpu_topk_fits(c.n_vocab);
  const size_t scratch = topk_fits ? kernels::topk_scratch_bytes(int(S), c.n_vocab, kMaxCandidates) : 0;
  uint8_t* scratch_at = take(ws.topk_scratch, scratch, "top-k scratch");
  topk_scratch = scratch > 0 ? scratch_at : nullptr;
  table_stride = KvBlockPool::blocks_for(options.max_context);
  h_ints.resize(5 * T + S * size_t(table_stride));
  d_ints = reinterpret_cast<int32_t*>(take(ws.step_indices, h_ints.size() * sizeof(int32_t), "step indices"));
  partial_floats = kernels::attention_partial_floats(int(S), int(c.n_heads), int(c.head_dim), options.max_context - 1);
  partials = reinterpret_cast<float*>(take(ws.attention_partials, partial_floats * f, "attention partials"));
  VOLTAD_CHECK(next == base.value() + ws.total());
  if (!drift.empty()) return make_error("cuda backend: " + drift);
  cudaError_t e = alloc_pinned(h_logits, S * size_t(c.n_vocab) * sizeof(float));
  if (e != cudaSuccess) return cuda_error("allocating pinned host memory for logits", e);
  e = alloc_pinned(h_candidates, candidate_ints * sizeof(int32_t));
  if (e != cudaSuccess) return cuda_error("allocating pinned host memory for top-k candidates", e);

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
int CudaBackend::Impl::choose_gemm_min_tokens() const {
  if (options.kernels != kernels::KernelSet::Auto) return kernels::kGemmMinTokens;
  auto takes = [&](const kernels::PackedMatrixView& w) {
    return kernels::gemm_narrow_sm80_supports({.w = w, .n = kernels::kGemmMinTokens - 1}, gemm_scratch);
  };
  bool all = takes(output);
  for (const Layer& l : layers) {
    for (const ProjectionStack& p : l.qkv) all = all && takes(p.w);
    for (const ProjectionStack& p : l.gate_up) all = all && takes(p.w);
    all = all && takes(l.wo) && takes(l.w_down);
  }
  return all ? kernels::kGemmMinTokensNarrowSm80 : kernels::kGemmMinTokens;
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
  if (e != cudaSuccess) return cuda_error("creating a CUDA stream on " + impl->device_name, e);
  VOLTAD_TRY(impl->load_weights());
  VOLTAD_TRY(impl->allocate_workspace());
  impl->gemm_min_tokens = impl->choose_gemm_min_tokens();
  impl->decode_graphs.assign(size_t(options.max_sequences) + 1, nullptr);
  if (options.use_graphs)
    for (int n = 1; n <= options.max_sequences; ++n) VOLTAD_TRY(impl->capture_decode_graph(n));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(impl)));
  VOLTAD_TRY(backend->warm_up());
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
  if (impl_->options.kernels == kernels::KernelSet::Portable) return "portable";
  std::string variants;
  if (kernels::gemm_sm80_available()) variants += "sm80-gemm";
  if (impl_->gemm_min_tokens < kernels::kGemmMinTokens) variants += " + sm80-narrow";
  if (kernels::programmatic_launch_supported()) variants += variants.empty() ? "pdl" : " + pdl";
  return "auto: " + (variants.empty() ? std::string("portable") : variants);
}
uint64_t CudaBackend::decode_weight_bytes() const { return impl_->decode_bytes; }

bool CudaBackend::Impl::attention(const Layer& layer, int first, int n_tokens, int max_position, AttnOut out) {
  const ModelConfig& c = model->config;
  const bool fused = out.kind != AttnOut::Plain && c.head_dim % kernels::kActivationBlock == 0;
  const int T = options.max_batch_tokens;
  const int32_t* positions = d_ints + T + first;
  const int32_t* token_tables = d_ints + 3 * T + first;
  // Tokens go in groups small enough for the split-K scratch. A run longer
  // than the scratch holds at full split (a prompt chunk over the INT8
  // cache, which has no tensor-core prefill attention) takes fewer pieces
  // per token instead of more launches: its many tokens fill the GPU anyway.
  const size_t per_piece = size_t(c.n_heads) * size_t(c.head_dim + 2);
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
    a.max_splits = splits;
    a.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    a.partials = partials;
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
  // Below gemm_min_tokens (9; 4 with the sm_80 narrow GEMM): the dp4a
  // matvecs. From there (prefill, batches): the tensor-core GEMMs, which
  // take fp32 activations directly, so nothing is quantized for them.
  // The x the GEMM scratch holds in the narrow sm_80 GEMM's layout (written
  // by RMSNorm; see norm below), else null.
  const float* scratch_holds = nullptr;
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
  auto matvec = [&](const kernels::PackedMatrixView& w, const float* xin, int64_t ldx, int rows, float* y,
                    int64_t ldy, const float* bias, bool accumulate) {
    if (rows >= gemm_min_tokens) {
      kernels::GemmScratch scratch = gemm_scratch;
      scratch.holds_x = scratch_holds;
      return kernels::launch_gemm_for(options.kernels, gemm_args(w, xin, ldx, rows, y, ldy, bias, accumulate),
                                      scratch, st);
    }
    kernels::MatvecArgs a;
    a.w = w;
    a.batch = rows;
    a.x = xin;
    a.ldx = ldx;
    a.xq = xq;
    a.y = y;
    a.ldy = ldy;
    a.bias = bias;
    a.accumulate = accumulate;
    kernels::launch_matvec(a, st);
  };
  // Below the GEMM's threshold the matvecs read int8 activations: the
  // kernels that make their inputs (RMSNorm, SwiGLU, the attention combine)
  // quantize them on the way out, saving a launch each.
  const bool quantized = n < gemm_min_tokens;
  // Where every matrix that reads the norm's output runs the sm_80 narrow
  // GEMM (batched decode with `auto`), RMSNorm also writes that GEMM's x
  // into the scratch and the GEMMs skip their conversion launch.
  auto narrow_readers = [&](const std::vector<ProjectionStack>& readers) {
    if (quantized) return false;
    for (const ProjectionStack& p : readers)
      if (!kernels::gemm_for_takes_narrow_sm80(options.kernels, gemm_args(p.w, xn, dim, n, q, ldqkv, nullptr, false),
                                               gemm_scratch))
        return false;
    return !readers.empty();
  };
  auto norm = [&](const float* weight, const std::vector<ProjectionStack>& readers) {
    scratch_holds = nullptr;
    if (quantized) kernels::launch_rmsnorm_quantize(x, dim, weight, xn, dim, n, dim, c.rms_eps, xq, st);
    else if (narrow_readers(readers) &&
             kernels::launch_rmsnorm_narrow_x(x, dim, weight, xn, dim, n, dim, c.rms_eps, gemm_scratch.data, st))
      scratch_holds = xn;
    else kernels::launch_rmsnorm(x, dim, weight, xn, dim, n, dim, c.rms_eps, st);
  };

  kernels::launch_embedding_gather(token_embd, d_tokens, n, x, dim, st);
  const auto ordering = c.rope_style == RopeStyle::Neox ? kernels::RopeOrdering::NeoX : kernels::RopeOrdering::Normal;
  for (size_t li = 0; li < layers.size(); ++li) {
    const Impl::Layer& l = layers[li];
    norm(l.attn_norm, l.qkv);
    // q, k and v of a token side by side in one row of ldqkv.
    for (const ProjectionStack& p : l.qkv)
      matvec(p.w, xn, dim, n, q + p.column, ldqkv, p.bias, false);
    if (c.qk_norm) {
      kernels::launch_head_rmsnorm(q, ldqkv, n, int(c.n_heads), int(c.head_dim), l.q_norm,
                                   c.rms_eps, st);
      kernels::launch_head_rmsnorm(k, ldqkv, n, int(c.n_kv_heads), int(c.head_dim), l.k_norm,
                                   c.rms_eps, st);
    }
    if (options.kv_int8) {
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
    if (!quantized && kernels::gemm_for_takes_narrow_sm80(options.kernels, gemm_args(l.wo, attn, qd, n, x, dim, nullptr, true),
                                                          gemm_scratch))
      attn_out.kind = AttnOut::NarrowX;
    const bool attn_written = spans ? attention_spans(l, *spans, max_position, attn_out)
                                    : attention(l, 0, n, max_position, attn_out);
    if (quantized && !attn_written) kernels::launch_quantize_activations(attn, qd, n, qd, xq, st);
    scratch_holds = attn_out.kind == AttnOut::NarrowX && attn_written ? attn : nullptr;
    matvec(l.wo, attn, qd, n, x, dim, nullptr, true);  // residual add fused

    norm(l.ffn_norm, l.gate_up);
    // gate and up side by side in one row of ldgu; SwiGLU's output over gate.
    for (const ProjectionStack& p : l.gate_up)
      matvec(p.w, xn, dim, n, gate + p.column, ldgu, nullptr, false);
    scratch_holds = nullptr;
    if (quantized) {
      kernels::launch_swiglu_quantize(gate, ldgu, up, ldgu, gate, ldgu, n, ffn, xq, st);
    } else if (ffn % kernels::kActivationBlock == 0 &&
               kernels::gemm_for_takes_narrow_sm80(options.kernels,
                                                   gemm_args(l.w_down, gate, ldgu, n, x, dim, nullptr, true),
                                                   gemm_scratch)) {
      kernels::launch_swiglu_narrow_x(gate, ldgu, up, ldgu, gate, ldgu, n, ffn, gemm_scratch.data, st);
      scratch_holds = gate;  // w_down skips its conversion
    } else {
      kernels::launch_swiglu(gate, ldgu, up, ldgu, gate, ldgu, n, ffn, st);
    }
    matvec(l.w_down, gate, ldgu, n, x, dim, nullptr, true);
  }

  if (n_out > 0) {
    kernels::launch_gather_rows(x, dim, d_logit_rows, n_out, dim, selected, dim, st);
    kernels::launch_rmsnorm_quantize(selected, dim, output_norm, selected, dim, n_out, dim, c.rms_eps, xq, st);
    matvec(output, selected, dim, n_out, logits, c.n_vocab, nullptr, false);
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
  bool all_quantized = true;
  auto flush = [&] {
    if (run_first < 0) return;
    all_quantized &= attention(layer, run_first, run_end - run_first, max_position, out);
    run_first = -1;
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
      all_quantized = false;
    } else {
      if (run_first < 0) run_first = sp.first;
      run_end = sp.first + sp.count;
    }
  }
  flush();
  return all_quantized;
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
    VOLTAD_TRY(forward(std::span<const BatchChunk>(&prompt, 1), out));
    m.pool.release(0);
    for (int32_t n = 1; n <= S; ++n) {
      std::vector<BatchChunk> decode(static_cast<size_t>(n));
      for (int32_t s = 0; s < n; ++s) {
        if (!m.pool.reserve(s, 1)) return make_error("cuda backend warm-up: no KV blocks for a decode step");
        decode[size_t(s)].seq_id = s;
        decode[size_t(s)].tokens = std::span<const int32_t>(zeros.data(), 1);
        decode[size_t(s)].top_k = top_k;
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
  int32_t* tokens = m.h_ints.data();
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
  CUDA_CHECK(cudaMemcpyAsync(m.d_ints, m.h_ints.data(), m.h_ints.size() * sizeof(int32_t), cudaMemcpyHostToDevice, st));
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
  if (n_candidate > 0) {
    int32_t* ids = m.candidates;
    float* values = reinterpret_cast<float*>(m.candidates + n_cand_values);
    kernels::launch_topk(m.logits + size_t(n_full) * vocab, c.n_vocab, n_candidate, c.n_vocab, k, ids, values,
                         m.topk_scratch, st);
    CUDA_CHECK(cudaMemcpyAsync(m.h_candidates, m.candidates, 2 * n_cand_values * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, st));
  }
  if (n_full > 0)
    CUDA_CHECK(cudaMemcpyAsync(m.h_logits, m.logits, size_t(n_full) * vocab * sizeof(float),
                               cudaMemcpyDeviceToHost, st));
  cudaError_t e = cudaStreamSynchronize(st);
  if (e != cudaSuccess) return cuda_error("the forward step failed on " + m.device_name, e);
  std::vector<float> full(m.h_logits, m.h_logits + size_t(n_full) * vocab);
  if (candidate_k_of(chunks) > 0 && k == 0) {
    // The vocabulary is beyond the GPU top-k's limits: choose on the host.
    set_output_rows(chunks, std::move(full), c.n_vocab, out);
    return {};
  }
  out.logits = std::move(full);
  out.n_rows = n_full;
  out.candidate_k = k;
  out.n_candidate_rows = n_candidate;
  out.candidate_ids.assign(m.h_candidates, m.h_candidates + n_cand_values);
  const float* h_values = reinterpret_cast<const float*>(m.h_candidates + n_cand_values);
  out.candidate_logits.assign(h_values, h_values + n_cand_values);
  return {};
}

}  // namespace voltad
