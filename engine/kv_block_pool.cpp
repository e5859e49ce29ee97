#include "engine/kv_block_pool.h"

#include "engine/result.h"

namespace voltad {

KvBlockPool::KvBlockPool(int32_t n_blocks, int32_t max_seq_tokens)
    : n_blocks_(n_blocks), max_seq_tokens_(max_seq_tokens) {
  VOLTAD_CHECK(n_blocks >= 0 && max_seq_tokens > 0);
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool KvBlockPool::reserve(int32_t seq, int64_t n_tokens) {
  if (n_tokens > max_seq_tokens_ || n_tokens < 0) return false;
  auto& table = tables_[seq];
  size_t need = size_t(blocks_for(n_tokens));
  if (need <= table.size()) return true;
  if (need - table.size() > free_.size()) {
    if (table.empty()) tables_.erase(seq);
    return false;
  }
  while (table.size() < need) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvBlockPool::release(int32_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) free_.push_back(*b);
  tables_.erase(it);
}

int64_t KvBlockPool::capacity(int32_t seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? 0 : int64_t(it->second.size()) * kBlockTokens;
}

const std::vector<int32_t>& KvBlockPool::block_table(int32_t seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kEmpty : it->second;
}

}  // namespace voltad
