// ProgressBar: the one line a DataLoader shows on a terminal while it runs:
//   "data: 1234/20000 items (6%)  6912 items/s  ETA 2.4s"
// rewritten in place (carriage return) at most ten times a second, and ended with a
// newline by Finish. Whether to show it at all is the caller's (ShowProgress: only on
// a terminal unless asked), so logs of runs without one stay clean.
//
// Thread safety: none; the loader's consumer thread uses it.
#ifndef DROVER_SDK_RUNTIME_PROGRESS_BAR_H_
#define DROVER_SDK_RUNTIME_PROGRESS_BAR_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"

namespace drover::internal {

class ProgressBar {
 public:
  // Writes to `out` (not owned; null: shows nothing). `unit` names what is counted.
  ProgressBar(std::string name, std::string unit, int64_t total, std::FILE* out, Clock* clock);

  // `done` of total now; redraws if the last line is older than 100 ms.
  void Update(int64_t done);
  // The last line, and a newline. Idempotent.
  void Finish(int64_t done);

  // The line for `done` of `total` at `rate` per second (0: unknown yet).
  static std::string Line(const std::string& name, const std::string& unit, int64_t done,
                          int64_t total, double rate);

 private:
  void Draw(int64_t done, absl::Time now);

  const std::string name_;
  const std::string unit_;
  const int64_t total_;
  std::FILE* const out_;
  Clock* const clock_;
  const absl::Time start_;
  absl::Time drawn_ = absl::InfinitePast();
  bool finished_ = false;
};

// True if a loader with `mode` (0 auto, 1 on, 2 off) should show progress on `fd`:
// auto means only when `fd` is a terminal.
bool ShowProgress(int mode, int fd);

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_PROGRESS_BAR_H_
