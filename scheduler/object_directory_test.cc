#include "scheduler/object_directory.h"

#include <atomic>
#include <map>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/testing/signal_clock.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

std::vector<std::string> Nodes(ObjectDirectory& d, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& h : d.Holders(id)) out.push_back(h.node_id);
  return out;
}

TEST(ObjectDirectoryTest, AddIsIdempotentAndListsHoldersInNodeOrder) {
  ObjectDirectory d;
  d.NodeUp("node-1", "agent-1:1");
  d.NodeUp("node-2", "agent-2:1");
  ASSERT_TRUE(d.Add("node-2", "obj-a", 100).ok());
  ASSERT_TRUE(d.Add("node-1", "obj-a", 100).ok());
  ASSERT_TRUE(d.Add("node-1", "obj-a", 100).ok());  // retried report
  EXPECT_EQ(Nodes(d, "obj-a"), (std::vector<std::string>{"node-1", "node-2"}));
  EXPECT_EQ(d.size(), 2);
  EXPECT_EQ(d.objects(), 1);
  ASSERT_TRUE(d.Add("node-1", "obj-a", 120).ok());  // a re-add replaces the size
  EXPECT_EQ(d.Holders("obj-a")[0].size, 120);
  EXPECT_EQ(d.size(), 2);
}

TEST(ObjectDirectoryTest, UnknownObjectHasNoHolders) {
  ObjectDirectory d;
  d.NodeUp("node-1", "agent-1:1");
  d.NodeUp("node-2", "agent-2:1");
  EXPECT_TRUE(d.Holders("nope").empty());
  d.Remove("node-1", "nope");  // not an error
  EXPECT_EQ(d.NodeDown("node-9"), 0);
  EXPECT_EQ(d.size(), 0);
}

TEST(ObjectDirectoryTest, RemoveIsIdempotentAndDropsEmptyObjects) {
  ObjectDirectory d;
  d.NodeUp("node-1", "agent-1:1");
  d.NodeUp("node-2", "agent-2:1");
  ASSERT_TRUE(d.Add("node-1", "obj-a", 1).ok());
  ASSERT_TRUE(d.Add("node-2", "obj-a", 1).ok());
  d.Remove("node-1", "obj-a");
  d.Remove("node-1", "obj-a");
  EXPECT_EQ(Nodes(d, "obj-a"), (std::vector<std::string>{"node-2"}));
  d.Remove("node-2", "obj-a");
  EXPECT_TRUE(d.Holders("obj-a").empty());
  EXPECT_EQ(d.objects(), 0);
  EXPECT_EQ(d.size(), 0);
}

TEST(ObjectDirectoryTest, RemoveNodeDropsOnlyThatNodesCopies) {
  ObjectDirectory d;
  d.NodeUp("node-1", "agent-1:1");
  d.NodeUp("node-2", "agent-2:1");
  ASSERT_TRUE(d.Add("node-1", "obj-a", 1).ok());
  ASSERT_TRUE(d.Add("node-1", "obj-b", 2).ok());
  ASSERT_TRUE(d.Add("node-2", "obj-b", 2).ok());
  EXPECT_EQ(d.NodeDown("node-1"), 2);
  EXPECT_TRUE(d.Holders("obj-a").empty());
  EXPECT_EQ(Nodes(d, "obj-b"), (std::vector<std::string>{"node-2"}));
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.NodeDown("node-1"), 0);
  // A dead node's late report is refused; once it is back, it may report again.
  EXPECT_EQ(d.Add("node-1", "obj-a", 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(d.Holders("obj-a").empty());
  d.NodeUp("node-1", "agent-1:2");
  ASSERT_TRUE(d.Add("node-1", "obj-a", 1).ok());
  EXPECT_EQ(d.Holders("obj-a")[0].agent_address, "agent-1:2");
  EXPECT_EQ(Nodes(d, "obj-a"), (std::vector<std::string>{"node-1"}));
}

TEST(ObjectDirectoryTest, BinaryIdsAreKeptExactly) {
  ObjectDirectory d;
  d.NodeUp("node-1", "agent-1:1");
  d.NodeUp("node-2", "agent-2:1");
  std::string id("\x00\x01\xff", 3);
  ASSERT_TRUE(d.Add("node-1", id, 5).ok());
  EXPECT_EQ(Nodes(d, id).size(), 1u);
  EXPECT_TRUE(d.Holders(std::string("\x00\x01", 2)).empty());
}

TEST(ObjectDirectoryTest, RefusesCopiesOfNodesThatAreNotUpNamingWhy) {
  ObjectDirectory d;
  absl::Status s = d.Add("node-7", "obj-a", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("node-7 is not registered"), std::string::npos) << s;
  d.NodeUp("node-7", "a:1");
  d.NodeDown("node-7");
  s = d.Add("node-7", "obj-a", 1);
  EXPECT_NE(s.message().find("node-7 is not ALIVE"), std::string::npos) << s;
  EXPECT_EQ(d.size(), 0);
}

TEST(ObjectDirectoryTest, ByAgentGroupsAJobsObjectsByTheHoldersAgent) {
  ObjectDirectory d;
  d.NodeUp("node-1", "a1");
  d.NodeUp("node-2", "a2");
  ASSERT_TRUE(d.Add("node-1", {{"job-a.1", 1}, {"job-a.2", 1}, {"job-b.1", 1}}).ok());
  ASSERT_TRUE(d.Add("node-2", "job-a.1", 1).ok());
  using M = std::map<std::string, std::vector<std::string>>;
  EXPECT_EQ(d.ByAgent("job-a."), (M{{"a1", {"job-a.1", "job-a.2"}}, {"a2", {"job-a.1"}}}));
}

TEST(ObjectDirectoryTest, WaitForHoldersIsWokenByAnAddFromAnotherThread) {
  // Time never moves: only the Add's signal can end the wait (not its deadline, nor the
  // once-a-second look at `cancelled`).
  testing::SignalOnlyClock clock;
  ObjectDirectory d(&clock);
  d.NodeUp("node-1", "a1");
  std::vector<ObjectDirectory::Holder> h;
  std::thread waiter([&] {
    h = d.WaitForHolders("obj-a", clock.Now() + absl::Seconds(30), [] { return false; });
  });
  ASSERT_TRUE(testing::WaitFor([&] { return clock.waits() >= 1; }));
  ASSERT_TRUE(d.Add("node-1", "obj-a", 3).ok());
  waiter.join();
  EXPECT_EQ(clock.stuck(), 0) << "the Add did not wake the wait";
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].size, 3);
}

TEST(ObjectDirectoryTest, CancelledIsAskedWithoutTheDirectorysLock) {
  FakeClock clock;
  ObjectDirectory d(&clock);
  d.NodeUp("node-1", "a1");
  const absl::Time deadline = clock.Now() + absl::Seconds(30);
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    // The callback calls the directory, as one that looks at shared state might: asked
    // under the directory's lock, it would deadlock.
    EXPECT_TRUE(d.WaitForHolders("obj-a", deadline, [&] {
                   d.Holders("obj-b");
                   return true;
                 }).empty());
    done = true;
  });
  // Past the once-a-second looks (never past the deadline) until the wait gives up.
  for (int i = 0; i < 20 && !testing::WaitFor([&] { return done.load(); }, absl::Milliseconds(100));
       ++i) {
    clock.Advance(absl::Seconds(1));
  }
  waiter.join();
  EXPECT_TRUE(done.load());
}

TEST(ObjectDirectoryTest, StopEndsTheWaits) {
  ObjectDirectory d;
  std::thread stopper([&] { d.Stop(); });
  EXPECT_TRUE(d.WaitForHolders("obj-a", absl::Now() + absl::Seconds(30)).empty());
  stopper.join();
}

}  // namespace
}  // namespace drover
