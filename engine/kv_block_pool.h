// Book-keeping of the paged KV cache: which fixed-size blocks belong to which
// sequence. The storage itself belongs to a backend (host memory for the CPU
// backend, device memory for CUDA); this class only hands out block numbers.
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace voltad {

class KvBlockPool {
 public:
  static constexpr int32_t kBlockTokens = 16;

  KvBlockPool(int32_t n_blocks, int32_t max_seq_tokens);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_blocks() const { return n_blocks_ - free_blocks(); }
  int32_t max_seq_tokens() const { return max_seq_tokens_; }
  static int32_t blocks_for(int64_t tokens) {
    return static_cast<int32_t>((tokens + kBlockTokens - 1) / kBlockTokens);
  }

  // Makes room for positions [0, n_tokens) of `seq`, adding blocks as needed.
  // False (and nothing changes) when the pool lacks the blocks or n_tokens
  // exceeds max_seq_tokens.
  bool reserve(int32_t seq, int64_t n_tokens);
  // Frees every block of `seq`; unknown sequences are ignored.
  void release(int32_t seq);

  bool has_sequence(int32_t seq) const { return tables_.count(seq) != 0; }
  // Positions [0, capacity) of `seq` have blocks.
  int64_t capacity(int32_t seq) const;
  // Block numbers of `seq`, in position order (empty for unknown sequences).
  const std::vector<int32_t>& block_table(int32_t seq) const;
  // Block and slot of one position (the position must be within capacity).
  int32_t block_of(int32_t seq, int64_t pos) const { return block_table(seq)[size_t(pos / kBlockTokens)]; }

 private:
  int32_t n_blocks_;
  int32_t max_seq_tokens_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::unordered_map<int32_t, std::vector<int32_t>> tables_;
};

}  // namespace voltad
