// Writes the GGUF fuzz seed corpus into the directory given as argv[1]:
// small valid models of each architecture, a file with every metadata value
// type and a tensor of every supported type, and a few broken files, so the
// fuzzer starts from inputs that reach deep into the parser.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "engine/gguf_writer.h"
#include "tests/engine/test_gguf_support.h"

using namespace voltad;

namespace {

bool save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

test::TinyModelSpec tiny(const std::string& arch) {
  test::TinyModelSpec spec;
  spec.arch = arch;
  spec.dim = 32;
  spec.n_layers = 1;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.ffn_dim = 32;
  spec.n_vocab = 6;
  return spec;
}

std::vector<uint8_t> every_type() {
  GgufWriter w;
  w.set_alignment(64);
  w.add_u8("u8", 1);
  w.add_i8("i8", -1);
  w.add_u16("u16", 2);
  w.add_i16("i16", -2);
  w.add_u32("u32", 3);
  w.add_i32("i32", -3);
  w.add_u64("u64", 4);
  w.add_i64("i64", -4);
  w.add_f32("f32", 0.5f);
  w.add_f64("f64", 0.25);
  w.add_bool("bool", true);
  w.add_string("string", "text");
  w.add_string_array("strings", {"a", "bc"});
  w.add_i32_array("i32s", {1, 2});
  w.add_f32_array("f32s", {1.0f});
  std::mt19937 rng(1);
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    if (!info || !info->supported) continue;
    const uint64_t n = 256;
    w.add_tensor(std::string(info->name), GgmlType(id), {n},
                 test::random_tensor_bytes(GgmlType(id), n, rng));
  }
  return w.to_bytes();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make-gguf-corpus DIR\n");
    return 64;
  }
  const std::string dir = argv[1];
  test::TinyModelSpec tied = tiny("qwen3");
  tied.tied = true;
  test::TinyModelSpec f32 = tiny("llama");
  f32.matrix_type = GgmlType::F32;
  f32.rope_freqs = true;
  const std::vector<uint8_t> llama = test::tiny_model_bytes(tiny("llama"));
  std::vector<uint8_t> truncated(llama.begin(), llama.begin() + long(llama.size() / 2));
  std::vector<uint8_t> bad_count = llama;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bad_count.data() + 16, &huge, 8);
  bool ok = save(dir, "llama_q8_0.gguf", llama) &&
            save(dir, "llama_f32_rope_freqs.gguf", test::tiny_model_bytes(f32)) &&
            save(dir, "qwen2.gguf", test::tiny_model_bytes(tiny("qwen2"))) &&
            save(dir, "qwen3_tied.gguf", test::tiny_model_bytes(tied)) &&
            save(dir, "every_type.gguf", every_type()) && save(dir, "truncated.gguf", truncated) &&
            save(dir, "huge_kv_count.gguf", bad_count) &&
            save(dir, "empty_v2.gguf",
                 {'G', 'G', 'U', 'F', 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  if (!ok) {
    std::fprintf(stderr, "make-gguf-corpus: cannot write into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
