// The tiny Llama fixture the scheduler tests run on (test_scheduler.cpp,
// test_scheduler_guard.cpp): the model, its tokenizer, and CPU backends of
// any size over it. One per test binary.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/backend_cpu.h"
#include "engine/gguf_file.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

namespace voltad::test {

inline std::string scheduler_model_path() {
  const char* env = std::getenv("VOLTAD_SOURCE_DIR");
  std::filesystem::path src =
      env ? env : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  return (src / "tests" / "fixtures" / "models" / "tiny-llama.F32.gguf").string();
}

struct SchedulerFixture {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Tokenizer> tokenizer;

  SchedulerFixture() {
    auto m = load_model(scheduler_model_path());
    REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
    model = m.value();
    auto data = tokenizer_data_from_gguf(*model->file);
    REQUIRE_MESSAGE(data.ok(), (data.ok() ? "" : data.error().message));
    auto t = Tokenizer::create(std::move(data.value()));
    REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
    tokenizer = std::make_unique<Tokenizer>(std::move(t.value()));
  }

  // A one-thread CPU backend; kv_blocks 0: max_context x max_sequences.
  std::unique_ptr<CpuBackend> backend(int32_t max_context, int32_t max_sequences,
                                      int32_t kv_blocks = 0) {
    CpuBackendOptions o;
    o.threads = 1;
    o.max_context = max_context;
    o.max_sequences = max_sequences;
    o.kv_blocks = kv_blocks;
    auto b = CpuBackend::create(model, o);
    REQUIRE(b.ok());
    return std::move(b.value());
  }
};

inline SchedulerFixture& fixture() {
  static SchedulerFixture f;
  return f;
}

}  // namespace voltad::test
