#include "common/clock.h"

namespace drover {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return cv->WaitWithDeadline(mu, deadline);
  }
};

// How long a fake-clock wait blocks in real time before it looks at the fake time again.
constexpr absl::Duration kFakeWaitSlice = absl::Milliseconds(2);

}  // namespace

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();
  return clock;
}

FakeClock::FakeClock(absl::Time start) : now_(start) {}

absl::Time FakeClock::Now() {
  absl::MutexLock l(&mu_);
  return now_;
}

bool FakeClock::WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) {
  if (Now() >= deadline) return true;
  cv->WaitWithTimeout(mu, kFakeWaitSlice);
  return Now() >= deadline;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock l(&mu_);
  now_ += d;
}

void FakeClock::Set(absl::Time t) {
  absl::MutexLock l(&mu_);
  now_ = t;
}

}  // namespace drover
