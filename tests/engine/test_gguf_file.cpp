// The GGUF reader: a round trip through the writer, then one bad file per
// validation rule, each with the message it must give.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <limits>

#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"
#include "tests/engine/test_gguf_support.h"

using namespace voltad;

namespace {

std::string open_error(std::vector<uint8_t> bytes) {
  auto file = GgufFile::from_bytes(std::move(bytes), "bad.gguf");
  return file.ok() ? "(opened without error)" : file.error().message;
}

void expect_error(std::vector<uint8_t> bytes, const std::string& substring) {
  const std::string message = open_error(std::move(bytes));
  INFO("message: " << message);
  CHECK(message.find(substring) != std::string::npos);
  CHECK(message.rfind("bad.gguf: ", 0) == 0);  // names the file first
}

template <class T>
void poke(std::vector<uint8_t>& bytes, size_t at, T value) {
  REQUIRE(at + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

std::vector<uint8_t> f32_bytes(std::vector<float> values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A small valid file: two keys, two tensors.
GgufWriter small_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("test.count", 7);
  w.add_tensor("a", GgmlType::F32, {4, 2}, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.add_tensor("b", GgmlType::F32, {3}, f32_bytes({9, 10, 11}));
  return w;
}

// Offset of the first byte after the metadata of small_writer()'s file.
size_t small_tensor_infos_offset() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("test.count", 7);
  return w.to_bytes().size();
}

}  // namespace

TEST_CASE("round trip: every value type, arrays, tensors, alignment") {
  GgufWriter w;
  w.set_alignment(64);
  w.add_u8("v.u8", 200);
  w.add_i8("v.i8", -100);
  w.add_u16("v.u16", 60000);
  w.add_i16("v.i16", -30000);
  w.add_u32("v.u32", 4000000000u);
  w.add_i32("v.i32", -2000000000);
  w.add_u64("v.u64", std::numeric_limits<uint64_t>::max());
  w.add_i64("v.i64", std::numeric_limits<int64_t>::min());
  w.add_f32("v.f32", 0.25f);
  w.add_f64("v.f64", -1e300);
  w.add_bool("v.bool", true);
  w.add_string("v.string", std::string("a\0b", 3));
  w.add_string_array("v.strings", {"x", "", "hello"});
  w.add_i32_array("v.i32s", {1, -2, 3});
  w.add_u32_array("v.u32s", {4000000000u});
  w.add_f32_array("v.f32s", {1.5f, -2.5f});
  std::mt19937 rng(3);
  const std::vector<uint8_t> q8 = test::random_tensor_bytes(GgmlType::Q8_0, 64 * 3, rng);
  const std::vector<uint8_t> f16(2 * 5, 0x3c);
  w.add_tensor("q8", GgmlType::Q8_0, {64, 3}, q8);
  w.add_tensor("f16", GgmlType::F16, {5}, f16);
  w.add_tensor("f32.4d", GgmlType::F32, {1, 2, 1, 3}, f32_bytes({1, 2, 3, 4, 5, 6}));

  auto opened = GgufFile::from_bytes(w.to_bytes(), "round.gguf");
  REQUIRE_MESSAGE(opened.ok(), (opened.ok() ? "" : opened.error().message));
  const GgufFile& f = **opened;
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 64);
  CHECK(f.data_offset() % 64 == 0);
  CHECK(f.keys().size() == 17);
  CHECK(f.keys().front() == "general.alignment");

  CHECK(f.get_uint("v.u8") == 200u);
  CHECK(f.get_int("v.i8") == -100);
  CHECK_FALSE(f.get_uint("v.i8").has_value());  // negative
  CHECK(f.get_uint("v.u16") == 60000u);
  CHECK(f.get_int("v.i16") == -30000);
  CHECK(f.get_uint("v.u32") == 4000000000u);
  CHECK(f.get_int("v.u32") == 4000000000ll);
  CHECK(f.get_int("v.i32") == -2000000000);
  CHECK(f.get_uint("v.u64") == std::numeric_limits<uint64_t>::max());
  CHECK_FALSE(f.get_int("v.u64").has_value());  // beyond int64
  CHECK(f.get_int("v.i64") == std::numeric_limits<int64_t>::min());
  CHECK(f.get_float("v.f32") == 0.25);
  CHECK(f.get_float("v.f64") == -1e300);
  CHECK_FALSE(f.get_float("v.u8").has_value());
  CHECK(f.get_bool("v.bool") == true);
  CHECK_FALSE(f.get_bool("v.u8").has_value());
  CHECK(f.get_string("v.string") == std::string("a\0b", 3));
  CHECK_FALSE(f.get_string("v.u32").has_value());
  CHECK_FALSE(f.get_uint("v.string").has_value());
  CHECK(f.get_string_array("v.strings") == std::vector<std::string>{"x", "", "hello"});
  CHECK(f.get_array_size("v.strings") == 3u);
  CHECK(f.get_int_array("v.i32s") == std::vector<int32_t>{1, -2, 3});
  CHECK_FALSE(f.get_int_array("v.u32s").has_value());  // 4e9 does not fit int32
  CHECK_FALSE(f.get_int_array("v.strings").has_value());
  CHECK(f.get_float_array("v.f32s") == std::vector<float>{1.5f, -2.5f});
  CHECK_FALSE(f.get_float_array("v.i32s").has_value());
  CHECK_FALSE(f.get_string("missing").has_value());
  CHECK_FALSE(f.has("missing"));
  CHECK(f.has("v.f64"));
  CHECK(f.key_type_name("v.strings") == "array of string");
  CHECK(f.key_type_name("v.u16") == "u16");
  CHECK(f.key_type_name("missing") == "missing");

  REQUIRE(f.tensors().size() == 3);
  const GgufTensor* q = f.find_tensor("q8");
  REQUIRE(q != nullptr);
  CHECK(q->type == GgmlType::Q8_0);
  CHECK(q->n_dims == 2);
  CHECK(q->ne == std::array<uint64_t, 4>{64, 3, 1, 1});
  CHECK(q->n_elements == 192);
  CHECK(q->n_rows() == 3);
  CHECK(q->n_bytes == q8.size());
  CHECK(q->offset % 64 == 0);
  CHECK(std::equal(q8.begin(), q8.end(), q->data));
  const GgufTensor* t4 = f.find_tensor("f32.4d");
  REQUIRE(t4 != nullptr);
  CHECK(t4->shape_string() == "{1, 2, 1, 3}");
  CHECK(t4->n_rows() == 6);
  CHECK(f.find_tensor("nope") == nullptr);
  CHECK(dequantize_tensor(*f.find_tensor("f16")) == std::vector<float>(5, fp16_to_fp32(0x3c3c)));
}

TEST_CASE("open() maps a file and agrees with from_bytes") {
  const std::vector<uint8_t> bytes = small_writer().to_bytes();
  const std::string path = "/tmp/voltad_test_gguf_" + std::to_string(::getpid()) + ".gguf";
  REQUIRE(small_writer().write_file(path).ok());
  auto file = GgufFile::open(path);
  ::unlink(path.c_str());
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  CHECK((*file)->path() == path);
  CHECK((*file)->file_size() == bytes.size());
  REQUIRE((*file)->tensors().size() == 2);
  const GgufTensor& a = (*file)->tensors()[0];
  CHECK(std::equal(a.data, a.data + a.n_bytes, bytes.begin() + long(a.offset)));
  CHECK((*file)->get_uint("test.count") == 7u);
}

TEST_CASE("open() errors: missing file, empty file, directory") {
  auto missing = GgufFile::open("/nonexistent/model.gguf");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("cannot open model file '/nonexistent/model.gguf'") !=
        std::string::npos);
  const std::string path = "/tmp/voltad_test_empty_" + std::to_string(::getpid()) + ".gguf";
  std::fclose(std::fopen(path.c_str(), "wb"));
  auto empty = GgufFile::open(path);
  ::unlink(path.c_str());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().message.find("the file is empty") != std::string::npos);
  auto dir = GgufFile::open("/tmp");
  REQUIRE_FALSE(dir.ok());
  CHECK(dir.error().message.find("not a regular file") != std::string::npos);
}

TEST_CASE("bad header: magic, version, counts") {
  const std::vector<uint8_t> good = small_writer().to_bytes();
  REQUIRE(open_error(good) == "(opened without error)");

  auto bytes = good;
  bytes[0] = 'X';
  expect_error(bytes, "not a GGUF file: it starts with 'XGUF'");
  std::memcpy(bytes.data(), "tjgg", 4);
  expect_error(bytes, "legacy GGML/GGJT");
  expect_error({'G', 'G'}, "too short to be a GGUF file");

  bytes = good;
  poke<uint32_t>(bytes, 4, 1);
  expect_error(bytes, "GGUF version 1 is not supported");
  poke<uint32_t>(bytes, 4, 4);
  expect_error(bytes, "unsupported GGUF version 4");
  poke<uint32_t>(bytes, 4, 0x03000000);
  expect_error(bytes, "big-endian");
  poke<uint32_t>(bytes, 4, 2);  // v2 has the same layout
  CHECK(open_error(bytes) == "(opened without error)");

  bytes = good;
  poke<uint64_t>(bytes, 16, uint64_t{1} << 62);
  expect_error(bytes, "metadata entries, which cannot fit");
  bytes = good;
  poke<uint64_t>(bytes, 8, uint64_t{1} << 62);
  expect_error(bytes, "tensors, but only");
  bytes = good;
  poke<uint64_t>(bytes, 8, 40);  // fits the header check, not the bytes after metadata
  expect_error(bytes, "remain after the metadata");
}

TEST_CASE("truncation at chosen points names what was cut") {
  const std::vector<uint8_t> good = small_writer().to_bytes();
  auto file = GgufFile::from_bytes(good);
  REQUIRE(file.ok());
  const GgufTensor& b = (*file)->tensors()[1];
  const size_t infos = small_tensor_infos_offset();
  auto cut = [&](size_t n) { return std::vector<uint8_t>(good.begin(), good.begin() + long(n)); };
  expect_error(cut(6), "inside the header's version");
  expect_error(cut(20), "inside the header's metadata count");
  expect_error(cut(30), "the header claims 2 metadata entries, which cannot fit in the 6 bytes");
  expect_error(cut(24 + 8 + 20 + 2),
               "inside the value type of metadata key 'general.architecture'");
  expect_error(cut(infos + 8),
               "the header claims 2 tensors, but only 8 bytes remain after the metadata");
  // Past the tensor count check (2 x 33 bytes), inside the second info.
  expect_error(cut(infos + 70), "tensor 'b'");
  const std::string end = std::to_string(b.offset + b.n_bytes - 1);
  expect_error(cut(b.offset + b.n_bytes - 1),
               "tensor 'b': data [offset " + std::to_string(b.offset) +
                   ", 12 bytes] runs past the end of the file (size " + end + ")");
  // The padding after the last tensor is not needed.
  CHECK(open_error(cut(b.offset + b.n_bytes)) == "(opened without error)");
}

TEST_CASE("every truncation of a valid file is an error, never a crash") {
  test::TinyModelSpec spec;
  spec.n_layers = 1;
  spec.n_vocab = 8;
  const std::vector<uint8_t> good = test::tiny_model_bytes(spec);
  REQUIRE(open_error(good) == "(opened without error)");
  int accepted = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    auto file = GgufFile::from_bytes(std::vector<uint8_t>(good.begin(), good.begin() + long(n)));
    if (file.ok())
      ++accepted;
    else
      CHECK_FALSE(file.error().message.empty());
  }
  CHECK(accepted == 0);
}

TEST_CASE("bad metadata: strings, arrays, types, duplicates, alignment") {
  {
    auto bytes = small_writer().to_bytes();
    poke<uint64_t>(bytes, 24, uint64_t{1} << 60);  // the first key's length
    expect_error(bytes, "claims a length of 1152921504606846976 bytes");
  }
  {
    GgufWriter w;
    w.add_array_raw("huge", uint32_t(GgufValueType::U32), uint64_t{1} << 61, {});
    expect_error(w.to_bytes(),
                 "metadata key 'huge' (at byte 24) claims 2305843009213693952 elements");
  }
  {
    GgufWriter w;
    w.add_array_raw("strs", uint32_t(GgufValueType::String), 1000, {});
    expect_error(w.to_bytes(), "claims 1000 elements of type string");
  }
  {
    GgufWriter w;
    std::vector<uint8_t> payload(8, 0);
    poke<uint64_t>(payload, 0, 5000);  // a string element longer than the file
    w.add_array_raw("strs", uint32_t(GgufValueType::String), 1, payload);
    expect_error(w.to_bytes(), "string #0 of array metadata key 'strs'");
  }
  {
    GgufWriter w;
    w.add_value_raw("weird", 99, {1, 2, 3, 4});
    expect_error(w.to_bytes(), "metadata key 'weird' (at byte 24) has unknown value type 99");
  }
  {
    GgufWriter w;
    w.add_array_raw("nested", uint32_t(GgufValueType::Array), 0, {});
    expect_error(w.to_bytes(), "is an array of arrays");
  }
  {
    GgufWriter w;
    w.add_array_raw("odd", 13, 0, {});
    expect_error(w.to_bytes(), "array of unknown value type 13");
  }
  {
    GgufWriter w;
    w.add_u32("dup", 1);
    w.add_u32("dup", 2);
    expect_error(w.to_bytes(), "metadata key 'dup' appears twice");
  }
  {
    GgufWriter w;
    w.add_u32("", 1);
    expect_error(w.to_bytes(), "has an empty key");
  }
  {
    GgufWriter w;
    w.add_string("\x1b[31mred", "x");
    w.add_string("\x1b[31mred", "y");
    expect_error(w.to_bytes(), "'\\x1b[31mred' appears twice");  // escaped, not raw
  }
  {
    GgufWriter w = small_writer();
    w.add_u32("general.alignment", 48);
    expect_error(w.to_bytes(), "general.alignment = 48 is not a power of two");
  }
  {
    GgufWriter w = small_writer();
    w.add_string("general.alignment", "32");
    expect_error(w.to_bytes(), "general.alignment has type string");
  }
}

TEST_CASE("bad tensor infos: dims, overflow, types, block sizes, offsets") {
  auto one = [](uint32_t type, std::vector<uint64_t> ne, std::vector<uint8_t> data = {},
                std::optional<uint64_t> offset = std::nullopt) {
    GgufWriter w;
    w.add_tensor_raw("blk.3.attn_q.weight", type, std::move(ne), std::move(data), offset);
    return w.to_bytes();
  };
  const uint32_t f32 = uint32_t(GgmlType::F32);
  expect_error(
      one(f32, {1, 1, 1, 1, 1}),
      "tensor 'blk.3.attn_q.weight' (info at byte 24) has 5 dimensions; GGUF tensors have 1 to 4");
  expect_error(one(f32, {}), "has 0 dimensions");
  expect_error(one(f32, {4, 0}), "has an empty dimension ne[1] = 0");
  expect_error(one(f32, {uint64_t{1} << 63}), "absurd dimension ne[0] = 9223372036854775808");
  expect_error(one(f32, {uint64_t{1} << 40, uint64_t{1} << 40}),
               "whose element count overflows 64 bits");
  expect_error(one(f32, {uint64_t{1} << 30, uint64_t{1} << 30}), "runs past the end of the file");
  expect_error(one(f32, {uint64_t{1} << 31, uint64_t{1} << 31}), "would need more than 2^64 bytes");
  expect_error(one(99, {32}), "tensor 'blk.3.attn_q.weight' has unknown type id 99");
  expect_error(one(4, {32}), "has type id 4 (Q4_2, removed from GGML in 2023): the file predates");
  expect_error(one(5, {32}), "type id 5 (Q4_3, removed");
  expect_error(one(uint32_t(GgmlType::Q4_0), {16}, std::vector<uint8_t>(18)),
               "rows of 16 elements (shape {16}), not a multiple of the Q4_0 block size 32");
  expect_error(one(f32, {4}, std::vector<uint8_t>(16), 8),
               "data offset 8 (relative to the data section), not a multiple of the alignment 32");
  expect_error(one(f32, {4}, std::vector<uint8_t>(16), 1 << 20),
               "tensor 'blk.3.attn_q.weight': data [offset ");
  expect_error(one(f32, {4}, std::vector<uint8_t>(16), ~uint64_t{31}),
               "runs past the end of the file");
  expect_error(one(uint32_t(GgmlType::Q8_K), {uint64_t{1} << 62}), "runs past the end of the file");
  {
    // The data the info promises is not all there.
    GgufWriter w;
    w.add_tensor_raw("short", f32, {1024}, std::vector<uint8_t>(64));
    const auto bytes = w.to_bytes();
    const std::string message = open_error(bytes);
    CHECK(message.find("tensor 'short': data [offset ") != std::string::npos);
    CHECK(message.find(", 4096 bytes] runs past the end of the file (size " +
                       std::to_string(bytes.size()) + ")") != std::string::npos);
  }
  {
    GgufWriter w;
    w.add_tensor("x", GgmlType::F32, {4}, std::vector<uint8_t>(16));
    w.add_tensor("x", GgmlType::F32, {4}, std::vector<uint8_t>(16));
    expect_error(w.to_bytes(), "tensor 'x' appears twice");
  }
  {
    GgufWriter w;
    w.add_tensor_raw("first", f32, {16}, std::vector<uint8_t>(64), 0);
    w.add_tensor_raw("second", f32, {4}, std::vector<uint8_t>(16), 32);
    expect_error(w.to_bytes(), "tensors 'first' [offset ");
    expect_error(w.to_bytes(), "and 'second' [offset ");
  }
  {
    GgufWriter w;
    w.add_tensor_raw("", f32, {4}, std::vector<uint8_t>(16));
    expect_error(w.to_bytes(), "tensor #0 (info at byte 24) has an empty name");
  }
}

TEST_CASE("known but unsupported tensor types load (refused later, by name)") {
  GgufWriter w;
  w.add_tensor("iq", GgmlType::IQ2_XXS, {256, 2}, std::vector<uint8_t>(2 * 66));
  auto file = GgufFile::from_bytes(w.to_bytes());
  REQUIRE(file.ok());
  CHECK((*file)->tensors()[0].n_bytes == 132);
}

TEST_CASE("the file written by gguf-py (the dequant fixture) reads back") {
  auto file = GgufFile::open(test::fixture_path("dequant_reference.gguf"));
  REQUIRE_MESSAGE(file.ok(), (file.ok() ? "" : file.error().message));
  CHECK((*file)->get_string("general.architecture") == "dequant-reference");
  CHECK((*file)->data_offset() % (*file)->alignment() == 0);
  CHECK((*file)->tensors().size() == 22);
}
