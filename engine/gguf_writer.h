// A small GGUF v3 writer: metadata of every value type, tensors of any type
// given as raw bytes, data aligned as the reader expects. Used by tests (to
// build good and deliberately bad files), model generators and the fuzz
// seed corpus. Keys and tensors are written in the order they were added.
//
// Tensors given as bytes are held in memory. Generated tensors
// (add_tensor_generated) are not: write_file() streams the header, then each
// tensor's data through one bounded buffer, asking the generator for a piece
// of rows at a time, so multi-GB model files are written in a few MB of RAM.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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

  // Fills `n_bytes` bytes at `dst`: the piece of a generated tensor's data
  // that starts `offset` bytes into it. Pieces hold whole rows (ne[0] values)
  // and come in order, but a tensor may be generated more than once (by
  // to_bytes() and by write_file()), so the bytes must depend only on where
  // they are, not on how the data was cut into pieces.
  using TensorFill = std::function<void(uint8_t* dst, uint64_t offset, uint64_t n_bytes)>;

  // A tensor whose data is produced by `fill` while the file is written
  // (VOLTAD_CHECK as add_tensor: known type, ne[0] a whole number of blocks).
  void add_tensor_generated(std::string name, GgmlType type, std::vector<uint64_t> ne,
                            TensorFill fill);

  // Called after every piece write_file() writes: bytes written so far and
  // the file's total size (the last call has written == total).
  using WriteProgress = std::function<void(uint64_t written, uint64_t total)>;

  // Size of the file to_bytes()/write_file() produce, without producing it.
  uint64_t file_size() const;
  // Where the data section starts in the file (a multiple of the alignment).
  uint64_t data_offset() const;

  std::vector<uint8_t> to_bytes() const;
  // Streams the file to `path`. A regular file (or none) at `path` is
  // replaced only once the new one is complete: it is written beside it
  // (PATH.partial- and 8 random hex digits), synced and renamed over it, so a failure, an
  // interruption or a reader that has the old file mapped never sees half
  // a file. Anything else at `path` (/dev/full, a pipe) is written
  // directly. On failure the partial file is removed and the error names
  // the path, the byte offset and the tensor being written. `cancel`, when
  // it becomes true (a signal handler may set it), stops the write the
  // same way.
  Status write_file(const std::string& path, const WriteProgress& progress = {},
                    const std::atomic<bool>* cancel = nullptr) const;

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
    std::vector<uint8_t> data;  // empty for generated tensors
    std::optional<uint64_t> offset;
    TensorFill fill;         // generated tensors only
    uint64_t n_bytes = 0;    // size of the data (data.size() unless generated)
    uint64_t row_bytes = 0;  // bytes of one row of ne[0] values (generated tensors)
  };
  // The header (magic, metadata, tensor infos), where each tensor's data
  // lies relative to the data section, and the data section's size.
  struct Layout {
    std::vector<uint8_t> header;
    std::vector<uint64_t> offsets;
    uint64_t data_start = 0;  // header.size() rounded up to the alignment (if any tensor)
    uint64_t data_size = 0;   // including the padding after the last tensor
  };
  Layout layout() const;
  void add_scalar(std::string key, GgufValueType type, const void* bytes, size_t size);

  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace voltad
