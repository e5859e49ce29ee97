#include "engine/chat_template.h"

#include <string_view>

#include "engine/utf8.h"

namespace voltad {

namespace {

// What Python's str.isspace() accepts, since the templates' `trim` filter is
// str.strip(): White_Space plus the information separators U+001C..U+001F.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Jinja's `trim`: strips leading and trailing Unicode whitespace.
std::string python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    Utf8Char c = utf8_decode(s, begin);
    if (!c.valid || !is_python_space(c.cp)) break;
    begin += c.length;
  }
  size_t end = begin;
  for (size_t i = begin; i < s.size();) {
    Utf8Char c = utf8_decode(s, i);
    i += c.length;
    if (!c.valid || !is_python_space(c.cp)) end = i;
  }
  return std::string(s.substr(begin, end - begin));
}

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Qwen3's template on an assistant turn: the answer and, when the text has
// a </think>, the reasoning before it (its Jinja split/strip calls).
void split_reasoning(std::string_view text, std::string_view& content,
                     std::string_view& reasoning) {
  content = text;
  reasoning = {};
  size_t first_close = text.find("</think>");
  if (first_close == std::string_view::npos) return;
  size_t last_close = text.rfind("</think>");
  content = lstrip_newlines(text.substr(last_close + 8));
  std::string_view before = rstrip_newlines(text.substr(0, first_close));
  size_t open = before.rfind("<think>");
  if (open != std::string_view::npos) before = before.substr(open + 7);
  reasoning = lstrip_newlines(before);
}

// Builds a RenderedChat: markup as is, users' text with its range noted.
struct ChatWriter {
  RenderedChat r;
  ChatWriter& markup(std::string_view s) {
    r.text += s;
    return *this;
  }
  ChatWriter& user(std::string_view s) {
    if (!s.empty()) r.literal.push_back({r.text.size(), r.text.size() + s.size()});
    r.text += s;
    return *this;
  }
};

RenderedChat render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           const std::string& bos_text) {
  ChatWriter out;
  out.markup(bos_text);
  for (const ChatMessage& m : messages)
    out.markup("<|start_header_id|>")
        .user(m.role)
        .markup("<|end_header_id|>\n\n")
        .user(python_strip(m.content))
        .markup("<|eot_id|>");
  if (add_generation_prompt) out.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return std::move(out.r);
}

RenderedChat render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           const ChatRenderOptions& options) {
  ChatWriter out;
  if (!options.default_system.empty() && !messages.empty() && messages[0].role != "system")
    out.markup("<|im_start|>system\n" + options.default_system + "<|im_end|>\n");

  // Qwen3: the last user turn that is not a wrapped tool response.
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (messages[i].role == "user" && !tool_response) {
      last_query = i;
      break;
    }
  }

  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out.markup("<|im_start|>").user(m.role).markup("\n");
    if (options.qwen3_thinking && m.role == "assistant") {
      std::string_view content, reasoning;
      split_reasoning(m.content, content, reasoning);
      bool last = i + 1 == messages.size();
      if (i > last_query && (last || !reasoning.empty())) {
        out.markup("<think>\n")
            .user(rstrip_newlines(lstrip_newlines(reasoning)))
            .markup("\n</think>\n\n")
            .user(lstrip_newlines(content));
      } else {
        out.user(content);
      }
    } else {
      out.user(m.content);
    }
    out.markup("<|im_end|>\n");
  }
  if (add_generation_prompt) out.markup("<|im_start|>assistant\n");
  return std::move(out.r);
}

}  // namespace

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::Llama3:
      return "llama3";
    case ChatFormat::ChatML:
      return "chatml";
  }
  return "?";
}

Result<ChatFormat> choose_chat_format(const std::string& gguf_template,
                                      const std::string& override_name,
                                      const std::string& how_to_choose) {
  if (override_name == "llama3") return ChatFormat::Llama3;
  if (override_name == "chatml") return ChatFormat::ChatML;
  if (!override_name.empty() && override_name != "auto")
    return make_error("unknown chat template \"" + override_name +
                      "\"; use auto, llama3 or chatml");
  if (contains(gguf_template, "<|start_header_id|>")) return ChatFormat::Llama3;
  if (contains(gguf_template, "<|im_start|>")) return ChatFormat::ChatML;
  if (gguf_template.empty())
    return make_error("the model has no chat template (tokenizer.chat_template); " + how_to_choose +
                      " to choose one");
  std::string start = utf8_sanitize(std::string_view(gguf_template).substr(0, 60));
  return make_error(
      "the model's chat template (starting \"" + start +
      "\") is neither Llama 3 nor ChatML style; " + how_to_choose + " if one of them fits the model");
}

std::string chat_markers_missing(ChatFormat format, const Tokenizer& tokenizer) {
  static const std::vector<std::string> llama3 = {"<|start_header_id|>", "<|end_header_id|>",
                                                  "<|eot_id|>"};
  static const std::vector<std::string> chatml = {"<|im_start|>", "<|im_end|>"};
  std::string missing;
  for (const std::string& marker : format == ChatFormat::Llama3 ? llama3 : chatml)
    if (!tokenizer.find_token(marker)) missing += (missing.empty() ? "" : ", ") + marker;
  if (missing.empty()) return "";
  return std::string("the ") + chat_format_name(format) + " chat template's markers (" + missing +
         ") are not tokens of the model's vocabulary: its chats would be read as text";
}

ChatRenderOptions chat_render_options_from_template(ChatFormat format,
                                                    const std::string& gguf_template) {
  ChatRenderOptions options;
  if (format != ChatFormat::ChatML) return options;
  options.qwen3_thinking =
      contains(gguf_template, "reasoning_content") && contains(gguf_template, "<think>");

  // A default system prompt is a literal "<|im_start|>system\n...<|im_end|>"
  // in the template (the newline as a character or as Jinja's \n escape).
  // Anything with quotes, braces or escapes in between is template logic
  // (Qwen3 writes the user's system message there), not a default.
  const std::string_view t = gguf_template;
  const std::string_view head = "<|im_start|>system";
  for (size_t at = t.find(head); at != std::string_view::npos; at = t.find(head, at + 1)) {
    size_t start = at + head.size();
    if (t.substr(start).starts_with("\n")) {
      start += 1;
    } else if (t.substr(start).starts_with("\\n")) {
      start += 2;
    } else {
      continue;
    }
    size_t end = t.find("<|im_end|>", start);
    if (end == std::string_view::npos || end == start) continue;
    std::string_view text = t.substr(start, end - start);
    if (text.find_first_of("'\"{}+\\") != std::string_view::npos) continue;
    options.default_system = std::string(text);
    break;
  }
  return options;
}

RenderedChat render_chat_parts(ChatFormat format, const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt, const std::string& bos_text,
                               const ChatRenderOptions& options) {
  switch (format) {
    case ChatFormat::Llama3:
      return render_llama3(messages, add_generation_prompt, bos_text);
    case ChatFormat::ChatML:
      return render_chatml(messages, add_generation_prompt, options);
  }
  return {};
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos_text,
                        const ChatRenderOptions& options) {
  return render_chat_parts(format, messages, add_generation_prompt, bos_text, options).text;
}

}  // namespace voltad
