#include "daemon/engine_warmup.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "daemon/log.h"

namespace voltad {

namespace {

// The scheduler's sequence ids start at 1; 0 is free until it wraps around.
constexpr int32_t kWarmupSequence = 0;

class HangingBackend final : public Backend {
 public:
  HangingBackend(std::unique_ptr<Backend> inner, std::string file)
      : inner_(std::move(inner)), file_(std::move(file)) {}
  std::string name() const override { return inner_->name(); }
  Status forward(std::span<const BatchChunk> chunks, ForwardOutput& out) override {
    while (::access(file_.c_str(), F_OK) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return inner_->forward(chunks, out);
  }
  KvBlockPool& kv_pool() override { return inner_->kv_pool(); }
  std::string unusable_reason() const override { return inner_->unusable_reason(); }

 private:
  std::unique_ptr<Backend> inner_;
  std::string file_;
};

}  // namespace

Status warm_up(Backend& backend, int32_t token) {
  KvBlockPool& pool = backend.kv_pool();
  if (pool.has_sequence(kWarmupSequence)) return make_error("warm-up: KV slot 0 is in use");
  if (!pool.reserve(kWarmupSequence, 1))
    return make_error("warm-up: the KV cache has no block for one token");
  std::vector<int32_t> tokens{token};
  BatchChunk chunk;
  chunk.seq_id = kWarmupSequence;
  chunk.start_pos = 0;
  chunk.tokens = tokens;
  chunk.logits = BatchChunk::Logits::Last;
  ForwardOutput out;
  Status s = backend.forward(std::span<const BatchChunk>(&chunk, 1), out);
  pool.release(kWarmupSequence);
  if (!s.ok()) return make_error("warm-up forward pass failed: " + s.error().message);
  if (out.n_rows != 1) return make_error("warm-up forward pass returned no logits");
  return {};
}

std::optional<std::string> hang_file_for_tests() {
  const char* f = std::getenv("VOLTAD_TEST_HANG_FILE");
  if (!f || !*f) return std::nullopt;
  return std::string(f);
}

std::unique_ptr<Backend> make_hanging_backend_for_tests(std::unique_ptr<Backend> inner,
                                                        std::string hang_file) {
  spdlog::warn("VOLTAD_TEST_HANG_FILE is set (test only): forward passes block while {} exists",
               hang_file);
  return std::make_unique<HangingBackend>(std::move(inner), std::move(hang_file));
}

}  // namespace voltad
