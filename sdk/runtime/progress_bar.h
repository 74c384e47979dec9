// The DataLoader's progress on a terminal: common/progress_line.h's ProgressMeter
// (count, bar, rate, ETA) drawn on a ProgressLine, redrawn at most ten times a second;
// at the end the line is replaced by one summary line that stays
//   "data: 20000 items in 3.1s (6450 items/s)"
// Whether to show it at all: LoaderLine (only on a terminal unless asked), so logs of
// runs without one stay clean.
//
// Thread safety: none; the loader's consumer thread uses it.
#ifndef DROVER_SDK_RUNTIME_PROGRESS_BAR_H_
#define DROVER_SDK_RUNTIME_PROGRESS_BAR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/progress_line.h"

namespace drover::internal {

class ProgressBar {
 public:
  // Draws on `line` (owned, not null). `unit` names what is counted.
  ProgressBar(std::string name, std::string unit, int64_t total,
              std::unique_ptr<ProgressLine> line, Clock* clock);

  // `done` of total now.
  void Update(int64_t done);
  // Erases the bar and leaves the summary line. Idempotent.
  void Finish(int64_t done);

  // The summary of `done` units in `elapsed`.
  static std::string Summary(const std::string& name, const std::string& unit, int64_t done,
                             absl::Duration elapsed);

 private:
  const std::string name_;
  const std::string unit_;
  Clock* const clock_;
  const absl::Time start_;
  ProgressMeter meter_;
  std::unique_ptr<ProgressLine> line_;  // null once finished
};

// The line a loader with `mode` (0 auto, 1 on, 2 off) draws on stderr, or null: auto
// means only when stderr is a terminal (ProgressLine::ForStderr's rules).
std::unique_ptr<ProgressLine> LoaderLine(int mode);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_PROGRESS_BAR_H_
