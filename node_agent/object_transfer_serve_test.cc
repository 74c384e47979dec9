#include "node_agent/object_transfer_serve.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "node_agent/object_transfer_codec.h"
#include "node_agent/object_transfer_raw.h"
#include "node_agent/testing/fake_local_objects.h"

namespace drover {
namespace {

constexpr int64_t kMiB = 1 << 20;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + (i >> 16));
  return s;
}

// What a reader received: the chunks, decoded.
struct Received {
  std::vector<int64_t> offsets;
  std::vector<std::string> metadata;
  std::string data;
  int64_t total_size = -1;
};

class ObjectServerTest : public ::testing::Test {
 protected:
  ObjectServerTest() {
    options_.chunk_bytes = 4 * kMiB;
    options_.raw_connect_timeout = absl::Seconds(10);
  }

  // A writer that decodes each chunk into `*out` (and fails from chunk `fail_at` on).
  ObjectServer::WriteChunk Reader(Received* out, int fail_at = -1) {
    return [out, fail_at, n = 0](grpc::ByteBuffer* message, bool) mutable {
      if (n++ == fail_at) return false;
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(message->Dump(&slices).ok());
      ChunkView chunk;
      EXPECT_TRUE(ParseChunk(&slices, &chunk));
      std::string data(chunk.data_size, '\0');
      EXPECT_TRUE(chunk.data.Take(reinterpret_cast<uint8_t*>(data.data()), data.size()));
      out->offsets.push_back(chunk.offset);
      out->metadata.push_back(chunk.metadata);
      out->data += data;
      out->total_size = chunk.total_size;
      return true;
    };
  }

  static proto::ReadObjectRequest Request(const std::string& id, int64_t offset = 0,
                                          const std::string& raw_ip = "") {
    proto::ReadObjectRequest req;
    req.set_object_id(id);
    req.set_offset(offset);
    req.set_raw_tcp_ip(raw_ip);
    return req;
  }

  ObjectTransferOptions options_;
  testing::FakeLocalObjects local_;
  NodeIdentity node_;
};

TEST_F(ObjectServerTest, StreamsChunksWithTheMetadataFirstAndReleasesThePin) {
  const std::string data = Pattern(10 * kMiB + 5);
  ASSERT_TRUE(local_.Put("obj", data, "hdr").ok());
  ObjectServer server(options_, &local_, &node_);
  Received got;
  ASSERT_TRUE(server.ServeRead(Request("obj"), Reader(&got)).ok());
  EXPECT_EQ(got.offsets, (std::vector<int64_t>{0, 4 * kMiB, 8 * kMiB}));
  EXPECT_EQ(got.metadata, (std::vector<std::string>{"hdr", "", ""}));
  EXPECT_EQ(got.total_size, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(got.data == data);
  EXPECT_EQ(local_.Pins("obj"), 0);  // every slice handed to the writer is gone
  const ObjectTransferStats s = server.stats();
  EXPECT_EQ(s.reads_started, 1);
  EXPECT_EQ(s.reads_completed, 1);
  EXPECT_EQ(s.bytes_served, static_cast<int64_t>(data.size()));
  EXPECT_EQ(s.raw_reads, 0);
}

TEST_F(ObjectServerTest, ResumesFromAnOffsetAndServesAnEmptyObjectAsOneChunk) {
  const std::string data = Pattern(5 * kMiB);
  ASSERT_TRUE(local_.Put("obj", data).ok());
  ASSERT_TRUE(local_.Put("empty", "", "m").ok());
  ObjectServer server(options_, &local_, &node_);
  Received got;
  ASSERT_TRUE(server.ServeRead(Request("obj", 3 * kMiB), Reader(&got)).ok());
  EXPECT_EQ(got.offsets, (std::vector<int64_t>{3 * kMiB}));
  EXPECT_TRUE(got.data == data.substr(3 * kMiB));
  Received empty;
  ASSERT_TRUE(server.ServeRead(Request("empty"), Reader(&empty)).ok());
  EXPECT_EQ(empty.offsets, (std::vector<int64_t>{0}));
  EXPECT_EQ(empty.metadata, (std::vector<std::string>{"m"}));
  EXPECT_EQ(empty.total_size, 0);
}

TEST_F(ObjectServerTest, BadRequestsAreClearErrorsAndLeaveNoPin) {
  ASSERT_TRUE(local_.Put("obj", Pattern(100)).ok());
  node_.Set("node-7");
  ObjectServer server(options_, &local_, &node_);
  Received got;
  absl::Status s = server.ServeRead(Request("missing"), Reader(&got));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "missing") && absl::StrContains(s.message(), "node-7"))
      << s;
  s = server.ServeRead(Request("obj", 101), Reader(&got));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = server.ServeRead(Request(""), Reader(&got));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(local_.Pins("obj"), 0);
  EXPECT_TRUE(got.offsets.empty());
}

TEST_F(ObjectServerTest, AReaderGoingAwayIsCancelledAndReleasesThePin) {
  ASSERT_TRUE(local_.Put("obj", Pattern(9 * kMiB)).ok());
  ObjectServer server(options_, &local_, &node_);
  Received got;
  absl::Status s = server.ServeRead(Request("obj"), Reader(&got, /*fail_at=*/1));
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(got.offsets.size(), 1u);
  EXPECT_EQ(local_.Pins("obj"), 0);
  EXPECT_EQ(server.stats().reads_completed, 0);
}

TEST_F(ObjectServerTest, OffersRawTcpAndSendsTheBytesToTheTokenHolder) {
  const std::string data = Pattern(20 * kMiB + 3);
  ASSERT_TRUE(local_.Put("obj", data, "hdr").ok());
  ObjectServer server(options_, &local_, &node_);
  // The offer arrives through the writer; the bytes through the raw connection.
  ChunkView offer;
  std::vector<grpc::Slice> offer_slices;
  absl::Notification offered;
  absl::Status served;
  std::thread serving([&] {
    served = server.ServeRead(Request("obj", kMiB, "127.0.0.1"),
                              [&](grpc::ByteBuffer* message, bool write_through) {
                                EXPECT_TRUE(write_through);
                                EXPECT_FALSE(offered.HasBeenNotified());
                                EXPECT_TRUE(message->Dump(&offer_slices).ok());
                                EXPECT_TRUE(ParseChunk(&offer_slices, &offer));
                                offered.Notify();
                                return true;
                              });
  });
  offered.WaitForNotification();
  EXPECT_EQ(offer.offset, kMiB);
  EXPECT_EQ(offer.total_size, static_cast<int64_t>(data.size()));
  EXPECT_EQ(offer.metadata, "hdr");
  EXPECT_EQ(offer.data_size, 0u);
  std::string got(data.size() - kMiB, '\0');
  int64_t received = 0;
  bool connected = false;
  std::atomic<bool> stop{false};
  absl::Status s = ReceiveRaw("127.0.0.1", static_cast<int>(offer.raw_port), offer.raw_token,
                              *TransportSecurity::Plaintext(),
                              reinterpret_cast<uint8_t*>(got.data()),
                              static_cast<int64_t>(got.size()), absl::Now() + absl::Seconds(30),
                              absl::Seconds(5), absl::Seconds(5), stop, &received, &connected);
  serving.join();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(served.ok()) << served;
  EXPECT_TRUE(got == data.substr(kMiB));
  EXPECT_EQ(local_.Pins("obj"), 0);
  const ObjectTransferStats stats = server.stats();
  EXPECT_EQ(stats.raw_reads, 1);
  EXPECT_EQ(stats.reads_completed, 1);
  EXPECT_EQ(stats.bytes_served, static_cast<int64_t>(got.size()));
}

TEST_F(ObjectServerTest, ARawOfferNobodyTakesEndsAndReleasesThePin) {
  ASSERT_TRUE(local_.Put("obj", Pattern(kMiB)).ok());
  options_.raw_connect_timeout = absl::Milliseconds(300);
  ObjectServer server(options_, &local_, &node_);
  absl::Status s = server.ServeRead(Request("obj", 0, "127.0.0.1"),
                                    [](grpc::ByteBuffer*, bool) { return true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(local_.Pins("obj"), 0);

  // Shut down while waiting: cancelled at the next check, long before the timeout.
  options_.raw_connect_timeout = absl::Seconds(60);
  ObjectServer stopping(options_, &local_, &node_);
  const absl::Time start = absl::Now();
  s = stopping.ServeRead(Request("obj", 0, "127.0.0.1"), [&](grpc::ByteBuffer*, bool) {
    stopping.Shutdown();
    return true;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(local_.Pins("obj"), 0);
}

}  // namespace
}  // namespace drover
