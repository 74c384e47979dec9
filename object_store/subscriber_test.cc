// Subscriber against a real drover-object-store process: seal, delete and eviction
// events, the snapshot, the store going away, and Interrupt.
#include "object_store/subscriber.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/protocol.h"
#include "object_store/testing/raw_client.h"
#include "object_store/wire_status.h"
#include "proto/object_store.pb.h"
#include "tests/util/test_util.h"

namespace drover::object_store {
namespace {

using ::drover::testing::Runfile;
using ::drover::testing::WaitFor;
// Creates objects with fields the Client library does not expose (secondary copies).
using ::drover::object_store::testing::RawClient;

constexpr uint64_t kMiB = 1ull << 20;

// drover-object-store as a child process, in a short scratch directory (Unix socket
// paths are limited to 107 bytes; TEST_TMPDIR can be longer).
class Store {
 public:
  explicit Store(uint64_t capacity) {
    char tmpl[] = "/tmp/drover-sub-XXXXXX";
    dir_ = mkdtemp(tmpl);
    socket_ = dir_ + "/store.sock";
    SpawnOptions o;
    o.argv = {Runfile("object_store/drover-object-store"), "--socket", socket_, "--capacity",
              absl::StrCat(capacity)};
    o.stderr_path = dir_ + "/store.log";
    absl::StatusOr<pid_t> pid = Spawn(o);
    EXPECT_TRUE(pid.ok()) << pid.status();
    pid_ = pid.value_or(-1);
    EXPECT_TRUE(WaitFor([&] { return Client::Connect(socket_).ok(); })) << log();
  }
  ~Store() {
    Kill(SIGTERM);
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)!system(cmd.c_str());
  }
  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  const std::string& socket() const { return socket_; }
  std::string log() const { return ReadFile(dir_ + "/store.log").value_or(""); }

 private:
  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

void ExpectEvent(Subscriber& sub, StoreEvent::Kind kind, const std::string& id,
                 uint64_t size, bool primary) {
  absl::StatusOr<StoreEvent> e = sub.Next(absl::Seconds(10));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->kind, kind) << id;
  EXPECT_EQ(e->id, id);
  EXPECT_EQ(e->data_size, size) << id;
  EXPECT_EQ(e->primary, primary) << id;
}

TEST(SubscriberTest, SealsAndDeletesArriveInOrder) {
  Store store(64 * kMiB);
  auto sub = Subscriber::Connect(store.socket());
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto client = Client::Connect(store.socket());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("small", std::string(1000, 'a')).ok());   // inline put
  ASSERT_TRUE((*client)->Put("big", std::string(2 * kMiB, 'b'), "meta").ok());
  ASSERT_TRUE((*client)->Put("medium", std::string(kMiB / 2, 'm'), "meta").ok());  // leased
  // A referenced object's delete is announced at once: it is invisible from then on.
  auto ref = (*client)->Get("big", absl::ZeroDuration());
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE((*client)->Delete("big").ok());
  ASSERT_TRUE((*client)->Delete("small").ok());
  // Aborted objects were never visible: no event.
  auto m = (*client)->Create("aborted", 100);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*client)->Abort("aborted").ok());
  ASSERT_TRUE((*client)->Put("last", std::string(10, 'c')).ok());

  ExpectEvent(**sub, StoreEvent::Kind::kSealed, "small", 1000, true);
  ExpectEvent(**sub, StoreEvent::Kind::kSealed, "big", 2 * kMiB, true);
  ExpectEvent(**sub, StoreEvent::Kind::kSealed, "medium", kMiB / 2, true);
  ExpectEvent(**sub, StoreEvent::Kind::kRemoved, "big", 2 * kMiB, true);
  ExpectEvent(**sub, StoreEvent::Kind::kRemoved, "small", 1000, true);
  ExpectEvent(**sub, StoreEvent::Kind::kSealed, "last", 10, true);
  absl::StatusOr<StoreEvent> none = (*sub)->Next(absl::Milliseconds(50));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded) << none.status();
}

TEST(SubscriberTest, SnapshotListsWhatIsThereBeforeLiveEvents) {
  Store store(64 * kMiB);
  auto client = Client::Connect(store.socket());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("one", std::string(100, 'a')).ok());
  ASSERT_TRUE((*client)->Put("two", std::string(200, 'a')).ok());
  ASSERT_TRUE((*client)->Put("gone", std::string(300, 'a')).ok());
  ASSERT_TRUE((*client)->Delete("gone").ok());
  auto unsealed = (*client)->Create("unsealed", 10);
  ASSERT_TRUE(unsealed.ok());

  std::vector<StoreEvent> snapshot;
  auto sub = Subscriber::Connect(store.socket(), &snapshot);
  ASSERT_TRUE(sub.ok()) << sub.status();
  std::map<std::string, uint64_t> seen;
  for (const auto& e : snapshot) {
    EXPECT_EQ(e.kind, StoreEvent::Kind::kSealed);
    seen[e.id] = e.data_size;
  }
  EXPECT_EQ(seen, (std::map<std::string, uint64_t>{{"one", 100}, {"two", 200}}));
  ASSERT_TRUE((*client)->Seal("unsealed").ok());
  ExpectEvent(**sub, StoreEvent::Kind::kSealed, "unsealed", 10, true);
}

TEST(SubscriberTest, SecondaryCopiesAreEvictedAndAnnounced) {
  Store store(4 * kMiB);
  auto sub = Subscriber::Connect(store.socket());
  ASSERT_TRUE(sub.ok()) << sub.status();
  RawClient raw(store.socket());
  proto::StoreRequest create;
  create.mutable_create()->set_id("pulled");
  create.mutable_create()->set_data_size(3 * kMiB);
  create.mutable_create()->set_secondary(true);
  ASSERT_EQ(ReplyCode(raw.Call(create)), absl::StatusCode::kOk);
  proto::StoreRequest seal;
  seal.mutable_seal()->set_id("pulled");
  ASSERT_EQ(ReplyCode(raw.Call(seal)), absl::StatusCode::kOk);
  proto::StoreRequest release;  // the creator's reference (Client::Seal drops it too)
  release.mutable_release()->set_id("pulled");
  ASSERT_EQ(ReplyCode(raw.Call(release)), absl::StatusCode::kOk);
  ExpectEvent(**sub, StoreEvent::Kind::kSealed, "pulled", 3 * kMiB, false);

  // A primary that does not fit beside it evicts the unreferenced secondary copy.
  auto client = Client::Connect(store.socket());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("local", std::string(3 * kMiB, 'x')).ok()) << store.log();
  ExpectEvent(**sub, StoreEvent::Kind::kRemoved, "pulled", 0, false);
  ExpectEvent(**sub, StoreEvent::Kind::kSealed, "local", 3 * kMiB, true);
  EXPECT_FALSE(*(*client)->Contains("pulled"));
}

TEST(SubscriberTest, StoreGoingAwayIsUnavailable) {
  Store store(64 * kMiB);
  auto sub = Subscriber::Connect(store.socket());
  ASSERT_TRUE(sub.ok()) << sub.status();
  store.Kill(SIGKILL);
  absl::StatusOr<StoreEvent> e = (*sub)->Next(absl::Seconds(10));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
  auto again = Subscriber::Connect(store.socket());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
}

TEST(SubscriberTest, InterruptWakesABlockedNext) {
  Store store(64 * kMiB);
  auto sub = Subscriber::Connect(store.socket());
  ASSERT_TRUE(sub.ok()) << sub.status();
  absl::Status result;
  std::thread t([&] { result = (*sub)->Next(absl::InfiniteDuration()).status(); });
  (*sub)->Interrupt();
  t.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
}

}  // namespace
}  // namespace drover::object_store
