#include "engine/model.h"

namespace voltad {

Result<std::shared_ptr<const Model>> load_model(std::unique_ptr<GgufFile> file) {
  auto model = std::make_shared<Model>();
  auto config = read_model_config(*file);
  if (!config) return make_error(file->path() + ": " + config.error().message);
  auto weights = bind_model_weights(*file, config.value());
  if (!weights) return make_error(file->path() + ": " + weights.error().message);
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
