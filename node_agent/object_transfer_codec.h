// The ObjectChunk wire format (proto/node_agent.proto), encoded and decoded by hand so
// that object bytes are never copied into or out of a protobuf string.
//
// Serving: a chunk is a small header (AppendChunkHeader: offset, total_size, the
// metadata in the first chunk, and the data field's tag and length) followed, as a
// second gRPC slice, by the data itself, pointing into the pinned object. A raw-TCP
// offer (AppendRawOffer) is a chunk without data that names a port and a token.
// Pulling: ParseChunk reads the fields from the received slices and leaves a cursor at
// the data, which the puller copies once, straight into the store.
//
// The encoders write valid protobuf (offset, total_size and the data's length always,
// even when zero, which protobuf itself would leave out), and ParseChunk accepts any
// valid encoding, skipping unknown fields. Thread safety: stateless functions; a
// SliceCursor is used by one thread.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_CODEC_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/support/slice.h"

namespace drover {

// A read cursor over the slices of a message.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>* slices) : s_(slices) {}

  bool Byte(uint8_t* b);
  bool Varint(uint64_t* v);
  // Copies `n` bytes to `dst` (nullptr: skips them). False if fewer are left.
  bool Take(uint8_t* dst, size_t n);
  // Bytes left from the cursor to the end of the last slice.
  size_t Left() const;
  bool AtEnd() { return !Settle(); }

 private:
  // Moves past exhausted slices; false at the end.
  bool Settle();
  const std::vector<grpc::Slice>* s_;
  size_t i_ = 0;
  size_t pos_ = 0;
};

// The fields of one ObjectChunk; `data` is where its bytes start in the message.
struct ChunkView {
  int64_t offset = 0;
  int64_t total_size = 0;
  std::string metadata;
  uint64_t data_size = 0;
  SliceCursor data{nullptr};
  int64_t raw_port = 0;
  std::string raw_token;
};

// Decodes an ObjectChunk from `slices` (which must outlive out->data). False if the
// bytes are not a valid encoding.
bool ParseChunk(const std::vector<grpc::Slice>* slices, ChunkView* out);

// Appends the fields of a chunk up to its data: offset, total_size, `metadata` if not
// empty, and the tag and length of `data_size` bytes of data, which follow it.
void AppendChunkHeader(int64_t offset, int64_t total_size, absl::string_view metadata,
                       uint64_t data_size, std::string* out);

// Appends a raw-TCP offer: offset, total_size, `metadata` if not empty, raw_port and
// raw_token; no data.
void AppendRawOffer(int64_t offset, int64_t total_size, absl::string_view metadata, int port,
                    absl::string_view token, std::string* out);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_CODEC_H_
