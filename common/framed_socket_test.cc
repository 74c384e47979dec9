#include "common/framed_socket.h"

#include <sys/socket.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace drover {
namespace {

std::string Frame(const std::string& payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + payload;
}

void Feed(FrameReader* r, const std::string& bytes) {
  std::memcpy(r->WritePtr(bytes.size()), bytes.data(), bytes.size());
  r->Commit(bytes.size());
}

TEST(FrameReaderTest, SplitsAStreamArrivingInPiecesIntoFrames) {
  const std::string stream = Frame("first") + Frame("") + Frame(std::string(100000, 'x'));
  for (size_t step : {1, 3, 4096, 200000}) {
    FrameReader r;
    std::vector<std::string> got;
    for (size_t pos = 0; pos < stream.size(); pos += step) {
      Feed(&r, stream.substr(pos, step));
      std::string_view payload;
      while (true) {
        absl::StatusOr<bool> next = r.Next(&payload);
        ASSERT_TRUE(next.ok()) << next.status();
        if (!*next) break;
        got.emplace_back(payload);
      }
    }
    ASSERT_EQ(got.size(), 3u) << step;
    EXPECT_EQ(got[0], "first");
    EXPECT_EQ(got[1], "");
    EXPECT_EQ(got[2], std::string(100000, 'x'));
    EXPECT_EQ(r.buffered(), 0u);
  }
}

TEST(FrameReaderTest, OversizeLengthIsDataLoss) {
  FrameReader r;
  Feed(&r, std::string("\xff\xff\xff\xff", 4));
  std::string_view payload;
  absl::StatusOr<bool> next = r.Next(&payload);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss);
}

// Found by //fuzz:task_frames: Next made room for a whole frame as soon as it saw its
// header, so 4 bytes claiming 64 MiB (the limit) allocated and zeroed 64 MiB for a
// connection that had not said hello yet.
TEST(FrameReaderTest, AHeaderAloneDoesNotReserveTheFramesClaimedSize) {
  FrameReader r;
  const uint32_t len = kMaxFrameBytes;
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  Feed(&r, header);
  std::string_view payload;
  absl::StatusOr<bool> next = r.Next(&payload);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(*next);
  EXPECT_LE(r.reserved(), size_t{128} << 10);
}

// Event-loop mode: bytes for a peer that does not read (an actor stuck in a call) are
// capped; past the cap the send and the connection fail RESOURCE_EXHAUSTED naming the
// peer, and the buffer is let go.
TEST(FramedSocketTest, EventLoopModeCapsTheBytesBufferedForAPeerThatDoesNotRead) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  FramedSocket near(fds[0]);
  FramedSocket far(fds[1]);  // never reads
  ASSERT_TRUE(near.UseEventLoop([](bool) {}, "actor a1", 1 << 20).ok());
  const std::string frame = Frame(std::string(64 << 10, 'x'));
  absl::Status s;
  for (int i = 0; i < 64 && s.ok(); ++i) s = near.SendFrames(frame);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("actor a1"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("unsent"), std::string_view::npos) << s;
  EXPECT_EQ(near.unsent(), 0u);
  EXPECT_EQ(near.SendFrames(frame).code(), absl::StatusCode::kResourceExhausted);
  // The loop's read sees the connection end, with that reason.
  bool wants_write = false;
  absl::Status read = near.ReadReady([](std::string_view) {}, &wants_write);
  EXPECT_EQ(read.code(), absl::StatusCode::kResourceExhausted) << read;
}

}  // namespace
}  // namespace drover
