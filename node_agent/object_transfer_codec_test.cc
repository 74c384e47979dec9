#include "node_agent/object_transfer_codec.h"

#include <string>
#include <vector>

#include "grpcpp/impl/grpc_library.h"
#include "gtest/gtest.h"
#include "proto/node_agent.pb.h"

namespace drover {
namespace {

// grpc::Slice needs gRPC's core set up; in the agent a channel or server does that.
grpc::internal::GrpcLibraryInitializer grpc_library;

// `bytes` cut into slices at every `step` bytes (a message as gRPC may hand it over).
std::vector<grpc::Slice> Cut(const std::string& bytes, size_t step) {
  std::vector<grpc::Slice> out;
  for (size_t i = 0; i < bytes.size(); i += step) {
    out.emplace_back(bytes.substr(i, step));
  }
  return out;
}

std::string DataOf(ChunkView* chunk) {
  std::string data(chunk->data_size, '\0');
  EXPECT_TRUE(chunk->data.Take(reinterpret_cast<uint8_t*>(&data[0]), data.size()));
  return data;
}

TEST(ObjectTransferCodecTest, ParsesWhatProtobufWritesAcrossAnySliceBoundaries) {
  proto::ObjectChunk p;
  p.set_offset(5 << 20);
  p.set_total_size(9 << 20);
  p.set_metadata(std::string("DRTN\0header", 11));
  p.set_data(std::string(3000, 'x') + "end");
  const std::string bytes = p.SerializeAsString();
  for (size_t step : {size_t{1}, size_t{7}, size_t{1000}, bytes.size()}) {
    const std::vector<grpc::Slice> slices = Cut(bytes, step);
    ChunkView chunk;
    ASSERT_TRUE(ParseChunk(&slices, &chunk)) << step;
    EXPECT_EQ(chunk.offset, p.offset());
    EXPECT_EQ(chunk.total_size, p.total_size());
    EXPECT_EQ(chunk.metadata, p.metadata());
    EXPECT_EQ(chunk.data_size, p.data().size());
    EXPECT_EQ(DataOf(&chunk), p.data()) << step;
    EXPECT_EQ(chunk.raw_port, 0);
  }
}

TEST(ObjectTransferCodecTest, HeaderPlusDataIsTheChunkProtobufReads) {
  const std::string metadata = "meta";
  const std::string data(100000, 'd');
  std::string bytes;
  AppendChunkHeader(1 << 20, 3 << 20, metadata, data.size(), &bytes);
  bytes += data;
  proto::ObjectChunk p;
  ASSERT_TRUE(p.ParseFromString(bytes));
  EXPECT_EQ(p.offset(), 1 << 20);
  EXPECT_EQ(p.total_size(), 3 << 20);
  EXPECT_EQ(p.metadata(), metadata);
  EXPECT_EQ(p.data(), data);
  // And it round-trips through ParseChunk, with the data in a slice of its own (as
  // served: the data slice points into the object).
  bytes.resize(bytes.size() - data.size());
  std::vector<grpc::Slice> slices = {grpc::Slice(bytes), grpc::Slice(data)};
  ChunkView chunk;
  ASSERT_TRUE(ParseChunk(&slices, &chunk));
  EXPECT_EQ(DataOf(&chunk), data);
}

TEST(ObjectTransferCodecTest, EmptyChunkAndRawOfferCarryTheirFields) {
  std::string empty;
  AppendChunkHeader(0, 0, "", 0, &empty);
  proto::ObjectChunk p;
  ASSERT_TRUE(p.ParseFromString(empty));
  EXPECT_EQ(p.total_size(), 0);
  EXPECT_TRUE(p.data().empty());

  const std::string token(32, '\x9c');
  std::string offer;
  AppendRawOffer(64, 1 << 30, "m", 40001, token, &offer);
  ASSERT_TRUE(p.ParseFromString(offer));
  EXPECT_EQ(p.offset(), 64);
  EXPECT_EQ(p.total_size(), 1 << 30);
  EXPECT_EQ(p.metadata(), "m");
  EXPECT_EQ(p.raw_port(), 40001);
  EXPECT_EQ(p.raw_token(), token);
  EXPECT_TRUE(p.data().empty());
  const std::vector<grpc::Slice> slices = Cut(offer, 3);
  ChunkView chunk;
  ASSERT_TRUE(ParseChunk(&slices, &chunk));
  EXPECT_EQ(chunk.raw_port, 40001);
  EXPECT_EQ(chunk.raw_token, token);
  EXPECT_EQ(chunk.data_size, 0u);
}

TEST(ObjectTransferCodecTest, UnknownFieldsAreSkipped) {
  // Fields a newer peer might add: a varint, a fixed64, a fixed32 and bytes.
  std::string bytes;
  bytes += std::string("\x38\x96\x01", 3);                 // field 7, varint 150
  bytes += '\x41' + std::string(8, '\x01');                 // field 8, fixed64
  bytes += '\x4d' + std::string(4, '\x02');                 // field 9, fixed32
  bytes += std::string("\x52\x03xyz", 5);                   // field 10, 3 bytes
  AppendChunkHeader(0, 2, "", 2, &bytes);
  bytes += "ok";
  const std::vector<grpc::Slice> slices = Cut(bytes, 2);
  ChunkView chunk;
  ASSERT_TRUE(ParseChunk(&slices, &chunk));
  EXPECT_EQ(chunk.total_size, 2);
  EXPECT_EQ(DataOf(&chunk), "ok");
}

// Found by //fuzz:object_chunk: a 7-byte chunk whose metadata length said ~860 MB
// made the puller allocate that much before it saw the bytes were not there.
TEST(ObjectTransferCodecTest, StringLengthBeyondTheBytesIsRefusedBeforeAllocating) {
  const std::string bad("\x22\x95\x95\x95\x95\x03\x08", 7);
  const std::vector<grpc::Slice> slices = Cut(bad, 3);
  ChunkView chunk;
  EXPECT_FALSE(ParseChunk(&slices, &chunk));
  EXPECT_EQ(chunk.metadata.capacity() < 1024, true);
  // The same length with the bytes there is read.
  std::string ok("\x22\x05hello", 7);
  const std::vector<grpc::Slice> whole = Cut(ok, 2);
  ASSERT_TRUE(ParseChunk(&whole, &chunk));
  EXPECT_EQ(chunk.metadata, "hello");
}

TEST(ObjectTransferCodecTest, TruncatedOrMalformedBytesAreRejected) {
  std::string bytes;
  AppendChunkHeader(0, 10, "metadata", 10, &bytes);
  bytes += "0123456789";
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    // Every cut inside a field fails; a cut between whole fields parses (a shorter
    // valid message), so only cuts inside the data or metadata are checked here.
    const std::vector<grpc::Slice> slices = Cut(bytes.substr(0, bytes.size() - cut), 4);
    ChunkView chunk;
    if (cut <= 10) EXPECT_FALSE(ParseChunk(&slices, &chunk)) << cut;
  }
  for (const std::string& bad :
       {std::string("\x0b", 1),              // wire type 3 (group): not in proto3
        std::string("\x08\xff\xff", 3),      // varint running off the end
        std::string("\x22\xff\xff\xff\xff\x0f", 6)}) {  // metadata of 4 GiB
    const std::vector<grpc::Slice> slices = Cut(bad, 1);
    ChunkView chunk;
    EXPECT_FALSE(ParseChunk(&slices, &chunk)) << bad.size();
  }
}

}  // namespace
}  // namespace drover
