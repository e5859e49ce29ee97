#include "engine/model_info.h"

#include <cstdio>
#include <map>

#include "engine/gguf_file.h"
#include "engine/model_config.h"

namespace voltad {
namespace {

std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return std::to_string(n) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  return format("%.1f %s", v, units[u]);
}

// Printable ASCII only, cut at `limit` characters.
std::string clean_line(std::string_view s, size_t limit) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n' || out.size() >= limit) break;
    const unsigned char c = static_cast<unsigned char>(ch);
    out += (c >= 0x20 && c < 0x7f) ? ch : '?';
  }
  if (out.size() >= limit) out += "...";
  return out;
}

void line(std::string& out, const char* label, const std::string& text) {
  out += format("%-15s", label) + text + "\n";
}

}  // namespace

std::string chat_template_family(const std::string& chat_template) {
  if (chat_template.find("<|start_header_id|>") != std::string::npos) return "llama3";
  if (chat_template.find("<|im_start|>") != std::string::npos) return "chatml";
  return "";
}

std::string describe_model(const GgufFile& file, const ModelConfig* config) {
  std::string out;
  line(out, "file:",
       file.path() + " (" + human_bytes(file.file_size()) + ", GGUF v" +
           std::to_string(file.version()) + ", " + std::to_string(file.tensors().size()) +
           " tensors, " + std::to_string(file.keys().size()) + " metadata keys)");
  if (auto name = file.get_string("general.name")) line(out, "name:", clean_line(*name, 80));

  if (config) {
    const ModelConfig& c = *config;
    line(out, "architecture:",
         c.arch_name + " (RoPE " +
             (c.rope_style == RopeStyle::Normal ? "adjacent pairs" : "NeoX halves") +
             (c.qkv_bias ? ", QKV bias" : "") + (c.qk_norm ? ", q/k norm" : "") +
             (c.has_rope_freqs ? ", rope_freqs" : "") +
             (c.tied_embeddings ? ", tied embeddings" : "") + ")");
    line(out, "sizes:",
         format("vocab %lld, dim %lld, layers %lld, heads %lld (kv %lld, head_dim %lld), "
                "ffn %lld, context %lld",
                (long long)c.n_vocab, (long long)c.dim, (long long)c.n_layers, (long long)c.n_heads,
                (long long)c.n_kv_heads, (long long)c.head_dim, (long long)c.ffn_dim,
                (long long)c.context_length));
    line(out, "norm, rope:",
         format("rms_eps %g, rope_theta %g, rope_freq_scale %g", c.rms_eps, c.rope_theta,
                c.rope_freq_scale));
  } else {
    line(out, "architecture:",
         file.get_string("general.architecture").value_or("(general.architecture missing)"));
  }

  // Per type: tensor count and bytes, largest first is noise; id order is stable.
  struct Tally {
    uint64_t count = 0, bytes = 0, elements = 0;
  };
  std::map<uint32_t, Tally> by_type;
  uint64_t total_elements = 0;
  for (const GgufTensor& t : file.tensors()) {
    Tally& tally = by_type[static_cast<uint32_t>(t.type)];
    ++tally.count;
    tally.bytes += t.n_bytes;
    tally.elements += t.n_elements;
    total_elements += t.n_elements;
  }
  line(out, "parameters:", format("%.1f M", static_cast<double>(total_elements) / 1e6));
  for (const auto& [type, tally] : by_type) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    const bool supported = info && info->supported;
    line(out, "  tensors:",
         format("%-8s %5llu tensors %12s", ggml_type_name(type).c_str(),
                (unsigned long long)tally.count, human_bytes(tally.bytes).c_str()) +
             (supported ? "" : "  (not supported by voltad)"));
  }

  std::string tokenizer = file.get_string("tokenizer.ggml.model").value_or("(none)");
  if (auto pre = file.get_string("tokenizer.ggml.pre"))
    tokenizer += ", pre '" + clean_line(*pre, 40) + "'";
  if (auto n = file.get_array_size("tokenizer.ggml.tokens"))
    tokenizer += ", " + std::to_string(*n) + " tokens";
  if (auto n = file.get_array_size("tokenizer.ggml.merges"))
    tokenizer += ", " + std::to_string(*n) + " merges";
  line(out, "tokenizer:", clean_line(tokenizer, 200));

  const std::optional<std::string> tmpl = file.get_string("tokenizer.chat_template");
  if (!tmpl) {
    line(out, "chat template:", "none in the file");
  } else if (tmpl->empty()) {
    line(out, "chat template:", "empty (the key is there, with no text)");
  } else {
    const std::string family = chat_template_family(*tmpl);
    line(out, "chat template:",
         family.empty() ? "unrecognised, starts: " + clean_line(*tmpl, 60)
                        : family + " (" + std::to_string(tmpl->size()) + " characters)");
  }
  return out;
}

}  // namespace voltad
