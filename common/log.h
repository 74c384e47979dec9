// Minimal leveled logging to stderr: `DROVER_LOG(INFO) << "node " << id << " joined";`
//
// Abseil 20220623 has no absl/log. This writes one line per statement with a UTC
// timestamp, level, and source location; it is thread-safe (one write(2) per line).
#ifndef DROVER_COMMON_LOG_H_
#define DROVER_COMMON_LOG_H_

#include <sstream>
#include <string>

namespace drover {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; DROVER_LOG_LEVEL=debug lowers it.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// A short program name printed on every line ("scheduler", "agent").
void SetLogTag(const std::string& tag);

namespace internal {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return out_; }

 private:
  LogLevel level_;
  std::ostringstream out_;
};
// Turns the stream expression into void so DROVER_LOG is one expression (safe in an
// unbraced if/else).
struct Voidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal
}  // namespace drover

#define DROVER_LOG_LEVEL_DEBUG ::drover::LogLevel::kDebug
#define DROVER_LOG_LEVEL_INFO ::drover::LogLevel::kInfo
#define DROVER_LOG_LEVEL_WARNING ::drover::LogLevel::kWarning
#define DROVER_LOG_LEVEL_ERROR ::drover::LogLevel::kError

#define DROVER_LOG(level)                                                      \
  (DROVER_LOG_LEVEL_##level < ::drover::MinLogLevel())                         \
      ? (void)0                                                                \
      : ::drover::internal::Voidify() &                                        \
            ::drover::internal::LogLine(DROVER_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#endif  // DROVER_COMMON_LOG_H_
