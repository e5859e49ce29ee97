// A small GGUF v3 writer: metadata of every value type, tensors of any type
// given as raw bytes, data aligned as the reader expects. Used by tests (to
// build good and deliberately bad files), model generators and the fuzz
// seed corpus. Keys and tensors are written in the order they were added.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/ggml_types.h"
#include "engine/gguf_file.h"
#include "engine/result.h"

namespace voltad {

class GgufWriter {
 public:
  // Version written in the header (3 by default; tests write others).
  void set_version(uint32_t version) { version_ = version; }
  // Adds general.alignment (u32) and lays the data out with it.
  void set_alignment(uint32_t alignment);

  void add_u8(std::string key, uint8_t v);
  void add_i8(std::string key, int8_t v);
  void add_u16(std::string key, uint16_t v);
  void add_i16(std::string key, int16_t v);
  void add_u32(std::string key, uint32_t v);
  void add_i32(std::string key, int32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_i64(std::string key, int64_t v);
  void add_f32(std::string key, float v);
  void add_f64(std::string key, double v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string_view v);
  void add_string_array(std::string key, const std::vector<std::string>& v);
  void add_i32_array(std::string key, const std::vector<int32_t>& v);
  void add_u32_array(std::string key, const std::vector<uint32_t>& v);
  void add_f32_array(std::string key, const std::vector<float>& v);
  // An array of any element type whose `count` elements are already encoded
  // in `payload` (tests use this for odd and broken arrays).
  void add_array_raw(std::string key, uint32_t element_type, uint64_t count,
                     std::vector<uint8_t> payload);
  // Any value type id with an already-encoded value (tests: bad type ids).
  void add_value_raw(std::string key, uint32_t value_type, std::vector<uint8_t> payload);

  // A tensor; `data` must hold exactly the bytes its type and shape need
  // (VOLTAD_CHECK). ne[0] is the row length.
  void add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                  std::vector<uint8_t> data);
  // Unchecked: any type id and dims, any data; `offset` (relative to the data
  // section) overrides where the info says the data lies.
  void add_tensor_raw(std::string name, uint32_t type, std::vector<uint64_t> ne,
                      std::vector<uint8_t> data, std::optional<uint64_t> offset = std::nullopt);

  std::vector<uint8_t> to_bytes() const;
  Status write_file(const std::string& path) const;

 private:
  struct Entry {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> payload;
  };
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset;
  };
  void add_scalar(std::string key, GgufValueType type, const void* bytes, size_t size);

  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace voltad
