#include "engine/gguf_writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace voltad {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian");

template <class T>
void put(std::vector<uint8_t>& out, T value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// An array payload: element type, count, then the encoded elements.
template <class T>
std::vector<uint8_t> array_payload(GgufValueType type, const std::vector<T>& values) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, static_cast<uint32_t>(type));
  put<uint64_t>(out, values.size());
  for (const T& v : values) put<T>(out, v);
  return out;
}

uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

void GgufWriter::set_alignment(uint32_t alignment) {
  VOLTAD_CHECK(alignment > 0 && std::has_single_bit(alignment));
  alignment_ = alignment;
  add_u32("general.alignment", alignment);
}

void GgufWriter::add_scalar(std::string key, GgufValueType type, const void* bytes, size_t size) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  entries_.push_back({std::move(key), static_cast<uint32_t>(type), {p, p + size}});
}

void GgufWriter::add_u8(std::string key, uint8_t v) {
  add_scalar(std::move(key), GgufValueType::U8, &v, 1);
}
void GgufWriter::add_i8(std::string key, int8_t v) {
  add_scalar(std::move(key), GgufValueType::I8, &v, 1);
}
void GgufWriter::add_u16(std::string key, uint16_t v) {
  add_scalar(std::move(key), GgufValueType::U16, &v, 2);
}
void GgufWriter::add_i16(std::string key, int16_t v) {
  add_scalar(std::move(key), GgufValueType::I16, &v, 2);
}
void GgufWriter::add_u32(std::string key, uint32_t v) {
  add_scalar(std::move(key), GgufValueType::U32, &v, 4);
}
void GgufWriter::add_i32(std::string key, int32_t v) {
  add_scalar(std::move(key), GgufValueType::I32, &v, 4);
}
void GgufWriter::add_u64(std::string key, uint64_t v) {
  add_scalar(std::move(key), GgufValueType::U64, &v, 8);
}
void GgufWriter::add_i64(std::string key, int64_t v) {
  add_scalar(std::move(key), GgufValueType::I64, &v, 8);
}
void GgufWriter::add_f32(std::string key, float v) {
  add_scalar(std::move(key), GgufValueType::F32, &v, 4);
}
void GgufWriter::add_f64(std::string key, double v) {
  add_scalar(std::move(key), GgufValueType::F64, &v, 8);
}

void GgufWriter::add_bool(std::string key, bool v) {
  const uint8_t byte = v ? 1 : 0;
  add_scalar(std::move(key), GgufValueType::Bool, &byte, 1);
}

void GgufWriter::add_string(std::string key, std::string_view v) {
  std::vector<uint8_t> payload;
  put_string(payload, v);
  add_value_raw(std::move(key), static_cast<uint32_t>(GgufValueType::String), std::move(payload));
}

void GgufWriter::add_string_array(std::string key, const std::vector<std::string>& v) {
  std::vector<uint8_t> payload;
  for (const std::string& s : v) put_string(payload, s);
  add_array_raw(std::move(key), static_cast<uint32_t>(GgufValueType::String), v.size(),
                std::move(payload));
}

void GgufWriter::add_i32_array(std::string key, const std::vector<int32_t>& v) {
  add_value_raw(std::move(key), static_cast<uint32_t>(GgufValueType::Array),
                array_payload(GgufValueType::I32, v));
}

void GgufWriter::add_u32_array(std::string key, const std::vector<uint32_t>& v) {
  add_value_raw(std::move(key), static_cast<uint32_t>(GgufValueType::Array),
                array_payload(GgufValueType::U32, v));
}

void GgufWriter::add_f32_array(std::string key, const std::vector<float>& v) {
  add_value_raw(std::move(key), static_cast<uint32_t>(GgufValueType::Array),
                array_payload(GgufValueType::F32, v));
}

void GgufWriter::add_array_raw(std::string key, uint32_t element_type, uint64_t count,
                               std::vector<uint8_t> payload) {
  std::vector<uint8_t> value;
  put<uint32_t>(value, element_type);
  put<uint64_t>(value, count);
  value.insert(value.end(), payload.begin(), payload.end());
  add_value_raw(std::move(key), static_cast<uint32_t>(GgufValueType::Array), std::move(value));
}

void GgufWriter::add_value_raw(std::string key, uint32_t value_type, std::vector<uint8_t> payload) {
  entries_.push_back({std::move(key), value_type, std::move(payload)});
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                            std::vector<uint8_t> data) {
  VOLTAD_CHECK(!ne.empty() && ne.size() <= 4);
  uint64_t n_elements = 1;
  for (uint64_t d : ne) n_elements *= d;
  const GgmlTypeInfo* info = ggml_type_info(type);
  VOLTAD_CHECK(info != nullptr && ne[0] % info->block_elems == 0);
  VOLTAD_CHECK(data.size() == n_elements / info->block_elems * info->block_bytes);
  add_tensor_raw(std::move(name), static_cast<uint32_t>(type), std::move(ne), std::move(data));
}

void GgufWriter::add_tensor_raw(std::string name, uint32_t type, std::vector<uint64_t> ne,
                                std::vector<uint8_t> data, std::optional<uint64_t> offset) {
  tensors_.push_back({std::move(name), type, std::move(ne), std::move(data), offset});
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  out.insert(out.end(), {'G', 'G', 'U', 'F'});
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, entries_.size());
  for (const Entry& e : entries_) {
    put_string(out, e.key);
    put<uint32_t>(out, e.type);
    out.insert(out.end(), e.payload.begin(), e.payload.end());
  }
  // Tensor data is laid out in order, each start aligned; an explicit offset
  // (tests) is written as given and does not move the others.
  std::vector<uint64_t> offsets;
  uint64_t next = 0;
  for (const Tensor& t : tensors_) {
    offsets.push_back(next);
    next = align_up(next + t.data.size(), alignment_);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, t.type);
    put<uint64_t>(out, t.offset.value_or(offsets[i]));
  }
  if (tensors_.empty()) return out;
  const uint64_t data_start = align_up(out.size(), alignment_);
  out.resize(data_start + next, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::memcpy(out.data() + data_start + offsets[i], tensors_[i].data.data(),
                tensors_[i].data.size());
  }
  return out;
}

Status GgufWriter::write_file(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error("cannot create '" + path + "': " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    return make_error("cannot write '" + path +
                      "': " + std::strerror(written ? errno : write_errno));
  }
  return {};
}

}  // namespace voltad
