// Logging through spdlog. Under systemd (stderr connected to the journal,
// $JOURNAL_STREAM set) each line carries a <N> priority prefix that journald
// turns into the entry's priority; otherwise plain timestamped text.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace voltad::log {

// format: auto | plain | journal; level: trace | debug | info | warn | error.
void setup(const std::string& format, const std::string& level);
void set_level(const std::string& level);

// True when stderr is the journal (the $JOURNAL_STREAM device:inode matches).
bool stderr_is_journal();

}  // namespace voltad::log
