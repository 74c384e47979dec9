// SchedulerOutage: what this process tells its user while the scheduler is away (a
// restart), and how long its callers pause between tries.
//
// Several parts of a driver notice the same outage: the driver's session, actor calls
// that wait for the scheduler, lease requests. They share one SchedulerOutage, so the
// user reads one "away" line when the first of them notices and one "back" line when
// the first of them is answered again, not one pair per part.
//
// The lines come out in the order of the state changes they tell (never a "back"
// before its "away"), although the sink is called with no lock held: each change takes
// a ticket under mu_, and a line is told only when every earlier ticket's line was.
//
// Thread-safe.
#ifndef DROVER_SDK_RUNTIME_SCHEDULER_OUTAGE_H_
#define DROVER_SDK_RUNTIME_SCHEDULER_OUTAGE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace drover::internal {

class SchedulerOutage {
 public:
  // Where the lines go (default: stderr, prefixed "drover: ").
  using Sink = std::function<void(const std::string& line)>;
  // `address` names the scheduler in the lines.
  explicit SchedulerOutage(std::string address, Sink sink = nullptr);

  // Whether `s` means the scheduler is away (UNAVAILABLE, DEADLINE_EXCEEDED), as opposed
  // to an answer (even a refusal).
  static bool IsAway(const absl::Status& s);

  // The scheduler did not answer (`why`); `waiting` says what waits for it ("creating
  // actor a-1", "job j-1 (it stands if ...)"). Tells the user if this is the first
  // notice of the outage.
  void Away(const absl::Status& why, absl::string_view waiting) ABSL_LOCKS_EXCLUDED(mu_);
  // The scheduler answered: tells the user it is back if an outage was told. A caller
  // that gives up waiting ends nothing: the outage stays told until an answer comes,
  // so the parts still waiting print no second "away" line.
  void Back() ABSL_LOCKS_EXCLUDED(mu_);
  bool away() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Calls the sink with `line` once the lines of every ticket before `ticket` are told.
  void Tell(uint64_t ticket, const std::string& line) ABSL_LOCKS_EXCLUDED(mu_, told_mu_);

  const std::string address_;
  const Sink sink_;
  absl::Mutex mu_;
  bool away_ ABSL_GUARDED_BY(mu_) = false;
  // The ticket the next state change takes.
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex told_mu_;
  // Lines told so far: the ticket whose turn it is.
  uint64_t told_ ABSL_GUARDED_BY(told_mu_) = 0;
};

// The pause between tries of a call to an away scheduler: doubles from `first` up to
// `max`. Not thread-safe (one per retry loop).
class Backoff {
 public:
  explicit Backoff(absl::Duration first = absl::Milliseconds(100),
                   absl::Duration max = absl::Seconds(2))
      : first_(first), max_(max), next_(first) {}
  // The pause to take now; the next one is twice as long (up to the max).
  absl::Duration Next() {
    const absl::Duration d = next_;
    next_ = std::min(next_ * 2, max_);
    return d;
  }
  // The pause Next would return, without moving on.
  absl::Duration Peek() const { return next_; }
  void Reset() { next_ = first_; }

 private:
  const absl::Duration first_;
  const absl::Duration max_;
  absl::Duration next_;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_SCHEDULER_OUTAGE_H_
