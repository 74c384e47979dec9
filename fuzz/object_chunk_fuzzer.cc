// Fuzzes ParseChunk (node_agent/object_transfer_codec.h): the ObjectChunk frames of an
// object pulled from another node are decoded by hand from gRPC slices. The input is
// cut into slices at points it chooses; whatever the bytes, the parser must not read
// past them or allocate more than they could hold, and a chunk it accepts must mean
// what protobuf's own parser reads from the same bytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "grpcpp/impl/grpc_library.h"
#include "grpcpp/support/slice.h"
#include "node_agent/object_transfer_codec.h"
#include "proto/node_agent.pb.h"

// grpc::Slice needs gRPC's core set up; in the agent a channel or server does that.
static grpc::internal::GrpcLibraryInitializer grpc_library;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<grpc::Slice> slices;
  std::string whole;
  while (in.remaining_bytes() > 0) {
    std::string piece = in.ConsumeRandomLengthString(in.remaining_bytes());
    whole += piece;
    slices.emplace_back(piece);
  }
  drover::ChunkView chunk;
  if (!drover::ParseChunk(&slices, &chunk)) return 0;
  std::string bytes(chunk.data_size, '\0');
  if (chunk.data_size > 0 &&
      !chunk.data.Take(reinterpret_cast<uint8_t*>(&bytes[0]), chunk.data_size)) {
    std::abort();  // ParseChunk checked the data is there
  }
  drover::proto::ObjectChunk reference;
  if (!reference.ParseFromString(whole)) return 0;  // e.g. a tag beyond 32 bits
  if (reference.offset() != chunk.offset || reference.total_size() != chunk.total_size ||
      reference.metadata() != chunk.metadata || reference.raw_port() != chunk.raw_port ||
      reference.raw_token() != chunk.raw_token || reference.data() != bytes) {
    std::abort();
  }
  return 0;
}
