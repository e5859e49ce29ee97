// A loaded model: the mapped file, its hyperparameters and its bound
// tensors. Immutable after load; backends share it.
#pragma once

#include <memory>
#include <string>

#include "engine/gguf_file.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/result.h"

namespace voltad {

struct Model {
  std::unique_ptr<GgufFile> file;
  ModelConfig config;
  ModelWeights weights;  // points into *file
};

// Opens, validates and binds a GGUF model: every error names the file and
// what is wrong with it.
Result<std::shared_ptr<const Model>> load_model(const std::string& path);
Result<std::shared_ptr<const Model>> load_model(std::unique_ptr<GgufFile> file);

}  // namespace voltad
