// A GGUF model file (versions 2 and 3, little-endian), read-only over mmap.
//
// File layout (all integers little-endian):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count
//   kv_count x { string key, u32 value_type, value }
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
//                    u64 offset (relative to the data section) }
//   padding to `alignment` (metadata general.alignment, default 32)
//   data section: each tensor's bytes at its offset (a multiple of alignment)
// where string = u64 length + bytes (no terminator) and an array value is
// u32 element_type, u64 count, count elements.
//
// open() validates the whole header before returning, so every getter and
// every GgufTensor::data below is safe to use without further checks: all
// strings, arrays and tensor bytes are known to lie inside the file.
// Tensors of known but unsupported types are accepted here (so --info can
// describe any file); bind_model_weights refuses them by name.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/ggml_types.h"
#include "engine/result.h"

namespace voltad {

// Metadata value types, as GGUF numbers them.
enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// "u32", "string", "array"; "type 77" for ids outside the enum.
std::string gguf_value_type_name(uint32_t raw);
// A name or key from a file, quoted for a message: '...' with bytes that are
// not printable ASCII escaped as \xNN (no terminal escapes from hostile
// files) and long names cut after 96 characters.
std::string gguf_quoted(std::string_view s);
// Bytes of one value of a fixed-size type; 0 for String and Array.
size_t gguf_scalar_size(GgufValueType type);

struct GgufTensor {
  std::string name;
  GgmlType type;
  uint32_t n_dims;             // 1..4
  std::array<uint64_t, 4> ne;  // ne[0] = elements per row (fastest); unused dims are 1
  uint64_t n_elements;         // product of ne
  uint64_t offset;             // absolute byte offset of the data in the file
  uint64_t n_bytes;            // n_elements / block_elems * block_bytes
  const uint8_t* data;         // n_bytes bytes inside the mapping; valid while the GgufFile lives

  // Rows of ne[0] elements: ne[1] * ne[2] * ne[3].
  uint64_t n_rows() const { return n_elements / ne[0]; }
  // "{576, 49152}": the shape as GGUF orders it, for messages.
  std::string shape_string() const;
};

// One metadata entry, located in the file. Scalars and strings are decoded
// on request from their validated bytes.
struct GgufKeyValue {
  std::string key;
  GgufValueType type;
  GgufValueType array_type;  // element type when type == Array
  uint64_t array_count;      // element count when type == Array
  uint64_t value_offset;     // byte offset of the value (of the first element for arrays)
};

class GgufFile {
 public:
  // Maps `path` read-only (MAP_PRIVATE) and validates it.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Validates a file held in memory; `name` stands in for the path in messages.
  static Result<std::unique_ptr<GgufFile>> from_bytes(std::vector<uint8_t> bytes,
                                                      std::string name = "<memory>");

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

  // Metadata. Each getter returns nullopt when the key is absent or its
  // value does not have a compatible type (use key_type_name to say which).
  bool has(std::string_view key) const;
  std::vector<std::string> keys() const;  // in file order
  const GgufKeyValue* find_key(std::string_view key) const;
  // "u32", "string", "array of string", or "missing": for error messages.
  std::string key_type_name(std::string_view key) const;

  std::optional<std::string> get_string(std::string_view key) const;
  // Any unsigned width, or a signed value that is not negative.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  // Any signed width, or an unsigned value up to INT64_MAX.
  std::optional<int64_t> get_int(std::string_view key) const;
  // f32 or f64.
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Element count of an array (any element type).
  std::optional<uint64_t> get_array_size(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  // Like get_string_array without copies: views into the mapping.
  std::optional<std::vector<std::string_view>> get_string_view_array(std::string_view key) const;
  // Integer elements of any width whose values all fit in int32 (token types).
  std::optional<std::vector<int32_t>> get_int_array(std::string_view key) const;
  // f32 or f64 elements.
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;

 private:
  GgufFile() = default;
  Status parse();
  Status parse_tensor_infos(uint64_t& pos, uint64_t tensor_count);
  Status place_tensors(uint64_t header_end);

  std::string path_;
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;     // mmap'd region (open), or null
  std::vector<uint8_t> owned_;  // the bytes (from_bytes)
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kvs_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace voltad
