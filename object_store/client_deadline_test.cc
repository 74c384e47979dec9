// object_store::Client calls answer by their deadlines whatever the store does: a store
// that is stopped (SIGSTOP: its socket stays open and its listen queue accepts
// connections, but nothing answers), then killed and started again on the same socket.
// Pins issue 19's chaos-campaign hang: a read-back with 3 s Gets still waiting 13
// minutes later, its threads queued on the connection's lock behind a reply that never
// came, then reconnecting one after another with a 30 s hello each.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "object_store/client.h"
#include "object_store/testing/store_process.h"

namespace drover::object_store::testing {
namespace {

// What one call answered and how long it took.
struct Outcome {
  absl::Status status;
  absl::Duration took;
};

class Outcomes {
 public:
  void Add(absl::Status s, absl::Duration took) {
    absl::MutexLock l(&mu_);
    all_.push_back({std::move(s), took});
  }
  size_t size() {
    absl::MutexLock l(&mu_);
    return all_.size();
  }
  std::vector<Outcome> Take() {
    absl::MutexLock l(&mu_);
    return all_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Outcome> all_ ABSL_GUARDED_BY(mu_);
};

// Generous: the default reply grace is 5 s, and the machine running the tests is loaded.
constexpr absl::Duration kSlack = absl::Seconds(9);

TEST(ClientDeadlineTest, GetsOnAStoppedStoreAnswerDeadlineExceededByTheirDeadline) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = Client::Connect(socket, ClientOptions{.call_timeout = absl::Seconds(3)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;
  ASSERT_TRUE(c.Put("before", Pattern(100, 1)).ok());

  store.Stop();
  const absl::Duration timeout = absl::Seconds(1);
  Outcomes outcomes;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const absl::Time start = absl::Now();
      absl::StatusOr<ObjectRef> ref = c.Get(absl::StrCat("missing-", t), timeout);
      outcomes.Add(ref.status(), absl::Now() - start);
    });
  }
  const bool all = WaitFor([&] { return outcomes.size() == 8; }, absl::Seconds(60));
  if (!all) {
    ADD_FAILURE() << "Gets with a 1 s timeout still waiting after 60 s on a stopped store";
    store.Kill();  // EOF releases them
  }
  for (std::thread& t : threads) t.join();
  for (const Outcome& o : outcomes.Take()) {
    EXPECT_EQ(o.status.code(), absl::StatusCode::kDeadlineExceeded) << o.status;
    EXPECT_TRUE(absl::StrContains(o.status.message(), socket)) << o.status;
    EXPECT_LT(o.took, timeout + kSlack) << o.status;
  }
  if (!all) return;

  // Calls with no timeout of their own end by ClientOptions::call_timeout.
  for (int i = 0; i < 2; ++i) {
    const absl::Time start = absl::Now();
    absl::Status s = i == 0 ? c.Put("during", Pattern(100, 2)) : c.Contains("before").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_LT(absl::Now() - start, absl::Seconds(3) + kSlack) << s;
  }

  // The connection whose reply never came is not used again: once the store answers
  // again, the next calls connect again and work.
  store.Continue();
  absl::Status put;
  EXPECT_TRUE(WaitFor([&] { return (put = c.Put("after", Pattern(100, 3))).ok(); },
                      absl::Seconds(30)))
      << put;
  EXPECT_TRUE(c.Get("after", absl::ZeroDuration()).ok());
  EXPECT_GE(c.reconnects(), 1u);
}

// A reference taken before a call timed out stays valid: the timed-out connection is
// not closed under it, so a store that comes back keeps the object referenced and never
// hands its memory to another object while the ref still maps it.
TEST(ClientDeadlineTest, AReferenceHeldAcrossATimeoutStaysHeldByAStoreThatComesBack) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = Client::Connect(socket, ClientOptions{.call_timeout = absl::Seconds(3)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;
  const std::vector<uint8_t> bytes = Pattern(100000, 7);
  ASSERT_TRUE(c.Put("held", bytes).ok());
  absl::StatusOr<ObjectRef> ref = c.Get("held", absl::ZeroDuration());
  ASSERT_TRUE(ref.ok()) << ref.status();

  store.Stop();
  EXPECT_EQ(c.Get("missing", absl::Seconds(1)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  store.Continue();
  auto other = Client::Connect(socket);
  ASSERT_TRUE(other.ok()) << other.status();
  // A few round trips: the store has read whatever the old connection's socket holds.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*other)->Stats().ok());
  absl::StatusOr<StoreStats> stats = (*other)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GE(stats->referenced, 1u)
      << "the store dropped the references of the connection whose call timed out";
  EXPECT_EQ(std::vector<uint8_t>(ref->data().begin(), ref->data().end()), bytes);
}

TEST(ClientDeadlineTest, CallsAcrossAStopThenKillAndRestartAnswerByTheirDeadlines) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = Client::Connect(socket, ClientOptions{.reconnect_wait = absl::Seconds(30)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;

  const absl::Duration timeout = absl::Seconds(2);
  Outcomes outcomes;
  std::atomic<bool> stop{false};
  std::atomic<int> started_after_stop{0};
  std::atomic<bool> stopped{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        if (stopped.load()) started_after_stop++;
        const absl::Time start = absl::Now();
        absl::StatusOr<ObjectRef> ref = c.Get(absl::StrCat("missing-", t, "-", i), timeout);
        outcomes.Add(ref.status(), absl::Now() - start);
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return outcomes.size() >= 8; }, absl::Seconds(60)));
  store.Stop();
  stopped = true;
  // Every thread is in (or queued for) a call on the stopped store.
  EXPECT_TRUE(WaitFor([&] { return started_after_stop.load() >= 8; }, absl::Seconds(60)))
      << "calls with a 2 s timeout on a stopped store still waiting after 60 s";
  const absl::Time stopped_at = absl::Now();
  store.Kill();
  EXPECT_TRUE(store.StartAndWait());
  const absl::Time restarted_at = absl::Now();
  // Later calls work on the new store.
  absl::Status put;
  EXPECT_TRUE(WaitFor([&] { return (put = c.Put("after", Pattern(100, 3))).ok(); },
                      absl::Seconds(60)))
      << put;
  const absl::Time put_at = absl::Now();
  stop = true;
  for (std::thread& t : threads) t.join();
  absl::Duration longest;
  for (const Outcome& o : outcomes.Take()) longest = std::max(longest, o.took);
  std::printf("restart took %s, first put %s later; longest call %s (timeout %s)\n",
              absl::FormatDuration(restarted_at - stopped_at).c_str(),
              absl::FormatDuration(put_at - restarted_at).c_str(),
              absl::FormatDuration(longest).c_str(), absl::FormatDuration(timeout).c_str());
  for (const Outcome& o : outcomes.Take()) {
    EXPECT_TRUE(o.status.code() == absl::StatusCode::kDeadlineExceeded ||
                o.status.code() == absl::StatusCode::kNotFound ||
                o.status.code() == absl::StatusCode::kUnavailable)
        << o.status;
    EXPECT_LT(o.took, timeout + kSlack) << o.status;
  }
  absl::StatusOr<ObjectRef> after = c.Get("after", absl::Seconds(5));
  EXPECT_TRUE(after.ok()) << after.status();
  EXPECT_GE(c.reconnects(), 1u);
}

// Calls wait for the connection in turn. Threads that loop on Gets re-take it as they let
// go, before a woken waiter runs; without turns a Put among 8 such threads (2 s Gets)
// waited two minutes. In turn, each Put waits at most for the Gets ahead of it.
TEST(ClientDeadlineTest, ACallWaitsItsTurnBehindThreadsThatKeepTakingTheConnection) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = Client::Connect(socket, ClientOptions{.call_timeout = absl::Seconds(60)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;

  constexpr int kThreads = 4;
  const absl::Duration get_timeout = absl::Milliseconds(250);
  std::atomic<bool> stop{false};
  std::atomic<int> gets{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        (void)c.Get(absl::StrCat("missing-", t, "-", i), get_timeout);
        gets++;
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return gets.load() >= kThreads; }, absl::Seconds(60)));
  absl::Duration longest;
  for (int i = 0; i < 8; ++i) {
    const absl::Time start = absl::Now();
    const absl::Status put = c.Put(absl::StrCat("put-", i), Pattern(100, i));
    const absl::Duration took = absl::Now() - start;
    longest = std::max(longest, took);
    EXPECT_TRUE(put.ok()) << put;
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  std::printf("longest put among %d looping 250 ms Gets: %s\n", kThreads,
              absl::FormatDuration(longest).c_str());
  // In turn: the Gets ahead (kThreads x 250 ms) and scheduling on a loaded machine.
  EXPECT_LT(longest, kThreads * get_timeout + absl::Seconds(3));
}


// The campaign's hang, most directly: 16 threads with 3 s Gets queue on a connection to
// a stopped store; their next calls connect again to it (its listen queue accepts, no
// hello comes). Each call answers by its own deadline; none waits for the others'.
TEST(ClientDeadlineTest, Issue19ReadbackThreadsOnAStoppedStoreDoNotQueueForMinutes) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = Client::Connect(socket);
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;
  ASSERT_TRUE(c.Put("x", Pattern(100, 1)).ok());

  store.Stop();
  const absl::Duration timeout = absl::Seconds(3);
  constexpr int kThreads = 16, kCallsEach = 2;
  Outcomes outcomes;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsEach; ++i) {
        const absl::Time start = absl::Now();
        absl::StatusOr<ObjectRef> ref = c.Get(absl::StrCat("r-", t, "-", i), timeout);
        outcomes.Add(ref.status(), absl::Now() - start);
      }
    });
  }
  // Two rounds of (3 s + grace): each call is bounded alone.
  const bool all = WaitFor([&] { return outcomes.size() == kThreads * kCallsEach; },
                           absl::Seconds(90));
  EXPECT_TRUE(all) << outcomes.size() << " of " << kThreads * kCallsEach
                   << " read-back Gets answered within 90 s of stopping the store";
  if (!all) store.Kill();  // EOF releases the one holding the connection
  store.Kill();
  EXPECT_TRUE(store.StartAndWait());
  for (std::thread& t : threads) t.join();
  for (const Outcome& o : outcomes.Take()) {
    EXPECT_LT(o.took, timeout + kSlack) << o.status;
  }
  absl::Status put;
  EXPECT_TRUE(WaitFor([&] { return (put = c.Put("y", Pattern(100, 2))).ok(); },
                      absl::Seconds(60)))
      << put;
}

// A release never waits for the connection: while a Get with a long timeout holds it,
// ~ObjectRef and Release(refs) return at once and the Get's holder sends them as it
// ends. (They used to wait up to call_timeout for the connection, then give up: the
// references stayed pinned for the connection's life.)
TEST(ClientDeadlineTest, ReleasesBehindALongGetDoNotWaitAndAreSentWhenItEnds) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  // A short call_timeout: the old client gave a release up after it (never sent).
  auto client = Client::Connect(socket, ClientOptions{.call_timeout = absl::Seconds(5)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;
  auto other = Client::Connect(socket);
  ASSERT_TRUE(other.ok()) << other.status();
  auto referenced = [&]() -> uint64_t {
    absl::StatusOr<StoreStats> s = (*other)->Stats();
    return s.ok() ? s->referenced : ~uint64_t{0};
  };
  ASSERT_TRUE(c.Put("one", Pattern(100000, 1)).ok());
  ASSERT_TRUE(c.Put("two", Pattern(100000, 2)).ok());
  absl::StatusOr<ObjectRef> one = c.Get("one", absl::ZeroDuration());
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<ObjectRef> two = c.Get("two", absl::ZeroDuration());
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(referenced(), 2u);

  // A Get that holds the connection until "late" is put (by the other client).
  std::atomic<bool> get_done{false};
  absl::Status get_status;
  std::thread getter([&] {
    get_status = c.Get("late", absl::Seconds(120)).status();
    get_done = true;
  });
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<StoreStats> s = (*other)->Stats();
        return s.ok() && s->pending_gets == 1;
      },
      absl::Seconds(60)));

  one->Reset();
  std::vector<ObjectRef> refs;
  refs.push_back(*std::move(two));
  c.Release(&refs);
  EXPECT_TRUE(refs.empty());
  EXPECT_FALSE(get_done.load()) << "the releases waited for the Get holding the connection";
  EXPECT_EQ(referenced(), 2u) << "sent behind a call waiting for its reply?";

  ASSERT_TRUE((*other)->Put("late", Pattern(10, 3)).ok());
  getter.join();
  EXPECT_TRUE(get_status.ok()) << get_status;
  // The Get's thread sent them as it let go of the connection.
  EXPECT_TRUE(WaitFor([&] { return referenced() == 0; }, absl::Seconds(30)))
      << referenced() << " objects still referenced";
}

// A timeout names the request whose reply never came: a leased put's seal, sent in one
// write with the lease refill after it (the message used to name the last request
// built, the lease).
TEST(ClientDeadlineTest, ALeasedPutsSealThatIsNeverAnsweredIsNamed) {
  ScratchDir dir;
  const std::string socket = dir.path() + "/store.sock";
  RestartableStore store(socket);
  ASSERT_TRUE(store.StartAndWait());
  auto client = Client::Connect(socket, ClientOptions{.call_timeout = absl::Seconds(3)});
  ASSERT_TRUE(client.ok()) << client.status();
  Client& c = **client;
  // Leased (over 64 KiB, under 256 KiB: no overlapped seal); its seal's write asks for
  // the next lease, whose answer the Stats round trip reads.
  ASSERT_TRUE(c.Put("first", Pattern(200000, 1)).ok());
  ASSERT_TRUE(c.Stats().ok());
  store.Stop();
  absl::Status s = c.Put("second", Pattern(200000, 2));
  store.Continue();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "did not answer a leased put's seal request")) << s;
}

}  // namespace
}  // namespace drover::object_store::testing
