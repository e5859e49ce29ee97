// Reading, checking and printing a Config. Every problem in a file is
// reported, each as FILE:LINE:COL: message, not just the first.
#pragma once

#include <string>
#include <vector>

#include "daemon/config.h"

namespace voltad::config {

struct Problem {
  std::string file;
  int line = 1;  // 1-based
  int column = 1;
  std::string message;
  std::string to_string() const;  // "FILE:LINE:COL: message"
};

struct LoadResult {
  Config config;  // defaults where the file had a problem
  std::vector<Problem> problems;
  bool ok() const { return problems.empty(); }
};

LoadResult load_config_file(const std::string& path);

// A problem with a value only this machine can judge (an account name),
// placed at section.key's value in the file (1:1 if it cannot be found).
Problem problem_at_key(const std::string& path, const std::string& section, const std::string& key,
                       std::string message);
LoadResult load_config_text(const std::string& text, const std::string& file_name);

// The effective config as YAML, help text as comments; passes --verify-config.
std::string dump_config(Config& config);

// docs/CONFIG.md, generated from the declarations.
std::string config_reference_markdown();

// "section.key" for every key, in declaration order.
std::vector<std::string> all_key_names();

}  // namespace voltad::config
