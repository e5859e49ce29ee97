#include "daemon/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace voltad::log {

namespace {

// Writes "<prio>message" lines to stderr, the sd-daemon(3) convention.
class JournalPrefixSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    int prio = 6;
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: prio = 7; break;
      case spdlog::level::info: prio = 6; break;
      case spdlog::level::warn: prio = 4; break;
      case spdlog::level::err: prio = 3; break;
      case spdlog::level::critical: prio = 2; break;
      default: break;
    }
    std::fprintf(stderr, "<%d>%.*s\n", prio, static_cast<int>(msg.payload.size()), msg.payload.data());
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

bool stderr_is_journal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  if (!js) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(js, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

void set_level(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level == "warn" ? "warning" : level));
}

void setup(const std::string& format, const std::string& level) {
  bool journal = format == "journal" || (format == "auto" && stderr_is_journal());
  std::shared_ptr<spdlog::logger> logger;
  if (journal) {
    logger = std::make_shared<spdlog::logger>("voltad", std::make_shared<JournalPrefixSink>());
  } else {
    logger = std::make_shared<spdlog::logger>("voltad", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %v");
  }
  spdlog::set_default_logger(logger);
  set_level(level);
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace voltad::log
