#include "object_store/polling_policy.h"

#include <memory>

#include "gtest/gtest.h"

namespace drover::object_store {
namespace {

using Step = PollingPolicy::Step;

constexpr absl::Duration kWindow = absl::Microseconds(300);
constexpr absl::Duration kShort = absl::Microseconds(2);  // an uneventful poll

class PollingPolicyTest : public ::testing::Test {
 protected:
  // One poll `stall` after the previous one, with `switches` involuntary switches so
  // far (read only when the policy wants them, as the reactor does).
  Step Poll(absl::Duration stall, uint64_t switches = 0) {
    now_ += stall;
    return policy_->Next(now_, stall, PollingPolicy::WantsSwitches(stall) ? switches : 0);
  }
  // A request, then the start of the loop's wait.
  void Request(uint64_t switches = 0) {
    policy_->OnRequest(now_);
    if (policy_->awake()) policy_->BeginWait(switches);
  }
  // Polls uneventfully until the window closes; how many polls that took.
  int PollUntilSleep() {
    int polls = 0;
    while (Poll(kShort) != Step::kSleep) ++polls;
    return polls;
  }
  // Starves the loop once (a 4 ms stall with a switch), from a fresh request.
  void Starve(uint64_t* switches) {
    Request(*switches);
    ++*switches;
    ASSERT_EQ(Poll(absl::Milliseconds(4), *switches), Step::kSleep);
  }

  // A policy with a longer window, for stalls that happen within one.
  void UseWindow(absl::Duration window) { policy_ = std::make_unique<PollingPolicy>(window); }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<PollingPolicy> policy_ = std::make_unique<PollingPolicy>(kWindow);
};

TEST_F(PollingPolicyTest, SleepsUntilARequestThenPollsForTheWindow) {
  EXPECT_FALSE(policy_->awake());
  EXPECT_EQ(Poll(kShort), Step::kSleep);
  Request();
  EXPECT_TRUE(policy_->awake());
  const int polls = PollUntilSleep();
  EXPECT_EQ(polls, kWindow / kShort - 1);
  EXPECT_FALSE(policy_->awake());
}

TEST_F(PollingPolicyTest, EachRequestExtendsTheWindow) {
  Request();
  now_ += absl::Microseconds(250);
  Request();  // the window now ends 300 µs from here, not 50
  EXPECT_EQ(PollUntilSleep(), kWindow / kShort - 1);
}

TEST_F(PollingPolicyTest, ZeroStayAwakeNeverPolls) {
  PollingPolicy never(absl::ZeroDuration());
  never.OnRequest(now_);
  EXPECT_FALSE(never.awake());
  EXPECT_EQ(never.Next(now_, kShort, 0), Step::kSleep);
}

TEST_F(PollingPolicyTest, AShortStallMovesOffTheCpuAtMostOncePerInterval) {
  Request();
  EXPECT_EQ(Poll(absl::Microseconds(30)), Step::kMove);
  policy_->Rebaseline(0);
  EXPECT_EQ(Poll(kShort), Step::kPoll);
  // Within a millisecond of the move: contended, but no second move.
  EXPECT_EQ(Poll(absl::Microseconds(30)), Step::kContended);
  // 20 µs exactly is not a stall.
  EXPECT_EQ(Poll(PollingPolicy::kContended), Step::kPoll);
  // A millisecond after the first move, another request and stall: moves again.
  now_ += absl::Milliseconds(1);
  Request();
  EXPECT_EQ(Poll(absl::Microseconds(30)), Step::kMove);
}

TEST_F(PollingPolicyTest, ALongStallWithoutASwitchIsStealNotStarvation) {
  uint64_t switches = 7;
  Request(switches);
  // The hypervisor held the CPU for 5 ms: the window is over, but this thread was not
  // switched out, so the next request opens a new one at once.
  EXPECT_EQ(Poll(absl::Milliseconds(5), switches), Step::kSleep);
  EXPECT_FALSE(policy_->backing_off(now_));
  Request(switches);
  EXPECT_TRUE(policy_->awake());
  // Within a longer window, such a stall is taken as contention: move and poll on.
  UseWindow(absl::Milliseconds(100));
  Request(switches);
  EXPECT_EQ(Poll(absl::Milliseconds(5), switches), Step::kMove);
  EXPECT_TRUE(policy_->awake());
}

TEST_F(PollingPolicyTest, StarvationBacksOffDoublingUpToTheCapAndResets) {
  uint64_t switches = 0;
  Starve(&switches);
  EXPECT_FALSE(policy_->awake());
  EXPECT_TRUE(policy_->backing_off(now_));
  // Requests open no window during the back-off of 10 ms.
  now_ += PollingPolicy::kMinBackoff - absl::Microseconds(1);
  Request(switches);
  EXPECT_FALSE(policy_->awake());
  now_ += absl::Microseconds(1);
  // Starving again doubles it: 20, 40, then 50 ms (the cap), and stays there.
  for (absl::Duration want : {absl::Milliseconds(20), absl::Milliseconds(40),
                              absl::Milliseconds(50), absl::Milliseconds(50)}) {
    EXPECT_EQ(policy_->next_backoff(), want);
    Starve(&switches);
    now_ += want - absl::Microseconds(1);
    Request(switches);
    EXPECT_FALSE(policy_->awake()) << "within a back-off of " << want;
    now_ += absl::Microseconds(1);
  }
  // A whole window without starving brings the back-off back to 10 ms.
  Request(switches);
  ASSERT_TRUE(policy_->awake());
  PollUntilSleep();
  EXPECT_EQ(policy_->next_backoff(), PollingPolicy::kMinBackoff);
}

TEST_F(PollingPolicyTest, SwitchesBeforeTheWaitOrTheLastStallDoNotCountAsStarvation) {
  UseWindow(absl::Milliseconds(100));
  uint64_t switches = 100;  // switched out many times before this wait began
  Request(switches);
  EXPECT_EQ(Poll(absl::Milliseconds(2), switches), Step::kMove);  // none since: steal
  // Switched out during that move; the baseline is taken after it.
  policy_->Rebaseline(++switches);
  EXPECT_EQ(Poll(kShort, switches), Step::kPoll);
  // A new switch during a short stall is no starvation either.
  EXPECT_EQ(Poll(absl::Microseconds(500), switches + 1), Step::kContended);
  // Only one during a long stall is.
  EXPECT_EQ(Poll(absl::Microseconds(1500), switches + 1), Step::kSleep);
  EXPECT_FALSE(policy_->awake());
  EXPECT_TRUE(policy_->backing_off(now_));
}

}  // namespace
}  // namespace drover::object_store
