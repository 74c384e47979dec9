#include "common/progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/human_format.h"

namespace drover {
namespace {

constexpr int kDefaultColumns = 80;
constexpr absl::string_view kErase = "\r\033[K";  // to the line's start, erase it

int StderrColumns() {
  struct winsize ws {};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return kDefaultColumns;
}

void WriteStderr(absl::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(STDERR_FILENO, bytes.data(), bytes.size());
    if (n <= 0) return;  // the terminal went away: progress is not worth an error
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

std::unique_ptr<ProgressLine> ProgressLine::ForStderr(Clock* clock) {
  if (!::isatty(STDERR_FILENO)) return nullptr;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return nullptr;
  const char* setting = std::getenv("DROVER_PROGRESS");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return nullptr;
  Options o;
  o.write = WriteStderr;
  o.columns = StderrColumns;
  o.clock = clock;
  return std::make_unique<ProgressLine>(std::move(o));
}

ProgressLine::ProgressLine(Options options) : options_(std::move(options)) {}

ProgressLine::~ProgressLine() { Clear(); }

int ProgressLine::columns() const {
  return options_.columns ? std::max(options_.columns(), 1) : kDefaultColumns;
}

void ProgressLine::Update(absl::string_view text) {
  absl::MutexLock lock(&mu_);
  text_ = std::string(text);
  if (options_.clock->Now() - last_draw_ >= options_.min_interval) DrawLocked();
}

void ProgressLine::Show(absl::string_view text) {
  absl::MutexLock lock(&mu_);
  text_ = std::string(text);
  DrawLocked();
}

void ProgressLine::Clear() {
  absl::MutexLock lock(&mu_);
  EraseLocked();
  text_.clear();
}

void ProgressLine::PrintAbove(absl::FunctionRef<void()> print) {
  absl::MutexLock lock(&mu_);
  EraseLocked();
  print();
  if (!text_.empty()) DrawLocked();
}

void ProgressLine::DrawLocked() {
  last_draw_ = options_.clock->Now();
  if (text_.empty()) {
    EraseLocked();
    return;
  }
  options_.write(absl::StrCat("\r", FitToColumns(text_, columns()), "\033[K"));
  drawn_ = true;
}

void ProgressLine::EraseLocked() {
  if (!drawn_) return;
  options_.write(kErase);
  drawn_ = false;
}

std::string FitToColumns(absl::string_view text, int columns) {
  const int room = std::max(columns - 1, 0);
  std::string out;
  out.reserve(std::min<size_t>(text.size(), static_cast<size_t>(room) * 4));
  int used = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!IsContinuationByte(c)) {
      if (used == room) break;
      ++used;
    }
    out.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c);
  }
  return out;
}

std::string RenderBar(double fraction, int width) {
  const int inner = std::max(width - 2, 1);
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int filled = static_cast<int>(fraction * inner);
  std::string bar = "[";
  bar.append(static_cast<size_t>(filled), '=');
  if (filled < inner) {
    bar.push_back('>');
    bar.append(static_cast<size_t>(inner - filled - 1), ' ');
  }
  bar.push_back(']');
  return bar;
}

ProgressMeter::ProgressMeter(Options options)
    : options_(std::move(options)), total_(options_.total), done_(options_.start) {
  samples_.push_back({options_.clock->Now(), done_});
}

void ProgressMeter::Add(int64_t n) {
  absl::MutexLock lock(&mu_);
  done_ += n;
  RecordLocked(options_.clock->Now());
}

void ProgressMeter::Set(int64_t done) {
  absl::MutexLock lock(&mu_);
  done_ = done;
  RecordLocked(options_.clock->Now());
}

void ProgressMeter::SetTotal(int64_t total) {
  absl::MutexLock lock(&mu_);
  total_ = total;
}

int64_t ProgressMeter::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void ProgressMeter::RecordLocked(absl::Time now) {
  // One sample per window/20 is enough for the baseline; a loop adding per item
  // costs a comparison.
  if (now - samples_.back().at < options_.window / 20) return;
  samples_.push_back({now, done_});
  // Keep one sample older than the window: the baseline of the rate.
  while (samples_.size() > 2 && now - samples_[1].at >= options_.window) samples_.pop_front();
}

double ProgressMeter::RateLocked(absl::Time now) const {
  // The newest sample at least a window old (or the oldest one) is the baseline.
  const Sample* base = &samples_.front();
  for (const Sample& s : samples_) {
    if (now - s.at < options_.window) break;
    base = &s;
  }
  const double seconds = absl::ToDoubleSeconds(now - base->at);
  if (seconds <= 0) return 0;
  return static_cast<double>(done_ - base->done) / seconds;
}

double ProgressMeter::Rate() const {
  absl::MutexLock lock(&mu_);
  return RateLocked(options_.clock->Now());
}

std::optional<absl::Duration> ProgressMeter::EtaLocked(double rate) const {
  if (total_ <= 0 || rate <= 0) return std::nullopt;
  const double left = static_cast<double>(std::max<int64_t>(total_ - done_, 0));
  return absl::Seconds(left / rate);
}

std::optional<absl::Duration> ProgressMeter::Eta() const {
  absl::MutexLock lock(&mu_);
  return EtaLocked(RateLocked(options_.clock->Now()));
}

std::string ProgressMeter::AmountLocked(double v) const {
  return options_.unit == Unit::kBytes ? HumanBytes(v) : HumanCount(v);
}

std::string ProgressMeter::Render(int columns) const {
  absl::MutexLock lock(&mu_);
  const double rate = RateLocked(options_.clock->Now());
  const bool bytes = options_.unit == Unit::kBytes;
  const std::string rate_text =
      bytes ? absl::StrCat(HumanBytes(rate), "/s")
            : absl::StrCat(HumanCount(rate), " ", options_.item_name, "/s");
  const std::string noun = bytes ? "" : absl::StrCat(" ", options_.item_name);
  if (total_ <= 0) {
    return absl::StrCat(options_.label, "  ", AmountLocked(static_cast<double>(done_)), noun, "  ",
                        rate_text);
  }
  const double fraction = static_cast<double>(done_) / static_cast<double>(total_);
  const std::optional<absl::Duration> left = EtaLocked(rate);
  const std::string eta = left ? absl::StrCat("ETA ", HumanDuration(*left)) : "ETA -";
  const std::string tail = absl::StrFormat(
      " %3d%%  %s/%s%s  %s  %s", static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100),
      AmountLocked(static_cast<double>(done_)), AmountLocked(static_cast<double>(total_)), noun,
      rate_text, eta);
  // The bar takes what the label and the figures leave (10 to 40 characters).
  const int room = columns - 1 - static_cast<int>(options_.label.size() + 1 + tail.size());
  return absl::StrCat(options_.label, " ", RenderBar(fraction, std::clamp(room, 10, 40)), tail);
}

}  // namespace drover
