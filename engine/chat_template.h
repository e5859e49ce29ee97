// Chat prompts for the template families voltad knows. We do not run Jinja:
// the model's template text only tells which family it is, and each family
// is rendered by hand exactly as its reference template renders it
// (tests/engine/test_chat_template.cpp checks against jinja2's output of the
// real templates).
#pragma once

#include <string>
#include <vector>

#include "engine/result.h"
#include "engine/tokenizer.h"

namespace voltad {

enum class ChatFormat {
  Llama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  ChatML,  // <|im_start|>role\ncontent<|im_end|>\n  (Qwen2/3, SmolLM2)
};

// "llama3" or "chatml".
const char* chat_format_name(ChatFormat format);

// override_name: "auto" (or empty) recognises the family from the model's
// template text; "llama3" / "chatml" force one. An unrecognised template
// without an override is an error that ends with how_to_choose: what the
// caller's user sets to choose one (the daemon: its config key; voltad-run:
// --template).
Result<ChatFormat> choose_chat_format(const std::string& gguf_template,
                                      const std::string& override_name,
                                      const std::string& how_to_choose);

// The format's markers that are not one token of `tokenizer`'s vocabulary,
// as a sentence ("" when all are): forced on a model of the other family
// (or a file whose tokens lost them), the template's markup would be read
// as text and the answers would be noise.
std::string chat_markers_missing(ChatFormat format, const Tokenizer& tokenizer);

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// Options a family's template has beyond the messages.
struct ChatRenderOptions {
  // ChatML: system prompt used when the conversation has none (SmolLM2's
  // template adds one; Qwen's does not). Empty: none.
  std::string default_system;
  // ChatML: Qwen3's reasoning blocks. Assistant turns before the last user
  // turn lose their <think>...</think> part; those after it keep (or, when
  // last, get an empty) "<think>\n...\n</think>\n\n" block.
  bool qwen3_thinking = false;
};

// The family's options as read from its template text: a default system
// prompt written literally in it (SmolLM2, Qwen2.5), Qwen3's think blocks.
ChatRenderOptions chat_render_options_from_template(ChatFormat format,
                                                    const std::string& gguf_template);

// A rendered conversation: the text, and the byte ranges the messages'
// roles and contents fill (what users wrote). Encode it with
// Tokenizer::encode(text, add_bos, literal): control tokens written in a
// message ("<|im_end|>" as text) stay text, so a user cannot end a turn or
// open another one; the template's own markers are control tokens.
struct RenderedChat {
  std::string text;
  std::vector<TextRange> literal;
};

// bos_text: the BOS token's text, for families whose template writes it
// (Llama 3); pass "" when BOS is added as a token id instead.
RenderedChat render_chat_parts(ChatFormat format, const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt, const std::string& bos_text,
                               const ChatRenderOptions& options = {});
// The text alone.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& bos_text,
                        const ChatRenderOptions& options = {});

}  // namespace voltad
