// QueueBook's rules without sockets: FIFO, capacity, waits and their deadlines, close,
// and connections that go away.
#include "sdk/runtime/queue_book.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace drover::internal {
namespace {

constexpr int kOk = 0;
const int kDeadline = static_cast<int>(absl::StatusCode::kDeadlineExceeded);
const int kClosed = static_cast<int>(absl::StatusCode::kFailedPrecondition);
const int kDrained = static_cast<int>(absl::StatusCode::kOutOfRange);

proto::QueuePut PutOf(const std::string& value, int64_t timeout_ms = -1, uint64_t stored = 0) {
  proto::QueuePut p;
  p.set_timeout_ms(timeout_ms);
  p.mutable_item()->set_value(value);
  if (stored > 0) {
    proto::StoredObject* o = p.mutable_item()->add_owned();
    o->set_object_id("obj-" + value);
    o->set_size(stored);
  }
  return p;
}

proto::QueueGet GetOf(int64_t timeout_ms = -1, uint32_t max = 1) {
  proto::QueueGet g;
  g.set_timeout_ms(timeout_ms);
  g.set_max_items(max);
  return g;
}

const absl::Time t0 = absl::FromUnixSeconds(1000);

TEST(QueueBookTest, ItemsComeOutInOrderAndGetsTakeUpToTheirMax) {
  QueueBook book("queue 'q'", 0);
  for (const char* v : {"a", "b", "c"}) ASSERT_EQ(book.Put(1, 1, PutOf(v), t0)[0].reply.code(), kOk);
  auto two = book.Get(2, 7, GetOf(-1, 2), t0);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].conn, 2u);
  EXPECT_EQ(two[0].reply.request_id(), 7u);
  ASSERT_EQ(two[0].reply.items_size(), 2);
  EXPECT_EQ(two[0].reply.items(0).value(), "a");
  EXPECT_EQ(two[0].reply.items(1).value(), "b");
  EXPECT_EQ(book.Get(2, 8, GetOf(), t0)[0].reply.items(0).value(), "c");
  EXPECT_EQ(book.Stats().puts(), 3u);
  EXPECT_EQ(book.Stats().gets(), 3u);
}

TEST(QueueBookTest, AFullQueueParksPutsUntilAGetMakesRoom) {
  QueueBook book("queue 'q'", 1);
  ASSERT_EQ(book.Put(1, 1, PutOf("a"), t0)[0].reply.code(), kOk);
  // No wait allowed: refused at once; with a wait: parked, no answer yet.
  auto refused = book.Put(1, 2, PutOf("x", 0), t0);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].reply.code(), kDeadline);
  EXPECT_TRUE(book.Put(1, 3, PutOf("b"), t0).empty());
  EXPECT_EQ(book.Stats().waiting_puts(), 1u);
  // A get takes "a" and lets "b" in: two answers.
  auto answers = book.Get(2, 1, GetOf(), t0);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].reply.items(0).value(), "a");
  EXPECT_EQ(answers[1].conn, 1u);
  EXPECT_EQ(answers[1].reply.request_id(), 3u);
  EXPECT_EQ(book.Stats().size(), 1u);
}

TEST(QueueBookTest, AWaitingGetIsServedByTheNextPut) {
  QueueBook book("queue 'q'", 0);
  EXPECT_TRUE(book.Get(2, 5, GetOf(), t0).empty());
  auto answers = book.Put(1, 1, PutOf("a"), t0);
  ASSERT_EQ(answers.size(), 2u);  // the put's, and the waiting get's
  EXPECT_EQ(answers[1].conn, 2u);
  EXPECT_EQ(answers[1].reply.items(0).value(), "a");
}

TEST(QueueBookTest, WaitsExpireAtTheirDeadlines) {
  QueueBook book("queue 'q'", 1);
  ASSERT_EQ(book.Put(1, 1, PutOf("a"), t0)[0].reply.code(), kOk);
  EXPECT_TRUE(book.Put(1, 2, PutOf("b", 100), t0).empty());
  QueueBook empty("queue 'e'", 0);
  EXPECT_TRUE(empty.Get(2, 1, GetOf(50), t0).empty());
  EXPECT_EQ(empty.NextDeadline(), t0 + absl::Milliseconds(50));
  EXPECT_TRUE(book.Expire(t0 + absl::Milliseconds(99)).empty());
  auto put_expired = book.Expire(t0 + absl::Milliseconds(100));
  ASSERT_EQ(put_expired.size(), 1u);
  EXPECT_EQ(put_expired[0].reply.code(), kDeadline);
  auto get_expired = empty.Expire(t0 + absl::Seconds(1));
  ASSERT_EQ(get_expired.size(), 1u);
  EXPECT_EQ(get_expired[0].reply.code(), kDeadline);
  EXPECT_EQ(book.NextDeadline(), absl::InfiniteFuture());
}

TEST(QueueBookTest, CloseDrainsThenEndsAndFailsWaiters) {
  QueueBook full("queue 'f'", 1);
  ASSERT_EQ(full.Put(1, 1, PutOf("a"), t0)[0].reply.code(), kOk);
  EXPECT_TRUE(full.Put(1, 2, PutOf("b", -1, 10), t0).empty());
  auto closed = full.Close(3, 9);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(closed[0].reply.code(), kClosed);  // the waiting put
  EXPECT_EQ(closed[1].reply.code(), kOk);      // the close itself
  EXPECT_EQ(full.Put(1, 4, PutOf("c"), t0)[0].reply.code(), kClosed);
  EXPECT_EQ(full.Get(2, 1, GetOf(), t0)[0].reply.items(0).value(), "a");
  EXPECT_EQ(full.Stats().ends_seen(), 0u);  // drained, but no consumer saw the end yet
  EXPECT_EQ(full.Get(2, 2, GetOf(), t0)[0].reply.code(), kDrained);
  EXPECT_EQ(full.Stats().ends_seen(), 1u);

  QueueBook empty("queue 'e'", 0);
  EXPECT_TRUE(empty.Get(2, 1, GetOf(), t0).empty());
  auto woken = empty.Close(3, 1);
  ASSERT_EQ(woken.size(), 2u);
  EXPECT_EQ(woken[0].reply.code(), kDrained);
  EXPECT_EQ(empty.Stats().ends_seen(), 1u);  // the waiting get was told the end
}

TEST(QueueBookTest, AGoneConnectionsWaitsAreDroppedAndTheirItemsReturned) {
  QueueBook book("queue 'q'", 1);
  ASSERT_EQ(book.Put(1, 1, PutOf("a", -1, 100), t0)[0].reply.code(), kOk);
  EXPECT_TRUE(book.Put(2, 1, PutOf("b", -1, 200), t0).empty());
  EXPECT_EQ(book.Stats().stored_bytes(), 100u);
  std::vector<proto::StoredObject> dropped = book.Disconnected(2);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].object_id(), "obj-b");
  EXPECT_EQ(book.Stats().waiting_puts(), 0u);
  // What is still queued is what the host deletes if it goes.
  ASSERT_EQ(book.Owned().size(), 1u);
  EXPECT_EQ(book.Owned()[0].object_id(), "obj-a");
}

}  // namespace
}  // namespace drover::internal
