#include "node_agent/object_transfer_codec.h"

#include <algorithm>
#include <cstring>

namespace drover {
namespace {

// ObjectChunk field numbers (proto/node_agent.proto) and protobuf wire types.
constexpr int kOffsetField = 1;
constexpr int kDataField = 2;
constexpr int kTotalSizeField = 3;
constexpr int kMetadataField = 4;
constexpr int kRawPortField = 5;
constexpr int kRawTokenField = 6;
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

// Longest metadata or token accepted (the metadata limit of a chunk is far lower).
constexpr uint64_t kMaxStringField = 1u << 30;

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutTag(std::string* out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void PutBytes(std::string* out, int field, absl::string_view bytes) {
  PutTag(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

// The fields every chunk starts with.
void PutPosition(int64_t offset, int64_t total_size, absl::string_view metadata,
                 std::string* out) {
  PutTag(out, kOffsetField, kVarint);
  PutVarint(out, static_cast<uint64_t>(offset));
  PutTag(out, kTotalSizeField, kVarint);
  PutVarint(out, static_cast<uint64_t>(total_size));
  if (!metadata.empty()) PutBytes(out, kMetadataField, metadata);
}

}  // namespace

bool SliceCursor::Byte(uint8_t* b) {
  if (!Settle()) return false;
  *b = (*s_)[i_].begin()[pos_++];
  return true;
}

bool SliceCursor::Varint(uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b;
    if (!Byte(&b)) return false;
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

bool SliceCursor::Take(uint8_t* dst, size_t n) {
  while (n > 0) {
    if (!Settle()) return false;
    size_t k = std::min(n, (*s_)[i_].size() - pos_);
    if (dst != nullptr) {
      std::memcpy(dst, (*s_)[i_].begin() + pos_, k);
      dst += k;
    }
    pos_ += k;
    n -= k;
  }
  return true;
}

size_t SliceCursor::Left() const {
  size_t n = 0;
  for (size_t i = i_; i < s_->size(); ++i) n += (*s_)[i].size() - (i == i_ ? pos_ : 0);
  return n;
}

bool SliceCursor::Settle() {
  while (i_ < s_->size() && pos_ == (*s_)[i_].size()) {
    ++i_;
    pos_ = 0;
  }
  return i_ < s_->size();
}

bool ParseChunk(const std::vector<grpc::Slice>* slices, ChunkView* out) {
  SliceCursor c(slices);
  *out = ChunkView();
  out->data = SliceCursor(slices);
  while (!c.AtEnd()) {
    uint64_t tag;
    if (!c.Varint(&tag)) return false;
    uint64_t field = tag >> 3, v = 0;
    switch (tag & 7) {
      case kVarint:
        if (!c.Varint(&v)) return false;
        if (field == kOffsetField) out->offset = static_cast<int64_t>(v);
        if (field == kTotalSizeField) out->total_size = static_cast<int64_t>(v);
        if (field == kRawPortField) out->raw_port = static_cast<int64_t>(static_cast<int32_t>(v));
        break;
      case kFixed64:
        if (!c.Take(nullptr, 8)) return false;
        break;
      case kFixed32:
        if (!c.Take(nullptr, 4)) return false;
        break;
      case kLengthDelimited:
        if (!c.Varint(&v)) return false;
        if (field == kDataField) {
          out->data = c;
          out->data_size = v;
          if (!c.Take(nullptr, v)) return false;
        } else if (field == kMetadataField || field == kRawTokenField) {
          std::string& dst = field == kMetadataField ? out->metadata : out->raw_token;
          // A length beyond the bytes that came is refused before anything is
          // allocated for it (a 7-byte chunk may claim 1 GiB of metadata).
          if (v > kMaxStringField || v > c.Left()) return false;
          dst.resize(v);
          if (v > 0 && !c.Take(reinterpret_cast<uint8_t*>(&dst[0]), v)) return false;
        } else if (!c.Take(nullptr, v)) {
          return false;
        }
        break;
      default:
        return false;
    }
  }
  return true;
}

void AppendChunkHeader(int64_t offset, int64_t total_size, absl::string_view metadata,
                       uint64_t data_size, std::string* out) {
  PutPosition(offset, total_size, metadata, out);
  PutTag(out, kDataField, kLengthDelimited);
  PutVarint(out, data_size);
}

void AppendRawOffer(int64_t offset, int64_t total_size, absl::string_view metadata, int port,
                    absl::string_view token, std::string* out) {
  PutPosition(offset, total_size, metadata, out);
  PutTag(out, kRawPortField, kVarint);
  PutVarint(out, static_cast<uint64_t>(port));
  PutBytes(out, kRawTokenField, token);
}

}  // namespace drover
