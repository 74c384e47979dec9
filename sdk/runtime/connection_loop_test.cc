// ConnectionLoop over real socketpairs: a peer that stops reading holds up no other
// connection (sends never block, the loop drains them on writability), store deletes
// of objects released on the loop thread are made on another, a failed loop closes
// every connection, and Stop returns while a peer does not read.
#include "sdk/runtime/connection_loop.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/net.h"
#include "common/tls.h"
#include "common/tls_ca.h"
#include "gtest/gtest.h"
#include "proto/task.pb.h"
#include "sdk/runtime/object_table.h"
#include "tests/util/test_util.h"

namespace drover::internal {
namespace {

using ::drover::testing::WaitFor;

constexpr absl::Duration kWait = absl::Seconds(20);

// A connection: `near` is watched by the loop, `far` is the peer (blocking).
struct Pair {
  std::unique_ptr<FramedSocket> near;
  std::unique_ptr<FramedSocket> far;
};

Pair MakePair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return Pair{std::make_unique<FramedSocket>(fds[0]), std::make_unique<FramedSocket>(fds[1])};
}

proto::TaskFrame Small(uint64_t seq) {
  proto::TaskFrame f;
  f.mutable_cancel()->set_seq(seq);
  return f;
}

proto::TaskFrame Large(uint64_t seq, size_t bytes) {
  proto::TaskFrame f;
  f.mutable_reply()->set_seq(seq);
  f.mutable_reply()->set_value(std::string(bytes, static_cast<char>('a' + seq % 26)));
  return f;
}

class ConnectionLoopTest : public ::testing::Test {
 protected:
  void SetUp() override { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort); }
};

// Each frame on B makes its handler (on the loop thread) send 1 MiB to A, whose peer
// reads nothing (a stopped worker): A's socket fills at once, yet every frame of B is
// handled. Once A's peer reads, all of it arrives, whole and in order.
TEST_F(ConnectionLoopTest, APeerThatDoesNotReadHoldsUpNoOtherConnection) {
  Pair a = MakePair();
  Pair b = MakePair();
  ConnectionLoop loop;  // after the sockets: it goes first
  std::atomic<int> a_closed{0};
  ASSERT_TRUE(loop.Watch(a.near.get(), "the test peer", [](std::string_view) {},
                         [&](const absl::Status&) { ++a_closed; })
                  .ok());
  constexpr int kFrames = 16;
  constexpr size_t kBytes = 1 << 20;
  std::atomic<int> handled{0};
  FramedSocket* to_a = a.near.get();
  ASSERT_TRUE(loop.Watch(b.near.get(), "the test peer",
                         [&](std::string_view payload) {
                           proto::TaskFrame f;
                           ASSERT_TRUE(f.ParseFromArray(payload.data(), static_cast<int>(payload.size())));
                           EXPECT_TRUE(to_a->Send(Large(f.cancel().seq(), kBytes)).ok());
                           ++handled;
                         },
                         [](const absl::Status&) {})
                  .ok());
  for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(b.far->Send(Small(i)).ok());
  ASSERT_TRUE(WaitFor([&] { return handled.load() == kFrames; }, kWait))
      << handled.load() << " of " << kFrames << " frames handled";
  EXPECT_GT(to_a->unsent(), 0u);  // A's peer has read nothing: most of it waits here
  for (int i = 0; i < kFrames; ++i) {
    proto::TaskFrame f;
    ASSERT_TRUE(a.far->Read(&f).ok());
    ASSERT_EQ(f.reply().seq(), static_cast<uint64_t>(i));
    ASSERT_EQ(f.reply().value(), std::string(kBytes, static_cast<char>('a' + i % 26)));
  }
  EXPECT_TRUE(WaitFor([&] { return to_a->unsent() == 0; }));
  EXPECT_EQ(a_closed.load(), 0);
}

// The last reference to a stored object, dropped by a handler on the loop thread,
// deletes it from the store on another thread: a delete that hangs (a store
// restarting) holds up no connection.
TEST_F(ConnectionLoopTest, StoreDeletesOfObjectsReleasedOnTheLoopAreMadeElsewhere) {
  ObjectTable table;
  absl::Notification unblock;
  std::atomic<int> deleted{0};
  std::atomic<bool> deleted_on_loop{false};
  std::thread::id loop_thread;
  absl::Mutex mu;
  table.set_release([&](const std::vector<StoredRef>& objects) {
    {
      absl::MutexLock l(&mu);
      if (std::this_thread::get_id() == loop_thread) deleted_on_loop = true;
    }
    unblock.WaitForNotification();
    deleted += static_cast<int>(objects.size());
  });
  Pair a = MakePair();
  Pair b = MakePair();
  ConnectionLoop loop;
  // Lets the delete go however the test ends (a failed ASSERT included), before the
  // loop goes.
  absl::Cleanup unblock_at_end = [&] {
    if (!unblock.HasBeenNotified()) unblock.Notify();
  };
  std::shared_ptr<RefState> ref = table.NewReady(
      "obj-1", ObjectValue{nullptr, StoredRef{"obj-1", "n1", 100}, {}});
  ASSERT_TRUE(loop.Watch(a.near.get(), "the test peer",
                         [&](std::string_view) {
                           {
                             absl::MutexLock l(&mu);
                             loop_thread = std::this_thread::get_id();
                           }
                           ref.reset();  // the last reference: a store delete
                         },
                         [](const absl::Status&) {})
                  .ok());
  std::atomic<int> b_frames{0};
  ASSERT_TRUE(loop.Watch(b.near.get(), "the test peer", [&](std::string_view) { ++b_frames; },
                         [](const absl::Status&) {})
                  .ok());
  ASSERT_TRUE(a.far->Send(Small(1)).ok());
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock l(&mu);
    return loop_thread != std::thread::id();
  }));
  // The delete hangs; B is still served.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b.far->Send(Small(i)).ok());
  EXPECT_TRUE(WaitFor([&] { return b_frames.load() == 5; }, kWait)) << b_frames.load();
  EXPECT_EQ(deleted.load(), 0);
  unblock.Notify();
  EXPECT_TRUE(WaitFor([&] { return deleted.load() == 1; }, kWait));
  EXPECT_FALSE(deleted_on_loop.load());
}

// Frames that arrive together are handled together, and the connection's batch end
// runs once after them (its owner sends what they decided in one write).
TEST_F(ConnectionLoopTest, BatchEndRunsOnceAfterTheFramesOfAWakeUp) {
  Pair a = MakePair();
  ConnectionLoop loop;
  std::atomic<int> frames{0};
  std::atomic<int> ends{0};
  std::atomic<int> frames_at_first_end{-1};
  ASSERT_TRUE(loop.Watch(a.near.get(), "the test peer", [&](std::string_view) { ++frames; },
                         [](const absl::Status&) {},
                         [&] {
                           if (ends++ == 0) frames_at_first_end = frames.load();
                         })
                  .ok());
  std::string batch;
  for (int i = 0; i < 10; ++i) AppendFrame(Small(i), &batch);
  ASSERT_TRUE(a.far->SendFrames(batch).ok());
  ASSERT_TRUE(WaitFor([&] { return ends.load() >= 1; }, kWait));
  EXPECT_EQ(frames_at_first_end.load(), 10);
  EXPECT_EQ(ends.load(), 1);
}

// A close says what happened: the peer closed it, or this side shut it down.
TEST_F(ConnectionLoopTest, ACloseSaysWhoEndedTheConnection) {
  Pair a = MakePair();
  Pair b = MakePair();
  ConnectionLoop loop;
  absl::Mutex mu;
  std::string why_a, why_b;
  ASSERT_TRUE(loop.Watch(a.near.get(), "the test peer", [](std::string_view) {},
                         [&](const absl::Status& why) {
                           absl::MutexLock l(&mu);
                           why_a = std::string(why.message());
                         })
                  .ok());
  ASSERT_TRUE(loop.Watch(b.near.get(), "the test peer", [](std::string_view) {},
                         [&](const absl::Status& why) {
                           absl::MutexLock l(&mu);
                           why_b = std::string(why.message());
                         })
                  .ok());
  a.far.reset();
  b.near->Shutdown();
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock l(&mu);
    return !why_a.empty() && !why_b.empty();
  }, kWait));
  absl::MutexLock l(&mu);
  EXPECT_TRUE(absl::StrContains(why_a, "closed by the peer")) << why_a;
  EXPECT_TRUE(absl::StrContains(why_b, "shut down by this side")) << why_b;
}

// Stop does not wait on a store delete that does not return (a restarting store) for
// longer than kStopReleaseWait, and drops deletes not yet begun.
TEST_F(ConnectionLoopTest, StopDoesNotWaitOnAHangingStoreDelete) {
  ObjectTable table;
  absl::Notification unblock;
  std::atomic<int> calls{0};
  std::atomic<int> deleted{0};
  table.set_release([&](const std::vector<StoredRef>& objects) {
    ++calls;
    unblock.WaitForNotification();
    deleted += static_cast<int>(objects.size());
  });
  Pair a = MakePair();
  auto loop = std::make_unique<ConnectionLoop>();
  std::thread stopper;
  absl::Cleanup at_end = [&] {
    if (!unblock.HasBeenNotified()) unblock.Notify();
    if (stopper.joinable()) stopper.join();
  };
  std::vector<std::shared_ptr<RefState>> refs;
  for (int i = 0; i < 2; ++i) {
    const std::string id = absl::StrCat("obj-", i);
    refs.push_back(table.NewReady(id, ObjectValue{nullptr, StoredRef{id, "n1", 100}, {}}));
  }
  std::atomic<int> frames{0};
  ASSERT_TRUE(loop->Watch(a.near.get(), "the test peer",
                          [&](std::string_view) {
                            refs[frames.load()].reset();  // a store delete per frame
                            ++frames;
                          },
                          [](const absl::Status&) {})
                  .ok());
  ASSERT_TRUE(a.far->Send(Small(1)).ok());
  ASSERT_TRUE(WaitFor([&] { return calls.load() == 1; }, kWait));  // the first hangs
  ASSERT_TRUE(a.far->Send(Small(2)).ok());
  ASSERT_TRUE(WaitFor([&] { return frames.load() == 2; }, kWait));  // the second waits
  a.near->Shutdown();
  std::atomic<bool> stopped{false};
  stopper = std::thread([&] {
    loop->Stop();
    stopped = true;
  });
  EXPECT_TRUE(WaitFor([&] { return stopped.load(); }, kWait));
  unblock.Notify();
  EXPECT_TRUE(WaitFor([&] { return deleted.load() == 1; }, kWait));
  EXPECT_EQ(calls.load(), 1);  // the queued one was dropped
}

// A delete that Stop left to finish on its own (the store did not answer within
// kStopReleaseWait) never touches an ObjectTable after that: the batch carries the
// release functions, so the table may be gone (here destroyed and its memory wiped, as
// a runtime's would be reused) by the time the hanging delete returns, and the next
// delete of the batch is still made by the function its table had.
TEST_F(ConnectionLoopTest, ADeleteLeftToFinishAfterStopDoesNotTouchItsTable) {
  ObjectTable first;
  absl::Notification unblock;
  std::atomic<int> first_calls{0};
  first.set_release([&](const std::vector<StoredRef>&) {
    ++first_calls;
    unblock.WaitForNotification();
  });
  // The second table lives in storage the test wipes after destroying it.
  alignas(ObjectTable) unsigned char storage[sizeof(ObjectTable)];
  ObjectTable* second = new (storage) ObjectTable();
  bool second_alive = true;
  auto second_deleted = std::make_shared<std::atomic<int>>(0);
  second->set_release([second_deleted](const std::vector<StoredRef>& objects) {
    *second_deleted += static_cast<int>(objects.size());
  });
  Pair a = MakePair();
  auto loop = std::make_unique<ConnectionLoop>();
  std::thread stopper;
  absl::Cleanup at_end = [&] {
    if (!unblock.HasBeenNotified()) unblock.Notify();
    if (stopper.joinable()) stopper.join();
    if (second_alive) second->~ObjectTable();
  };
  std::shared_ptr<RefState> r1 =
      first.NewReady("obj-1", ObjectValue{nullptr, StoredRef{"obj-1", "n1", 100}, {}});
  std::shared_ptr<RefState> r2 =
      second->NewReady("obj-2", ObjectValue{nullptr, StoredRef{"obj-2", "n1", 100}, {}});
  ASSERT_TRUE(loop->Watch(a.near.get(), "the test peer",
                          [&](std::string_view) {
                            r1.reset();  // one batch: the first's delete, then the second's
                            r2.reset();
                          },
                          [](const absl::Status&) {})
                  .ok());
  ASSERT_TRUE(a.far->Send(Small(1)).ok());
  ASSERT_TRUE(WaitFor([&] { return first_calls.load() == 1; }, kWait));  // it hangs
  a.near->Shutdown();
  std::atomic<bool> stopped{false};
  stopper = std::thread([&] {
    loop->Stop();
    stopped = true;
  });
  ASSERT_TRUE(WaitFor([&] { return stopped.load(); }, kWait));
  second->~ObjectTable();
  second_alive = false;
  std::memset(storage, 0, sizeof(storage));
  unblock.Notify();
  EXPECT_TRUE(WaitFor([&] { return second_deleted->load() == 1; }, kWait))
      << "the second delete of the batch was not made after its table went";
}

// One connection whose peer has megabytes of frames waiting does not hold up another:
// a connection is read at most FramedSocket::kMaxReadPerEvent (256 KiB) per turn, so
// B's frame, which arrived after A's 2 MiB, is handled after about 256 KiB of A's
// frames, not after all of them.
TEST_F(ConnectionLoopTest, AConnectionWithMegabytesWaitingDoesNotHoldUpAnother) {
  Pair a = MakePair();
  Pair b = MakePair();
  Pair blocker = MakePair();
  // A's peer can have 2 MiB in flight (FORCE: as root, past net.core.wmem_max).
  const int sndbuf = 8 << 20;
  if (::setsockopt(a.far->fd(), SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) != 0) {
    ::setsockopt(a.far->fd(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  }
  ConnectionLoop loop;
  // Holds the loop thread while A's and B's bytes arrive, so its next wake-up finds
  // both: A's first (it was written first), then B's.
  absl::Notification loop_held, let_go;
  absl::Cleanup let_go_at_end = [&] {
    if (!let_go.HasBeenNotified()) let_go.Notify();
  };
  ASSERT_TRUE(loop.Watch(blocker.near.get(), "the blocking peer",
                         [&](std::string_view) {
                           loop_held.Notify();
                           let_go.WaitForNotification();
                         },
                         [](const absl::Status&) {})
                  .ok());
  std::atomic<int> a_frames{0};
  std::atomic<int> a_frames_before_b{-1};
  ASSERT_TRUE(loop.Watch(a.near.get(), "the flooding peer", [&](std::string_view) { ++a_frames; },
                         [](const absl::Status&) {})
                  .ok());
  ASSERT_TRUE(loop.Watch(b.near.get(), "the other peer",
                         [&](std::string_view) { a_frames_before_b = a_frames.load(); },
                         [](const absl::Status&) {})
                  .ok());
  ASSERT_TRUE(blocker.far->Send(Small(0)).ok());
  ASSERT_TRUE(loop_held.WaitForNotificationWithTimeout(kWait));
  constexpr size_t kFrameBytes = 32 * 1024;
  constexpr int kFrames = 64;  // 2 MiB
  std::string frames;
  for (int i = 0; i < kFrames; ++i) AppendFrame(Large(i, kFrameBytes), &frames);
  size_t written = 0;
  while (written < frames.size()) {
    const ssize_t n = ::send(a.far->fd(), frames.data() + written, frames.size() - written,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  const size_t frame_size = frames.size() / kFrames;
  const int whole = static_cast<int>(written / frame_size);
  if (written < size_t{1} << 20) {
    GTEST_SKIP() << "the socket took only " << written << " bytes; the test needs 1 MiB waiting";
  }
  ASSERT_TRUE(b.far->Send(Small(1)).ok());
  let_go.Notify();
  ASSERT_TRUE(WaitFor([&] { return a_frames_before_b.load() >= 0; }, kWait));
  // 256 KiB is 8 of A's frames; 16 allows one more turn. Without the cap: all of them.
  EXPECT_LE(a_frames_before_b.load(), 16)
      << "B's frame waited for " << a_frames_before_b.load() << " of A's " << whole
      << " frames of 32 KiB";
  // And none of A's is lost by taking turns.
  if (written < frames.size()) {
    ASSERT_TRUE(a.far->SendFrames(frames.substr(written)).ok());
  }
  EXPECT_TRUE(WaitFor([&] { return a_frames.load() == kFrames; }, kWait)) << a_frames.load();
}

// A TLS write that must first read (here: the server end's first write needs the
// peer's ClientHello, which a peer that stopped does not send) waits for the next read
// event. It does not arm EPOLLOUT, which a writable socket reports at once, again and
// again: the loop would spin. Once the peer speaks, the frame goes out.
TEST_F(ConnectionLoopTest, ATlsWriteThatMustFirstReadDoesNotSpinTheLoop) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tls-", ::getpid());
  auto ca = CertificateAuthority::LoadOrCreate(dir);
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto files = (*ca)->IssueFiles(dir, "worker");
  ASSERT_TRUE(files.ok()) << files.status();
  auto server = TransportSecurity::Load(*files);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = TransportSecurity::Load(TlsFiles{(*ca)->cert_path(), "", ""});
  ASSERT_TRUE(client.ok()) << client.status();
  int port = 0;
  absl::StatusOr<int> listener = ListenTcp("127.0.0.1", &port);
  ASSERT_TRUE(listener.ok()) << listener.status();
  absl::Cleanup close_listener = [&] { ::close(*listener); };
  // The peer connects and says nothing (a stopped worker).
  absl::StatusOr<int> peer_fd =
      ConnectTcp(absl::StrCat("127.0.0.1:", port), absl::Now() + kWait);
  ASSERT_TRUE(peer_fd.ok()) << peer_fd.status();
  const int accepted = ::accept4(*listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(accepted, 0);
  auto end = (*server)->ServerEnd(accepted, "the silent TLS peer");
  ASSERT_TRUE(end.ok()) << end.status();
  FramedSocket near(*std::move(end));
  ConnectionLoop loop;
  std::atomic<int> closed{0};
  ASSERT_TRUE(loop.Watch(&near, "the silent TLS peer", [](std::string_view) {},
                         [&](const absl::Status&) { ++closed; })
                  .ok());
  const uint64_t before = loop.wakeups();
  ASSERT_TRUE(near.Send(Small(7)).ok());  // SSL_write: the handshake wants to read
  // Half a second of a peer that does not speak: a spinning loop wakes up tens of
  // thousands of times (even with a tenth of a core), a waiting one about never.
  absl::SleepFor(absl::Milliseconds(500));
  const uint64_t woke = loop.wakeups() - before;
  EXPECT_LT(woke, 100u) << "the loop woke " << woke << " times in 0.5 s with nothing to do";
  EXPECT_GT(near.unsent(), 0u);
  // The peer speaks TLS: the handshake completes on the loop's read events, and the
  // frame waiting for it goes out.
  auto client_end = (*client)->ClientEnd(*peer_fd, "the loop's end", absl::Now() + kWait);
  ASSERT_TRUE(client_end.ok()) << client_end.status();
  FramedSocket far(*std::move(client_end));
  proto::TaskFrame f;
  ASSERT_TRUE(far.Read(&f).ok());
  EXPECT_EQ(f.cancel().seq(), 7u);
  EXPECT_EQ(closed.load(), 0);
}

// A loop that fails (epoll_wait errs) tells every connection's close path, and takes
// no new ones: nothing waits for frames that will never be read.
TEST_F(ConnectionLoopTest, AFailedLoopClosesEveryConnection) {
  std::vector<Pair> pairs;
  pairs.reserve(4);
  ConnectionLoop loop;
  absl::Mutex mu;
  std::vector<std::string> closes;
  for (int i = 0; i < 3; ++i) {
    pairs.push_back(MakePair());
    ASSERT_TRUE(loop.Watch(pairs.back().near.get(), "the test peer", [](std::string_view) {},
                           [&](const absl::Status& why) {
                             absl::MutexLock l(&mu);
                             closes.push_back(std::string(why.message()));
                           })
                    .ok());
  }
  loop.FailForTest();
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock l(&mu);
    return closes.size() == 3;
  }, kWait));
  {
    absl::MutexLock l(&mu);
    for (const auto& c : closes) EXPECT_TRUE(absl::StrContains(c, "connection loop failed")) << c;
  }
  EXPECT_EQ(loop.watched(), 0u);
  pairs.push_back(MakePair());
  absl::Status s = loop.Watch(pairs.back().near.get(), "the test peer", [](std::string_view) {}, [](const absl::Status&) {});
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "connection loop failed")) << s;
}

// Shutdown in two phases: the owner shuts its sockets, then Stop ends the loop; a peer
// that reads nothing, with megabytes waiting for it, holds up neither.
TEST_F(ConnectionLoopTest, StopReturnsWhileAPeerDoesNotRead) {
  Pair a = MakePair();
  auto loop = std::make_unique<ConnectionLoop>();
  std::atomic<int> closed{0};
  ASSERT_TRUE(loop->Watch(a.near.get(), "the test peer", [](std::string_view) {},
                          [&](const absl::Status&) { ++closed; })
                  .ok());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(a.near->Send(Large(i, 1 << 20)).ok());
  EXPECT_GT(a.near->unsent(), 0u);
  a.near->Shutdown();
  EXPECT_TRUE(WaitFor([&] { return closed.load() == 1; }, kWait));
  loop->Stop();
  loop.reset();
}

}  // namespace
}  // namespace drover::internal
