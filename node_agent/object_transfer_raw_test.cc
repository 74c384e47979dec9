#include "node_agent/object_transfer_raw.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/tls.h"
#include "common/tls_ca.h"
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

// A member of a TLS cluster (a CA made for the test), or plain text.
std::shared_ptr<const TransportSecurity> Transport(bool tls) {
  if (!tls) return TransportSecurity::Plaintext();
  static std::shared_ptr<const TransportSecurity> member = [] {
    const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ca");
    auto ca = CertificateAuthority::LoadOrCreate(dir);
    EXPECT_TRUE(ca.ok()) << ca.status();
    auto files = (*ca)->IssueFiles(dir, "node");
    EXPECT_TRUE(files.ok()) << files.status();
    auto t = TransportSecurity::Load(*files);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }();
  return member;
}

// Every data-path test runs over plain TCP and over TLS.
class RawPathTest : public ::testing::TestWithParam<bool> {
 protected:
  const TransportSecurity& security() { return *Transport(GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(PlainAndTls, RawPathTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Tls" : "Plain"; });

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

TEST_P(RawPathTest, BytesGoFromHolderToPullerWithTheToken) {
  const std::vector<uint8_t> data = Pattern((40 << 20) + 123);  // several 16 MiB sends
  Holder h;
  ASSERT_GE(h.listener, 0);
  ScopedFd listener(h.listener);
  absl::Status served;
  int64_t sent = 0;
  h.thread = std::thread([&] {
    auto conn = AcceptRawReader(listener.get(), h.token, security(), absl::Seconds(10), kNever,
                                "obj");
    served = conn.status();
    if (!conn.ok()) return;
    served = SendRaw(**conn, data.data(), static_cast<int64_t>(data.size()), kStall, kNever,
                     "obj", &sent);
  });
  std::vector<uint8_t> got(data.size());
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, security(), got.data(),
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

TEST_P(RawPathTest, AConnectionWithTheWrongTokenIsRefused) {
  Holder h;
  ScopedFd listener(h.listener);
  absl::Status served;
  h.thread = std::thread([&] {
    served = AcceptRawReader(listener.get(), h.token, security(), absl::Seconds(10), kNever,
                             "obj-x")
                 .status();
  });
  std::string wrong = h.token;
  wrong[5] ^= 1;
  uint8_t buf[16];
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, wrong, security(), buf, sizeof(buf),
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

TEST_P(RawPathTest, AHolderGivesUpWithoutAConnectionOrWhenCancelled) {
  Holder h;
  ScopedFd listener(h.listener);
  auto conn = AcceptRawReader(listener.get(), h.token, security(), absl::Milliseconds(250),
                              kNever, "obj-y");
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kDeadlineExceeded) << conn.status();
  EXPECT_TRUE(absl::StrContains(conn.status().message(), "no raw connection")) << conn.status();

  conn = AcceptRawReader(listener.get(), h.token, security(), absl::Seconds(10),
                         [] { return true; }, "obj-y");
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kCancelled) << conn.status();
}

TEST_P(RawPathTest, APullerGivesUpWhenNothingComes) {
  Holder h;
  ScopedFd listener(h.listener);
  // The holder takes the connection and the token but sends nothing.
  absl::Notification puller_done;
  h.thread = std::thread([&] {
    auto conn = AcceptRawReader(listener.get(), h.token, security(), absl::Seconds(10), kNever,
                                "obj-z");
    EXPECT_TRUE(conn.ok()) << conn.status();
    puller_done.WaitForNotification();
  });
  uint8_t buf[16];
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, security(), buf, sizeof(buf),
                              absl::Now() + absl::Seconds(30), absl::Seconds(5),
                              absl::Milliseconds(300), stop, &received, &connected);
  puller_done.Notify();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no data")) << s;
  EXPECT_TRUE(connected);
}

TEST_P(RawPathTest, APullerStopsOnShutdown) {
  Holder h;  // listening: the kernel completes the connection without an accept
  ScopedFd listener(h.listener);
  uint8_t buf[16];
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{true};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, security(), buf, sizeof(buf),
                              absl::Now() + absl::Seconds(30), absl::Seconds(5), kStall, stop,
                              &received, &connected);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shutting down")) << s;
  EXPECT_EQ(received, 0);
}

// A TLS puller refuses a plain-text holder, and a TLS holder a plain-text puller,
// before any token or byte goes.
TEST(ObjectTransferRawTest, TlsAndPlainTextEndsDoNotConnect) {
  for (bool holder_tls : {true, false}) {
    Holder h;
    ScopedFd listener(h.listener);
    absl::Status served;
    h.thread = std::thread([&] {
      served = AcceptRawReader(listener.get(), h.token, *Transport(holder_tls),
                               absl::Seconds(10), kNever, "obj-t")
                   .status();
    });
    uint8_t buf[16];
    int64_t received = 0;
    bool connected = false;
    std::atomic<bool> stop{false};
    // (A plain token can look like the start of a long TLS record to the holder, which
    // then waits for the rest: the puller's stall bound ends that.)
    absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, *Transport(!holder_tls), buf,
                                sizeof(buf), absl::Now() + absl::Seconds(30), absl::Seconds(5),
                                absl::Milliseconds(500), stop, &received, &connected);
    h.thread.join();
    EXPECT_FALSE(s.ok()) << "holder tls " << holder_tls;
    EXPECT_FALSE(served.ok()) << "holder tls " << holder_tls;
    EXPECT_EQ(received, 0);
  }
}

// A plain-text puller reaching a holder that answers the token with something other
// than the acknowledgement (a TLS holder's 7-byte alert, as CI once saw) takes none of
// it for the object's bytes and says what is wrong.
TEST(ObjectTransferRawTest, BytesBeforeTheAcknowledgementAreNeverTakenForTheObject) {
  Holder h;
  ScopedFd listener(h.listener);
  h.thread = std::thread([&] {
    ScopedFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    std::string token(kRawTokenBytes, '\0');
    size_t have = 0;
    while (have < token.size()) {
      const ssize_t k = ::read(conn.get(), &token[have], token.size() - have);
      if (k <= 0) return;
      have += static_cast<size_t>(k);
    }
    const char alert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50};
    (void)!::write(conn.get(), alert, sizeof(alert));
    (void)!::write(conn.get(), "0123456789abcdefghij", 20);  // then the "object"
  });
  uint8_t buf[16];
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", h.port, h.token, *Transport(false), buf, sizeof(buf),
                              absl::Now() + absl::Seconds(30), absl::Seconds(5), kStall, stop,
                              &received, &connected);
  h.thread.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "same TLS setting")) << s;
  EXPECT_EQ(received, 0);
}

}  // namespace
}  // namespace drover
