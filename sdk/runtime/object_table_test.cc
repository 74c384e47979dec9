// The owner's object table (sdk/runtime/object_table.h) on its own: done callbacks run
// without the table's lock, waits wake on their own objects, and a pending object says
// what it waits for.
#include "sdk/runtime/object_table.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace drover::internal {
namespace {

ObjectValue Inline(const std::string& s) {
  ObjectValue v;
  v.inline_bytes = std::make_shared<const std::string>(s);
  return v;
}

// A done callback may use the table (and fail the next object, as a dependent task's
// does): it runs after the table's lock is released.
TEST(ObjectTableTest, DoneCallbacksRunWithoutTheLockAndMayFailTheNextObject) {
  ObjectTable table;
  std::vector<std::shared_ptr<RefState>> chain;
  for (int i = 0; i < 4; ++i) chain.push_back(table.NewPending("o" + std::to_string(i)));
  for (int i = 0; i + 1 < 4; ++i) {
    table.WhenDone(chain[i], [&table, &chain, i] {
      ObjectTable::Outcome o = table.Read(chain[i]);
      table.Fail(chain[i + 1], absl::Status(o.error.code(), absl::StrCat("after ", o.error.message())));
    });
  }
  table.Fail(chain[0], absl::CancelledError("cancelled"));
  ObjectTable::Outcome last = table.Read(chain[3]);
  EXPECT_EQ(last.state, RefState::State::kFailed);
  EXPECT_EQ(last.error.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(last.error.message(), "after after after cancelled");
}

TEST(ObjectTableTest, TheFirstOutcomeWinsAndLateCallbacksRunAtOnce) {
  ObjectTable table;
  auto ref = table.NewPending("o");
  table.Complete(ref, Inline("v"));
  table.Fail(ref, absl::InternalError("late"));
  EXPECT_EQ(table.Read(ref).state, RefState::State::kReady);
  bool ran = false;
  table.WhenDone(ref, [&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(ObjectTableTest, WaitDoneWakesOnItsObjectAndTimesOut) {
  ObjectTable table;
  auto mine = table.NewPending("mine");
  auto other = table.NewPending("other");
  EXPECT_FALSE(table.WaitDone(mine, absl::Now() + absl::Milliseconds(20)));
  std::thread t([&] {
    table.Complete(other, Inline("x"));
    table.Complete(mine, Inline("y"));
  });
  EXPECT_TRUE(table.WaitDone(mine, absl::Now() + absl::Seconds(30)));
  t.join();
  EXPECT_TRUE(table.WaitDone(other, absl::InfinitePast()));  // done already: no wait
}

TEST(ObjectTableTest, WaitAnyReturnsInCompletionOrderWithRefsListedTwice) {
  ObjectTable table;
  auto a = table.NewPending("a");
  auto b = table.NewPending("b");
  auto c = table.NewPending("c");
  std::vector<std::shared_ptr<RefState>> refs = {a, b, b, c, nullptr};
  std::thread t([&] {
    table.Complete(c, Inline("c"));
    table.Fail(a, absl::InternalError("a"));
  });
  std::vector<size_t> done = table.WaitAny(refs, 2, absl::Now() + absl::Seconds(30));
  t.join();
  EXPECT_EQ(done, (std::vector<size_t>{3, 0}));
  // Not enough done by the deadline: what is done.
  done = table.WaitAny(refs, 3, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(done.size(), 2u);
  table.Complete(b, Inline("b"));
  EXPECT_EQ(table.WaitAny(refs, 5, absl::InfinitePast()).size(), 5u - 1u);
}

// Many threads, each waiting on an object of its own, completed in turn.
TEST(ObjectTableTest, ManyWaitersEachWokenByTheirOwnObject) {
  ObjectTable table;
  constexpr int kN = 16;
  std::vector<std::shared_ptr<RefState>> refs;
  for (int i = 0; i < kN; ++i) refs.push_back(table.NewPending(std::to_string(i)));
  std::vector<std::thread> waiters;
  std::vector<int> woke(kN, 0);
  for (int i = 0; i < kN; ++i) {
    waiters.emplace_back([&, i] { woke[i] = table.WaitDone(refs[i], absl::Now() + absl::Seconds(60)); });
  }
  for (int i = 0; i < kN; ++i) table.Complete(refs[i], Inline("v"));
  for (auto& t : waiters) t.join();
  for (int i = 0; i < kN; ++i) EXPECT_EQ(woke[i], 1) << i;
}

TEST(ObjectTableTest, APendingObjectSaysWhichArgumentItWaitsForAndWhy) {
  ObjectTable table;
  auto root = table.NewPending("root");
  auto mid = table.NewPending("mid");
  auto top = table.NewPending("top");
  auto ready = table.NewReady("ready", Inline("r"));
  table.SetPendingReason(root, "pending: needs 1000 CPUs on one node");
  table.SetWaitsOn(mid, "Mid", {{1, root}});
  table.SetWaitsOn(top, "Top", {{1, ready}, {2, mid}});
  const std::string why = table.PendingReason(top);
  EXPECT_EQ(why,
            "task Top waits for its argument 2 (object mid), which is not ready: task Mid waits "
            "for its argument 1 (object root), which is not ready: pending: needs 1000 CPUs on one "
            "node")
      << why;
  // Once the argument is done, the chain no longer names it.
  table.Complete(root, Inline("x"));
  EXPECT_EQ(table.PendingReason(mid), "");
  // A dropped argument is skipped.
  auto lone = table.NewPending("lone");
  {
    auto gone = table.NewPending("gone");
    table.SetWaitsOn(lone, "Lone", {{1, gone}});
  }
  EXPECT_EQ(table.PendingReason(lone), "");
}

}  // namespace
}  // namespace drover::internal
