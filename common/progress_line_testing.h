// For tests of code that draws on a ProgressLine: a terminal that keeps every byte it
// is sent, and lines that draw on it with an injected clock. Thread-safe (a line may
// be drawn from any thread while the test reads text()).
#ifndef DROVER_COMMON_PROGRESS_LINE_TESTING_H_
#define DROVER_COMMON_PROGRESS_LINE_TESTING_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/progress_line.h"

namespace drover::testing {

class CapturedTerminal {
 public:
  // A line `columns` wide drawing on this terminal; it must not outlive it.
  std::unique_ptr<ProgressLine> Line(Clock* clock, int columns = 120) {
    ProgressLine::Options o;
    o.write = [this](absl::string_view s) { Write(s); };
    o.columns = [columns] { return columns; };
    o.clock = clock;
    return std::make_unique<ProgressLine>(std::move(o));
  }
  void Write(absl::string_view s) {
    absl::MutexLock lock(&mu_);
    text_.append(s.data(), s.size());
  }
  // Everything written so far.
  std::string text() {
    absl::MutexLock lock(&mu_);
    return text_;
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    text_.clear();
  }

 private:
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover::testing

#endif  // DROVER_COMMON_PROGRESS_LINE_TESTING_H_
