#include "engine/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

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

namespace {

// Checks a tensor of a known type and returns the bytes of one row.
uint64_t checked_row_bytes(GgmlType type, const std::vector<uint64_t>& ne, uint64_t& n_bytes) {
  VOLTAD_CHECK(!ne.empty() && ne.size() <= 4);
  uint64_t n_elements = 1;
  for (uint64_t d : ne) n_elements *= d;
  const GgmlTypeInfo* info = ggml_type_info(type);
  VOLTAD_CHECK(info != nullptr && ne[0] % info->block_elems == 0);
  n_bytes = n_elements / info->block_elems * info->block_bytes;
  return ne[0] / info->block_elems * info->block_bytes;
}

// Generated data is produced in pieces of whole rows, about this many bytes.
constexpr uint64_t kPieceBytes = 8u << 20;

uint64_t piece_bytes(uint64_t n_bytes, uint64_t row_bytes) {
  return std::min(n_bytes, std::max<uint64_t>(1, kPieceBytes / row_bytes) * row_bytes);
}

}  // namespace

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                            std::vector<uint8_t> data) {
  uint64_t n_bytes = 0;
  checked_row_bytes(type, ne, n_bytes);
  VOLTAD_CHECK(data.size() == n_bytes);
  add_tensor_raw(std::move(name), static_cast<uint32_t>(type), std::move(ne), std::move(data));
}

void GgufWriter::add_tensor_generated(std::string name, GgmlType type, std::vector<uint64_t> ne,
                                      TensorFill fill) {
  VOLTAD_CHECK(fill != nullptr);
  Tensor t;
  t.row_bytes = checked_row_bytes(type, ne, t.n_bytes);
  VOLTAD_CHECK(t.row_bytes > 0);
  t.name = std::move(name);
  t.type = static_cast<uint32_t>(type);
  t.ne = std::move(ne);
  t.fill = std::move(fill);
  tensors_.push_back(std::move(t));
}

void GgufWriter::add_tensor_raw(std::string name, uint32_t type, std::vector<uint64_t> ne,
                                std::vector<uint8_t> data, std::optional<uint64_t> offset) {
  Tensor t;
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  t.n_bytes = data.size();
  t.data = std::move(data);
  t.offset = offset;
  tensors_.push_back(std::move(t));
}

GgufWriter::Layout GgufWriter::layout() const {
  Layout l;
  std::vector<uint8_t>& out = l.header;
  // Reserved first: GCC 12 warns, falsely, on the insert below into an
  // empty vector (-Wstringop-overflow) in a Release build.
  out.reserve(4096);
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
  uint64_t next = 0;
  for (const Tensor& t : tensors_) {
    l.offsets.push_back(next);
    next = align_up(next + t.n_bytes, alignment_);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, t.type);
    put<uint64_t>(out, t.offset.value_or(l.offsets[i]));
  }
  // A file without tensors ends right after its header (no padding).
  l.data_start = tensors_.empty() ? out.size() : align_up(out.size(), alignment_);
  l.data_size = next;
  return l;
}

uint64_t GgufWriter::file_size() const {
  const Layout l = layout();
  return l.data_start + l.data_size;
}

uint64_t GgufWriter::data_offset() const {
  return layout().data_start;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  Layout l = layout();
  std::vector<uint8_t> out = std::move(l.header);
  out.resize(l.data_start + l.data_size, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    uint8_t* dst = out.data() + l.data_start + l.offsets[i];
    if (!t.fill) {
      // An empty tensor's data() may be null, which memcpy may not take
      // even for 0 bytes.
      if (!t.data.empty()) std::memcpy(dst, t.data.data(), t.data.size());
      continue;
    }
    const uint64_t piece = piece_bytes(t.n_bytes, t.row_bytes);
    for (uint64_t at = 0; at < t.n_bytes; at += piece)
      t.fill(dst + at, at, std::min(piece, t.n_bytes - at));
  }
  return out;
}

Status GgufWriter::write_file(const std::string& path, const WriteProgress& progress,
                              const std::atomic<bool>* cancel) const {
  Layout l = layout();
  const uint64_t total = l.data_start + l.data_size;
  // A regular file or nothing at `path` (after symlinks: a link is kept and
  // its target replaced): written beside it and renamed over it at the end,
  // with the old file's owner and mode. Anything else (a device, a pipe):
  // written directly.
  std::string final_path = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code lec;
    if (!std::filesystem::is_symlink(std::filesystem::symlink_status(final_path, lec))) break;
    const std::filesystem::path to = std::filesystem::read_symlink(final_path, lec);
    if (lec) break;
    final_path = to.is_absolute() ? to.string()
                                  : (std::filesystem::path(final_path).parent_path() / to).string();
  }
  std::error_code sec;
  const auto type = std::filesystem::status(final_path, sec).type();
  const bool beside =
      type == std::filesystem::file_type::regular || type == std::filesystem::file_type::not_found;
  std::string target = final_path;
  std::FILE* f = nullptr;
  if (beside) {
    // O_EXCL with a random suffix (not mkstemp: its 0600 would hide the
    // umask); the kernel applies the umask to 0666, as fopen would.
    std::random_device random;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      char suffix[16];
      std::snprintf(suffix, sizeof(suffix), "%08x", unsigned(random()));
      target = final_path + ".partial-" + suffix;
      fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
      const int e = errno;
      return make_error("cannot create '" + path + "': " + std::strerror(e) +
                        " (the new file is written beside it first: its directory must be "
                        "writable)");
    }
    struct stat old {};
    if (type == std::filesystem::file_type::regular && ::stat(final_path.c_str(), &old) == 0) {
      (void)!::fchown(fd, old.st_uid, old.st_gid);  // only root may give it away: else kept
      (void)!::fchmod(fd, old.st_mode & 07777);
    }
    f = ::fdopen(fd, "wb");
    if (!f) {
      const int e = errno;
      ::close(fd);
      ::unlink(target.c_str());
      return make_error("cannot create '" + path + "': " + std::strerror(e));
    }
  } else {
    f = std::fopen(path.c_str(), "wb");
    if (!f) return make_error("cannot create '" + path + "': " + std::strerror(errno));
  }

  uint64_t written = 0;
  std::string writing = "the header";
  std::vector<uint8_t> buffer;
  bool cancelled = false;
  auto put_bytes = [&](const uint8_t* p, uint64_t n) {
    if (n == 0) return true;
    if (cancel && cancel->load()) {
      cancelled = true;
      return false;
    }
    if (std::fwrite(p, 1, n, f) != n) return false;
    written += n;
    if (progress) progress(written, total);
    return true;
  };
  auto pad_to = [&](uint64_t at) {
    buffer.assign(at - written, 0);
    return put_bytes(buffer.data(), buffer.size());
  };
  // Writes everything; false at the first failed write, with errno set.
  auto write_all = [&]() {
    if (!put_bytes(l.header.data(), l.header.size())) return false;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      writing = "tensor " + gguf_quoted(t.name);
      if (!pad_to(l.data_start + l.offsets[i])) return false;
      if (!t.fill) {
        if (!put_bytes(t.data.data(), t.data.size())) return false;
        continue;
      }
      const uint64_t piece = piece_bytes(t.n_bytes, t.row_bytes);
      buffer.resize(piece);
      for (uint64_t at = 0; at < t.n_bytes; at += piece) {
        const uint64_t n = std::min(piece, t.n_bytes - at);
        t.fill(buffer.data(), at, n);
        if (!put_bytes(buffer.data(), n)) return false;
      }
    }
    writing = "the final padding";
    return pad_to(total);
  };
  bool ok = write_all();
  int error = errno;
  // Synced before the rename: a crash then leaves the old file or the new
  // one, not an empty one under the final name.
  if (ok && beside && (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0)) {
    ok = false;
    error = errno;
  }
  const bool closed = std::fclose(f) == 0;
  if (ok && !closed) error = errno;
  // A stop asked for after the last byte (during the sync) still stops.
  if (ok && cancel && cancel->load()) {
    ok = false;
    cancelled = true;
  }
  if (ok && closed && beside && ::rename(target.c_str(), final_path.c_str()) != 0) {
    error = errno;
    ::unlink(target.c_str());
    return make_error("cannot replace '" + path + "' with the new file: " + std::strerror(error) +
                      " (nothing was changed at that path)");
  }
  if (ok && closed) return {};
  if (cancel && cancel->load()) cancelled = true;  // a write cut short by the signal itself
  std::error_code ec;  // never remove what is not a plain file (e.g. /dev/full)
  const bool removed =
      std::filesystem::is_regular_file(target, ec) && std::filesystem::remove(target, ec);
  const std::string untouched = beside ? (type == std::filesystem::file_type::regular
                                              ? "; the file already there is unchanged"
                                              : "")
                                       : "";
  if (cancelled)
    return make_error("writing '" + path + "' was interrupted at byte " + std::to_string(written) +
                      " of " + std::to_string(total) +
                      (removed ? " (the partial file was removed)" : "") + untouched);
  return make_error("cannot write '" + path + "' (" + writing + ", at byte " +
                    std::to_string(written) + " of " + std::to_string(total) +
                    "): " + std::strerror(error) + "; check free space and permissions" +
                    (removed ? " (the partial file was removed)" : "") + untouched);
}

}  // namespace voltad
