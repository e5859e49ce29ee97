// Sampling from the top-k candidates a backend returns (BatchChunk::top_k)
// instead of whole logits rows: the candidates are the best of each row, and
// the sampler picks the same token from them as from the whole row.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "engine/backend_cpu.h"
#include "engine/sampler.h"

using namespace voltad;
namespace fs = std::filesystem;

namespace {

std::vector<float> random_row(std::mt19937& rng, int n) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> row(static_cast<size_t>(n));
  for (float& v : row) v = d(rng);
  return row;
}

}  // namespace

TEST_CASE("select_candidates: the k best, best first, ties to the lower id, NaN last") {
  std::vector<float> rows = {1.0f,
                             5.0f,
                             3.0f,
                             5.0f,
                             -2.0f,  // row 0: a tie at 5
                             std::numeric_limits<float>::quiet_NaN(),
                             -1.0f,
                             -INFINITY,
                             0.5f,
                             -1.0f};
  ForwardOutput out;
  select_candidates(rows, 2, 5, 4, false, out);
  REQUIRE(out.n_candidate_rows == 2);
  REQUIRE(out.candidate_k == 4);
  CHECK(std::vector<int32_t>(out.candidate_row_ids(0).begin(), out.candidate_row_ids(0).end()) ==
        std::vector<int32_t>{1, 3, 2, 0});
  CHECK(
      std::vector<float>(out.candidate_row_logits(0).begin(), out.candidate_row_logits(0).end()) ==
      std::vector<float>{5.0f, 5.0f, 3.0f, 1.0f});
  // -inf is still a number: it ranks above NaN.
  CHECK(std::vector<int32_t>(out.candidate_row_ids(1).begin(), out.candidate_row_ids(1).end()) ==
        std::vector<int32_t>{3, 1, 4, 2});
}

TEST_CASE("set_output_rows: full rows and candidate rows each in chunk order") {
  const int64_t vocab = 6;
  std::vector<int32_t> a = {1, 2}, b = {3}, c = {4, 5, 0};
  std::vector<BatchChunk> chunks(3);
  chunks[0].tokens = a;
  chunks[0].top_k = 2;  // Last, candidates
  chunks[1].tokens = b;
  chunks[1].logits = BatchChunk::Logits::None;
  chunks[2].tokens = c;
  chunks[2].logits = BatchChunk::Logits::All;  // three full rows
  std::vector<float> all;
  for (int r = 0; r < 4; ++r)
    for (int v = 0; v < vocab; ++v) all.push_back(float(r * 10 + (v * 7) % vocab));
  ForwardOutput out;
  set_output_rows(chunks, std::vector<float>(all), vocab, out);
  CHECK(out.n_rows == 3);
  CHECK(out.row(0)[0] == all[size_t(vocab)]);  // chunk 2's first row is overall row 1
  CHECK(out.n_candidate_rows == 1);
  CHECK(out.candidate_k == 2);
  // Row 0 is {0, 1, 2, 3, 4, 5} permuted by v*7 % 6 = v: ids 5 then 4.
  CHECK(out.candidate_row_ids(0)[0] == 5);
  CHECK(out.candidate_row_ids(0)[1] == 4);
  CHECK(out.candidate_log_z.empty());  // no chunk asked for it
  // With the normalizer: log(e^0 + ... + e^5) for the candidate row.
  chunks[0].log_z = true;
  set_output_rows(chunks, std::vector<float>(all), vocab, out);
  REQUIRE(out.candidate_log_z.size() == 1);
  double z = 0;
  for (int v = 0; v < vocab; ++v) z += std::exp(double(v));
  CHECK(out.candidate_log_z[0] == doctest::Approx(std::log(z)).epsilon(1e-6));
}

TEST_CASE("the sampler picks the same token from its candidates as from the whole row") {
  std::mt19937 rng(11);
  struct Setting {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  for (Setting st :
       {Setting{0.0f, 0, 1.0f, 0.0f}, Setting{0.8f, 40, 1.0f, 0.0f}, Setting{1.3f, 5, 0.9f, 0.0f},
        Setting{1.0f, 64, 0.95f, 0.05f}, Setting{0.7f, 1, 1.0f, 0.0f}}) {
    SamplingParams p;
    p.temperature = st.temperature;
    p.top_k = st.top_k;
    p.top_p = st.top_p;
    p.min_p = st.min_p;
    p.seed = 1234;
    Sampler whole(p), from_candidates(p);
    const int32_t k = from_candidates.candidates_needed(kMaxCandidates);
    REQUIRE(k > 0);
    CHECK(k == (st.temperature == 0.0f ? 1 : st.top_k));
    int differing_draws = 0;
    int32_t first = -1;
    for (int i = 0; i < 200; ++i) {
      std::vector<float> row = random_row(rng, 1000);
      ForwardOutput out;
      select_candidates(row, 1, int64_t(row.size()), k, false, out);
      const int32_t a = whole.sample(row, {}, 0);
      const int32_t b =
          from_candidates.sample_candidates(out.candidate_row_ids(0), out.candidate_row_logits(0));
      CHECK(a == b);
      if (i == 0) first = a;
      differing_draws += a != first;
    }
    if (st.temperature > 0 && st.top_k > 1) CHECK(differing_draws > 0);  // it does sample
  }
}

// A sampler at a temperature alone (OpenAI's default) draws by the Gumbel
// keys of its seed and draw (kernels/gumbel.h): a backend that ranks the
// row by them (BatchChunk::noise) sends one candidate, the token itself,
// and its logit.
TEST_CASE("a sampler at a temperature alone draws by noise: one candidate, the whole row's token") {
  std::mt19937 rng(5);
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 99;
  Sampler whole(p), from_candidates(p);
  REQUIRE(from_candidates.draws_by_noise());
  REQUIRE(from_candidates.candidates_needed(kMaxCandidates) == 1);
  int not_best = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<float> row = random_row(rng, 1000);
    const kernels::RowNoise n = from_candidates.noise();
    CHECK(n.on == 1);
    CHECK(n.seed == 99);
    CHECK(n.draw == uint64_t(i));
    CHECK(n.temperature == 0.8f);
    // A second row without noise in the same call keeps the plain order.
    const kernels::RowNoise rows_noise[2] = {n, kernels::RowNoise{}};
    std::vector<float> two = row;
    two.insert(two.end(), row.begin(), row.end());
    ForwardOutput out;
    select_candidates(two, 2, int64_t(row.size()), 4, false, out, rows_noise);
    const int32_t a = whole.sample(row, {}, 0);
    const int32_t b =
        from_candidates.sample_candidates(out.candidate_row_ids(0), out.candidate_row_logits(0));
    CHECK(a == b);
    CHECK(out.candidate_row_logits(0)[0] == row[size_t(b)]);  // its logit, not its key
    CHECK(out.candidate_row_ids(1)[0] == argmax(row));
    not_best += a != argmax(row);
  }
  CHECK(not_best > 30);  // it samples: the best logit is not always drawn
  // Any other filter or change needs more than the keys' first.
  for (int which = 0; which < 6; ++which) {
    SamplingParams q = p;
    if (which == 0) q.temperature = 0;
    if (which == 1) q.top_p = 0.9f;
    if (which == 2) q.min_p = 0.05f;
    if (which == 3) q.top_k = 40;
    if (which == 4) q.frequency_penalty = 0.5f;
    if (which == 5) q.logit_bias = {{3, 1.0f}};
    CAPTURE(which);
    CHECK_FALSE(Sampler(q).draws_by_noise());
    CHECK(Sampler(q).noise().on == 0);
  }
}

TEST_CASE("penalties or sampling without top-k need the whole row") {
  SamplingParams p;
  p.temperature = 0;
  CHECK(Sampler(p).candidates_needed(64) == 1);
  p.repetition_penalty = 1.1f;
  CHECK(Sampler(p).candidates_needed(64) == 0);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  CHECK(Sampler(p).candidates_needed(64) == 0);
  p.presence_penalty = 0;
  p.temperature = 1.0f;
  CHECK(Sampler(p).candidates_needed(64) == 1);  // by noise: its keys' first
  p.top_p = 0.9f;
  CHECK(Sampler(p).candidates_needed(64) == 0);  // top_k off, top-p on
  p.top_p = 1.0f;
  p.min_p = 0.1f;
  CHECK(Sampler(p).candidates_needed(64) == 0);
  p.min_p = 0.0f;
  p.top_k = 65;
  CHECK(Sampler(p).candidates_needed(64) == 0);  // more than a backend returns
  p.top_k = 64;
  CHECK(Sampler(p).candidates_needed(64) == 64);
}

namespace {

Result<std::shared_ptr<const Model>> tiny_llama() {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  return load_model(
      (fs::path(src ? src : ".") / "tests/fixtures/models/tiny-llama.F32.gguf").string());
}

}  // namespace

TEST_CASE("CPU backend: candidates are the best of the row the same step gives in full") {
  auto model = tiny_llama();
  REQUIRE(model.ok());
  CpuBackendOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  auto backend = CpuBackend::create(model.value(), o);
  REQUIRE(backend.ok());
  Backend& b = *backend.value();
  std::vector<int32_t> t0 = {1, 5, 9}, t1 = {2, 7};
  REQUIRE(b.kv_pool().reserve(0, 3));
  REQUIRE(b.kv_pool().reserve(1, 2));
  std::vector<BatchChunk> chunks(2);
  chunks[0].seq_id = 0;
  chunks[0].tokens = t0;
  chunks[1].seq_id = 1;
  chunks[1].tokens = t1;
  ForwardOutput full, mixed;
  REQUIRE(b.forward(chunks, full).ok());
  REQUIRE(full.n_rows == 2);
  CHECK(full.n_candidate_rows == 0);
  chunks[1].top_k = 8;
  REQUIRE(b.forward(chunks, mixed).ok());
  REQUIRE(mixed.n_rows == 1);
  REQUIRE(mixed.n_candidate_rows == 1);
  CHECK(std::equal(mixed.row(0).begin(), mixed.row(0).end(), full.row(0).begin()));
  std::vector<float> sorted(full.row(1).begin(), full.row(1).end());
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (int i = 0; i < 8; ++i) {
    CHECK(mixed.candidate_row_logits(0)[size_t(i)] == sorted[size_t(i)]);
    CHECK(full.row(1)[size_t(mixed.candidate_row_ids(0)[size_t(i)])] == sorted[size_t(i)]);
  }
  // Out of range, or on a chunk that does not end in its last logits: refused.
  chunks[1].top_k = kMaxCandidates + 1;
  CHECK_FALSE(b.forward(chunks, mixed).ok());
  chunks[1].top_k = 4;
  chunks[1].logits = BatchChunk::Logits::All;
  CHECK_FALSE(b.forward(chunks, mixed).ok());
}

// A KV cache larger than the machine can hold is an error that says so and
// what to lower, never an abort (std::bad_alloc on the allocation).
TEST_CASE("CPU backend: a KV cache too large for this machine is refused with the way out") {
  auto model = tiny_llama();
  REQUIRE(model.ok());
  CpuBackendOptions o;
  o.max_context = 1 << 30;
  o.max_sequences = 64;
  auto backend = CpuBackend::create(model.value(), o);
  REQUIRE_FALSE(backend.ok());
  CHECK(backend.error().message.find("a KV cache of") != std::string::npos);
  CHECK(backend.error().message.find("half of this machine's memory") != std::string::npos);
  CHECK(backend.error().message.find("engine.max_context") != std::string::npos);
}
