#include "engine/model.h"

namespace voltad {

Result<std::shared_ptr<const Model>> load_model(std::unique_ptr<GgufFile> file) {
  auto model = std::make_shared<Model>();
  // Both name the file in each message already.
  auto config = read_model_config(*file);
  if (!config) return config.error();
  auto weights = bind_model_weights(*file, config.value());
  if (!weights) return weights.error();
  model->config = std::move(config).value();
  model->weights = std::move(weights).value();
  model->file = std::move(file);
  return std::shared_ptr<const Model>(std::move(model));
}

Result<std::shared_ptr<const Model>> load_model(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file) return file.error();
  return load_model(std::move(file).value());
}

}  // namespace voltad
