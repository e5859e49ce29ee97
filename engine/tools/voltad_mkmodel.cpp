// voltad-mkmodel: random-weight GGUF models of real shapes, for benchmarks,
// memory planning and tests. Decode speed and memory do not depend on the
// weights' values, so a Llama-3-8B-shaped Q4_K_M file with random weights
// measures what the real one would.
//
//   voltad-mkmodel --shape llama3-8b --type q4_k_m --tokenizer DIR -o FILE.gguf
//   voltad-mkmodel --shape qwen3-32b --type q4_k_m --tokenizer DIR --dry-run
//
// Tensor types follow llama.cpp's quantizer (llama_tensor_get_type in
// src/llama-quant.cpp); see tensor_type() below. The file carries a real
// vocabulary (Hugging Face tokenizer.json), fitted to the shape's row count.
// Values are drawn so that activations stay finite: every matrix has a
// standard deviation near 0.02 and mean near 0, norm weights are near 1.
// Each row's values come from a generator seeded by (seed, tensor, row), so
// a file is the same however it is written, and nothing is held in memory:
// the writer streams the data as it is generated.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/ggml_types.h"
#include "engine/gguf_writer.h"
#include "engine/tokenizer.h"
#include "engine/whole_number.h"

namespace {

// Set by SIGINT/SIGTERM while the file is written (lock-free: safe in a
// handler), with the signal, for the exit status a shell would report.
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

using voltad::GgmlType;

constexpr int kExitUsage = 64, kExitData = 65, kExitCantCreate = 73;

// Shape flags.
constexpr unsigned kTied = 1;      // no output.weight: logits use token_embd
constexpr unsigned kQkvBias = 2;   // attn_q/k/v.bias (qwen2)
constexpr unsigned kQkNorm = 4;    // attn_q_norm/attn_k_norm (qwen3)
constexpr unsigned kClass70b = 8;  // llama.cpp's LLM_TYPE_70B: attn_v at least Q5_K

struct Shape {
  const char* name;
  const char* arch;
  int64_t dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, context;
  int64_t n_vocab;  // rows of token_embd / output (checkpoints pad past the tokenizer)
  double rope_theta, rms_eps;
  unsigned flags;
  bool has(unsigned flag) const { return (flags & flag) != 0; }
};

// Published hyperparameters (the models' config.json). "tiny" is not a real
// model: a small llama for tests.
// clang-format off
const Shape kShapes[] = {
    {"llama3-8b",    "llama", 4096, 32, 32, 8, 128, 14336,  8192, 128256,  500000, 1e-5, 0},
    {"llama3-70b",   "llama", 8192, 80, 64, 8, 128, 28672,  8192, 128256,  500000, 1e-5, kClass70b},
    {"qwen3-8b",     "qwen3", 4096, 36, 32, 8, 128, 12288, 40960, 151936, 1000000, 1e-6, kQkNorm},
    {"qwen3-32b",    "qwen3", 5120, 64, 64, 8, 128, 25600, 40960, 151936, 1000000, 1e-6, kQkNorm},
    {"qwen2.5-7b",   "qwen2", 3584, 28, 28, 4, 128, 18944, 32768, 152064, 1000000, 1e-6, kQkvBias},
    {"smollm2-135m", "llama",  576, 30,  9, 3,  64,  1536,  8192,  49152,  100000, 1e-5, kTied},
    {"tiny",         "llama",  256,  4,  8, 2,  32,   512,  2048,   8192,   10000, 1e-5, 0},
};
// clang-format on

// ---------------------------------------------------------------- types

enum class Mix { F16, Q8_0, Q4_0, Q4_K_M };

struct MixInfo {
  const char* name;  // --type
  Mix mix;
  uint32_t file_type;  // general.file_type, as llama.cpp numbers its ftypes
};
const MixInfo kMixes[] = {{"q4_k_m", Mix::Q4_K_M, 15},
                          {"q4_0", Mix::Q4_0, 2},
                          {"q8_0", Mix::Q8_0, 7},
                          {"f16", Mix::F16, 1}};

enum class Role { Embedding, Output, AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown };

int64_t block_elems(GgmlType t) {
  return voltad::ggml_type_info(t)->block_elems;
}

// llama.cpp's "use_more_bits": the first and last eighth of the layers and
// every third layer between get the bigger type.
bool use_more_bits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The type llama.cpp's quantizer gives a matrix of `cols` values per row:
// - output.weight (or token_embd.weight when the model ties them): Q6_K,
//   or Q8_0 when cols is not a multiple of the base type's block, or when
//   the base type already is Q8_0;
// - Q4_K_M: attn_v and ffn_down Q6_K where use_more_bits(layer), else Q4_K;
//   in 70B-class models attn_v is at least Q5_K; everything else Q4_K;
// - a K type whose block (256) does not divide cols falls back:
//   Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (SmolLM2's 576 columns).
GgmlType tensor_type(Mix mix, Role role, int64_t layer, const Shape& s, int64_t n_layers,
                     int64_t cols) {
  if (mix == Mix::F16) return GgmlType::F16;
  const GgmlType base = mix == Mix::Q8_0   ? GgmlType::Q8_0
                        : mix == Mix::Q4_0 ? GgmlType::Q4_0
                                           : GgmlType::Q4_K;
  GgmlType t = base;
  if (role == Role::Output || (role == Role::Embedding && s.has(kTied))) {
    if (cols % block_elems(base) != 0)
      t = GgmlType::Q8_0;
    else if (base != GgmlType::Q8_0)
      t = GgmlType::Q6_K;
  } else if (mix == Mix::Q4_K_M && role == Role::AttnV) {
    if (use_more_bits(layer, n_layers)) t = GgmlType::Q6_K;
    if (s.has(kClass70b) && t == GgmlType::Q4_K) t = GgmlType::Q5_K;
  } else if (mix == Mix::Q4_K_M && role == Role::FfnDown && use_more_bits(layer, n_layers)) {
    t = GgmlType::Q6_K;
  }
  if (cols % block_elems(t) != 0) {
    if (t == GgmlType::Q4_K)
      t = GgmlType::Q5_0;
    else if (t == GgmlType::Q5_K)
      t = GgmlType::Q5_1;
    else if (t == GgmlType::Q6_K)
      t = GgmlType::Q8_0;
    if (cols % block_elems(t) != 0) t = GgmlType::F16;
  }
  return t;
}

// ---------------------------------------------------------------- values

// splitmix64 (Steele, Lea and Flood, 2014): fast and well mixed, so one
// generator per row costs nothing.
class RowRng {
 public:
  RowRng(uint64_t seed, uint64_t tensor, uint64_t row)
      : state_(seed * 0x9E3779B97F4A7C15ull ^ (tensor + 1) * 0xC2B2AE3D27D4EB4Full ^ row) {
    next();
  }
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int in(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }
  // Uniform in [-1, 1).
  float symmetric() { return float(int64_t(next() >> 11) - (int64_t(1) << 52)) * 0x1p-52f; }
  void bytes(uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t r = next();
      std::memcpy(p + i, &r, std::min<size_t>(8, n - i));
    }
  }

 private:
  uint64_t state_;
};

void put_half(uint8_t* p, float v) {
  const uint16_t h = voltad::fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Q4_K/Q5_K header after d and dmin: eight 6-bit scales and mins in 12 bytes
// (blocks 0-3 in the low 6 bits of bytes 0-7, blocks 4-7 split over the top
// 2 bits of those and the nibbles of bytes 8-11).
void put_k_scales(uint8_t* s, const uint8_t sc[8], const uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

// The quants are uniform, so std(q) is known per type: the scales below make
// each value's standard deviation about kStd, and mins (where a type has
// them) cancel the quants' mean.
constexpr float kStd = 0.02f;
constexpr float kStdQ4 = 4.61f;    // q in 0..15
constexpr float kStdQ4_0 = 4.18f;  // q - 8 in -7..7, 0 twice as likely (see fill_row)
constexpr float kStdQ5 = 9.23f;    // q in 0..31
constexpr float kStdQ6 = 18.47f;   // q in 0..63
constexpr float kStdQ8 = 73.9f;    // q in -128..127

// One row of `cols` values of `type` at `p`.
void fill_row(GgmlType type, uint8_t* p, int64_t cols, RowRng& r) {
  const auto* info = voltad::ggml_type_info(type);
  const int64_t n_blocks = cols / info->block_elems;
  if (type == GgmlType::F16) {
    const float a = kStd * std::sqrt(3.0f);  // uniform in [-a, a)
    for (int64_t i = 0; i < cols; ++i) put_half(p + 2 * i, a * r.symmetric());
    return;
  }
  for (int64_t b = 0; b < n_blocks; ++b, p += info->block_bytes) {
    switch (type) {
      case GgmlType::Q4_0:  // fp16 d, 16 bytes of nibbles: d*(q-8)
        // q = 0 becomes 8 so that q - 8 is symmetric around 0, as in real
        // files (q - 8 alone would put the mean at -d/2).
        put_half(p, kStd / kStdQ4_0);
        r.bytes(p + 2, 16);
        for (int i = 2; i < 18; ++i) {
          const int lo = p[i] & 15, hi = p[i] >> 4;
          p[i] = uint8_t((lo ? lo : 8) | (hi ? hi : 8) << 4);
        }
        break;
      case GgmlType::Q8_0:  // fp16 d, 32 int8: d*q
        put_half(p, kStd / kStdQ8);
        r.bytes(p + 2, 32);
        break;
      case GgmlType::Q5_0:  // fp16 d, 4 bytes of fifth bits, 16 of nibbles: d*(q-16)
        put_half(p, kStd / kStdQ5);
        r.bytes(p + 2, 20);
        break;
      case GgmlType::Q5_1:  // fp16 d, fp16 m, 4 + 16 bytes: d*q + m
        put_half(p, kStd / kStdQ5);
        put_half(p + 2, -15.5f * kStd / kStdQ5);
        r.bytes(p + 4, 20);
        break;
      case GgmlType::Q4_K: {  // d, dmin, 12 bytes scales, 128 nibbles: d*sc*q - dmin*m
        // sc in 32..47; dmin = 8d and m = sc*15/16 make d*sc*7.5 - dmin*m ~ 0.
        const float d = kStd / (39.5f * kStdQ4);
        put_half(p, d);
        put_half(p + 2, 8 * d);
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; ++j)
          sc[j] = uint8_t(r.in(32, 47)), mn[j] = uint8_t((sc[j] * 15 + 8) / 16);
        put_k_scales(p + 4, sc, mn);
        r.bytes(p + 16, 128);
        break;
      }
      case GgmlType::Q5_K: {  // d, dmin, 12 bytes scales, 32 bytes fifth bits, 128 nibbles
        // sc in 16..31; dmin = 16d and m = sc*31/32 centre q in 0..31.
        const float d = kStd / (23.5f * kStdQ5);
        put_half(p, d);
        put_half(p + 2, 16 * d);
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; ++j)
          sc[j] = uint8_t(r.in(16, 31)), mn[j] = uint8_t((sc[j] * 31 + 16) / 32);
        put_k_scales(p + 4, sc, mn);
        r.bytes(p + 16, 160);
        break;
      }
      case GgmlType::Q6_K:  // 128 low nibbles, 64 of top bits, 16 int8 scales, d: d*sc*(q-32)
        r.bytes(p, 192);
        for (int j = 0; j < 16; ++j) p[192 + j] = uint8_t(int8_t(r.in(12, 20)));
        put_half(p + 208, kStd / (16.0f * kStdQ6));
        break;
      default:
        std::fprintf(stderr, "voltad-mkmodel: internal error: no generator for %s\n",
                     voltad::ggml_type_name(type).c_str());
        std::abort();
    }
  }
}

// ---------------------------------------------------------------- tensors

struct TensorSpec {
  std::string name;
  GgmlType type;
  int64_t cols, rows;  // ne = {cols, rows}; rows == 0 for a vector
  enum class Kind { Matrix, Norm, Bias } kind;
};

std::vector<TensorSpec> model_tensors(const Shape& s, Mix mix, int64_t n_layers) {
  std::vector<TensorSpec> out;
  const int64_t q_dim = s.n_heads * s.head_dim, kv_dim = s.n_kv_heads * s.head_dim;
  auto matrix = [&](std::string name, Role role, int64_t layer, int64_t rows, int64_t cols) {
    out.push_back({std::move(name), tensor_type(mix, role, layer, s, n_layers, cols), cols, rows,
                   TensorSpec::Kind::Matrix});
  };
  auto vec = [&](std::string name, int64_t n, TensorSpec::Kind kind) {
    out.push_back({std::move(name), GgmlType::F32, n, 0, kind});
  };
  using K = TensorSpec::Kind;
  matrix("token_embd.weight", Role::Embedding, 0, s.n_vocab, s.dim);
  for (int64_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", s.dim, K::Norm);
    matrix(p + "attn_q.weight", Role::AttnQ, l, q_dim, s.dim);
    matrix(p + "attn_k.weight", Role::AttnK, l, kv_dim, s.dim);
    matrix(p + "attn_v.weight", Role::AttnV, l, kv_dim, s.dim);
    if (s.has(kQkvBias)) {
      vec(p + "attn_q.bias", q_dim, K::Bias);
      vec(p + "attn_k.bias", kv_dim, K::Bias);
      vec(p + "attn_v.bias", kv_dim, K::Bias);
    }
    if (s.has(kQkNorm)) {
      vec(p + "attn_q_norm.weight", s.head_dim, K::Norm);
      vec(p + "attn_k_norm.weight", s.head_dim, K::Norm);
    }
    matrix(p + "attn_output.weight", Role::AttnOutput, l, s.dim, q_dim);
    vec(p + "ffn_norm.weight", s.dim, K::Norm);
    matrix(p + "ffn_gate.weight", Role::FfnGate, l, s.ffn_dim, s.dim);
    matrix(p + "ffn_up.weight", Role::FfnUp, l, s.ffn_dim, s.dim);
    matrix(p + "ffn_down.weight", Role::FfnDown, l, s.dim, s.ffn_dim);
  }
  vec("output_norm.weight", s.dim, K::Norm);
  if (!s.has(kTied)) matrix("output.weight", Role::Output, 0, s.n_vocab, s.dim);
  return out;
}

// The data of tensor `index` from byte `offset` on (whole rows).
void fill_tensor(const TensorSpec& t, uint64_t seed, uint64_t index, uint8_t* dst, uint64_t offset,
                 uint64_t n_bytes) {
  if (t.kind != TensorSpec::Kind::Matrix) {  // one row of F32
    RowRng r(seed, index, 0);
    for (uint64_t i = 0; i < n_bytes / 4; ++i) {
      const float v = t.kind == TensorSpec::Kind::Norm ? 1.0f + 0.1f * r.symmetric()
                                                       : kStd * std::sqrt(3.0f) * r.symmetric();
      std::memcpy(dst + 4 * i, &v, 4);
    }
    return;
  }
  const auto* info = voltad::ggml_type_info(t.type);
  const uint64_t row_bytes = uint64_t(t.cols) / info->block_elems * info->block_bytes;
  for (uint64_t at = 0; at < n_bytes; at += row_bytes) {
    RowRng r(seed, index, (offset + at) / row_bytes);
    fill_row(t.type, dst + at, t.cols, r);
  }
}

// ---------------------------------------------------------------- vocabulary

// Fits the tokenizer to `n_vocab` rows the way checkpoints do: a longer
// embedding is padded with unused "[PADn]" tokens (Qwen: 151936 rows for
// 151669 tokens); a shorter one (a small shape given a large tokenizer)
// keeps the first normal tokens, every special token, and the merges whose
// parts and result are kept, so the vocabulary stays a valid BPE.
voltad::Status fit_vocabulary(voltad::TokenizerData& t, int64_t n_vocab) {
  using voltad::TokenType;
  if (t.token_types.empty()) t.token_types.assign(t.tokens.size(), int32_t(TokenType::Normal));
  if (int64_t(t.tokens.size()) <= n_vocab) {
    while (int64_t(t.tokens.size()) < n_vocab) {
      t.tokens.push_back("[PAD" + std::to_string(t.tokens.size()) + "]");
      t.token_types.push_back(int32_t(TokenType::Unused));
    }
    return {};
  }
  auto is_special = [&](size_t id) {
    return t.token_types[id] == int32_t(TokenType::Control) ||
           t.token_types[id] == int32_t(TokenType::UserDefined);
  };
  int64_t n_special = 0;
  for (size_t id = 0; id < t.tokens.size(); ++id) n_special += is_special(id);
  const int64_t n_normal = n_vocab - n_special;
  if (n_normal < 256 + 1) {
    return voltad::make_error("the shape's vocabulary (" + std::to_string(n_vocab) +
                              " rows) cannot hold the " + std::to_string(n_special) +
                              " special tokens of the tokenizer plus its 256 byte "
                              "tokens; use a tokenizer with fewer special tokens");
  }
  std::vector<int32_t> new_id(t.tokens.size(), -1);
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::unordered_set<std::string> kept_normal;
  for (size_t id = 0; id < t.tokens.size() && int64_t(tokens.size()) < n_normal; ++id) {
    if (is_special(id)) continue;
    new_id[id] = int32_t(tokens.size());
    kept_normal.insert(t.tokens[id]);
    tokens.push_back(t.tokens[id]);
    types.push_back(t.token_types[id]);
  }
  for (size_t id = 0; id < t.tokens.size(); ++id) {
    if (!is_special(id)) continue;
    new_id[id] = int32_t(tokens.size());
    tokens.push_back(t.tokens[id]);
    types.push_back(t.token_types[id]);
  }
  std::vector<std::string> merges;
  for (const std::string& m : t.merges) {
    const size_t space = m.find(' ');
    if (space == std::string::npos) continue;
    const std::string a = m.substr(0, space), b = m.substr(space + 1);
    if (kept_normal.count(a) && kept_normal.count(b) && kept_normal.count(a + b))
      merges.push_back(m);
  }
  for (int32_t* id : {&t.bos_id, &t.eos_id, &t.eot_id, &t.pad_id})
    if (*id >= 0) *id = size_t(*id) < new_id.size() ? new_id[size_t(*id)] : -1;
  t.tokens = std::move(tokens);
  t.token_types = std::move(types);
  t.merges = std::move(merges);
  return {};
}

// ---------------------------------------------------------------- output

std::string shape_text(const TensorSpec& t) {
  return t.rows ? "{" + std::to_string(t.cols) + ", " + std::to_string(t.rows) + "}"
                : "{" + std::to_string(t.cols) + "}";
}

uint64_t tensor_bytes(const TensorSpec& t) {
  const auto* info = voltad::ggml_type_info(t.type);
  return uint64_t(t.cols) * uint64_t(std::max<int64_t>(t.rows, 1)) / info->block_elems *
         info->block_bytes;
}

// The tensor table, bytes per type, and the file's size.
void print_table(const std::vector<TensorSpec>& tensors, uint64_t file_bytes) {
  std::printf("%-32s %-5s %-16s %14s\n", "tensor", "type", "shape", "bytes");
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>>
      by_type;  // name -> values, bytes
  for (const TensorSpec& t : tensors) {
    std::printf("%-32s %-5s %-16s %14llu\n", t.name.c_str(), voltad::ggml_type_name(t.type).c_str(),
                shape_text(t).c_str(), (unsigned long long)tensor_bytes(t));
    const std::string type = voltad::ggml_type_name(t.type);
    auto it =
        std::find_if(by_type.begin(), by_type.end(), [&](auto& e) { return e.first == type; });
    if (it == by_type.end()) it = by_type.insert(by_type.end(), {type, {0, 0}});
    it->second.first += uint64_t(t.cols) * uint64_t(std::max<int64_t>(t.rows, 1));
    it->second.second += tensor_bytes(t);
  }
  std::printf("by type:\n");
  for (auto& [type, n] : by_type)
    std::printf("  %-5s %8.3f G values %10.3f GB\n", type.c_str(), n.first / 1e9, n.second / 1e9);
  std::printf("total file bytes: %llu (%.3f GB, %.3f GiB)\n", (unsigned long long)file_bytes,
              file_bytes / 1e9, file_bytes / double(1ull << 30));
}

// "\r 1.23 / 4.92 GB (25%)" (MB below a GB) on a terminal, a line per 10%
// otherwise.
class Progress {
 public:
  Progress() : tty_(isatty(2) != 0) {}
  void operator()(uint64_t written, uint64_t total) {
    const int percent = total ? int(written * 100 / total) : 100;
    // A terminal line per percent; a log line per 10%.
    const int step = tty_ ? percent : percent / 10;
    if (step == last_) return;
    last_ = step;
    // GB from 1 GB up, MB below (a small model read "0.00 / 0.00 GB").
    const bool gb = total >= 1'000'000'000;
    const double unit = gb ? 1e9 : 1e6;
    std::fprintf(stderr, "%svoltad-mkmodel: wrote %.2f / %.2f %s (%d%%)%s", tty_ ? "\r" : "",
                 written / unit, total / unit, gb ? "GB" : "MB", percent,
                 tty_ && written != total ? "" : "\n");
  }

 private:
  bool tty_;
  int last_ = -1;
};

constexpr const char* kUsage =
    "usage: voltad-mkmodel --shape NAME --type q4_k_m|q4_0|q8_0|f16 --tokenizer DIR (-o FILE.gguf "
    "| --dry-run)\n"
    "       [--layers N] [--seed S]\n"
    "  --tokenizer DIR  a Hugging Face tokenizer.json (+ tokenizer_config.json), e.g. "
    "../shared/tokenizers/llama3\n"
    "  -o FILE.gguf     the file to write; one already there is replaced only once the new\n"
    "                   one is complete (written beside it, then renamed; Ctrl-C leaves it as it "
    "was)\n"
    "  --dry-run        print the tensor table and the file size; write nothing\n"
    "  --layers N       fewer (or more) layers than the real model\n"
    "  --seed S         random seed (default 1)\n"
    "shapes:";

int usage(const std::string& why) {
  std::fprintf(stderr, "voltad-mkmodel: %s\n%s", why.c_str(), kUsage);
  for (const Shape& s : kShapes) std::fprintf(stderr, " %s", s.name);
  std::fprintf(stderr, "\n");
  return kExitUsage;
}

using voltad::whole_number;

// Partial files an earlier write left beside OUT (PATH.partial- and 8 hex
// digits: GgufWriter::write_file): a process killed outright (SIGKILL, a
// crash, the power) cannot remove its own. Named, not removed: another
// voltad-mkmodel may be writing one of them now.
void warn_stale_partials(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target = fs::canonical(out, ec);  // after symlinks, as write_file
  if (ec) target = fs::path(out);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".partial-";
  ec.clear();
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!std::all_of(name.begin() + long(prefix.size()), name.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
      continue;
    std::fprintf(stderr,
                 "voltad-mkmodel: warning: %s is a partial file left by an earlier write that "
                 "was killed before it could remove it; delete it unless another voltad-mkmodel "
                 "is writing %s now\n",
                 it->path().c_str(), out.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_name, type_name, tokenizer_dir, out;
  int64_t layers = 0;
  uint64_t seed = 1;
  bool dry_run = false;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& v) {
      if (i + 1 >= args.size()) return false;
      v = args[++i];
      return true;
    };
    std::string v;
    if (a == "--version") {
      std::printf("voltad-mkmodel %s\n", VOLTAD_VERSION);
      return 0;
    }
    if (a == "-h" || a == "--help") {
      std::printf("voltad-mkmodel: random-weight GGUF models of real shapes\n%s", kUsage);
      for (const Shape& s : kShapes) std::printf(" %s", s.name);
      std::printf("\n");
      return 0;
    } else if (a == "--dry-run") {
      dry_run = true;
    } else if (a == "--shape" || a == "--type" || a == "--tokenizer" || a == "-o") {
      if (!value(v)) return usage(a + " needs a value");
      (a == "--shape"       ? shape_name
       : a == "--type"      ? type_name
       : a == "--tokenizer" ? tokenizer_dir
                            : out) = v;
    } else if (a == "--layers") {
      if (!value(v) || !whole_number(v, layers) || layers < 1 || layers > 1000)
        return usage("--layers needs a number from 1 to 1000");
    } else if (a == "--seed") {
      if (!value(v) || !whole_number(v, seed))
        return usage("--seed takes a whole number, 0 to 18446744073709551615, not '" + v + "'");
    } else {
      return usage("unknown argument '" + a + "'");
    }
  }
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if (shape_name == s.name) shape = &s;
  if (!shape)
    return usage(shape_name.empty() ? "--shape is required" : "unknown shape '" + shape_name + "'");
  const MixInfo* mix_info = nullptr;
  for (const MixInfo& m : kMixes)
    if (type_name == m.name) mix_info = &m;
  if (!mix_info) return usage("--type must be q4_k_m, q4_0, q8_0 or f16");
  const Mix mix = mix_info->mix;
  if (tokenizer_dir.empty())
    return usage("--tokenizer DIR is required (the file carries a real vocabulary)");
  if (out.empty() == !dry_run) return usage("give either -o FILE.gguf or --dry-run");

  auto tok = voltad::tokenizer_data_from_hf_json(tokenizer_dir + "/tokenizer.json",
                                                 tokenizer_dir + "/tokenizer_config.json");
  if (!tok) {
    std::fprintf(stderr, "voltad-mkmodel: %s\n", tok.error().message.c_str());
    return kExitData;
  }
  voltad::TokenizerData& t = tok.value();
  if (auto st = fit_vocabulary(t, shape->n_vocab); !st) {
    std::fprintf(stderr, "voltad-mkmodel: %s: %s\n", tokenizer_dir.c_str(),
                 st.error().message.c_str());
    return kExitData;
  }
  const int64_t n_layers = layers ? layers : shape->n_layers;
  const std::string arch = shape->arch;

  voltad::GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", std::string("voltad random ") + shape->name + " " + type_name);
  w.add_u32("general.file_type", mix_info->file_type);
  w.add_u32("general.quantization_version", 2);
  w.add_u32(arch + ".context_length", uint32_t(shape->context));
  w.add_u32(arch + ".embedding_length", uint32_t(shape->dim));
  w.add_u32(arch + ".block_count", uint32_t(n_layers));
  w.add_u32(arch + ".feed_forward_length", uint32_t(shape->ffn_dim));
  w.add_u32(arch + ".attention.head_count", uint32_t(shape->n_heads));
  w.add_u32(arch + ".attention.head_count_kv", uint32_t(shape->n_kv_heads));
  w.add_u32(arch + ".attention.key_length", uint32_t(shape->head_dim));
  w.add_u32(arch + ".attention.value_length", uint32_t(shape->head_dim));
  w.add_u32(arch + ".rope.dimension_count", uint32_t(shape->head_dim));
  w.add_f32(arch + ".rope.freq_base", float(shape->rope_theta));
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", float(shape->rms_eps));
  w.add_u32(arch + ".vocab_size", uint32_t(shape->n_vocab));
  w.add_string("tokenizer.ggml.model", t.model.empty() ? "gpt2" : t.model);
  w.add_string("tokenizer.ggml.pre", t.pre);
  w.add_string_array("tokenizer.ggml.tokens", t.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", t.token_types);
  w.add_string_array("tokenizer.ggml.merges", t.merges);
  if (t.bos_id >= 0) w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(t.bos_id));
  if (t.eos_id >= 0) w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(t.eos_id));
  if (t.eot_id >= 0) w.add_u32("tokenizer.ggml.eot_token_id", uint32_t(t.eot_id));
  if (t.pad_id >= 0) w.add_u32("tokenizer.ggml.padding_token_id", uint32_t(t.pad_id));
  w.add_bool("tokenizer.ggml.add_bos_token", t.add_bos);
  if (!t.chat_template.empty()) w.add_string("tokenizer.chat_template", t.chat_template);

  const std::vector<TensorSpec> tensors = model_tensors(*shape, mix, n_layers);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = tensors[i];
    std::vector<uint64_t> ne = {uint64_t(spec.cols)};
    if (spec.rows) ne.push_back(uint64_t(spec.rows));
    w.add_tensor_generated(spec.name, spec.type, std::move(ne),
                           [&tensors, seed, i](uint8_t* dst, uint64_t offset, uint64_t n_bytes) {
                             fill_tensor(tensors[i], seed, i, dst, offset, n_bytes);
                           });
  }
  std::fprintf(stderr, "voltad-mkmodel: %s %s: %lld layers, %lld tokens, %zu tensors, %.3f GB\n",
               shape->name, type_name.c_str(), (long long)n_layers, (long long)shape->n_vocab,
               tensors.size(), w.file_size() / 1e9);
  if (dry_run) {
    print_table(tensors, w.file_size());
    return 0;
  }
  warn_stale_partials(out);
  const auto start = std::chrono::steady_clock::now();
  Progress progress;
  // Ctrl-C or SIGTERM stops the write: the partial file is removed and a
  // file already at OUT is left as it was (write_file writes beside it).
  struct sigaction stop {};
  stop.sa_handler = [](int signal) {
    g_stop_signal.store(signal);
    g_stop.store(true);
  };
  stop.sa_flags = SA_RESTART;  // a write in progress finishes; the next one sees the flag
  sigemptyset(&stop.sa_mask);
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  auto st = w.write_file(
      out, [&](uint64_t written, uint64_t total) { progress(written, total); }, &g_stop);
  if (!st) {
    if (isatty(2)) std::fputc('\n', stderr);  // after the progress line's \r
    std::fprintf(stderr, "voltad-mkmodel: %s\n", st.error().message.c_str());
    // 128 + the signal, as a shell reports it (130 for Ctrl-C, 143 for SIGTERM).
    return g_stop.load() ? 128 + g_stop_signal.load() : kExitCantCreate;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "voltad-mkmodel: wrote %s in %.1f s\n", out.c_str(), seconds);
  return 0;
}
