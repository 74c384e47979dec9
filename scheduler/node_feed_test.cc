#include "scheduler/node_feed.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/testing/signal_clock.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

proto::DriverNodeState Node(const std::string& id, bool alive, const std::string& reason = "") {
  proto::DriverNodeState n;
  n.set_node_id(id);
  n.set_alive(alive);
  n.set_reason(reason);
  n.set_agent_address(id + ":7000");
  return n;
}

std::vector<std::string> Ids(const std::vector<proto::DriverNodeState>& nodes) {
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.node_id());
  return out;
}

TEST(NodeFeedTest, FirstReadListsEveryNodeThenOnlyTheChangedOnes) {
  NodeFeed feed;
  feed.Publish(Node("node-2", true));
  feed.Publish(Node("node-1", true));
  uint64_t seen = 0;
  EXPECT_EQ(Ids(feed.Next(&seen, absl::Now())), (std::vector<std::string>{"node-1", "node-2"}));
  feed.Publish(Node("node-1", true));  // unchanged: not news
  EXPECT_TRUE(feed.Next(&seen, absl::Now()).empty());
  feed.Publish(Node("node-2", false, "no heartbeat"));
  std::vector<proto::DriverNodeState> next = feed.Next(&seen, absl::Now());
  ASSERT_EQ(Ids(next), (std::vector<std::string>{"node-2"}));
  EXPECT_FALSE(next[0].alive());
  EXPECT_EQ(next[0].reason(), "no heartbeat");
  // Another reader, new: everything as it is now.
  uint64_t fresh = 0;
  EXPECT_EQ(feed.Next(&fresh, absl::Now()).size(), 2u);
}

TEST(NodeFeedTest, AWaitingReaderIsWokenByAChange) {
  // Time never moves: only the Publish's signal can end the wait.
  testing::SignalOnlyClock clock;
  NodeFeed feed(&clock);
  uint64_t seen = 0;
  std::vector<proto::DriverNodeState> got;
  std::thread reader([&] { got = feed.Next(&seen, clock.Now() + absl::Seconds(30)); });
  ASSERT_TRUE(testing::WaitFor([&] { return clock.waits() >= 1; }));
  feed.Publish(Node("node-1", false, "dead"));
  reader.join();
  EXPECT_EQ(clock.stuck(), 0) << "the Publish did not wake the reader";
  EXPECT_EQ(Ids(got), (std::vector<std::string>{"node-1"}));
}

TEST(NodeFeedTest, AReadWithNothingNewEndsAtItsDeadline) {
  NodeFeed feed;
  feed.Publish(Node("node-1", true));
  uint64_t seen = 0;
  ASSERT_EQ(feed.Next(&seen, absl::Now()).size(), 1u);
  EXPECT_TRUE(feed.Next(&seen, absl::Now() + absl::Milliseconds(20)).empty());
}

}  // namespace
}  // namespace drover
