#include "tests/chaos/fault_schedule.h"

#include <set>

#include "gtest/gtest.h"

namespace drover::chaos {
namespace {

bool Same(const std::vector<Fault>& a, const std::vector<Fault>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].at != b[i].at || a[i].kind != b[i].kind || a[i].node != b[i].node ||
        a[i].pick != b[i].pick || a[i].hold != b[i].hold) {
      return false;
    }
  }
  return true;
}

TEST(FaultScheduleTest, TheSameSeedGivesTheSameSchedule) {
  ScheduleOptions o;
  o.seed = 12345;
  EXPECT_TRUE(Same(MakeSchedule(o), MakeSchedule(o)));
  ScheduleOptions other = o;
  other.seed = 12346;
  EXPECT_FALSE(Same(MakeSchedule(o), MakeSchedule(other)));
}

TEST(FaultScheduleTest, EveryKindComesFirstInSomeOrderThenRandomKindsUntilTheEnd) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    ScheduleOptions o;
    o.seed = seed;
    o.duration = absl::Seconds(300);
    o.nodes = 3;
    std::vector<Fault> s = MakeSchedule(o);
    ASSERT_GE(s.size(), static_cast<size_t>(kFaultKinds));
    std::set<FaultKind> first;
    for (int i = 0; i < kFaultKinds; ++i) first.insert(s[i].kind);
    EXPECT_EQ(first.size(), static_cast<size_t>(kFaultKinds)) << "seed " << seed;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i > 0) EXPECT_GT(s[i].at, s[i - 1].at);
      EXPECT_GE(s[i].node, 0);
      EXPECT_LT(s[i].node, 3);
      EXPECT_GE(s[i].hold, absl::ZeroDuration());
      EXPECT_LE(s[i].hold, absl::Seconds(10)) << Describe(s[i]);
    }
    EXPECT_LE(s.back().at, o.duration + o.mean_gap * 2);
    EXPECT_GT(s.back().at, o.duration - o.mean_gap * 2);
  }
}

TEST(FaultScheduleTest, AShortRunStillHasEveryKind) {
  ScheduleOptions o;
  o.duration = absl::Seconds(10);
  std::vector<Fault> s = MakeSchedule(o);
  std::set<FaultKind> kinds;
  for (const Fault& f : s) kinds.insert(f.kind);
  EXPECT_EQ(kinds.size(), static_cast<size_t>(kFaultKinds));
}

TEST(FaultScheduleTest, DescribeSaysWhatWhereAndHowLong) {
  Fault f;
  f.at = absl::Milliseconds(12300);
  f.kind = FaultKind::kStopAgent;
  f.node = 1;
  f.hold = absl::Milliseconds(6200);
  EXPECT_EQ(Describe(f), "+12.3s stop-agent node 1 for 6.2s");
  f.kind = FaultKind::kKillScheduler;
  f.hold = absl::ZeroDuration();
  EXPECT_EQ(Describe(f), "+12.3s kill-scheduler");
}

}  // namespace
}  // namespace drover::chaos
