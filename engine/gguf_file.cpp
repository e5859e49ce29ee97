// Opening GGUF files and answering metadata queries. The validating parser
// itself is in gguf_parse.cpp.
#include "engine/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>

namespace voltad {

std::string gguf_value_type_name(uint32_t raw) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  if (raw < std::size(kNames)) return kNames[raw];
  return "type " + std::to_string(raw);
}

std::string gguf_quoted(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 96) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + "'";
}

std::string GgufTensor::shape_string() const {
  std::string s = "{";
  for (uint32_t i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "}";
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  // O_NONBLOCK: a FIFO at the path is refused below instead of waiting
  // for a writer (it changes nothing for a regular file or the mapping).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return make_error("cannot open model file '" + path + "': " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error("cannot stat model file '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(path + ": not a regular file; pass the path of a .gguf model file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return make_error(path + ": the file is empty (an interrupted download?)");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) {
    return make_error("cannot map model file '" + path + "' (" + std::to_string(size) +
                      " bytes): " + std::strerror(map_errno));
  }
  // Every backend reads all the weights soon (the CPU one on every token):
  // start the page cache reading ahead now. Advice only; failure is harmless.
  (void)::madvise(mapping, size, MADV_WILLNEED);

  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->bytes_ = static_cast<const uint8_t*>(mapping);
  file->size_ = size;
  Status parsed = file->parse();
  if (!parsed) return parsed.error();
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_bytes(std::vector<uint8_t> bytes,
                                                       std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->owned_ = std::move(bytes);
  file->bytes_ = file->owned_.data();
  file->size_ = file->owned_.size();
  Status parsed = file->parse();
  if (!parsed) return parsed.error();
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_) ::munmap(mapping_, size_);
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

bool GgufFile::has(std::string_view key) const {
  return kv_index_.count(key) != 0;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(kvs_.size());
  for (const GgufKeyValue& kv : kvs_) out.push_back(kv.key);
  return out;
}

const GgufKeyValue* GgufFile::find_key(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

std::string GgufFile::key_type_name(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv) return "missing";
  if (kv->type != GgufValueType::Array) return gguf_value_type_name(uint32_t(kv->type));
  return "array of " + gguf_value_type_name(uint32_t(kv->array_type));
}

namespace {

// A decoded scalar. Only the member matching `kind` is meaningful.
struct Number {
  enum Kind { Unsigned, Signed, Float, Bool, NotANumber } kind = NotANumber;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
};

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// p points at a validated value of `type`.
Number decode_number(GgufValueType type, const uint8_t* p) {
  Number n;
  switch (type) {
    case GgufValueType::U8:
      n.kind = Number::Unsigned, n.u = load<uint8_t>(p);
      break;
    case GgufValueType::U16:
      n.kind = Number::Unsigned, n.u = load<uint16_t>(p);
      break;
    case GgufValueType::U32:
      n.kind = Number::Unsigned, n.u = load<uint32_t>(p);
      break;
    case GgufValueType::U64:
      n.kind = Number::Unsigned, n.u = load<uint64_t>(p);
      break;
    case GgufValueType::I8:
      n.kind = Number::Signed, n.i = load<int8_t>(p);
      break;
    case GgufValueType::I16:
      n.kind = Number::Signed, n.i = load<int16_t>(p);
      break;
    case GgufValueType::I32:
      n.kind = Number::Signed, n.i = load<int32_t>(p);
      break;
    case GgufValueType::I64:
      n.kind = Number::Signed, n.i = load<int64_t>(p);
      break;
    case GgufValueType::F32:
      n.kind = Number::Float, n.f = load<float>(p);
      break;
    case GgufValueType::F64:
      n.kind = Number::Float, n.f = load<double>(p);
      break;
    case GgufValueType::Bool:
      n.kind = Number::Bool, n.u = load<uint8_t>(p) != 0;
      break;
    default:
      break;
  }
  return n;
}

std::optional<int64_t> as_int(const Number& n) {
  if (n.kind == Number::Signed) return n.i;
  if (n.kind == Number::Unsigned && n.u <= uint64_t(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(n.u);
  return std::nullopt;
}

}  // namespace

size_t gguf_scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::Bool:
      return 1;
    case GgufValueType::U16:
    case GgufValueType::I16:
      return 2;
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::F32:
      return 4;
    case GgufValueType::U64:
    case GgufValueType::I64:
    case GgufValueType::F64:
      return 8;
    default:
      return 0;
  }
}

// The getters decode bytes that parse() has already bounds-checked.

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv || kv->type != GgufValueType::String) return std::nullopt;
  const uint64_t len = load<uint64_t>(bytes_ + kv->value_offset);
  return std::string(reinterpret_cast<const char*>(bytes_ + kv->value_offset + 8), len);
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv) return std::nullopt;
  const Number n = decode_number(kv->type, bytes_ + kv->value_offset);
  if (n.kind == Number::Unsigned) return n.u;
  if (n.kind == Number::Signed && n.i >= 0) return static_cast<uint64_t>(n.i);
  return std::nullopt;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv) return std::nullopt;
  return as_int(decode_number(kv->type, bytes_ + kv->value_offset));
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv) return std::nullopt;
  const Number n = decode_number(kv->type, bytes_ + kv->value_offset);
  if (n.kind != Number::Float) return std::nullopt;
  return n.f;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv || kv->type != GgufValueType::Bool) return std::nullopt;
  return bytes_[kv->value_offset] != 0;
}

std::optional<uint64_t> GgufFile::get_array_size(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv || kv->type != GgufValueType::Array) return std::nullopt;
  return kv->array_count;
}

std::optional<std::vector<std::string_view>> GgufFile::get_string_view_array(
    std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv || kv->type != GgufValueType::Array || kv->array_type != GgufValueType::String)
    return std::nullopt;
  std::vector<std::string_view> out;
  out.reserve(kv->array_count);
  uint64_t pos = kv->value_offset;
  for (uint64_t i = 0; i < kv->array_count; ++i) {
    const uint64_t len = load<uint64_t>(bytes_ + pos);
    out.emplace_back(reinterpret_cast<const char*>(bytes_ + pos + 8), len);
    pos += 8 + len;
  }
  return out;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  auto views = get_string_view_array(key);
  if (!views) return std::nullopt;
  return std::vector<std::string>(views->begin(), views->end());
}

std::optional<std::vector<int32_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv || kv->type != GgufValueType::Array) return std::nullopt;
  const size_t size = gguf_scalar_size(kv->array_type);
  std::vector<int32_t> out;
  out.reserve(kv->array_count);
  for (uint64_t i = 0; i < kv->array_count; ++i) {
    const Number n = decode_number(kv->array_type, bytes_ + kv->value_offset + i * size);
    const std::optional<int64_t> v = as_int(n);
    if (!v || *v < INT32_MIN || *v > INT32_MAX) return std::nullopt;
    out.push_back(static_cast<int32_t>(*v));
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const GgufKeyValue* kv = find_key(key);
  if (!kv || kv->type != GgufValueType::Array) return std::nullopt;
  if (kv->array_type != GgufValueType::F32 && kv->array_type != GgufValueType::F64)
    return std::nullopt;
  const size_t size = gguf_scalar_size(kv->array_type);
  std::vector<float> out;
  out.reserve(kv->array_count);
  for (uint64_t i = 0; i < kv->array_count; ++i) {
    out.push_back(
        static_cast<float>(decode_number(kv->array_type, bytes_ + kv->value_offset + i * size).f));
  }
  return out;
}

}  // namespace voltad
