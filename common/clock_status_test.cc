// Tests of the clock seam and the status macros.
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

TEST(FakeClockTest, DeadlinePassesOnlyWhenAdvanced) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock l(&mu);
  // Real time passes during the wait, fake time does not.
  EXPECT_FALSE(clock.WaitWithDeadline(&cv, &mu, start + absl::Seconds(5)));
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(clock.Now(), start + absl::Seconds(5));
  EXPECT_TRUE(clock.WaitWithDeadline(&cv, &mu, start + absl::Seconds(5)));
}

TEST(FakeClockTest, WaiterSeesAnAdvanceFromAnotherThread) {
  FakeClock clock;
  const absl::Time deadline = clock.Now() + absl::Hours(1);
  absl::Mutex mu;
  absl::CondVar cv;
  std::thread advancer([&] { clock.Advance(absl::Hours(2)); });
  const absl::Time real_start = absl::Now();
  {
    absl::MutexLock l(&mu);
    while (!clock.WaitWithDeadline(&cv, &mu, deadline)) {
      ASSERT_LT(absl::Now() - real_start, absl::Seconds(30)) << "advance never seen";
    }
  }
  advancer.join();
}

TEST(RealClockTest, WaitReturnsAfterTheDeadline) {
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock l(&mu);
  const absl::Time deadline = Clock::Real()->Now() + absl::Milliseconds(20);
  while (!Clock::Real()->WaitWithDeadline(&cv, &mu, deadline)) {
  }
  EXPECT_GE(Clock::Real()->Now(), deadline);
}

absl::StatusOr<std::unique_ptr<int>> MakeInt(int v) {
  if (v < 0) return absl::InvalidArgumentError("negative");
  return std::make_unique<int>(v);
}

absl::StatusOr<int> Doubled(int v) {
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<int> p, MakeInt(v));  // move-only value
  int out = 0;
  DROVER_ASSIGN_OR_RETURN(out, absl::StatusOr<int>(*p * 2));  // existing variable
  return out;
}

absl::Status CheckPositive(int v) {
  DROVER_RETURN_IF_ERROR(MakeInt(v).status());
  return absl::OkStatus();
}

TEST(StatusMacrosTest, AssignOrReturnPassesValuesAndErrors) {
  EXPECT_EQ(*Doubled(21), 42);
  absl::StatusOr<int> bad = Doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "negative");
  EXPECT_TRUE(CheckPositive(1).ok());
  EXPECT_EQ(CheckPositive(-1).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace drover
