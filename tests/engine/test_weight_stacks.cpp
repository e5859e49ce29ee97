// Stacked weight matrices (engine/weight_repack.h): the CUDA backend packs
// wq/wk/wv and w_gate/w_up of a layer as one matrix when they share a GGUF
// type. A stack must hold every part's rows exactly as the part packed alone
// holds them, byte for byte in every sub-array, and decode to what the GGUF
// reference decoder gives; and the grouping into stacks must follow the types.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/dequantize.h"
#include "engine/gguf_file.h"
#include "engine/weight_repack.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using kernels::PackedLayout;
using test::random_valid_tensor;

namespace {

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::F16,  GgmlType::BF16, GgmlType::F32};

bool same_float(float a, float b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

// Whether row `a` of packed matrix A has the same bytes as row `b` of B in
// every sub-array (both of one format and row length).
bool same_packed_row(const PackedLayout& la, const uint8_t* pa, int64_t a, const PackedLayout& lb,
                     const uint8_t* pb, int64_t b) {
  struct Sub {
    uint64_t offset_a, offset_b;
    int64_t row_bytes;
  };
  const Sub subs[] = {{la.quants_offset, lb.quants_offset, la.quant_row_bytes},
                      {la.high_offset, lb.high_offset, la.high_row_bytes},
                      {la.scales_offset, lb.scales_offset, la.scale_row_bytes},
                      {la.super_offset, lb.super_offset, la.super_row_bytes}};
  for (const Sub& s : subs) {
    if (s.row_bytes == 0) continue;
    if (std::memcmp(pa + s.offset_a + a * s.row_bytes, pb + s.offset_b + b * s.row_bytes,
                    size_t(s.row_bytes)) != 0)
      return false;
  }
  return true;
}

GgufTensor matrix_tensor(const char* name, GgmlType type, uint64_t cols, uint64_t rows) {
  GgufTensor t{};
  t.name = name;
  t.type = type;
  t.n_dims = 2;
  t.ne = {cols, rows, 1, 1};
  t.n_elements = cols * rows;
  return t;
}

GgufTensor vector_tensor(const char* name, uint64_t n) {
  GgufTensor t{};
  t.name = name;
  t.type = GgmlType::F32;
  t.n_dims = 1;
  t.ne = {n, 1, 1, 1};
  t.n_elements = n;
  return t;
}

// The stacks as lists of part counts: {2, 1} for [q k] [v].
std::vector<size_t> stack_sizes(std::initializer_list<Projection> projections) {
  std::vector<size_t> sizes;
  for (const auto& stack : projection_stacks(projections)) sizes.push_back(stack.size());
  return sizes;
}

}  // namespace

TEST_CASE("a stack holds each part's rows as the part packed alone, for every type") {
  std::mt19937 rng(std::random_device{}());
  for (GgmlType type : kTypes) {
    const int64_t block =
        ggml_type_info(type)->block_elems == 1 ? 8 : int64_t(ggml_type_info(type)->block_elems);
    for (int64_t blocks : {1, 3}) {
      const int64_t cols = block * blocks + (block == 8 ? 1 : 0);  // odd for plain types
      CAPTURE(ggml_type_name(type));
      CAPTURE(cols);
      // Part sizes of q/k/v (GQA: k and v smaller), and a one-row part.
      const int64_t part_rows[] = {5, 2, 2, 1};
      std::vector<std::vector<uint8_t>> gguf;
      std::vector<GgufMatrix> parts;
      int64_t total_rows = 0;
      for (int64_t rows : part_rows) {
        gguf.push_back(random_valid_tensor(type, rows, cols, rng));
        total_rows += rows;
      }
      for (size_t i = 0; i < gguf.size(); ++i)
        parts.push_back({type, gguf[i].data(), part_rows[i], cols});

      auto stack = repack_stacked(parts);
      REQUIRE_MESSAGE(stack.ok(), (stack.ok() ? "" : stack.error().message));
      auto expected_layout = packed_layout_for(type, total_rows, cols);
      REQUIRE(expected_layout.ok());
      CHECK(stack->layout.rows == total_rows);
      CHECK(stack->layout.total_bytes == expected_layout->total_bytes);
      CHECK(stacked_layout_for(parts)->total_bytes == stack->layout.total_bytes);

      const uint64_t row_bytes = ggml_row_bytes(type, cols);
      std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
      int64_t at = 0;
      int mismatches = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        auto alone = repack_matrix(type, parts[i].data, parts[i].rows, cols);
        REQUIRE(alone.ok());
        for (int64_t r = 0; r < parts[i].rows; ++r) {
          if (!same_packed_row(stack->layout, stack->bytes.data(), at + r, alone->layout,
                               alone->bytes.data(), r) &&
              ++mismatches <= 5)
            MESSAGE("part " << i << " row " << r << ": stack row " << at + r
                            << " differs from the part packed alone");
          // And the stack's row decodes to the GGUF reference.
          dequantize_row(type, gguf[i].data() + uint64_t(r) * row_bytes, want.data(), cols);
          std::fill(got.begin(), got.end(), std::nanf(""));
          dequantize_packed_row(*stack, at + r, got.data());
          for (int64_t k = 0; k < cols; ++k)
            if (!same_float(got[size_t(k)], want[size_t(k)]) && ++mismatches <= 5)
              MESSAGE("part " << i << " row " << r << " col " << k << ": stack " << got[size_t(k)]
                              << ", GGUF " << want[size_t(k)]);
        }
        at += parts[i].rows;
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("a stack repacked in row ranges, parts in any order, is the whole stack") {
  std::mt19937 rng(std::random_device{}());
  for (GgmlType type :
       {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F16}) {
    CAPTURE(ggml_type_name(type));
    const int64_t cols = 512;
    const std::vector<uint8_t> a = random_valid_tensor(type, 6, cols, rng);
    const std::vector<uint8_t> b = random_valid_tensor(type, 3, cols, rng);
    const GgufMatrix parts[] = {{type, a.data(), 6, cols}, {type, b.data(), 3, cols}};
    auto whole = repack_stacked(parts);
    REQUIRE(whole.ok());
    std::vector<uint8_t> pieces(whole->bytes.size(), 0);
    CHECK(repack_rows_at(type, b.data(), whole->layout, 6, 1, 2, pieces.data()).ok());
    CHECK(repack_rows_at(type, a.data(), whole->layout, 0, 4, 2, pieces.data()).ok());
    CHECK(repack_rows_at(type, b.data(), whole->layout, 6, 0, 1, pieces.data()).ok());
    CHECK(repack_rows_at(type, a.data(), whole->layout, 0, 0, 4, pieces.data()).ok());
    CHECK(pieces == whole->bytes);
    // The stack differs from the first part packed alone (it has more rows),
    // so this is not comparing a buffer with itself.
    auto first = repack_matrix(type, a.data(), 6, cols);
    REQUIRE(first.ok());
    CHECK(first->layout.rows == 6);
    CHECK(whole->layout.rows == 9);
  }
}

TEST_CASE("only matrices of one type and one row length stack") {
  std::vector<uint8_t> bytes(1 << 16, 0);
  const GgufMatrix q4k{GgmlType::Q4_K, bytes.data(), 4, 256};
  const GgufMatrix q6k{GgmlType::Q6_K, bytes.data(), 2, 256};
  const GgufMatrix wide{GgmlType::Q4_K, bytes.data(), 2, 512};
  const GgufMatrix mixed[] = {q4k, q6k};
  auto types = stacked_layout_for(mixed);
  REQUIRE(!types.ok());
  CHECK(types.error().message.find("Q6_K") != std::string::npos);
  CHECK(types.error().message.find("one type and one row length") != std::string::npos);
  const GgufMatrix ragged[] = {q4k, wide};
  CHECK(!stacked_layout_for(ragged).ok());
  CHECK(!repack_stacked(ragged).ok());
  CHECK(!stacked_layout_for(std::span<const GgufMatrix>()).ok());
  const GgufMatrix same[] = {q4k, q4k, q4k};
  auto ok = stacked_layout_for(same);
  REQUIRE(ok.ok());
  CHECK(ok->rows == 12);
  CHECK(ok->total_bytes == packed_layout_for(GgmlType::Q4_K, 12, 256)->total_bytes);
  // Fewer bytes than three matrices: the padding of one, not three.
  CHECK(ok->total_bytes < 3 * packed_layout_for(GgmlType::Q4_K, 4, 256)->total_bytes);
}

TEST_CASE("projection stacks: runs of neighbours with one type, row length and bias presence") {
  const GgufTensor q4 = matrix_tensor("q", GgmlType::Q4_K, 256, 256);
  const GgufTensor k4 = matrix_tensor("k", GgmlType::Q4_K, 256, 64);
  const GgufTensor v4 = matrix_tensor("v", GgmlType::Q4_K, 256, 64);
  const GgufTensor q6 = matrix_tensor("q6", GgmlType::Q6_K, 256, 256);
  const GgufTensor k6 = matrix_tensor("k6", GgmlType::Q6_K, 256, 64);
  const GgufTensor v6 = matrix_tensor("v6", GgmlType::Q6_K, 256, 64);
  const GgufTensor k_wide = matrix_tensor("k_wide", GgmlType::Q4_K, 512, 64);
  const GgufTensor bq = vector_tensor("bq", 256), bk = vector_tensor("bk", 64),
                   bv = vector_tensor("bv", 64);

  CHECK(stack_sizes({{&q4}, {&k4}, {&v4}}) == std::vector<size_t>{3});
  CHECK(stack_sizes({{&q4, &bq}, {&k4, &bk}, {&v4, &bv}}) == std::vector<size_t>{3});
  // Q4_K_M's usual layer: attn_v in Q6_K, q and k still stack.
  CHECK(stack_sizes({{&q4}, {&k4}, {&v6}}) == std::vector<size_t>{2, 1});
  CHECK(stack_sizes({{&q6}, {&k4}, {&v4}}) == std::vector<size_t>{1, 2});
  // Same types that are not neighbours do not stack (their outputs would
  // not be adjacent columns).
  CHECK(stack_sizes({{&q4}, {&k6}, {&v4}}) == std::vector<size_t>{1, 1, 1});
  CHECK(stack_sizes({{&q6}, {&k6}, {&v6}}) == std::vector<size_t>{3});
  CHECK(stack_sizes({{&q4}, {&k_wide}, {&v4}}) == std::vector<size_t>{1, 1, 1});
  CHECK(stack_sizes({{&q4, &bq}, {&k4}, {&v4}}) == std::vector<size_t>{1, 2});
  CHECK(stack_sizes({{&q4}, {&k4}}) == std::vector<size_t>{2});
  CHECK(stack_sizes({{&q4}, {&q6}}) == std::vector<size_t>{1, 1});

  // The parts keep their order and their biases.
  const Projection qkv[] = {{&q4, &bq}, {&k4, &bk}, {&v6, &bv}};
  auto stacks = projection_stacks(qkv);
  REQUIRE(stacks.size() == 2);
  CHECK(stacks[0][0].weight == &q4);
  CHECK(stacks[0][0].bias == &bq);
  CHECK(stacks[0][1].weight == &k4);
  CHECK(stacks[0][1].bias == &bk);
  CHECK(stacks[1][0].weight == &v6);
  CHECK(stacks[1][0].bias == &bv);
}
