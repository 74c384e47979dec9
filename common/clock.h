// Clock: the seam between code that keeps time (deadlines, timeouts, heartbeats) and
// the wall clock, so tests can drive time by hand instead of waiting real seconds.
//
//   Clock* clock = Clock::Real();            // absl::Now() and real sleeps
//   FakeClock fake(absl::FromUnixSeconds(1000));
//   fake.Advance(absl::Seconds(11));         // wakes SleepUntil/WaitUntil callers
//
// Thread safety: both implementations are thread-safe. Clock::Real() lives for the
// whole process.
#ifndef DROVER_COMMON_CLOCK_H_
#define DROVER_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace drover {

class Clock {
 public:
  virtual ~Clock() = default;
  // The current time.
  virtual absl::Time Now() = 0;
  // Waits on `cv` (with `mu` held, as absl::CondVar::WaitWithDeadline) until it is
  // signalled or this clock reaches `deadline`. Returns true if the deadline passed.
  // A fake clock also wakes such waiters whenever it is advanced, so loops that re-check
  // their condition see the new time.
  virtual bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process-wide real clock.
  static Clock* Real();
};

// Time that moves only when told to. For tests: a component given a FakeClock sees
// deadlines pass only when the test calls Advance or Set.
//
// WaitWithDeadline waits at most a couple of milliseconds of real time per call (or
// less, if signalled) and then reports whether the fake deadline has passed; callers
// loop and re-check their condition anyway, so an Advance is seen within that time
// without the fake clock touching the caller's mutex.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000'000));
  absl::Time Now() override;
  bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Moves time forward by `d` (or to `t`).
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_COMMON_CLOCK_H_
