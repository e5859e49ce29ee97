// CudaBackendOptions::time_steps (voltad-bench --device-time): each step's
// device time from events, which must be positive and within the step's
// wall time, for a prompt chunk (launched kernels) and a decode step (the
// graph); -1 before the caller's first step (not the warm-up's), after a
// step that failed, and without the option.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "engine/backend_cuda.h"
#include "engine/model.h"

using namespace voltad;

namespace {

std::shared_ptr<const Model> tiny_model() {
  const char* src = std::getenv("VOLTAD_SOURCE_DIR");
  const auto path =
      std::filesystem::path(src ? src : ".") / "tests/fixtures/models/tiny-llama.F32.gguf";
  auto model = load_model(path.string());
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  return model.value();
}

std::unique_ptr<CudaBackend> make(bool time_steps) {
  CudaBackendOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  o.max_batch_tokens = 32;
  o.time_steps = time_steps;
  auto b = CudaBackend::create(tiny_model(), o);
  REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.error().message));
  return std::move(b).value();
}

// One step of `tokens` from `start` for sequence 0; its wall time (seconds).
double step(CudaBackend& b, const std::vector<int32_t>& tokens, int32_t start) {
  REQUIRE(b.kv_pool().reserve(0, start + int64_t(tokens.size())));
  BatchChunk chunk;
  chunk.seq_id = 0;
  chunk.start_pos = start;
  chunk.tokens = tokens;
  chunk.top_k = 1;
  ForwardOutput out;
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = b.forward(std::span<const BatchChunk>(&chunk, 1), out);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().message));
  return wall;
}

}  // namespace

TEST_CASE("time_steps: a step's device time is measured, and lies within its wall time") {
  auto b = make(true);
  CHECK(b->last_step_device_seconds() == -1.0);
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 4, 8};
  const double prompt_wall = step(*b, prompt, 0);
  const double prompt_device = b->last_step_device_seconds();
  CHECK(prompt_device > 0.0);
  CHECK(prompt_device <= prompt_wall);
  const double decode_wall = step(*b, {6}, int32_t(prompt.size()));
  const double decode_device = b->last_step_device_seconds();
  CHECK(decode_device > 0.0);
  CHECK(decode_device <= decode_wall);

  // A step the backend refuses (more tokens than max_batch_tokens) has no
  // device time, and does not keep the one before.
  std::vector<int32_t> too_many(33, 1);
  BatchChunk chunk;
  chunk.seq_id = 1;
  chunk.tokens = too_many;
  ForwardOutput out;
  CHECK_FALSE(b->forward(std::span<const BatchChunk>(&chunk, 1), out).ok());
  CHECK(b->last_step_device_seconds() == -1.0);
}

TEST_CASE("without time_steps nothing is measured") {
  auto b = make(false);
  step(*b, {1, 2, 3}, 0);
  CHECK(b->last_step_device_seconds() == -1.0);
}
