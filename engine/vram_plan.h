// The VRAM plan (issue 8): every byte voltad will hold on the card, by
// component, computed before anything big is allocated; whether it fits the
// budget; and when it does not, the ways out with numbers. Plain C++ (no
// CUDA): `voltad --plan` runs it on any machine, and the CUDA backend sizes
// its buffers with the same functions (cuda_workspace_bytes,
// kv_bytes_per_token), so the plan and the allocations agree.
// docs/PLANNING.md explains each component and the assumptions.
//
//   budget  = vram_fraction x card total
//   fixed   = others' usage + CUDA context + weights (repacked)
//             + workspace + CUDA graphs
//   fits   <=> fixed + KV of one full-context sequence <= budget
//   KV pool = what the budget leaves after `fixed`, in blocks of 16 tokens,
//             capped by max_context x max_sequences; or memory.kv_cache_bytes
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/result.h"

namespace voltad {

enum class KvCacheType {
  Fp16,  // K and V as fp16
  Int8,  // int8 values plus one fp16 scale per head per token
};
const char* kv_cache_type_name(KvCacheType type);  // "fp16", "int8"

// The engine's configured limits (engine.* in the config).
struct EngineLimits {
  int64_t max_context = 4096;       // tokens per sequence (prompt + output)
  int64_t max_sequences = 16;       // sequences in one decode step
  int64_t max_batch_tokens = 2048;  // tokens in one engine step
  KvCacheType kv_cache_type = KvCacheType::Fp16;
};

// The CUDA backend's device buffers other than weights and KV cache, in
// bytes, each rounded up to 256. The backend carves them, in this order, out
// of one allocation of total() bytes (engine/backend_cuda.cpp), so the plan
// and the allocation are the same number by construction.
// T = max_batch_tokens, S = max_sequences, W = max(dim, q_dim, ffn_dim).
struct CudaWorkspace {
  uint64_t residual;            // (T, dim) fp32: the residual stream
  uint64_t normed;              // (T, dim) fp32: RMSNorm output
  uint64_t qkv;                 // (T, q_dim + 2 kv_dim) fp32
  uint64_t attention_out;       // (T, q_dim) fp32
  uint64_t ffn_gate_up;         // (T, 2 ffn_dim) fp32
  uint64_t quantized_x;         // (T, W, 2) int8: two-level activations for the dp4a matvecs
  uint64_t quantized_x_scales;  // (T, W/32, 4) fp32: {d1, d2, sum x, 0} per 32 values
  uint64_t selected;            // (S, dim) fp32: the rows whose logits are computed
  uint64_t logits;              // (S, n_vocab) fp32
  uint64_t
      candidates;  // (S, kMaxCandidates) int32 ids + fp32 logits, S fp64 log_z, S noise: GPU top-k
  uint64_t topk_scratch;        // (S, ceil(n_vocab / kTopKChunk), kMaxCandidates) id+logit pairs;
                                // 0 for one chunk, or a vocabulary the GPU top-k cannot take
  uint64_t step_indices;        // (5 T + S ceil(max_context/16)) int32: per token its id,
                                // position, KV slot, block-table row and logits row; then
                                // the block tables, one row per sequence
  uint64_t attention_partials;  // (S, n_heads, splits, 4 + head_dim) fp32: split-K decode,
                                // splits = min(64, ceil(max_context / 16))
  uint64_t attention_arrivals;  // (S, n_kv_heads) uint32: the split-K pieces of each
                                // (sequence, KV head) counted in, for the combine in pass 1
  uint64_t gemm_split;          // ceil(dim/32) uint32 arrivals (rounded up to 256), then
                                // (ceil(dim/32), 2, 32, 32) fp32: the narrow sm_80 GEMM's
                                // blocks splitting k on main-stream products of up to dim
                                // rows (wo and the Q4_K w_down of a Q4_K_M model)
  uint64_t norm_pieces;         // n8 = min(T rounded up to 8, 16): (n8, dim) fp16 and a
                                // 4-byte x sum per 32 values (the narrow GEMMs' x), then
                                // (n8, ceil(dim/32)) fp32 sums of squares, n8 fp32
                                // scales and a uint32 counter: the next
                                // RMSNorm made in pieces by a narrow wo or w_down
                                // (kernels/gemm_wmma.h, NormPieces)
  uint64_t swiglu_fused;        // n8 = min(T rounded up to 8, 32): (n8, ffn_dim) fp16 and a
                                // 4-byte x sum per 32 values: w_down's x, SwiGLU made by
                                // gate|up's blocks (kernels/gemm_wmma.h, SwigluOut)
  uint64_t total() const;
};
CudaWorkspace cuda_workspace_bytes(const ModelConfig& model, const EngineLimits& limits);

// Mirrors of the kernels' constants (kernels/matvec.h, kernels/attention.h;
// a CUDA build checks they agree): activations are quantized in blocks of
// 32 values, and split-K attention cuts a context into at most 64 pieces of
// at least 16 positions.
constexpr int64_t kActivationBlockValues = 32;
constexpr int64_t kAttentionMaxSplits = 64;
constexpr int64_t kAttentionMinSplitTokens = 16;
constexpr int64_t kAttentionPartialHeader = 4;  // floats before a partial's head_dim sums
// The narrow sm_80 GEMM's split k (kernels/gemm_sm80.h): blocks of 32 rows
// and up to 32 tokens, 2 splits.
constexpr int64_t kNarrowSplitRows = 32;
constexpr int64_t kNarrowSplitTokens = 32;
constexpr int64_t kNarrowSplitCount = 2;
// The most tokens of a step whose next norm is made in pieces
// (kernels/gemm_wmma.h, kNormPiecesMaxTokens).
constexpr int64_t kNormPiecesMaxTokens = 16;
// The most tokens of a step whose SwiGLU gate|up makes (kernels/gemm_wmma.h,
// kGemmNarrowMaxTokens).
constexpr int64_t kSwigluFusedMaxTokens = 32;
// Tokens per KV cache block (KvBlockPool::kBlockTokens).
constexpr int64_t kKvBlockTokens = 16;
// Values per block of the GPU top-k's first pass (kernels/topk.h).
constexpr int64_t kTopKChunkValues = 4096;
// The GPU top-k takes a vocabulary of at least kMaxCandidates whose
// ceil(n_vocab / kTopKChunkValues) x kMaxCandidates first-pass pairs are at
// most 4096 (kernels/topk.h: n_vocab <= 262144); else the CUDA backend picks
// candidates on the host and needs no scratch.
constexpr int64_t kTopKMaxPairs = 4096;
int64_t topk_chunks(int64_t n_vocab);
bool gpu_topk_fits(int64_t n_vocab);

// K and V of one token over all layers: 2 x n_layers x kv_dim x 2 bytes
// (fp16), or 2 x n_layers x (kv_dim bytes + 2 bytes per KV head) (int8).
uint64_t kv_bytes_per_token(const ModelConfig& model, KvCacheType type);

// Decode-step graphs: the CUDA backend captures one per batch size, 1 to
// max_sequences, when it is created. Each is estimated at kGraphBytes
// (docs/PLANNING.md).
constexpr uint64_t kGraphBytes = 4ull << 20;
int64_t cuda_graph_count(int64_t max_sequences);

// What a CUDA context plus voltad's kernels takes when it cannot be measured
// (--plan without a GPU): 400 MiB, the middle of the 300-500 MiB that CUDA
// >= 11.7 contexts with lazy module loading take (docs/PLANNING.md).
constexpr uint64_t kAssumedCudaContextBytes = 400ull << 20;

// Device bytes of the weights once repacked (engine/weight_repack.h): exact,
// and the size of the one allocation the CUDA backend places them in.
// Matrices take packed_layout_for(type, rows, cols).total_bytes, with q/k/v
// and gate/up as the backend stacks them (projection_stacks: one layout of
// the summed rows, and one bias vector, per stack); vectors (norms, biases)
// are F32 on the device; RoPE's head_dim/2 inverse
// frequencies (with a file's rope_freqs folded in) are one more F32 vector.
// Every piece starts at a 256-byte boundary. A tied output is the embedding
// and is counted once. Error: a type the CUDA backend cannot run.
Result<uint64_t> repacked_weight_bytes(const ModelWeights& weights, const ModelConfig& config);

struct DeviceMemory {
  std::string name;                                   // "Tesla V100-SXM2-32GB", or "assumed"
  uint64_t total_bytes = 0;                           // the card's memory
  uint64_t used_by_others = 0;                        // held by other processes when voltad starts
  uint64_t context_bytes = kAssumedCudaContextBytes;  // CUDA context + libraries
  bool context_measured = false;
};

struct MemoryLimits {
  double vram_fraction = 0.90;  // memory.vram_fraction
  uint64_t kv_cache_bytes = 0;  // memory.kv_cache_bytes; 0: what the budget leaves
};

struct PlanComponent {
  std::string name;
  uint64_t bytes = 0;
  std::string note;  // how it was obtained, e.g. "measured", "assumed", "4 buckets x 4 MiB"
};

struct KvPoolPlan {
  uint64_t bytes_per_token = 0;
  uint64_t block_bytes = 0;  // kKvBlockTokens tokens
  int64_t blocks = 0;
  int64_t tokens = 0;          // blocks x 16
  int64_t full_sequences = 0;  // sequences of max_context tokens the pool holds
  uint64_t bytes = 0;          // blocks x block_bytes
  bool capped = false;         // limited by max_context x max_sequences, not the budget
};

struct VramPlan {
  // Inputs, kept for rendering.
  std::string model_name;
  EngineLimits limits;
  MemoryLimits memory;
  DeviceMemory device;
  uint64_t budget_bytes = 0;  // vram_fraction x total
  // Others' usage, context, weights, workspace, graphs, KV pool: their sum
  // is planned_bytes. When the plan does not fit, the KV row holds what one
  // full-context sequence needs.
  std::vector<PlanComponent> components;
  uint64_t planned_bytes = 0;
  CudaWorkspace workspace{};
  KvPoolPlan kv;
  bool fits = false;
  std::string refusal;                // why it does not fit (one sentence), "" when it fits
  std::vector<std::string> ways_out;  // concrete changes, each with numbers
};

// The plan for a model of `config` whose weights take `weight_bytes` on the
// device (repacked_weight_bytes).
VramPlan plan_vram(const ModelConfig& config, uint64_t weight_bytes, const EngineLimits& limits,
                   const MemoryLimits& memory, const DeviceMemory& device);

// The plan as a table for people: component, bytes, % of card; the KV pool;
// and when it does not fit, the refusal and the ways out.
std::string vram_plan_text(const VramPlan& plan);

// "31.75 GiB", "400.0 MiB", "512 B".
std::string format_bytes(uint64_t bytes);

}  // namespace voltad
