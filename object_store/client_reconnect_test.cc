// object_store::Client against a store that dies and comes back on the same socket
// (as the node agent restarts it): calls made while it is away wait for it, the client
// connects again by itself, refs taken before stay readable, objects of the dead store
// are gone, and a store that stays away gets a clear UNAVAILABLE after the wait.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/testing/store_process.h"

namespace drover::object_store::testing {
namespace {

TEST(ClientReconnectTest, CallsWaitForARestartedStoreAndGoOn) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  store.Start();
  ASSERT_TRUE(WaitFor([&] { return Client::Connect(socket).ok(); }));
  auto client = Client::Connect(socket, ClientOptions{.reconnect_wait = absl::Seconds(30)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;
  const std::vector<uint8_t> small = Pattern(1000, 1), large = Pattern(8 * kMiB, 2);
  ASSERT_TRUE(c.Put("small", small).ok());
  ASSERT_TRUE(c.Put("large", large).ok());
  absl::StatusOr<ObjectRef> held = c.Get("large", absl::ZeroDuration());
  ASSERT_TRUE(held.ok()) << held.status();

  absl::StatusOr<MutableObject> draft = c.Create("draft", 1000);
  ASSERT_TRUE(draft.ok()) << draft.status();
  store.Kill(SIGKILL);
  // The store comes back while the next put waits for it.
  std::atomic<bool> calling{false};
  std::thread restart([&] {
    WaitFor([&] { return calling.load(); });
    store.Start();
  });
  calling = true;
  absl::Status put = c.Put("after", small);
  restart.join();
  ASSERT_TRUE(put.ok()) << put;
  EXPECT_EQ(c.reconnects(), 1u);
  // Every kind of call works on the new store.
  absl::StatusOr<ObjectRef> after = c.Get("after", absl::ZeroDuration());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(std::vector<uint8_t>(after->data().begin(), after->data().end()), small);
  EXPECT_TRUE(c.Put("large-after", large).ok());
  EXPECT_TRUE(c.Put("medium-after", Pattern(256 * 1024, 3)).ok());
  EXPECT_TRUE(c.Stats().ok());
  // The dead store's objects are gone; a ref taken before still reads its bytes.
  absl::StatusOr<ObjectRef> lost = c.Get("small", absl::ZeroDuration());
  EXPECT_FALSE(lost.ok());
  EXPECT_EQ(std::vector<uint8_t>(held->data().begin(), held->data().end()), large);
  held->Reset();
  // An object being written when the store died cannot be sealed, and the error says why.
  std::fill(draft->data.begin(), draft->data.end(), 7);  // its span is still mapped
  absl::Status sealed = c.Seal("draft");
  EXPECT_EQ(sealed.code(), absl::StatusCode::kNotFound) << sealed;
  EXPECT_TRUE(absl::StrContains(sealed.message(), "restarted object store")) << sealed;
}

// More restarts than the client keeps broken links for, while other threads call all
// along: the calls in flight on a link (Current's lock-free path) keep it alive until
// they end, and every call after the last restart works.
TEST(ClientReconnectTest, CallsFromManyThreadsSurviveMoreRestartsThanLinksKept) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  store.Start();
  ASSERT_TRUE(WaitFor([&] { return Client::Connect(socket).ok(); }));
  auto client = Client::Connect(socket, ClientOptions{.reconnect_wait = absl::Seconds(60)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&, t] {
      const std::vector<uint8_t> data = Pattern(2000, t);
      for (int64_t i = 0; !stop.load(); ++i) {
        const std::string id = absl::StrCat("t", t, "-", i);
        if (c.Put(id, data).ok()) {
          absl::StatusOr<ObjectRef> ref = c.Get(id, absl::ZeroDuration());
          if (ref.ok()) ref->Reset();
          (void)c.Delete(id);
        }
        ++calls;
      }
    });
  }
  const int restarts = 7;
  for (int r = 0; r < restarts; ++r) {
    const int64_t seen = calls.load();
    ASSERT_TRUE(WaitFor([&] { return calls.load() > seen + 10; })) << "restart " << r;
    store.Kill(SIGKILL);
    store.Start();
    ASSERT_TRUE(WaitFor([&] { return c.reconnects() >= static_cast<uint64_t>(r + 1); },
                        absl::Seconds(60)))
        << "restart " << r;
  }
  stop = true;
  for (auto& t : callers) t.join();
  EXPECT_EQ(c.reconnects(), static_cast<uint64_t>(restarts));
  EXPECT_TRUE(c.Put("last", Pattern(100, 9)).ok());
  EXPECT_TRUE(c.Get("last", absl::ZeroDuration()).ok());
}

TEST(ClientReconnectTest, AStoreThatStaysAwayGetsAClearUnavailable) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  store.Start();
  ASSERT_TRUE(WaitFor([&] { return Client::Connect(socket).ok(); }));
  auto client = Client::Connect(socket, ClientOptions{.reconnect_wait = absl::Milliseconds(300)});
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("x", Pattern(100, 1)).ok());
  store.Kill(SIGKILL);
  absl::Status s = (*client)->Put("y", Pattern(100, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is away since")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), socket)) << s;
  // Back later: the next call connects again.
  store.Start();
  EXPECT_TRUE(WaitFor([&] { return (*client)->Put("z", Pattern(100, 3)).ok(); }));
  EXPECT_EQ((*client)->reconnects(), 1u);
}

}  // namespace
}  // namespace drover::object_store::testing
