// StoreAccess after its node's store died and was started again on the same socket (as
// the node agent does): an object put before is known here as lost with that store,
// naming the node and when, without waiting for the scheduler to hear of the restart
// (sdk/runtime/runtime.cc GetValue asks LostInRestart once a load failed).
#include "sdk/runtime/store_access.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/testing/store_process.h"

namespace drover::internal {
namespace {

using object_store::testing::Pattern;
using object_store::testing::RestartableStore;
using object_store::testing::ScratchDir;

std::string Bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v = Pattern(n, seed);
  return std::string(v.begin(), v.end());
}

TEST(StoreAccessTest, AnObjectPutBeforeTheStoreRestartedIsKnownLostHere) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = object_store::Client::Connect(socket);
  ASSERT_TRUE(client.ok()) << client.status();
  StoreAccess access(std::move(*client), "node-7", /*agent_address=*/"", "token");

  absl::StatusOr<StoredRef> before = access.Put("before", Bytes(200000, 1));
  ASSERT_TRUE(before.ok()) << before.status();
  const absl::Time before_made = absl::Now();
  std::string why;
  EXPECT_FALSE(access.LostInRestart(*before, before_made, &why)) << why;

  store.Kill();
  ASSERT_TRUE(store.StartAndWait());
  // The load finds it gone (and the client connects to the restarted store).
  absl::StatusOr<object_store::ObjectRef> ref =
      access.GetRef("before", "node-7", absl::Now() + absl::Seconds(3));
  ASSERT_FALSE(ref.ok());
  EXPECT_TRUE(access.LostInRestart(*before, before_made, &why));
  EXPECT_TRUE(absl::StrContains(why, "lost when the object store of node node-7 restarted at"))
      << why;

  // Made after the restart: in the store, and never taken for lost.
  absl::StatusOr<StoredRef> after = access.Put("after", Bytes(200000, 2));
  ASSERT_TRUE(after.ok()) << after.status();
  const absl::Time after_made = absl::Now();
  EXPECT_TRUE(access.GetRef("after", "node-7", absl::Now() + absl::Seconds(3)).ok());
  why.clear();
  EXPECT_FALSE(access.LostInRestart(*after, after_made, &why)) << why;
  // Another node's object is not this store's to judge.
  EXPECT_FALSE(access.LostInRestart(StoredRef{"before", "node-8", 200000}, before_made, &why));
}

// A store that was only stopped (a call timed out and the client connected again to
// the same store) lost nothing: its objects are not taken for lost.
TEST(StoreAccessTest, AStoreThatWasOnlyStoppedLostNothing) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = object_store::Client::Connect(
      socket, object_store::ClientOptions{.reply_grace = absl::Seconds(1)});
  ASSERT_TRUE(client.ok()) << client.status();
  object_store::Client* raw = client->get();
  StoreAccess access(std::move(*client), "node-7", /*agent_address=*/"", "token");
  absl::StatusOr<StoredRef> kept = access.Put("kept", Bytes(200000, 1));
  ASSERT_TRUE(kept.ok()) << kept.status();
  const absl::Time made = absl::Now();

  store.Stop();
  // Not answered: the connection is dropped at the Get's deadline.
  EXPECT_FALSE(access.GetRef("missing", "node-7", absl::Now() + absl::Seconds(2)).ok());
  store.Continue();
  EXPECT_TRUE(access.GetRef("kept", "node-7", absl::Now() + absl::Seconds(30)).ok());
  EXPECT_GE(raw->reconnects(), 1u);
  std::string why;
  EXPECT_FALSE(access.LostInRestart(*kept, made, &why)) << why;
}

}  // namespace
}  // namespace drover::internal
