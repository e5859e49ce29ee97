// The GGUF writer's streaming path: generated tensors are produced in
// pieces of whole rows and written through a bounded buffer; the file is
// byte for byte what to_bytes() gives and what the in-memory API gives.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"
#include "tests/engine/test_gguf_support.h"

using namespace voltad;
namespace fs = std::filesystem;

namespace {

// A deterministic function of the byte position, as the contract asks.
uint8_t byte_at(uint64_t tensor, uint64_t pos) {
  return uint8_t((pos * 2654435761u + tensor * 97u) >> 7);
}

// F16 and Q8_0 bytes must be valid: F16 values are finite if the top byte
// avoids exponent 31; Q8_0 scales are written small.
std::vector<uint8_t> expected_bytes(uint64_t tensor, uint64_t n) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = byte_at(tensor, i) & 0x3f;
  return v;
}

struct Piece {
  uint64_t offset, n_bytes;
};

// Three tensors: a 12 MB F32 matrix (more than one piece), a Q8_0 matrix and
// an F16 vector; `pieces` records how each was asked for.
void add_generated(GgufWriter& w, std::vector<std::vector<Piece>>& pieces) {
  struct Spec {
    const char* name;
    GgmlType type;
    std::vector<uint64_t> ne;
  };
  const std::vector<Spec> specs = {{"big", GgmlType::F32, {1000, 3000}},
                                   {"q8", GgmlType::Q8_0, {64, 5}},
                                   {"v", GgmlType::F16, {7}}};
  pieces.assign(specs.size(), {});
  for (size_t i = 0; i < specs.size(); ++i) {
    w.add_tensor_generated(specs[i].name, specs[i].type, specs[i].ne,
                           [i, &pieces](uint8_t* dst, uint64_t offset, uint64_t n) {
                             pieces[i].push_back({offset, n});
                             const std::vector<uint8_t> all = expected_bytes(i, offset + n);
                             std::memcpy(dst, all.data() + offset, n);
                           });
  }
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("generated tensors: same bytes as the in-memory API, in pieces of whole rows") {
  GgufWriter gen;
  gen.add_string("general.architecture", "llama");
  std::vector<std::vector<Piece>> pieces;
  add_generated(gen, pieces);

  GgufWriter mem;
  mem.add_string("general.architecture", "llama");
  mem.add_tensor("big", GgmlType::F32, {1000, 3000}, expected_bytes(0, 12'000'000));
  mem.add_tensor("q8", GgmlType::Q8_0, {64, 5}, expected_bytes(1, 5 * 2 * 34));
  mem.add_tensor("v", GgmlType::F16, {7}, expected_bytes(2, 14));

  const std::vector<uint8_t> bytes = gen.to_bytes();
  CHECK(bytes == mem.to_bytes());
  CHECK(gen.file_size() == bytes.size());
  // The F32 tensor came in more than one piece, each whole rows, in order.
  REQUIRE(pieces[0].size() >= 2);
  uint64_t next = 0;
  for (const Piece& p : pieces[0]) {
    CHECK(p.offset == next);
    CHECK(p.n_bytes % 4000 == 0);
    next += p.n_bytes;
  }
  CHECK(next == 12'000'000);
  CHECK(pieces[1].size() == 1);
  CHECK(pieces[1][0].n_bytes == 340);

  auto f = GgufFile::from_bytes(bytes, "gen.gguf");
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.error().message));
  CHECK((*f)->data_offset() == gen.data_offset());
  const GgufTensor* big = (*f)->find_tensor("big");
  REQUIRE(big != nullptr);
  CHECK(big->n_bytes == 12'000'000);
  CHECK(std::memcmp(big->data, expected_bytes(0, 12'000'000).data(), big->n_bytes) == 0);
}

TEST_CASE("write_file streams the file to_bytes() describes, with progress to the end") {
  GgufWriter w;
  w.set_alignment(64);
  w.add_u32("test.n", 3);
  std::vector<std::vector<Piece>> pieces;
  add_generated(w, pieces);
  std::mt19937 rng(5);
  w.add_tensor("mem", GgmlType::Q8_0, {32, 3}, test::random_tensor_bytes(GgmlType::Q8_0, 96, rng));

  const fs::path path =
      fs::temp_directory_path() / ("voltad-stream-" + std::to_string(getpid()) + ".gguf");
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  auto st = w.write_file(path.string(), [&](uint64_t done, uint64_t total) {
    calls.push_back({done, total});
  });
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().message));
  const std::string file = read_file(path);
  fs::remove(path);
  const std::vector<uint8_t> bytes = w.to_bytes();
  CHECK(file.size() == bytes.size());
  CHECK(std::memcmp(file.data(), bytes.data(), bytes.size()) == 0);
  REQUIRE(calls.size() >= 3);
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].second == bytes.size());
    if (i) CHECK(calls[i].first > calls[i - 1].first);
  }
  CHECK(calls.back().first == bytes.size());
  auto opened = GgufFile::from_bytes(std::vector<uint8_t>(file.begin(), file.end()), "w.gguf");
  REQUIRE(opened.ok());
  CHECK((*opened)->alignment() == 64);
  CHECK((*opened)->tensors().size() == 4);
}

TEST_CASE("write_file errors name the path, the place and what to do") {
  GgufWriter w;
  std::vector<std::vector<Piece>> pieces;
  add_generated(w, pieces);
  auto st = w.write_file("/nonexistent-dir/x.gguf");
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("cannot create '/nonexistent-dir/x.gguf'") != std::string::npos);

  if (!fs::exists("/dev/full")) return;
  st = w.write_file("/dev/full");
  REQUIRE_FALSE(st.ok());
  INFO(st.error().message);
  CHECK(st.error().message.find("cannot write '/dev/full' (") != std::string::npos);
  CHECK(st.error().message.find(" of " + std::to_string(w.file_size()) + "): ") !=
        std::string::npos);
  CHECK(st.error().message.find("check free space") != std::string::npos);
  CHECK(fs::exists("/dev/full"));  // a device is never removed
}

// A file already at the path is replaced only by a complete new one: an
// interrupted write leaves it as it was, with no partial file beside it,
// and a reader that had the old file open keeps reading the old bytes
// (a daemon serving a model that voltad-mkmodel rewrites).
TEST_CASE("write_file replaces an existing file whole, or not at all") {
  GgufWriter w;
  std::vector<std::vector<Piece>> pieces;
  add_generated(w, pieces);
  const fs::path dir = fs::temp_directory_path() / ("voltad-replace-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / "m.gguf";
  auto leftovers = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path() != path;
    return n;
  };
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    std::fputs("precious", f);
    std::fclose(f);
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  std::FILE* reader = std::fopen(path.c_str(), "rb");
  REQUIRE(reader);

  std::atomic<bool> cancel{false};
  int calls = 0;
  auto st = w.write_file(
      path.string(), [&](uint64_t, uint64_t) { cancel.store(++calls == 2); }, &cancel);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("was interrupted at byte") != std::string::npos);
  CHECK(st.error().message.find("the file already there is unchanged") != std::string::npos);
  CHECK(read_file(path) == "precious");
  CHECK(leftovers() == 0);

  st = w.write_file(path.string());
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().message));
  CHECK(fs::file_size(path) == w.file_size());
  CHECK(leftovers() == 0);
  // The old file's mode (0640), not a fresh file's.
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  // Through a symlink: the link stays, its target is replaced.
  const fs::path link = dir / "link.gguf", real = dir / "real.gguf";
  fs::copy_file(path, real);
  {
    std::FILE* f = std::fopen(real.c_str(), "wb");
    std::fputs("old", f);
    std::fclose(f);
  }
  fs::create_symlink("real.gguf", link);
  REQUIRE(w.write_file(link.string()).ok());
  CHECK(fs::is_symlink(fs::symlink_status(link)));
  CHECK(fs::file_size(real) == w.file_size());
  fs::remove(link);
  fs::remove(real);
  CHECK(leftovers() == 0);
  char old[9] = {};
  CHECK(std::fread(old, 1, 8, reader) == 8);  // the old inode, still whole
  CHECK(std::string(old) == "precious");
  std::fclose(reader);
  fs::remove_all(dir);
}
