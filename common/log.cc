#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace drover {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("DROVER_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int> g_min_level{static_cast<int>(LevelFromEnv())};
std::mutex g_tag_mu;
std::string* g_tag = new std::string("drover");

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level = static_cast<int>(level); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

void SetLogTag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(g_tag_mu);
  *g_tag = tag;
}

namespace internal {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(g_tag_mu);
    tag = *g_tag;
  }
  out_ << LevelName(level_)
       << absl::FormatTime(" %Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone())
       << tag << "[" << getpid() << "] " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogLine::~LogLine() {
  out_ << '\n';
  const std::string s = out_.str();
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
}

}  // namespace internal
}  // namespace drover
