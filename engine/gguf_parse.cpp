// The validating GGUF header parser (layout: see gguf_file.h).
//
// Every count, length and offset comes from an untrusted file, so each is
// checked against the bytes that remain before anything is read, allocated
// or multiplied: a truncated or hostile file gets an error that names the
// problem and its byte offset (or tensor), never a crash or a huge reserve.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "engine/gguf_file.h"

namespace voltad {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; a big-endian host needs byte swaps here");

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr uint32_t kMaxDims = 4;
constexpr uint32_t kLastValueType = static_cast<uint32_t>(GgufValueType::F64);

// Smallest possible encodings, used to reject counts that cannot fit in the
// bytes left before reserving memory for them:
//   metadata entry: key (u64 length + 1 byte), u32 type, 1-byte value
//   tensor info: name (u64 length + 1 byte), u32 n_dims, one u64 dim,
//                u32 type, u64 offset
constexpr uint64_t kMinEntryBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

std::string bytes_str(uint64_t n) {
  return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

// Bounds-checked little-endian reads over the file, with errors that say
// what was being read and where.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* bytes, uint64_t size)
      : path_(path), bytes_(bytes), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  Error error(const std::string& message) const { return make_error(path_ + ": " + message); }

  Status need(uint64_t n, const std::string& what) const {
    if (n <= remaining()) return {};
    return error("the file ends (at byte " + std::to_string(size_) + ") inside " + what +
                 " (at byte " + std::to_string(pos_) + ", " + bytes_str(n) +
                 "): the file is truncated or corrupt; download it again");
  }

  template <class T>
  Status read(T& value, const std::string& what) {
    VOLTAD_TRY(need(sizeof(T), what));
    std::memcpy(&value, bytes_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return {};
  }

  // A GGUF string: u64 length, then that many bytes.
  Status read_string(std::string_view& s, const std::string& what) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    VOLTAD_TRY(read(len, what));
    if (len > remaining()) {
      return error(what + " at byte " + std::to_string(at) + " claims a length of " +
                   bytes_str(len) + ", but only " + bytes_str(remaining()) +
                   " remain in the file: the file is truncated or corrupt");
    }
    s = std::string_view(reinterpret_cast<const char*>(bytes_ + pos_), len);
    pos_ += len;
    return {};
  }

  // read_string without a message: false (and no move) where it would fail.
  bool skip_string() {
    uint64_t len = 0;
    if (remaining() < 8) return false;
    std::memcpy(&len, bytes_ + pos_, 8);
    if (len > remaining() - 8) return false;
    pos_ += 8 + len;
    return true;
  }

  Status skip(uint64_t n, const std::string& what) {
    VOLTAD_TRY(need(n, what));
    pos_ += n;
    return {};
  }

 private:
  const std::string& path_;
  const uint8_t* bytes_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Status check_magic(const Reader& r, const uint8_t* bytes, uint64_t size) {
  if (size < 4) {
    return r.error("the file is " + bytes_str(size) + " long, too short to be a GGUF file");
  }
  if (std::memcmp(bytes, "GGUF", 4) == 0) return {};
  // ggml's pre-GGUF formats wrote their magic as a little-endian u32.
  for (const char* legacy : {"lmgg", "fmgg", "tjgg"}) {
    if (std::memcmp(bytes, legacy, 4) == 0) {
      return r.error(
          "this is a legacy GGML/GGJT model file, not GGUF; convert it with a current "
          "llama.cpp or download the GGUF version");
    }
  }
  return r.error("not a GGUF file: it starts with " +
                 gguf_quoted(std::string_view(reinterpret_cast<const char*>(bytes), 4)) +
                 " instead of 'GGUF'");
}

Status check_version(const Reader& r, uint32_t version) {
  if (version == 2 || version == 3) return {};
  if (version == 1) {
    return r.error(
        "GGUF version 1 is not supported (voltad reads versions 2 and 3); re-convert the "
        "model with a current llama.cpp");
  }
  if ((version & 0xffffu) == 0 && (version >> 16) != 0) {
    return r.error(
        "this looks like a big-endian GGUF file (version bytes are swapped); "
        "voltad reads little-endian GGUF only");
  }
  return r.error("unsupported GGUF version " + std::to_string(version) +
                 " at byte 4 (voltad reads versions 2 and 3)");
}

}  // namespace

Status GgufFile::parse() {
  Reader r(path_, bytes_, size_);
  VOLTAD_TRY(check_magic(r, bytes_, size_));
  VOLTAD_TRY(r.skip(4, "the magic"));
  VOLTAD_TRY(r.read(version_, "the header's version"));
  VOLTAD_TRY(check_version(r, version_));
  uint64_t tensor_count = 0, kv_count = 0;
  VOLTAD_TRY(r.read(tensor_count, "the header's tensor count"));
  VOLTAD_TRY(r.read(kv_count, "the header's metadata count"));
  if (kv_count > r.remaining() / kMinEntryBytes) {
    return r.error("the header claims " + std::to_string(kv_count) +
                   " metadata entries, which cannot fit in the " + bytes_str(r.remaining()) +
                   " after it: the file is truncated or corrupt");
  }

  kvs_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string entry = "metadata entry #" + std::to_string(i);
    const uint64_t at = r.pos();
    std::string_view key;
    VOLTAD_TRY(r.read_string(key, "the key of " + entry));
    if (key.empty()) return r.error(entry + " at byte " + std::to_string(at) + " has an empty key");
    if (kv_index_.count(key)) {
      return r.error("metadata key " + gguf_quoted(key) + " appears twice (again at byte " +
                     std::to_string(at) + ")");
    }
    const std::string what = "metadata key " + gguf_quoted(key);
    uint32_t type = 0;
    VOLTAD_TRY(r.read(type, "the value type of " + what));
    if (type > kLastValueType) {
      return r.error(what + " (at byte " + std::to_string(at) + ") has unknown value type " +
                     std::to_string(type) + ": the file is corrupt");
    }
    GgufKeyValue kv{std::string(key), GgufValueType(type), GgufValueType::U8, 0, 0};
    if (kv.type == GgufValueType::Array) {
      uint32_t element_type = 0;
      VOLTAD_TRY(r.read(element_type, "the element type of array " + what));
      VOLTAD_TRY(r.read(kv.array_count, "the length of array " + what));
      if (element_type == uint32_t(GgufValueType::Array)) {
        return r.error(what + " (at byte " + std::to_string(at) +
                       ") is an array of arrays, which voltad does not read");
      }
      if (element_type > kLastValueType) {
        return r.error(what + " (at byte " + std::to_string(at) +
                       ") is an array of unknown value type " + std::to_string(element_type) +
                       ": the file is corrupt");
      }
      kv.array_type = GgufValueType(element_type);
      kv.value_offset = r.pos();
      const uint64_t element_size = gguf_scalar_size(kv.array_type);
      // A string element takes at least its 8-byte length.
      const uint64_t min_size = element_size ? element_size : 8;
      if (kv.array_count > r.remaining() / min_size) {
        return r.error(what + " (at byte " + std::to_string(at) + ") claims " +
                       std::to_string(kv.array_count) + " elements of type " +
                       gguf_value_type_name(element_type) + ", which cannot fit in the " +
                       bytes_str(r.remaining()) + " left: the file is truncated or corrupt");
      }
      if (element_size) {
        VOLTAD_TRY(r.skip(kv.array_count * element_size, "array " + what));
      } else {
        // Vocabularies hold ~10^5 strings: build a message only on failure.
        for (uint64_t j = 0; j < kv.array_count; ++j) {
          if (r.skip_string()) continue;
          std::string_view s;
          VOLTAD_TRY(r.read_string(s, "string #" + std::to_string(j) + " of array " + what));
        }
      }
    } else if (kv.type == GgufValueType::String) {
      kv.value_offset = r.pos();
      std::string_view s;
      VOLTAD_TRY(r.read_string(s, "the value of " + what));
    } else {
      kv.value_offset = r.pos();
      VOLTAD_TRY(r.skip(gguf_scalar_size(kv.type), "the value of " + what));
    }
    kv_index_.emplace(kv.key, kvs_.size());
    kvs_.push_back(std::move(kv));
  }

  if (has("general.alignment")) {
    const std::optional<uint64_t> alignment = get_uint("general.alignment");
    if (!alignment) {
      return r.error("general.alignment has type " + key_type_name("general.alignment") +
                     "; it should be an unsigned integer (u32)");
    }
    if (*alignment == 0 || !std::has_single_bit(*alignment) || *alignment > kMaxAlignment) {
      return r.error("general.alignment = " + std::to_string(*alignment) +
                     " is not a power of two between 1 and 2^30");
    }
    alignment_ = *alignment;
  } else {
    alignment_ = kDefaultAlignment;
  }

  if (tensor_count > r.remaining() / kMinTensorInfoBytes) {
    return r.error("the header claims " + std::to_string(tensor_count) + " tensors, but only " +
                   bytes_str(r.remaining()) +
                   " remain after the metadata: the file is truncated or corrupt");
  }
  uint64_t pos = r.pos();
  VOLTAD_TRY(parse_tensor_infos(pos, tensor_count));
  return place_tensors(pos);
}

Status GgufFile::parse_tensor_infos(uint64_t& pos, uint64_t tensor_count) {
  Reader r(path_, bytes_, size_);
  VOLTAD_TRY(r.skip(pos, "the metadata"));
  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const uint64_t at = r.pos();
    std::string_view name;
    VOLTAD_TRY(r.read_string(name, "the name of tensor #" + std::to_string(i)));
    if (name.empty()) {
      return r.error("tensor #" + std::to_string(i) + " (info at byte " + std::to_string(at) +
                     ") has an empty name");
    }
    const std::string what = "tensor " + gguf_quoted(name);
    if (tensor_index_.count(name)) {
      return r.error(what + " appears twice (again at byte " + std::to_string(at) + ")");
    }
    GgufTensor t{};
    t.name = std::string(name);
    VOLTAD_TRY(r.read(t.n_dims, "the dimension count of " + what));
    if (t.n_dims == 0 || t.n_dims > kMaxDims) {
      return r.error(what + " (info at byte " + std::to_string(at) + ") has " +
                     std::to_string(t.n_dims) + " dimensions; GGUF tensors have 1 to 4");
    }
    t.ne = {1, 1, 1, 1};
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      VOLTAD_TRY(r.read(t.ne[d], "dimension " + std::to_string(d) + " of " + what));
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      // ggml holds sizes in int64: keep every dimension and the product there.
      if (t.ne[d] == 0) {
        return r.error(what + " has an empty dimension ne[" + std::to_string(d) + "] = 0 (shape " +
                       t.shape_string() + "): the file is corrupt");
      }
      if (t.ne[d] > uint64_t(std::numeric_limits<int64_t>::max())) {
        return r.error(what + " has an absurd dimension ne[" + std::to_string(d) +
                       "] = " + std::to_string(t.ne[d]) + " (shape " + t.shape_string() +
                       "): the file is corrupt");
      }
      if (__builtin_mul_overflow(t.n_elements, t.ne[d], &t.n_elements) ||
          t.n_elements > uint64_t(std::numeric_limits<int64_t>::max())) {
        return r.error(what + " has shape " + t.shape_string() +
                       ", whose element count overflows 64 bits: the file is corrupt");
      }
    }
    uint32_t type = 0;
    VOLTAD_TRY(r.read(type, "the type of " + what));
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (!info) {
      // 4 and 5 were Q4_2 and Q4_3, dropped from GGML in 2023: an old file.
      if (type == 4 || type == 5)
        return r.error(what + " has type id " + std::to_string(type) + " (Q4_" +
                       std::to_string(type - 2) +
                       ", removed from GGML in 2023): the file predates GGUF's current "
                       "types; convert the model again");
      return r.error(what + " has unknown type id " + std::to_string(type) +
                     ": the file is corrupt or newer than this voltad");
    }
    t.type = GgmlType(type);
    if (t.ne[0] % info->block_elems != 0) {
      return r.error(what + " has rows of " + std::to_string(t.ne[0]) + " elements (shape " +
                     t.shape_string() + "), not a multiple of the " + std::string(info->name) +
                     " block size " + std::to_string(info->block_elems));
    }
    const uint64_t n_blocks = t.n_elements / info->block_elems;
    if (__builtin_mul_overflow(n_blocks, uint64_t{info->block_bytes}, &t.n_bytes)) {
      return r.error(what + " of shape " + t.shape_string() +
                     " would need more than 2^64 bytes: the file is corrupt");
    }
    VOLTAD_TRY(r.read(t.offset, "the data offset of " + what));
    if (t.offset % alignment_ != 0) {
      return r.error(what + " has data offset " + std::to_string(t.offset) +
                     " (relative to the data section), not a multiple of the alignment " +
                     std::to_string(alignment_) + ": the file is corrupt");
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  pos = r.pos();
  return {};
}

Status GgufFile::place_tensors(uint64_t header_end) {
  Reader r(path_, bytes_, size_);
  // The data section starts at the next multiple of the alignment. With
  // header_end <= size and alignment <= 2^30 this cannot overflow.
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  for (GgufTensor& t : tensors_) {
    const uint64_t relative = t.offset;
    const bool past_end = relative > size_ || data_offset_ > size_ - relative ||
                          t.n_bytes > size_ - (data_offset_ + relative);
    if (past_end) {
      // Saturate for the message: the sum may not fit 64 bits.
      uint64_t absolute = 0;
      const std::string where = __builtin_add_overflow(data_offset_, relative, &absolute)
                                    ? "data section + " + std::to_string(relative)
                                    : std::to_string(absolute);
      return r.error("tensor " + gguf_quoted(t.name) + ": data [offset " + where + ", " +
                     bytes_str(t.n_bytes) + "] runs past the end of the file (size " +
                     std::to_string(size_) + "): the file is truncated or corrupt");
    }
    t.offset = data_offset_ + relative;
    t.data = bytes_ + t.offset;
  }
  // Tensors must not share bytes: sort by offset and compare neighbours.
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& prev = tensors_[order[i - 1]];
    const GgufTensor& cur = tensors_[order[i]];
    if (prev.offset + prev.n_bytes > cur.offset) {
      return r.error("tensors " + gguf_quoted(prev.name) + " [offset " +
                     std::to_string(prev.offset) + ", " + bytes_str(prev.n_bytes) + "] and " +
                     gguf_quoted(cur.name) + " [offset " + std::to_string(cur.offset) +
                     "] overlap: the file is corrupt");
    }
  }
  return {};
}

}  // namespace voltad
