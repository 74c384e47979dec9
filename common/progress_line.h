// Progress on a terminal: ProgressLine, one status line redrawn in place, and
// ProgressMeter, the rate, ETA and bar of a count moving toward a total. `drover run`
// (a job's phase), `drover up` (nodes registering), the SDK's long object pulls and
// any loop that wants an items/s bar use them.
//
//   std::unique_ptr<ProgressLine> line = ProgressLine::ForStderr();  // null: no terminal
//   ProgressMeter meter({.label = "batches", .total = n});
//   for (...) {
//     meter.Add(1);
//     if (line) line->Update(meter.Render(line->columns()));   // at most every 100 ms
//     if (line) line->PrintAbove([&] { std::cout << "epoch 3 done\n" << std::flush; });
//   }
//   line.reset();  // erases the line
//
// The contract that matters: progress never reaches a pipe or a log file. ForStderr
// returns null unless stderr is a terminal (isatty, TERM not "dumb", DROVER_PROGRESS
// not "0"), and a caller with a null line shows nothing at all, not even a last line.
// On a terminal the line is drawn as "\r" + text + "erase to end of line" (ESC [K),
// cut to the terminal's width so it never wraps, and erased before any ordinary output
// is printed through PrintAbove, so output lines never interleave with it.
//
// Tests inject the writer (the bytes a terminal would get) and the clock
// (common/clock.h FakeClock): neither class needs a terminal.
//
// Thread safety: both classes are thread-safe. ProgressLine calls its writer, and
// PrintAbove its callback, with its own mutex held: they must not call back into it.
#ifndef DROVER_COMMON_PROGRESS_LINE_H_
#define DROVER_COMMON_PROGRESS_LINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace drover {

class ProgressLine {
 public:
  struct Options {
    // Receives the bytes for the terminal (required).
    std::function<void(absl::string_view)> write;
    // The terminal's width in columns, asked at each draw (a window may be resized);
    // null: 80.
    std::function<int()> columns;
    Clock* clock = Clock::Real();
    // Update redraws at most this often (a pull or a data loop may call it per chunk).
    absl::Duration min_interval = absl::Milliseconds(100);
  };

  // A line on this process's stderr if it is a terminal, else null (see the file
  // comment). Its width follows the terminal's.
  static std::unique_ptr<ProgressLine> ForStderr(Clock* clock = Clock::Real());

  explicit ProgressLine(Options options);
  // Erases the line.
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Sets the line's text, drawn now if `min_interval` has passed since the last draw,
  // else at the next Update, Show or PrintAbove. Newlines and tabs become spaces.
  void Update(absl::string_view text);
  // Sets the text and draws it now (for changes a user must see at once).
  void Show(absl::string_view text);
  // Erases the line and forgets its text; the next Update or Show draws again.
  void Clear();
  // Erases the line, runs `print` (which writes whole lines of ordinary output to
  // this terminal, on any stream, flushed before it returns) and draws the line again
  // below them.
  void PrintAbove(absl::FunctionRef<void()> print);

  // The terminal's width now.
  int columns() const;

 private:
  void DrawLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;  // text_ is on the terminal
  absl::Time last_draw_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// `text` on one line of `columns` terminal columns: control characters become spaces
// and it is cut (at a UTF-8 character boundary, one column per character) to
// columns - 1, so that the cursor never wraps to a new line.
std::string FitToColumns(absl::string_view text, int columns);

// "[=====>    ]": `fraction` (clamped to 0..1) of a bar `width` characters wide,
// brackets included.
std::string RenderBar(double fraction, int width);

class ProgressMeter {
 public:
  enum class Unit {
    kItems,  // "12.3k/40.0k items  850 items/s"
    kBytes,  // "1.2 GiB/2.6 GiB  310.0 MiB/s"
  };
  struct Options {
    std::string label;
    // What `done` counts toward; 0 = unknown (no bar, percentage or ETA).
    int64_t total = 0;
    // `done` when the meter starts (work done before it was watched): the rate counts
    // from there.
    int64_t start = 0;
    Unit unit = Unit::kItems;
    // kItems: the word after the counts ("items", "batches", "rows").
    std::string item_name = "items";
    Clock* clock = Clock::Real();
    // The rate is measured over about this much of the recent past (the whole run
    // while it is shorter), so it follows a transfer that speeds up or stalls.
    absl::Duration window = absl::Seconds(5);
  };

  explicit ProgressMeter(Options options);

  void Add(int64_t n);
  void Set(int64_t done);
  void SetTotal(int64_t total);
  int64_t done() const;

  // Units per second over the recent window; 0 before any time has passed.
  double Rate() const;
  // Time left at the current rate; nullopt without a total or without progress.
  std::optional<absl::Duration> Eta() const;
  // "label [=====>     ]  45%  1.2 GiB/2.6 GiB  310.0 MiB/s  ETA 5s", the bar sized
  // so that the whole fits `columns` when it can; without a total:
  // "label  1.2 GiB  310.0 MiB/s".
  std::string Render(int columns = 80) const;

 private:
  struct Sample {
    absl::Time at;
    int64_t done;
  };
  void RecordLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double RateLocked(absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::optional<absl::Duration> EtaLocked(double rate) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string AmountLocked(double v) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  int64_t total_ ABSL_GUARDED_BY(mu_);
  int64_t done_ ABSL_GUARDED_BY(mu_);
  // (time, done) at most every window/20, oldest first: the rate's baseline.
  std::deque<Sample> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_COMMON_PROGRESS_LINE_H_
