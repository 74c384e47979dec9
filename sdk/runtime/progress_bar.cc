#include "sdk/runtime/progress_bar.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_format.h"

namespace drover::internal {
namespace {

ProgressMeter::Options MeterOptions(const std::string& name, const std::string& unit,
                                    int64_t total, Clock* clock) {
  ProgressMeter::Options o;
  o.label = name;
  o.total = total;
  o.item_name = unit;
  o.clock = clock;
  return o;
}

}  // namespace

ProgressBar::ProgressBar(std::string name, std::string unit, int64_t total,
                         std::unique_ptr<ProgressLine> line, Clock* clock)
    : name_(std::move(name)),
      unit_(std::move(unit)),
      clock_(clock),
      start_(clock->Now()),
      meter_(MeterOptions(name_, unit_, total, clock)),
      line_(std::move(line)) {}

void ProgressBar::Update(int64_t done) {
  if (line_ == nullptr) return;
  meter_.Set(done);
  line_->Update(meter_.Render(line_->columns()));
}

void ProgressBar::Finish(int64_t done) {
  if (line_ == nullptr) return;
  line_->Clear();
  const std::string summary = Summary(name_, unit_, done, clock_->Now() - start_) + "\n";
  line_->PrintAbove([&] {
    ::fflush(stderr);
    (void)!::write(STDERR_FILENO, summary.data(), summary.size());
  });
  line_.reset();
}

std::string ProgressBar::Summary(const std::string& name, const std::string& unit, int64_t done,
                                 absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  std::string text = absl::StrFormat("%s: %d %s in %s", name, done, unit,
                                     absl::FormatDuration(absl::Trunc(elapsed, absl::Milliseconds(100))));
  if (seconds > 0) absl::StrAppendFormat(&text, " (%.0f %s/s)", done / seconds, unit);
  return text;
}

std::unique_ptr<ProgressLine> LoaderLine(int mode) {
  if (mode == 2) return nullptr;
  if (mode == 0) return ProgressLine::ForStderr();
  ProgressLine::Options o;  // asked for: on stderr whatever it is
  o.write = [](absl::string_view s) { (void)!::write(STDERR_FILENO, s.data(), s.size()); };
  return std::make_unique<ProgressLine>(std::move(o));
}

}  // namespace drover::internal
