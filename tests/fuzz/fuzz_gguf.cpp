// libFuzzer target for the GGUF reader and everything that reads a parsed
// file: metadata getters, model config, weight binding, --info text and the
// dequantizers over every tensor's data. The input lives in a vector of
// exactly its size, so AddressSanitizer flags any read past the file.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/dequantize.h"
#include "engine/gguf_file.h"
#include "engine/model_config.h"
#include "engine/model_info.h"
#include "engine/model_weights.h"

using namespace voltad;

namespace {

// Dequantizing is linear in the tensor size; big (valid) tensors in a
// fuzzed file would only slow the search down.
constexpr uint64_t kMaxDecodeElements = uint64_t{1} << 16;

void read_every_key(const GgufFile& file) {
  for (const std::string& key : file.keys()) {
    (void)file.key_type_name(key);
    (void)file.get_string(key);
    (void)file.get_uint(key);
    (void)file.get_int(key);
    (void)file.get_float(key);
    (void)file.get_bool(key);
    (void)file.get_array_size(key);
    (void)file.get_string_view_array(key);
    (void)file.get_int_array(key);
    (void)file.get_float_array(key);
  }
}

void decode_every_tensor(const GgufFile& file) {
  std::vector<float> out;
  for (const GgufTensor& t : file.tensors()) {
    if (!check_supported_type(file, t).ok() || t.n_elements > kMaxDecodeElements) continue;
    out.resize(t.n_elements);
    dequantize_rows(t, 0, t.n_rows(), out.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
  if (!file.ok()) return 0;
  read_every_key(**file);
  decode_every_tensor(**file);
  auto config = read_model_config(**file);
  (void)describe_model(**file, config.ok() ? &*config : nullptr);
  if (config.ok()) (void)bind_model_weights(**file, *config);
  return 0;
}
