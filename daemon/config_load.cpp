#include "daemon/config_load.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "engine/read_limited.h"
#include "engine/utf8.h"

namespace voltad::config {

std::string Problem::to_string() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace {

// Sets every key to its default.
struct DefaultsVisitor {
  template <class S>
  void section(S& s, const char*, const char*) {
    s.visit(*this);
  }
  template <class T>
  void operator()(T& field, const char*, const T& def, const char*, const Check<T>& = {}) {
    field = def;
  }
};

struct KeyNameVisitor {
  std::vector<std::string> names;
  std::string current;
  template <class S>
  void section(S& s, const char* name, const char*) {
    current = name;
    s.visit(*this);
  }
  template <class T>
  void operator()(T&, const char* name, const T&, const char*, const Check<T>& = {}) {
    names.push_back(current + "." + name);
  }
};

// Converting one YAML node to each value type; nullopt + why on failure.
template <class T>
std::optional<T> convert(const YAML::Node& n, std::string& why);

template <>
std::optional<std::string> convert(const YAML::Node& n, std::string& why) {
  if (!n.IsScalar()) return why = "expected a string", std::nullopt;
  return n.Scalar();
}
template <>
std::optional<int64_t> convert(const YAML::Node& n, std::string& why) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    int64_t v;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
    if (ec == std::errc::result_out_of_range) return why = "integer out of range: " + s, std::nullopt;
  }
  why = "expected an integer";
  if (n.IsScalar()) why += ", got '" + n.Scalar() + "'";
  return std::nullopt;
}
template <>
std::optional<double> convert(const YAML::Node& n, std::string& why) {
  if (n.IsScalar() && !n.Scalar().empty()) {
    const std::string& s = n.Scalar();
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && std::isfinite(v)) return v;
  }
  why = "expected a number";
  if (n.IsScalar()) why += ", got '" + n.Scalar() + "'";
  return std::nullopt;
}
template <>
std::optional<bool> convert(const YAML::Node& n, std::string& why) {
  if (n.IsScalar()) {
    if (n.Scalar() == "true") return true;
    if (n.Scalar() == "false") return false;
  }
  why = "expected true or false";
  if (n.IsScalar()) why += ", got '" + n.Scalar() + "'";
  return std::nullopt;
}
template <>
std::optional<Duration> convert(const YAML::Node& n, std::string& why) {
  if (n.IsScalar())
    if (auto d = parse_duration(n.Scalar())) return d;
  why = "expected a duration such as 30s, 500ms or 2m";
  if (n.IsScalar()) why += ", got '" + n.Scalar() + "': " + duration_problem(n.Scalar());
  return std::nullopt;
}
template <>
std::optional<ByteSize> convert(const YAML::Node& n, std::string& why) {
  if (n.IsScalar())
    if (auto s = parse_byte_size(n.Scalar())) return s;
  why = "expected a size such as 4096, 512MiB or 16GiB";
  if (n.IsScalar()) why += ", got '" + n.Scalar() + "': " + byte_size_problem(n.Scalar());
  return std::nullopt;
}
template <>
std::optional<StringList> convert(const YAML::Node& n, std::string& why) {
  if (n.IsNull()) return StringList{};
  if (!n.IsSequence()) return why = "expected a list of strings, such as [alice, bob]", std::nullopt;
  StringList out;
  for (const auto& item : n) {
    if (!item.IsScalar()) return why = "expected a list of strings; an item is not a string", std::nullopt;
    out.push_back(item.Scalar());
  }
  return out;
}

// The file's lines, for what YAML itself lets pass (scalar_problem).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// What is wrong with a string value that YAML accepts: bytes that are not
// UTF-8 (a model name no client could send back), or a quoted string that
// does not end on the line it starts on. YAML lets a quoted string run on
// over lines, so a missing closing quote swallows the keys after it into
// one value; every string of voltad's config is one line.
std::string scalar_problem(const YAML::Node& n, const std::vector<std::string_view>& lines) {
  if (!utf8_is_valid(n.Scalar())) return "not valid UTF-8";
  const YAML::Mark m = n.Mark();
  if (m.line < 0 || size_t(m.line) >= lines.size()) return "";
  const std::string_view line = lines[size_t(m.line)];
  const size_t col = size_t(std::max(m.column, 0));
  if (col >= line.size() || (line[col] != '"' && line[col] != '\'')) return "";
  const char quote = line[col];
  for (size_t i = col + 1; i < line.size(); ++i) {
    if (quote == '"' && line[i] == '\\') {
      ++i;  // an escaped character
    } else if (line[i] == quote) {
      if (quote == '\'' && i + 1 < line.size() && line[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
        continue;
      }
      return "";
    }
  }
  return std::string("the string opened with ") + quote +
         " here does not end on this line (a missing closing quote?); each value is one line";
}

// Reads one file's YAML into a Config, collecting every problem.
class YamlReader {
 public:
  YamlReader(const YAML::Node& root, std::string file, std::vector<Problem>& problems,
             std::vector<std::string_view> lines)
      : root_(root), file_(std::move(file)), problems_(problems), lines_(std::move(lines)) {}

  template <class S>
  void section(S& s, const char* name, const char*) {
    section_ = name;
    keys_.clear();
    node_ = YAML::Node();
    have_node_ = false;
    section_mark_ = YAML::Mark{};
    sections_.push_back(name);
    if (root_.IsMap()) {
      YAML::Node n = root_[name];
      if (n && !n.IsNull()) {
        section_mark_ = n.Mark();
        if (!n.IsMap()) {
          add(n.Mark(), "section '" + std::string(name) + "' must be a mapping of keys");
        } else {
          node_ = n;
          have_node_ = true;
        }
      }
    }
    s.visit(*this);
    if (!have_node_) return;
    std::map<std::string, int> first_line;  // yaml-cpp takes the first of repeated keys
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
      if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
        add(it->first.Mark(), unknown_key_message(section_ + "." + key, key));
      else if (auto [at, fresh] = first_line.emplace(key, it->first.Mark().line + 1); !fresh)
        add(it->first.Mark(), "duplicate key '" + section_ + "." + key + "' (first at line " +
                                  std::to_string(at->second) + "); keep one");
    }
  }

  template <class T>
  void operator()(T& field, const char* name, const T& def, const char*, const Check<T>& check = {}) {
    field = def;
    keys_.push_back(name);
    std::string full = section_ + "." + name;
    YAML::Node n = have_node_ ? node_[name] : YAML::Node(YAML::NodeType::Undefined);
    if (!have_node_ || !n) {
      if (check.required) {
        YAML::Mark m = have_node_ ? section_mark_ : YAML::Mark{};
        add(m, "missing required key '" + full + "'");
      }
      return;
    }
    std::string why;
    std::optional<T> value = convert<T>(n, why);
    if (!value) {
      if (!check.required && !check.describe.empty()) why += " (allowed: " + check.describe + ")";
      return add(value_mark(name, n), full + ": " + why);
    }
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, StringList>) {
      for (const YAML::Node& s : n.IsSequence() ? std::vector<YAML::Node>(n.begin(), n.end())
                                                : std::vector<YAML::Node>{n})
        if (std::string bad = scalar_problem(s, lines_); !bad.empty())
          return add(s.Mark(), full + ": " + bad);
    }
    if (check.fn) {
      std::string bad = check.fn(*value);
      if (!bad.empty()) return add(n.Mark(), full + ": " + bad);
    }
    field = std::move(*value);
  }

  void check_top_level(const std::vector<std::string>& all_keys) {
    if (!root_ || root_.IsNull()) return;
    if (!root_.IsMap()) return add(root_.Mark(), "the file must be a mapping of sections (model:, server:, ...)");
    std::map<std::string, int> first_line;
    for (auto it = root_.begin(); it != root_.end(); ++it) {
      std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
      if (std::find(sections_.begin(), sections_.end(), key) != sections_.end()) {
        // yaml-cpp reads the first of repeated sections only: the rest would be lost.
        if (auto [at, fresh] = first_line.emplace(key, it->first.Mark().line + 1); !fresh)
          add(it->first.Mark(), "duplicate section '" + key + "' (first at line " +
                                    std::to_string(at->second) + "); merge them");
        continue;
      }
      std::string best = nearest(key, sections_);
      std::string msg = "unknown section '" + key + "'";
      if (!best.empty()) msg += "; did you mean '" + best + "'?";
      else {
        // A key put at the top level: name its section.
        for (auto& full : all_keys)
          if (full.substr(full.find('.') + 1) == key) {
            msg += "; did you mean '" + full + "'?";
            break;
          }
      }
      add(it->first.Mark(), msg);
    }
  }

  void set_all_keys(std::vector<std::string> k) { all_keys_ = std::move(k); }

 private:
  static std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
    std::string best;
    size_t best_d = SIZE_MAX;
    for (auto& c : candidates)
      if (size_t d = edit_distance(word, c); d < best_d) best_d = d, best = c;
    size_t limit = std::max<size_t>(2, word.size() / 3);
    return best_d <= limit ? best : std::string();
  }

  std::string unknown_key_message(const std::string& full, const std::string& key) {
    std::string msg = "unknown key '" + full + "'";
    // The same key in another section is the likeliest slip.
    for (auto& k : all_keys_)
      if (k != full && k.substr(k.find('.') + 1) == key) return msg + "; did you mean '" + k + "'?";
    std::string best = nearest(key, keys_);
    if (!best.empty()) return msg + "; did you mean '" + best + "'?";
    return msg;
  }

  // Where a key's value is: an empty value (`path:` and nothing) has no
  // place of its own (yaml-cpp marks the next token, maybe past the end),
  // so its key's.
  YAML::Mark value_mark(const char* name, const YAML::Node& n) const {
    if (!n.IsNull()) return n.Mark();
    for (auto it = node_.begin(); it != node_.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == name) return it->first.Mark();
    return n.Mark();
  }

  void add(const YAML::Mark& m, std::string message) {
    Problem p;
    p.file = file_;
    p.line = m.line >= 0 ? m.line + 1 : 1;
    p.column = m.column >= 0 ? m.column + 1 : 1;
    p.message = std::move(message);
    problems_.push_back(std::move(p));
  }

  YAML::Node root_;
  std::string file_;
  std::vector<Problem>& problems_;
  std::string section_;
  YAML::Node node_;
  bool have_node_ = false;
  YAML::Mark section_mark_;
  std::vector<std::string> keys_;
  std::vector<std::string> sections_;
  std::vector<std::string> all_keys_;
  std::vector<std::string_view> lines_;
};

// Prints the effective config with the help text as comments.
struct YamlWriter {
  std::ostringstream out;
  template <class S>
  void section(S& s, const char* name, const char* help) {
    out << "# " << help << "\n" << name << ":\n";
    s.visit(*this);
    out << "\n";
  }
  template <class T>
  void operator()(T& field, const char* name, const T&, const char* help, const Check<T>& check = {}) {
    out << "  # " << help;
    if (!check.describe.empty() && !check.required) out << " (" << check.describe << ")";
    out << "\n  " << name << ": " << to_yaml(field) << "\n";
  }
};

std::string markdown_escape(std::string s) {
  std::string out;
  for (char c : s) out += (c == '|') ? std::string("\\|") : std::string(1, c);
  return out;
}

struct MarkdownWriter {
  std::ostringstream out;
  template <class S>
  void section(S& s, const char* name, const char* help) {
    out << "## `" << name << "`\n\n" << help << "\n\n";
    out << "| key | type | default | allowed | what it does |\n";
    out << "| --- | --- | --- | --- | --- |\n";
    current = name;
    s.visit(*this);
    out << "\n";
  }
  template <class T>
  void operator()(T&, const char* name, const T& def, const char* help, const Check<T>& check = {}) {
    out << "| `" << current << "." << name << "` | " << type_name(static_cast<const T*>(nullptr))
        << " | " << (check.required ? std::string("required") : "`" + markdown_escape(to_yaml(def)) + "`")
        << " | " << markdown_escape(check.required ? "" : check.describe) << " | "
        << markdown_escape(help) << " |\n";
  }
  std::string current;
};

}  // namespace

Config Config::defaults() {
  Config c;
  DefaultsVisitor v;
  c.visit(v);
  return c;
}

std::vector<std::string> all_key_names() {
  Config c;
  KeyNameVisitor v;
  c.visit(v);
  return v.names;
}

LoadResult load_config_text(const std::string& text, const std::string& file_name) {
  LoadResult result;
  result.config = Config::defaults();
  YAML::Node root;
  try {
    // One document: a second one (after ---) would be dropped unread.
    const std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (!docs.empty()) root = docs[0];
    if (docs.size() > 1) {
      const YAML::Mark m = docs[1].Mark();
      result.problems.push_back(
          {file_name, m.line >= 0 ? m.line + 1 : 1, m.column >= 0 ? m.column + 1 : 1,
           "a second YAML document (after ---): voltad reads one; put every section in it"});
    }
  } catch (const YAML::ParserException& e) {
    Problem p;
    p.file = file_name;
    p.line = e.mark.line >= 0 ? e.mark.line + 1 : 1;
    p.column = e.mark.column >= 0 ? e.mark.column + 1 : 1;
    // yaml-cpp's guard against deep nesting says only "bad file".
    if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&e))
      p.message = "YAML nested too deeply (" + std::to_string(deep->depth()) +
                  " levels of lists or maps): voltad's settings nest three deep at most";
    else
      p.message = "YAML syntax error: " + e.msg;
    result.problems.push_back(p);
    return result;
  }
  YamlReader reader(root, file_name, result.problems, split_lines(text));
  reader.set_all_keys(all_key_names());
  result.config.visit(reader);
  reader.check_top_level(all_key_names());
  std::stable_sort(result.problems.begin(), result.problems.end(), [](auto& a, auto& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  return result;
}

// The most read of a config file (one is a few KB).
constexpr size_t kMaxConfigBytes = size_t(1) << 20;

LoadResult load_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {  // an ifstream opens it and reads nothing
    LoadResult r;
    r.config = Config::defaults();
    r.problems.push_back({path, 1, 1, "cannot read the config file: it is a directory"});
    return r;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadResult r;
    r.config = Config::defaults();
    r.problems.push_back({path, 1, 1, std::string("cannot read the config file: ") + std::strerror(errno)});
    return r;
  }
  // A config is a few KB: /dev/zero or a log file named by mistake stops here.
  auto text = read_limited(in, kMaxConfigBytes, "the config file");
  if (!text) {
    LoadResult r;
    r.config = Config::defaults();
    r.problems.push_back({path, 1, 1, text.error().message});
    return r;
  }
  return load_config_text(*text, path);
}

Problem problem_at_key(const std::string& path, const std::string& section, const std::string& key,
                       std::string message) {
  Problem p{path, 1, 1, std::move(message)};
  try {
    const YAML::Node root = YAML::LoadFile(path);
    if (root.IsMap() && root[section].IsMap() && root[section][key]) {
      const YAML::Mark mark = root[section][key].Mark();
      p.line = mark.line + 1;
      p.column = mark.column + 1;
    }
  } catch (const YAML::Exception&) {  // read before and found valid; 1:1 if not now
  }
  return p;
}

std::string dump_config(Config& config) {
  YamlWriter w;
  w.out << "# voltad configuration (effective values; see docs/CONFIG.md)\n\n";
  config.visit(w);
  return w.out.str();
}

std::string config_reference_markdown() {
  Config c = Config::defaults();
  MarkdownWriter w;
  w.out
      << "# Configuration reference\n\n"
         "<!-- Generated by `voltad --config-reference` from daemon/config.h; "
         "tests/daemon/test_config.cpp fails when this file is stale. "
         "Regenerate with scripts/gen-config-doc.sh. -->\n\n"
         "voltad reads one YAML file (`--config FILE`; default "
         "`$CONFIGURATION_DIRECTORY/voltad.yaml`, else `/etc/voltad/voltad.yaml`). "
         "`voltad --verify-config FILE` checks it and prints every problem as "
         "`FILE:LINE:COL: message`; `voltad --dump-config` prints the effective values.\n\n"
         "Types: a *duration* is `500ms`, `30s`, `2m` or `1h` (a bare number is seconds); a "
         "*size* is a byte count with an optional unit (`KiB`, `MiB`, `GiB`, `TiB`, or decimal "
         "`KB`, `MB`, `GB`, `TB`). Paths may use `${RUNTIME_DIRECTORY}`, `${STATE_DIRECTORY}` and "
         "`${CONFIGURATION_DIRECTORY}`: systemd sets them; without systemd they are "
         "`$XDG_RUNTIME_DIR/voltad` (or `/run/voltad` for root, `/tmp/voltad-UID` without "
         "`XDG_RUNTIME_DIR`), `~/.local/state/voltad` (or `/var/lib/voltad`) and "
         "`/etc/voltad`; and `${HOME}`. Any other `${...}` is a problem. Strings are UTF-8 "
         "and one line each (a quoted string that does not end on its line is a problem: a "
         "missing closing quote), and a file is one YAML document.\n\n";
  c.visit(w);
  return w.out.str();
}

}  // namespace voltad::config
