// FrameServer over real sockets: a server thread runs Poll; clients are blocking
// FramedSockets or raw sockets in the test's thread.
#include "common/frame_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

using google::protobuf::StringValue;

StringValue Msg(std::string s) {
  StringValue m;
  m.set_value(std::move(s));
  return m;
}

// Echoes each frame; "flood N" answers with N frames of 64 KiB instead.
class EchoHandler : public FrameServer::Handler {
 public:
  FrameServer* server = nullptr;

  void OnFrame(const std::shared_ptr<FrameConn>& c, std::string_view payload) override {
    StringValue m;
    if (!m.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      c->MarkClosed();
      return;
    }
    {
      absl::MutexLock l(&mu);
      frames.push_back(m.value().size() > 64 ? absl::StrCat("<", m.value().size(), " bytes>") : m.value());
    }
    if (m.value().rfind("flood ", 0) == 0) {
      const int n = std::atoi(m.value().c_str() + 6);
      for (int i = 0; i < n; ++i) c->Queue(Msg(std::string(64 << 10, static_cast<char>('a' + i % 26))));
      server->Flush(*c);
      return;
    }
    server->Send(c, m);
  }
  void OnClosed(const std::shared_ptr<FrameConn>& c, std::string_view why) override {
    absl::MutexLock l(&mu);
    closed.emplace_back(why);
  }

  // Waits until `pred` holds (under mu) or 30 s pass.
  template <typename P>
  bool WaitFor(P pred) {
    absl::MutexLock l(&mu);
    return mu.AwaitWithTimeout(absl::Condition(&pred), absl::Seconds(30));
  }

  absl::Mutex mu;
  std::vector<std::string> frames ABSL_GUARDED_BY(mu);
  std::vector<std::string> closed ABSL_GUARDED_BY(mu);
};

class FrameServerTest : public ::testing::Test {
 protected:
  void Start(FrameServer::Options options = {}) {
    handler_.server = nullptr;
    server_ = std::make_unique<FrameServer>(&handler_, options);
    handler_.server = server_.get();
    ASSERT_TRUE(server_->Init().ok());
    // Under /tmp: Bazel's TEST_TMPDIR is longer than a Unix socket path may be.
    path_ = absl::StrCat("/tmp/frame-server-test-", ::getpid(), ".sock");
    absl::Status listening = server_->ListenUnix(path_);
    ASSERT_TRUE(listening.ok()) << listening;
    absl::StatusOr<int> port = server_->ListenTcp("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    thread_ = std::thread([this] {
      while (!server_->woken()) {
        if (server_->Poll(-1) < 0) return;
      }
    });
  }
  void TearDown() override {
    if (thread_.joinable()) {
      server_->Wake();
      thread_.join();
    }
  }

  std::unique_ptr<FramedSocket> Connect() {
    absl::StatusOr<std::unique_ptr<FramedSocket>> s = FramedSocket::ConnectUnix(path_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  int ConnectRaw() {
    absl::StatusOr<std::unique_ptr<FramedSocket>> s = FramedSocket::ConnectUnix(path_);
    if (!s.ok()) {
      ADD_FAILURE() << s.status();
      return -1;
    }
    return ::dup((*s)->fd());
  }
  static std::string Echo(FramedSocket& s, const std::string& text) {
    EXPECT_TRUE(s.Send(Msg(text)).ok());
    StringValue back;
    absl::Status st = s.Read(&back);
    EXPECT_TRUE(st.ok()) << st;
    return back.value();
  }

  EchoHandler handler_;
  std::unique_ptr<FrameServer> server_;
  std::string path_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(FrameServerTest, EchoesFramesOverUnixAndTcp) {
  Start();
  std::unique_ptr<FramedSocket> a = Connect();
  EXPECT_EQ(Echo(*a, "hello"), "hello");
  EXPECT_EQ(Echo(*a, ""), "");
  absl::StatusOr<std::unique_ptr<FramedSocket>> t =
      FramedSocket::ConnectTcp(absl::StrCat("127.0.0.1:", port_), *TransportSecurity::Plaintext());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Echo(**t, "over tcp"), "over tcp");
}

TEST_F(FrameServerTest, AFrameArrivingByteByByteIsHandledOnceWhole) {
  Start();
  const int fd = ConnectRaw();
  std::string bytes;
  AppendFrame(Msg("split into single bytes"), &bytes);
  AppendFrame(Msg("second"), &bytes);
  for (char ch : bytes) {
    ASSERT_EQ(::write(fd, &ch, 1), 1);
    // Give the server a chance to see each byte alone (no sleep needed for correctness).
    std::this_thread::yield();
  }
  ASSERT_TRUE(handler_.WaitFor([&]() ABSL_SHARED_LOCKS_REQUIRED(handler_.mu) {
    return handler_.frames.size() == 2;
  }));
  {
    absl::MutexLock l(&handler_.mu);
    EXPECT_EQ(handler_.frames[0], "split into single bytes");
    EXPECT_EQ(handler_.frames[1], "second");
  }
  FramedSocket s(fd);
  StringValue back;
  ASSERT_TRUE(s.Read(&back).ok());
  EXPECT_EQ(back.value(), "split into single bytes");
}

TEST_F(FrameServerTest, LargeFramesTravelWholeBothWays) {
  Start();
  std::unique_ptr<FramedSocket> a = Connect();
  std::string big(24 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  // Sent from another thread: the echo fills the socket's buffers before the send ends.
  std::thread sender([&] { EXPECT_TRUE(a->Send(Msg(big)).ok()); });
  StringValue back;
  ASSERT_TRUE(a->Read(&back).ok());
  sender.join();
  EXPECT_TRUE(back.value() == big);
}

TEST_F(FrameServerTest, APeerThatClosesIsToldToTheHandlerAndOthersGoOn) {
  Start();
  std::unique_ptr<FramedSocket> a = Connect();
  std::unique_ptr<FramedSocket> b = Connect();
  EXPECT_EQ(Echo(*a, "a"), "a");
  a.reset();
  ASSERT_TRUE(handler_.WaitFor([&]() ABSL_SHARED_LOCKS_REQUIRED(handler_.mu) {
    return handler_.closed.size() == 1;
  }));
  {
    absl::MutexLock l(&handler_.mu);
    EXPECT_NE(handler_.closed[0].find("closed"), std::string::npos) << handler_.closed[0];
  }
  EXPECT_EQ(Echo(*b, "b still served"), "b still served");
}

TEST_F(FrameServerTest, AnOversizeFrameLengthClosesThatConnectionOnly) {
  Start();
  const int fd = ConnectRaw();
  std::unique_ptr<FramedSocket> b = Connect();
  const char header[4] = {'\xff', '\xff', '\xff', '\x7f'};  // ~2 GiB, over kMaxFrameBytes
  ASSERT_EQ(::write(fd, header, 4), 4);
  char c;
  EXPECT_EQ(::read(fd, &c, 1), 0);  // the server closed it
  ::close(fd);
  {
    ASSERT_TRUE(handler_.WaitFor([&]() ABSL_SHARED_LOCKS_REQUIRED(handler_.mu) {
      return handler_.closed.size() == 1;
    }));
    absl::MutexLock l(&handler_.mu);
    EXPECT_NE(handler_.closed[0].find("larger than the limit"), std::string::npos)
        << handler_.closed[0];
    EXPECT_TRUE(handler_.frames.empty());
  }
  EXPECT_EQ(Echo(*b, "still here"), "still here");
}

TEST_F(FrameServerTest, APeerThatDoesNotReadHoldsNoOneElseUp) {
  Start();
  std::unique_ptr<FramedSocket> slow = Connect();
  std::unique_ptr<FramedSocket> b = Connect();
  // 32 MiB of replies: far more than the socket buffers take.
  ASSERT_TRUE(slow->Send(Msg("flood 512")).ok());
  ASSERT_TRUE(handler_.WaitFor([&]() ABSL_SHARED_LOCKS_REQUIRED(handler_.mu) {
    return handler_.frames.size() == 1;
  }));
  EXPECT_EQ(Echo(*b, "served meanwhile"), "served meanwhile");
  // Then the slow peer reads everything, in order: the rest was written as the socket
  // became writable.
  for (int i = 0; i < 512; ++i) {
    StringValue m;
    ASSERT_TRUE(slow->Read(&m).ok()) << i;
    ASSERT_EQ(m.value().size(), 64u << 10);
    ASSERT_EQ(m.value()[0], static_cast<char>('a' + i % 26)) << i;
  }
  EXPECT_EQ(Echo(*slow, "after"), "after");
}

TEST_F(FrameServerTest, APeerOverTheQueueLimitIsClosed) {
  FrameServer::Options o;
  o.max_queued_bytes = 4 << 20;
  Start(o);
  std::unique_ptr<FramedSocket> slow = Connect();
  ASSERT_TRUE(slow->Send(Msg("flood 512")).ok());
  ASSERT_TRUE(handler_.WaitFor([&]() ABSL_SHARED_LOCKS_REQUIRED(handler_.mu) {
    return handler_.closed.size() == 1;
  }));
  absl::MutexLock l(&handler_.mu);
  EXPECT_NE(handler_.closed[0].find("does not read"), std::string::npos) << handler_.closed[0];
}

TEST_F(FrameServerTest, AFrameThatTheHandlerRefusesClosesTheConnection) {
  Start();
  const int fd = ConnectRaw();
  std::string bytes;
  const std::string junk = "\xff\xff\xff";  // not a StringValue
  const uint32_t n = junk.size();
  bytes.append(reinterpret_cast<const char*>(&n), 4);
  bytes += junk;
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  char c;
  EXPECT_EQ(::read(fd, &c, 1), 0);
  ::close(fd);
  ASSERT_TRUE(handler_.WaitFor([&]() ABSL_SHARED_LOCKS_REQUIRED(handler_.mu) {
    return handler_.closed.size() == 1;
  }));
}

TEST(FrameServerAdoptTest, AdoptedSocketsAndWatchedFdsAreServedByPoll) {
  EchoHandler handler;
  FrameServer server(&handler, {});
  handler.server = &server;
  ASSERT_TRUE(server.Init().ok());
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_TRUE(server.Adopt(std::make_unique<SocketStream>(sv[0])).ok());
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  int ready = 0;
  ASSERT_TRUE(server.WatchFd(pipe_fds[0], [&] {
                      char ch;
                      (void)!::read(pipe_fds[0], &ch, 1);
                      ++ready;
                    }).ok());
  FramedSocket peer(sv[1]);
  ASSERT_TRUE(peer.Send(Msg("adopted")).ok());
  ASSERT_EQ(::write(pipe_fds[1], "x", 1), 1);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto echoed = [&] {
    absl::MutexLock l(&handler.mu);
    return handler.frames.size() == 1;
  };
  while ((ready == 0 || !echoed()) && absl::Now() < deadline) server.Poll(100);
  EXPECT_EQ(ready, 1);
  StringValue back;
  ASSERT_TRUE(peer.Read(&back).ok());  // the echo was written when the frame came
  EXPECT_EQ(back.value(), "adopted");
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(FrameServerWakeTest, WakeFromAnotherThreadEndsAPoll) {
  EchoHandler handler;
  FrameServer server(&handler, {});
  ASSERT_TRUE(server.Init().ok());
  std::thread waker([&] { server.Wake(); });
  while (!server.woken()) ASSERT_GE(server.Poll(-1), 0);
  waker.join();
}

}  // namespace
}  // namespace drover
