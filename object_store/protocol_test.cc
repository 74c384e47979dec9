#include "object_store/protocol.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {
namespace {

class SocketPair {
 public:
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0); }
  ~SocketPair() {
    CloseA();
    CloseB();
  }
  int a() const { return fds_[0]; }
  int b() const { return fds_[1]; }
  void CloseA() {
    if (fds_[0] >= 0) close(fds_[0]);
    fds_[0] = -1;
  }
  void CloseB() {
    if (fds_[1] >= 0) close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

proto::StoreRequest MakeCreate(uint64_t rid, const std::string& id, uint64_t size) {
  proto::StoreRequest req;
  req.set_request_id(rid);
  req.mutable_create()->set_id(id);
  req.mutable_create()->set_data_size(size);
  req.mutable_create()->set_metadata("meta");
  return req;
}

std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

TEST(ProtocolTest, RoundTripBlocking) {
  SocketPair sp;
  std::string scratch;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(WriteFrame(sp.a(), MakeCreate(i + 1, "obj" + std::to_string(i), 1024 * i),
                           &scratch)
                    .ok());
  }
  for (int i = 0; i < 3; ++i) {
    proto::StoreRequest got;
    ASSERT_TRUE(ReadFrame(sp.b(), &got, &scratch).ok());
    EXPECT_EQ(got.request_id(), i + 1);
    EXPECT_EQ(got.create().id(), "obj" + std::to_string(i));
    EXPECT_EQ(got.create().data_size(), 1024u * i);
  }
}

TEST(ProtocolTest, EmptyMessageIsAFrameOfLengthZero) {
  SocketPair sp;
  std::string scratch;
  proto::StatsRequest empty;
  ASSERT_TRUE(WriteFrame(sp.a(), empty, &scratch).ok());
  EXPECT_EQ(scratch, Le32(0));
  proto::StatsRequest got;
  EXPECT_TRUE(ReadFrame(sp.b(), &got, &scratch).ok());
}

TEST(ProtocolTest, LargeFrameAcrossPartialWritesAndReads) {
  SocketPair sp;
  proto::StoreRequest req = MakeCreate(7, "big", 1);
  req.mutable_create()->set_metadata(std::string(3 << 20, 'x'));  // > socket buffer
  std::thread writer([&] {
    std::string scratch;
    EXPECT_TRUE(WriteFrame(sp.a(), req, &scratch).ok());
  });
  proto::StoreRequest got;
  std::string scratch;
  ASSERT_TRUE(ReadFrame(sp.b(), &got, &scratch).ok());
  writer.join();
  EXPECT_EQ(got.create().metadata().size(), 3u << 20);
}

TEST(ProtocolTest, TruncatedFrameIsUnavailable) {
  SocketPair sp;
  std::string frame;
  ASSERT_TRUE(AppendFrame(MakeCreate(1, "x", 10), &frame).ok());
  ASSERT_TRUE(WriteAll(sp.a(), frame.substr(0, frame.size() - 3)).ok());
  sp.CloseA();
  proto::StoreRequest got;
  std::string scratch;
  absl::Status s = ReadFrame(sp.b(), &got, &scratch);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("middle of a frame"), std::string::npos) << s;
}

TEST(ProtocolTest, TruncatedHeaderIsUnavailable) {
  SocketPair sp;
  ASSERT_TRUE(WriteAll(sp.a(), std::string("\x05\x00", 2)).ok());
  sp.CloseA();
  proto::StoreRequest got;
  std::string scratch;
  EXPECT_EQ(ReadFrame(sp.b(), &got, &scratch).code(), absl::StatusCode::kUnavailable);
}

TEST(ProtocolTest, OversizeLengthIsRejectedWithoutAllocating) {
  SocketPair sp;
  ASSERT_TRUE(WriteAll(sp.a(), Le32(0xFFFFFFFFu)).ok());
  proto::StoreRequest got;
  std::string scratch;
  absl::Status s = ReadFrame(sp.b(), &got, &scratch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_LT(scratch.capacity(), 1u << 20);

  FrameDecoder dec;
  dec.Append(Le32(kMaxFrameSize + 1).data(), 4);
  absl::string_view body;
  EXPECT_EQ(dec.Next(&body).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTest, GarbageBytesGiveACleanError) {
  SocketPair sp;
  std::string garbage = Le32(6) + std::string("\xff\xff\xff\xff\xff\xff", 6);
  ASSERT_TRUE(WriteAll(sp.a(), garbage).ok());
  proto::StoreRequest got;
  std::string scratch;
  absl::Status s = ReadFrame(sp.b(), &got, &scratch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(ProtocolTest, DecoderHandlesByteAtATimeAndManyFramesPerChunk) {
  std::string stream;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(AppendFrame(MakeCreate(i, "id", i), &stream).ok());
  // One byte at a time.
  FrameDecoder dec;
  int frames = 0;
  for (char c : stream) {
    dec.Append(&c, 1);
    absl::string_view body;
    while (true) {
      absl::StatusOr<bool> got = dec.Next(&body);
      ASSERT_TRUE(got.ok());
      if (!*got) break;
      proto::StoreRequest req;
      ASSERT_TRUE(req.ParseFromArray(body.data(), body.size()));
      EXPECT_EQ(req.request_id(), static_cast<uint64_t>(frames));
      ++frames;
    }
  }
  EXPECT_EQ(frames, 5);
  EXPECT_EQ(dec.buffered(), 0u);
  // All at once via PrepareWrite/Commit.
  FrameDecoder dec2;
  memcpy(dec2.PrepareWrite(stream.size()), stream.data(), stream.size());
  dec2.Commit(stream.size());
  frames = 0;
  absl::string_view body;
  while (*dec2.Next(&body)) ++frames;
  EXPECT_EQ(frames, 5);
}

TEST(ProtocolTest, SendFdPassesADescriptorAndPayload) {
  SocketPair sp;
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  proto::StoreHello hello;
  hello.set_arena_capacity(12345);
  hello.set_client_id(9);
  std::string frame;
  ASSERT_TRUE(AppendFrame(hello, &frame).ok());
  ASSERT_TRUE(SendFd(sp.a(), pipefd[1], frame).ok());
  proto::StoreHello got;
  absl::StatusOr<int> fd = RecvFrameWithFd(sp.b(), &got);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(got.arena_capacity(), 12345u);
  EXPECT_EQ(got.client_id(), 9u);
  EXPECT_TRUE(fcntl(*fd, F_GETFD) & FD_CLOEXEC);
  // The received descriptor is the pipe's write end.
  ASSERT_EQ(write(*fd, "z", 1), 1);
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  EXPECT_EQ(c, 'z');
  close(*fd);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST(ProtocolTest, RecvFdWithoutDescriptorIsAnError) {
  SocketPair sp;
  ASSERT_TRUE(WriteAll(sp.a(), std::string("abcd")).ok());
  char buf[4];
  absl::StatusOr<int> fd = RecvFd(sp.b(), buf, 4);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTest, RecvFdOnClosedSocketIsUnavailable) {
  SocketPair sp;
  sp.CloseA();
  char buf[4];
  EXPECT_EQ(RecvFd(sp.b(), buf, 4).status().code(), absl::StatusCode::kUnavailable);
}

TEST(ProtocolTest, WriteToClosedPeerIsUnavailableNotSigpipe) {
  SocketPair sp;
  sp.CloseB();
  std::string scratch;
  EXPECT_EQ(WriteFrame(sp.a(), MakeCreate(1, "x", 1), &scratch).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace drover::object_store
