#include "node_agent/object_transfer_raw.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

constexpr absl::Duration kStall = absl::Seconds(5);

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  return v;
}

// A holder listening on loopback with a fresh token.
struct Holder {
  Holder() {
    listener = ListenOn("127.0.0.1", &port);
    auto t = NewRawToken();
    EXPECT_TRUE(t.ok());
    token = *t;
  }
  ~Holder() {
    if (thread.joinable()) thread.join();
  }
  int listener = -1;  // owned by the test (a ScopedFd)
  int port = 0;
  std::string token;
  std::thread thread;
};

const std::function<bool()> kNever = [] { return false; };

TEST(ObjectTransferRawTest, NumericHostOfResolvesTheHostPart) {
  EXPECT_EQ(NumericHostOf("127.0.0.1:4000"), "127.0.0.1");
  EXPECT_EQ(NumericHostOf("[::1]:4000"), "::1");
  const std::string local = NumericHostOf("localhost:4000");
  EXPECT_TRUE(local == "127.0.0.1" || local == "::1") << local;
  EXPECT_EQ(NumericHostOf("no-port"), "");
  EXPECT_EQ(NumericHostOf("[::1:4000"), "");
}

TEST(ObjectTransferRawTest, ListensOnlyOnANumericAddressOfThisHost) {
  int port = 0;
  ScopedFd fd(ListenOn("127.0.0.1", &port));
  EXPECT_GE(fd.get(), 0);
  EXPECT_GT(port, 0);
  EXPECT_LT(ListenOn("localhost", &port), 0);  // not numeric
  EXPECT_LT(ListenOn("192.0.2.1", &port), 0);  // TEST-NET-1: not ours
  auto a = NewRawToken();
  auto b = NewRawToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), kRawTokenBytes);
  EXPECT_NE(*a, *b);
}

TEST(ObjectTransferRawTest, BytesGoFromHolderToPullerWithTheToken) {
  const std::vector<uint8_t> data = Pattern((40 << 20) + 123);  // several 16 MiB sends
  Holder h;
  ASSERT_GE(h.listener, 0);
  ScopedFd listener(h.listener);
  absl::Status served;
  int64_t sent = 0;
  h.thread = std::thread([&] {
    absl::StatusOr<int> fd =
        AcceptRawReader(listener.get(), h.token, absl::Seconds(10), kNever, "obj");
    served = fd.status();
    if (!fd.ok()) return;
    ScopedFd conn(*fd);
    served = SendRaw(conn.get(), data.data(), static_cast<int64_t>(data.size()), kStall,
                     kNever, "obj", &sent);
  });
  std::vector<uint8_t> got(data.size());
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, got.data(),
                              static_cast<int64_t>(got.size()), absl::Now() + absl::Seconds(30),
                              absl::Seconds(5), kStall, stop, &received, &connected);
  h.thread.join();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(served.ok()) << served;
  EXPECT_TRUE(connected);
  EXPECT_EQ(received, static_cast<int64_t>(data.size()));
  EXPECT_EQ(sent, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(got == data);
}

TEST(ObjectTransferRawTest, AConnectionWithTheWrongTokenIsRefused) {
  Holder h;
  ScopedFd listener(h.listener);
  absl::Status served;
  h.thread = std::thread([&] {
    served = AcceptRawReader(listener.get(), h.token, absl::Seconds(10), kNever, "obj-x").status();
  });
  std::string wrong = h.token;
  wrong[5] ^= 1;
  uint8_t buf[16];
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, wrong, buf, sizeof(buf),
                              absl::Now() + absl::Seconds(30), absl::Seconds(5), kStall, stop,
                              &received, &connected);
  h.thread.join();
  EXPECT_EQ(served.code(), absl::StatusCode::kPermissionDenied) << served;
  EXPECT_TRUE(absl::StrContains(served.message(), "obj-x")) << served;
  // The puller got through and then saw the holder close.
  EXPECT_TRUE(connected);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(received, 0);
}

TEST(ObjectTransferRawTest, AHolderGivesUpWithoutAConnectionOrWhenCancelled) {
  Holder h;
  ScopedFd listener(h.listener);
  const absl::Time start = absl::Now();
  absl::StatusOr<int> fd =
      AcceptRawReader(listener.get(), h.token, absl::Milliseconds(250), kNever, "obj-y");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kDeadlineExceeded) << fd.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "no raw connection")) << fd.status();

  fd = AcceptRawReader(listener.get(), h.token, absl::Seconds(10), [] { return true; }, "obj-y");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kCancelled) << fd.status();
}

TEST(ObjectTransferRawTest, APullerGivesUpWhenNothingComes) {
  Holder h;
  ScopedFd listener(h.listener);
  // The holder takes the connection and the token but sends nothing.
  absl::Notification puller_done;
  h.thread = std::thread([&] {
    absl::StatusOr<int> fd =
        AcceptRawReader(listener.get(), h.token, absl::Seconds(10), kNever, "obj-z");
    EXPECT_TRUE(fd.ok()) << fd.status();
    ScopedFd conn(fd.ok() ? *fd : -1);
    puller_done.WaitForNotification();
  });
  uint8_t buf[16];
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, buf, sizeof(buf),
                              absl::Now() + absl::Seconds(30), absl::Seconds(5),
                              absl::Milliseconds(300), stop, &received, &connected);
  puller_done.Notify();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no data")) << s;
  EXPECT_TRUE(connected);
}

TEST(ObjectTransferRawTest, APullerStopsOnShutdown) {
  Holder h;  // listening: the kernel completes the connection without an accept
  ScopedFd listener(h.listener);
  uint8_t buf[16];
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{true};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, buf, sizeof(buf),
                              absl::Now() + absl::Seconds(30), absl::Seconds(5), kStall, stop,
                              &received, &connected);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shutting down")) << s;
  EXPECT_EQ(received, 0);
}

}  // namespace
}  // namespace drover
