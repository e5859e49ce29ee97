// voltad-run: offline generation with the engine alone (no daemon).
//
//   voltad-run -m MODEL.gguf --info
//   voltad-run -m MODEL.gguf -p PROMPT [-n N] [--chat] [--temp T] [--seed S] ...
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend_cpu.h"
#ifdef VOLTAD_HAVE_CUDA
#include "engine/backend_cuda.h"
#endif
#include "engine/chat_template.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/model_info.h"
#include "engine/read_limited.h"
#include "engine/thread_pool.h"
#include "engine/tokenizer.h"
#include "engine/whole_number.h"
#include "kernels/kernel_set.h"

namespace {

constexpr int kExitUsage = 64, kExitModel = 65, kExitUnavailable = 69, kExitFailure = 1;

constexpr const char* kUsage =
    "usage: voltad-run -m MODEL.gguf --info\n"
    "       voltad-run -m MODEL.gguf -p PROMPT [options]\n"
    "       voltad-run -m MODEL.gguf -f FILE [options]\n"
    "options:\n"
    "  -p PROMPT          the prompt; -p - reads it from standard input\n"
    "  -f FILE            the prompt from FILE (for prompts longer than a command line takes)\n"
    "  -n N               tokens to generate (default 128)\n"
    "  --chat             wrap the prompt in the model's chat template\n"
    "  --system TEXT      system message (with --chat)\n"
    "  --template NAME    chat template (with --chat): auto, llama3, chatml (default auto)\n"
    "  --temp T           temperature; 0 = greedy (default 0.8)\n"
    "  --top-k K --top-p P --min-p P --repeat-penalty R\n"
    "  --presence-penalty P --frequency-penalty P\n"
    "                     OpenAI's penalties on the output so far, -2 to 2 (default 0)\n"
    "  --logit-bias ID=B  add B (-100 to 100) to token ID's logit (repeatable)\n"
    "  --seed S           random seed, for reproducible sampling\n"
    "  --stop TEXT        stop string (repeatable)\n"
    "  --backend NAME     cpu (default) or cuda (never chosen on its own)\n"
    "  --kernels SET      cuda: auto (per-architecture variants, default) or portable\n"
    "  --threads N        cpu: threads, up to 1024 (default: all; more than the CPUs\n"
    "                     this process may use is slower, and warned about)\n"
    "  --ctx N            context size in tokens, at least prompt + n, at most 1048576\n"
    "                     (default: prompt + n)\n"
    "  --dump-logits FILE write each step's logits (float32, little-endian, n_vocab per row)\n"
    "  --quiet            print only the generated text\n";

struct Args {
  std::string model, prompt, prompt_file, system, chat_template = "auto", backend = "cpu",
                                                  dump_logits, kernels = "auto";
  std::vector<std::string> stop;
  bool info = false, chat = false, quiet = false;
  int32_t n = 128, threads = 0, ctx = 0;
  voltad::SamplingParams sampling;
};

using voltad::whole_number;

// The longest context the engine takes (engine.max_context's upper bound).
constexpr int64_t kLongest = int64_t(1) << 20;
// The most prompt text read from -f or standard input: the longest context
// holds far less.
constexpr size_t kMaxPromptBytes = size_t(16) << 20;

// The sampler names its fields (temperature: ...); voltad-run's user typed
// options (--temp).
std::string option_message(std::string message) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"temperature:", "--temp:"},
      {"top_k:", "--top-k:"},
      {"top_p:", "--top-p:"},
      {"min_p:", "--min-p:"},
      {"repetition_penalty:", "--repeat-penalty:"},
      {"presence_penalty:", "--presence-penalty:"},
      {"frequency_penalty:", "--frequency-penalty:"},
      {"logit_bias:", "--logit-bias:"}};
  for (const auto& [field, option] : kNames)
    if (message.rfind(field, 0) == 0) return option + message.substr(std::strlen(field));
  return message;
}

// --logit-bias ID=BIAS into `out`: "" when taken, else what is wrong.
// Its range is the sampler's to check; an id past the vocabulary is
// checked once the model is read.
std::string parse_logit_bias(const std::string& text, std::vector<std::pair<int32_t, float>>& out) {
  const size_t eq = text.find('=');
  int32_t id = 0;
  float bias = 0;
  const std::string digits = eq == std::string::npos ? "" : text.substr(0, eq);
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit) &&
      !whole_number(digits, id))  // a whole number past int32
    return "--logit-bias: token " + digits + " is past any vocabulary";
  if (eq == std::string::npos || !whole_number(std::string_view(text).substr(0, eq), id) ||
      !whole_number(std::string_view(text).substr(eq + 1), bias))
    return "--logit-bias takes TOKEN_ID=BIAS (such as 128009=-100), not '" + text + "'";
  for (const auto& [given, _] : out)
    if (given == id)
      return "--logit-bias names token " + std::to_string(id) + " twice; give each token once";
  out.emplace_back(id, bias);
  return "";
}

// What a numeric option's value must be, for the message that refuses one.
std::string expected_value(const std::string& option) {
  if (option == "-n") return "a whole number of tokens, 0 to " + std::to_string(kLongest);
  if (option == "--threads") return "a whole number, 0 (all) to 1024";
  if (option == "--ctx") return "a whole number of tokens, 1 to " + std::to_string(kLongest);
  if (option == "--top-k") return "a whole number, 0 (off) to 2147483647";
  if (option == "--seed") return "a whole number, 0 to " + std::to_string(UINT64_MAX);
  return "a number within a float's range";  // the sampling factors; their ranges are checked after
}

int usage(const std::string& why) {
  std::fprintf(stderr, "voltad-run: %s\n%s", why.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef VOLTAD_HAVE_CUDA
  voltad::prefer_eager_kernel_loading();  // before any CUDA call
#endif
  Args a;
  a.sampling.temperature = 0.8f;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> given;  // every option, as typed
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    given.push_back(f);
    bool missing = false;  // f was the last argument: no value
    auto next = [&](std::string& out) {
      if (i + 1 >= args.size()) return !(missing = true);
      out = args[++i];
      return true;
    };
    std::string v;
    bool ok = true;
    if (f == "--version") {
      std::printf("voltad-run %s\n", VOLTAD_VERSION);
      return 0;
    }
    if (f == "-h" || f == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (f == "-m" || f == "--model") ok = next(a.model);
    else if (f == "-p" || f == "--prompt") ok = next(a.prompt);
    else if (f == "-f" || f == "--file")
      ok = next(a.prompt_file);
    else if (f == "--system") ok = next(a.system);
    else if (f == "--template") {
      ok = next(a.chat_template);
      if (ok && a.chat_template != "auto" && a.chat_template != "llama3" &&
          a.chat_template != "chatml")
        return usage("--template must be auto, llama3 or chatml, not '" + a.chat_template + "'");
    }
    else if (f == "--backend") ok = next(a.backend);
    else if (f == "--kernels") {
      ok = next(a.kernels);
      if (ok && !voltad::kernels::parse_kernel_set(a.kernels))
        return usage("--kernels must be auto or portable, not '" + a.kernels + "'");
    }
    else if (f == "--dump-logits") ok = next(a.dump_logits);
    else if (f == "--stop") ok = next(v), a.stop.push_back(v);
    else if (f == "--info") a.info = true;
    else if (f == "--chat") a.chat = true;
    else if (f == "--quiet") a.quiet = true;
    else if (f == "-n")
      ok = next(v) && whole_number(v, a.n) && a.n >= 0 && a.n <= kLongest;
    else if (f == "--threads") {
      ok = next(v) && whole_number(v, a.threads);
      if (ok && (a.threads < 0 || a.threads > 1024))
        return usage("--threads takes 0 (all) to 1024, not " + v);
    } else if (f == "--ctx") {
      ok = next(v) && whole_number(v, a.ctx);
      if (ok && (a.ctx <= 0 || a.ctx > kLongest))
        return usage("--ctx takes 1 to " + std::to_string(kLongest) + " tokens, not " + v);
    } else if (f == "--temp")
      ok = next(v) && whole_number(v, a.sampling.temperature);
    else if (f == "--top-k") ok = next(v) && whole_number(v, a.sampling.top_k);
    else if (f == "--top-p") ok = next(v) && whole_number(v, a.sampling.top_p);
    else if (f == "--min-p") ok = next(v) && whole_number(v, a.sampling.min_p);
    else if (f == "--repeat-penalty") ok = next(v) && whole_number(v, a.sampling.repetition_penalty);
    else if (f == "--presence-penalty")
      ok = next(v) && whole_number(v, a.sampling.presence_penalty);
    else if (f == "--frequency-penalty")
      ok = next(v) && whole_number(v, a.sampling.frequency_penalty);
    else if (f == "--logit-bias") {
      if (!next(v)) return usage("bad or missing value for --logit-bias");
      auto bias = parse_logit_bias(v, a.sampling.logit_bias);
      if (!bias.empty()) return usage(bias);
      continue;
    } else if (f == "--seed") {
      uint64_t s = 0;
      ok = next(v) && whole_number(v, s);
      a.sampling.seed = s;
    } else
      return usage("unknown argument '" + f + "'");
    if (!ok && missing) return usage(f + " needs a value");
    if (!ok) return usage(f + " takes " + expected_value(f) + ", not '" + v + "'");
  }
  // An option that would change nothing is a mistake, not a choice: say so.
  auto gave = [&](const char* option) {
    return std::find(given.begin(), given.end(), option) != given.end();
  };
  if (a.info)
    for (const std::string& g : given)
      if (g != "-m" && g != "--model" && g != "--info" && g != "--quiet")
        return usage("--info describes the file and exits; " + g + " would have no effect");
  if (!a.chat && gave("--template"))
    return usage("--template chooses the chat template, which only --chat uses; add --chat");
  if (!a.chat && gave("--system"))
    return usage("--system is a chat message, which only --chat sends; add --chat");
  if (a.backend == "cpu" && gave("--kernels"))
    return usage("--kernels chooses the CUDA kernels; it needs --backend cuda");
  if (a.backend == "cuda" && gave("--threads"))
    return usage("--threads sets the CPU backend's threads; --backend cuda does not use them");
  if (a.backend != "cpu" && a.backend != "cuda")
    return usage("--backend must be cpu or cuda, not '" + a.backend + "'");
  if (a.model.empty()) return usage("no model: pass -m MODEL.gguf");
  if (auto st = a.sampling.validate(); !st) return usage(option_message(st.error().message));
  if (gave("-p") + gave("--prompt") + gave("-f") + gave("--file") > 1)
    return usage("give the prompt once: -p PROMPT, -p - (standard input) or -f FILE");
  if (gave("--dump-logits") && a.dump_logits.empty())
    return usage("--dump-logits needs a file name");
  // Checked before the model loads (a large model on CUDA takes a while):
  // the logits file must be writable, and must not be the model itself,
  // which writing it would destroy under the engine's mapping.
  if (!a.dump_logits.empty()) {
    struct stat dump_st {
    }, model_st{};
    if (::stat(a.dump_logits.c_str(), &dump_st) == 0 && ::stat(a.model.c_str(), &model_st) == 0 &&
        dump_st.st_dev == model_st.st_dev && dump_st.st_ino == model_st.st_ino)
      return usage("--dump-logits " + a.dump_logits + " is the model file; name another file");
    const std::filesystem::path parent = std::filesystem::path(a.dump_logits).parent_path().empty()
                                             ? std::filesystem::path(".")
                                             : std::filesystem::path(a.dump_logits).parent_path();
    std::error_code dir_ec;
    if (std::filesystem::is_directory(a.dump_logits, dir_ec))
      return usage("--dump-logits " + a.dump_logits + " is a directory; name a file");
    const bool exists = ::access(a.dump_logits.c_str(), F_OK) == 0;
    if (exists ? ::access(a.dump_logits.c_str(), W_OK) != 0 : ::access(parent.c_str(), W_OK) != 0) {
      std::fprintf(stderr, "voltad-run: cannot write %s: %s\n", a.dump_logits.c_str(),
                   std::strerror(errno));
      return kExitFailure;
    }
  }
  if (!a.prompt_file.empty() || a.prompt == "-") {
    const bool from_stdin = a.prompt == "-" || a.prompt_file == "-";
    std::ifstream file;
    if (!from_stdin) file.open(a.prompt_file, std::ios::binary);
    std::istream& in = from_stdin ? std::cin : file;
    if (!from_stdin) {
      const int open_errno = errno;  // before anything else can change it
      std::error_code dir_ec;
      const bool dir = std::filesystem::is_directory(a.prompt_file, dir_ec);
      if (!file || dir) {
        std::fprintf(stderr, "voltad-run: cannot read the prompt from %s: %s\n",
                     a.prompt_file.c_str(), dir ? "it is a directory" : std::strerror(open_errno));
        return kExitUsage;
      }
    }
    const std::string source = from_stdin ? std::string("standard input") : a.prompt_file;
    struct stat st {};
    if (from_stdin && ::fstat(STDIN_FILENO, &st) == 0 && S_ISDIR(st.st_mode)) {
      std::fprintf(stderr,
                   "voltad-run: cannot read the prompt from standard input: it is a directory\n");
      return kExitUsage;
    }
    // The longest context (kLongest tokens) holds far less text than this.
    auto text = voltad::read_limited(in, kMaxPromptBytes, "the prompt from " + source);
    if (!text) {
      std::fprintf(stderr, "voltad-run: %s\n", text.error().message.c_str());
      return kExitUsage;
    }
    a.prompt = std::move(*text);
    // A file or `echo` ends its text with a line break that -p would not
    // have: one is dropped (as a line of text is read).
    if (!a.prompt.empty() && a.prompt.back() == '\n') a.prompt.pop_back();
    if (a.prompt.empty()) return usage("the prompt read from " + source + " is empty");
  }
  if (a.backend == "cpu" && a.threads > 0) {
    const int usable = voltad::ThreadPool::usable_cpus();
    if (a.threads > usable)
      std::fprintf(stderr,
                   "voltad-run: warning: --threads %d is more than the %d CPUs this process may "
                   "use; the extra threads wait for CPUs and make each step slower\n",
                   a.threads, usable);
  }

  auto model = voltad::load_model(a.model);
  if (!model) {
    // --info still describes a GGUF file voltad cannot run (another
    // architecture, a key missing): what it holds, then why not.
    if (a.info)
      if (auto file = voltad::GgufFile::open(a.model))
        std::fputs(voltad::describe_model(*file.value(), nullptr).c_str(), stdout);
    std::fprintf(stderr, "voltad-run: %s\n", model.error().message.c_str());
    return kExitModel;
  }
  const auto& m = *model.value();
  // The tokenizer too before --info answers: a file whose tokenizer voltad
  // refuses is described, then why (exit 65), as one it cannot run.
  // tokenizer_data_from_gguf's errors name the file; create's do not.
  auto data = voltad::tokenizer_data_from_gguf(*m.file);
  std::string tokenizer_error;
  std::optional<voltad::Tokenizer> tokenizer;
  if (!data) {
    tokenizer_error = data.error().message;
  } else if (auto t = voltad::Tokenizer::create(std::move(data).value()); !t) {
    tokenizer_error = a.model + ": " + t.error().message;
  } else {
    tokenizer.emplace(std::move(t).value());
  }
  if (a.info) std::fputs(voltad::describe_model(*m.file, &m.config).c_str(), stdout);
  if (!tokenizer) {
    std::fprintf(stderr, "voltad-run: %s\n", tokenizer_error.c_str());
    return kExitModel;
  }
  if (a.info) return 0;
  if (a.prompt.empty() && (gave("-p") || gave("--prompt")))
    return usage(
        "the prompt given with -p is empty: pass the text to continue, or -p - to read "
        "it from standard input");
  if (a.prompt.empty())
    return usage("no prompt: pass -p PROMPT, -p - (standard input) or -f FILE (or --info)");
#ifndef VOLTAD_HAVE_CUDA
  if (a.backend == "cuda") {  // as the daemon: the CUDA backend cannot run here
    std::fprintf(stderr,
                 "voltad-run: --backend cuda: this build has no CUDA backend (built without "
                 "CUDA); rebuild with -DVOLTAD_CUDA=ON, or use --backend cpu\n");
    return kExitUnavailable;
  }
#endif

  const voltad::Tokenizer& tok = tokenizer.value();
  for (const auto& [id, _] : a.sampling.logit_bias)
    if (id >= m.config.n_vocab)
      return usage("--logit-bias: token " + std::to_string(id) + " is past the model's " +
                   std::to_string(m.config.n_vocab) + "-token vocabulary");

  std::vector<int32_t> prompt;
  if (a.chat) {
    auto format = voltad::choose_chat_format(tok.data().chat_template, a.chat_template,
                                             "pass --template llama3 or --template chatml");
    if (!format) {
      std::fprintf(stderr, "voltad-run: %s\n", format.error().message.c_str());
      return kExitModel;
    }
    if (std::string why = voltad::chat_markers_missing(format.value(), tok); !why.empty()) {
      if (a.chat_template != "auto") return usage("--template " + a.chat_template + ": " + why);
      std::fprintf(stderr, "voltad-run: %s: %s\n", a.model.c_str(), why.c_str());
      return kExitModel;
    }
    std::vector<voltad::ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", a.prompt});
    auto options = voltad::chat_render_options_from_template(format.value(), tok.data().chat_template);
    // Llama 3's template writes BOS as text; ChatML templates write none.
    bool bos_as_text = format.value() == voltad::ChatFormat::Llama3 && tok.bos() >= 0;
    const voltad::RenderedChat chat = voltad::render_chat_parts(
        format.value(), messages, true, bos_as_text ? tok.token_piece(tok.bos()) : "", options);
    prompt = tok.encode(chat.text, !bos_as_text && tok.data().add_bos, chat.literal);
  } else {
    prompt = tok.encode_raw_prompt(a.prompt);  // as voltad reads a completion's
  }

  // A context too long for the engine, or a --ctx too short for the prompt
  // and -n, is the command line's fault, known before any backend is made.
  const int64_t needed = int64_t(prompt.size()) + a.n;
  if (int64_t(prompt.size()) > kLongest)
    return usage("the prompt (" + std::to_string(prompt.size()) + " tokens) alone is more than " +
                 std::to_string(kLongest) +
                 " tokens, the longest context the engine takes; shorten it");
  if (needed > kLongest)
    return usage("the prompt (" + std::to_string(prompt.size()) + " tokens) plus -n (" +
                 std::to_string(a.n) + ") is more than " + std::to_string(kLongest) +
                 " tokens, the longest context the engine takes; give a smaller -n");
  if (a.ctx > 0 && a.ctx < needed)
    return usage("--ctx " + std::to_string(a.ctx) + " holds fewer tokens than the prompt (" +
                 std::to_string(prompt.size()) + ") plus -n (" + std::to_string(a.n) +
                 "); give --ctx " + std::to_string(needed) + " or more, or leave it out");
  if (auto w = voltad::context_past_training(
          m.config, needed, "the prompt plus -n (" + std::to_string(needed) + " tokens)");
      !w.empty())
    std::fprintf(stderr, "voltad-run: warning: %s\n", w.c_str());
  const int32_t ctx = a.ctx > 0 ? a.ctx : int32_t(needed);
  voltad::Result<std::unique_ptr<voltad::Backend>> backend = voltad::make_error("no backend");
  if (a.backend == "cpu") {
    voltad::CpuBackendOptions opts;
    opts.threads = a.threads;
    opts.max_context = ctx;
    opts.max_sequences = 1;
    auto b = voltad::CpuBackend::create(model.value(), opts);
    if (b) backend = std::unique_ptr<voltad::Backend>(std::move(b).value());
    else backend = b.error();
  }
#ifdef VOLTAD_HAVE_CUDA
  if (a.backend == "cuda") {
    voltad::CudaBackendOptions opts;
    opts.max_context = ctx;
    opts.max_sequences = 1;
    opts.max_batch_tokens = 512;
    opts.kernels = *voltad::kernels::parse_kernel_set(a.kernels);
    bool progress_shown = false;  // the progress line is ended only if it was begun
    opts.on_progress = [quiet = a.quiet, &progress_shown](uint64_t done, uint64_t total,
                                                          const std::string&) {
      if (quiet) return;
      progress_shown = true;
      std::fprintf(stderr, "\rvoltad-run: loading weights %3d%%",
                   int(100.0 * double(done) / double(total)));
    };
    auto b = voltad::CudaBackend::create(model.value(), opts);
    if (progress_shown) std::fprintf(stderr, "\n");
    if (b) backend = std::unique_ptr<voltad::Backend>(std::move(b).value());
    else backend = b.error();
  }
#endif
  if (!backend) {
    const std::string& why = backend.error().message;
    const std::string prefix = a.backend + " backend: ";
    std::fprintf(stderr, "voltad-run: %s%s\n", why.rfind(prefix, 0) == 0 ? "" : prefix.c_str(),
                 why.c_str());
    // Without --ctx the context is the prompt plus -n: the backend's advice
    // (the daemon's keys, --ctx) misses the option that set it.
    if (a.ctx == 0 && why.find("KV cache") != std::string::npos)
      std::fprintf(stderr,
                   "voltad-run: the context here is the prompt plus -n (%lld tokens): a smaller "
                   "-n needs less\n",
                   static_cast<long long>(needed));
    // As voltad and voltad-bench: the model's fault 65, a backend that
    // cannot run here (no driver, no GPU; memory or threads it cannot
    // have) 69.
    if (backend.error().model_data) return kExitModel;
    return kExitUnavailable;
  }

  std::ofstream dump;
  if (!a.dump_logits.empty()) {
    dump.open(a.dump_logits, std::ios::binary);
    if (!dump) {
      std::fprintf(stderr, "voltad-run: cannot write %s: %s\n", a.dump_logits.c_str(), std::strerror(errno));
      return kExitFailure;
    }
  }
  voltad::GenerateOptions gen;
  gen.max_tokens = a.n;
  gen.sampling = a.sampling;
  gen.stop = a.stop;
  if (dump.is_open())
    gen.on_logits = [&](std::span<const float> row) {
      dump.write(reinterpret_cast<const char*>(row.data()), std::streamsize(row.size_bytes()));
    };
  // A prompt of several chunks takes a while on the CPU: its progress on a
  // terminal, a line ended once it is read.
  if (!a.quiet && ::isatty(STDERR_FILENO) && prompt.size() > size_t(gen.prefill_chunk))
    gen.on_prefill = [](size_t done, size_t total) {
      std::fprintf(stderr, "\rvoltad-run: reading the prompt: %zu / %zu tokens", done, total);
      if (done == total) std::fprintf(stderr, "\n");
    };
  // A short write (a full disk, a closed pipe) stops the generation: the
  // text or logits would be lost, and exit 0 would say they were not.
  bool written = true;
  auto result = voltad::generate(*backend.value(), tok, prompt, gen, [&](std::string_view text) {
    written = std::fwrite(text.data(), 1, text.size(), stdout) == text.size() &&
              std::fflush(stdout) == 0 && !(dump.is_open() && !dump);
    return written;
  });
  std::fputc('\n', stdout);
  if (!result) {
    std::fprintf(stderr, "voltad-run: %s\n", result.error().message.c_str());
    return kExitFailure;
  }
  if (dump.is_open()) dump.flush();
  if (!written || std::fflush(stdout) != 0 || std::ferror(stdout) || (dump.is_open() && !dump)) {
    std::fprintf(stderr, "voltad-run: cannot write %s: %s\n",
                 dump.is_open() && !dump ? a.dump_logits.c_str() : "the output",
                 std::strerror(errno));
    return kExitFailure;
  }
  if (!a.quiet) {
    // The decode rate is of the steps after the prompt's: the first token
    // comes from the prompt's last step (-n 1 has none to time).
    const auto& r = result.value();
    char decode[128];
    if (r.decode_steps > 0)
      std::snprintf(decode, sizeof decode, "in %.2f s (%d decode step%s, %.1f tok/s)",
                    r.decode_seconds, r.decode_steps, r.decode_steps == 1 ? "" : "s",
                    double(r.decode_steps) / std::max(r.decode_seconds, 1e-9));
    else  // one token, from the prompt's step, or none (the model ended at once)
      std::snprintf(decode, sizeof decode, "%s",
                    r.tokens.empty() ? "(the model ended at once)" : "(from the prompt's step)");
    std::fprintf(
        stderr,
        "voltad-run: %zu prompt tokens in %.2f s (%.1f tok/s), %zu generated %s, backend %s\n",
        prompt.size(), r.prefill_seconds, double(prompt.size()) / std::max(r.prefill_seconds, 1e-9),
        r.tokens.size(), decode, backend.value()->name().c_str());
  }
  return 0;
}
