#include "engine/backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/logprobs.h"

namespace voltad {

Status validate_chunks(std::span<const BatchChunk> chunks, int64_t n_vocab,
                       const KvBlockPool& pool) {
  // (The CUDA backend has no graph and no kernel shapes for 0 tokens.)
  if (chunks.empty()) return make_error("a step of no sequences: nothing to run");
  for (size_t i = 0; i < chunks.size(); ++i) {
    const BatchChunk& c = chunks[i];
    std::string where =
        "chunk " + std::to_string(i) + " (sequence " + std::to_string(c.seq_id) + ")";
    if (c.tokens.empty()) return make_error(where + ": no tokens");
    if (c.start_pos < 0) return make_error(where + ": negative start position");
    int64_t end = int64_t(c.start_pos) + int64_t(c.tokens.size());
    if (end > pool.capacity(c.seq_id))
      return make_error(where + ": positions up to " + std::to_string(end) + " but only " +
                        std::to_string(pool.capacity(c.seq_id)) + " reserved in the KV cache");
    for (size_t t = 0; t < c.tokens.size(); ++t)
      if (c.tokens[t] < 0 || c.tokens[t] >= n_vocab)
        return make_error(where + ": token id " + std::to_string(c.tokens[t]) + " at index " +
                          std::to_string(t) + " is outside the vocabulary (" +
                          std::to_string(n_vocab) + ")");
    if (c.top_k < 0 || c.top_k > kMaxCandidates)
      return make_error(where + ": top_k " + std::to_string(c.top_k) + " is outside 0.." +
                        std::to_string(kMaxCandidates));
    if (c.top_k > 0 && c.logits != BatchChunk::Logits::Last)
      return make_error(where + ": candidates (top_k) are for the last token's logits only");
    if (c.log_z && c.top_k == 0)
      return make_error(where + ": a row's normalizer (log_z) comes with candidates (top_k)");
    if (c.noise.on && c.top_k == 0)
      return make_error(where + ": noise ranks candidates (top_k), which it has none of");
    if (c.noise.on && !(c.noise.temperature > 0 && std::isfinite(c.noise.temperature)))
      return make_error(where + ": noise at temperature " + std::to_string(c.noise.temperature) +
                        "; it must be positive");
    for (size_t j = 0; j < i; ++j)
      if (chunks[j].seq_id == c.seq_id)
        return make_error(where + ": the sequence appears twice in one step");
  }
  return {};
}

int32_t candidate_k_of(std::span<const BatchChunk> chunks) {
  int32_t k = 0;
  for (const BatchChunk& c : chunks) k = std::max(k, c.top_k);
  return k;
}

bool log_z_wanted(std::span<const BatchChunk> chunks) {
  return std::any_of(chunks.begin(), chunks.end(),
                     [](const BatchChunk& c) { return c.top_k > 0 && c.log_z; });
}

void select_candidates(std::span<const float> rows, int64_t n_rows, int64_t n_vocab, int32_t k,
                       bool log_z, ForwardOutput& out, std::span<const kernels::RowNoise> noise) {
  VOLTAD_CHECK(noise.empty() || int64_t(noise.size()) == n_rows);
  k = int32_t(std::min<int64_t>(k, n_vocab));  // a tiny model's vocabulary
  out.candidate_k = k;
  out.n_candidate_rows = n_rows;
  out.candidate_log_z.clear();
  if (log_z)
    for (int64_t r = 0; r < n_rows; ++r)
      out.candidate_log_z.push_back(
          row_log_normalizer(rows.subspan(size_t(r * n_vocab), size_t(n_vocab))));
  out.candidate_ids.resize(size_t(n_rows * k));
  out.candidate_logits.resize(size_t(n_rows * k));
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  std::vector<float> keys;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* logits = rows.data() + r * n_vocab;
    const float* row = logits;  // what the row is ranked by
    if (!noise.empty() && noise[size_t(r)].on) {
      const kernels::RowNoise& rn = noise[size_t(r)];
      const uint64_t base = kernels::noise_base(rn);
      keys.resize(size_t(n_vocab));
      for (int64_t i = 0; i < n_vocab; ++i)
        keys[size_t(i)] = kernels::noise_key(logits[i], rn.temperature, base, i);
      row = keys.data();
    }
    // NaN ranks below every number, as in kernels/topk.h.
    auto better = [row](int32_t a, int32_t b) {
      const bool a_nan = std::isnan(row[a]), b_nan = std::isnan(row[b]);
      if (a_nan != b_nan) return b_nan;
      if (a_nan) return a < b;
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    };
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
    for (int32_t i = 0; i < k; ++i) {
      out.candidate_ids[size_t(r * k + i)] = ids[size_t(i)];
      out.candidate_logits[size_t(r * k + i)] = logits[ids[size_t(i)]];
    }
  }
}

void set_output_rows(std::span<const BatchChunk> chunks, std::vector<float>&& all_rows,
                     int64_t n_vocab, ForwardOutput& out) {
  out.n_vocab = n_vocab;
  const int32_t k = candidate_k_of(chunks);
  if (k == 0) {
    out.logits = std::move(all_rows);
    out.n_rows = int64_t(out.logits.size()) / std::max<int64_t>(n_vocab, 1);
    select_candidates({}, 0, n_vocab, 0, false, out);
    return;
  }
  std::vector<float> full, wanted;
  std::vector<kernels::RowNoise> noise;  // the candidate rows'
  const size_t row_floats = size_t(n_vocab);
  size_t row = 0;
  for (const BatchChunk& c : chunks) {
    if (c.top_k > 0) noise.push_back(c.noise);
    size_t rows = c.logits == BatchChunk::Logits::All ? c.tokens.size()
                                                      : c.logits == BatchChunk::Logits::Last;
    auto first = all_rows.begin() + std::ptrdiff_t(row * row_floats);
    auto last = first + std::ptrdiff_t(rows * row_floats);
    std::vector<float>& dst = c.top_k > 0 ? wanted : full;
    dst.insert(dst.end(), first, last);
    row += rows;
  }
  out.logits = std::move(full);
  out.n_rows = int64_t(out.logits.size() / row_floats);
  select_candidates(wanted, int64_t(wanted.size() / row_floats), n_vocab, k, log_z_wanted(chunks),
                    out, noise);
}

}  // namespace voltad
