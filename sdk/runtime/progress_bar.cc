#include "sdk/runtime/progress_bar.h"

#include <unistd.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"

namespace drover::internal {

ProgressBar::ProgressBar(std::string name, std::string unit, int64_t total, std::FILE* out, Clock* clock)
    : name_(std::move(name)), unit_(std::move(unit)), total_(total), out_(out), clock_(clock),
      start_(clock->Now()) {}

std::string ProgressBar::Line(const std::string& name, const std::string& unit, int64_t done,
                              int64_t total, double rate) {
  const double pct = total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
  std::string line = absl::StrFormat("%s: %d/%d %s (%.0f%%)", name, done, total, unit, std::floor(pct));
  if (rate > 0) {
    absl::StrAppendFormat(&line, "  %.0f %s/s", rate, unit);
    if (done < total) {
      const double eta = static_cast<double>(total - done) / rate;
      absl::StrAppendFormat(&line, "  ETA %s", absl::FormatDuration(absl::Milliseconds(std::round(eta * 10) * 100)));
    }
  }
  return line;
}

void ProgressBar::Draw(int64_t done, absl::Time now) {
  const double secs = absl::ToDoubleSeconds(now - start_);
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  // The trailing spaces erase what a longer previous line left.
  std::fprintf(out_, "\r%s   ", Line(name_, unit_, done, total_, rate).c_str());
  std::fflush(out_);
  drawn_ = now;
}

void ProgressBar::Update(int64_t done) {
  if (out_ == nullptr || finished_) return;
  const absl::Time now = clock_->Now();
  if (now - drawn_ < absl::Milliseconds(100)) return;
  Draw(done, now);
}

void ProgressBar::Finish(int64_t done) {
  if (out_ == nullptr || finished_) return;
  finished_ = true;
  Draw(done, clock_->Now());
  std::fprintf(out_, "\n");
  std::fflush(out_);
}

bool ShowProgress(int mode, int fd) {
  if (mode == 1) return true;
  if (mode == 2) return false;
  return ::isatty(fd) == 1;
}

}  // namespace drover::internal
