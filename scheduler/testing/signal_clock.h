// SignalOnlyClock: a Clock for tests of waits that must be woken by a signal. Its time
// never moves, and its waits do not poll: a waiter wakes only when its condition
// variable is signalled (a FakeClock's waits end every 2 ms, so a waiter re-checking its
// condition would find a change nobody signalled). A wait not signalled within
// `stuck_after` of real time ends and is counted as stuck, so a missing signal fails the
// test instead of hanging it. It also counts the waits begun, so a test can act once its
// waiter waits (acting earlier would let a call that never waits pass by luck).
#ifndef DROVER_SCHEDULER_TESTING_SIGNAL_CLOCK_H_
#define DROVER_SCHEDULER_TESTING_SIGNAL_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace drover {
namespace testing {

class SignalOnlyClock : public Clock {
 public:
  explicit SignalOnlyClock(absl::Duration stuck_after = absl::Seconds(20))
      : stuck_after_(stuck_after) {}

  absl::Time Now() override { return kNow; }
  bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline <= kNow) return true;
    ++waits_;
    if (cv->WaitWithTimeout(mu, stuck_after_)) ++stuck_;
    return false;
  }

  // Waits that had to wait (their deadline was ahead), and those no signal ended.
  int64_t waits() const { return waits_.load(); }
  int64_t stuck() const { return stuck_.load(); }

  static constexpr absl::Time kNow = absl::FromUnixSeconds(1'000'000'000);

 private:
  const absl::Duration stuck_after_;
  std::atomic<int64_t> waits_{0};
  std::atomic<int64_t> stuck_{0};
};

}  // namespace testing
}  // namespace drover

#endif  // DROVER_SCHEDULER_TESTING_SIGNAL_CLOCK_H_
