// The human-readable summary `voltad-run -m MODEL --info` prints.
#pragma once

#include <string>

namespace voltad {

class GgufFile;
struct ModelConfig;

// Architecture and sizes (when config is non-null), per-type tensor counts and
// bytes, tokenizer model / pre-tokenizer / vocabulary size, the chat template
// (its family when recognised, else its first line) and the file size.
// Multi-line, ends with a newline.
std::string describe_model(const GgufFile& file, const ModelConfig* config);

// "chatml", "llama3", or "" when the template is not one we recognise.
std::string chat_template_family(const std::string& chat_template);

}  // namespace voltad
