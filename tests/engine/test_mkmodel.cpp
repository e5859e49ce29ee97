// voltad-mkmodel through the real binary: generated files load, bind, carry
// a working tokenizer, run on the CPU backend with finite logits, follow
// llama.cpp's Q4_K_M layout, and a dry run of Llama-3-8B matches the size of
// the published Q4_K_M file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/backend_cpu.h"
#include "engine/dequantize.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

using namespace voltad;
namespace fs = std::filesystem;

namespace {

fs::path env_dir(const char* name, const fs::path& fallback) {
  const char* v = std::getenv(name);
  return v ? fs::path(v) : fallback;
}

fs::path source_dir() {
  return env_dir("VOLTAD_SOURCE_DIR", fs::path(__FILE__).parent_path().parent_path().parent_path());
}
fs::path mkmodel() {
  return env_dir("VOLTAD_BIN_DIR", source_dir() / "build" / "bin") / "voltad-mkmodel";
}
fs::path tokenizers() {
  return env_dir("VOLTAD_SHARED_DIR", source_dir() / ".." / "shared") / "tokenizers";
}

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
};

Run run(const std::string& args) {
  Run r;
  const std::string cmd = mkmodel().string() + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "voltad-mkmodel-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::shared_ptr<const Model> generate(const TempDir& dir, const std::string& shape,
                                      const std::string& type, const std::string& extra = "") {
  const fs::path out = dir / (shape + "." + type + ".gguf");
  const Run r = run("--shape " + shape + " --type " + type + " --tokenizer " +
                    (tokenizers() / "llama3").string() + " -o " + out.string() + " " + extra);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("(100%)") != std::string::npos);  // progress reached the end
  auto model = load_model(out.string());
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  return model.value();
}

// Layers whose attn_v and ffn_down llama.cpp's Q4_K_M gives Q6_K: its
// use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2
// (src/llama-quant.cpp), worked out by hand for the layer counts used here.
const std::map<int64_t, std::set<int64_t>> kMoreBitsLayers = {
    {4, {2, 3}},
    {30, {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29}},
    {32, {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}},
};

std::string type_of(const Model& m, const std::string& name) {
  const GgufTensor* t = m.file->find_tensor(name);
  return t ? ggml_type_name(t->type) : "(missing)";
}

// A prompt of 5 tokens, then 3 greedy decode steps: every logit finite and
// the rows not constant.
void run_cpu_steps(const std::shared_ptr<const Model>& model, const Tokenizer& tok) {
  CpuBackendOptions o;
  o.threads = 2;
  o.max_context = 64;
  auto backend = CpuBackend::create(model, o);
  REQUIRE(backend.ok());
  std::vector<int32_t> tokens = tok.encode("The capital of France is", true, false);
  REQUIRE(tokens.size() >= 4);
  int64_t pos = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> chunk_tokens = step == 0 ? tokens : std::vector<int32_t>{tokens.back()};
    REQUIRE((*backend)->kv_pool().reserve(0, pos + int64_t(chunk_tokens.size())));
    BatchChunk c;
    c.seq_id = 0;
    c.start_pos = int32_t(pos);
    c.tokens = chunk_tokens;
    ForwardOutput out;
    auto st = (*backend)->forward(std::span<const BatchChunk>(&c, 1), out);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().message));
    REQUIRE(out.n_rows == 1);
    const auto row = out.row(0);
    float lo = INFINITY, hi = -INFINITY;
    size_t finite = 0, best = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      finite += std::isfinite(row[i]);
      lo = std::min(lo, row[i]);
      hi = std::max(hi, row[i]);
      if (row[i] > row[best]) best = i;
    }
    CHECK(finite == row.size());
    CHECK(hi - lo > 1e-3f);
    CHECK(hi < 1e4f);
    pos += int64_t(chunk_tokens.size());
    tokens.push_back(int32_t(best));
  }
}

// Loads the vocabulary back from the file and checks it still encodes and
// decodes text.
Tokenizer file_tokenizer(const Model& m) {
  auto data = tokenizer_data_from_gguf(*m.file);
  REQUIRE_MESSAGE(data.ok(), (data.ok() ? "" : data.error().message));
  CHECK(int64_t(data->tokens.size()) == m.config.n_vocab);
  auto tok = Tokenizer::create(std::move(data).value());
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().message));
  const std::string text = "Hello world, voltad!";
  const std::vector<int32_t> ids = tok->encode(text, false, false);
  CHECK(ids.size() < text.size());  // merges survived the fitting
  CHECK(tok->decode(ids) == text);
  CHECK(tok->bos() >= 0);
  CHECK(tok->token_piece(tok->bos()) == "<|begin_of_text|>");
  return std::move(tok).value();
}

// Every matrix's values: mean near 0 and standard deviation near 0.02.
void check_value_statistics(const Model& m) {
  std::set<std::string> seen;
  for (const GgufTensor& t : m.file->tensors()) {
    if (t.n_dims != 2) continue;
    const uint64_t rows = std::min<uint64_t>(t.n_rows(), 64);
    std::vector<float> v(rows * t.ne[0]);
    dequantize_rows(t, 0, rows, v.data());
    double sum = 0, sq = 0;
    for (float x : v) sum += x, sq += double(x) * x;
    const double mean = sum / double(v.size()), sd = std::sqrt(sq / double(v.size()) - mean * mean);
    INFO(t.name << " " << ggml_type_name(t.type) << ": mean " << mean << ", sd " << sd);
    CHECK(std::abs(mean) < 2e-3);
    CHECK(sd > 0.016);
    CHECK(sd < 0.024);
    seen.insert(ggml_type_name(t.type));
  }
  MESSAGE("value statistics checked for " << seen.size() << " types");
}

}  // namespace

TEST_CASE("tiny: f16, q4_0 and q4_k_m files load, bind, tokenize and run on the CPU") {
  REQUIRE_MESSAGE(fs::exists(mkmodel()), "build voltad-mkmodel first: " << mkmodel());
  TempDir dir;
  for (const std::string type : {"f16", "q4_0", "q4_k_m"}) {
    CAPTURE(type);
    auto model = generate(dir, "tiny", type);
    const ModelConfig& c = model->config;
    CHECK(c.dim == 256);
    CHECK(c.n_layers == 4);
    CHECK(c.n_vocab == 8192);  // llama3's vocabulary fitted to the shape
    CHECK_FALSE(c.tied_embeddings);
    for (int64_t l = 0; l < 4; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const bool more = kMoreBitsLayers.at(4).count(l) != 0;
      const std::string q = type == "f16" ? "F16" : type == "q4_0" ? "Q4_0" : "Q4_K";
      CHECK(type_of(*model, p + "attn_q.weight") == q);
      CHECK(type_of(*model, p + "attn_v.weight") == (type == "q4_k_m" && more ? "Q6_K" : q));
      CHECK(type_of(*model, p + "ffn_down.weight") == (type == "q4_k_m" && more ? "Q6_K" : q));
      CHECK(type_of(*model, p + "attn_norm.weight") == "F32");
    }
    CHECK(type_of(*model, "output.weight") == (type == "f16" ? "F16" : "Q6_K"));
    CHECK(type_of(*model, "token_embd.weight") == (type == "f16"    ? "F16"
                                                   : type == "q4_0" ? "Q4_0"
                                                                    : "Q4_K"));
    check_value_statistics(*model);
    Tokenizer tok = file_tokenizer(*model);
    run_cpu_steps(model, tok);
  }
}

TEST_CASE(
    "smollm2-135m: tied Q8_0 embedding and 576-column fallbacks, as llama.cpp lays them out") {
  REQUIRE_MESSAGE(fs::exists(mkmodel()), "build voltad-mkmodel first: " << mkmodel());
  TempDir dir;
  auto model = generate(dir, "smollm2-135m", "q4_k_m");
  const ModelConfig& c = model->config;
  CHECK(c.dim == 576);
  CHECK(c.n_layers == 30);
  CHECK(c.n_heads == 9);
  CHECK(c.n_kv_heads == 3);
  CHECK(c.n_vocab == 49152);
  CHECK(c.tied_embeddings);
  // Tied: token_embd is quantized as the output; 576 % 256 != 0 -> Q8_0.
  CHECK(type_of(*model, "token_embd.weight") == "Q8_0");
  CHECK(type_of(*model, "output.weight") == "(missing)");
  for (int64_t l = 0; l < 30; ++l) {
    CAPTURE(l);
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool more = kMoreBitsLayers.at(30).count(l) != 0;
    // Rows of 576 values: Q4_K -> Q5_0 and Q6_K -> Q8_0.
    for (const char* m : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
      CHECK(type_of(*model, p + m + ".weight") == "Q5_0");
    CHECK(type_of(*model, p + "attn_v.weight") == (more ? "Q8_0" : "Q5_0"));
    // ffn_down rows hold 1536 = 6 x 256 values: no fallback.
    CHECK(type_of(*model, p + "ffn_down.weight") == (more ? "Q6_K" : "Q4_K"));
  }
  check_value_statistics(*model);
  run_cpu_steps(model, file_tokenizer(*model));

  auto f16 = generate(dir, "smollm2-135m", "f16");
  CHECK(type_of(*f16, "token_embd.weight") == "F16");
  CHECK(type_of(*f16, "blk.7.ffn_down.weight") == "F16");
  CHECK(type_of(*f16, "output_norm.weight") == "F32");
  run_cpu_steps(f16, file_tokenizer(*f16));
}

TEST_CASE("the same seed gives the same file; another seed another one") {
  REQUIRE_MESSAGE(fs::exists(mkmodel()), "build voltad-mkmodel first: " << mkmodel());
  TempDir dir;
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string tok =
      " --shape tiny --type q4_k_m --tokenizer " + (tokenizers() / "llama3").string();
  REQUIRE(run(tok + " -o " + (dir / "a.gguf").string()).status == 0);
  REQUIRE(run(tok + " -o " + (dir / "b.gguf").string()).status == 0);
  REQUIRE(run(tok + " --seed 2 -o " + (dir / "c.gguf").string()).status == 0);
  const std::string a = read(dir / "a.gguf");
  CHECK(a == read(dir / "b.gguf"));
  CHECK(a.size() == read(dir / "c.gguf").size());
  CHECK(a != read(dir / "c.gguf"));
}

// Parses "name type shape bytes" rows of the --dry-run table into name -> type,
// and the "total file bytes: N" line.
std::map<std::string, std::string> dry_run_types(const std::string& output, uint64_t& total) {
  std::map<std::string, std::string> types;
  std::istringstream in(output);
  total = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("total file bytes: ", 0) == 0) total = std::stoull(line.substr(18));
    std::istringstream fields(line);
    std::string name, type;
    if (fields >> name >> type && name.find(".weight") != std::string::npos) types[name] = type;
  }
  return types;
}

TEST_CASE("dry run: Llama-3-8B Q4_K_M has llama.cpp's layout and the published file size") {
  REQUIRE_MESSAGE(fs::exists(mkmodel()), "build voltad-mkmodel first: " << mkmodel());
  const Run r = run("--shape llama3-8b --type q4_k_m --dry-run --tokenizer " +
                    (tokenizers() / "llama3").string());
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.status == 0);
  uint64_t total = 0;
  const auto types = dry_run_types(r.output, total);
  CHECK(types.size() == 2 + 32 * 9 + 1);  // token_embd, 9 per layer, output_norm, output
  CHECK(types.at("token_embd.weight") == "Q4_K");
  CHECK(types.at("output.weight") == "Q6_K");
  CHECK(types.at("output_norm.weight") == "F32");
  int q6_layers = 0;
  for (int64_t l = 0; l < 32; ++l) {
    CAPTURE(l);
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool more = kMoreBitsLayers.at(32).count(l) != 0;
    q6_layers += more;
    CHECK(types.at(p + "attn_v.weight") == (more ? "Q6_K" : "Q4_K"));
    CHECK(types.at(p + "ffn_down.weight") == (more ? "Q6_K" : "Q4_K"));
    for (const char* m : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
      CHECK(types.at(p + m + ".weight") == "Q4_K");
  }
  CHECK(q6_layers == 16);  // "about half"
  // The published Meta-Llama-3-8B-Instruct Q4_K_M GGUF is 4.92 GB (the size
  // Hugging Face lists for the Q4_K_M files of bartowski's and QuantFactory's
  // Meta-Llama-3-8B-Instruct-GGUF); docs/FORMAT.md computes 4.913 GB of
  // tensor data. Ours adds the same tokenizer metadata.
  CHECK(double(total) > 4.92e9 * 0.995);
  CHECK(double(total) < 4.92e9 * 1.005);
}

TEST_CASE("dry run: Qwen3-32B Q4_K_M (qk-norm, 64 layers) matches the published file size") {
  REQUIRE_MESSAGE(fs::exists(mkmodel()), "build voltad-mkmodel first: " << mkmodel());
  const Run r = run("--shape qwen3-32b --type q4_k_m --dry-run --tokenizer " +
                    (tokenizers() / "qwen3").string());
  REQUIRE(r.status == 0);
  uint64_t total = 0;
  const auto types = dry_run_types(r.output, total);
  CHECK(types.at("blk.0.attn_q_norm.weight") == "F32");
  CHECK(types.at("blk.63.attn_v.weight") == "Q6_K");    // the last eighth
  CHECK(types.at("blk.8.attn_v.weight") == "Q4_K");     // 8 = 64/8: (8 - 8) % 3 != 2
  CHECK(types.at("blk.10.ffn_down.weight") == "Q6_K");  // (10 - 8) % 3 == 2
  // Qwen/Qwen3-32B-GGUF lists its Q4_K_M file at 19.8 GB.
  CHECK(double(total) > 19.8e9 * 0.99);
  CHECK(double(total) < 19.8e9 * 1.01);
}

TEST_CASE("errors: usage, tokenizer, output path") {
  REQUIRE_MESSAGE(fs::exists(mkmodel()), "build voltad-mkmodel first: " << mkmodel());
  const std::string tok = " --tokenizer " + (tokenizers() / "llama3").string();
  Run r = run("--shape nope --type q4_k_m --dry-run" + tok);
  CHECK(r.status == 64);
  CHECK(r.output.find("unknown shape 'nope'") != std::string::npos);
  CHECK(r.output.find("smollm2-135m") != std::string::npos);  // lists the shapes
  r = run("--shape tiny --type q3_k --dry-run" + tok);
  CHECK(r.status == 64);
  r = run("--shape tiny --type f16" + tok);  // neither -o nor --dry-run
  CHECK(r.status == 64);
  r = run("--shape tiny --type f16 --dry-run --tokenizer /nonexistent");
  CHECK(r.status == 65);
  CHECK(r.output.find("/nonexistent/tokenizer.json") != std::string::npos);
  TempDir dir;
  const fs::path out = dir / "no-such-dir" / "x.gguf";
  r = run("--shape tiny --type f16 -o " + out.string() + tok);
  CHECK(r.status == 73);
  CHECK(r.output.find("cannot create '" + out.string() + "'") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}
