// The CUDA backend's state, shared by its two source files:
// engine/backend_cuda.cpp (creation, weights, workspace, graphs, forward) and
// engine/backend_cuda_step.cpp (the kernels of one step). Private to them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/backend_cuda.h"
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
#include "kernels/log_sum_exp.h"
#include "kernels/matvec.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/topk.h"

namespace voltad {

namespace backend_cuda_detail {

// Also clears the runtime's last error: a failed call (an allocation, a
// graph's instantiation) leaves it there, and the next
// CUDA_CHECK(cudaGetLastError()) after an unrelated launch would abort on
// it. A sticky fault stays: cudaDeviceSynchronize still reports it (forward).
inline Error cuda_error(const std::string& what, cudaError_t e) {
  (void)cudaGetLastError();
  return make_error(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1ull << 30));
  return buf;
}

// Attention launches of at least this many tokens combine their split-K
// pieces in pass 1 (AttentionArgs::arrivals; engine/backend_cuda_step.cpp).
constexpr int kCombineInPass1MinTokens = 8;
// The decode attention's wmma pass 1 (Impl::attention_wmma) takes launches
// of at most this many tokens: measured at 1-32 under `portable` (batch 1
// +1.1%, 8 +2.4%, 16 +3.9%, 32 +4.5% at 512 positions; batch 1 +4.3% and
// 8 +14.9% at 4,096; docs/PERFORMANCE.md runs 46-47), not on longer runs
// of a prompt's tokens.
constexpr int kAttentionWmmaMaxTokens = 32;

}  // namespace backend_cuda_detail

struct CudaBackend::Impl {
  std::shared_ptr<const Model> model;
  CudaBackendOptions options;
  KvBlockPool pool;
  cudaStream_t stream = nullptr;
  // A second stream and the events that fork it from `stream` and join it
  // back: a layer's separate v projection runs beside q|k (enqueue_step).
  cudaStream_t side = nullptr;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  // options.time_steps: a step's first and last events, and what they measured.
  cudaEvent_t step_begin = nullptr, step_end = nullptr;
  double last_step_device_s = -1.0;
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
  uint32_t* arrivals = nullptr;  // split-K pieces counted in (kernels/attention.h)
  int64_t ld_qkv() const { return model->config.q_dim() + 2 * model->config.kv_dim(); }
  int64_t ld_gate_up() const { return 2 * model->config.ffn_dim; }
  size_t partial_floats = 0;
  kernels::QuantizedActivations xq;
  // A one-token step's next RMSNorm input, made by o and down as they write
  // the residual row (kernels::launch_matvec_norm_units): rows 1 and 2 of
  // xq's buffers, which such a step leaves unused; null q where the
  // workspace holds fewer than 3 token rows (the norms are then launched).
  kernels::QuantizedActivations xq_norm;
  kernels::GemmScratch gemm_scratch;  // aliases xq.q (allocate_workspace)
  // A step of 4-8 tokens' next RMSNorm, made in pieces by a portable narrow
  // wo or w_down as it writes the residual stream (kernels::NormPieces;
  // enqueue_step): the readers' fp16 x, the sums of squares and each
  // token's scale. Run 63 (H100, portable): batch 8 +0.9-1.5%, 16
  // +0.8-1.1%, 32 -0.2 to -0.9%; run 64 (H100, the pieces' kernels of
  // their own): batch 4 and 8 -0.2 to +0.6%, 12 -1.0% / -1.4%, 16 -0.8 to
  // -2.1%. So up to norm_pieces_max (8; the kernels take up to
  // kernels::kNormPiecesMaxTokens, 16, and VOLTAD_NORM_PIECES_MAX=N moves
  // the bound there); VOLTAD_NORM_PIECES=0 turns them off.
  struct NormPiecesBuffers {
    uint32_t* x = nullptr;
    size_t x_bytes = 0;
    float* sumsq = nullptr;        // n8 x dim / 32
    float* scale = nullptr;        // n8
    uint32_t* arrivals = nullptr;  // zeroed once (allocate_workspace)
  } norm_pieces;
  bool norm_pieces_on = true;
  int norm_pieces_max = 8;
  // SwiGLU made by a portable narrow gate|up (kernels::SwigluOut;
  // enqueue_step), in place of its launch: w_down's fp16 x (not the
  // scratch, which gate|up's blocks still read). In steps of up to
  // swiglu_fused_max tokens (VOLTAD_SWIGLU_FUSED_MAX=N, 0-32; 0: never).
  struct SwigluBuffers {
    uint32_t* x = nullptr;
    size_t x_bytes = 0;
  } swiglu_fused;
  int swiglu_fused_max = 32;
  // The final norm writes the lm head's fp16 x where the head reads it
  // (VOLTAD_HEAD_X16=0: the head converts x itself; comparisons).
  bool head_x16_on = true;
  int gemm_min_tokens = kernels::kGemmMinTokens;  // GEMMs from here, else dp4a matvecs
  // Decode graphs run the head norms, RoPE and the KV write inside the
  // attention (kernels::AttentionArgs::rope): the fp16 cache; off with
  // VOLTAD_ROPE_IN_ATTENTION=0, for comparisons (choose_rope_in_attention).
  bool rope_in_attention = false;
  // engine.kernels: auto runs the attention's pass 1 on the tensor cores
  // where kernels::attention_mma_applies; off with VOLTAD_ATTENTION_MMA=0,
  // for comparisons (choose_attention_mma).
  bool attention_mma = false;
  // The decode attention's wmma pass 1 (kernels::attention_wmma_applies;
  // sm_70+) where the sm_80+ one does not apply: `portable`, and `auto` on
  // a V100; launches of up to kAttentionWmmaMaxTokens tokens. Off with
  // VOLTAD_ATTENTION_WMMA=0, for comparisons: on the H200 under `portable`
  // it gave batch 1 +1.1%, batch 8 +2.4% and batch 32 +4.5% (Llama-3-8B
  // Q4_K_M, 512 positions; docs/PERFORMANCE.md runs 46-47).
  bool attention_wmma = true;
  // Its launches' most tokens (kAttentionWmmaMaxTokens;
  // VOLTAD_ATTENTION_WMMA_MAX_TOKENS=N for comparisons).
  int attention_wmma_max_tokens = backend_cuda_detail::kAttentionWmmaMaxTokens;
  // Attention launches of at least this many tokens combine their split-K
  // pieces in pass 1 (kCombineInPass1MinTokens; VOLTAD_COMBINE_MIN_TOKENS=N
  // for comparisons).
  int combine_min_tokens = backend_cuda_detail::kCombineInPass1MinTokens;
  // At most this many split-K pieces a token (0: as many as the plan
  // takes); VOLTAD_ATTENTION_MAX_SPLITS=N, for comparisons.
  int attention_max_splits = 0;
  // Whether separate q|k|v stacks (a Q6_K attn_v beside Q4_K q|k) run the
  // later ones on the side stream, beside the first: -1 the rule (where
  // launches are plain, not programmatic; enqueue_step), 0 never, 1 always
  // (VOLTAD_QKV_SIDE=0|1, for comparisons).
  int qkv_side = -1;
  // Whether a one-token step's o and down make the next RMSNorm
  // (kernels::launch_matvec_norm_units; enqueue_step): -1 the rule (Q4_K
  // products, and Q4_0 ones under plain launches), 0 never, 1 wherever the
  // kernel applies (VOLTAD_NORM_UNITS=0|1, for comparisons).
  int norm_units = -1;
  // Separate q|k|v stacks launched one after the other (neither paired nor
  // on the side stream): the last first (v before q|k) where both are
  // narrow GEMMs of 9-32 tokens under programmatic launch (-1, the rule),
  // never (0) or at every step they are launched so (1; VOLTAD_QKV_REVERSE,
  // comparisons).
  int qkv_reverse = -1;
  // The step's kernels launch under programmatic dependent launch (`auto`
  // on an sm_90+ build and card); set at creation, outside any capture.
  bool programmatic = false;
  int32_t *d_ints = nullptr;  // tokens, positions, slots, token_tables, logit_rows, block tables
  // Their host copy, pinned: a copy from pageable memory would first be
  // staged by the driver, on the host, while the GPU waits for the step.
  int32_t* h_ints = nullptr;
  size_t h_ints_count = 0;
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
    (void)cudaSetDevice(options.device);  // the frees below act on the current device
    if (stream) cudaStreamSynchronize(stream);
    for (cudaGraphExec_t g : decode_graphs)
      if (g) cudaGraphExecDestroy(g);
    for (void* p : allocations) cudaFree(p);
    free_pinned(h_logits);
    free_pinned(h_candidates);
    free_pinned(h_ints);
    if (side) cudaStreamDestroy(side);
    if (fork_event) cudaEventDestroy(fork_event);
    if (join_event) cudaEventDestroy(join_event);
    if (step_begin) cudaEventDestroy(step_begin);
    if (step_end) cudaEventDestroy(step_end);
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
      return backend_cuda_detail::cuda_error(std::string("allocating ") + what + " (" + backend_cuda_detail::gib(bytes) + ") on " + device_name, e);
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
  bool narrow_sm80_takes_all() const;
  bool choose_rope_in_attention() const;
  bool choose_attention_mma() const;
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
  // returns whether it did. own_position_only: each of those tokens is the
  // only one of its sequence in the step (kernels::AttentionArgs). rope: q
  // and k are the projections' raw output, and the attention applies the
  // head norms and RoPE and writes the KV cache (needs own_position_only).
  bool attention(const Layer& layer, int first, int n_tokens, int max_position, AttnOut out,
                 bool own_position_only, bool rope = false);
  // Returns whether every token's output went out as `out` asks (see attention()).
  bool attention_spans(const Layer& layer, const std::vector<Span>& spans, int max_position, AttnOut out);
  // Every kernel of one step, on the stream (no copies, no syncs): what a
  // decode graph captures (spans == nullptr). Inputs are read from d_ints.
  void enqueue_step(int n, int n_out, int max_position, const std::vector<Span>* spans = nullptr);
};

}  // namespace voltad
