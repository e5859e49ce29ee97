// The VRAM planner on fake devices (V100 16 GB and 32 GB, H200): which
// configurations fit, that the table adds up, that the refusal names the
// ways out with numbers that are true, INT8 KV, others' usage, explicit
// kv_cache_bytes; and the exact repacked weight size of a real file.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/vram_plan.h"
#include "engine/weight_repack.h"
#include "tests/engine/plan_shapes.h"
#include "tests/engine/test_gguf_support.h"

using namespace voltad;

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

// Card totals as nvidia-smi reports them (MiB).
DeviceMemory card(const char* name, uint64_t mib) {
  return test::plan_card(name, mib);
}
const DeviceMemory kV100_16 = card("V100 16 GB", 16160);
const DeviceMemory kV100_32 = card("V100 32 GB", 32510);
const DeviceMemory kH200 = card("H200", 143771);

ModelConfig shape(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t ffn,
                  int64_t vocab) {
  return test::plan_shape(dim, layers, heads, kv_heads, ffn, vocab);
}
const ModelConfig kLlama3_8b = shape(4096, 32, 32, 8, 14336, 128256);
const ModelConfig kQwen3_32b = shape(5120, 64, 64, 8, 25600, 151936);
// Repacked Q4_K_M weights: docs/FORMAT.md gives 4.913 GB for Llama-3-8B;
// voltad-mkmodel --dry-run gives 19.76 GB for the Qwen3-32B file (tensors
// only are a little less; the repacked padding a little more).
constexpr uint64_t kLlama3_8bWeights = 4'913'000'000;
constexpr uint64_t kQwen3_32bWeights = 19'750'000'000;

EngineLimits limits(int64_t context, int64_t sequences = 16, int64_t batch = 2048,
                    KvCacheType kv = KvCacheType::Fp16) {
  return EngineLimits{context, sequences, batch, kv};
}

void check_adds_up(const VramPlan& p) {
  uint64_t sum = 0;
  for (const PlanComponent& c : p.components) sum += c.bytes;
  CHECK(sum == p.planned_bytes);
  REQUIRE(p.components.size() == 6);
  CHECK(p.components[0].bytes == p.device.used_by_others);
  CHECK(p.components[3].bytes == p.workspace.total());
  CHECK(p.components[5].name.find("KV cache pool") == 0);
  if (p.fits) {
    CHECK(p.planned_bytes <= p.budget_bytes);
    CHECK(p.components[5].bytes == p.kv.bytes);
    CHECK(p.kv.tokens == p.kv.blocks * 16);
    CHECK(p.ways_out.empty());
  } else {
    CHECK(p.planned_bytes > p.budget_bytes);
    CHECK_FALSE(p.ways_out.empty());
  }
}

// The number after `prefix` in one of the ways out, or -1.
int64_t way_out_number(const VramPlan& p, const std::string& prefix) {
  for (const std::string& w : p.ways_out) {
    const size_t at = w.find(prefix);
    if (at != std::string::npos) return std::stoll(w.substr(at + prefix.size()));
  }
  return -1;
}

bool has_way_out(const VramPlan& p, const std::string& text) {
  for (const std::string& w : p.ways_out)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("KV bytes per token: fp16, and int8 about half") {
  // Llama-3-8B: 32 layers x 8 KV heads x 128 = 1024 values each for K and V.
  CHECK(kv_bytes_per_token(kLlama3_8b, KvCacheType::Fp16) == 2 * 32 * 1024 * 2);  // 128 KiB
  CHECK(kv_bytes_per_token(kLlama3_8b, KvCacheType::Int8) == 2 * 32 * (1024 + 8 * 2));
  for (const ModelConfig& m : {kLlama3_8b, kQwen3_32b}) {
    const double ratio = double(kv_bytes_per_token(m, KvCacheType::Int8)) /
                         double(kv_bytes_per_token(m, KvCacheType::Fp16));
    CHECK(ratio > 0.5);
    CHECK(ratio < 0.51);
  }
}

TEST_CASE("workspace: each buffer by its formula, 256-byte aligned, total their sum") {
  const CudaWorkspace w = cuda_workspace_bytes(kLlama3_8b, limits(4096));
  CHECK(w.residual == 2048ull * 4096 * 4);
  CHECK(w.normed == 2048ull * 4096 * 4);
  CHECK(w.qkv == 2048ull * (4096 + 2 * 1024) * 4);
  CHECK(w.attention_out == 2048ull * 4096 * 4);
  CHECK(w.ffn_gate_up == 2048ull * 2 * 14336 * 4);
  CHECK(w.quantized_x == 2048ull * (14336 * 2 + 14336 / 32 * 4));
  CHECK(w.quantized_x_scales == 2048ull * (14336 / 32) * 4 * 4);
  CHECK(w.selected == 16 * 4096 * 4);
  CHECK(w.logits == 16ull * 128256 * 4);
  CHECK(w.candidates == 8704);  // 16 x (64 x 8 + 8 + 24), rounded up to 256
  // 128256 / 4096 = 32 first-pass chunks of the top-k, 64 pairs each per sequence.
  CHECK(w.topk_scratch == 16ull * 32 * 64 * 8);
  // Per token: id, position, KV slot, block-table row, logits row; then a
  // block table of 4096 / 16 = 256 entries per sequence.
  CHECK(w.step_indices == (5 * 2048 + 16 * 256) * 4);
  // 4096 positions: the most split-K pieces, 64 (of 64 positions).
  CHECK(w.attention_partials == 16ull * 32 * 64 * (4 + 128) * 4);
  // 256 positions: 16 pieces of 16.
  CHECK(cuda_workspace_bytes(kLlama3_8b, limits(256)).attention_partials == 16ull * 32 * 16 * (4 + 128) * 4);
  CHECK(w.total() == w.residual + w.normed + w.qkv + w.attention_out + w.ffn_gate_up +
                         w.quantized_x + w.quantized_x_scales + w.selected + w.logits +
                         w.candidates + w.topk_scratch + w.step_indices + w.attention_partials +
                         w.attention_arrivals + w.gemm_split + w.norm_pieces + w.swiglu_fused);
  // The next norm in pieces, for up to 16 tokens (T = 2048 here): 16 rows
  // of 4096 fp16 and 128 x sums, then 16 x 128 sums of squares, 16
  // scales and a counter (8,260 bytes, rounded up to 8,448).
  CHECK(w.norm_pieces == 16ull * (4096 * 2 + 128 * 4) + 8448);
  // T = 4: 8 rows (the narrow GEMMs' x is rounded up to 8 tokens); 8 x 129
  // floats and the counter are 4,132 bytes, rounded up to 4,352.
  CHECK(cuda_workspace_bytes(kLlama3_8b, limits(4096, 4, 4)).norm_pieces ==
        8ull * (4096 * 2 + 128 * 4) + 4352);
  // SwiGLU made by gate|up, for up to 32 tokens: 32 rows of 14336 fp16 and
  // 448 x sums (a multiple of 256 bytes).
  CHECK(w.swiglu_fused == 32ull * (14336 * 2 + 448 * 4));
  // T = 4: 8 rows.
  CHECK(cuda_workspace_bytes(kLlama3_8b, limits(4096, 4, 4)).swiglu_fused ==
        8ull * (14336 * 2 + 448 * 4));
  // The narrow GEMM's split k on 4096-row products: 128 row blocks, a
  // counter each (512 bytes), then 2 splits of 32 x 32 fp32 sums each.
  CHECK(w.gemm_split == 512 + 128ull * 2 * 32 * 32 * 4);
  // dim 1536: 48 counters (192 bytes, rounded up to 256) and 48 x 2 blocks of sums.
  CHECK(cuda_workspace_bytes(shape(1536, 28, 12, 3, 8960, 151936), limits(4096)).gemm_split ==
        256 + 48ull * 2 * 32 * 32 * 4);
  // A 4-byte counter per sequence and KV head: 16 x 8, then 512 x 8.
  CHECK(w.attention_arrivals == 16 * 8 * 4);
  CHECK(cuda_workspace_bytes(kLlama3_8b, limits(4096, 512)).attention_arrivals == 512 * 8 * 4);
  // Rounded up to 256 bytes like every region: 16 x 3 x 4 = 192.
  CHECK(cuda_workspace_bytes(shape(1536, 28, 12, 3, 8960, 151936), limits(4096)).attention_arrivals == 256);
  // Qwen3-32B's wo input (q_dim 8192) is wider than dim: the int8 buffer
  // takes the widest matvec input, here ffn_dim.
  const CudaWorkspace q = cuda_workspace_bytes(kQwen3_32b, limits(4096, 1, 16));
  CHECK(q.quantized_x == 16 * (25600 * 2 + 25600 / 32 * 4));
  CHECK(q.attention_out == 16 * 8192 * 4);
  // Its rows round up to 8 (the sm_80 narrow GEMM's fp16 x and x sums); the
  // scales do not.
  const CudaWorkspace odd = cuda_workspace_bytes(kLlama3_8b, limits(4096, 4, 20));
  CHECK(odd.quantized_x == 24ull * (14336 * 2 + 14336 / 32 * 4));
  CHECK(odd.quantized_x_scales == 20ull * (14336 / 32) * 4 * 4);
  // The workspace grows with the batch and the sequences, not with the weights.
  CHECK(cuda_workspace_bytes(kLlama3_8b, limits(4096, 16, 512)).total() < w.total());
  CHECK(cuda_workspace_bytes(kLlama3_8b, limits(4096, 4)).total() < w.total());
  // ... and with the context through the block tables; the split-K scratch
  // stops growing at 64 pieces.
  const CudaWorkspace long_context = cuda_workspace_bytes(kLlama3_8b, limits(65536));
  CHECK(long_context.attention_partials == w.attention_partials);
  CHECK(long_context.step_indices == (5 * 2048 + 16 * 4096) * 4);
  // A vocabulary of one top-k chunk needs no scratch; one beyond the GPU
  // top-k's limit neither (the host picks the candidates).
  ModelConfig small = kLlama3_8b;
  small.n_vocab = 4000;
  CHECK(cuda_workspace_bytes(small, limits(4096)).topk_scratch == 0);
  small.n_vocab = 300000;
  CHECK_FALSE(gpu_topk_fits(small.n_vocab));
  CHECK(cuda_workspace_bytes(small, limits(4096)).topk_scratch == 0);
  CHECK(gpu_topk_fits(262144));
}

TEST_CASE("decode graphs: one per batch size, 1 to max_sequences") {
  CHECK(cuda_graph_count(1) == 1);
  CHECK(cuda_graph_count(2) == 2);
  CHECK(cuda_graph_count(12) == 12);
  CHECK(cuda_graph_count(64) == 64);
  CHECK(cuda_graph_count(0) == 1);
}

TEST_CASE("Llama-3-8B Q4_K_M: fits a V100 16 GB with the defaults, the pool capped by the limits") {
  const VramPlan p = plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(4096), {}, kV100_16);
  INFO(vram_plan_text(p));
  CHECK(p.fits);
  check_adds_up(p);
  CHECK(p.budget_bytes == uint64_t(0.9 * 16160.0 * MiB));
  CHECK(p.kv.capped);
  CHECK(p.kv.blocks == 256 * 16);  // 4096 tokens x 16 sequences
  CHECK(p.kv.full_sequences == 16);
  CHECK(p.kv.bytes == 16ull * 4096 * 128 * 1024);  // 8 GiB
  CHECK(p.components[1].bytes == kAssumedCudaContextBytes);
  CHECK(p.components[2].bytes == kLlama3_8bWeights);
  CHECK(p.components[4].bytes == 16 * kGraphBytes);  // batch sizes 1-16
  const std::string text = vram_plan_text(p);
  CHECK(text.find("Fits: yes.") != std::string::npos);
  CHECK(text.find("4096 blocks = 65536 tokens, 16 full-context sequences") != std::string::npos);
  CHECK(text.find("weights (repacked)") != std::string::npos);
  CHECK(text.find("budget (90% of card)") != std::string::npos);
}

TEST_CASE("a 32B-class Q4_K_M model with a 50K context on a V100 32 GB: refused, with ways out") {
  const VramPlan p = plan_vram(kQwen3_32b, kQwen3_32bWeights, limits(51200), {}, kV100_32);
  const std::string text = vram_plan_text(p);
  INFO(text);
  CHECK_FALSE(p.fits);
  check_adds_up(p);
  // The KV row holds what one 51200-token sequence needs: 12.5 GiB.
  CHECK(p.components[5].bytes == 51200ull * 2 * 64 * 1024 * 2);
  CHECK(text.find("Does not fit: ") != std::string::npos);
  CHECK(text.find("one full-context sequence (51200 tokens)") != std::string::npos);

  // Shorter context: the number given fits, one block more does not.
  const int64_t ctx = way_out_number(p, "engine.max_context: ");
  REQUIRE(ctx > 0);
  CHECK(ctx % 16 == 0);
  CHECK(ctx < 51200);
  CHECK(ctx > 30000);
  CHECK(plan_vram(kQwen3_32b, kQwen3_32bWeights, limits(ctx), {}, kV100_32).fits);
  CHECK_FALSE(plan_vram(kQwen3_32b, kQwen3_32bWeights, limits(ctx + 16), {}, kV100_32).fits);

  // INT8 KV fits, and says how much it holds.
  CHECK(has_way_out(p, "engine.kv_cache_type: int8 fits ("));
  const VramPlan int8 = plan_vram(kQwen3_32b, kQwen3_32bWeights,
                                  limits(51200, 16, 2048, KvCacheType::Int8), {}, kV100_32);
  CHECK(int8.fits);
  CHECK(int8.kv.full_sequences >= 1);
  CHECK(has_way_out(p, std::to_string(int8.kv.blocks) + " blocks"));

  // Fewer sequences cannot help: one sequence is the minimum already.
  CHECK(has_way_out(p, "even engine.max_sequences: 1 does not fit ("));
  CHECK(has_way_out(p, "GiB over)"));
  // A smaller quantization: the bytes that must go.
  const uint64_t over = p.planned_bytes - p.budget_bytes;
  CHECK(has_way_out(p, "must shrink by at least " + format_bytes(over)));
}

TEST_CASE("the same model: H200 fits with room; V100 16 GB cannot hold the weights") {
  const VramPlan h = plan_vram(kQwen3_32b, kQwen3_32bWeights, limits(51200), {}, kH200);
  INFO(vram_plan_text(h));
  CHECK(h.fits);
  check_adds_up(h);
  CHECK_FALSE(h.kv.capped);  // 16 x 12.5 GiB would be more than the card
  CHECK(h.kv.full_sequences >= 8);
  CHECK(h.budget_bytes - h.planned_bytes < h.kv.block_bytes);  // the pool takes what is left

  const VramPlan v = plan_vram(kQwen3_32b, kQwen3_32bWeights, limits(4096), {}, kV100_16);
  INFO(vram_plan_text(v));
  CHECK_FALSE(v.fits);
  check_adds_up(v);
  CHECK(has_way_out(v, "shorter context: no context length fits"));
  CHECK(has_way_out(v, "engine.kv_cache_type: int8 is not enough alone ("));
  CHECK(has_way_out(v, "a smaller quantization: the weights (18.39 GiB) must shrink by at least"));
}

TEST_CASE("INT8 KV: about twice the tokens in the same budget") {
  // Budget-limited pools: 64 sequences of 8192 tokens fit a V100 32 GB in
  // neither type.
  const VramPlan f = plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(8192, 64), {}, kV100_32);
  const VramPlan q = plan_vram(kLlama3_8b, kLlama3_8bWeights,
                               limits(8192, 64, 2048, KvCacheType::Int8), {}, kV100_32);
  REQUIRE(f.fits);
  REQUIRE(q.fits);
  CHECK_FALSE(f.kv.capped);
  CHECK_FALSE(q.kv.capped);
  CHECK(q.kv.bytes_per_token * 2 < f.kv.bytes_per_token * 103 / 100);
  const double gain = double(q.kv.tokens) / double(f.kv.tokens);
  CHECK(gain > 1.9);
  CHECK(gain < 2.0);
  check_adds_up(q);
}

TEST_CASE("memory other processes hold shrinks the pool block for block") {
  const EngineLimits l = limits(8192, 32);
  const VramPlan alone = plan_vram(kLlama3_8b, kLlama3_8bWeights, l, {}, kV100_32);
  DeviceMemory shared = kV100_32;
  shared.used_by_others = 4 * GiB;
  const VramPlan p = plan_vram(kLlama3_8b, kLlama3_8bWeights, l, {}, shared);
  REQUIRE(p.fits);
  check_adds_up(p);
  CHECK(p.components[0].bytes == 4 * GiB);
  const int64_t lost = alone.kv.blocks - p.kv.blocks;
  const int64_t expected = int64_t(4 * GiB / alone.kv.block_bytes);  // 2048 blocks of 2 MiB
  CHECK(lost >= expected);
  CHECK(lost <= expected + 1);

  // So much used by others that it no longer fits: freeing it is a way out.
  shared.used_by_others = 23 * GiB;
  const VramPlan crowded = plan_vram(kLlama3_8b, kLlama3_8bWeights, l, {}, shared);
  INFO(vram_plan_text(crowded));
  CHECK_FALSE(crowded.fits);
  CHECK(has_way_out(crowded, "other processes use 23.00 GiB of the card; it fits if they free "));
}

TEST_CASE("memory.kv_cache_bytes: exact when it fits, refused with numbers when not") {
  MemoryLimits m;
  m.kv_cache_bytes = 3 * GiB;
  const VramPlan p = plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(8192), m, kV100_32);
  REQUIRE(p.fits);
  check_adds_up(p);
  CHECK(p.kv.bytes == 3 * GiB);  // 1536 blocks of 2 MiB
  CHECK(p.kv.blocks == 1536);
  CHECK(p.kv.full_sequences == 3);
  CHECK(p.components[5].note == "memory.kv_cache_bytes");

  m.kv_cache_bytes = 512 * MiB;  // less than one 8192-token sequence (1 GiB)
  const VramPlan small = plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(8192), m, kV100_32);
  INFO(vram_plan_text(small));
  CHECK_FALSE(small.fits);
  CHECK(small.refusal.find("holds 4096 tokens, less than one full-context sequence") !=
        std::string::npos);
  CHECK(has_way_out(small, "memory.kv_cache_bytes: 1073741824 (1.00 GiB) or more"));
  CHECK(way_out_number(small, "engine.max_context: ") == 4096);

  m.kv_cache_bytes = 40 * GiB;  // more than the card
  const VramPlan big = plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(8192), m, kV100_32);
  INFO(vram_plan_text(big));
  CHECK_FALSE(big.fits);
  check_adds_up(big);
  CHECK(big.refusal.find("is more than the") != std::string::npos);
  CHECK(has_way_out(big, "memory.kv_cache_bytes: 0 fits ("));

  // The other ways out keep the fixed pool: where they do not fit, they say
  // why: the bytes over, or a pool that holds less than one sequence (not
  // "0 B over", nor that the weights and workspace alone are too large).
  CHECK(has_way_out(big, "even engine.max_context: 16 is refused ("));
  CHECK(has_way_out(small, "even engine.max_sequences: 1 does not fit (memory.kv_cache_bytes = "));
  CHECK(has_way_out(small, "int8 is not enough alone (memory.kv_cache_bytes = "));
  for (const VramPlan* q : {&small, &big})
    for (const std::string& w : q->ways_out) {
      CAPTURE(w);
      CHECK(w.find(" 0 B ") == std::string::npos);
      CHECK(w.find("alone are too large") == std::string::npos);
    }
}

TEST_CASE("a smaller budget fraction; a larger one as a way out") {
  MemoryLimits m;
  m.vram_fraction = 0.5;
  const VramPlan p = plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(8192, 32), m, kV100_16);
  INFO(vram_plan_text(p));
  CHECK(p.budget_bytes == uint64_t(0.5 * 16160.0 * MiB));
  CHECK(p.fits);
  m.vram_fraction = 0.35;
  const VramPlan tight = plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(8192, 32), m, kV100_16);
  CHECK_FALSE(tight.fits);
  CHECK(has_way_out(tight, "memory.vram_fraction: 0."));
}

TEST_CASE(
    "repacked weight bytes of a real file: packed layouts summed, q/k/v and gate/up stacked by "
    "type, "
    "vectors as F32, tied once") {
  // Each variant names the stacks its layers get (the rest are matrices and
  // vectors of their own): wq/wk/wv and w_gate/w_up of one type are one
  // packed matrix of their summed rows, with their biases one vector.
  struct Variant {
    const char* what;
    test::TinyModelSpec spec;
    std::vector<std::vector<std::string>> stacks;
  };
  auto plain_stacks = [](int layers) {
    std::vector<std::vector<std::string>> s;
    for (int i = 0; i < layers; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      s.push_back({b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"});
      s.push_back({b + "ffn_gate.weight", b + "ffn_up.weight"});
    }
    return s;
  };
  std::vector<Variant> variants(5);
  variants[0].what = "one type: everything stacked";
  variants[1].what = "tied output";
  variants[1].spec.tied = true;
  variants[2].what = "rope_freqs";
  variants[2].spec.rope_freqs =
      true;  // folded into the inverse frequencies, not a tensor of its own
  for (int v = 0; v < 3; ++v) {
    variants[size_t(v)].spec.retype["blk.1.ffn_down.weight"] = GgmlType::Q4_0;
    variants[size_t(v)].stacks = plain_stacks(2);
  }
  variants[3].what = "qwen2 biases; attn_v and ffn_up of another type";
  variants[3].spec.arch = "qwen2";
  variants[3].spec.retype["blk.0.attn_v.weight"] = GgmlType::Q4_0;
  variants[3].spec.retype["blk.1.ffn_up.weight"] = GgmlType::Q4_0;
  variants[3].stacks = {{"blk.0.attn_q.weight", "blk.0.attn_k.weight"},
                        {"blk.0.attn_q.bias", "blk.0.attn_k.bias"},
                        {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"},
                        {"blk.1.attn_q.weight", "blk.1.attn_k.weight", "blk.1.attn_v.weight"},
                        {"blk.1.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias"}};
  variants[4].what = "attn_q alone, then k+v; then nothing stacks";
  variants[4].spec.retype["blk.0.attn_q.weight"] = GgmlType::Q4_0;
  variants[4].spec.retype["blk.1.attn_k.weight"] = GgmlType::Q4_0;
  variants[4].spec.retype["blk.1.ffn_gate.weight"] = GgmlType::F32;
  variants[4].stacks = {{"blk.0.attn_k.weight", "blk.0.attn_v.weight"},
                        {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"}};
  for (const Variant& v : variants) {
    CAPTURE(v.what);
    auto file = GgufFile::from_bytes(test::tiny_model_writer(v.spec).to_bytes(), "tiny.gguf");
    REQUIRE(file.ok());
    auto model = load_model(std::move(file).value());
    REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
    auto bytes = repacked_weight_bytes(model.value()->weights, model.value()->config);
    REQUIRE_MESSAGE(bytes.ok(), (bytes.ok() ? "" : bytes.error().message));
    const GgufFile& f = *model.value()->file;
    // RoPE's inverse frequencies: head_dim / 2 floats, in 256 bytes here.
    uint64_t expected = 256;
    std::set<std::string> in_stacks;
    for (const auto& stack : v.stacks) {
      const GgufTensor* first = f.find_tensor(stack[0]);
      REQUIRE(first != nullptr);
      int64_t rows = 0;
      for (const std::string& name : stack) {
        const GgufTensor* t = f.find_tensor(name);
        REQUIRE(t != nullptr);
        REQUIRE(t->type == first->type);
        rows += t->n_dims == 1 ? int64_t(t->ne[0]) : int64_t(t->ne[1]);
        in_stacks.insert(name);
      }
      auto layout = first->n_dims == 1
                        ? packed_layout_for(GgmlType::F32, 1, rows)
                        : packed_layout_for(first->type, rows, int64_t(first->ne[0]));
      REQUIRE(layout.ok());
      expected += layout->total_bytes;
    }
    for (const GgufTensor& t : f.tensors()) {
      if (t.name == "rope_freqs.weight" || in_stacks.count(t.name)) continue;
      auto layout = t.n_dims == 1 ? packed_layout_for(GgmlType::F32, 1, int64_t(t.ne[0]))
                                  : packed_layout_for(t.type, int64_t(t.ne[1]), int64_t(t.ne[0]));
      REQUIRE(layout.ok());
      expected += layout->total_bytes;
    }
    CHECK(*bytes == expected);
    // Every sub-array is 256-byte aligned, so even a 64-value norm takes 256.
    CHECK(*bytes % 256 == 0);
    CHECK(*bytes > f.file_size() / 2);
  }
}

TEST_CASE("every way out that says it fits does fit, and the next step does not") {
  struct Case {
    std::string what;
    ModelConfig model;
    uint64_t weights;
    EngineLimits limits;
    DeviceMemory device;
  };
  DeviceMemory busy = kV100_32;
  busy.used_by_others = 8 * GiB;
  const std::vector<Case> cases = {
      {"qwen3-32b 50K on a V100 32 GB", kQwen3_32b, kQwen3_32bWeights, limits(51200), kV100_32},
      {"llama3-8b 48K, batch 20480, on a V100 16 GB", kLlama3_8b, kLlama3_8bWeights,
       limits(49152, 16, 20480), kV100_16},
      {"llama3-8b 128K x 64 on a shared V100 32 GB", kLlama3_8b, kLlama3_8bWeights,
       limits(131072, 64, 4096), busy},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const VramPlan p = plan_vram(c.model, c.weights, c.limits, {}, c.device);
    INFO(vram_plan_text(p));
    REQUIRE_FALSE(p.fits);
    auto fits = [&](EngineLimits l) { return plan_vram(c.model, c.weights, l, {}, c.device).fits; };
    int checked = 0;
    if (int64_t n = way_out_number(p, "engine.max_context: "); n > 0) {
      EngineLimits l = c.limits, more = c.limits;
      l.max_context = n;
      more.max_context = n + 16;
      CHECK(fits(l));
      CHECK_FALSE(fits(more));
      ++checked;
    }
    if (int64_t n = way_out_number(p, "engine.max_sequences: ");
        n > 0 && has_way_out(p, "fits (now")) {
      EngineLimits l = c.limits;
      l.max_sequences = n;
      if (has_way_out(p, "engine.max_sequences: " + std::to_string(n) + " fits")) {
        CHECK(fits(l));
        l.max_sequences = n + 1;
        CHECK_FALSE(fits(l));
        ++checked;
      }
    }
    if (int64_t n = way_out_number(p, "engine.max_batch_tokens: "); n > 0) {
      EngineLimits l = c.limits;
      l.max_batch_tokens = n;
      CHECK(fits(l));
      l.max_batch_tokens = n + 16;
      CHECK_FALSE(fits(l));
      ++checked;
    }
    if (has_way_out(p, "engine.kv_cache_type: int8 fits")) {
      EngineLimits l = c.limits;
      l.kv_cache_type = KvCacheType::Int8;
      CHECK(fits(l));
      ++checked;
    }
    for (const std::string& w : p.ways_out) {
      const size_t at = w.find("memory.vram_fraction: ");
      if (at == std::string::npos) continue;
      MemoryLimits m;
      m.vram_fraction = std::stod(w.substr(at + 22));
      CHECK(plan_vram(c.model, c.weights, c.limits, m, c.device).fits);
      m.vram_fraction -= 0.01;
      CHECK_FALSE(plan_vram(c.model, c.weights, c.limits, m, c.device).fits);
      ++checked;
    }
    MESSAGE(c.what << ": " << checked << " ways out checked");
    CHECK(checked >= 2);
  }
  // The 48K Llama case is saved by a smaller workspace alone.
  const VramPlan p =
      plan_vram(kLlama3_8b, kLlama3_8bWeights, limits(49152, 16, 20480), {}, kV100_16);
  CHECK(way_out_number(p, "engine.max_batch_tokens: ") > 2048);
}

// A weight type the CUDA engine has no layout for is the file's fault, on
// the path the daemon's VRAM plan takes (voltad exits 65, which the units
// do not restart): the flag survives the tensor's name being added, for a
// stacked projection and for a matrix of its own.
TEST_CASE("repacked_weight_bytes: a type without a CUDA layout is the model file's fault") {
  auto file = GgufFile::from_bytes(test::tiny_model_writer({}).to_bytes(), "tiny.gguf");
  REQUIRE(file.ok());
  auto model = load_model(std::move(file).value());
  REQUIRE(model.ok());
  const ModelWeights& bound = model.value()->weights;
  REQUIRE(repacked_weight_bytes(bound, model.value()->config).ok());
  for (bool stacked : {true, false}) {
    CAPTURE(stacked);
    ModelWeights w = bound;
    const GgufTensor*& slot = stacked ? w.layers[0].w_gate : w.output;
    GgufTensor retyped = *slot;
    retyped.type = GgmlType::Q2_K;
    slot = &retyped;
    auto bytes = repacked_weight_bytes(w, model.value()->config);
    REQUIRE(!bytes.ok());
    CHECK(bytes.error().model_data);
    CHECK(bytes.error().message.find("'" + retyped.name + "'") != std::string::npos);
    CHECK(bytes.error().message.find("Q2_K") != std::string::npos);
  }
}
