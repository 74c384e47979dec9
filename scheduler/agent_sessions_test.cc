#include "scheduler/agent_sessions.h"

#include "gtest/gtest.h"

namespace drover {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(AgentSessionsTest, ClosedSessionIsLostAfterTheGraceOnly) {
  AgentSessions s(absl::Seconds(1));
  int64_t id = s.Open("node-1");
  EXPECT_EQ(s.NextDue(), absl::InfiniteFuture());
  EXPECT_TRUE(s.Closed("node-1", id, kT0));
  EXPECT_EQ(s.NextDue(), kT0 + absl::Seconds(1));
  EXPECT_TRUE(s.TakeDue(kT0 + absl::Milliseconds(999)).empty());
  auto lost = s.TakeDue(kT0 + absl::Seconds(1));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node_id, "node-1");
  EXPECT_EQ(lost[0].closed, kT0);
  // Taken once: forgotten after.
  EXPECT_TRUE(s.TakeDue(kT0 + absl::Seconds(5)).empty());
  EXPECT_FALSE(s.IsCurrent("node-1", id));
}

TEST(AgentSessionsTest, NewSessionWithinTheGraceCancelsTheLoss) {
  AgentSessions s(absl::Seconds(1));
  int64_t first = s.Open("node-1");
  ASSERT_TRUE(s.Closed("node-1", first, kT0));
  int64_t second = s.Open("node-1");
  EXPECT_NE(second, first);
  EXPECT_EQ(s.NextDue(), absl::InfiniteFuture());
  EXPECT_TRUE(s.TakeDue(kT0 + absl::Seconds(10)).empty());
  EXPECT_TRUE(s.IsCurrent("node-1", second));
}

TEST(AgentSessionsTest, CloseOfAReplacedSessionIsIgnored) {
  AgentSessions s(absl::Seconds(1));
  int64_t old_session = s.Open("node-1");
  int64_t new_session = s.Open("node-1");  // the agent re-registered first
  EXPECT_FALSE(s.Closed("node-1", old_session, kT0));
  EXPECT_TRUE(s.TakeDue(kT0 + absl::Seconds(10)).empty());
  EXPECT_TRUE(s.IsCurrent("node-1", new_session));
  EXPECT_FALSE(s.IsCurrent("node-1", old_session));
}

TEST(AgentSessionsTest, ForgottenOrUnknownNodesAreNeverLost) {
  AgentSessions s(absl::Seconds(1));
  int64_t id = s.Open("node-1");
  s.Forget("node-1");
  EXPECT_FALSE(s.Closed("node-1", id, kT0));
  EXPECT_FALSE(s.Closed("node-9", 1, kT0));
  EXPECT_TRUE(s.TakeDue(kT0 + absl::Seconds(10)).empty());
}

TEST(AgentSessionsTest, EachNodeKeepsItsOwnDeadline) {
  AgentSessions s(absl::Seconds(1));
  int64_t a = s.Open("node-a");
  int64_t b = s.Open("node-b");
  ASSERT_TRUE(s.Closed("node-b", b, kT0));
  ASSERT_TRUE(s.Closed("node-a", a, kT0 + absl::Milliseconds(500)));
  // A second close of the same session keeps the first time.
  ASSERT_TRUE(s.Closed("node-b", b, kT0 + absl::Milliseconds(900)));
  EXPECT_EQ(s.NextDue(), kT0 + absl::Seconds(1));
  auto first = s.TakeDue(kT0 + absl::Seconds(1));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].node_id, "node-b");
  EXPECT_EQ(s.NextDue(), kT0 + absl::Milliseconds(1500));
  auto second = s.TakeDue(kT0 + absl::Seconds(2));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].node_id, "node-a");
}

}  // namespace
}  // namespace drover
